"""Hugging Face checkpoints of the Llama family in and out: `from_hf(path)` loads a local
checkpoint folder as a rope_lab `Transformer`; `save_hf` writes one (`rope-lab export`).
`rope_lab.hf.config` maps config.json; `rope_lab.hf.weights` the safetensors;
`rope_lab.hf.trial` completes a trial whose `model.init.hf` names a checkpoint."""

from rope_lab.hf.config import FAMILIES, CheckpointError, HFArchitecture, read_config
from rope_lab.hf.weights import from_hf, save_hf

__all__ = ["FAMILIES", "CheckpointError", "HFArchitecture", "from_hf", "read_config", "save_hf"]
