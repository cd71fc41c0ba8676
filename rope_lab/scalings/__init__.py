"""RoPE scaling methods, one module each, registered in `rope_lab.registry.SCALINGS`.

Importing this package registers them; the import order below is the registry order.
"""

# isort: off
from rope_lab.scalings import default  # noqa: F401
from rope_lab.scalings import linear  # noqa: F401
from rope_lab.scalings import ntk  # noqa: F401
from rope_lab.scalings import dynamic  # noqa: F401
from rope_lab.scalings import yarn  # noqa: F401
from rope_lab.scalings import llama3  # noqa: F401
from rope_lab.scalings import longrope  # noqa: F401
from rope_lab.scalings import proportional  # noqa: F401

# isort: on
from rope_lab.scalings.base import Scaling

__all__ = ["Scaling"]
