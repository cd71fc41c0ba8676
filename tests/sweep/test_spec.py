"""Sweep specs: expansion, exclusion, dedupe, scaling stages, validation messages, cost."""

import re
from pathlib import Path

import pytest
import yaml

from rope_lab.config import ConfigError, TrialConfig, from_dict, to_dict
from rope_lab.sweep.plan import estimate_cost
from rope_lab.sweep.plan_table import plan_table
from rope_lab.sweep.spec import (
    Resources,
    axis_assignments,
    load_spec,
    parse_spec,
)

BASE = {
    "model": {"width": 32, "depth": 1, "head_dim": 8},
    "task": {"name": "passkey", "vocab_size": 24, "params": {"needle_length": 2}},
    "train": {"length": 16, "batch_size": 4, "steps": 10, "warmup_steps": 2, "log_every": 5},
    "eval": {"length_multipliers": [0.5, 1, 2], "batches": 1, "batch_size": 4},
}
SCALING = {"methods": ["linear", "ntk", "dynamic", "yarn"], "factors": [2, 4]}
SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"


def spec_dict(**overrides) -> dict:
    """A small valid spec mapping, with top-level keys replaced by `overrides`."""
    data = {"name": "t", "base": BASE, "grid": {"model.position.kind": ["rope", "alibi"]}}
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def write(tmp_path: Path, data: dict, name: str = "x.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_grid_is_a_product_in_deterministic_order():
    grid = {"model.position.kind": ["rope", "alibi", "learned"], "model.width": [32, 64]}
    spec = parse_spec(spec_dict(grid=grid))
    assert len(spec.trials) == 6
    pairs = [(t.model.position.kind, t.model.width) for t in spec.trials]
    assert pairs == [(k, w) for k in ("rope", "alibi", "learned") for w in (32, 64)]
    assert all(t.name == "t" for t in spec.trials)
    assert spec.axes == {
        "model.position.kind": ("rope", "alibi", "learned"),
        "model.width": (32, 64),
    }
    assert spec.resources == Resources() and spec.max_retries == 1 and spec.source is None


def test_zip_groups_vary_together():
    zipped = [{"model.width": [32, 64], "train.lr": [3e-3, 1e-3]}]
    spec = parse_spec(spec_dict(zip=zipped))
    assert len(spec.trials) == 4
    assert {(t.model.width, t.train.lr) for t in spec.trials} == {(32, 3e-3), (64, 1e-3)}


def test_exclude_drops_matching_trials():
    grid = {"model.position.kind": ["rope", "learned"], "model.width": [32, 64]}
    rules = [{"model.position.kind": "learned", "model.width": 64}]
    spec = parse_spec(spec_dict(grid=grid, exclude=rules))
    pairs = {(t.model.position.kind, t.model.width) for t in spec.trials}
    assert pairs == {("rope", 32), ("rope", 64), ("learned", 32)}


def test_duplicate_values_give_one_trial():
    spec = parse_spec(spec_dict(grid={"model.width": [32, 32.0, 64], "train.seed": [0, 0]}))
    assert len(spec.trials) == 2
    assert spec.axes == {"model.width": (32, 64)}


def test_ids_are_deterministic_and_distinct():
    grid = {"model.position.kind": ["rope", "alibi"], "train.seed": [0, 1, 2]}
    a = [t.trial_id for t in parse_spec(spec_dict(grid=grid)).trials]
    b = [t.trial_id for t in parse_spec(spec_dict(grid=grid)).trials]
    assert a == b
    assert len(set(a)) == 6


def test_scaling_sets_rope_stages_and_clears_the_rest():
    scaling = {**SCALING, "finetune_steps": 5}
    grid = {"model.position.kind": ["rope", "alibi", "learned", "none"]}
    spec = parse_spec(spec_dict(grid=grid, scaling=scaling))
    by_kind = {t.model.position.kind: t for t in spec.trials}
    rope = by_kind.pop("rope").eval
    assert rope.methods == ("linear", "ntk", "dynamic", "yarn")
    assert rope.factors == (2.0, 4.0) and rope.finetune_steps == 5
    for trial in by_kind.values():
        assert (trial.eval.methods, trial.eval.factors, trial.eval.finetune_steps) == ((), (), 0)
    # non-RoPE trials do not depend on the scaling block at all
    other = parse_spec(spec_dict(grid=grid, scaling={"methods": ["yarn"], "factors": [8]}))
    ids = {t.model.position.kind: t.trial_id for t in other.trials}
    assert all(ids[kind] == t.trial_id for kind, t in by_kind.items())


def test_scaling_fields_left_out_keep_the_base_values():
    spec = parse_spec(spec_dict(grid={"model.width": [32]}, scaling={"factors": [8]}))
    (trial,) = spec.trials
    assert trial.eval.factors == (8.0,)
    assert trial.eval.methods == from_dict(TrialConfig, BASE).eval.methods


def test_axis_values_are_coerced_like_the_field_and_mappings_are_allowed():
    zipped = [{"task.name": ["passkey", "copy"], "task.params": [{"needle_length": 3}, {}]}]
    grid = {"ntk.probe_multipliers": [[1, 2], [1, 4]], "model.position.rope.theta": [100]}
    spec = parse_spec(spec_dict(grid=grid, zip=zipped))
    assert len(spec.trials) == 4
    assert {t.ntk.probe_multipliers for t in spec.trials} == {(1.0, 2.0), (1.0, 4.0)}
    assert {t.task.params for t in spec.trials} == {(("needle_length", 3),), ()}
    assert all(t.model.position.options.theta == 100.0 for t in spec.trials)
    assert spec.axes["task.params"] == ({"needle_length": 3}, {})


def test_points_training_the_same_model_must_not_differ_in_evaluation():
    """A trial id names the trained model: two grid points that share it but read the model
    differently cannot both be trials, and the error names the differing eval key."""
    grid = {"eval.length_multipliers": [[1, 2], [1, 4]], "model.width": [32, 48]}
    with pytest.raises(ConfigError, match=r"eval.length_multipliers \(\[1, 2\] vs \[1, 4\]\)"):
        parse_spec(spec_dict(grid=grid))
    same = {"eval.pad_to_longest": [False, True], "model.width": [32, 48]}
    assert len(parse_spec(spec_dict(grid=same)).trials) == 2  # execution only: one trial each


def test_a_key_inside_params_keeps_the_other_params():
    base = {**BASE, "task": {**BASE["task"], "params": {"needle_length": 2, "num_digits": 5}}}
    spec = parse_spec(spec_dict(base=base, grid={"task.params.needle_length": [2, 3]}))
    assert [dict(t.task.params) for t in spec.trials] == [
        {"needle_length": 2, "num_digits": 5},
        {"needle_length": 3, "num_digits": 5},
    ]


def test_a_variant_field_axis_applies_to_its_kind_only():
    """Varying kind x a RoPE field gives each non-RoPE trial once; a field of another
    registered kind is coerced with that kind and reaches only its trials."""
    grid = {
        "model.position.kind": ["rope", "alibi", "kerple_log"],
        "model.position.rope.theta": [100, 10000],
        "model.position.kerple_log.r1_init": [0.5, 2.0],
    }
    spec = parse_spec(spec_dict(grid=grid))
    kinds = [t.model.position.kind for t in spec.trials]
    assert kinds.count("rope") == 2 and kinds.count("alibi") == 1 and kinds.count("kerple_log") == 2
    assert {
        t.model.position.options.theta for t in spec.trials if t.model.position.kind == "rope"
    } == {
        100.0,
        10000.0,
    }
    kerple = [
        t.model.position.options for t in spec.trials if t.model.position.kind == "kerple_log"
    ]
    assert {k.r1_init for k in kerple} == {0.5, 2.0}
    assert spec.axes["model.position.kerple_log.r1_init"] == (None, 0.5, 2.0)  # None: not KERPLE
    with pytest.raises(
        ConfigError, match=r"grid.model.position.kerple_log.r9: unknown key .*kerple_log.r1_init"
    ):
        parse_spec(spec_dict(grid={"model.position.kerple_log.r9": [1.0]}))


def test_axis_assignments():
    grid = {"model.position.kind": ["rope", "alibi"], "model.width": [32, 64], "train.seed": [7]}
    spec = parse_spec(spec_dict(grid=grid))
    trial = spec.trials[3]
    assert axis_assignments(trial, spec) == {"model.position.kind": "alibi", "model.width": 64}


def test_load_spec_records_the_source(tmp_path):
    path = write(tmp_path, spec_dict(resources={"num_cpus": 2, "num_gpus": 0.5}, max_retries=0))
    spec = load_spec(path)
    assert spec.source == path and spec.name == "t"
    assert spec.resources == Resources(num_cpus=2.0, num_gpus=0.5) and spec.max_retries == 0
    assert spec.resources.placement_strategy == "PACK"
    spread = load_spec(write(tmp_path, spec_dict(resources={"placement_strategy": "SPREAD"})))
    assert spread.resources == Resources(placement_strategy="SPREAD")


WIDTHS = {"model.position.kind": ["rope", "learned"], "model.width": [32, 64]}


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"gird": {}}, r"gird: unknown key 'gird' \(did you mean 'grid'\?\)"),
        ({"name": "Smoke Test"}, r"name: 'Smoke Test' is invalid"),
        ({"name": None}, r"name: required"),
        ({"base": {**BASE, "modle": {}}}, r"base.modle: unknown key .*did you mean 'model'"),
        ({"base": {**BASE, "name": "x"}}, r"base.name: not allowed"),
        (
            {"grid": {"model.widht": [32]}},
            r"grid.model.widht: unknown key 'model.widht' \(did you mean 'model.width'\?\)",
        ),
        ({"grid": {"name": ["a", "b"]}}, r"grid.name: trials are named after the sweep"),
        ({"grid": {"model.width": []}}, r"grid.model.width: empty list of values"),
        ({"grid": {"model.width": 32}}, r"grid.model.width: expected a list of values, got 32"),
        (
            {"grid": {"model.width": [32, "big"]}},
            r"grid.model.width: expected an integer, got 'big'",
        ),
        ({"zip": [{"model.width": [32, 64], "train.lr": [1e-3]}]}, r"zip\[0\]: lists of unequal"),
        ({"zip": [{"model.depht": [1]}]}, r"zip\[0\].model.depht: unknown key .*'model.depth'"),
        ({"zip": {"model.width": [32]}}, r"zip: expected a list of groups"),
        ({"zip": [{"model.width": [32]}]}, r"zip\[0\].model.width: overlaps grid.model.width"),
        ({"exclude": [{"model.depth": 1}]}, r"exclude\[0\].model.depth: unknown key 'model.depth'"),
        (
            {"exclude": [{"model.width": 32}, {"model.width": 128}]},
            r"exclude\[1\].model.width: 128 never occurs in the axis \(values: 32, 64\)",
        ),
        ({"exclude": [{}]}, r"exclude\[0\]: expected a non-empty mapping"),
        (
            {"exclude": [{"model.position.kind": "rope"}, {"model.position.kind": "learned"}]},
            r"no trials left after exclude",
        ),
        (
            {"scaling": {"methods": ["linear", "ntk", "rope"]}},
            r"scaling.methods\[2\]: unknown method 'rope'; "
            r"allowed: default, linear, ntk, dynamic, yarn",
        ),
        (
            {"scaling": {"methods": ["linear"], "finetune_methods": ["yarn"]}},
            r"eval.finetune_methods\[0\]: 'yarn' is not among eval.methods \['linear'\]",
        ),
        ({"scaling": {"factors": [2, 0.5]}}, r"scaling.factors\[1\]: factor must be >= 1, got 0.5"),
        ({"scaling": {"finetune_steps": -1}}, r"scaling.finetune_steps: must be >= 0, got -1"),
        ({"scaling": {"steps": 1}}, r"scaling.steps: unknown key 'steps'"),
        ({"resources": {"num_gpus": -1}}, r"resources.num_gpus: must be >= 0, got -1"),
        ({"resources": {"gpus": 1}}, r"resources.gpus: unknown key 'gpus' .*'num_gpus'"),
        (
            {"resources": {"num_gpus": 1.5}},
            r"resources.num_gpus: a share of one device \(< 1\) or whole devices, got 1.5",
        ),
        (
            {"resources": {"placement_strategy": "spread"}},
            r"resources.placement_strategy: 'spread' is not one of PACK, SPREAD, STRICT_PACK, "
            r"STRICT_SPREAD$",
        ),
        ({"max_retries": -1}, r"max_retries: must be >= 0, got -1"),
        ({"max_retries": 1.5}, r"max_retries: expected an integer, got 1.5"),
    ],
)
def test_errors_name_the_file_and_key_path(tmp_path, overrides, match):
    data = spec_dict(grid=WIDTHS)
    data.update(overrides)
    path = write(tmp_path, {k: v for k, v in data.items() if v is not None})
    with pytest.raises(ConfigError, match=match) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}: ")


