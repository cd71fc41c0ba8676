"""Strict numerics for every test, and small shared fixtures."""

import os
import tempfile

import jax
import pytest
from hypothesis import HealthCheck, settings

from rope_lab.runtime.memory_maps import free_programs_if_crowded

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


@pytest.fixture(autouse=True)
def drop_compiled_programs_near_the_map_limit():
    """A worker process that runs hundreds of tests gathers compiled programs (hundreds to
    thousands of memory maps a test) until XLA's compiler fails at Linux's map limit; after each
    test, the check the pipeline runs after each stage drops them past half the limit."""
    yield
    free_programs_if_crowded()
