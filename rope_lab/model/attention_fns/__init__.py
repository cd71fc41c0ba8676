"""What attention computes, one module per variant, registered in `registry.ATTENTION_FNS`
(`model.attention_fn`; `model.attention` is only how it is computed).

`base` defines the typed config every variant subclasses (`AttentionFnConfig`) and the hooks
every attention path calls; every other module of this package is imported here, so a new
variant is one new module: it registers itself. The configs import no JAX at import time.
"""

from __future__ import annotations

import importlib
import pkgutil

from rope_lab.model.attention_fns.base import AttentionFnConfig

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["AttentionFnConfig"]
