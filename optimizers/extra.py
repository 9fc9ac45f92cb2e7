"""Optimizers and schedules beyond ``jax.example_libraries.optimizers``, in the same triple form.

* :func:`adamw` (Loshchilov & Hutter), :func:`nadamw` (AlgoPerf's baseline), :func:`lion`
  (Chen et al.): built with :func:`optimizers.core.optimizer`, so their state is an
  :class:`~optimizers.core.OptimizerState` that packs, unpacks and pickles like the reference's.
* Schedules :func:`linear_warmup`, :func:`cosine_decay`, :func:`warmup_cosine_decay` and
  :func:`join_schedules` (switch schedules at step boundaries). Their formulas are Optax's
  (``linear_schedule``, ``cosine_decay_schedule``, ``warmup_cosine_decay_schedule``,
  ``join_schedules``) with values given as multiples of the base ``step_size``, so a vmapped
  (traced) step size scales the whole schedule.
* :func:`from_optax`: any Optax ``GradientTransformation`` as an ``(init, update, get_params)``
  triple; :func:`optax_eval_params`: the evaluation parameters of such a state when its Optax
  state holds an ``optax.contrib`` Schedule-Free state. Optax is never imported by this module at
  import time.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from optimizers.common import (
    adam_moments,
    bias_corrected,
    check_nonnegative,
    check_step_size,
    check_unit_interval,
    fresh,
    is_concrete_number,
    params_of,
    positive_step_size,
    tree_mismatch,
    with_two_zeros,
)
from optimizers.core import Optimizer, OptimizerState, Schedule, make_schedule, optimizer, piecewise_constant
from optimizers.registry import register_optimizer, register_schedule

__all__ = [
    "adamw",
    "cosine_decay",
    "from_optax",
    "join_schedules",
    "linear_warmup",
    "lion",
    "nadamw",
    "optax_adam",
    "optax_eval_params",
    "optax_momentum",
    "optax_sgd",
    "piecewise",
    "warmup_cosine_decay",
]


def _check_total_steps(total_steps: Any, fn: str) -> None:
    if total_steps is None:
        raise ValueError(f"{fn}: total_steps is required (the harness fills it with the trial's step budget)")
    if is_concrete_number(total_steps) and not float(total_steps) > 0:
        raise ValueError(f"{fn}: total_steps must be positive, got {total_steps!r}")


# --------------------------------------------------------------------------------------------
# Optimizers.


@register_optimizer("adamw")
@optimizer
def adamw(
    step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 1e-4
):
    """AdamW: Adam with decoupled weight decay (Loshchilov & Hutter 2019, arXiv:1711.05101).

    With ``t = i + 1``:
    ``m <- (1 - b1) g + b1 m;  v <- (1 - b2) g**2 + b2 v;  m^ = m / (1 - b1**t);
    v^ = v / (1 - b2**t);  x <- x - lr * (m^ / (sqrt(v^) + eps) + weight_decay * x)``.
    The decay is multiplied by the (scheduled) step size, as in ``optax.adamw`` and PyTorch.
    The powers ``b**t`` are taken in float32 at least, as Optax does (in a bfloat16 leaf's own
    dtype 0.999 is 1.0, and ``v^`` would be inf: no step at all).
    State per leaf: ``(x, m, v)``, each with the leaf's shape and dtype.

    Args:
      step_size: positive scalar, traced scalar, or schedule ``step -> scalar``.
      b1, b2: moment decay rates in ``[0, 1)``.
      eps: added to ``sqrt(v^)``.
      weight_decay: decoupled decay coefficient (>= 0), applied to every leaf.

    Returns:
      An :class:`~optimizers.core.Optimizer` ``(init_fn, update_fn, params_fn)``.

    Raises:
      ValueError: concrete ``step_size <= 0``, ``b1``/``b2`` outside ``[0, 1)``,
        ``weight_decay < 0``.
    """
    step_size = make_schedule(positive_step_size(step_size))
    check_unit_interval(b1, "b1")
    check_unit_interval(b2, "b2")
    check_nonnegative(weight_decay, "weight_decay")

    def update(i, g, state):
        x, m, v = state
        m, v, mhat, vhat = adam_moments(i, g, m, v, b1, b2, wide_powers=True)
        x = x - step_size(i) * (mhat / (jnp.sqrt(vhat) + eps) + weight_decay * x)
        return x, m, v

    return with_two_zeros, update, params_of


@register_optimizer("nadamw")
@optimizer
def nadamw(
    step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 1e-4
):
    """NAdamW, the AlgoPerf baseline: Nesterov Adam (Dozat 2016) with decoupled weight decay.

    As in ``mlcommons/algorithmic-efficiency`` (``baselines/nadamw``), with ``t = i + 1``:
    ``m <- (1 - b1) g + b1 m;  v <- (1 - b2) g**2 + b2 v;
    n = (1 - b1) g + b1 m  (the Nesterov look-ahead, using the new m);
    n^ = n / (1 - b1**t);  v^ = v / (1 - b2**t);
    x <- x - lr * (n^ / (sqrt(v^) + eps) + weight_decay * x)``.
    State per leaf: ``(x, m, v)``. (Optax's ``nadamw`` bias-corrects the two terms of ``n``
    separately, so it differs slightly in the first steps.) The powers ``b**t`` are taken in
    float32 at least, as in ``adamw``.

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      b1, b2: moment decay rates in ``[0, 1)``.
      eps: added to ``sqrt(v^)``.
      weight_decay: decoupled decay coefficient (>= 0), multiplied by the step size.

    Returns:
      An :class:`~optimizers.core.Optimizer` ``(init_fn, update_fn, params_fn)``.

    Raises:
      ValueError: concrete ``step_size <= 0``, ``b1``/``b2`` outside ``[0, 1)``,
        ``weight_decay < 0``.
    """
    step_size = make_schedule(positive_step_size(step_size))
    check_unit_interval(b1, "b1")
    check_unit_interval(b2, "b2")
    check_nonnegative(weight_decay, "weight_decay")

    def update(i, g, state):
        x, m, v = state
        m, v, _, vhat = adam_moments(i, g, m, v, b1, b2, wide_powers=True)
        n = (1 - b1) * g + b1 * m
        nhat = bias_corrected(n, b1, i)
        x = x - step_size(i) * (nhat / (jnp.sqrt(vhat) + eps) + weight_decay * x)
        return x, m, v

    return with_two_zeros, update, params_of


@register_optimizer("lion")
@optimizer
def lion(step_size, b1: float = 0.9, b2: float = 0.99, weight_decay: float = 1e-3):
    """Lion, EvoLved Sign Momentum (Chen et al. 2023, arXiv:2302.06675).

    ``c = b1 m + (1 - b1) g;  x <- x - lr * (sign(c) + weight_decay * x);
    m <- b2 m + (1 - b2) g``. State per leaf: ``(x, m)``. Defaults are Optax's ``lion``.
    Use a step size 3-10x smaller than Adam's.

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      b1: interpolation for the update direction, in ``[0, 1)``.
      b2: decay of the momentum, in ``[0, 1)``.
      weight_decay: decoupled decay coefficient (>= 0), multiplied by the step size.

    Returns:
      An :class:`~optimizers.core.Optimizer` ``(init_fn, update_fn, params_fn)``.

    Raises:
      ValueError: concrete ``step_size <= 0``, ``b1``/``b2`` outside ``[0, 1)``,
        ``weight_decay < 0``.
    """
    step_size = make_schedule(positive_step_size(step_size))
    check_unit_interval(b1, "b1")
    check_unit_interval(b2, "b2")
    check_nonnegative(weight_decay, "weight_decay")

    def init(x0):
        return x0, jnp.zeros_like(x0)

    def update(i, g, state):
        x, m = state
        direction = jnp.sign(b1 * m + (1 - b1) * g)
        x = x - step_size(i) * (direction + weight_decay * x)
        m = b2 * m + (1 - b2) * g
        return x, m

    return init, update, params_of


# --------------------------------------------------------------------------------------------
# Schedules.


@register_schedule("piecewise")
def piecewise(step_size, boundaries: Sequence[int], multipliers: Sequence[float]) -> Schedule:
    """:func:`optimizers.core.piecewise_constant` with values ``step_size * multipliers[k]``.

    Step ``i`` gets ``multipliers[k]`` where ``k`` counts the boundaries strictly below ``i``.

    Args:
      step_size: the base step size, positive (concrete or traced).
      boundaries: ``n`` non-decreasing step indices.
      multipliers: ``n + 1`` factors of ``step_size``.

    Returns:
      The schedule ``i -> step_size * multipliers[k]``.

    Raises:
      ValueError: ``len(boundaries) != len(multipliers) - 1``, or a concrete ``step_size <= 0``;
        concrete boundaries that decrease.
    """
    check_step_size(step_size)
    concrete = [float(b) for b in boundaries if is_concrete_number(b)]
    if concrete != sorted(concrete):  # the drop-in piecewise_constant takes them, as the reference
        raise ValueError(f"boundaries must be non-decreasing, got {boundaries!r}")
    return piecewise_constant(boundaries, [step_size * m for m in multipliers])


@register_schedule("linear_warmup")
def linear_warmup(step_size, warmup_steps: int, init_scale: float = 0.0) -> Schedule:
    """Linear ramp from ``init_scale * step_size`` at step 0 to ``step_size`` at ``warmup_steps``,
    constant after: ``lr(i) = (i0 - step_size) * (1 - min(max(i, 0), w) / w) + step_size``
    with ``i0 = init_scale * step_size``. ``warmup_steps == 0`` gives a constant schedule.

    Args:
      step_size: the value from ``warmup_steps`` on, positive (concrete or traced).
      warmup_steps: ``w``, the length of the ramp in steps (>= 0).
      init_scale: the value at step 0 as a fraction of ``step_size``.

    Returns:
      The schedule ``i -> scalar``.

    Raises:
      ValueError: concrete ``step_size <= 0`` or ``warmup_steps < 0``.

    Source: ``optax.linear_schedule(init_value, step_size, warmup_steps)``.
    """
    check_step_size(step_size)
    check_nonnegative(warmup_steps, "warmup_steps")
    if is_concrete_number(warmup_steps) and warmup_steps == 0:

        def constant_schedule(i):
            return step_size

        return constant_schedule
    init_value = init_scale * step_size

    def schedule(i):
        frac = 1 - jnp.clip(i, 0, warmup_steps) / warmup_steps
        return (init_value - step_size) * frac + step_size

    return schedule


@register_schedule("cosine_decay", note="(``total_steps`` injected by the harness)")
def cosine_decay(step_size, total_steps: int | None = None, alpha: float = 0.0) -> Schedule:
    """Cosine decay (Loshchilov & Hutter 2017, SGDR, without restarts) over ``total_steps``:
    ``lr(i) = step_size * ((1 - alpha) * 0.5 * (1 + cos(pi * min(i, T) / T)) + alpha)``,
    from ``step_size`` at 0 to ``alpha * step_size`` at ``T`` and after.

    Args:
      step_size: base step size (positive scalar, may be traced).
      total_steps: ``T``; filled by the harness with the trial's budget.
      alpha: final value as a fraction of ``step_size``.

    Returns:
      The schedule ``i -> scalar``.

    Raises:
      ValueError: concrete ``step_size <= 0``; ``total_steps`` missing or not positive.

    Source: ``optax.cosine_decay_schedule(step_size, T, alpha)``.
    """
    check_step_size(step_size)
    _check_total_steps(total_steps, "cosine_decay")

    def schedule(i):
        frac = jnp.minimum(i, total_steps) / total_steps
        cosine = 0.5 * (1 + jnp.cos(jnp.pi * frac))
        return step_size * ((1 - alpha) * cosine + alpha)

    return schedule


def join_schedules(schedules: Sequence[Schedule], boundaries: Sequence[int]) -> Schedule:
    """Run ``schedules[k]`` from ``boundaries[k-1]`` on, with its step counted from that boundary.

    ``lr(i) = schedules[k](i - boundaries[k-1])`` for ``boundaries[k-1] <= i < boundaries[k]``
    (``boundaries[-1] = 0``): at a boundary the next schedule already holds (unlike
    :func:`~optimizers.core.piecewise_constant`, where the boundary step keeps the old value).

    Args:
      schedules: ``n + 1`` schedules.
      boundaries: ``n`` increasing step indices.

    Returns:
      The joined schedule ``i -> scalar``.

    Raises:
      ValueError: ``len(boundaries) != len(schedules) - 1`` (message with both lengths); concrete
        boundaries that are negative or not increasing.

    Source: ``optax.join_schedules``.
    """
    schedules = list(schedules)
    boundaries = list(boundaries)
    if len(boundaries) != len(schedules) - 1:
        raise ValueError(
            "join_schedules needs one boundary fewer than schedules, got "
            f"{len(schedules)} schedules and {len(boundaries)} boundaries {boundaries!r}"
        )
    concrete = [float(b) for b in boundaries if is_concrete_number(b)]
    if concrete != sorted(set(concrete)) or any(b < 0 for b in concrete):
        raise ValueError(f"join_schedules: boundaries must be increasing step indices >= 0, got "
                         f"{boundaries!r}")

    def schedule(i):
        out = schedules[0](i)
        for b, s in zip(boundaries, schedules[1:], strict=True):
            out = jnp.where(i < b, out, s(i - b))
        return out

    return schedule


@register_schedule("warmup_cosine_decay", note="(``total_steps`` injected by the harness)")
def warmup_cosine_decay(
    step_size, warmup_steps: int, total_steps: int | None = None, init_scale: float = 0.0, alpha: float = 0.0
) -> Schedule:
    """:func:`linear_warmup` over ``warmup_steps`` then :func:`cosine_decay` over the remaining
    ``total_steps - warmup_steps`` steps, from ``step_size`` down to ``alpha * step_size``.

    Args:
      step_size: the peak value, reached at ``warmup_steps``, positive (concrete or traced).
      warmup_steps: the length of the warmup in steps (>= 0).
      total_steps: the length of the whole schedule, > ``warmup_steps``; filled by the harness
        with the trial's budget.
      init_scale: the value at step 0 as a fraction of ``step_size``.
      alpha: the final value as a fraction of ``step_size``.

    Returns:
      The schedule ``i -> scalar``.

    Raises:
      ValueError: concrete ``step_size <= 0``; ``warmup_steps < 0``; ``total_steps`` missing or
        not greater than ``warmup_steps``.

    Source: ``optax.warmup_cosine_decay_schedule(init_scale * step_size, step_size,
    warmup_steps, total_steps, alpha * step_size)``.
    """
    check_step_size(step_size)
    _check_total_steps(total_steps, "warmup_cosine_decay")
    concrete = is_concrete_number(total_steps) and is_concrete_number(warmup_steps)
    if concrete and not total_steps > warmup_steps:
        raise ValueError(
            f"warmup_cosine_decay: total_steps ({total_steps!r}) must exceed warmup_steps ({warmup_steps!r})"
        )
    return join_schedules(
        [
            linear_warmup(step_size, warmup_steps, init_scale),
            cosine_decay(step_size, total_steps - warmup_steps, alpha),
        ],
        [warmup_steps],
    )


# --------------------------------------------------------------------------------------------
# Optax bridge.


def from_optax(tx: Any) -> Optimizer:
    """An Optax ``GradientTransformation`` as an ``(init_fn, update_fn, params_fn)`` triple.

    ``update_fn(i, grads, state)`` computes ``updates, s = tx.update(grads, s, params)`` and
    ``params + updates`` (cast back to each parameter's dtype, like ``optax.apply_updates``).
    The step index ``i`` is ignored: Optax keeps its own step count in its state, which is the
    same as ``i`` when steps start at 0, and survives a resume because it lives in the state.

    Args:
      tx: an ``optax.GradientTransformation`` (or anything with ``init(params)`` and
        ``update(updates, state, params)``).

    Returns:
      An :class:`~optimizers.core.Optimizer` whose state is an ``OptimizerState`` with one outer leaf
      holding ``(params, optax_state)``: :func:`~optimizers.core.unpack_optimizer_state` /
      ``pack_optimizer_state`` round-trip it and the unpacked form pickles.

    Raises:
      TypeError: ``tx`` lacks ``init``/``update``; at update, a gradient tree whose structure
        differs from the parameters' (message names both).
    """
    if not (callable(getattr(tx, "init", None)) and callable(getattr(tx, "update", None))):
        raise TypeError(f"from_optax expects an optax GradientTransformation, got {type(tx).__name__}")
    outer = jax.tree.structure(0)

    def init_fn(params):
        params = jax.tree.map(fresh, params)
        # every leaf its own buffer: an Optax state may hold the parameters or a hyperparameter
        # array it was given (inject_hyperparams keeps the step size), and the trainer donates the
        # state with its step size ("donate the same buffer twice")
        leaves, inner = jax.tree.flatten((params, jax.tree.map(fresh, tx.init(params))))
        return OptimizerState((leaves,), outer, (inner,))

    def update_fn(i, grads, opt_state):
        del i  # Optax counts steps in its own state.
        params, inner_state = _optax_inner(opt_state)
        p_tree, g_tree = jax.tree.structure(params), jax.tree.structure(grads)
        if p_tree != g_tree:
            raise tree_mismatch(p_tree, g_tree)
        updates, inner_state = tx.update(grads, inner_state, params)
        params = jax.tree.map(lambda p, u: jnp.asarray(p + u).astype(jnp.asarray(p).dtype), params, updates)
        leaves, inner = jax.tree.flatten((params, inner_state))
        return OptimizerState((leaves,), outer, (inner,))

    def params_fn(opt_state):
        return _optax_inner(opt_state)[0]

    return Optimizer(init_fn, update_fn, params_fn)


def _optax_inner(opt_state):
    """:func:`from_optax`'s ``(params, optax_state)`` from its :class:`OptimizerState`."""
    (leaves,), _, (inner,) = opt_state
    return jax.tree.unflatten(inner, leaves)


def optax_eval_params(opt_state: Any) -> Any:
    """The evaluation parameters of a :func:`from_optax` state that holds a Schedule-Free state.

    The ``optax.contrib.ScheduleFreeState`` may be anywhere in the Optax state (bare, inside a
    ``chain``, ``inject_hyperparams``, ...; the outermost first). Decided from the structure alone,
    so also under tracing. Optax is looked for only where something has imported it already (an
    Optax state cannot exist otherwise), so this never imports it into a process that does not use it.

    Args:
      opt_state: any optimizer state.

    Returns:
      ``optax.contrib.schedule_free_eval_params(sf_state, params)``, a pytree like the parameters;
      ``None`` for any other state (not a :func:`from_optax` state, or no Schedule-Free state in it).
    """
    optax = sys.modules.get("optax")
    if optax is None or not isinstance(opt_state, OptimizerState) or len(opt_state.packed_state) != 1:
        return None
    try:
        from optax import contrib
    except ImportError:  # pragma: no cover - optax without contrib
        return None
    (leaves,), _, (inner,) = opt_state
    tree = jax.tree.unflatten(inner, leaves)
    if not (isinstance(tree, tuple) and len(tree) == 2):
        return None
    params, inner_state = tree
    sf_type = contrib.ScheduleFreeState
    found = [s for s in jax.tree.leaves(inner_state, is_leaf=lambda x: isinstance(x, sf_type))
             if isinstance(s, sf_type)]
    if not found:
        return None
    return contrib.schedule_free_eval_params(found[0], params)


def _import_optax():
    """``optax``, or an ImportError saying what to install."""
    try:
        import optax
    except ImportError as e:  # pragma: no cover - optax is a dev dependency here
        raise ImportError(
            "the optax_* optimizers need optax: pip install 'optax==0.2.8' (or the project's [dev] extra)"
        ) from e
    return optax


def _optax_lr(step_size: Any) -> Any:
    """A step size for Optax: schedules pass through, concrete scalars are checked."""
    if callable(step_size):
        return step_size
    check_step_size(step_size)
    return step_size


# --------------------------------------------------------------------------------------------
# Optax optimizers by name (for comparisons in sweeps), through from_optax.


@register_optimizer("optax_sgd")
def optax_sgd(step_size) -> Optimizer:
    """``optax.sgd(step_size)`` through :func:`optimizers.extra.from_optax`.

    Args:
      step_size: Optax's ``learning_rate``: positive scalar, traced scalar, or schedule.

    Returns:
      An :class:`~optimizers.core.Optimizer` ``(init_fn, update_fn, params_fn)``.

    Raises:
      ValueError: a concrete ``step_size <= 0``.
      ImportError: optax is not installed.
    """
    optax = _import_optax()
    return from_optax(optax.sgd(_optax_lr(step_size)))


@register_optimizer("optax_momentum")
def optax_momentum(step_size, mass: float = 0.9, nesterov: bool = False) -> Optimizer:
    """``optax.sgd(step_size, momentum=mass, nesterov=nesterov)`` through ``from_optax``.

    Args:
      step_size: Optax's ``learning_rate``: positive scalar, traced scalar, or schedule.
      mass: decay of the momentum trace.
      nesterov: Nesterov momentum.

    Returns:
      An :class:`~optimizers.core.Optimizer` ``(init_fn, update_fn, params_fn)``.

    Raises:
      ValueError: a concrete ``step_size <= 0``.
      ImportError: optax is not installed.
    """
    optax = _import_optax()
    return from_optax(optax.sgd(_optax_lr(step_size), momentum=mass, nesterov=nesterov))


@register_optimizer("optax_adam")
def optax_adam(step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> Optimizer:
    """``optax.adam(step_size, b1, b2, eps)`` through ``from_optax``.

    Args:
      step_size: Optax's ``learning_rate``: positive scalar, traced scalar, or schedule.
      b1, b2: moment decay rates in ``[0, 1)``.
      eps: added to the root of the second moment.

    Returns:
      An :class:`~optimizers.core.Optimizer` ``(init_fn, update_fn, params_fn)``.

    Raises:
      ValueError: a concrete ``step_size <= 0``, ``b1``/``b2`` outside ``[0, 1)``.
      ImportError: optax is not installed.
    """
    check_unit_interval(b1, "b1")
    check_unit_interval(b2, "b2")
    optax = _import_optax()
    return from_optax(optax.adam(_optax_lr(step_size), b1=b1, b2=b2, eps=eps))
