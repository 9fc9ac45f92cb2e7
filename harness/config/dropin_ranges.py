"""The ranges a sweep's values must be in for the drop-in optimizers and schedules.

``optimizers.core`` takes every value ``jax.example_libraries.optimizers`` takes (``adam(b1=1.0)``
builds and trains to NaN; ``exponential_decay(decay_rate=-1.0)`` alternates the sign of the step
size), so that it stays a drop-in. A sweep is protected here instead: :func:`check_ranges` runs
before the harness builds one of those builders with a config's values (the pre-flight's build of
each optimizer and schedule, :mod:`harness.orchestrate.preflight`, and the config check of an
entry's builder, :func:`harness.config.hparams.builder_problems`) and raises the ``ValueError`` the
pre-flight turns into one ``FILE: key.path: message`` line. Only plain numbers are checked (never a
traced value or a schedule). ``grad_clip`` is checked by the schema (``> 0``). Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from harness.config.numbers import is_num

__all__ = ["RANGES", "check_ranges"]

_POSITIVE, _NONNEGATIVE, _UNIT = "positive", ">= 0", "[0, 1)"
_STEP = (("step_size", _POSITIVE),)
_ADAM = (*_STEP, ("b1", _UNIT), ("b2", _UNIT), ("eps", _NONNEGATIVE))
_RMSPROP = (*_STEP, ("gamma", _UNIT), ("eps", _NONNEGATIVE))

#: ``{builder's module.qualname: ((hyperparameter, range), ...)}``, checked in this order (the first
#: problem is raised; the config check then finds the next, as it did when the builders raised).
RANGES: dict[str, tuple[tuple[str, str], ...]] = {
    **{f"optimizers.core.{name}": _STEP
       for name in ("sgd", "momentum", "nesterov", "adagrad", "sm3", "constant")},
    "optimizers.core.rmsprop": _RMSPROP,
    "optimizers.core.rmsprop_momentum": _RMSPROP,
    "optimizers.core.adam": _ADAM,
    "optimizers.core.adamax": _ADAM,
    "optimizers.core.exponential_decay": (*_STEP, ("decay_steps", _POSITIVE), ("decay_rate", _POSITIVE)),
    "optimizers.core.inverse_time_decay": (*_STEP, ("decay_steps", _POSITIVE), ("decay_rate", _NONNEGATIVE)),
    "optimizers.core.polynomial_decay": (*_STEP, ("decay_steps", _POSITIVE),
                                         ("final_step_size", _NONNEGATIVE)),
}


def _inside(value: float, kind: str) -> bool:
    if kind == _POSITIVE:
        return value > 0
    if kind == _NONNEGATIVE:
        return value >= 0
    return 0 <= value < 1


def check_ranges(builder: Callable, hparams: Mapping[str, Any]) -> None:
    """Refuse a value of ``hparams`` outside its range when ``builder`` is a drop-in one.

    Args:
      builder: the optimizer or schedule builder about to be called (any callable; one not in
        :data:`RANGES` is not checked).
      hparams: the keyword arguments it is about to get (``step_size`` included where given);
        values that are not plain numbers (a schedule, a traced scalar) are not checked.

    Raises:
      ValueError: ``"{name} must be positive, got {value!r}"`` (or ``must be >= 0``, ``must be in
        [0, 1)``) for the first value outside its range, NaN included.
    """
    key = f"{getattr(builder, '__module__', '')}.{getattr(builder, '__qualname__', '')}"
    for name, kind in RANGES.get(key, ()):
        value = hparams.get(name)
        if is_num(value) and not _inside(value, kind):
            raise ValueError(f"{name} must be {'in ' if kind == _UNIT else ''}{kind}, got {value!r}")
