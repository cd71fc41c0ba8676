"""Hugging Face checkpoints of the Llama family (and SmolLM3, OLMo 2 / 3, Gemma 3, Cohere 2) in
and out: `rope_lab.hf.weights.from_hf(path)` loads a local checkpoint folder as a rope_lab
`Transformer`; `save_hf` writes one (`rope-lab export`). `rope_lab.hf.config` maps config.json
(`rope_lab.hf.layouts` its per-layer lists, `rope_lab.hf.gemma` Gemma 3's fields,
`rope_lab.hf.cohere` Cohere 2's); `rope_lab.hf.weights` the
safetensors (JAX, imported only by what loads or writes weights); `rope_lab.hf.trial`
completes a trial whose `model.init.hf` names a checkpoint, from its config.json alone, so
validating such a trial imports no JAX."""

from rope_lab.hf.config import FAMILIES, CheckpointError, HFArchitecture, read_config

__all__ = ["FAMILIES", "CheckpointError", "HFArchitecture", "read_config"]
