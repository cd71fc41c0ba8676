"""`rope-lab sweep plan` counts all the work: the NTK tracking's gradient passes (pinned against a
hand count), the stages of each trial, and the columns and total of the table."""

import pytest

from rope_lab.config import TrialConfig, from_dict
from rope_lab.model.memory import train_step_bytes
from rope_lab.ntk.plan import GradientPass, gradient_passes, ntk_steps
from rope_lab.sweep.plan import (
    estimate_cost,
    forward_flops,
    n_stages,
    ntk_flops,
    train_memory,
)
from rope_lab.sweep.plan_table import _si, plan_table
from rope_lab.sweep.spec import parse_spec

BASE = {
    "model": {"width": 32, "depth": 1, "head_dim": 8},
    "task": {"name": "passkey", "vocab_size": 24, "params": {"needle_length": 2}},
    "train": {"length": 16, "batch_size": 4, "steps": 10, "warmup_steps": 2, "log_every": 5},
    "eval": {
        "length_multipliers": [1],
        "batches": 1,
        "batch_size": 4,
        "methods": ["linear", "dynamic"],
        "factors": [2],
    },
    "ntk": {"probes": 4, "probe_multipliers": [2], "position_probes": 2, "chunk_size": 8},
}


def _trial(**sections) -> TrialConfig:
    data = {k: dict(v) for k, v in BASE.items()}
    for section, changes in sections.items():
        data[section] |= changes
    return from_dict(TrialConfig, data)


def _forward(length: int) -> int:
    """F(L) by hand: N = 4 D^2 + 2 D M + D V matmul weights (D 32, M 128, V 24), one layer."""
    n = 4 * 32 * 32 + 2 * 32 * 128 + 32 * 24
    return 2 * n * length + 4 * 1 * length * length * 32


def test_forward_flops_by_hand() -> None:
    assert _forward(16) == 450_560 and _forward(32) == 966_656
    assert forward_flops(_trial(), 16) == _forward(16)
    assert forward_flops(_trial(), 32) == _forward(32)


def test_ntk_passes_and_flops_by_hand() -> None:
    cfg = _trial()
    # steps 0, 1, 2, 4, 8, 10; 4 probes at 16 (1 row) and at 32 (whole + tail: 2 rows)
    assert ntk_steps(cfg) == (0, 1, 2, 4, 8, 10)
    assert gradient_passes(cfg) == [
        GradientPass("kernels", 4, 16, 1, 6),
        GradientPass("kernels", 4, 32, 2, 6),
        GradientPass("shift invariance", 4, 16, 1, 2),  # steps 0 and 10
        GradientPass("RoPE scalings", 4, 16, 1, 2),  # linear x2, dynamic x2
        GradientPass("RoPE scalings", 4, 32, 2, 2),
        GradientPass("position kernels", 32, 16, 1),  # 2 probes x 16 one-hot rows
        GradientPass("position kernels", 32, 32, 2),  # 2 probes x 32 / 2 rows
    ]
    # per sequence: one forward + 2 per backward row, F (1 + 2 rows)
    f16 = 6 * 4 * 3 + 2 * 4 * 3 + 2 * 4 * 3 + 32 * 3  # 216
    f32 = 6 * 4 * 5 + 2 * 4 * 5 + 32 * 5  # 320
    assert ntk_flops(cfg) == 216 * _forward(16) + 320 * _forward(32) == 406_650_880
    assert (f16, f32) == (216, 320)


def test_the_nngp_is_counted_with_the_ntk() -> None:
    """3 initialisations x the probe sequences (4 short, the same 4 shifted, 4 at 32) in chunks
    of 8 (12 -> 16, the last chunk padded), each a forward at the longest probe, 32."""
    base = estimate_cost(_trial())["ntk_flops"]
    with_nngp = estimate_cost(_trial(ntk={"nngp_samples": 3}))["ntk_flops"]
    assert with_nngp - base == 3 * 16 * _forward(32)
    assert estimate_cost(_trial(ntk={"nngp_samples": 3, "enabled": False}))["ntk_flops"] == 0


def test_ntk_flops_padded_to_the_longest_probe() -> None:
    cfg = _trial(ntk={"pad_to_longest": True})
    # every call at length 32 with 2 rows (5 F(32) per sequence); position kernels: 2 rows
    sequences = 6 * (4 + 4) + 2 * 4 + 2 * (4 + 4) + 2 * 8 + 2 * 16  # 120
    assert ntk_flops(cfg) == sequences * 5 * _forward(32)


