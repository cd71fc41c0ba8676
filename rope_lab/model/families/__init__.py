"""Model families, one module each, registered in `registry.MODELS` (`model.family`).

`base` defines the typed config every family subclasses (`FamilyConfig`); every other module of
this package is imported here, so a new family is one new module: it registers itself. The
configs import no JAX; each family's `build` imports its network when it is built.
"""

from __future__ import annotations

import importlib
import pkgutil

from rope_lab.model.families.base import FamilyConfig

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["FamilyConfig"]
