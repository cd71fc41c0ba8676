"""Windows of a token stream, shared by the text tasks (``lm_text``, ``lm_tokens``).

A window of length L is L + 1 consecutive tokens (inputs and their shifted targets). Three ways
to take them, one implementation each:

- ``sample_windows`` (`tasks/sampling/windows.py`, JAX): B uniformly random windows of a device
  array, from a JAX key (inside a jitted sampler; ``lm_text`` training, and every random
  evaluation batch).
- :func:`host_window_starts` and :func:`gather_windows`: B random windows of a host array
  (e.g. an ``np.memmap`` of a token file), whose starts are a function of (seed, step) only, so
  a resumed run reads exactly the windows it would have read (``lm_tokens`` training).
- :func:`text_windows`: every window of a whole held-out text under Press et al.'s
  ``nonoverlapping`` / ``sliding`` protocols (evaluation).
"""

from __future__ import annotations

import numpy as np

TEXT_PROTOCOLS = ("random", "nonoverlapping", "sliding")


def host_window_starts(seed: int, step: int, batch_size: int, n_starts: int) -> np.ndarray:
    """The B window starts (B,) int64 in [0, n_starts) of training step ``step``: a function of
    (seed, step) only, from PCG64's raw 64-bit output (stable across NumPy releases; modulo
    bias below n_starts / 2**64)."""
    if n_starts < 1:
        raise ValueError(f"no window fits: n_starts={n_starts}")
    seq = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(step), 0x6C6D])
    raw = np.random.PCG64(seq).random_raw(batch_size)
    return (np.asarray(raw, dtype=np.uint64) % np.uint64(n_starts)).astype(np.int64)


def gather_windows(data: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """Rows ``data[s : s + L + 1]`` for each start: (B, L + 1) int32. On an ``np.memmap`` this
    reads only those B slices from the file (never the whole of it)."""
    out = np.empty((starts.size, length + 1), dtype=np.int32)
    for i, s in enumerate(starts.tolist()):
        out[i] = data[s : s + length + 1]
    return out


def window_step(length: int, protocol: str, stride: int | None = None) -> int:
    """Tokens between the starts of consecutive windows (:func:`text_windows`)."""
    if protocol == "nonoverlapping":
        return length
    if protocol == "sliding":
        if stride is None or not 0 < stride <= length:
            raise ValueError(f"sliding windows need 0 < stride <= length={length}, got {stride}")
        return stride
    raise ValueError(f"unknown text protocol {protocol!r}; allowed: {TEXT_PROTOCOLS[1:]}")


def window_count(size: int, length: int, protocol: str, stride: int | None = None) -> int:
    """How many windows :func:`text_windows` cuts from a text of ``size`` tokens."""
    n = size - 1
    return 0 if n < length else (n - length) // window_step(length, protocol, stride) + 1


def text_windows(
    data: np.ndarray, length: int, protocol: str, stride: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The evaluation windows of Press et al. (2022) over a whole text ``data`` (n,): tokens and
    targets (W, L) int32 and the scored mask (W, L).

    ``nonoverlapping``: consecutive windows starting at 0, L, 2L, ..., every position scored
    (early positions see little context). ``sliding``: windows starting every ``stride`` tokens,
    each scoring only its last ``stride`` positions (the first window scores all), so every
    token after the first window is scored once with at least L - stride tokens of context.
    Either way the same text is read at every length, so lengths compare like for like; tokens
    after the last whole window are left out.
    """
    step = window_step(length, protocol, stride)
    n = int(data.size) - 1  # targets need one token more
    if n < length:
        raise ValueError(f"{n + 1} tokens are too few for one window of length {length}")
    starts = np.arange(0, n - length + 1, step)
    index = starts[:, None] + np.arange(length)[None, :]
    mask = np.ones((starts.size, length), dtype=bool)
    if protocol == "sliding":
        mask[1:, : length - step] = False
    return data[index].astype(np.int32), data[index + 1].astype(np.int32), mask
