"""The model: the Transformer (`transformer`), its attention implementations (`attention`; the
blocked kernel in `flash`, the masked logits of a block in `attention_logits`), memory
bounds (`memory`), position encodings (`positions/`: JAX-free configs, their modules in
`positions/modules/`), RoPE frequencies (`rope`, NumPy) and their scaling methods (`scalings/`),
the rotation (`rotation`), KV-cache decoding (`decode`), and `factory.make_model` for a trial."""
