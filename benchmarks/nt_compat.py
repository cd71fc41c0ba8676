"""Import neural-tangents 0.6.5's empirical NTK on the jax that rope_lab pins.

neural-tangents 0.6.5 (its last release) fails to import on jax 0.10 only because names it
imports moved: `jax.core.Jaxpr` and friends (now in `jax.extend.core`), `jax.util` (now private),
`jax.interpreters.ad.zeros_like_p` (removed; it only keys a rule table), and its package
`__init__` imports the TensorFlow port (`experimental`), which needs tensorflow. This module puts
the moved names back under their old addresses and imports `neural_tangents._src.empirical`
without the package `__init__`; no neural-tangents code is changed. Install it without its
TensorFlow dependencies:

    .venv/bin/pip install --no-deps neural-tangents==0.6.5

`benchmarks/ntk_same_jax.py` checks every kernel it computes against rope_lab's before timing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from types import ModuleType

_MOVED_CORE_NAMES = (
    "AbstractValue",
    "ClosedJaxpr",
    "Jaxpr",
    "JaxprEqn",
    "Literal",
    "Primitive",
    "ShapedArray",
    "Value",
    "Var",
)


def load_empirical() -> ModuleType:
    """neural_tangents._src.empirical (has `empirical_ntk_fn`, `NtkImplementation`).

    Raises ImportError when neural-tangents is not installed.
    """
    spec = importlib.util.find_spec("neural_tangents")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("neural-tangents is not installed: pip install --no-deps neural-tangents")
    import jax
    import jax.core
    import jax.extend.core
    import jax.interpreters.ad
    from jax._src import core as private_core
    from jax._src import util as private_util

    for name in _MOVED_CORE_NAMES:
        if not hasattr(jax.core, name):
            source = jax.extend.core if hasattr(jax.extend.core, name) else private_core
            setattr(jax.core, name, getattr(source, name))
    if "jax.util" not in sys.modules:
        sys.modules["jax.util"] = private_util
        jax.util = private_util  # type: ignore[attr-defined]
    if not hasattr(jax.interpreters.ad, "zeros_like_p"):
        jax.interpreters.ad.zeros_like_p = jax.extend.core.Primitive("zeros_like")  # type: ignore[attr-defined]
    if "neural_tangents" not in sys.modules:  # the package without its TensorFlow __init__
        package = types.ModuleType("neural_tangents")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["neural_tangents"] = package
    return importlib.import_module("neural_tangents._src.empirical")
