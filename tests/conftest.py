"""Strict numerics for every test, and small shared fixtures."""

import os
import tempfile

import jax
import pytest
from hypothesis import HealthCheck, settings

# Sweep stages share a persistent compilation cache; tests get their own, not the user's.
os.environ.setdefault("ROPE_LAB_COMPILE_CACHE", tempfile.mkdtemp(prefix="rope_lab_jax_cache_"))
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "standard")

settings.register_profile(
    "rope_lab", deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("rope_lab")


def pytest_sessionstart(session):
    """Under mutmut (which forks each mutant's test run from a process that already ran the
    tests), drop the compiled programs traced from the unmutated code first."""
    if os.environ.get("MUTANT_UNDER_TEST"):
        jax.clear_caches()


@pytest.fixture
def key():
    """A fixed PRNG key."""
    return jax.random.PRNGKey(0)


MAPS_BEFORE_CLEARING = 30_000  # Linux allows 65530 memory maps per process by default


@pytest.fixture(autouse=True)
def drop_compiled_programs_near_the_map_limit():
    """XLA:CPU keeps each compiled program's machine code mapped (hundreds to thousands of
    memory maps per test); a worker process that runs hundreds of tests passes Linux's 65530
    maps and XLA's compiler aborts. Past MAPS_BEFORE_CLEARING maps, the test's process drops
    JAX's compiled programs after the test."""
    yield
    try:
        with open("/proc/self/maps", "rb") as maps:
            count = sum(1 for _ in maps)
    except OSError:  # not Linux
        return
    if count > MAPS_BEFORE_CLEARING:
        jax.clear_caches()
