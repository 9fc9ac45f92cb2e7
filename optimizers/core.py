"""Drop-in re-implementation of ``jax.example_libraries.optimizers``.

An optimizer is an ``(init_fn, update_fn, params_fn)`` triple (:class:`Optimizer`):

* ``init_fn(params) -> OptimizerState``: ``params`` is any pytree of arrays (nested
  dict/tuple/list, scalar leaves allowed); the state holds the parameters and each optimizer's
  per-leaf slots (momentum, moment estimates, ...), all with the leaf's shape and dtype.
* ``update_fn(step, grads, opt_state) -> OptimizerState``: ``step`` is the integer step index
  (Python int or int32 scalar, may be traced); ``grads`` has the structure of the parameters.
* ``params_fn(opt_state) -> params``, with ``params == params_fn(init_fn(params))``.

Every name, signature and update rule of the reference is kept, so that
``import optimizers as optimizers`` serves programs written against
``jax.example_libraries.optimizers``. Results are bitwise equal to the reference's (same
operations in the same order) with these deliberate departures, each a reference pitfall:

* ``sm3`` no longer stores each leaf's shape as integer leaves of the state (they become
  tracers under ``jit``/``lax.scan`` and break the reference's ``params_fn``); a 0-d leaf is
  marked by an empty tuple in its state instead, which carries no leaf. A reference sm3 state
  (a reference checkpoint loaded with :func:`pack_optimizer_state`) still works; a harness sm3
  state does not load into the reference.
* ``init_fn`` copies parameter leaves that are concrete ``jax.Array`` s, so that donating the
  optimizer state (as the trainer does) never deletes the caller's parameter buffers.
* Hyperparameters are taken as the reference takes them: no value the reference accepts is refused
  (a negative step size ascends, ``clip_grads(tree, 0.0)`` returns zeros, ``adam(b1=1.0)`` trains
  to NaN). The ranges that protect a sweep (``b1``/``b2`` in ``[0, 1)``, ``eps >= 0``, positive
  ``decay_steps``...) are checked by the harness where it reads a config
  (``harness/config/dropin_ranges.py``), not here.
* :func:`pack_optimizer_state` of something that is not a ``JoinPoint`` tree raises
  ``TypeError`` (the reference: ``AssertionError``).
"""

from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optimizers.common import (
    adam_moments,
    fresh,
    params_of,
    tree_mismatch,
    with_two_zeros,
)
from optimizers.registry import register_optimizer, register_schedule

__all__ = [
    "Array",
    "InitFn",
    "JoinPoint",
    "Optimizer",
    "OptimizerState",
    "Params",
    "ParamsFn",
    "Schedule",
    "State",
    "Step",
    "UpdateFn",
    "Updates",
    "adagrad",
    "adam",
    "adamax",
    "clip_grads",
    "constant",
    "exponential_decay",
    "inverse_time_decay",
    "l2_norm",
    "make_schedule",
    "momentum",
    "nesterov",
    "optimizer",
    "pack_optimizer_state",
    "piecewise_constant",
    "polynomial_decay",
    "rmsprop",
    "rmsprop_momentum",
    "sgd",
    "sm3",
    "unpack_optimizer_state",
]

# The state of a pytree of parameters is stored "two-level": the outer tree is the parameter tree
# (kept as its treedef), and each parameter leaf owns an inner tree of state arrays (kept as a flat
# list of leaves plus its treedef). Only the flat lists are pytree children, so jit/scan/donation
# see nothing but arrays.
OptimizerState = namedtuple("OptimizerState", ["packed_state", "tree_def", "subtree_defs"])
OptimizerState.__doc__ = """State of a tree optimizer.

Fields:
  packed_state: list, one entry per parameter leaf, of the flat list of that leaf's state arrays.
  tree_def: the ``PyTreeDef`` of the parameter tree.
  subtree_defs: tuple of the ``PyTreeDef`` of each leaf's state.

A pytree whose only children are ``packed_state``; the two treedefs are static auxiliary data.
"""
jax.tree_util.register_pytree_node(
    OptimizerState,
    lambda s: ((s.packed_state,), (s.tree_def, s.subtree_defs)),
    lambda aux, children: OptimizerState(children[0], aux[0], aux[1]),
)

