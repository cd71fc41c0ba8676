"""The model: the Transformer (`transformer`), its attention implementations (`attention`), memory
bounds (`memory`), position encodings (`positions/`), RoPE frequencies (`rope`) and their scaling
methods (`scalings/`), KV-cache decoding (`decode`), and `factory.make_model` for a trial."""
