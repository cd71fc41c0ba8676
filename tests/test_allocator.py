import os
import subprocess
import sys
from pathlib import Path

import pytest

from rope_lab import allocator

LINUX_GLIBC = allocator.applies({})
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def test_tuned_tunables_adds_missing_keys_and_keeps_the_users():
    merged = allocator._parse(allocator.tuned_tunables("glibc.malloc.hugetlb=0:glibc.foo=3"))
    assert merged["glibc.malloc.hugetlb"] == "0"  # the user's value wins
    assert merged["glibc.foo"] == "3"
    assert (
        merged["glibc.malloc.trim_threshold"] == allocator.TUNABLES["glibc.malloc.trim_threshold"]
    )


def test_is_tuned_only_when_every_key_is_set():
    assert not allocator.is_tuned({})
    assert not allocator.is_tuned({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"})
    assert allocator.is_tuned({"GLIBC_TUNABLES": allocator.tuned_tunables()})


def test_worker_env_respects_the_opt_out():
    assert allocator.worker_env({allocator.OPT_OUT: "0"}) == {}
    if LINUX_GLIBC:
        env = allocator.worker_env({"GLIBC_TUNABLES": "glibc.foo=1"})
        assert allocator.is_tuned(env)
        assert "glibc.foo=1" in env["GLIBC_TUNABLES"]


def _run(code: str, env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout


@pytest.mark.skipif(not LINUX_GLIBC, reason="glibc tunables exist on Linux with glibc only")
def test_reexec_restarts_the_process_once_with_the_tunables():
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", allocator.OPT_OUT)}
    code = (
        "import os; from rope_lab.allocator import reexec_tuned; "
        "print('start'); reexec_tuned(); print(os.environ['GLIBC_TUNABLES'])"
    )
    lines = _run(code, env).split()
    assert lines[:2] == ["start", "start"]  # ran twice: before and after the re-execution
    assert allocator.is_tuned({"GLIBC_TUNABLES": lines[2]})
    opted_out = _run(
        code.replace("os.environ['GLIBC_TUNABLES']", "'none'"), {**env, allocator.OPT_OUT: "0"}
    )
    assert opted_out.split() == ["start", "none"]


FAULTS = """
import ctypes, resource
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
size = 64 << 20


def touch():  # what XLA does with a large buffer each call: allocate, write, free
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(ctypes.c_void_p(block))


touch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    touch()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not LINUX_GLIBC, reason="glibc tunables exist on Linux with glibc only")
@pytest.mark.skipif(
    not THP.exists() or "[never]" in THP.read_text(), reason="transparent huge pages are off"
)
def test_tuned_process_faults_far_less_on_repeated_large_buffers():
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    default = int(_run(FAULTS, env))
    tuned = int(_run(FAULTS, {**env, **allocator.worker_env(env)}))
    # 20 x 64 MiB of fresh 4 KiB pages is ~330k faults by default
    assert default > 100_000
    assert tuned < default / 20
