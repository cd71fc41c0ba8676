"""The task interface: :class:`Batch`, the :class:`Task` base class and shared helpers.

A task draws a sequence ``seq`` of ``length + 1`` real tokens (no padding), then
``tokens = seq[:, :-1]``, ``targets = seq[:, 1:]``, and ``mask`` marks the positions ``t`` whose
prediction of ``targets[:, t]`` is scored.

A task's parameters are a frozen dataclass (:class:`TaskParams`) registered in
``registry.TASKS``; its task class (hashable, so a static argument of :func:`jax.jit`) adds
``vocab_size``, the checks and the sampler. This module and the task modules import no JAX: a
task's ``_sample`` (and the ``operands`` of a task that holds data) import its sampler from
``rope_lab.tasks.sampling`` when it samples.
"""

from __future__ import annotations

import abc
import dataclasses
import difflib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Self, TypeAlias

import numpy as np

if TYPE_CHECKING:
    import jax

# the fixed device arrays a sampler reads (`Task.operands`)
Operands: TypeAlias = "tuple[jax.Array, ...]"
SPLITS = ("train", "eval")


class Batch(NamedTuple):
    """One batch for a causal LM.

    tokens:  (B, L) int32, model input.
    targets: (B, L) int32, ``targets[:, t]`` is what position ``t`` predicts (= tokens shifted).
    mask:    (B, L) bool, which positions are scored.
    """

    tokens: jax.Array
    targets: jax.Array
    mask: jax.Array


def check_int(task: Task, name: str, minimum: int | None = None) -> int:
    """Check that field ``name`` of ``task`` is an int >= ``minimum``; normalise it to ``int``."""
    value = getattr(task, name)
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{task.name}: {name} must be an integer, got {name}={value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{task.name}: {name} must be >= {minimum}, got {name}={value}")
    object.__setattr__(task, name, value)
    return value


def check_float(task: Task, name: str, low: float, high: float, *, low_open: bool = False) -> float:
    """Check that field ``name`` is a real number in [low, high] (or (low, high]); make it float."""
    value = getattr(task, name)
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{task.name}: {name} must be a number, got {name}={value!r}")
    value = float(value)
    too_low = value <= low if low_open else value < low
    if not math.isfinite(value) or too_low or value > high:
        bracket = "(" if low_open else "["
        raise ValueError(
            f"{task.name}: {name} must be in {bracket}{low}, {high}], got {name}={value!r}"
        )
    object.__setattr__(task, name, value)
    return value


def check_size(name: str, value: Any, check_positive: bool = True) -> int:
    """Check a static size argument (``length`` or ``batch_size``) is an int (>= 1)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer, got {name}={value!r}")
    if check_positive and value < 1:
        raise ValueError(f"{name} must be >= 1, got {name}={value}")
    return int(value)


def check_split(split: str) -> None:
    """Raise ValueError unless ``split`` is one of :data:`SPLITS`."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got split={split!r}")