def test_grid_cannot_vary_what_scaling_sets(tmp_path):
    path = write(tmp_path, spec_dict(grid={"eval.factors": [[2], [4]]}, scaling=SCALING))
    with pytest.raises(ConfigError, match=r"x.yaml: grid.eval.factors: set by the `scaling`"):
        load_spec(path)


def test_exclude_rule_that_matches_no_zip_combination(tmp_path):
    zipped = [{"model.width": [32, 64], "train.lr": [3e-3, 1e-3]}]
    rules = [{"model.width": 64, "train.lr": 3e-3}]
    path = write(tmp_path, spec_dict(zip=zipped, exclude=rules))
    with pytest.raises(ConfigError, match=r"x.yaml: exclude\[0\]: matches no trial"):
        load_spec(path)


def test_invalid_trial_names_its_axis_assignment(tmp_path):
    grid = {"model.width": [96, 100], "model.head_dim": [48]}
    path = write(tmp_path, spec_dict(grid=grid))
    expected = (
        f"{path}: trial {{model.width: 100, model.head_dim: 48}}: "
        "model.head_dim: 48 does not divide model.width=100"
    )
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_spec(path)


def test_independent_errors_are_reported_together(tmp_path):
    data = spec_dict(grid={"model.widht": [32]}, max_retries=-1, resources={"num_cpus": -1})
    with pytest.raises(ConfigError) as info:
        load_spec(write(tmp_path, data))
    lines = str(info.value).splitlines()
    assert len(lines) == 3
    assert all(line.startswith(str(tmp_path / "x.yaml")) for line in lines)


