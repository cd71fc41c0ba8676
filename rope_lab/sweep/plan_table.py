"""The text table `rope-lab sweep plan` prints: one line per trial (its swept values, parameter
counts, devices, pack, stages, tokens, FLOPs, CPU time and memory, from `plan.estimate_cost` and
`plan.trial_devices`) and a total line, then what each task asks Ray for, the trials that
cannot train as asked and, with `pack_seeds`, each pack's seeds and the trials trained alone;
last, a `warning:` line for each setting some trials do not use (`SweepSpec.warnings`).
"""

from __future__ import annotations

import math

from rope_lab.config import TrialConfig
from rope_lab.runtime.device_share import memory_fraction
from rope_lab.sweep.plan import estimate_cost, train_memory, trial_devices
from rope_lab.sweep.spec import Resources, SweepSpec, axis_assignments, format_value
from rope_lab.trial.packing import plan_packs
from rope_lab.trial.placement import bundle_text


def _device_cells(devices: dict) -> list[str]:
    """The plan's `GPU` cell (GPUs a task asks for: '0.25 (mem 0.22)' / '2' / '0') and `DP`
    cell (the devices training spreads over: '1', '2 FSDP', 'all' for a CPU worker's local
    devices, '4 (2 proc)' over two JAX processes); '!' marks a problem, listed after the
    table."""
    gpus = f"{devices['gpus']:g}"
    if devices["memory_fraction"] is not None:
        gpus += f" (mem {devices['memory_fraction']:.2f})"
    n = devices["train_devices"]
    train = ("all" if n is None else str(n)) + (" FSDP" if devices["sharded"] else "")
    if devices["processes"] > 1:
        train += f" ({devices['processes']} proc)"
    return [gpus, train + (" !" if devices["problem"] else "")]


def _layout(trial: TrialConfig) -> str:
    """A layer layout as its kinds' short names, 'rope.w8 | none' ('-' without one)."""
    return " | ".join(layer.slug(trial.model) for layer in trial.model.layers) or "-"


