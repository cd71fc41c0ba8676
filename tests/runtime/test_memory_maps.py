"""Compiled programs are freed exactly when the process's memory maps pass the share of the
limit: the mappings fall back and a jitted function's cache empties; below it nothing is
touched. The counts are read from /proc (Linux)."""

import sys

import pytest

from rope_lab.runtime import memory_maps

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _compiled(n: int):
    import jax
    import jax.numpy as jnp

    fns = [jax.jit(lambda x, i=i: jnp.sin(x * i) + i) for i in range(n)]
    for f in fns:
        f(jnp.ones(3)).block_until_ready()
    return fns


def test_counts_read_from_proc(tmp_path) -> None:
    maps, limit = tmp_path / "maps", tmp_path / "max_map_count"
    maps.write_text("a\nb\nc\n")
    limit.write_text("65530\n")
    assert memory_maps.map_count(maps) == 3
    assert memory_maps.map_limit(limit) == 65530
    assert memory_maps.map_count(tmp_path / "none") is None
    assert memory_maps.map_limit(maps) is None  # not a number


def test_programs_freed_only_past_the_share() -> None:
    fns = _compiled(30)
    held = memory_maps.map_count()
    assert held is not None
    # just above the share: kept
    assert not memory_maps.free_programs_if_crowded(limit=held * 2 + 200, share=0.5)
    assert all(f._cache_size() == 1 for f in fns)
    # the 30 programs' mappings (about six each) go when the share is passed
    assert memory_maps.free_programs_if_crowded(limit=held, share=0.5)
    assert all(f._cache_size() == 0 for f in fns)
    after = memory_maps.map_count()
    assert after is not None and after < held - 60


def test_a_process_without_jax_frees_nothing(monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    assert not memory_maps.free_programs_if_crowded(limit=1, share=0.0)


def test_every_stage_and_pack_ends_with_the_check(tmp_path, monkeypatch) -> None:
    """The pipeline asks after each stage it ran and after each pack task (here one whose
    member had finished before)."""
    from rope_lab.config import to_dict
    from rope_lab.trial import pipeline
    from tests.helpers import tiny_trial

    asked: list[int] = []
    monkeypatch.setattr(pipeline, "free_programs_if_crowded", lambda: asked.append(1) or False)
    cfg = tiny_trial("rope", steps=2)
    assert pipeline.run_train_stage(to_dict(cfg), tmp_path)["status"] == "done"
    assert len(asked) == 1
    pipeline.run_pack_train([to_dict(cfg)], tmp_path)
    assert len(asked) == 2
