"""An AlgoPerf trial's training state as the checkpoints of :mod:`harness.train.checkpoint` take it.

:class:`harness.train.checkpoint.UnitCheckpoints` saves a state with the fields of the trainer's
``TrainState`` (:func:`harness.train.checkpoint_state.flatten_state`): ``opt_state`` (any pytree of
arrays: its leaves are saved in order), ``model_state``, ``data_key``, ``dropout_key``,
``step_size``, ``perm``, ``perm_epoch``. An AlgoPerf trial fills a ``TrainState`` so:

* ``opt_state``: ``{"arrays": [...], "position": int32}``: every **array** leaf of
  ``(optimizer_state, params)`` in ``jax.tree.leaves`` order, and the input queue's position
  (batches drawn). Leaves that are not arrays (the update function AlgoPerf's baselines keep in
  their optimizer state, Python numbers) are not saved: on resume they are those of a fresh
  ``init_optimizer_state`` (so a submission must keep mutable state in arrays, as a jitted step
  does anyway).
* ``model_state``: the model state (BatchNorm statistics); the two keys as the trainer's.
* ``step_size``, ``perm``, ``perm_epoch``: placeholders (``0.0``, ``[0]``, ``-1``), unused: the
  data order is a function of the queue's position.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from harness.train.program import TrainState

__all__ = ["array_leaves", "pack", "unpack"]


def _is_array(x: Any) -> bool:
    return isinstance(x, jax.Array | np.ndarray)


def array_leaves(tree: Any) -> list[Any]:
    """The array leaves of ``tree``, in ``jax.tree.leaves`` order."""
    return [x for x in jax.tree.leaves(tree) if _is_array(x)]


def pack(optimizer_state: Any, params: Any, model_state: Any, data_key: jax.Array,
         dropout_key: jax.Array, position: int) -> TrainState:
    """The checkpointable :class:`~harness.train.program.TrainState` of a trial's state."""
    return TrainState(
        {"arrays": array_leaves((optimizer_state, params)), "position": jnp.int32(position)},
        model_state, data_key, dropout_key, jnp.float32(0.0), jnp.zeros((1,), jnp.int32), jnp.int32(-1))


def unpack(state: TrainState, fresh_optimizer_state: Any,
           fresh_params: Any) -> tuple[Any, Any, Any, int]:
    """``(optimizer_state, params, model_state, position)``: the saved arrays put back into the
    structure of a freshly initialised ``(optimizer_state, params)`` (its other leaves kept).

    Raises:
      ValueError: the number of array leaves differs (a checkpoint of another submission).
    """
    leaves, treedef = jax.tree.flatten((fresh_optimizer_state, fresh_params))
    saved = iter(state.opt_state["arrays"])
    n_saved = len(state.opt_state["arrays"])
    if n_saved != sum(_is_array(x) for x in leaves):
        raise ValueError(f"checkpoint holds {n_saved} arrays; this submission's state has "
                         f"{sum(_is_array(x) for x in leaves)}")
    new = [next(saved) if _is_array(x) else x for x in leaves]
    optimizer_state, params = jax.tree.unflatten(treedef, new)
    return optimizer_state, params, state.model_state, int(state.opt_state["position"])