def plan_table(spec: SweepSpec, flops_per_s: float = 20e9) -> str:
    """Text table for `rope-lab sweep plan`: one line per trial and a total line.

    Columns: the swept values, parameters (all, and non-embedding: `estimate_cost`), the
    receptive field (RF, tokens; only when a trial's family has one: the CNN; '-' for
    attention), the devices (`trial_devices`: GPU, those a task asks for, with the memory
    share of a shared GPU; DP, the devices training spreads over, FSDP when parameters are
    sharded, the JAX processes when more than one), the
    pack (only with `pack_seeds`: `p1`, `p2`, ... for the trials trained as
    one program, `-` for one trained alone; `rope_lab.trial.packing.plan_packs`), stages,
    tokens, FLOPs, CPU time, training memory per device (`train_memory` over the devices
    training spreads over, the models of a pack together; '-' for a lazy trial or a family
    without attention), evaluation memory and the decoding cache at the longest length
    (`plan._memory`; the total line shows the largest of each). With `pack_seeds`, lines after
    the table list each pack's seeds and trials and why the others train alone; a devices line says
    what each task asks Ray for and how trials share a GPU, and lists any trial that cannot
    train as asked.

    CPU time is total FLOPs / `flops_per_s` (sustained); it ignores compilation and per-step
    overhead, which dominate tiny models.
    """
    keys = list(spec.axes)
    short = [k.rsplit(".", 1)[-1] for k in keys]
    heads = [s if short.count(s) == 1 else k for s, k in zip(short, keys, strict=True)]
    windowed = any(t.model.receptive_field for t in spec.trials)
    packs = plan_packs(spec.trials) if spec.pack_seeds else []
    pack_of = {
        t.trial_id: f"p{i}"
        for i, pack in enumerate((p for p in packs if p.packed), start=1)
        for t in pack.trials
    }
    pack_size = {t.trial_id: len(p.trials) for p in packs if p.packed for t in p.trials}
    header = [
        "trial", *heads, "params", "non-emb", *(["RF"] if windowed else []),
        "GPU", "DP", *(["pack"] if spec.pack_seeds else []), "stages",
        "train tok", "eval tok", "NTK FLOPs", "FLOPs", "CPU time", "train mem", "eval mem",
        "KV cache",
    ]  # fmt: skip
    summed = ("stages", "train_tokens", "eval_tokens", "ntk_flops", "total_flops")
    totals = dict.fromkeys(summed, 0)

    def numbers(cost: dict[str, int]) -> list[str]:
        cells = [str(cost[name]) if name == "stages" else _si(cost[name]) for name in summed]
        return [*cells, _duration(cost["total_flops"] / flops_per_s)]

    measures = ("train_memory_bytes", "eval_memory_bytes", "kv_cache_bytes")

    def memory(cost: dict) -> list[str]:
        return ["-" if cost[k] is None else _si(cost[k]) + "B" for k in measures]

    rows = []
    problems: list[str] = []
    peak: dict[str, int] = {}
    for trial in spec.trials:
        cost = estimate_cost(trial)
        totals = {name: totals[name] + cost[name] for name in summed}
        values = [
            _layout(trial) if key == "model.layers" else format_value(v)
            for key, v in axis_assignments(trial, spec).items()
        ]
        params = [_si(cost["n_params"]), _si(cost["n_params_non_embedding"])]
        if windowed:
            params.append(str(cost["receptive_field"] or "-"))
        devices = trial_devices(trial, spec.resources)
        params += _device_cells(devices)
        if cost["train_memory_bytes"] is not None:  # per device, a pack's models together
            per_device = train_memory(
                trial, cost["n_params"], devices["train_devices"] or 1, devices["sharded"]
            )
            cost["train_memory_bytes"] = pack_size.get(trial.trial_id, 1) * (per_device or 0)
        if devices["problem"]:
            problems.append(f"  ! {trial.trial_id}: {devices['problem']}")
        if spec.pack_seeds:
            params.append(pack_of.get(trial.trial_id, "-"))
        rows.append([trial.trial_id, *values, *params, *numbers(cost), *memory(cost)])
        peak = {k: max(peak.get(k, 0), cost[k] or 0) for k in measures}
    blank = [""] * (len(keys) + 4 + windowed + spec.pack_seeds)
    total = [f"total ({len(spec.trials)} trials)", *blank, *numbers(totals), *memory(peak)]
    widths = [max(len(r[i]) for r in [header, *rows, total]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        text = [c.ljust(w) if i <= len(keys) else c.rjust(w) for i, (c, w) in pairs]
        return "  ".join(text).rstrip()

    rule = "-" * len(line(header))
    intro = (
        f"sweep {spec.name}: {len(spec.trials)} trials; stages = train + as trained + one "
        f"per scaling; FLOPs = train + fine-tune + eval + NTK tracking; CPU time at "
        f"{flops_per_s / 1e9:g} GFLOP/s sustained (compilation not included)"
    )
    return "\n".join(
        [
            intro, line(header), rule, *map(line, rows), rule, line(total),
            _resources_line(spec.resources, spec.pack_seeds), *_bundles_line(spec),
            *problems, *_packing(packs),
            *(f"warning: {w}" for w in spec.warnings),
        ]
    )  # fmt: skip


def _resources_line(resources: Resources, packing: bool) -> str:
    """What each task asks Ray for, and how trials share a GPU."""
    gpus = resources.num_gpus
    text = f"devices: each task asks for {resources.num_cpus:g} CPU and {gpus:g} GPU"
    fraction = memory_fraction(gpus)
    if fraction is not None:
        share = math.floor(round(1 / gpus, 9))
        text += (
            f"; {share} trials share a GPU, each JAX process preallocating at most "
            f"{fraction:.2f} of its memory (XLA_PYTHON_CLIENT_MEM_FRACTION)"
        )
    elif gpus >= 1:
        text += "; train.devices (default: all of them) is the data-parallel width"
    return text + (
        "; a pack trains its seeds in one task, on one task's resources" if packing else ""
    )


def _bundles_line(spec: SweepSpec) -> list[str]:
    """For trials of several processes, the placement group each reserves on Ray: N bundles of
    the task's resources (`rope_lab.trial.placement`); none when every trial is one process."""
    counts = sorted({t.train.processes for t in spec.trials if t.train.processes > 1})
    if not counts:
        return []
    bundle = bundle_text({"CPU": spec.resources.num_cpus, "GPU": spec.resources.num_gpus})
    groups = ", ".join(f"{n} bundles of {bundle}" for n in counts)
    return [
        f"placement: on Ray a train stage of train.processes N reserves a placement group "
        f"({spec.resources.placement_strategy}): {groups}"
    ]


def _packing(packs: list) -> list[str]:
    """The lines after the table with `pack_seeds`: each pack's seeds and trials, and the
    trials trained alone with their reasons (none when packing is off)."""
    if not packs:
        return []
    packed = [p for p in packs if p.packed]
    alone = [p for p in packs if not p.packed]
    lines = [
        f"packed seeds: {sum(len(p.trials) for p in packed)} trials train in {len(packed)} "
        f"packs (one vmapped program each, on one task's resources), {len(alone)} alone"
    ]
    for i, pack in enumerate(packed, start=1):
        seeds = ", ".join(str(s) for s in pack.seeds)
        ids = ", ".join(t.trial_id for t in pack.trials)
        lines.append(f"  p{i}: seeds {seeds}: {ids}")
    for pack in alone:
        lines.append(f"  alone: {pack.trials[0].trial_id}: {pack.reason}")
    return lines


def _si(x: float) -> str:
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def _duration(seconds: float) -> str:
    for unit, scale in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= scale:
            return f"{seconds / scale:.3g}{unit}"
    return f"{seconds:.2g}s"
