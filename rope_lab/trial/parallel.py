"""Data parallelism over the devices of one trial with `jax.sharding`.

A 1-D mesh with axis "data" spans the devices a trial uses. The batch (leading axis) is split
over "data"; parameters, optimiser state, frozen buffers and task operands are replicated. XLA's
SPMD partitioner inserts the gradient all-reduce. One device is the same code path with a
1-device mesh, so single- and multi-device runs compile the same program up to partitioning.

With `train.shard_params` (fully sharded data parallelism), parameters and optimiser state are
split over the same "data" axis instead (`shard`, `constrain_sharded`): each array along its
largest axis that the device count divides (`leaf_sharding`), so each device holds about 1/n
of them; XLA gathers a weight where a layer needs it whole and reduce-scatters its gradient.

A trial of several JAX processes (`train.processes`, `rope_lab.trial.processes`) has one mesh
over every process's devices: `train.devices` counts each process's own, and the batch splits
over all of them. Every process computes the same program on the same inputs (the batch is
sampled in the step from the same key), so putting a host value on the mesh needs no exchange.
"""

from __future__ import annotations

from typing import Any, TypeVar

import equinox as eqx
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

DATA_AXIS = "data"

Tree = TypeVar("Tree")


def resolve_devices(requested: int | None, batch_size: int) -> int:
    """Number of devices a trial trains on: `requested` per process (None: every local device)
    times the JAX processes of the trial.

    Raises ValueError naming `train.devices` when more are requested than exist, and naming
    `train.batch_size` when the batch does not split evenly over the devices.
    """
    available = jax.local_device_count()
    per_process = available if requested is None else requested
    n = per_process * jax.process_count()
    if n < 1:
        raise ValueError(f"train.devices: must be >= 1, got {requested!r}")
    if per_process > available:
        raise ValueError(
            f"train.devices: {per_process} requested but this host has {available} local "
            f"{jax.default_backend()} device(s)"
        )
    if batch_size % n:
        what = "all local devices" if requested is None else f"train.devices={requested}"
        raise ValueError(
            f"train.batch_size: {batch_size} is not divisible by the {n} devices "
            f"({what}); use a multiple of {n} or set train.devices"
        )
    return n


def data_mesh(n_devices: int | None = None) -> Mesh:
    """A 1-D mesh (axis "data") over the first `n_devices` devices (None: all of them): the
    local ones, or with several JAX processes the first `n_devices / processes` of each, in
    process order."""
    processes = jax.process_count()
    local = jax.local_device_count()
    n = local * processes if n_devices is None else n_devices
    if not 1 <= n <= local * processes or n % processes:
        most = local * processes
        raise ValueError(f"n_devices: need a multiple of {processes} in 1..{most}, got {n_devices}")
    per = n // processes
    devices = [d for p in range(processes) for d in _process_devices(p)[:per]]
    return Mesh(np.array(devices), (DATA_AXIS,))


