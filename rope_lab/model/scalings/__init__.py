"""RoPE scaling methods, one module each, registered in `rope_lab.registry.SCALINGS`.

Every module of this package is imported here and registers its method, so a new method is one
new module; its `order` attribute places it in listings and legends.
"""

import importlib
import pkgutil

from rope_lab.model.scalings.base import Scaling

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Scaling"]
