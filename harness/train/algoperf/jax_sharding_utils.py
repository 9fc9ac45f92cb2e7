"""Stand-in for AlgoPerf's ``algoperf.jax_sharding_utils`` on the harness's one device.

AlgoPerf's JAX submissions jit their step with ``in_shardings``/``out_shardings`` built from these
helpers (replicated state, batch split along its first axis over a ``("batch",)`` mesh). An
AlgoPerf trial on the harness trains on one device, the process's default one, so every sharding
here is over a one-device mesh: "replicated" and "split along the batch" place the whole array on
that device, and the jitted step computes exactly what it would without shardings.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["display_shard_info", "get_batch_dim_sharding", "get_mesh", "get_naive_sharding_spec",
           "get_replicate_sharding", "replicate", "shard_along_batch_dim"]


def get_mesh() -> Mesh:
    """The ``("batch",)`` mesh of the one device the trial trains on (the default device)."""
    device = jax.config.jax_default_device or jax.devices()[0]
    if isinstance(device, str):  # a platform name
        device = jax.devices(device)[0]
    return Mesh([device], ("batch",))


def get_replicate_sharding() -> NamedSharding:
    """A sharding that replicates an array over the mesh (here: puts it on the one device)."""
    return NamedSharding(get_mesh(), PartitionSpec())


def get_batch_dim_sharding() -> NamedSharding:
    """A sharding that splits an array's first axis over the mesh (here: one piece)."""
    return NamedSharding(get_mesh(), PartitionSpec("batch"))


def get_naive_sharding_spec(x: Any = None) -> NamedSharding:
    """Older submissions' name for the batch-split sharding (``x`` is ignored)."""
    del x
    return get_batch_dim_sharding()


def shard_along_batch_dim(tree: Any) -> Any:
    """Every array of ``tree`` placed with :func:`get_batch_dim_sharding`."""
    sharding = get_batch_dim_sharding()
    return jax.tree.map(lambda a: jax.device_put(a, sharding), tree)


def replicate(tree: Any) -> Any:
    """Every array of ``tree`` placed with :func:`get_replicate_sharding`."""
    sharding = get_replicate_sharding()
    return jax.tree.map(lambda a: jax.device_put(a, sharding), tree)


def display_shard_info(x: jax.Array) -> None:
    """Print where each shard of ``x`` lives."""
    for shard in x.addressable_shards:
        print(f"shard.device: {shard.device}, index: {shard.index}, replica_id: {shard.replica_id}.")
