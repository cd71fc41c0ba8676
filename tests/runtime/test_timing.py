"""Phase timing: nested phases partition the time; compilation is attributed to its phase."""

import time

import jax
import jax.numpy as jnp

from rope_lab.runtime.timing import Phases, compile_seconds


def test_nested_phases_partition_wall_and_compile_time():
    phases = Phases()
    compile_seconds()  # start listening
    with phases.phase("outer"):
        time.sleep(0.05)
        with phases.phase("inner"):
            f = jax.jit(lambda x: jnp.tanh(x) @ x.T + 17.0)  # a fresh program: compiled here
            f(jnp.ones((33, 7))).block_until_ready()
        time.sleep(0.05)
    timings = phases.as_dict()
    assert timings["inner"]["compile_s"] > 0
    assert timings["outer"]["compile_s"] < 1e-3  # the compile is not counted twice
    assert 0.09 < timings["outer"]["wall_s"] < 0.5
    with phases.phase("inner"):  # repeated phases accumulate; a cached program compiles nothing
        before = compile_seconds()
        f(jnp.ones((33, 7))).block_until_ready()
        assert compile_seconds() == before
    assert phases.as_dict()["inner"]["wall_s"] >= timings["inner"]["wall_s"]
