"""Learning-rate-free and schedule-free optimizers: :func:`schedule_free_sgd`,
:func:`schedule_free_adamw` (with :func:`schedule_free_eval_params`) and :func:`prodigy`.

Each follows its ``optax.contrib`` twin operation by operation (see :mod:`optimizers.modern`),
with one departure on a tree that mixes float dtypes (float32 and bfloat16 leaves): Schedule-Free's
shared scalars are kept in the widest dtype of the leaves (:func:`_scalar_dtype`), where Optax
keeps them in the lowest (its weight sum then accumulates in bfloat16: after 50 steps at lr 1e-2
the two differ by 2.4e-3 on the float32 leaves). On a tree of one dtype they agree (float32:
within 5e-7 relative; bfloat16: bit for bit). Prodigy keeps Optax's lowest, and matches it.
The three are tree-level optimizers (not :func:`optimizers.core.optimizer`'s per-array form):
each has a few scalars that are the same for every leaf (Schedule-Free's ``b1``, weight sum and
largest step size; Prodigy's estimate ``d`` and its sum ``r``, which sum over the whole tree).
They are stored once, as a 1-D array at the end of the first leaf's state (:func:`_pack`), not
once per leaf: every state buffer costs a donated, jitted update a few microseconds of dispatch,
and with a copy in each of the benchmark MLP's 6 leaves (30 buffers against Optax's 16)
Schedule-Free SGD's update was 1.05-1.17x Optax's; with them once (13 buffers) it is at parity
(``tests/benchmarks/test_bench_optimizers.py``). The state is still an
:class:`~optimizers.core.OptimizerState` with one inner tree per parameter leaf (the first leaf's
holds the shared vector too). Imports jax and numpy only.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import jax
import jax.numpy as jnp

from optimizers.common import (
    check_nonnegative,
    check_unit_interval,
    fresh,
    is_concrete_number,
    positive_step_size,
    tree_mismatch,
)
from optimizers.core import Optimizer, OptimizerState, make_schedule
from optimizers.modern import bias_correction, step_count
from optimizers.registry import register_optimizer

__all__ = ["prodigy", "schedule_free_adamw", "schedule_free_eval_params", "schedule_free_sgd"]


def _check_open_unit(value: Any, name: str) -> None:
    if is_concrete_number(value) and not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")


# --------------------------------------------------------------------------------------------
# Schedule-Free.


def _scalar_dtype(leaves) -> Any:
    """The dtype of Schedule-Free's tree-wide scalars: the widest floating dtype of the parameter
    leaves (float32 for float32 parameters; float32 for an empty tree). Optax's
    ``schedule_free`` takes the lowest; on a mixed float32/bfloat16 tree this keeps the weight sum
    accurate instead (the module docstring gives the difference)."""
    floats = [jnp.asarray(x).dtype for x in leaves if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)]
    return jnp.result_type(*floats) if floats else jnp.float32


def _pack(states: list[tuple], shared: jax.Array, treedef) -> OptimizerState:
    """An :class:`OptimizerState` of per-leaf state tuples, the tree-wide scalars ``shared`` (a
    1-D array) appended to the first leaf's tuple only: stored once, not once per leaf, because
    every state buffer costs the jitted update a few microseconds of dispatch (measured:
    a copy in each of 6 leaves made Schedule-Free SGD's donated update 5% slower than Optax's)."""
    flats, subs = [], []
    for k, st in enumerate(states):
        flat, sub = jax.tree.flatten((*st, shared) if k == 0 else tuple(st))
        flats.append(flat)
        subs.append(sub)
    return OptimizerState(tuple(flats), treedef, tuple(subs))


def _unpack(opt_state: OptimizerState) -> tuple[list[tuple], jax.Array | None]:
    """The inverse of :func:`_pack`: per-leaf tuples and the shared scalars (``None`` for an
    empty tree)."""
    states_flat, _, subtrees = opt_state
    states = [tuple(jax.tree.unflatten(sub, flat)) for sub, flat in zip(subtrees, states_flat, strict=True)]
    if not states:
        return [], None
    return [states[0][:-1], *states[1:]], states[0][-1]


def _repack(opt_state: OptimizerState, states: list[tuple], shared: jax.Array | None) -> OptimizerState:
    """:func:`_pack` into ``opt_state``'s treedefs, checking each leaf kept its state structure."""
    new = _pack(states, shared, opt_state.tree_def) if states else opt_state
    assert new.subtree_defs == opt_state.subtree_defs, (new.subtree_defs, opt_state.subtree_defs)
    return new