def test_ntk_flops_count_chunk_padding_trace_outputs_and_only_reached_steps() -> None:
    # 3 probes in chunks of 2 run 4 sequences; steps beyond train.steps never happen
    cfg = _trial(ntk={"probes": 3, "chunk_size": 2, "steps": [0, 10, 99]})
    assert gradient_passes(cfg)[0] == GradientPass("kernels", 4, 16, 1, 2)
    trace = _trial(ntk={"output": "trace"})
    random = _trial()
    # C = V = 24 outputs per row: F (1 + 2 rows 24) instead of F (1 + 2 rows)
    expected = sum(
        g.count * g.sequences * forward_flops(trace, g.length) * (1 + 2 * g.rows * 24)
        for g in gradient_passes(trace)
    )
    assert ntk_flops(trace) == expected > ntk_flops(random)


def test_no_ntk_cost_without_tracking_and_no_scaling_passes_without_rope() -> None:
    assert ntk_flops(_trial(ntk={"enabled": False})) == 0
    alibi = _trial(model={"position": {"kind": "alibi"}})
    assert [g.what for g in gradient_passes(alibi)].count("RoPE scalings") == 0


@pytest.mark.parametrize(
    ("changes", "stages"),
    [
        ({}, 4),  # train, as trained, linear x2, dynamic x2
        ({"eval": {"factors": [2, 4]}}, 6),
        ({"eval": {"finetune_steps": 5}}, 4),  # fine-tuning runs inside the scaling stages
        ({"eval": {"zero_shot_temperature": True}}, 5),  # + temperature x1
        ({"model": {"position": {"kind": "alibi"}}}, 2),
        ({"model": {"position": {"kind": "alibi"}}, "eval": {"zero_shot_temperature": True}}, 3),
    ],
)
def test_stages_per_trial(changes: dict, stages: int) -> None:
    assert n_stages(_trial(**changes)) == stages == estimate_cost(_trial(**changes))["stages"]


def test_a_remap_stage_costs_its_position_sets() -> None:
    """Dual Chunk Attention scores each pair in 3 position sets: a forward under it makes 3
    q k^T products per layer, 2 (3 + 1) L^2 A, against 2 (1 + 1) L^2 A; its stage evaluates
    (4 sequences at 16) and fine-tunes (5 steps x 4 sequences at 32) at that cost, and its
    memory and cache (keys once per set) count the sets."""
    assert forward_flops(_trial(), 32, 3) - forward_flops(_trial(), 32) == 4 * 32 * 32 * 32
    plain = _trial(eval={"methods": ["linear"], "finetune_steps": 5})
    remap = _trial(eval={"methods": ["linear", "dual_chunk"], "finetune_steps": 5})
    a, b = estimate_cost(plain), estimate_cost(remap)
    assert b["eval_flops"] - a["eval_flops"] == 2 * 4 * forward_flops(remap, 16, 3)
    assert b["finetune_flops"] - a["finetune_flops"] == 3 * 5 * 4 * forward_flops(remap, 32, 3)
    assert b["eval_memory_bytes"] > a["eval_memory_bytes"]
    assert b["kv_cache_bytes"] == 2 * a["kv_cache_bytes"]  # 3 keys + 1 value against 1 + 1


def test_each_needle_depth_is_one_more_evaluation_pass() -> None:
    """Three depths: every evaluation pass (as trained, linear and dynamic x2) runs at each
    length four times (whole, then the needle at each depth); training is unchanged."""
    a = estimate_cost(_trial())
    b = estimate_cost(_trial(eval={"depths": [0.0, 0.5, 1.0]}))
    assert (b["eval_flops"], b["eval_tokens"]) == (4 * a["eval_flops"], 4 * a["eval_tokens"])
    assert b["train_flops"] == a["train_flops"] and a["eval_tokens"] == 3 * 4 * 16


def test_total_includes_the_ntk_flops() -> None:
    cost = estimate_cost(_trial())
    parts = ("train_flops", "finetune_flops", "eval_flops", "ntk_flops")
    assert cost["total_flops"] == sum(cost[p] for p in parts)
    assert cost["ntk_flops"] == 406_650_880


