import os
import subprocess
import sys

import pytest

from rope_lab.runtime import allocator

LINUX_GLIBC = allocator.applies({})


def test_tuned_tunables_adds_missing_keys_and_keeps_the_users():
    merged = allocator._parse(allocator.tuned_tunables("glibc.malloc.arena_max=4:glibc.foo=3"))
    assert merged["glibc.malloc.arena_max"] == "4"  # the user's value wins
    assert merged["glibc.foo"] == "3"
    assert (
        merged["glibc.malloc.trim_threshold"] == allocator.TUNABLES["glibc.malloc.trim_threshold"]
    )


def test_is_tuned_only_when_every_key_is_set():
    assert not allocator.is_tuned({})
    assert not allocator.is_tuned({"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0"})
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
        "import os; from rope_lab.runtime.allocator import reexec_tuned; "
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
import ctypes, resource, threading
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p


def touch():  # what XLA does with its buffers at each call: allocate, write, free
    for size in (64 << 20, 8 << 20):
        block = libc.malloc(size)
        ctypes.memset(block, 1, size)
        libc.free(ctypes.c_void_p(block))


def in_thread():  # XLA runs programs on worker threads (glibc gives them their own arenas)
    worker = threading.Thread(target=touch)
    worker.start()
    worker.join()


touch()
in_thread()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    touch()
    in_thread()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not LINUX_GLIBC, reason="glibc tunables exist on Linux with glibc only")
def test_tuned_process_faults_far_less_on_repeated_large_buffers():
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    default = int(_run(FAULTS, env))
    tuned = int(_run(FAULTS, {**env, **allocator.worker_env(env)}))
    # 20 x 72 MiB of fresh 4 KiB pages is ~370k faults by default
    assert default > 100_000
    assert tuned < default / 20