def _flat_grads(grads, opt_state: OptimizerState) -> list:
    gs, tree2 = jax.tree.flatten(grads)
    if tree2 != opt_state.tree_def:
        raise tree_mismatch(opt_state.tree_def, tree2)
    return gs


def _schedule_free(step_size, b1, weight_lr_power, direction, n_slots) -> Optimizer:
    """The Schedule-Free wrapper (Defazio et al. 2024) around a base step ``direction(i, g, y,
    slots) -> (u, slots)`` per leaf (``u`` already multiplied by ``-lr``), as
    ``optax.contrib.schedule_free``.

    State: per leaf ``(y, z, *slots)`` (``y`` the parameters, where gradients are taken; ``z`` the
    base sequence), and once, with the first leaf, the vector ``(b1, weight_sum, max_lr)``: the
    interpolation, the running sum of the averaging weights and the largest step size so far. The
    averaging weight of step ``i`` is ``max_lr ** weight_lr_power`` with ``max_lr`` including
    ``step_size(i + 1)`` (Optax calls the schedule with its 1-based ``step_count`` there, and with
    the 0-based count in the base step).
    """
    sched = make_schedule(positive_step_size(step_size))

    def update_fn(i, grads, opt_state):
        return _schedule_free_update(i, grads, opt_state, sched, b1, weight_lr_power, direction)

    def params_fn(opt_state):
        states, _ = _unpack(opt_state)
        return jax.tree.unflatten(opt_state.tree_def, [st[0] for st in states])

    return Optimizer(lambda params: _schedule_free_state(params, b1, n_slots), update_fn, params_fn)


def _schedule_free_state(params, b1, n_slots) -> OptimizerState:
    """:func:`_schedule_free`'s ``init_fn``: ``(y, z, *slots)`` per leaf and the shared
    ``(b1, weight_sum, max_lr)``."""
    leaves, treedef = jax.tree.flatten(params)
    dtype = _scalar_dtype(leaves)
    # every leaf of the state its own buffer: the trainer donates the state, and one buffer
    # in two places fails the donation ("donate the same buffer twice")
    states = [(fresh(y0), jnp.array(y0, copy=True), *(jnp.zeros_like(y0) for _ in range(n_slots)))
              for y0 in leaves]
    zero = jnp.zeros((), dtype)
    return _pack(states, jnp.stack([jnp.asarray(b1, dtype), zero, zero]), treedef)


def _schedule_free_update(i, grads, opt_state, sched, b1, weight_lr_power, direction) -> OptimizerState:
    """:func:`_schedule_free`'s ``update_fn``: the base step per leaf, then the interpolation."""
    gs = _flat_grads(grads, opt_state)
    states, shared = _unpack(opt_state)
    if shared is None:
        return opt_state
    b1_, weight_sum, max_lr = shared[0], shared[1], shared[2]
    max_lr = jnp.maximum(max_lr, jnp.asarray(sched(step_count(i)), max_lr.dtype))
    weight = max_lr**weight_lr_power
    total = weight_sum + weight
    ck = jnp.where(jnp.logical_or(jnp.isnan(weight), jnp.isnan(total)), jnp.full(weight.shape, jnp.nan),
                   jnp.nan_to_num(weight / total, nan=0.0, posinf=jnp.inf))
    new = []
    for g, (y, z, *slots) in zip(gs, states, strict=True):
        u, slots = direction(i, g, y, slots)
        z_new = jnp.asarray(z + u).astype(z.dtype)
        c = ck.astype(y.dtype)
        x = (y - (1.0 - b1) * z) / b1
        x = (1.0 - c) * x + c * z_new
        y_new = b1 * x + (1.0 - b1) * z_new
        # y + (y_new - y), not y_new: Optax returns the difference as the update.
        new.append((jnp.asarray(y + (y_new - y)).astype(y.dtype), z_new, *slots))
    return _repack(opt_state, new, jnp.stack([b1_, total, max_lr]))


def schedule_free_eval_params(opt_state: OptimizerState) -> Any:
    """The evaluation parameters ``x = (y - (1 - b1) z) / b1`` of a Schedule-Free state.

    Args:
      opt_state: a :func:`schedule_free_sgd` or :func:`schedule_free_adamw` state (whose ``params_fn``
        gives ``y``, where gradients are taken).

    Returns:
      ``x``, a pytree of the parameters' structure, each leaf in its parameter's dtype.

    Source: ``optax.contrib.schedule_free_eval_params(state, params)``.
    """
    states, shared = _unpack(opt_state)
    out = []
    for y, z, *_ in states:
        b1 = shared[0].astype(y.dtype)
        out.append((y - (1.0 - b1) * z) / b1)
    return jax.tree.unflatten(opt_state.tree_def, out)


