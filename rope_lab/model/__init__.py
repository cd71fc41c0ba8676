"""The model: the Transformer (`transformer`), its attention implementations (`attention`; the
blocked kernel in `flash`, the masked logits of a block in `attention_logits`), memory
bounds (`memory`), position encodings (`positions/`), RoPE frequencies (`rope`) and their scaling
methods (`scalings/`), KV-cache decoding (`decode`), and `factory.make_model` for a trial."""