Array = Any
Params = Any  # an arbitrary nest of arrays
State = Any  # per-leaf state of one optimizer
Updates = Params  # gradients have the structure of the parameters
InitFn = Callable[[Params], OptimizerState]
Step = int
UpdateFn = Callable[[Step, Updates, OptimizerState], OptimizerState]
ParamsFn = Callable[[OptimizerState], Params]
Schedule = Callable[[Step], float]


class Optimizer(NamedTuple):
    """The ``(init_fn, update_fn, params_fn)`` triple (see the module docstring)."""

    init_fn: InitFn
    update_fn: UpdateFn
    params_fn: ParamsFn


def _unzip2(pairs):
    """``[(a, b), ...] -> ((a, ...), (b, ...))`` (tuples, like the reference's ``unzip2``)."""
    firsts, seconds = [], []
    for a, b in pairs:
        firsts.append(a)
        seconds.append(b)
    return tuple(firsts), tuple(seconds)


# --------------------------------------------------------------------------------------------
# The decorator.


def optimizer(opt_maker: Callable[..., tuple[Callable, Callable, Callable]]) -> Callable[..., Optimizer]:
    """Decorator: turn an optimizer written for single arrays into one for pytrees.

    Args:
      opt_maker: ``opt_maker(*args, **kwargs) -> (init, update, get_params)``, functions of one
        array: ``init(x0) -> state`` (any pytree of arrays), ``update(i, g, state) -> state`` (same
        structure), ``get_params(state) -> x``.

    Returns:
      A maker with ``opt_maker``'s arguments, name and docstring that returns an :class:`Optimizer`
      acting on any pytree of parameters, with :class:`OptimizerState` as its state.

    Raises:
      TypeError: by ``update_fn``, in Python at trace time (never inside the compiled update): the
        gradient tree's structure differs from the parameter tree's (the message names both), or
        ``update`` changed the structure of a leaf's state.

    Source: ``jax.example_libraries.optimizers.optimizer`` (same semantics).
    """

    @functools.wraps(opt_maker)
    def tree_opt_maker(*args, **kwargs):
        init, update, get_params = opt_maker(*args, **kwargs)

        @functools.wraps(init)
        def tree_init(x0_tree):
            x0_flat, tree = jax.tree.flatten(x0_tree)
            initial_states = [init(fresh(x0)) for x0 in x0_flat]
            states_flat, subtrees = _unzip2(jax.tree.flatten(s) for s in initial_states)
            return OptimizerState(states_flat, tree, subtrees)

        @functools.wraps(update)
        def tree_update(i, grad_tree, opt_state):
            return _tree_update(update, i, grad_tree, opt_state)

        @functools.wraps(get_params)
        def tree_get_params(opt_state):
            states_flat, tree, subtrees = opt_state
            params = [
                get_params(jax.tree.unflatten(s, f)) for s, f in zip(subtrees, states_flat, strict=True)
            ]
            return jax.tree.unflatten(tree, params)

        return Optimizer(tree_init, tree_update, tree_get_params)

    return tree_opt_maker


def _tree_update(update, i, grad_tree, opt_state) -> OptimizerState:
    """:func:`optimizer`'s ``update_fn``: the per-array ``update`` on every leaf's state.

    Raises:
      TypeError: ``grad_tree``'s structure differs from the parameters', or ``update`` changed the
        structure of a leaf's state.
    """
    states_flat, tree, subtrees = opt_state
    grad_flat, tree2 = jax.tree.flatten(grad_tree)
    if tree2 != tree:
        raise tree_mismatch(tree, tree2)
    new_flat = []
    for g, subtree, flat in zip(grad_flat, subtrees, states_flat, strict=True):
        new_state = update(i, g, jax.tree.unflatten(subtree, flat))
        leaves, subtree2 = jax.tree.flatten(new_state)
        if subtree2 != subtree:
            raise TypeError(
                "optimizer update function produced an output structure that did not match "
                f"its input structure: input {subtree} and output {subtree2}."
            )
        new_flat.append(leaves)
    return OptimizerState(tuple(new_flat), tree, subtrees)


# --------------------------------------------------------------------------------------------
# Optimizers. In the formulas, g is the gradient, t = i + 1 the 1-based step, lr = step_size(i);
# every state slot has the parameter leaf's shape and dtype.


def _with_zero(x0):
    """``init`` of optimizers whose per-leaf state is ``(x, velocity)`` with zero velocity."""
    return x0, jnp.zeros_like(x0)


