"""Deterministic, length-generic synthetic tasks for length-extrapolation experiments.

Every task produces a :class:`Batch` for a causal LM (see :mod:`rope_lab.tasks.base`). Each task
is one module of this package: its parameters, a frozen dataclass registered in
``registry.TASKS`` (with its ``display_name`` and listing ``order``), and its task class.
``TASKS`` here maps names to task classes; :func:`make_task` builds a task by name. This package
imports no JAX: each task's sampler is a module of the subpackage ``sampling``, imported when the
task samples, and ``rope_lab.tasks.sampling.sample_batch`` validates and samples under jit.

Large, fixed arrays a task needs (the Markov source of ``lm_synthetic``, the bytes of
``lm_text``) are *operands*: ``sample_batch`` passes them to the jitted sampler as arguments
instead of baking them into the compiled program as constants.
"""

import importlib
import pkgutil

from rope_lab.tasks.base import SPLITS, Batch, Operands, Task, TaskParams
from rope_lab.tasks.copy import CopyParams, CopyTask
from rope_lab.tasks.factory import TASKS, check_trial, make_task, task_from_config
from rope_lab.tasks.flipflop import FlipFlopParams, FlipFlopTask
from rope_lab.tasks.mqar import MQARParams, MQARTask
from rope_lab.tasks.passkey import PasskeyParams, PasskeyTask
from rope_lab.tasks.synthetic_lm import SyntheticLMParams, SyntheticLMTask
from rope_lab.tasks.text_lm import TextLMParams, TextLMTask, text_split_bounds

# Every module registers its task on import, so a new task is one new module (its `order`
# places it in listings) and its sampler in the subpackage `sampling` (JAX), imported when the
# task samples.
for _module in pkgutil.iter_modules(__path__):
    if not _module.ispkg:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "SPLITS",
    "TASKS",
    "Batch",
    "CopyParams",
    "CopyTask",
    "FlipFlopParams",
    "FlipFlopTask",
    "MQARParams",
    "MQARTask",
    "Operands",
    "PasskeyParams",
    "PasskeyTask",
    "SyntheticLMParams",
    "SyntheticLMTask",
    "Task",
    "TaskParams",
    "TextLMParams",
    "TextLMTask",
    "check_trial",
    "make_task",
    "task_from_config",
    "text_split_bounds",
]