def test_plan_table_shows_stages_and_ntk_flops() -> None:
    spec = parse_spec(
        {
            "name": "t",
            "base": BASE,
            "grid": {"model.position.kind": ["rope", "alibi"]},
        }
    )
    lines = plan_table(spec, flops_per_s=1e9).splitlines()
    assert "FLOPs = train + fine-tune + eval + NTK tracking" in lines[0]
    assert "stages = train + as trained + one per scaling" in lines[0]
    header = lines[1]

    def cell(line: str, column: str) -> str:
        """The right-aligned cell of ``line`` under ``column``."""
        end = header.index(column) + len(column)
        return line[:end].split()[-1]

    assert header.split()[:2] == ["trial", "kind"]
    assert header.index("stages") < header.index("NTK FLOPs") < header.rindex(" FLOPs")
    rope = next(line for line in lines if line.startswith("passkey-rope"))
    alibi = next(line for line in lines if line.startswith("passkey-alibi"))
    total = next(line for line in lines if line.startswith("total ("))
    assert (cell(rope, "stages"), cell(alibi, "stages"), cell(total, "stages")) == (
        "4",
        "2",
        "6",
    )
    assert cell(rope, "NTK FLOPs") == "407M"  # 406_650_880, as counted by hand above
    assert total.startswith("total (2 trials)") and lines[-3].startswith("devices: ")
    assert lines[-2:] == [
        f"warning: eval.{key}: skipped by 1 of 2 trials, because there are no RoPE scalings "
        "under model.position.kind 'alibi' (1)"
        for key in ("methods", "factors")
    ]


def test_text_protocols_count_every_window_of_the_held_out_text(tmp_path) -> None:
    """1000 bytes, the last 100 held out: at L 16 non-overlapping windows start at 0, 16, ..., 80
    (6 windows), at L 32 at 0, 32, 64 (3 windows); run in groups of batch_size 4: 8 and 4
    sequences. Sliding with stride 8 at L 32: (99 - 32) // 8 + 1 = 9 windows, 12 sequences."""
    from rope_lab.config import replace, validate
    from rope_lab.sweep.plan import eval_sequences

    path = tmp_path / "c.txt"
    path.write_bytes(bytes(range(250)) * 4)
    trial = validate(
        replace(
            _trial(),
            **{
                "task.name": "lm_text",
                "task.vocab_size": 256,
                "task.params": (("path", str(path)),),
                "model.position.kind": "alibi",
                "train.length": 16,
                "eval.length_multipliers": (1.0, 2.0),
                "eval.batch_size": 4,
                "eval.methods": (),
                "eval.text_protocol": "nonoverlapping",
                "ntk.enabled": False,
            },
        )
    )
    assert [eval_sequences(trial, n) for n in (16, 32)] == [8, 4]
    cost = estimate_cost(trial)
    assert cost["eval_tokens"] == 8 * 16 + 4 * 32
    assert cost["eval_flops"] == 8 * forward_flops(trial, 16) + 4 * forward_flops(trial, 32)
    sliding = replace(trial, **{"eval.text_protocol": "sliding", "eval.text_stride": 8})
    assert eval_sequences(sliding, 32) == 12
    random = replace(trial, **{"eval.text_protocol": "random"})
    assert eval_sequences(random, 32) == trial.eval.batches * 4


def test_text_protocols_count_the_windows_of_a_token_corpus(tmp_path) -> None:
    """lm_tokens counts its eval.bin's tokens as lm_text counts bytes: 100 held-out tokens
    give the windows of the test above (6 at L 16, 3 at L 32: 8 and 4 sequences)."""
    import numpy as np

    from rope_lab.config import replace, validate
    from rope_lab.corpus.prepare import write_ids
    from rope_lab.sweep.plan import eval_sequences

    corpus = write_ids(tmp_path / "c", np.arange(900) % 256, np.arange(100))
    trial = validate(
        replace(
            _trial(),
            **{
                "task.name": "lm_tokens",
                "task.vocab_size": 256,
                "task.params": (("path", str(corpus)),),
                "model.position.kind": "alibi",
                "train.length": 16,
                "eval.length_multipliers": (1.0, 2.0),
                "eval.batch_size": 4,
                "eval.methods": (),
                "eval.text_protocol": "nonoverlapping",
                "ntk.enabled": False,
            },
        )
    )
    assert [eval_sequences(trial, n) for n in (16, 32)] == [8, 4]


