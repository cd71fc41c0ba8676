"""A Slurm task's place in a multi-process trial, from the variables `srun` sets (no JAX).

`srun` with one task per node starts `python -m rope_lab.trial.processes --from-slurm` on each
node (slurm/multi_process_trial.sbatch); each reads its rank (`SLURM_PROCID`), the task count
(`SLURM_NTASKS`) and the job's nodes (`SLURM_JOB_NODELIST`, Slurm's compressed form such as
`node[01-03,07]`): the coordinator is the first node at a port every task derives alike,
`$ROPE_LAB_COORDINATOR_PORT` or 30000 + `SLURM_JOB_ID` mod 20000.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from rope_lab.typed import ConfigError

PORT_ENV = "ROPE_LAB_COORDINATOR_PORT"
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def _split_top(text: str) -> list[str]:
    """`text` split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def _expand_one(name: str, whole: str) -> list[str]:
    """One host pattern, its first bracket group expanded (zero padding kept), then the rest."""
    open_at = name.find("[")
    if open_at < 0:
        return [name]
    close_at = name.find("]", open_at)
    if close_at < 0:
        raise ConfigError(f"SLURM_JOB_NODELIST: unclosed '[' in {whole!r}")
    prefix, body, rest = name[:open_at], name[open_at + 1 : close_at], name[close_at + 1 :]
    hosts = []
    for item in body.split(","):
        match = _RANGE.fullmatch(item)
        if match is None or (match[2] is not None and int(match[2]) < int(match[1])):
            raise ConfigError(f"SLURM_JOB_NODELIST: bad range {item!r} in {whole!r}")
        width = len(match[1])
        last = int(match[2] if match[2] is not None else match[1])
        for number in range(int(match[1]), last + 1):
            hosts += [f"{prefix}{number:0{width}d}{tail}" for tail in _expand_one(rest, whole)]
    return hosts


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed host list in order: `node[01-03,07],gpu5` -> node01, node02,
    node03, node07, gpu5. ConfigError naming SLURM_JOB_NODELIST when it is malformed."""
    if not text.strip():
        raise ConfigError("SLURM_JOB_NODELIST: empty")
    if text.count("[") != text.count("]"):
        raise ConfigError(f"SLURM_JOB_NODELIST: unbalanced brackets in {text!r}")
    return [host for name in _split_top(text.strip()) for host in _expand_one(name, text)]


@dataclass(frozen=True)
class SlurmTask:
    """This task's JAX process id, the process count and the coordinator `host:port`."""

    process_id: int
    processes: int
    coordinator: str


def _number(env: Mapping[str, str], key: str) -> int:
    value = env.get(key)
    if value is None:
        raise ConfigError(f"{key}: not set (run under srun)")
    if not value.isdigit():
        raise ConfigError(f"{key}: not a number: {value!r}")
    return int(value)


def slurm_task(env: Mapping[str, str]) -> SlurmTask:
    """This task's place from `env` (the variables above); ConfigError naming the variable
    that is missing or wrong."""
    rank, count = _number(env, "SLURM_PROCID"), _number(env, "SLURM_NTASKS")
    if not rank < count:
        raise ConfigError(f"SLURM_PROCID: {rank} is not below SLURM_NTASKS {count}")
    if "SLURM_JOB_NODELIST" not in env:
        raise ConfigError("SLURM_JOB_NODELIST: not set (run under srun)")
    first = expand_nodelist(env["SLURM_JOB_NODELIST"])[0]
    if PORT_ENV in env:
        port = _number(env, PORT_ENV)
        if not 0 < port < 65536:
            raise ConfigError(f"{PORT_ENV}: not a port number: {port}")
    else:
        port = 30000 + _number(env, "SLURM_JOB_ID") % 20000
    return SlurmTask(rank, count, f"{first}:{port}")
