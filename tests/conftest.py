"""Strict numerics for every test, and small shared fixtures."""

import jax
import pytest
from hypothesis import HealthCheck, settings

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "standard")

settings.register_profile(
    "rope_lab", deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("rope_lab")


@pytest.fixture
def key():
    """A fixed PRNG key."""
    return jax.random.PRNGKey(0)