def test_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match=r"missing.yaml: cannot read YAML"):
        load_spec(tmp_path / "missing.yaml")
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match=r"list.yaml: expected a mapping at the top level"):
        load_spec(path)


def _trial(**changes) -> TrialConfig:
    data = to_dict(from_dict(TrialConfig, BASE))
    for key, value in changes.items():
        head, _, rest = key.partition(".")
        data[head][rest] = value
    return from_dict(TrialConfig, data)


def test_cost_grows_with_width_and_length():
    small, wide, long = _trial(), _trial(**{"model.width": 64}), _trial(**{"train.length": 64})
    for other in (wide, long):
        assert estimate_cost(other)["train_flops"] > estimate_cost(small)["train_flops"]
        assert estimate_cost(other)["eval_flops"] > estimate_cost(small)["eval_flops"]
    assert estimate_cost(wide)["n_params"] > estimate_cost(small)["n_params"]
    cost = estimate_cost(small)
    assert cost["train_tokens"] == 10 * 4 * 16
    parts = ("train_flops", "finetune_flops", "eval_flops", "ntk_flops")
    assert cost["total_flops"] == sum(cost[p] for p in parts)


def test_cost_counts_scalings_and_finetuning_for_rope_only():
    rope = estimate_cost(_trial(**{"eval.finetune_steps": 3}))
    alibi = estimate_cost(_trial(**{"eval.finetune_steps": 3, "model.position": {"kind": "alibi"}}))
    assert alibi["finetune_tokens"] == 0 < rope["finetune_tokens"]
    assert rope["eval_tokens"] > alibi["eval_tokens"]


