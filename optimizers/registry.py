"""Registries by name: ``OPTIMIZERS`` and ``SCHEDULES``.

Every factory takes the base ``step_size`` first and its hyperparameters as keyword arguments
with defaults in the signature (the sweep config validator reads them with
``inspect.signature``). ``step_size`` may be a Python/numpy float, a traced scalar (vmapped
learning rates) or a schedule. A schedule factory argument named ``total_steps`` is filled in by
the harness with the trial's step budget.

* ``OPTIMIZERS[name](step_size, **hparams) -> Optimizer``
* ``SCHEDULES[name](step_size, **hparams) -> Schedule``
"""

from collections.abc import Callable, Sequence

from optimizers import core, extra
from optimizers.core import Optimizer, Schedule

__all__ = ["OPTIMIZERS", "SCHEDULES"]


# --------------------------------------------------------------------------------------------
# Optimizer factories (thin wrappers that give every hyperparameter a default).


def sgd(step_size) -> Optimizer:
    """:func:`optimizers.core.sgd`: ``x <- x - lr * g``."""
    return core.sgd(step_size)


def momentum(step_size, mass: float = 0.9) -> Optimizer:
    """:func:`optimizers.core.momentum` (heavy ball) with ``mass`` defaulting to 0.9."""
    return core.momentum(step_size, mass)


def nesterov(step_size, mass: float = 0.9) -> Optimizer:
    """:func:`optimizers.core.nesterov` with ``mass`` defaulting to 0.9."""
    return core.nesterov(step_size, mass)


def adagrad(step_size, momentum: float = 0.9) -> Optimizer:
    """:func:`optimizers.core.adagrad`."""
    return core.adagrad(step_size, momentum)


def rmsprop(step_size, gamma: float = 0.9, eps: float = 1e-8) -> Optimizer:
    """:func:`optimizers.core.rmsprop`."""
    return core.rmsprop(step_size, gamma, eps)


def rmsprop_momentum(step_size, gamma: float = 0.9, eps: float = 1e-8, momentum: float = 0.9) -> Optimizer:
    """:func:`optimizers.core.rmsprop_momentum`."""
    return core.rmsprop_momentum(step_size, gamma, eps, momentum)