@register_optimizer("sgd")
@optimizer
def sgd(step_size):
    """Stochastic gradient descent: ``x <- x - lr * g``.

    Args:
      step_size: positive scalar (Python/numpy number or a traced scalar), or a schedule
        ``step -> scalar``.

    Returns:
      An :class:`Optimizer` ``(init_fn, update_fn, params_fn)``; a leaf's state is the leaf itself.

    Source: ``jax.example_libraries.optimizers.sgd``.
    """
    step_size = make_schedule(step_size)

    def init(x0):
        return x0

    def update(i, g, x):
        return x - step_size(i) * g

    def get_params(x):
        return x

    return Optimizer(init, update, get_params)


@register_optimizer("momentum", defaults={"mass": 0.9})
@optimizer
def momentum(step_size, mass: float):
    """SGD with heavy-ball momentum (Polyak 1964).

    ``v <- mass * v + g;  x <- x - lr * v``. State per leaf: ``(x, v)``, ``v`` starts at 0.

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      mass: momentum coefficient, typically in ``[0, 1)`` (not checked); no default here, 0.9 in
        ``OPTIMIZERS["momentum"]``.

    Returns:
      An :class:`Optimizer` ``(init_fn, update_fn, params_fn)``.

    Source: ``jax.example_libraries.optimizers.momentum``.
    """
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, velocity = state
        velocity = mass * velocity + g
        x = x - step_size(i) * velocity
        return x, velocity

    return _with_zero, update, params_of


@register_optimizer("nesterov", defaults={"mass": 0.9})
@optimizer
def nesterov(step_size, mass: float):
    """SGD with Nesterov momentum (Sutskever et al. 2013 formulation).

    ``v <- mass * v + g;  x <- x - lr * (mass * v + g)``. State per leaf: ``(x, v)``.

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      mass: momentum coefficient, typically in ``[0, 1)`` (not checked); no default here, 0.9 in
        ``OPTIMIZERS["nesterov"]``.

    Returns:
      An :class:`Optimizer` ``(init_fn, update_fn, params_fn)``.

    Source: ``jax.example_libraries.optimizers.nesterov``.
    """
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, velocity = state
        velocity = mass * velocity + g
        x = x - step_size(i) * (mass * velocity + g)
        return x, velocity

    return _with_zero, update, params_of


@register_optimizer("adagrad")
@optimizer
def adagrad(step_size, momentum: float = 0.9):
    """Adagrad with momentum (Duchi, Hazan & Singer 2011, JMLR 12).

    ``s <- s + g**2;  m <- (1 - momentum) * g / sqrt(s) + momentum * m`` (``g / sqrt(s)`` taken
    as 0 where ``s == 0``);  ``x <- x - lr * m``. State per leaf: ``(x, s, m)``.

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      momentum: momentum coefficient (default 0.9).

    Returns:
      An :class:`Optimizer` ``(init_fn, update_fn, params_fn)``.

    Source: ``jax.example_libraries.optimizers.adagrad``.
    """
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, g_sq, m = state
        g_sq += jnp.square(g)
        g_sq_inv_sqrt = jnp.where(g_sq > 0, 1.0 / jnp.sqrt(g_sq), 0.0)
        m = (1.0 - momentum) * (g * g_sq_inv_sqrt) + momentum * m
        x = x - step_size(i) * m
        return x, g_sq, m

    return with_two_zeros, update, params_of


@register_optimizer("rmsprop")
@optimizer
def rmsprop(step_size, gamma: float = 0.9, eps: float = 1e-8):
    """RMSProp (Tieleman & Hinton 2012, lecture 6.5).

    ``a <- gamma * a + (1 - gamma) * g**2;  x <- x - lr * g / sqrt(a + eps)``. State: ``(x, a)``.

    Convention (``jax.example_libraries``'; also ``optax.rmsprop``'s default
    ``eps_in_sqrt=True``): eps is added inside the square root. ``torch.optim.RMSprop`` adds it
    outside, ``g / (sqrt(a) + eps)`` (and defaults to ``alpha`` 0.99 where ``gamma`` is 0.9
    here). Checked by hand in ``tests/test_optimizer_conventions.py``.

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      gamma: decay of the squared-gradient average (default 0.9).
      eps: added inside the square root (default 1e-8).

    Returns:
      An :class:`Optimizer` ``(init_fn, update_fn, params_fn)``.

    Source: ``jax.example_libraries.optimizers.rmsprop``.
    """
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0)

    def update(i, g, state):
        x, avg_sq_grad = state
        avg_sq_grad = avg_sq_grad * gamma + jnp.square(g) * (1.0 - gamma)
        x = x - step_size(i) * g / jnp.sqrt(avg_sq_grad + eps)
        return x, avg_sq_grad

    return init, update, params_of