def _did_you_mean(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


@dataclass(frozen=True)
class TaskParams:
    """Base of the entry a task registers in ``registry.TASKS``: a typed frozen dataclass whose
    fields are the task's parameters (names, types and defaults), with no checks of their own.

    Its task class subclasses it and :class:`Task` (adding ``vocab_size``; declaring it sets
    ``task_class``), so a task's parameters are fields of the task too. Class attributes:
    ``name`` (set by the registry), ``display_name`` (figures and tables), ``default_metric``
    (what tables and plots read by default: "accuracy", "loss", or "bits_per_byte" for a
    language model whose tokens stand for bytes of text; analysis reads loss where the rows lack
    bits per byte) and ``is_text`` (the task reads a corpus whose ``train`` and ``eval`` splits
    hold different text).
    """

    name: ClassVar[str]
    display_name: ClassVar[str]
    order: ClassVar[int]  # rank in listings (registry order)
    is_text: ClassVar[bool] = False
    default_metric: ClassVar[str] = "accuracy"  # what tables and plots read without --metric
    # every sequence's scored targets are one answer at its end (decode evaluation applies)
    answer_at_end: ClassVar[bool] = False
    # a `depth` parameter places the answer's evidence at a relative depth of the context, and
    # `eval.depths` evaluates the trained model at each of a grid of them (`Task.at_depth`)
    has_depth: ClassVar[bool] = False
    task_class: ClassVar[type[Task]]

    @classmethod
    def param_fields(cls) -> tuple[dataclasses.Field, ...]:
        """The parameters, in order: every init field but a task class's ``vocab_size``."""
        return tuple(f for f in dataclasses.fields(cls) if f.init and f.name != "vocab_size")

    @classmethod
    def from_kwargs(cls, **params: Any) -> Self:
        """The parameters given by name; ValueError naming an unknown or a missing one."""
        fields = cls.param_fields()
        allowed = [f.name for f in fields]
        for param in params:
            if param not in allowed:
                raise ValueError(
                    f"unknown parameter {param!r} for task {cls.name!r}; valid parameters: "
                    f"{', '.join(allowed) or '(none)'}.{_did_you_mean(param, allowed)}"
                )
        required = (
            f.name
            for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        missing = [p for p in required if p not in params]
        if missing:
            raise ValueError(f"task {cls.name!r} needs parameter(s): {', '.join(missing)}")
        return cls(**params)

    def data_identity(self) -> str | None:
        """What the task's data is, when its parameters do not say it (a prepared corpus'
        fingerprint: the folder a path names can be prepared again with other text): trial
        ids hash it. None: the parameters say it."""
        return None

    def values(self) -> dict[str, Any]:
        """Parameter values by name."""
        return {f.name: getattr(self, f.name) for f in self.param_fields()}

    def build(self, vocab_size: int) -> Task:
        """The task with these parameters; ValueError (naming the field) for an invalid value."""
        return self.task_class(vocab_size, **self.values())


@dataclass(frozen=True)
class Task(abc.ABC):
    """Base class of all tasks. ``vocab_size`` is the model vocabulary size V.

    A registered task class is ``class XTask(XParams, Task)`` for its :class:`TaskParams`
    subclass ``XParams``, whose ``name`` it shares.
    """

    vocab_size: int
    name: ClassVar[str] = "task"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__bases__:
            if issubclass(base, TaskParams) and not issubclass(base, Task):
                base.task_class = cls

    def __post_init__(self) -> None:
        check_int(self, "vocab_size", 1)
        self._check_params()
        need = self.min_vocab_size()
        if self.vocab_size < need:
            raise ValueError(
                f"{self.name}: vocab_size={self.vocab_size} is too small, need vocab_size >= "
                f"{need} ({self._vocab_explanation()})"
            )

    # -- to override ---------------------------------------------------------------------------
    @abc.abstractmethod
    def _check_params(self) -> None:
        """Validate (and normalise) the task's own fields; raise ValueError naming the field."""

    @abc.abstractmethod
    def min_vocab_size(self) -> int:
        """Smallest vocab_size the task supports with its current parameters."""

    def _vocab_explanation(self) -> str:
        return "see the class docstring for the vocabulary layout"

    @abc.abstractmethod
    def min_length(self) -> int:
        """Shortest sequence length L the task can generate."""

    def _min_length_explanation(self) -> str:
        return ""

    def operands(self, split: str = "train") -> Operands:
        """Fixed device arrays the sampler needs for ``split`` ("train" or "eval"), passed to
        jitted samplers as arguments, not constants. Tasks that hold data (``lm_text``) give
        each split its own part; generative tasks give both splits the same operands."""
        check_split(split)
        return ()

    # The training data is not held on the device: `host_batch` gathers each step's on the host.
    host_fed: ClassVar[bool] = False

    def host_batch(
        self, batch_size: int, length: int, *, seed: int, step: int
    ) -> tuple[np.ndarray, ...]:
        """The operands of training step ``step`` gathered on the host, for a ``host_fed`` task
        (``lm_tokens``: the (B, L + 1) windows of a memory-mapped file, a function of (seed,
        step) only); ``_sample`` reads them in place of :meth:`operands`."""
        raise NotImplementedError(f"{self.name} samples on the device from operands('train')")

    def at_depth(self, depth: float) -> Self:
        """This task with its evidence at relative depth ``depth`` in [0, 1] (a task that
        ``has_depth``: its ``depth`` parameter replaced); ValueError for any other task."""
        if not getattr(self, "has_depth", False):
            raise ValueError(f"{self.name}: has no depth to set")
        return dataclasses.replace(self, depth=float(depth))  # type: ignore[call-arg]

    def token_bytes(self) -> np.ndarray | None:
        """Bytes of text each token id stands for (V,), for tasks whose tokens are text (the
        denominator of bits per byte); None for the synthetic tasks."""
        return None

    @abc.abstractmethod
    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        """Sample a batch; ``batch_size`` and ``length`` are static Python ints."""

    # -- public API ----------------------------------------------------------------------------
    def validate(self, length: int, split: str | None = "train") -> None:
        """Raise ValueError (naming the parameter) if the task cannot generate ``length`` from
        ``split`` (None: checks that hold for every split)."""
        if split is not None:
            check_split(split)
        length = check_size("length", length, check_positive=False)  # min_length() >= 1
        lo = self.min_length()
        if length < lo:
            why = self._min_length_explanation()
            raise ValueError(
                f"{self.name}: length={length} is too short, need length >= {lo}"
                + (f" ({why})" if why else "")
            )

    def sample(
        self, batch_size: int, length: int, split: str = "train", *, key: jax.Array
    ) -> Batch:
        """Sample a :class:`Batch` of shape (batch_size, length) from ``split``; jit-able.

        ``batch_size`` and ``length`` must be static. Inside a jitted function this closes over
        :meth:`operands` (embedded as constants; large for ``lm_text``): pass them as jit
        arguments with :meth:`sample_from` instead, as ``sample_batch`` does.
        """
        return self.sample_from(self.operands(split), batch_size, length, key=key)

    def sample_from(
        self, operands: Operands, batch_size: int, length: int, *, key: jax.Array
    ) -> Batch:
        """:meth:`sample` with ``operands`` (= ``self.operands(split)``) given, e.g. as jit
        args; the operands decide the split."""
        self.validate(length, split=None)
        batch_size = check_size("batch_size", batch_size)
        return self._sample(key, batch_size, int(length), tuple(operands))