def adam(step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> Optimizer:
    """:func:`optimizers.core.adam`."""
    return core.adam(step_size, b1, b2, eps)


def adamax(step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> Optimizer:
    """:func:`optimizers.core.adamax`."""
    return core.adamax(step_size, b1, b2, eps)


def sm3(step_size, momentum: float = 0.9) -> Optimizer:
    """:func:`optimizers.core.sm3`."""
    return core.sm3(step_size, momentum)


def adamw(
    step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 1e-4
) -> Optimizer:
    """:func:`optimizers.extra.adamw`."""
    return extra.adamw(step_size, b1, b2, eps, weight_decay)


def nadamw(
    step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 1e-4
) -> Optimizer:
    """:func:`optimizers.extra.nadamw`."""
    return extra.nadamw(step_size, b1, b2, eps, weight_decay)


def lion(step_size, b1: float = 0.9, b2: float = 0.99, weight_decay: float = 1e-3) -> Optimizer:
    """:func:`optimizers.extra.lion`."""
    return extra.lion(step_size, b1, b2, weight_decay)


def optax_sgd(step_size) -> Optimizer:
    """``optax.sgd(step_size)`` through :func:`optimizers.extra.from_optax`."""
    optax = extra._import_optax()
    return extra.from_optax(optax.sgd(extra._optax_lr(step_size)))


def optax_momentum(step_size, mass: float = 0.9, nesterov: bool = False) -> Optimizer:
    """``optax.sgd(step_size, momentum=mass, nesterov=nesterov)`` through ``from_optax``."""
    optax = extra._import_optax()
    return extra.from_optax(optax.sgd(extra._optax_lr(step_size), momentum=mass, nesterov=nesterov))


def optax_adam(step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> Optimizer:
    """``optax.adam(step_size, b1, b2, eps)`` through ``from_optax``."""
    core._check_unit_interval(b1, "b1")
    core._check_unit_interval(b2, "b2")
    optax = extra._import_optax()
    return extra.from_optax(optax.adam(extra._optax_lr(step_size), b1=b1, b2=b2, eps=eps))


OPTIMIZERS: dict[str, Callable[..., Optimizer]] = {
    "sgd": sgd,
    "momentum": momentum,
    "nesterov": nesterov,
    "adagrad": adagrad,
    "rmsprop": rmsprop,
    "rmsprop_momentum": rmsprop_momentum,
    "adam": adam,
    "adamax": adamax,
    "sm3": sm3,
    "adamw": adamw,
    "nadamw": nadamw,
    "lion": lion,
    "optax_sgd": optax_sgd,
    "optax_momentum": optax_momentum,
    "optax_adam": optax_adam,
}


# --------------------------------------------------------------------------------------------
# Schedule factories: f(step_size, **hparams) -> Schedule.


def constant(step_size) -> Schedule:
    """:func:`optimizers.core.constant`: ``lr(i) = step_size``."""
    return core.constant(step_size)


def exponential_decay(step_size, decay_steps: float, decay_rate: float) -> Schedule:
    """:func:`optimizers.core.exponential_decay`: ``step_size * decay_rate ** (i / decay_steps)``."""
    return core.exponential_decay(step_size, decay_steps, decay_rate)


def inverse_time_decay(step_size, decay_steps: float, decay_rate: float, staircase: bool = False) -> Schedule:
    """:func:`optimizers.core.inverse_time_decay`."""
    return core.inverse_time_decay(step_size, decay_steps, decay_rate, staircase)


def polynomial_decay(step_size, decay_steps: int, final_step_size: float, power: float = 1.0) -> Schedule:
    """:func:`optimizers.core.polynomial_decay` (``final_step_size`` is absolute)."""
    return core.polynomial_decay(step_size, decay_steps, final_step_size, power)


def piecewise(step_size, boundaries: Sequence[int], multipliers: Sequence[float]) -> Schedule:
    """:func:`optimizers.core.piecewise_constant` with values ``step_size * multipliers[k]``.

    Step ``i`` gets ``multipliers[k]`` where ``k`` counts the boundaries strictly below ``i``.

    Raises:
      ValueError: ``len(boundaries) != len(multipliers) - 1``, or a concrete ``step_size <= 0``.
    """
    core._check_step_size(step_size)
    return core.piecewise_constant(boundaries, [step_size * m for m in multipliers])


def linear_warmup(step_size, warmup_steps: int, init_scale: float = 0.0) -> Schedule:
    """:func:`optimizers.extra.linear_warmup`."""
    return extra.linear_warmup(step_size, warmup_steps, init_scale)


def cosine_decay(step_size, total_steps: int | None = None, alpha: float = 0.0) -> Schedule:
    """:func:`optimizers.extra.cosine_decay` (``total_steps`` injected by the harness)."""
    return extra.cosine_decay(step_size, total_steps, alpha)


def warmup_cosine_decay(
    step_size, warmup_steps: int, total_steps: int | None = None, init_scale: float = 0.0, alpha: float = 0.0
) -> Schedule:
    """:func:`optimizers.extra.warmup_cosine_decay` (``total_steps`` injected by the harness)."""
    return extra.warmup_cosine_decay(step_size, warmup_steps, total_steps, init_scale, alpha)


SCHEDULES: dict[str, Callable[..., Schedule]] = {
    "constant": constant,
    "exponential_decay": exponential_decay,
    "inverse_time_decay": inverse_time_decay,
    "polynomial_decay": polynomial_decay,
    "piecewise": piecewise,
    "linear_warmup": linear_warmup,
    "cosine_decay": cosine_decay,
    "warmup_cosine_decay": warmup_cosine_decay,
}