@pytest.mark.parametrize(
    "changes",
    [
        {"model.position": {"kind": "learned"}},
        {"model.position": {"kind": "kerple_log"}},
        {"model.norm": "rmsnorm", "model.mlp": "swiglu", "model.mlp_ratio": 2.5},
    ],
)
def test_n_params_matches_the_built_model(changes):
    from rope_lab.model.transformer import count_params
    from rope_lab.trial.train import make_model

    trial = _trial(**changes)
    assert estimate_cost(trial)["n_params"] == count_params(make_model(trial))


def test_plan_table_lists_every_trial_and_a_total():
    spec = parse_spec(spec_dict(grid=WIDTHS, scaling=SCALING))
    table = plan_table(spec, flops_per_s=1e9)
    lines = table.splitlines()
    assert "1 GFLOP/s" in lines[0]
    assert lines[1].split()[:3] == ["trial", "kind", "width"]
    for trial in spec.trials:
        assert any(line.startswith(trial.trial_id) for line in lines)
    assert lines[-3].startswith("total (4 trials)")
    assert lines[-2].startswith("devices: each task asks for")
    assert lines[-1] == (
        "warning: scaling: skipped by 2 of 4 trials, because there are no RoPE scalings under "
        "model.position.kind 'learned' (2)"
    )


