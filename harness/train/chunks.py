"""The pieces a training chunk is made of: the batch order (its own compiled program, shared by
every program with that split, batch size and K) and the two chunk callables: :class:`Chunk` (order,
then K updates in one scan) and :class:`LoopChunk` (K dispatches of one step, for convolutions
XLA:CPU runs slowly inside a loop)."""

from __future__ import annotations

import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from harness.train.build import ModelEntry
from models import stax
from models.flops import conv_flops

__all__ = ["ORDERS", "Chunk", "LoopChunk", "batch_order", "forward_conv_flops", "order_program"]


def batch_order(data_key: jax.Array, perm: jax.Array, perm_epoch: jax.Array, start: jax.Array, *, n: int,
                batch_size: int, num_train: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(idx int32 (n, batch_size), perm int32 (num_train,), perm_epoch int32 ())``: the training
    examples of updates ``start .. start + n - 1`` and the permutation of the last epoch they touch.

    Epoch ``e``'s order is ``jax.random.permutation(fold_in(data_key, e), num_train)``; update ``i``
    takes examples ``i * batch_size .. (i + 1) * batch_size - 1`` of the concatenated epochs. ``perm``
    is the permutation of epoch ``perm_epoch`` (-1: none yet), carried from the previous chunk so that
    each epoch's permutation is computed once; later epochs are computed only when reached
    (``lax.cond``: one branch runs, except under vmap)."""
    B, N = batch_size, num_train
    n_ep = -(-n * B // N) + 1
    first = start * B
    e0 = first // N
    e_last = (first + n * B - 1) // N

    def perm_of(e):
        return jax.random.permutation(jax.random.fold_in(data_key, e), N).astype(jnp.int32)

    perms = [jax.lax.cond(perm_epoch == e0, lambda: perm, lambda: perm_of(e0))]
    zeros = jnp.zeros((N,), jnp.int32)
    for j in range(1, n_ep):
        perms.append(jax.lax.cond(e0 + j <= e_last, lambda j=j: perm_of(e0 + j), lambda: zeros))
    perms = jnp.stack(perms)
    idx = perms.reshape(-1)[first - e0 * N + jnp.arange(n * B)].reshape(n, B)
    return idx, perms[e_last - e0], e_last.astype(jnp.int32)


#: The process's compiled batch-order programs (:func:`order_program`).
ORDERS: dict[tuple, Any] = {}


def order_program(T: int | None, n: int, batch_size: int, num_train: int, data_key: jax.Array) -> Any:
    """The compiled :func:`batch_order` for ``n`` updates of ``batch_size`` from ``num_train``
    examples (vmapped over ``T`` trials unless None; ``data_key`` gives the key's shape and dtype):
    ``exe(data_key, perm, perm_epoch, start) -> (idx, perm, perm_epoch)``. One per process and key,
    shared by every program with that training split, batch size and chunk length."""
    key = (T, n, batch_size, num_train, data_key.shape, str(data_key.dtype))
    exe = ORDERS.get(key)
    if exe is None:
        def fn(k, p, e, t):
            return batch_order(k, p, e, t, n=n, batch_size=batch_size, num_train=num_train)

        if T is not None:
            fn = jax.vmap(fn, in_axes=(0, 0, 0, None))
        lead = () if T is None else (T,)
        args = (jax.ShapeDtypeStruct(data_key.shape, data_key.dtype),
                jax.ShapeDtypeStruct((*lead, num_train), jnp.int32),
                jax.ShapeDtypeStruct(lead, jnp.int32), jax.ShapeDtypeStruct((), jnp.int32))
        exe = ORDERS[key] = jax.jit(fn).lower(*args).compile()
    return exe


class Chunk:
    """A one-device training chunk: the batch order, then the updates (state donated).
    ``exe(state, start, x, y) -> (state, losses)`` as one jitted chunk would be."""

    def __init__(self, order_exe: Any, steps_exe: Any):
        self.order_exe, self.steps_exe = order_exe, steps_exe

    def __call__(self, state: Any, start: jax.Array, x: jax.Array, y: jax.Array):
        idx, perm, perm_epoch = self.order_exe(state.data_key, state.perm, state.perm_epoch, start)
        return self.steps_exe(state._replace(perm=perm, perm_epoch=perm_epoch), start, idx, x, y)


#: model entry -> {batch size: its forward pass's convolution FLOPs}
CONV_FWD: weakref.WeakKeyDictionary[ModelEntry, dict[int, float]] = weakref.WeakKeyDictionary()


def forward_conv_flops(entry: ModelEntry, batch: int, x: jax.Array) -> float:
    """The convolution FLOPs of ``entry``'s training forward pass at ``batch`` examples (traced once,
    abstractly: nothing compiled or run)."""
    per = CONV_FWD.setdefault(entry, {})
    if batch not in per:
        params, mstate = jax.eval_shape(entry.init_params, jax.random.PRNGKey(0))
        xb = jax.ShapeDtypeStruct((batch, *x.shape[1:]), x.dtype)
        rng = jax.random.PRNGKey(0) if entry.needs_rng else None

        def fwd(p, m, xb):
            return entry.forward(p, m, entry.decode(xb), rng=rng, train=True)

        with stax.conv_outside_loops():
            per[batch] = conv_flops(fwd, params, mstate, xb)
    return per[batch]


class LoopChunk:
    """A one-device chunk of ``n`` steps as ``n`` dispatches of one compiled step (no loop in it, so
    XLA:CPU runs its convolutions at full speed: ``program.CONV_LOOP_FLOPS``). Same interface and
    values as :class:`Chunk`; ``steps_exe`` is the one-step executable."""

    def __init__(self, order_exe: Any, steps_exe: Any, n: int):
        self.order_exe, self.steps_exe, self.n = order_exe, steps_exe, n

    def __call__(self, state: Any, start: jax.Array, x: jax.Array, y: jax.Array):
        idx, perm, perm_epoch = self.order_exe(state.data_key, state.perm, state.perm_epoch, start)
        state = state._replace(perm=perm, perm_epoch=perm_epoch)
        t0, losses = int(start), []
        for j in range(self.n):
            state, loss = self.steps_exe(state, np.int32(t0 + j), idx[..., j:j + 1, :], x, y)
            losses.append(loss)
        return state, jnp.concatenate(losses, axis=-1)


class MeshLoopChunk:
    """A mesh chunk of ``n`` steps as ``n`` dispatches of one compiled step (the mesh twin of
    :class:`LoopChunk`): ``order_exe(state, start) -> (idx, state)``, then ``steps_exe(state, t,
    idx[..., j:j + 1, :], x, y)`` per step ``t = start + j``; the same interface and values as the
    one-executable mesh chunk."""

    def __init__(self, order_exe: Any, steps_exe: Any, n: int):
        self.order_exe, self.steps_exe, self.n = order_exe, steps_exe, n

    def __call__(self, state: Any, start: jax.Array, x: jax.Array, y: jax.Array):
        idx, state = self.order_exe(state, start)
        losses = []
        for j in range(self.n):
            state, loss = self.steps_exe(state, start + j, idx[..., j:j + 1, :], x, y)
            losses.append(loss)
        return state, jnp.concatenate(losses, axis=-1)
