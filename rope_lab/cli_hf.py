"""`rope-lab export TRIAL_DIR --hf OUT`: a trained RoPE model as a Hugging Face checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path


def _cmd_export(args: argparse.Namespace) -> int:
    from rope_lab.hf.weights import save_hf
    from rope_lab.trial.trained import load_trained

    model, cfg = load_trained(args.trial_dir)
    tokenizer = None
    if cfg.task.name == "lm_tokens":  # a prepared corpus carries its tokenizer
        path = Path(dict(cfg.task.params)["path"]) / "tokenizer.json"
        tokenizer = path if path.is_file() else None
    out = save_hf(model, args.hf, vocab_size=model.vocab_size, tokenizer=tokenizer)
    rope = cfg.model.position.options
    print(
        f"wrote {out}: {cfg.trial_id} as a Hugging Face checkpoint (rope_type {rope.scaling}, "
        f"trained context {cfg.train.length}"
        + (", tokenizer.json" if tokenizer else ", no tokenizer: byte-level ids")
        + ")"
    )
    return 0


def add_command(sub) -> None:
    """Register `export` on the `rope-lab` subparsers."""
    p = sub.add_parser(
        "export",
        help="write a trial's trained RoPE model as a Hugging Face checkpoint",
        description="Write the trained model of TRIAL_DIR (runs/NAME/trials/ID) as a Hugging "
        "Face Llama-family checkpoint (config.json with rope_parameters, model.safetensors, "
        "the corpus tokenizer.json when there is one) that transformers loads. Encodings and "
        "options Hugging Face cannot express are refused naming them.",
    )
    p.add_argument("trial_dir", type=Path, help="a finished trial's folder")
    p.add_argument("--hf", type=Path, required=True, help="the checkpoint folder to create")
    p.set_defaults(func=_cmd_export)