@pytest.mark.parametrize(
    ("name", "n_trials"),
    [
        ("smoke", 8),
        ("pe_zoo", 34),
        ("reproduce_cpu", 39),
        ("pe_grid", 45),
        ("width_scaling", 90),
        ("extension", 6),
        ("attention_zoo", 44),
        ("stability_cpu", 120),
        ("rope_between_factors", 54),
    ],
)
def test_shipped_sweeps_load(name, n_trials):
    spec = load_spec(SWEEPS / f"{name}.yaml")
    assert spec.name == name
    assert len(spec.trials) == n_trials
    total = [line for line in plan_table(spec).splitlines() if line.startswith("total (")]
    assert total == [total[0]] and total[0].startswith(f"total ({n_trials} trials)")


def _prepare_commands(spec: Path) -> list[list[str]]:
    """The `rope-lab corpus prepare ...` commands a spec's header names, as argument lists."""
    lines = [line.lstrip("# ").split() for line in spec.read_text().splitlines()]
    return [words[1:] for words in lines if words[:3] == ["rope-lab", "corpus", "prepare"]]


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_the_gpu_reproduction_names_the_corpus_it_needs(tmp_path, monkeypatch):
    """reproduce.yaml trains its language models on a prepared BPE corpus: its header names the
    prepare command, whose folder and vocabulary are the spec's; until that folder holds a
    corpus the spec is rejected naming it; with one in place (a stand-in of the same
    vocabulary) its 39 trials plan."""
    import numpy as np

    from rope_lab.corpus.prepare import write_ids

    spec_path = SWEEPS / "reproduce.yaml"
    (command,) = _prepare_commands(spec_path)
    folder, tokenizer = _option(command, "--out"), _option(command, "--tokenizer")
    assert (folder, tokenizer) == ("corpora/reproduce-bpe32768", "bpe:32768")
    raw = yaml.safe_load(spec_path.read_text())["zip"][0]
    texts = [
        (params["path"], vocab)
        for params, vocab in zip(raw["task.params"], raw["task.vocab_size"], strict=True)
        if "path" in params
    ]
    assert len(texts) == 8 and set(texts) == {(folder, 32768)}
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=rf"{folder}: no meta.json, not a prepared corpus"):
        load_spec(spec_path)
    write_ids(tmp_path / folder, np.arange(8192), np.arange(8192), vocab_size=32768)
    spec = load_spec(spec_path)
    assert spec.name == "reproduce" and len(spec.trials) == 39


def test_the_tokens_cpu_spec_loads_once_its_header_commands_ran(tmp_path, monkeypatch):
    """tokens_cpu.yaml is rejected naming a corpus folder until the prepare commands of its
    header have run; then its 18 trials (bytes and BPE on the same documents) plan."""
    from rope_lab.cli import main

    spec_path = SWEEPS / "tokens_cpu.yaml"
    commands = _prepare_commands(spec_path)
    assert [_option(c, "--tokenizer") for c in commands] == ["bytes", "bpe:4096"]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"corpora/python-docs-bytes: no meta.json"):
        load_spec(spec_path)
    for command in commands:
        assert main(command) == 0
    spec = load_spec(spec_path)
    assert spec.name == "tokens_cpu" and len(spec.trials) == 18
    paths = {dict(t.task.params)["path"] for t in spec.trials}
    assert paths == {_option(c, "--out") for c in commands}


# -------------------------------------------------------------- settings trials do not use