@register_optimizer("rmsprop_momentum")
@optimizer
def rmsprop_momentum(step_size, gamma: float = 0.9, eps: float = 1e-8, momentum: float = 0.9):
    """RMSProp with momentum.

    ``a <- gamma * a + (1 - gamma) * g**2;  m <- momentum * m + lr * g / sqrt(a + eps);
    x <- x - m``. State per leaf: ``(x, a, m)``.

    Convention (``jax.example_libraries``'): eps inside the square root and the step size inside
    the buffer. ``torch.optim.RMSprop(momentum=...)`` keeps ``b <- momentum * b + g / (sqrt(a) +
    eps);  x <- x - lr * b``: eps outside the root, and the step size applied after the buffer
    (the same at a constant step size, apart from eps). Checked by hand in
    ``tests/test_optimizer_conventions.py``.

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      gamma: decay of the squared-gradient average (default 0.9).
      eps: added inside the square root (default 1e-8).
      momentum: momentum coefficient (default 0.9).

    Returns:
      An :class:`Optimizer` ``(init_fn, update_fn, params_fn)``.

    Source: ``jax.example_libraries.optimizers.rmsprop_momentum``.
    """
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, avg_sq_grad, mom = state
        avg_sq_grad = avg_sq_grad * gamma + jnp.square(g) * (1.0 - gamma)
        mom = momentum * mom + step_size(i) * g / jnp.sqrt(avg_sq_grad + eps)
        x = x - mom
        return x, avg_sq_grad, mom

    return with_two_zeros, update, params_of


