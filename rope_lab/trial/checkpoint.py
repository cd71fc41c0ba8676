"""Checkpointing of training state (Equinox model, optax state, step, extra) with orbax.

A checkpoint step directory holds up to four orbax items:

* ``model``: the array leaves of ``eqx.filter(model, eqx.is_array)`` as a flat list,
* ``opt_state``: the array leaves of the optimizer state, likewise,
* ``extra``: a small JSON dict (e.g. the data-stream position),
* ``meta``: JSON with the shape/dtype of every saved leaf, used to check skeletons on restore.

Only array leaves are written; everything else (static fields, activation functions,
``optax.EmptyState``, ``None``) is taken from the skeletons passed to :meth:`restore`. Leaves
are stored as flat lists rather than as the pytrees themselves so that the on-disk layout does
not depend on how Equinox or optax register their nodes.

A checkpoint step or a ``model.eqx`` that cannot be read raises
`rope_lab.runtime.checked_files.CorruptFile` naming it; restoring the latest step falls back to
the previous readable one, with a warning naming the damaged step.
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import equinox as eqx
import jax
import numpy as np
import orbax.checkpoint as ocp

from rope_lab.runtime.atomic import atomic_write
from rope_lab.runtime.checked_files import CorruptFile, corrupt, rerun_hint, size_note
from rope_lab.trial.parallel import to_default_device

__all__ = ["TrialCheckpointer", "load_model", "save_model"]

T = TypeVar("T")
ModelT = TypeVar("ModelT")
OptT = TypeVar("OptT")

_FORMAT_VERSION = 1
_NPY_MAGIC = b"\x93NUMPY"  # every leaf `eqx.tree_serialise_leaves` writes starts with it


def _is_key_array(x: Any) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _is_arraylike(x: Any) -> bool:
    return eqx.is_array(x) or isinstance(x, jax.ShapeDtypeStruct)


def _leaves(tree: Any) -> list[Any]:
    """Array leaves (concrete or ``ShapeDtypeStruct``) of ``tree`` in flattening order."""
    return jax.tree_util.tree_leaves(eqx.filter(tree, _is_arraylike))


def _to_saveable(leaves: list[Any]) -> tuple[list[Any], dict[str, str]]:
    """Replace typed PRNG keys by their raw key data; return the data and ``{index: impl}``."""
    keys = {str(i): str(jax.random.key_impl(x)) for i, x in enumerate(leaves) if _is_key_array(x)}
    return [jax.random.key_data(x) if _is_key_array(x) else x for x in leaves], keys


def _spec(leaves: list[Any]) -> list[list[Any]]:
    return [[list(x.shape), str(np.dtype(x.dtype))] for x in leaves]


def _abstract(leaf: Any) -> jax.ShapeDtypeStruct:
    """Restore target for one skeleton leaf, keeping its sharding when it has one."""
    sharding = getattr(leaf, "sharding", None)
    if not isinstance(sharding, jax.sharding.Sharding):
        sharding = None
    if _is_key_array(leaf):
        leaf = jax.eval_shape(jax.random.key_data, leaf)
    return jax.ShapeDtypeStruct(tuple(leaf.shape), leaf.dtype, sharding=sharding)


def _rebuild(like: Any, restored: list[Any], keys: dict[str, str]) -> Any:
    """Put restored leaves back into the structure of ``like`` (static parts from ``like``)."""
    arrays_like, static = eqx.partition(like, _is_arraylike)
    like_leaves, treedef = jax.tree_util.tree_flatten(arrays_like)
    leaves = []
    for i, (old, new) in enumerate(zip(like_leaves, restored, strict=True)):
        if str(i) in keys:
            new = jax.random.wrap_key_data(new, impl=keys[str(i)])
        elif isinstance(old, np.ndarray | np.generic):
            new = np.asarray(new)
        leaves.append(new)
    return eqx.combine(jax.tree_util.tree_unflatten(treedef, leaves), static)


class TrialCheckpointer:
    """Periodic checkpoints of one trial's training state in ``directory``.

    ``save`` blocks until the checkpoint is durably committed (unless ``async_save=True``), so a
    process killed right after ``save`` returns can always restore that step. Incomplete
    checkpoints left by a crash during a save are ignored and cleaned up on the next open.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        every: int,
        max_to_keep: int = 2,
        async_save: bool = False,
    ) -> None:
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        if max_to_keep < 1:
            raise ValueError(f"max_to_keep must be >= 1, got {max_to_keep}")
        self.directory = Path(directory).absolute()
        self.every = every
        self.async_save = async_save
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            create=True,
            cleanup_tmp_directories=True,
            enable_async_checkpointing=async_save,
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options)
        self._closed = False

    def latest_step(self) -> int | None:
        """Highest committed step, or ``None`` when there is no checkpoint."""
        steps = self._manager.all_steps()
        return max(steps) if steps else None

    def all_steps(self) -> list[int]:
        """All committed steps, ascending."""
        return sorted(self._manager.all_steps())

    def should_save(self, step: int) -> bool:
        """Whether ``save(step, ...)`` without ``force`` would write a checkpoint."""
        return step % self.every == 0

    def save(
        self,
        step: int,
        model: Any,
        opt_state: Any,
        extra: dict[str, Any] | None = None,
        *,
        force: bool = False,
    ) -> bool:
        """Save when ``step % every == 0`` or ``force``; return whether a checkpoint was written.

        A step that is already checkpointed is not written again (returns ``False``).
        """
        if not (force or self.should_save(step)):
            return False
        if step in self._manager.all_steps():
            return False
        model_leaves, model_keys = _to_saveable(_leaves(model))
        opt_leaves, opt_keys = _to_saveable(_leaves(opt_state))
        meta = {
            "format": _FORMAT_VERSION,
            "model": {"spec": _spec(model_leaves), "keys": model_keys},
            "opt_state": {"spec": _spec(opt_leaves), "keys": opt_keys},
        }
        items: dict[str, Any] = {
            "extra": ocp.args.JsonSave(dict(extra or {})),
            "meta": ocp.args.JsonSave(meta),
        }
        # orbax refuses empty pytrees; an item without arrays is simply not written.
        if model_leaves:
            items["model"] = ocp.args.StandardSave(model_leaves)
        if opt_leaves:
            items["opt_state"] = ocp.args.StandardSave(opt_leaves)
        saved = self._manager.save(step, args=ocp.args.Composite(**items), force=True)
        if not self.async_save:
            self._manager.wait_until_finished()
        return bool(saved)

    def restore(
        self, model_like: ModelT, opt_state_like: OptT, step: int | None = None
    ) -> tuple[ModelT, OptT, int, dict[str, Any]]:
        """Restore ``(model, opt_state, step, extra)`` from ``step`` (default: the latest).

        ``model_like`` / ``opt_state_like`` give the structure, static parts and restore
        targets; their array leaves may be concrete arrays or ``jax.ShapeDtypeStruct``s (e.g.
        from ``eqx.filter_eval_shape``). Raises ``FileNotFoundError`` when there is nothing to
        restore and ``ValueError`` when the skeletons do not match the checkpoint.
        """
        self._manager.wait_until_finished()
        if step is not None:
            if step not in self._manager.all_steps():
                raise FileNotFoundError(f"no checkpoint for step {step} in {self.directory}")
            return self._restore_step(model_like, opt_state_like, step)
        steps = self.all_steps()[::-1]
        if not steps:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        for newer, older in itertools.pairwise(steps):
            try:
                return self._restore_step(model_like, opt_state_like, newer)
            except CorruptFile as err:
                warnings.warn(f"{err}; restoring step {older} instead", stacklevel=2)
        return self._restore_step(model_like, opt_state_like, steps[-1])

    def _restore_step(
        self, model_like: ModelT, opt_state_like: OptT, step: int
    ) -> tuple[ModelT, OptT, int, dict[str, Any]]:
        """`restore` of one committed step; CorruptFile naming the step when orbax cannot read
        it (a skeleton that does not match stays a ValueError)."""
        where = self.directory / str(step)
        hint = f"delete {where} to resume from the step before it"
        try:
            meta = self._manager.restore(
                step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())
            ).meta
            if not all(isinstance(meta.get(k), dict) for k in ("model", "opt_state")):
                raise ValueError("meta lacks the model / opt_state leaf specs")
        except Exception as err:
            raise corrupt(where, "is a damaged checkpoint step (meta)", err, hint=hint) from None
        model_abs = [_abstract(x) for x in _leaves(model_like)]
        opt_abs = [_abstract(x) for x in _leaves(opt_state_like)]
        for name, abstract in (("model", model_abs), ("opt_state", opt_abs)):
            if _spec(abstract) != meta[name]["spec"]:
                raise ValueError(
                    f"{name} skeleton does not match checkpoint step {step} in {self.directory}: "
                    f"checkpoint leaves (shape, dtype) {meta[name]['spec']}, "
                    f"skeleton {_spec(abstract)}"
                )
        items: dict[str, Any] = {"extra": ocp.args.JsonRestore()}
        if model_abs:
            items["model"] = ocp.args.StandardRestore(model_abs)
        if opt_abs:
            items["opt_state"] = ocp.args.StandardRestore(opt_abs)
        try:
            restored = self._manager.restore(step, args=ocp.args.Composite(**items))
        except Exception as err:
            raise corrupt(where, "is a damaged checkpoint step", err, hint=hint) from None
        model = _rebuild(
            model_like, list(restored.model) if model_abs else [], meta["model"]["keys"]
        )
        opt_state = _rebuild(
            opt_state_like,
            list(restored.opt_state) if opt_abs else [],
            meta["opt_state"]["keys"],
        )
        extra = restored.extra
        return model, opt_state, int(step), dict(extra) if extra else {}

    def wait_until_finished(self) -> None:
        """Block until any in-flight asynchronous save has been committed."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Finish pending saves and release orbax resources (idempotent)."""
        if self._closed:
            return
        self._manager.wait_until_finished()
        self._manager.close()
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def save_model(path: str | Path, model: Any) -> Path:
    """Write ``model``'s leaves with ``eqx.tree_serialise_leaves``, atomically (readers see
    either the old file or the complete new one)."""
    return atomic_write(path, lambda f: eqx.tree_serialise_leaves(f, model))


