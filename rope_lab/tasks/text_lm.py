"""Byte-level language modelling on a local text file, with a held-out evaluation split."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rope_lab.registry import TASKS
from rope_lab.roles import identity
from rope_lab.tasks.base import Batch, Operands, Task, TaskParams, check_float, check_split
from rope_lab.tasks.corpora import builtin_text, is_builtin
from rope_lab.tasks.windows import (  # re-exported: the text protocols' home is windows.py
    TEXT_PROTOCOLS,
    text_windows,
    window_count,
    window_step,
)

if TYPE_CHECKING:
    import jax

_TEXT_CACHE: dict[tuple[str, int, int], np.ndarray] = {}


def _text_key(path: str) -> tuple[str, int, int]:
    if is_builtin(path):
        return (path, 0, int(builtin_text(path).size))
    real = os.path.realpath(path)
    if not os.path.isfile(real):
        raise ValueError(f"lm_text: path={path!r} does not exist or is not a regular file")
    st = os.stat(real)
    return (real, st.st_mtime_ns, st.st_size)


def _load_text(path: str) -> np.ndarray:
    """Read a file once into a read-only uint8 array (cached by path, mtime and size)."""
    if is_builtin(path):
        return builtin_text(path)
    cache_key = _text_key(path)
    if cache_key not in _TEXT_CACHE:
        data = np.fromfile(cache_key[0], dtype=np.uint8)
        data.setflags(write=False)
        _TEXT_CACHE[cache_key] = data
    return _TEXT_CACHE[cache_key]


def text_split_bounds(size: int, eval_fraction: float) -> dict[str, tuple[int, int]]:
    """Byte ranges [start, stop) of the ``train`` and ``eval`` splits of a ``size``-byte file.

    The last ``round(eval_fraction * size)`` bytes are held out for evaluation and NTK probes;
    training samples only windows that lie entirely before them. ``eval_fraction = 0`` (opt-in)
    evaluates on the training text."""
    held_out = round(eval_fraction * size)
    if held_out == 0:
        return {"train": (0, size), "eval": (0, size)}
    return {"train": (0, size - held_out), "eval": (size - held_out, size)}


@TASKS.register("lm_text")
@dataclass(frozen=True)
class TextLMParams(TaskParams):
    """The parameters of :class:`TextLMTask` (see there)."""

    path: str = identity()
    eval_fraction: float = identity(0.1)
    eval_path: str | None = identity(None)
    display_name: ClassVar[str] = "text LM"
    order: ClassVar[int] = 5
    is_text: ClassVar[bool] = True
    default_metric: ClassVar[str] = "bits_per_byte"


@dataclass(frozen=True)
class TextLMTask(TextLMParams, Task):
    """Byte-level language modelling on a local text file (nothing is downloaded).

    Vocabulary: bytes 0..255 (vocab_size must be >= 256; larger ids are unused). The file at
    ``path`` (or a built-in corpus ``builtin:NAME``, :mod:`rope_lab.tasks.corpora`) is
    read once into a uint8 array (``self.data``, shared through a module-level cache;
    the task hashes and compares by ``vocab_size``, ``path`` and ``eval_fraction``). The last
    ``eval_fraction`` of the file (default 0.1, contiguous) is the ``eval`` split, used by
    evaluation and NTK probes; training windows never touch it (:func:`text_split_bounds`).
    Each row is a uniformly random window of L+1 consecutive bytes of its split; all positions
    are scored. ``min_length = 1``; each split must hold at least L+1 bytes (and the file less
    than 2**31). With ``eval_path`` (a second file or built-in corpus), the whole of ``path``
    trains and the whole of ``eval_path`` is the ``eval`` split (``eval_fraction`` is then
    not used and must stay at its default).
    """

    data: np.ndarray = field(init=False, repr=False, compare=False)
    eval_data: np.ndarray | None = field(init=False, repr=False, compare=False, default=None)

    def _check_params(self) -> None:
        if not isinstance(self.path, str | os.PathLike):
            raise ValueError(f"lm_text: path must be a file path, got path={self.path!r}")
        object.__setattr__(self, "path", os.fspath(self.path))
        check_float(self, "eval_fraction", 0.0, 0.9)
        default = TextLMParams.__dataclass_fields__["eval_fraction"].default
        if self.eval_path is not None:
            if not isinstance(self.eval_path, str | os.PathLike):
                raise ValueError(f"lm_text: eval_path must be a file path, got {self.eval_path!r}")
            object.__setattr__(self, "eval_path", os.fspath(self.eval_path))
            if self.eval_fraction != default:
                raise ValueError(
                    f"lm_text: eval_fraction={self.eval_fraction} and eval_path="
                    f"{self.eval_path!r} both choose the held-out text; give one (with eval_path "
                    "the whole of path trains)"
                )
        for name in ("path", "eval_path"):
            where = getattr(self, name)
            if where is not None and _load_text(where).size >= 2**31:
                raise ValueError(f"lm_text: {name}={where!r} is too large")
        self._read()

    def _read(self) -> None:
        """Load the training text (and the evaluation text of `eval_path`) from the cache."""
        object.__setattr__(self, "data", _load_text(self.path))
        if self.eval_path is not None:
            object.__setattr__(self, "eval_data", _load_text(self.eval_path))

    def __getstate__(self) -> dict[str, Any]:
        return {
            "vocab_size": self.vocab_size,
            "path": self.path,
            "eval_fraction": self.eval_fraction,
            "eval_path": self.eval_path,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        fields = TextLMTask.__dataclass_fields__
        defaults = {k: fields[k].default for k in ("eval_fraction", "eval_path")}
        for k, v in {**defaults, **state}.items():
            object.__setattr__(self, k, v)
        self._read()

    def min_vocab_size(self) -> int:
        return 256

    def _vocab_explanation(self) -> str:
        return "one token per byte value"

    def min_length(self) -> int:
        return 1

    def token_bytes(self) -> np.ndarray:
        """One byte per token id (V,): bits per byte = loss / ln 2."""
        return np.ones(self.vocab_size, dtype=np.int64)

    def split_bytes(self, split: str) -> np.ndarray:
        """The bytes of one split (n,) uint8: a range of ``self.data`` (`text_split_bounds`),
        or with ``eval_path`` the whole training file and the whole evaluation file."""
        check_split(split)
        if self.eval_data is not None:
            return self.data if split == "train" else self.eval_data
        start, stop = text_split_bounds(int(self.data.size), self.eval_fraction)[split]
        return self.data[start:stop]

    def split_tokens(self, split: str) -> np.ndarray:
        """The token ids of one split (n,): its bytes (`split_bytes`), as ``lm_tokens``
        names its split's memory map, so callers read either text task alike."""
        return self.split_bytes(split)

    def validate(self, length: int, split: str | None = "train") -> None:
        super().validate(length, split)
        if split is not None:  # None: the sampler checks the size of the operands it gets
            size = self.split_bytes(split).size
            if size < int(length) + 1:
                where = (
                    f"eval_path={self.eval_path!r}"
                    if split == "eval" and self.eval_path is not None
                    else f"path={self.path!r} (eval_fraction={self.eval_fraction})"
                )
                raise ValueError(
                    f"lm_text: the {split} split of {where} has {size} bytes, too short for "
                    f"length={length} (need length + 1 = {int(length) + 1} bytes)"
                )

    def operands(self, split: str = "train") -> Operands:
        """The split's bytes as one device array, cached per file and split. Made with
        ``ensure_compile_time_eval``, so a first call inside a trace still caches a concrete
        array, never a tracer."""
        from rope_lab.tasks.sampling import on_device  # deferred: imports JAX

        check_split(split)
        where = (self.eval_path,) if self.eval_path is None else _text_key(self.eval_path)
        key = ("lm_text", *_text_key(self.path), *where, self.eval_fraction, split)
        return (on_device(key, lambda: self.split_bytes(split)),)

    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        """The batch, drawn in JAX (`rope_lab.tasks.sampling.text_lm`)."""
        from rope_lab.tasks.sampling.text_lm import sample  # deferred: imports JAX

        return sample(self, key, batch_size, length, operands)


__all__ = [
    "TEXT_PROTOCOLS",
    "TextLMParams",
    "TextLMTask",
    "text_split_bounds",
    "text_windows",
    "window_count",
    "window_step",
]
