"""Shared pieces of the RoPE scaling methods: the `Scaling` base class, number checks, and the
frequency helpers (float32 exponent `2i/d` as HF forms it, NTK base change, YaRN mscale)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np

NTK_MIN_DIM_WHY = "exponent d / (d - 2)"


def _is_real(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _require_real(name: str, value: Any, *, low: float, inclusive: bool, what: str) -> None:
    """ValueError naming `name` unless `value` is a finite real above (or at) `low`."""
    ok = _is_real(value) and (value >= low if inclusive else value > low)
    if not ok:
        raise ValueError(f"{name} must be {what}, got {value!r}")


def _require_optional_real(name: str, value: Any, *, low: float, inclusive: bool) -> None:
    """`_require_real` for an optional parameter: None means unset and passes."""
    if value is not None:
        bound = f">= {low:g}" if inclusive else f"> {low:g}"
        _require_real(name, value, low=low, inclusive=inclusive, what=f"a finite number {bound}")


def _exponents(rotary_dim: int) -> np.ndarray:
    """(d/2,) exponents 2i/d, rounded to float32 as HF forms them, returned as float64."""
    even = np.arange(0, rotary_dim, 2, dtype=np.float32)
    return (even / np.float32(rotary_dim)).astype(np.float64)


def _base_inv_freq(theta: float, rotary_dim: int) -> np.ndarray:
    """(d/2,) float64 theta ** (-2i/d)."""
    return 1.0 / np.power(float(theta), _exponents(rotary_dim))


def _ntk_theta(theta: float, scale: float, rotary_dim: int) -> float:
    """NTK-aware base for an effective length scale."""
    return float(theta) * float(scale) ** (rotary_dim / (rotary_dim - 2))


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN magnitude correction 0.1 * mscale * ln(scale) + 1 (1 for scale <= 1)."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def _output(inv: np.ndarray, attention_factor: float = 1.0) -> tuple[np.ndarray, float]:
    """(d/2,) frequencies as float32, and the attention factor as a Python float."""
    return np.asarray(inv, dtype=np.float32), float(attention_factor)


@dataclass(frozen=True)
class Scaling:
    """One RoPE scaling method; its dataclass fields are the method's extra parameters.

    `check` validates the shared arguments (ValueError naming the bad one); `inv_freq` assumes
    they were checked and returns (rotary_dim // 2,) float32 frequencies and the attention factor.
    """

    name: ClassVar[str]  # set by SCALINGS.register
    needs_original_length: ClassVar[bool] = False
    length_dependent: ClassVar[bool] = False  # frequencies depend on seq_len
    uses_factor: ClassVar[bool] = True
    min_rotary_dim: ClassVar[int] = 2
    min_rotary_dim_why: ClassVar[str] = ""
    order: ClassVar[int]
    colors: ClassVar[tuple[str, str]]  # (light, dark) shades for plots
    # why Hugging Face transformers has no such rope_type ("": it has one, and the golden
    # cases of tests/fixtures/make_hf_rope_golden.py must cover it)
    not_in_hf: ClassVar[str] = ""
    # a relative-position remap (`scalings/remaps.py`): keeps the frequencies, remaps positions
    remaps: ClassVar[bool] = False
    # fine-tuned (recalibrated) at the training length, whatever the factor, which then changes
    # nothing: one stage at factor 1 stands for every factor (DroPE)
    recalibrates_at_train_length: ClassVar[bool] = False

    def check(
        self, rotary_dim: int, *, theta: float, factor: float, original_length: int | None
    ) -> None:
        """Raise ValueError naming the first invalid argument or parameter."""
        if not _is_int(rotary_dim) or rotary_dim < 2 or rotary_dim % 2:
            raise ValueError(f"rotary_dim must be an even integer >= 2, got {rotary_dim!r}")
        if rotary_dim < self.min_rotary_dim:
            raise ValueError(
                f"rotary_dim must be >= {self.min_rotary_dim} for kind {self.name!r} "
                f"({self.min_rotary_dim_why}), got {rotary_dim!r}"
            )
        _require_real("theta", theta, low=0.0, inclusive=False, what="a finite number > 0")
        _require_real("factor", factor, low=1.0, inclusive=True, what="a finite number >= 1")
        if original_length is None:
            if self.needs_original_length:
                raise ValueError(
                    f"original_length (the training length) is required for kind "
                    f"{self.name!r}, got None"
                )
        elif not _is_int(original_length) or original_length < 1:
            raise ValueError(f"original_length must be an integer >= 1, got {original_length!r}")

    def inv_freq(
        self,
        rotary_dim: int,
        *,
        theta: float,
        factor: float,
        original_length: int | None,
        seq_len: int | None,
    ) -> tuple[np.ndarray, float]:
        """(rotary_dim // 2,) float32 inverse frequencies and the attention factor."""
        raise NotImplementedError
