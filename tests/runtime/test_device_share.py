"""Shares of an accelerator: each trial's JAX process preallocates only its share of memory."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rope_lab.runtime.device_share import (
    HEADROOM,
    MEM_FRACTION,
    PREALLOCATE,
    device_env,
    memory_fraction,
)


@pytest.mark.parametrize(
    ("num_gpus", "fraction"), [(0.25, 0.22), (0.5, 0.45), (1 / 3, 0.3), (0.001, 0.01)]
)
def test_a_share_preallocates_ninety_percent_of_itself(num_gpus, fraction) -> None:
    assert memory_fraction(num_gpus) == fraction
    assert device_env(num_gpus, {}) == {MEM_FRACTION: f"{fraction:.2f}"}


@pytest.mark.parametrize("num_gpus", [0, 1, 2])
def test_whole_devices_and_cpu_trials_keep_the_default(num_gpus) -> None:
    assert memory_fraction(num_gpus) is None
    assert device_env(num_gpus, {}) == {}


@pytest.mark.parametrize("key", [MEM_FRACTION, PREALLOCATE])
def test_the_users_own_setting_wins(key) -> None:
    assert device_env(0.25, {key: "0.5"}) == {}


@given(st.integers(2, 64))
def test_the_trials_ray_packs_on_one_device_fit_beside_each_other(per_device) -> None:
    fraction = memory_fraction(1 / per_device)
    assert fraction is not None
    assert per_device * fraction <= HEADROOM + 1e-12
    assert fraction >= min(HEADROOM / per_device - 0.01, 0.01)
