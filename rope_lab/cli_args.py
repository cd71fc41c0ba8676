"""Argument types of the `rope-lab` command line: every number is range-checked when the
arguments are parsed, so a bad one stops the command before any work with argparse's one-line
error naming the option (`argument --min-seeds: must be an integer >= 1, got '0'`)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _integer(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low:
        raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (a count of seeds, resamples)."""
    return _integer(text, 1)


def non_negative_int(text: str) -> int:
    """An integer >= 0 (where 0 means none, or all, as the option's help says)."""
    return _integer(text, 0)


def _number(text: str, accept: Callable[[float], bool], wanted: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and accept(value)):
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (a rate, a ratio of lengths)."""
    return _number(text, lambda v: v > 0, "a finite number > 0")


def fraction(text: str) -> float:
    """A number strictly between 0 and 1."""
    return _number(text, lambda v: 0 < v < 1, "a number in (0, 1)")
