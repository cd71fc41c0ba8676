"""The public surface of `rope_lab`: each name is its home module's object, imported lazily."""

import importlib
import subprocess
import sys

import pytest

import rope_lab

HOMES = {
    "TrialConfig": "rope_lab.config",
    "TrialOutcome": "rope_lab.trial.run",
    "evaluate_model": "rope_lab.trial.evaluate",
    "from_hf": "rope_lab.hf.weights",
    "load_model": "rope_lab.trial.trained",
    "load": "rope_lab.results",
    "load_spec": "rope_lab.sweep.spec",
    "load_trial": "rope_lab.config",
    "make_model": "rope_lab.model.factory",
    "position_kernel": "rope_lab.ntk.kernels",
    "run_sweep": "rope_lab.sweep.runner",
    "run_trial": "rope_lab.trial.run",
    "sequence_kernel": "rope_lab.ntk.kernels",
}


def test_all_lists_the_public_names():
    assert sorted(rope_lab.__all__) == sorted(HOMES)
    assert set(rope_lab.__all__) <= set(dir(rope_lab))


@pytest.mark.parametrize("name", sorted(HOMES))
def test_each_name_is_the_object_of_its_home_module(name):
    home = importlib.import_module(HOMES[name])
    assert getattr(rope_lab, name) is getattr(home, name)
    assert getattr(home, name).__module__ == HOMES[name]


def test_unknown_names_raise_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = rope_lab.nope
    from rope_lab.analysis import query  # submodules still import through the package

    assert query.__name__ == "rope_lab.analysis.query"


def _imports_jax(code: str) -> bool:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}; import sys; print('jax' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1] == "True"


def test_config_sweep_driver_and_light_names_do_not_import_jax():
    assert not _imports_jax("import rope_lab.config")
    assert not _imports_jax("import rope_lab.sweep.runner")
    assert not _imports_jax("import rope_lab as r; r.TrialConfig, r.load, r.load_spec, r.run_sweep")
    assert _imports_jax("import rope_lab; rope_lab.make_model")  # the check can see JAX
