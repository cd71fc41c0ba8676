"""A finished trial's trained model, read back from its folder (`config.yaml`, `model.eqx`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rope_lab.config import ConfigError, TrialConfig, load_trial
from rope_lab.trial.pipeline import CONFIG_FILE, MODEL_FILE


def load_trained(trial_dir: str | Path) -> tuple[Any, TrialConfig]:
    """(model, config) of the trial folder `trial_dir` (`runs/NAME/trials/TRIAL_ID`): the
    network as its train stage saved it, `model(tokens (*B, L)) -> logits (*B, L, V)`."""
    from rope_lab.model.factory import make_model
    from rope_lab.trial.checkpoint import load_model as read_leaves

    folder = Path(trial_dir)
    if not (folder / CONFIG_FILE).is_file():
        raise ConfigError(f"{folder}: no {CONFIG_FILE}; not a trial folder")
    if not (folder / MODEL_FILE).is_file():
        raise ConfigError(f"{folder}: no {MODEL_FILE}; the trial has not finished training")
    cfg = load_trial(folder / CONFIG_FILE, saved=True)
    return read_leaves(folder / MODEL_FILE, make_model(cfg)), cfg


def load_model(trial_dir: str | Path) -> Any:
    """The trained model of the trial folder `trial_dir` (`load_trained` without the config)."""
    return load_trained(trial_dir)[0]


__all__ = ["load_model", "load_trained"]
