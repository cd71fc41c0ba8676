"""The model of a trial: a freshly initialised network of its family (`model.family`: the
Transformer, or the CNN), sized by its TrialConfig."""

from __future__ import annotations

import jax
from jaxtyping import PRNGKeyArray

from rope_lab.config import TrialConfig
from rope_lab.model.lazy import lazy_model_config, linearize
from rope_lab.model.transformer import Transformer


def make_model(cfg: TrialConfig, *, key: PRNGKeyArray | None = None) -> Transformer:
    """The trial's model, initialised from `key` (default: `fold_in(PRNGKey(train.seed), 0)`,
    the initialisation stream; the data stream is 1), built by its family's config
    (`FamilyConfig.build`). Every family's network has the Transformer's call,
    `(tokens (*B, L), positions) -> logits (*B, L, V)`, and its `config`, `train_length`,
    `temperature`, `embedding`, `head` and `vocab_size` (the annotation names the Transformer).

    Vocabulary from `task.vocab_size`; a learned position table gets `cfg.max_length` rows.
    `model.init.hf`: the local Hugging Face checkpoint's weights (`rope_lab.hf.load_into`).
    `train.regime: lazy`: the network's linearised twin around this initialisation
    (`rope_lab.model.lazy.linearize`; reference attention under `model.attention: auto`).
    """
    if key is None:
        key = jax.random.fold_in(jax.random.PRNGKey(cfg.train.seed), 0)
    lazy = cfg.train.regime == "lazy"
    if cfg.model.init.hf is not None:  # the checkpoint's weights, not an initialisation
        from rope_lab.hf.weights import load_into

        network = load_into(cfg.model, cfg.model.init.hf)
        return linearize(network) if lazy else network
    network = cfg.model.arch.build(
        lazy_model_config(cfg.model) if lazy else cfg.model,
        cfg.task.vocab_size,
        train_length=cfg.train.length,
        max_length=cfg.max_length,
        key=key,
    )
    return linearize(network) if lazy else network


__all__ = ["make_model"]