@register_optimizer("schedule_free_sgd", eval_params=schedule_free_eval_params)
def schedule_free_sgd(step_size, b1: float = 0.9, weight_decay: float = 0.0, weight_lr_power: float = 2.0):
    """Schedule-Free SGD (Defazio et al. 2024, arXiv:2405.15682, "The Road Less Scheduled").

    With ``y`` the parameters (gradients are taken there), ``z`` the SGD sequence and ``x`` the
    average (the evaluation parameters, :func:`schedule_free_eval_params`):
    ``z' = z - lr(i) * (g + weight_decay * y);  c = w / (sum of w so far), w = max_lr**weight_lr_power
    (max_lr including lr(i + 1));  x' = (1 - c) x + c z';  y' = b1 x' + (1 - b1) z'``, where
    ``x = (y - (1 - b1) z) / b1``. State: per leaf ``(y, z)``, and once, after the first leaf's,
    the vector ``(b1, weight_sum, max_lr)``. No schedule is needed; a warmup is the
    ``linear_warmup`` schedule (Optax's ``warmup_steps``). Defaults are the paper's and
    ``optax.contrib.schedule_free_sgd``'s, which this matches at equal settings
    (``weight_decay=None`` there is 0 here).

    Conventions (Optax's; the authors' ``schedulefree.SGDScheduleFree`` differs in two): there
    is no ``r`` (their averaging weight ``(k + 1)**r * max_lr**weight_lr_power``; ``r`` is 0
    here, their default), and ``weight_lr_power`` is theirs. Warm-up is a schedule, called with
    ``i`` for the SGD step and ``i + 1`` for the averaging weight (Optax's indexing: a linear
    warm-up takes a zero step at step 0), where their built-in ``warmup_steps`` scales both the
    step and the weight of step ``k`` by ``(k + 1) / warmup_steps``. At a constant step size the
    two are the same update (checked in float64 against numpy,
    ``tests/test_optimizer_conventions.py``).

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      b1: interpolation between the average and the base sequence, in ``(0, 1)``.
      weight_decay: decay added to the gradient at ``y`` (>= 0), multiplied by the step size.
      weight_lr_power: exponent of the step size in the averaging weights.

    Returns:
      An :class:`~optimizers.core.Optimizer` ``(init_fn, update_fn, params_fn)``.

    Raises:
      ValueError: concrete ``step_size <= 0``, ``b1`` outside ``(0, 1)``, ``weight_decay < 0``.
      TypeError: at update, a gradient tree whose structure differs from the parameters'.
    """
    _check_open_unit(b1, "b1")
    check_nonnegative(weight_decay, "weight_decay")
    lr = make_schedule(positive_step_size(step_size))

    def direction(i, g, y, slots):
        return -lr(i) * (g + weight_decay * y), slots

    return _schedule_free(step_size, b1, weight_lr_power, direction, 0)


@register_optimizer("schedule_free_adamw", eval_params=schedule_free_eval_params)
def schedule_free_adamw(
    step_size,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    weight_lr_power: float = 2.0,
):
    """Schedule-Free AdamW (Defazio et al. 2024, arXiv:2405.15682), the AlgoPerf 2024 winner.

    :func:`schedule_free_sgd` with the base step of Adam without momentum: with ``t = i + 1``,
    ``v <- (1 - b2) g**2 + b2 v;  z' = z - lr(i) * (g / (sqrt(v / (1 - b2**t)) + eps) + weight_decay * y)``.
    State: per leaf ``(y, z, v)``, and once the vector ``(b1, weight_sum, max_lr)``. Evaluate at
    :func:`schedule_free_eval_params`. Defaults are ``optax.contrib.schedule_free_adamw``'s (b1 0.9, b2
    0.999, eps 1e-8, no weight decay, power 2), which this matches at equal settings.

    Conventions: :func:`schedule_free_sgd`'s (Optax's): no ``r``, a warm-up schedule called with ``i`` for
    the step and ``i + 1`` for the weight where the authors' ``warmup_steps`` scales both by
    ``(k + 1) / warmup_steps``. The second moment is bias-corrected inside the root, with eps outside it,
    as in the authors' current ``schedulefree.AdamWScheduleFree``; their earlier releases multiplied the
    step size (and so the averaging weights) by ``sqrt(1 - b2**t)`` and added eps to ``sqrt(v)`` instead.

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      b1: interpolation between the average and the base sequence, in ``(0, 1)``.
      b2: second-moment decay in ``[0, 1)``.
      eps: added to the root of the second moment.
      weight_decay: decay added at ``y`` (>= 0), multiplied by the step size.
      weight_lr_power: exponent of the step size in the averaging weights.

    Returns:
      An :class:`~optimizers.core.Optimizer` ``(init_fn, update_fn, params_fn)``.

    Raises:
      ValueError: concrete ``step_size <= 0``, ``b1`` outside ``(0, 1)``, ``b2`` outside ``[0, 1)``,
        ``weight_decay < 0``.
      TypeError: at update, a gradient tree whose structure differs from the parameters'.
    """
    _check_open_unit(b1, "b1")
    check_unit_interval(b2, "b2")
    check_nonnegative(weight_decay, "weight_decay")
    lr = make_schedule(positive_step_size(step_size))

    def direction(i, g, y, slots):
        (v,) = slots
        v = (1 - b2) * g**2 + b2 * v
        u = 1 / (jnp.sqrt(bias_correction(v, b2, step_count(i))) + eps) * g
        return jnp.asarray(-lr(i), u.dtype) * (u + weight_decay * y), (v,)

    return _schedule_free(step_size, b1, weight_lr_power, direction, 1)


