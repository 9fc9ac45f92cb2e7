"""Helpers shared by :mod:`optimizers.core` and :mod:`optimizers.extra`.

Checks of concrete hyperparameters (run in Python when an optimizer or schedule is built, never on
traced values and never inside an update), and the per-leaf pieces several optimizers share:
their ``get_params``, a zero-initialised ``init`` and Adam's moment estimates. Imports jax and
numpy only.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "adam_moments",
    "bias_corrected",
    "check_nonnegative",
    "check_step_size",
    "check_unit_interval",
    "fresh",
    "is_concrete_number",
    "params_of",
    "positive_step_size",
    "tree_mismatch",
    "with_two_zeros",
]


# --------------------------------------------------------------------------------------------
# Validation of concrete hyperparameters (never of traced ones).


def is_concrete_number(x: Any) -> bool:
    """True for Python/numpy numbers and concrete 0-d arrays; False for tracers and the rest."""
    if isinstance(x, bool | np.bool_):
        return False
    if isinstance(x, int | float | np.integer | np.floating):
        return True
    if isinstance(x, np.ndarray):
        return x.ndim == 0 and np.issubdtype(x.dtype, np.number)
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        return x.ndim == 0 and jnp.issubdtype(x.dtype, jnp.number)
    return False


def check_step_size(step_size: Any, name: str = "step_size") -> None:
    """Raise ``ValueError`` if ``step_size`` is a concrete number that is not > 0 (NaN included)."""
    if is_concrete_number(step_size):
        v = float(step_size)
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {step_size!r}")


def positive_step_size(step_size: Any) -> Any:
    """``step_size`` itself, after :func:`check_step_size`: the extras' (``adamw``, ``muon``...)
    check of a concrete step size, which the drop-in ``make_schedule`` does not make (as the
    reference)."""
    check_step_size(step_size)
    return step_size


def check_nonnegative(value: Any, name: str) -> None:
    """Raise ``ValueError`` if ``value`` is a concrete number that is not ``>= 0``."""
    if is_concrete_number(value) and not float(value) >= 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")


def check_unit_interval(value: Any, name: str) -> None:
    """Raise ``ValueError`` if ``value`` is a concrete number outside ``[0, 1)``."""
    if is_concrete_number(value):
        v = float(value)
        if not 0.0 <= v < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {value!r}")


# --------------------------------------------------------------------------------------------
# State.


def fresh(x: Any) -> Any:
    """A copy of a concrete ``jax.Array`` (so donating the state never frees the caller's buffer)."""
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        return jnp.array(x, copy=True)
    return x


def tree_mismatch(params_tree, grads_tree) -> TypeError:
    """The ``TypeError`` for a gradient tree whose structure differs from the parameters' (the
    message names both structures)."""
    return TypeError(
        "optimizer update function was passed a gradient tree that did not match the parameter "
        f"tree structure with which it was initialized: parameter tree {params_tree} and grad tree "
        f"{grads_tree}."
    )


def params_of(state):
    """``get_params`` of every optimizer whose per-leaf state is a tuple starting with ``x``."""
    return state[0]


def with_two_zeros(x0):
    """``init`` of optimizers whose per-leaf state is ``(x, s1, s2)`` with both slots zero."""
    return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)


def adam_moments(i, g, m, v, b1, b2, *, wide_powers: bool = False):
    """Adam's moment estimates and their bias corrections at 0-based step ``i``:
    ``m <- (1 - b1) g + b1 m;  v <- (1 - b2) g**2 + b2 v;  m^ = m / (1 - b1**(i+1));
    v^ = v / (1 - b2**(i+1))``. The powers are taken in the leaf's dtype, as the reference's
    ``adam`` does (in bfloat16, 0.999 rounds to 1 and ``1 - b2**t`` to 0: ``v^`` is inf and the
    step 0), or with ``wide_powers`` by :func:`bias_corrected` (Optax's rule). Returns
    ``(m, v, m^, v^)``, each of ``m``'s shape and dtype."""
    m = (1 - b1) * g + b1 * m
    v = (1 - b2) * jnp.square(g) + b2 * v
    if wide_powers:
        return m, v, bias_corrected(m, b1, i), bias_corrected(v, b2, i)
    mhat = m / (1 - jnp.asarray(b1, m.dtype) ** (i + 1))
    vhat = v / (1 - jnp.asarray(b2, m.dtype) ** (i + 1))
    return m, v, mhat, vhat


def bias_corrected(moment, decay, i):
    """``moment / (1 - decay**(i+1))`` at 0-based step ``i``, the power taken in float32 or the
    moment's dtype if wider and the division in the moment's dtype (``optax.tree.bias_correction``
    takes it in float32: in bfloat16, 0.999 rounds to 1.0, so ``1 - decay**t`` would be 0)."""
    wide = jnp.promote_types(moment.dtype, jnp.float32)
    return moment / (1 - jnp.asarray(decay, wide) ** (i + 1)).astype(moment.dtype)