def load_model(path: str | Path, model_like: T) -> T:
    """Read a model written by :func:`save_model` into the structure of ``model_like``.

    Arrays land on the first device, as `rope_lab.trial.train.train` returns them, so a function
    compiled for the trained model (and cached on disk) is reused, not recompiled. A missing,
    truncated or foreign file raises CorruptFile naming it."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            model = eqx.tree_deserialise_leaves(f, model_like)
            left = len(f.read(1))
    except OSError as err:
        raise corrupt(path, "cannot be read", err, hint=rerun_hint(path.parent)) from None
    except Exception as err:
        with open(path, "rb") as f:
            head = f.read(len(_NPY_MAGIC))
        if not head:
            raise corrupt(path, "is empty", hint=rerun_hint(path.parent)) from None
        what = "is truncated or damaged" if head == _NPY_MAGIC else "is not a model file"
        while err.__cause__ is not None:  # equinox wraps the reader's error in the leaf path
            err = err.__cause__  # type: ignore[assignment]
        raise corrupt(
            path, f"{what} ({size_note(path)})", err, hint=rerun_hint(path.parent)
        ) from None
    if left:
        what = f"holds more than this model's leaves ({size_note(path)})"
        raise corrupt(path, what, hint=rerun_hint(path.parent))
    return to_default_device(model)
