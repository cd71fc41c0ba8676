"""Stage helpers: the shared persistent compilation cache folder."""

from pathlib import Path

from rope_lab.sweep.stages import compile_cache_dir


def test_compile_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ROPE_LAB_COMPILE_CACHE", "0")
    assert compile_cache_dir() is None
    monkeypatch.setenv("ROPE_LAB_COMPILE_CACHE", str(tmp_path / "cache"))
    assert compile_cache_dir() == tmp_path / "cache"
    monkeypatch.delenv("ROPE_LAB_COMPILE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache_dir() == tmp_path / "xdg" / "rope_lab" / "jax"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compile_cache_dir() == Path(tmp_path / "home" / ".cache" / "rope_lab" / "jax")