# --------------------------------------------------------------------------------------------
# Prodigy.


def _vdot(a, b):
    return jnp.tensordot(a, b, jnp.ndim(a), precision=jax.lax.Precision.HIGHEST)


@register_optimizer("prodigy")
def prodigy(
    step_size,
    b1: float = 0.9,
    b2: float = 0.999,
    beta3: float | None = None,
    eps: float = 1e-8,
    estim_lr0: float = 1e-6,
    estim_lr_coef: float = 1.0,
    weight_decay: float = 0.0,
    safeguard_warmup: bool = False,
) -> Optimizer:
    """Prodigy, learning-rate-free AdamW (Mishchenko & Defazio 2024, arXiv:2306.06101).

    ``d`` (``estim_lr``, starting at ``estim_lr0``) estimates the distance to the solution; with
    ``t = i + 1``, ``dlr = d * lr(i) * sqrt(1 - b2**t) / (1 - b1**t)`` and sums over every leaf:
    ``m <- b1 m + (1 - b1) d g;  v <- b2 v + (1 - b2) (d g)**2;
    s <- beta3 s + (d if safeguard_warmup else dlr) * d g / estim_lr0;
    r <- beta3 r + (d / estim_lr0) * dlr * <g, x0 - x>;  d <- max(d, estim_lr_coef * r / sum |s|);
    x <- x - weight_decay * dlr * x - dlr * m / (sqrt(v) + d * eps)`` (the new ``d`` in the
    denominator). ``lr`` is the step size, which multiplies the estimate: 1.0 (the default of the paper
    and of Optax) trusts it, a schedule from 1.0 down is what the authors recommend. While ``sum |s|``
    is 0 (only steps of step size 0 so far, as at the start of a warmup from 0) ``d`` is kept, as in the
    authors' PyTorch code, where Optax's becomes NaN; elsewhere the two agree. State: per leaf
    ``(x, x0, m, v, s)``, and once, after the first leaf's, the vector ``(d, r)``.

    Convention (Optax's): Adam's bias correction is always on, ``dlr`` carrying ``sqrt(1 - b2**t) /
    (1 - b1**t)``. The authors' ``prodigyopt.Prodigy`` has ``use_bias_correction=False`` by default
    (``dlr = d * lr``), so at its defaults its step ``t`` (and the terms it adds to the estimate's sums)
    is ``(1 - b1**t) / sqrt(1 - b2**t)`` times this one's for the same ``d`` (3.2x on step 1 with the
    default betas, tending to 1). Its other defaults (decoupled weight decay, ``d_coef`` =
    ``estim_lr_coef`` 1, ``d0`` = ``estim_lr0`` 1e-6, no growth limit) are these. Checked in float64
    against numpy with and without the correction (``tests/test_optimizer_conventions.py``).

    Args:
      step_size: multiplier of the estimated step size (positive scalar, traced, or schedule).
      b1, b2: Adam's decay rates in ``[0, 1)``.
      beta3: decay of the estimate's sums (``None``: ``sqrt(b2)``).
      eps: Adam's epsilon (multiplied by ``d``).
      estim_lr0: initial (under-)estimate ``d0``, > 0.
      estim_lr_coef: multiplies each new estimate.
      weight_decay: decoupled decay (>= 0), multiplied by ``dlr``.
      safeguard_warmup: leave the step size out of ``s`` (for warmup schedules).

    Returns:
      An :class:`~optimizers.core.Optimizer` ``(init_fn, update_fn, params_fn)``.

    Raises:
      ValueError: concrete ``step_size <= 0``, ``b1``/``b2`` outside ``[0, 1)``, ``weight_decay < 0``,
        ``estim_lr0 <= 0``.
      TypeError: at update, a gradient tree whose structure differs from the parameters'.

    Source: ``optax.contrib.prodigy`` (``betas=(b1, b2)``), which this matches at equal settings.
    """
    step_size = make_schedule(positive_step_size(step_size))
    check_unit_interval(b1, "b1")
    check_unit_interval(b2, "b2")
    check_nonnegative(weight_decay, "weight_decay")
    if is_concrete_number(estim_lr0) and not float(estim_lr0) > 0:
        raise ValueError(f"estim_lr0 must be positive, got {estim_lr0!r}")
    beta3 = b2**0.5 if beta3 is None else beta3

    hp = (b1, b2, beta3, eps, estim_lr0, estim_lr_coef, weight_decay, safeguard_warmup)

    def update_fn(i, grads, opt_state):
        return _prodigy_update(i, grads, opt_state, step_size, hp)

    return Optimizer(lambda params: _prodigy_state(params, estim_lr0), update_fn, _prodigy_params)


