"""sweeps/pretrained_extension.yaml: rejected naming the checkpoint folder until it is there;
with a tiny random checkpoint and a stand-in corpus in its folders it plans one trial whose
architecture, vocabulary and L_train are the checkpoint's and whose stages are the evaluation
as loaded and every scaling x factor, zero-shot and fine-tuned (no training)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from rope_lab.config import ConfigError
from rope_lab.sweep.plan import estimate_cost
from rope_lab.sweep.plan_table import plan_table
from rope_lab.sweep.spec import load_spec
from rope_lab.trial.stage_plan import trial_stages
from tests.hf.conftest import transformers_or_skip

SPEC = Path(__file__).parents[2] / "sweeps" / "pretrained_extension.yaml"
VOCAB = 300


def _tiny_llama(folder: Path) -> None:
    """A SmolLM2-shaped (tied, grouped-query) random Llama with a 16-token context."""
    _, transformers = transformers_or_skip()
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
        tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(folder)


def test_the_spec_waits_for_its_checkpoint_then_plans_it(tmp_path, monkeypatch):
    from rope_lab.corpus.prepare import write_ids

    raw = yaml.safe_load(SPEC.read_text())
    checkpoint = raw["base"]["model"]["init"]["hf"]
    corpus = raw["base"]["task"]["params"]["path"]
    header = SPEC.read_text().split("\nname:")[0]
    assert f"--local-dir {checkpoint}" in header and f"--out {corpus}" in header
    assert f"--tokenizer {checkpoint}/tokenizer.json" in header
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=rf"{checkpoint}: no such local folder"):
        load_spec(SPEC)
    _tiny_llama(tmp_path / checkpoint)
    write_ids(tmp_path / corpus, np.arange(4096) % VOCAB, np.arange(4096) % VOCAB, VOCAB)
    spec = load_spec(SPEC)
    (trial,) = spec.trials
    assert (trial.train.length, trial.train.steps, trial.task.vocab_size) == (16, 0, VOCAB)
    assert trial.model.n_kv_heads == 2 and trial.model.tie_embeddings
    assert trial.eval_lengths == (4, 8, 16, 32, 64, 128)
    stages = trial_stages(trial)
    # train (the checkpoint saved as the trial's model), as loaded, then one stage per method x
    # factor (each zero-shot and fine-tuned)
    assert len(stages) == 2 + 5 * 3, [s.name for s in stages]
    cost = estimate_cost(trial)
    assert cost["train_flops"] == 0 and cost["finetune_flops"] > 0
    assert "pretrained_extension" in plan_table(spec)