def _process_devices(process: int) -> list[Any]:
    return sorted((d for d in jax.devices() if d.process_index == process), key=lambda d: d.id)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Sharding of batch arrays (B, ...): B split over "data", the rest whole on each device."""
    return NamedSharding(mesh, P(DATA_AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
    """Sharding of an array held whole on every device of the mesh."""
    return NamedSharding(mesh, P())


def replicate(tree: Tree, mesh: Mesh, *, copy: bool = False) -> Tree:
    """Put every array leaf of `tree` on all devices of `mesh` (non-arrays untouched).

    With `copy`, the result never aliases the input's buffers, so it can be donated while the
    caller keeps the original.
    """
    sharding = replicated(mesh)
    may_alias = False if copy else None

    def put(x: Any) -> Any:
        return place(x, sharding, may_alias=may_alias) if eqx.is_array(x) else x

    return jax.tree.map(put, tree)


def place(x: Any, sharding: NamedSharding, *, may_alias: bool | None = None) -> Any:
    """`jax.device_put(x, sharding)`, also onto a mesh spanning several processes, where JAX
    takes host values only: this process's array then goes through the host first (each process
    holds the same value)."""
    if sharding.is_fully_addressable or not isinstance(x, jax.Array) or not x.is_fully_addressable:
        return jax.device_put(x, sharding, may_alias=may_alias)
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        data = jax.device_put(np.asarray(jax.random.key_data(x)), sharding)
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    return jax.device_put(np.asarray(x), sharding)


def leaf_sharding(x: Any, mesh: Mesh) -> NamedSharding:
    """The sharded layout of one array `x` (any shape): its largest axis that the mesh's device
    count divides (the first among equals) split over "data"; whole on every device when no
    axis divides (scalars, odd sizes) or the mesh has one device."""
    n = mesh.devices.size
    shape = tuple(getattr(x, "shape", ()))
    divisible = [i for i, size in enumerate(shape) if size >= n and size % n == 0]
    if n == 1 or not divisible:
        return replicated(mesh)
    axis = max(divisible, key=lambda i: (shape[i], -i))
    spec: list[str | None] = [None] * len(shape)
    spec[axis] = DATA_AXIS
    return NamedSharding(mesh, P(*spec))


def shard(tree: Tree, mesh: Mesh, *, copy: bool = False) -> Tree:
    """Put every array leaf of `tree` on `mesh` in its `leaf_sharding` (non-arrays untouched);
    `copy` as in `replicate`."""
    may_alias = False if copy else None

    def put(x: Any) -> Any:
        return place(x, leaf_sharding(x, mesh), may_alias=may_alias) if eqx.is_array(x) else x

    return jax.tree.map(put, tree)


def constrain_sharded(tree: Tree, mesh: Mesh) -> Tree:
    """Inside jit: keep every array leaf in its `leaf_sharding` (parameters, optimiser state)."""

    def keep(x: Any) -> Any:
        return jax.lax.with_sharding_constraint(x, leaf_sharding(x, mesh)) if eqx.is_array(x) else x

    return jax.tree.map(keep, tree)


def bytes_per_device(tree: Any) -> dict[int, int]:
    """Bytes of `tree`'s array leaves held on each device (device id -> bytes), from the
    arrays' own shards."""
    held: dict[int, int] = {}
    for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array)):
        for piece in x.addressable_shards:
            held[piece.device.id] = held.get(piece.device.id, 0) + piece.data.nbytes
    return held


def constrain_batch(tree: Tree, mesh: Mesh) -> Tree:
    """Inside jit: split the leading (batch) axis of every array leaf over "data"."""
    sharding = batch_sharding(mesh)
    return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding), tree)


def constrain_replicated(tree: Tree, mesh: Mesh) -> Tree:
    """Inside jit: keep every array leaf whole on each device (parameters, optimiser state)."""
    sharding = replicated(mesh)

    def keep(x: Any) -> Any:
        return jax.lax.with_sharding_constraint(x, sharding) if eqx.is_array(x) else x

    return jax.tree.map(keep, tree)


__all__ = [
    "DATA_AXIS",
    "batch_sharding",
    "bytes_per_device",
    "constrain_batch",
    "constrain_replicated",
    "constrain_sharded",
    "data_mesh",
    "leaf_sharding",
    "place",
    "replicate",
    "replicated",
    "resolve_devices",
    "shard",
]


def to_default_device(tree: Tree) -> Tree:
    """Every array leaf of `tree` on the first local device, single-device sharded: the layout of
    a freshly built or loaded model, so evaluation compiled for one serves the other. An array
    spread over several processes is gathered whole first (every process must call this)."""
    from jax.experimental import multihost_utils

    device = jax.local_devices()[0]

    def put(x: Any) -> Any:
        if not eqx.is_array(x):
            return x
        if not x.is_fully_addressable:
            x = multihost_utils.process_allgather(x, tiled=True)
        return jax.device_put(x, device)

    return jax.tree.map(put, tree)