ROPE_BLOCK = {"model": {**BASE["model"], "position": {"rope": {"theta": 500.0}}}}
SKIPPED_BY_ALIBI = "because model.position.kind is 'alibi'"
NO_SCALINGS = "because there are no RoPE scalings under model.position.kind"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (  # a scaling block on an all-ALiBi grid
            {"grid": {"model.position.kind": ["alibi"]}, "scaling": SCALING},
            f"scaling: used by no trial, {NO_SCALINGS} 'alibi'; remove it",
        ),
        (
            {"grid": {"model.position.kind": ["alibi", "learned"]}, "scaling": SCALING},
            f"scaling: used by no trial, {NO_SCALINGS} 'alibi', 'learned'; remove it",
        ),
        (  # eval.methods written on an encoding without scalings
            {
                "base": {**BASE, "eval": {**BASE["eval"], "methods": ["yarn"]}},
                "grid": {"model.position.kind": ["alibi"]},
            },
            f"eval.methods: used by no trial, {NO_SCALINGS} 'alibi'; remove it",
        ),
        (  # a RoPE block in the base of an ALiBi grid
            {"base": {**BASE, **ROPE_BLOCK}, "grid": {"model.position.kind": ["alibi"]}},
            f"model.position.rope: used by no trial, {SKIPPED_BY_ALIBI}; remove it",
        ),
        (  # a RoPE field swept while the base fixes ALiBi
            {
                "base": {**BASE, "model": {**BASE["model"], "position": {"kind": "alibi"}}},
                "grid": {"model.position.rope.theta": [100, 1000]},
            },
            f"model.position.rope: used by no trial, {SKIPPED_BY_ALIBI}; remove it",
        ),
        (  # the scaling block would override the base's methods
            {
                "base": {**BASE, "eval": {**BASE["eval"], "methods": ["yarn"]}},
                "grid": {"model.position.kind": ["rope"]},
                "scaling": SCALING,
            },
            "base.eval.methods: set by the `scaling` block too; remove one of the two",
        ),
    ],
)
def test_a_setting_no_trial_uses_is_an_error_naming_its_key(overrides, message):
    with pytest.raises(ConfigError) as err:
        parse_spec(spec_dict(**overrides))
    assert str(err.value) == f"sweep spec: {message}"


def test_a_setting_some_trials_skip_is_a_warning_naming_their_kinds():
    base = {**BASE, **ROPE_BLOCK, "eval": {**BASE["eval"], "methods": ["yarn"]}}
    grid = {"model.position.kind": ["rope", "alibi", "learned"], "model.width": [32, 64]}
    spec = parse_spec(spec_dict(base=base, grid=grid))
    assert spec.warnings == (
        "model.position.rope: skipped by 4 of 6 trials, because model.position.kind is "
        "'alibi' (2), 'learned' (2)",
        f"eval.methods: skipped by 4 of 6 trials, {NO_SCALINGS} 'alibi' (2), 'learned' (2)",
    )
    rope = next(t for t in spec.trials if t.model.position.kind == "rope")
    assert rope.model.position.options.theta == 500.0
    assert parse_spec(spec_dict(grid={"model.position.kind": ["rope"]})).warnings == ()


def _remap_spec(method: str, params: dict, multipliers: list) -> dict:
    base = {**BASE, "eval": {**BASE["eval"], "length_multipliers": multipliers}}
    base["eval"]["method_params"] = {method: params}
    scaling = {"methods": [method], "factors": [2]}
    return spec_dict(base=base, grid={"model.width": [32]}, scaling=scaling)


@pytest.mark.parametrize(
    ("method", "params", "span"),
    [
        ("rerope", {"window": 32}, "window 32"),
        ("self_extend", {"window": 32}, "window 32"),
        ("string", {"shift": 32, "local_window": 2}, "shift 32"),
        (
            "dual_chunk",
            {"chunk_size": 36, "local_window": 4},
            "chunk (chunk_size - local_window) 32",
        ),
    ],
)
def test_a_remap_inactive_at_every_evaluated_length_is_named_in_the_plan(method, params, span):
    """L_train 16, lengths up to 2 x 16 = 32: every pair is closer than the span 32."""
    spec = parse_spec(_remap_spec(method, params, [0.5, 1, 2]))
    warning = (
        f"eval.methods: {method} at factor 2 is inactive at every evaluated length of 1 trial "
        f"({span} >= the longest length 32): its rows repeat the model as trained"
    )
    assert spec.warnings == (warning,)
    assert plan_table(spec).splitlines()[-1] == f"warning: {warning}"
    assert parse_spec(_remap_spec(method, params, [0.5, 1, 2, 2.0625])).warnings == ()