def _prodigy_state(params, estim_lr0) -> OptimizerState:
    """:func:`prodigy`'s ``init_fn``: ``(x, x0, m, v, s)`` per leaf and the shared ``(d, r)``,
    in the narrowest float dtype of the leaves."""
    leaves, treedef = jax.tree.flatten(params)
    dtype = min((jnp.asarray(x).dtype for x in leaves), key=lambda d: jnp.finfo(d).bits,
                default=jnp.float32)
    # every state leaf its own buffer (the trainer donates the state)
    states = [(fresh(x), jnp.array(x, copy=True), *(jnp.zeros_like(x) for _ in range(3)))
              for x in leaves]
    return _pack(states, jnp.stack([jnp.full((), estim_lr0, dtype), jnp.zeros((), dtype)]), treedef)


def _prodigy_update(i, grads, opt_state, step_size, hp) -> OptimizerState:
    """:func:`prodigy`'s ``update_fn``; ``hp`` is ``(b1, b2, beta3, eps, estim_lr0,
    estim_lr_coef, weight_decay, safeguard_warmup)``."""
    b1, b2, beta3, eps, estim_lr0, estim_lr_coef, weight_decay, safeguard_warmup = hp
    gs = _flat_grads(grads, opt_state)
    states, shared = _unpack(opt_state)
    if shared is None:
        return opt_state
    d, r = shared[0], shared[1]
    t = step_count(i)
    dlr = jnp.asarray(d * step_size(i) * (((1 - b2**t) ** 0.5) / (1 - b1**t)), d.dtype)
    diffs = (_vdot(g, st[1] - st[0]) for g, st in zip(gs, states, strict=True))
    numerator = functools.reduce(operator.add, diffs, 0)
    new = []
    for g, (x, x0, m, v, s) in zip(gs, states, strict=True):
        dg = d * g
        m = b1 * m + (1 - b1) * dg
        v = b2 * v + (1 - b2) * dg * dg
        s = beta3 * s + (d if safeguard_warmup else dlr) * dg / estim_lr0
        new.append((x, x0, m, v, s))
    r = beta3 * r + (d / estim_lr0) * dlr * numerator
    denominator = functools.reduce(operator.add, (jnp.sum(jnp.abs(st[4])) for st in new), 0)
    # 0 / 0 where no step has been taken yet (a step size of 0, as a warmup's first): keep d,
    # as the paper's PyTorch code (Optax's d becomes NaN there).
    d = jnp.where(denominator > 0, jnp.maximum(d, estim_lr_coef * r / denominator), d)
    out = []
    for x, x0, m, v, s in new:
        u = -weight_decay * dlr * x - dlr * m / (jnp.sqrt(v) + d * eps)
        out.append((jnp.asarray(x + u).astype(x.dtype), x0, m, v, s))
    return _repack(opt_state, out, jnp.stack([d, r]))


def _prodigy_params(opt_state):
    states_flat, treedef, _ = opt_state
    return jax.tree.unflatten(treedef, [flat[0] for flat in states_flat])
