"""Haystacks for the long-context tasks (``niah``, ``variable_tracking``): filler tokens (i.i.d.
noise or a window of real text) with items (needles, statements) inserted at chosen places.

Items are inserted "stars and bars": item t of n (in sequence order) goes after ``offset[t]``
filler tokens, with offsets sorted (0 <= offset[0] <= ... <= offset[n-1] <= F for F filler
tokens), so it starts at ``offset[t] + (lengths of the items before it)``. Every placement of
non-overlapping items is one such offset vector, and uniform offsets give a uniform depth.

This module holds what the tasks' checks read (the haystack's text, the markers' layout); the
filler, the offsets and the insertion in JAX are `tasks/sampling/haystack.py`.
"""

from __future__ import annotations

import numpy as np

from rope_lab.tasks.corpora import builtin_text, is_builtin

NOISE = "noise"
_TEXT: dict[str, np.ndarray] = {}


def is_noise(haystack: str) -> bool:
    """Whether ``haystack`` asks for i.i.d. noise tokens (else it names a text)."""
    return haystack == NOISE


def haystack_text(haystack: str) -> np.ndarray:
    """The bytes (n,) uint8 of a text haystack: a built-in corpus (``builtin:python-docs``) or
    a file path, read once."""
    if is_builtin(haystack):
        return builtin_text(haystack)
    if haystack not in _TEXT:
        try:
            data = np.fromfile(haystack, dtype=np.uint8)
        except OSError as err:
            raise ValueError(
                f"haystack={haystack!r}: not 'noise' nor a readable text ({err})"
            ) from None
        data.setflags(write=False)
        _TEXT[haystack] = data
    return _TEXT[haystack]


class MarkedLayout:
    """The vocabulary head shared by the haystack tasks: three markers at `base` (0 for a
    noise haystack, 256 for text, whose bytes come first), then the task's own ids from
    `first_id`. Mixed into a task dataclass with a `haystack` field."""

    haystack: str

    @property
    def base(self) -> int:
        """Id of the first marker (0 for noise, 256 for text)."""
        return 0 if is_noise(self.haystack) else 256

    @property
    def QUERY(self) -> int:
        """The marker before what is asked."""
        return self.base + 1

    @property
    def ANSWER(self) -> int:
        """The marker before the answer."""
        return self.base + 2

    @property
    def first_id(self) -> int:
        """The first id after the three markers."""
        return self.base + 3