@register_optimizer("adam")
@optimizer
def adam(step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    """Adam (Kingma & Ba 2015, arXiv:1412.6980).

    ``m <- (1 - b1) g + b1 m;  v <- (1 - b2) g**2 + b2 v;  m^ = m / (1 - b1**t);
    v^ = v / (1 - b2**t);  x <- x - lr * m^ / (sqrt(v^) + eps)`` with ``t = i + 1``.
    State per leaf: ``(x, m, v)``; the powers are computed in the leaf's dtype.

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      b1, b2: decay rates of the first and second moment estimates, in ``[0, 1)``.
      eps: added to ``sqrt(v^)``, >= 0 (default 1e-8).

    Returns:
      An :class:`Optimizer` ``(init_fn, update_fn, params_fn)``.

    Source: ``jax.example_libraries.optimizers.adam``.
    """
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, m, v = state
        m, v, mhat, vhat = adam_moments(i, g, m, v, b1, b2)
        x = x - step_size(i) * mhat / (jnp.sqrt(vhat) + eps)
        return x, m, v

    return with_two_zeros, update, params_of


@register_optimizer("adamax")
@optimizer
def adamax(step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    """AdaMax, Adam with the infinity norm (Kingma & Ba 2015, section 7).

    ``m <- (1 - b1) g + b1 m;  u <- max(b2 u, |g|);  x <- x - (lr / (1 - b1**t)) m / (u + eps)``.
    State per leaf: ``(x, m, u)``.

    Convention (``jax.example_libraries``'): eps is added to ``u`` in the denominator, outside the
    maximum. ``torch.optim.Adamax`` and ``optax.adamax`` put it inside: ``u <- max(b2 u, |g| +
    eps)``, step ``m / u``, so their eps is carried in ``u`` and decays with it. The two agree on
    the first step and wherever ``|g|`` wins the maximum. Checked by hand in
    ``tests/test_optimizer_conventions.py``.

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      b1, b2: decay rates of ``m`` and ``u``, in ``[0, 1)``.
      eps: added to ``u``, >= 0 (default 1e-8).

    Returns:
      An :class:`Optimizer` ``(init_fn, update_fn, params_fn)``.

    Source: ``jax.example_libraries.optimizers.adamax``.
    """
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, m, u = state
        m = (1 - b1) * g + b1 * m
        u = jnp.maximum(b2 * u, jnp.abs(g))
        x = x - (step_size(i) / (1 - jnp.asarray(b1, m.dtype) ** (i + 1))) * m / (u + eps)
        return x, m, u

    return with_two_zeros, update, params_of


def _splice(seq, i, x):
    lst = list(seq)
    lst[i : i + 1] = x
    return lst


@register_optimizer("sm3")
@optimizer
def sm3(step_size, momentum: float = 0.9):
    """SM3-II with momentum (Anil, Gupta, Koren & Singer 2019, arXiv:1901.11150).

    For a leaf of shape ``(n_1, ..., n_k)`` (a 0-d leaf is treated as shape ``(1,)``), one
    accumulator ``v_j`` of shape ``(n_j,)`` per axis:
    ``a = min_j v_j[broadcast] + g**2;  m <- (1 - momentum) g / sqrt(a) + momentum m`` (0 where
    ``a == 0``); ``x <- x - lr * m;  v_j <- max of a over all axes but j``.

    State per leaf: ``(x, m, [v_1, ..., v_k])``, plus an empty marker ``()`` for 0-d leaves
    (whose ``x``, ``m`` are kept with shape ``(1,)`` as in the reference). Unlike the reference,
    the leaf's shape is not stored as integer leaves of the state, so ``get_params`` works under
    ``jit`` and ``lax.scan``; the arithmetic is the reference's, bitwise. A reference state
    ``(x, m, vs, x_shape)`` (a reference checkpoint, :func:`pack_optimizer_state`) is read too.

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      momentum: momentum coefficient (default 0.9).

    Returns:
      An :class:`Optimizer` ``(init_fn, update_fn, params_fn)``.

    Source: ``jax.example_libraries.optimizers.sm3``.
    """
    step_size = make_schedule(step_size)

    def init(x0):
        x1 = jnp.atleast_1d(x0)
        vs = [jnp.zeros(sz, dtype=x1.dtype) for sz in x1.shape]
        state = (x1, jnp.zeros_like(x1), vs)
        # A 0-d leaf is updated as shape (1,) like the reference (bitwise equal results); the empty
        # tuple marks it, with no leaf, so that get_params can restore shape () statically.
        return (*state, ()) if jnp.ndim(x0) == 0 else state

    def update(i, g, state):
        x, m, vs = state[:3]
        g = jnp.atleast_1d(g)
        vs = [_broadcast_into(g.ndim, v, j) for j, v in enumerate(vs)]
        accum = functools.reduce(jnp.minimum, vs) + jnp.square(g)
        accum_inv_sqrt = jnp.where(accum > 0, 1.0 / jnp.sqrt(accum), 0)
        m = (1.0 - momentum) * (g * accum_inv_sqrt) + momentum * m
        x = x - step_size(i) * m
        vs = [accum.max(_splice(range(x.ndim), j, [])) for j in range(x.ndim)]
        return (x, m, vs, *state[3:])

    return init, update, _sm3_params


def _broadcast_into(ndim, x, axis):
    """``x`` (1-d) with new axes at every position but ``axis`` of ``ndim`` (:func:`sm3`)."""
    idx = _splice([None] * ndim, axis, [slice(None)])
    return x[tuple(idx)]


def _sm3_params(state):
    # the empty marker of a 0-d leaf; a reference state's 4th entry is the leaf's shape (its
    # checkpoints load with pack_optimizer_state), empty too for a 0-d leaf
    x = state[0]
    return x.reshape(()) if len(state) == 4 and not state[3] else x


# --------------------------------------------------------------------------------------------
# Schedules: ``schedule(i) -> scalar`` for an integer step ``i`` (may be traced). Each returns a
# scalar of the promoted dtype of its inputs.


@register_schedule("constant")
def constant(step_size) -> Schedule:
    """``schedule(i) = step_size``.

    Args:
      step_size: the value, a positive scalar (concrete or traced).

    Returns:
      The schedule ``i -> step_size``.

    Source: ``jax.example_libraries.optimizers.constant``.
    """

    def schedule(i):
        return step_size

    return schedule


@register_schedule("exponential_decay")
def exponential_decay(step_size, decay_steps: float, decay_rate: float) -> Schedule:
    """``schedule(i) = step_size * decay_rate ** (i / decay_steps)`` (continuous, not staircase).

    Args:
      step_size: the value at step 0, a positive scalar (concrete or traced).
      decay_steps: steps over which the value is multiplied by ``decay_rate``, positive.
      decay_rate: the factor per ``decay_steps`` steps, positive (below 1 to decay).

    Returns:
      The schedule ``i -> scalar``.

    Source: ``jax.example_libraries.optimizers.exponential_decay``.
    """

    def schedule(i):
        return step_size * decay_rate ** (i / decay_steps)

    return schedule


@register_schedule("inverse_time_decay")
def inverse_time_decay(
    step_size, decay_steps: float, decay_rate: float, staircase: bool = False
) -> Schedule:
    """``schedule(i) = step_size / (1 + decay_rate * i / decay_steps)``.

    Args:
      step_size: the value at step 0, a positive scalar (concrete or traced).
      decay_steps: steps per unit of decay, positive.
      decay_rate: >= 0; the value is ``step_size / (1 + decay_rate)`` at ``decay_steps``.
      staircase: floor ``i / decay_steps`` (a value constant over each ``decay_steps`` steps).

    Returns:
      The schedule ``i -> scalar``.

    Source: ``jax.example_libraries.optimizers.inverse_time_decay``.
    """
    if staircase:

        def schedule(i):
            return step_size / (1 + decay_rate * jnp.floor(i / decay_steps))

    else:

        def schedule(i):
            return step_size / (1 + decay_rate * i / decay_steps)

    return schedule


@register_schedule("polynomial_decay", note="(``final_step_size`` is absolute)")
def polynomial_decay(
    step_size, decay_steps: int, final_step_size: float, power: float = 1.0
) -> Schedule:
    """``schedule(i) = (1 - min(i, decay_steps) / decay_steps) ** power * (step_size - final)
    + final``: from ``step_size`` at 0 to ``final_step_size`` at ``decay_steps`` and after.

    Args:
      step_size: the value at step 0, a positive scalar (concrete or traced).
      decay_steps: steps to reach ``final_step_size``, positive.
      final_step_size: the value from ``decay_steps`` on, absolute (not a fraction), >= 0.
      power: exponent of the decay (1.0: linear).

    Returns:
      The schedule ``i -> scalar``.

    Source: ``jax.example_libraries.optimizers.polynomial_decay``.
    """

    def schedule(step_num):
        step_num = jnp.minimum(step_num, decay_steps)
        step_mult = (1 - step_num / decay_steps) ** power
        return step_mult * (step_size - final_step_size) + final_step_size

    return schedule


def piecewise_constant(boundaries: Any, values: Any) -> Schedule:
    """``schedule(i) = values[k]`` where ``k`` is the number of boundaries strictly below ``i``.

    So ``values[0]`` holds for ``i <= boundaries[0]`` (at the boundary itself too), ``values[1]``
    for ``boundaries[0] < i <= boundaries[1]``, and so on; a boundary at 0 makes ``values[0]``
    hold only at step 0. ``values`` may contain traced scalars.

    Args:
      boundaries: 1-d sequence of ``n`` non-decreasing step indices.
      values: 1-d sequence of ``n + 1`` step sizes.

    Returns:
      The schedule ``i -> values[k]`` (a 0-d array).

    Raises:
      ValueError: either is not 1-d, or ``len(boundaries) != len(values) - 1`` (message with both
        sequences).

    Source: ``jax.example_libraries.optimizers.piecewise_constant``.
    """
    b, v = jnp.array(boundaries), jnp.array(values)
    if not b.ndim == v.ndim == 1:
        raise ValueError(
            f"boundaries and values must be sequences, got boundaries={boundaries!r} "
            f"(ndim {b.ndim}) and values={values!r} (ndim {v.ndim})"
        )
    if b.shape[0] != v.shape[0] - 1:
        raise ValueError(
            "boundaries length must be one shorter than values length, got "
            f"{b.shape[0]} boundaries {boundaries!r} and {v.shape[0]} values {values!r}"
        )
    boundaries, values = b, v

    def schedule(i):
        return values[jnp.sum(i > boundaries)]

    return schedule


def make_schedule(scalar_or_schedule: float | Schedule) -> Schedule:
    """A schedule from a scalar step size (made :func:`constant`) or a schedule (returned as is).

    Args:
      scalar_or_schedule: a 0-d step size (number, 0-d array or traced scalar) or a callable
        ``i -> scalar``.

    Returns:
      A schedule ``i -> scalar``.

    Raises:
      TypeError: an argument that is neither callable nor 0-d (``jnp.ndim``: as in the reference,
        ``None`` and a string count as 0-d and fail only when the schedule is used).

    Source: ``jax.example_libraries.optimizers.make_schedule``.
    """
    if callable(scalar_or_schedule):
        return scalar_or_schedule
    if jnp.ndim(scalar_or_schedule) == 0:
        return constant(scalar_or_schedule)
    raise TypeError(f"a step size is a 0-d number or a schedule (a callable), got {type(scalar_or_schedule)} "
                    f"of shape {jnp.shape(scalar_or_schedule)}")


# --------------------------------------------------------------------------------------------
# Utilities.


def l2_norm(tree):
    """``sqrt(sum over leaves of vdot(x, x))``: the l2 norm of a pytree.

    Args:
      tree: a pytree of arrays (any shapes).

    Returns:
      The norm, a 0-d array.

    Source: ``jax.example_libraries.optimizers.l2_norm``.
    """
    leaves = jax.tree.leaves(tree)
    return jnp.sqrt(sum(jnp.vdot(x, x) for x in leaves))


def clip_grads(grad_tree, max_norm):
    """Scale ``grad_tree`` by ``max_norm / l2_norm(grad_tree)`` when its norm is >= ``max_norm``.

    Args:
      grad_tree: a pytree of arrays.
      max_norm: the largest l2 norm (over the whole tree) left unscaled, a positive scalar.

    Returns:
      ``grad_tree``'s structure and shapes: unchanged, or scaled to norm ``max_norm``.

    Source: ``jax.example_libraries.optimizers.clip_grads``.
    """
    norm = l2_norm(grad_tree)

    def normalize(g):
        return jnp.where(norm < max_norm, g, g * (max_norm / norm))

    return jax.tree.map(normalize, grad_tree)


# --------------------------------------------------------------------------------------------
# Serialization.


class JoinPoint:
    """Marks the boundary between two joined (nested) pytrees; a leaf of the outer tree.

    Source: ``jax.example_libraries.optimizers.JoinPoint``.
    """

    def __init__(self, subtree):
        self.subtree = subtree

    # Pytrees of arrays are containers; look iterable like the reference.
    def __iter__(self):
        yield self.subtree

    def __repr__(self) -> str:
        return f"JoinPoint({self.subtree!r})"


def unpack_optimizer_state(opt_state):
    """An :class:`OptimizerState` as a picklable pytree of :class:`JoinPoint` s.

    Args:
      opt_state: an :class:`OptimizerState`.

    Returns:
      A pytree of the parameter tree's structure whose leaves are :class:`JoinPoint` s, each
      holding that leaf's state tree; it holds no treedefs, so it pickles.

    Source: ``jax.example_libraries.optimizers.unpack_optimizer_state``.
    """
    states_flat, tree_def, subtree_defs = opt_state
    subtrees = [jax.tree.unflatten(s, f) for s, f in zip(subtree_defs, states_flat, strict=True)]
    return jax.tree.unflatten(tree_def, [JoinPoint(s) for s in subtrees])


def _is_join_point(leaf) -> bool:
    return isinstance(leaf, JoinPoint) or (type(leaf).__name__ == "JoinPoint" and hasattr(leaf, "subtree"))


def pack_optimizer_state(marked_pytree):
    """Inverse of :func:`unpack_optimizer_state`: ``pack(unpack(s)) == s``.

    Also accepts the ``JoinPoint`` leaves of ``jax.example_libraries.optimizers`` (any leaf of a class
    named ``JoinPoint`` with a ``subtree``), so a checkpoint written with the reference loads after
    swapping the import.

    Args:
      marked_pytree: a pytree whose leaves are ``JoinPoint`` s, as :func:`unpack_optimizer_state`
        returns.

    Returns:
      The :class:`OptimizerState`.

    Raises:
      TypeError: a leaf of ``marked_pytree`` is not a ``JoinPoint`` (its full class name is given).

    Source: ``jax.example_libraries.optimizers.pack_optimizer_state``.
    """
    sentinels, tree_def = jax.tree.flatten(marked_pytree)
    bad = [s for s in sentinels if not _is_join_point(s)]
    if bad:
        cls = type(bad[0])
        raise TypeError(
            f"pack_optimizer_state expects JoinPoint leaves, got {cls.__module__}.{cls.__qualname__}")
    states_flat, subtree_defs = _unzip2(jax.tree.flatten(s.subtree) for s in sentinels)
    return OptimizerState(states_flat, tree_def, subtree_defs)
