"""Building tasks by name or from a trial config, and checking a trial's lengths against them."""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Any

from rope_lab import registry
from rope_lab.config import DECODE_PROTOCOLS, ConfigError, TaskConfig, TrialConfig, thaw
from rope_lab.tasks.base import Task
from rope_lab.tasks.text_lm import TEXT_PROTOCOLS


class TaskClasses(Mapping[str, type[Task]]):
    """``registry.TASKS`` (name -> parameters class) seen as name -> task class, in order."""

    def __getitem__(self, name: str) -> type[Task]:
        return registry.TASKS[name].task_class

    def __iter__(self) -> Iterator[str]:
        return iter(registry.TASKS.names())

    def __len__(self) -> int:
        return len(registry.TASKS.names())


TASKS = TaskClasses()


def make_task(name: str, vocab_size: int, **params: Any) -> Task:
    """Build the task registered as ``name``; raise ValueError for unknown names or parameters."""
    if name not in registry.TASKS:
        close = difflib.get_close_matches(str(name), registry.TASKS.names(), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown task {name!r}; available tasks: {', '.join(TASKS)}.{hint}")
    return registry.TASKS[name].from_kwargs(**params).build(vocab_size)


def task_from_config(task_cfg: TaskConfig) -> Task:
    """The task a ``task:`` config section names, with its vocabulary size and parameters."""
    return make_task(task_cfg.name, task_cfg.vocab_size, **thaw(task_cfg.params))


def check_trial(cfg: TrialConfig) -> None:
    """Raise ConfigError (naming the key path) if the trial's task cannot be built, or cannot
    generate a length the trial trains, fine-tunes, evaluates or probes on its split."""
    t, tr = cfg.task, cfg.train
    if t.name not in registry.TASKS:
        names = registry.TASKS.names()
        raise ConfigError(f"task.name: unknown task {t.name!r}; allowed: {', '.join(names)}")
    try:
        task = task_from_config(t)
    except ValueError as err:
        raise ConfigError(f"task: {err}") from None
    checks = [("train.length", tr.length, "train")]
    checks += [("eval.length_multipliers", n, "eval") for n in cfg.eval_lengths]
    if cfg.eval.finetune_steps > 0:
        checks += [("eval.factors", round(f * tr.length), "train") for f in cfg.eval.factors]
    if cfg.ntk.enabled:
        checks += [("train.length", tr.length, "eval")]
        checks += [("ntk.probe_multipliers", n, "eval") for n in cfg.ntk_lengths]
    for key_path, length, split in checks:
        try:
            task.validate(length, split)
        except ValueError as err:
            raise ConfigError(f"{key_path}: length {length} does not fit the task: {err}") from None
    _check_text_protocol(cfg)
    _check_decode(cfg)
    _check_depths(cfg, task)


def _check_depths(cfg: TrialConfig, task: Task) -> None:
    """`eval.depths` only for a task with a needle depth, which fits every evaluated length at
    each depth."""
    depths = cfg.eval.depths
    if not depths:
        return
    if not registry.TASKS[cfg.task.name].has_depth:
        allowed = [n for n in registry.TASKS.names() if registry.TASKS[n].has_depth]
        raise ConfigError(
            f"eval.depths: task {cfg.task.name!r} has no needle depth; depths apply to "
            f"{', '.join(allowed)}"
        )
    for depth in depths:
        for length in cfg.eval_lengths:
            try:
                task.at_depth(depth).validate(length, "eval")
            except ValueError as err:
                raise ConfigError(f"eval.depths: depth {depth} at length {length}: {err}") from None


def _check_decode(cfg: TrialConfig) -> None:
    """`eval.decode.protocols` are known, unique, and the task has an answer to generate."""
    protocols = cfg.eval.decode.protocols
    for i, p in enumerate(protocols):
        if p not in DECODE_PROTOCOLS:
            raise ConfigError(
                f"eval.decode.protocols[{i}]: unknown protocol {p!r}; "
                f"allowed: {', '.join(DECODE_PROTOCOLS)}"
            )
    cap = cfg.eval.decode.max_new_tokens
    if cap is not None and cap < 1:
        raise ConfigError(f"eval.decode.max_new_tokens: must be >= 1 (or null), got {cap!r}")
    if len(set(protocols)) != len(protocols):
        raise ConfigError(f"eval.decode.protocols: listed twice in {list(protocols)}")
    if protocols and not registry.TASKS[cfg.task.name].answer_at_end:
        allowed = [n for n in registry.TASKS.names() if registry.TASKS[n].answer_at_end]
        raise ConfigError(
            f"eval.decode.protocols: task {cfg.task.name!r} has no single answer at the end of "
            f"its sequences to generate; decode evaluation runs on {', '.join(allowed)}"
        )


def _check_text_protocol(cfg: TrialConfig) -> None:
    """`eval.text_protocol` is one of TEXT_PROTOCOLS and reads a text (not a synthetic task);
    `eval.text_stride` > 0, and only for `sliding`."""
    ev = cfg.eval
    if ev.text_protocol not in TEXT_PROTOCOLS:
        raise ConfigError(
            f"eval.text_protocol: unknown value {ev.text_protocol!r}; "
            f"allowed: {', '.join(TEXT_PROTOCOLS)}"
        )
    if ev.text_protocol != "random" and not registry.TASKS[cfg.task.name].is_text:
        raise ConfigError(
            f"eval.text_protocol: {ev.text_protocol!r} reads windows of a text; task "
            f"{cfg.task.name!r} samples its sequences (use 'random')"
        )
    if ev.text_stride is not None:
        if ev.text_protocol != "sliding":
            raise ConfigError("eval.text_stride: only the 'sliding' protocol has a stride")
        if ev.text_stride <= 0:
            raise ConfigError(f"eval.text_stride: must be > 0, got {ev.text_stride}")
