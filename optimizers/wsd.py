"""The warmup-stable-decay (trapezoidal) schedule, registered as ``warmup_stable_decay``."""

from __future__ import annotations

from typing import Any, Literal

import jax.numpy as jnp

from optimizers.common import check_nonnegative, check_step_size, is_concrete_number
from optimizers.core import Schedule
from optimizers.registry import register_schedule

__all__ = ["DECAY_SHAPES", "warmup_stable_decay"]

#: The cool-down shapes: ``linear`` (1 - p) and ``1-sqrt`` (1 - sqrt(p)), p the cool-down's progress.
DECAY_SHAPES = ("linear", "1-sqrt")


def _check_scale(value: Any, name: str) -> None:
    if is_concrete_number(value) and not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"warmup_stable_decay: {name} must be in [0, 1], got {value!r}")


def _check_ends(init_scale: Any, final_scale: Any, warmup_offset: Any) -> None:
    """The warm-up's start and the cool-down's end: both scales in [0, 1], the offset 0 or 1."""
    _check_scale(init_scale, "init_scale")
    _check_scale(final_scale, "final_scale")
    if isinstance(warmup_offset, bool) or warmup_offset not in (0, 1):
        raise ValueError(f"warmup_stable_decay: warmup_offset must be 0 or 1, got {warmup_offset!r}")


def _check(warmup_steps: Any, total_steps: Any, decay_fraction: Any, decay_shape: Any) -> None:
    if total_steps is None:
        raise ValueError("warmup_stable_decay: total_steps is required (the harness fills it with the "
                         "trial's step budget)")
    if is_concrete_number(total_steps) and not float(total_steps) > 0:
        raise ValueError(f"warmup_stable_decay: total_steps must be positive, got {total_steps!r}")
    check_nonnegative(warmup_steps, "warmup_stable_decay: warmup_steps")
    if is_concrete_number(decay_fraction) and not 0.0 < float(decay_fraction) <= 1.0:
        raise ValueError(f"warmup_stable_decay: decay_fraction must be in (0, 1], got {decay_fraction!r}")
    if decay_shape not in DECAY_SHAPES:
        raise ValueError(f"warmup_stable_decay: decay_shape must be one of {', '.join(DECAY_SHAPES)}, "
                         f"got {decay_shape!r}")
    if all(is_concrete_number(v) for v in (warmup_steps, total_steps, decay_fraction)):
        decay_start = float(total_steps) * (1.0 - float(decay_fraction))
        if warmup_steps > decay_start:
            raise ValueError(
                f"warmup_stable_decay: warmup_steps ({warmup_steps!r}) must end before the cool-down "
                f"starts at step {decay_start:g} (total_steps {total_steps!r} x (1 - decay_fraction "
                f"{decay_fraction!r}))")


@register_schedule("warmup_stable_decay", note="(``total_steps`` injected by the harness)")
def warmup_stable_decay(
    step_size, warmup_steps: int = 0, total_steps: int | None = None, decay_fraction: float = 0.2,
    decay_shape: Literal["linear", "1-sqrt"] = "linear", init_scale: float = 0.0, final_scale: float = 0.0,
    warmup_offset: int = 0,
) -> Schedule:
    """Linear warm-up, constant, then a cool-down over the last ``decay_fraction`` of the budget.

    With ``T = total_steps``, ``W = warmup_steps``, ``D = decay_fraction * T``, ``S = T - D``:
    ``lr(i) = step_size * (a + (1 - a) * (i + o) / W)`` for ``i < W`` (``a = init_scale``,
    ``o = warmup_offset``: 0, step 0 at ``a``; 1, modded-nanogpt's ``(step + 1) / W``), ``step_size``
    for ``W <= i < S``, then ``step_size * (f + (1 - f) * shape(p))`` with ``p = min((i - S) / D, 1)``,
    ``shape(p) = 1 - p`` (``linear``) or ``1 - sqrt(p)`` (``1-sqrt``), ``f = final_scale``.

    Args:
      step_size: base step size (positive scalar, may be traced).
      warmup_steps: ``W``, steps of the linear warm-up (0: none).
      total_steps: ``T``; filled by the harness with the trial's budget.
      decay_fraction: ``D / T`` in (0, 1].
      decay_shape: ``"linear"`` or ``"1-sqrt"``.
      init_scale, final_scale: first and last values as fractions of ``step_size``, in [0, 1].
      warmup_offset: 0 (``i / W``) or 1 (``(i + 1) / W``, the warm-up of modded-nanogpt's
        optimization-track AdamW baseline, whose first step is at ``step_size / W``).

    Returns:
      A jit-traceable ``schedule(i) -> step size``.

    Source: Hägele et al. 2024 ("Scaling Laws and Compute-Optimal Training Beyond Fixed Training
    Durations"); modded-nanogpt's ``get_lr`` is ``decay_shape="linear"``, ``final_scale=0.1``, ``W=0``.

    Raises:
      ValueError: concrete ``step_size <= 0``, ``total_steps`` missing or not positive,
        ``warmup_steps < 0``, ``decay_fraction`` outside (0, 1], a scale outside [0, 1], an unknown
        ``decay_shape``, a ``warmup_offset`` other than 0 or 1, or a warm-up that ends after the
        cool-down starts.
    """
    check_step_size(step_size)
    _check(warmup_steps, total_steps, decay_fraction, decay_shape)
    _check_ends(init_scale, final_scale, warmup_offset)
    decay_len = decay_fraction * total_steps
    decay_start = total_steps - decay_len

    def schedule(i):
        i = jnp.asarray(i, jnp.float32)
        warm = init_scale + (1.0 - init_scale) * (i + warmup_offset) / max(warmup_steps, 1)
        p = jnp.clip((i - decay_start) / decay_len, 0.0, 1.0)
        shape = 1.0 - (p if decay_shape == "linear" else jnp.sqrt(p))
        scale = jnp.where(i < warmup_steps, warm, final_scale + (1.0 - final_scale) * shape)
        return step_size * scale

    return schedule