def _cells(text: str, columns: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Per trial line, its cells under `columns` (cells may hold spaces: cut by position)."""
    lines = text.splitlines()
    header = lines[1]
    bounds = {c: (header.index(f" {c}"), header.index(f" {c}") + len(c) + 1) for c in columns}
    out = {}
    for line in lines[3:]:
        if line.startswith("-"):
            break
        out[line.split()[0]] = tuple(line[: bounds[c][1]].split("  ")[-1].strip() for c in columns)
    return out


def test_plan_shows_devices_shares_and_packs() -> None:
    """Planned on paper: a sweep of quarter GPUs (4 trials a GPU, each JAX process allowed
    0.9 x 0.25 = 0.22 of its memory), two seeds packed into one program, and the same trials
    with sharded parameters (trained alone; FSDP over the one GPU a share sees splits
    nothing, flagged; `shard_params` is left out of trial ids, so the sharded trials are
    the ALiBi ones); then whole GPUs: 2 per trial, data parallel over both with FSDP, and a
    trial asking for more devices than it gets (flagged)."""
    spec = parse_spec(
        {
            "name": "t",
            "base": BASE,
            "grid": {"train.seed": [0, 1]},
            "zip": [
                {"model.position.kind": ["rope", "alibi"], "train.shard_params": [False, True]}
            ],
            "pack_seeds": True,
            "resources": {"num_cpus": 2, "num_gpus": 0.25},
        }
    )
    text = plan_table(spec)
    cells = _cells(text, ("GPU", "DP", "pack"))
    by_sharding = {}
    for trial in spec.trials:
        by_sharding.setdefault(trial.train.shard_params, set()).add(cells[trial.trial_id])
    assert by_sharding == {
        False: {("0.25 (mem 0.22)", "1", "p1")},
        True: {("0.25 (mem 0.22)", "1 FSDP !", "-")},
    }
    assert (
        "devices: each task asks for 2 CPU and 0.25 GPU; 4 trials share a GPU, each JAX "
        "process preallocating at most 0.22 of its memory (XLA_PYTHON_CLIENT_MEM_FRACTION); "
        "a pack trains its seeds in one task, on one task's resources"
    ) in text
    assert text.count("shard_params over one device splits nothing") == 2
    assert (
        "packed seeds: 2 trials train in 1 packs (one vmapped program each, on one task's " in text
    )
    assert text.count("train.shard_params (a pack trains on one device)") == 2

    wide = parse_spec(
        {
            "name": "w",
            "base": BASE | {"train": BASE["train"] | {"shard_params": True}},
            "zip": [{"model.position.kind": ["rope", "alibi"], "train.devices": [2, 4]}],
            "resources": {"num_gpus": 2},
        }
    )
    text = plan_table(wide)
    cells = _cells(text, ("GPU", "DP"))
    assert sorted(cells.values()) == [("2", "2 FSDP"), ("2", "4 FSDP !")]
    assert "train.devices 4 > the 2 GPU(s) a worker sees" in text
    assert "devices: each task asks for 1 CPU and 2 GPU; train.devices" in text
    assert "pack" not in text
    cpu = _cells(plan_table(parse_spec({"name": "c", "base": BASE})), ("GPU", "DP"))
    assert set(cpu.values()) == {("0", "all")}


def test_plan_shows_the_processes_a_trial_trains_over() -> None:
    """`train.processes` in the DP cell (all processes' devices, then the processes) and the
    placement group it reserves on Ray (N bundles of the task's resources); a trial asking for
    GPUs is listed."""

    def plan(processes: int, **resources: float | str) -> str:
        base = BASE | {"ntk": {"enabled": False}}
        base = base | {"train": BASE["train"] | {"processes": processes}}
        return plan_table(parse_spec({"name": "p", "base": base, "resources": resources}))

    text = plan(2, num_cpus=2)
    assert set(_cells(text, ("GPU", "DP")).values()) == {("0", "2 (2 proc)")}
    assert "!" not in text
    assert (
        "placement: on Ray a train stage of train.processes N reserves a placement group "
        "(PACK): 2 bundles of {CPU: 2, GPU: 0}"
    ) in text.splitlines()
    text = plan(4)
    assert set(_cells(text, ("DP",)).values()) == {("4 (4 proc)",)}
    assert "(PACK): 4 bundles of {CPU: 1, GPU: 0}" in text
    assert "(SPREAD): 2 bundles of {CPU: 1, GPU: 0}" in plan(2, placement_strategy="SPREAD")
    assert "placement" not in plan(1)
    assert "train.processes > 1 trains on CPU devices only" in plan(2, num_cpus=2, num_gpus=1)


def test_training_memory_per_device() -> None:
    """The larger of the train step at L_train and the fine-tuning step at 2 L_train, with the
    batch (and, sharded, the parameters and optimiser state) split over the training devices;
    a pack of 2 seeds holds both models; a lazy trial is not estimated."""
    trial = _trial()
    n = estimate_cost(trial)["n_params"]
    assert estimate_cost(trial)["train_memory_bytes"] == train_step_bytes(trial.model, 24, 16, 4, n)
    assert train_memory(trial, n, 2) == train_step_bytes(trial.model, 24, 16, 2, n)
    assert train_memory(trial, n, 3, sharded=True) == train_step_bytes(
        trial.model, 24, 16, 2, -(-n // 3)
    )
    tuned = _trial(eval={"finetune_steps": 5})  # linear and dynamic at factor 2
    assert train_memory(tuned, n) == train_step_bytes(trial.model, 24, 32, 4, n)
    assert train_memory(_trial(train={"regime": "lazy"}), n) is None

    packed = parse_spec(
        {"name": "p", "base": BASE, "grid": {"train.seed": [0, 1]}, "pack_seeds": True}
    )
    cells = _cells(plan_table(packed), ("train mem",))
    assert set(cells.values()) == {(_si(2 * train_step_bytes(trial.model, 24, 16, 4, n)) + "B",)}


def test_train_memory_counts_what_each_remat_policy_keeps():
    """Hand-computed for D = 32, D_mlp = 128 (GELU), 4 heads of 8, depth 2, L = 128, V = 24,
    2 sequences, 1000 parameters, RoPE on the reference path (two causal query blocks: 64 x 64
    + 64 x 128 = 12288 saved pairs): a layer keeps 128 (24 D + 6 D_mlp) + 12288 x (1 + 2)
    floats x 4 heads = 344064 floats, the logits 128 x 3 V = 9216.
    none: 2 layers x 344064 + 9216; block: 2 x 128 x D block inputs + one layer's 344064 +
    128 x 8 D (REMAT_WORKING_WIDTHS) + 9216; dots: 2 x 128 x (3 D + A + 2 A_kv + D_mlp = 320)
    + 344064 + 128 x 8 D + 9216; each x 4 bytes x 2 sequences + 28 bytes a parameter.
    `attention` runs the blocked kernel (no saved pairs: a layer keeps 128 x 1536 = 196608
    floats) and keeps D + A + 4 heads = 68 floats a position."""
    from rope_lab.config import LayerConfig, replace
    from tests.helpers import tiny_trial

    trial = tiny_trial(width=32, depth=2, head_dim=8, length=128)
    trial = replace(trial, **{"train.batch_size": 2})
    working = 128 * 8 * 32
    expected = {
        "none": 28_000 + 8 * (2 * 344_064 + 9_216),
        "block": 28_000 + 8 * (2 * 128 * 32 + 344_064 + working + 9_216),
        "dots": 28_000 + 8 * (2 * 128 * 320 + 344_064 + working + 9_216),
    }
    assert expected == {"none": 5_606_752, "block": 3_181_920, "dots": 3_771_744}
    # a layout of two kinds (one scan step runs both): the same layers, so the same bytes;
    # under a policy one block, not one step, is recomputed at a time
    layout = replace(trial, **{"model.layers": (LayerConfig(), LayerConfig(window=32))})
    for policy, want in expected.items():
        assert train_memory(replace(trial, **{"train.remat": policy}), 1000) == want
        assert train_memory(replace(layout, **{"train.remat": policy}), 1000) == want
    blocked = replace(trial, **{"model.attention": "blocked", "train.remat": "attention"})
    assert train_memory(blocked, 1000) == 28_000 + 8 * (2 * 128 * 68 + 196_608 + working + 9_216)
