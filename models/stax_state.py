"""Layer bookkeeping and explicit layer state for ``models.stax`` (beyond the reference).

A layer stays a plain ``(init_fun, apply_fun)`` pair; its name and, for layers with state, its
stateful versions ride along as function attributes that reference-style code never looks at
(:func:`make_layer`). :func:`stateful` turns any layer into the pair
``init(rng, input_shape) -> (output_shape, params, state)`` and
``apply(params, state, inputs, *, train, rng=None, **kwargs) -> (outputs, new_state)``; the
BatchNorm running statistics (``bn_*``) live here too. Also the init-time shape checks that raise
:class:`ShapeError`. ``models.stax`` re-exports the public names (``ShapeError``, ``stateful``,
``has_state``, ``layer_name``).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

__all__ = ["ShapeError", "has_state", "layer_name", "stateful"]


class ShapeError(ValueError):
    """An input shape a layer cannot take, found at init. The message names the layer and shapes."""


# --------------------------------------------------------------------------------------------------
# Layer bookkeeping. A layer stays a plain (init_fun, apply_fun) pair; its name and, for layers
# with state, its stateful versions ride along as function attributes that reference-style code
# never looks at.


def make_layer(name, init_fun, apply_fun, init_with_state=None, apply_with_state=None):
    init_fun.stax_name = name
    if init_with_state is not None:
        init_fun.stax_init_with_state = init_with_state
        apply_fun.stax_apply_with_state = apply_with_state
    return init_fun, apply_fun


def layer_name(layer) -> str:
    """A short human name of ``layer``, e.g. ``'Dense(10)'``.

    Args:
      layer: an ``(init_fun, apply_fun)`` pair.

    Returns:
      The name this module's layers carry, else ``init_fun.__name__``, else ``'layer'``.
    """
    return getattr(layer[0], "stax_name", getattr(layer[0], "__name__", "layer"))


def has_state(layer) -> bool:
    """Whether ``layer`` (or a layer inside it) carries running state (e.g. :func:`BatchNorm`).

    Args:
      layer: an ``(init_fun, apply_fun)`` pair.

    Returns:
      A bool; False for layers that only read :func:`stateful`'s ``train`` flag (:func:`Dropout`).
    """
    return hasattr(layer[0], "stax_init_with_state") and getattr(layer[0], "stax_has_state", True)


def as_shape(s):
    return tuple(s)


def fmt_shape(shape):
    """A shape as plain ints for messages, e.g. ``(8, 3)``; lists of shapes as lists."""
    if isinstance(shape, (list, tuple)) and shape and isinstance(shape[0], (list, tuple)):
        return [fmt_shape(s) for s in shape]
    return tuple(int(d) if d is not None else None for d in shape)


def check_rank(name, input_shape, rank, what):
    if len(input_shape) != rank:
        raise ShapeError(
            f"{name}: expected an input shape of rank {rank} ({what}), got {fmt_shape(input_shape)}"
        )


def feature_shape(name, input_shape):
    """``input_shape`` as a tuple; :class:`ShapeError` unless its last (feature) dimension is known."""
    input_shape = as_shape(input_shape)
    if len(input_shape) == 0 or input_shape[-1] is None or input_shape[-1] <= 0:
        raise ShapeError(f"{name}: needs a known last (feature) dimension, got input shape "
                         f"{fmt_shape(input_shape)}")
    return input_shape


def check_positive(name, input_shape, output_shape):
    if any(d is not None and d != -1 and d <= 0 for d in output_shape):
        raise ShapeError(
            f"{name}: input shape {fmt_shape(input_shape)} gives an empty output (spatial dims "
            f"{fmt_shape(output_shape)}; input too small for the window/filter)"
        )


def bn_checked_shape(name, axis, input_shape):
    """``input_shape`` as a tuple; :class:`ShapeError` for an axis outside its rank."""
    input_shape = as_shape(input_shape)
    if any(not -len(input_shape) <= a < len(input_shape) for a in axis):
        raise ShapeError(f"{name}: axis out of range for input shape {fmt_shape(input_shape)}")
    return input_shape


def bn_state_shape(name, axis, input_shape):
    """The running statistics' shape; :class:`ShapeError` for a negative axis (the reference's params
    keep its dim, the statistics would not), one out of range, or unknown sizes off ``axis``."""
    if any(a < 0 for a in axis):
        raise ShapeError(f"{name}: with running statistics, give the axes as non-negative indices")
    _, stat, _ = _bn_stat_shapes(bn_checked_shape(name, axis, input_shape), axis)
    if any(d is None or d < 0 for d in stat):
        raise ShapeError(f"{name}: running statistics need known sizes off the normalised axes, "
                         f"got input shape {fmt_shape(input_shape)}")
    return stat


def _bn_stat_shapes(shape, axis):
    """``(reduced axes, running statistics' shape, their shape broadcastable to the input)``."""
    red = {a % len(shape) for a in axis}
    stat = tuple(d for i, d in enumerate(shape) if i not in red)
    keep = tuple(1 if i in red else d for i, d in enumerate(shape))
    return red, stat, keep


def _bn_normalize(params, x, mean, var, red, epsilon, center_scale):
    """``(x - mean) * (gamma * rsqrt(var + eps)) + beta`` (``flax.linen.BatchNorm``'s form: gamma
    folds into the per-feature factor, so the backward pass reuses ``x - mean`` instead of keeping
    the standardised ``x`` as well); ``red``: the normalised axes."""
    center, scale = center_scale
    beta, gamma = params
    ed = tuple(None if i in red else slice(None) for i in range(x.ndim))
    mul = lax.rsqrt(var + jnp.asarray(epsilon, var.dtype))
    if scale:
        mul = mul * gamma[ed]
    y = (x - mean) * mul
    return y + beta[ed] if center else y


def bn_with_state(params, state, x, train, axis, epsilon, momentum, center_scale):
    """:func:`BatchNorm`'s ``apply_with_state``: ``(y, state)``, normalised with the batch's
    statistics and the running ones updated (``train``), else with the running ones, unchanged."""
    running_mean, running_var = state
    red, stat, keep = _bn_stat_shapes(x.shape, axis)
    if not train:
        mean = jnp.reshape(running_mean, keep).astype(x.dtype)
        var = jnp.reshape(running_var, keep).astype(x.dtype)
        return _bn_normalize(params, x, mean, var, red, epsilon, center_scale), state
    xs = x.astype(jnp.promote_types(x.dtype, jnp.float32))  # E[x²] - E[x]² cancels in bfloat16
    mean = jnp.mean(xs, tuple(sorted(red)), keepdims=True)
    var = jnp.clip(jnp.mean(jnp.square(xs), tuple(sorted(red)), keepdims=True) - jnp.square(mean), 0)
    m = jnp.asarray(momentum, running_mean.dtype)
    new_mean = m * running_mean + (1 - m) * jnp.reshape(mean, stat).astype(running_mean.dtype)
    new_var = m * running_var + (1 - m) * jnp.reshape(var, stat).astype(running_var.dtype)
    y = _bn_normalize(params, x, mean.astype(x.dtype), var.astype(x.dtype), red, epsilon, center_scale)
    return y, (new_mean, new_var)


def plain_stateful(layer):
    init_fun, apply_fun = layer
    if hasattr(init_fun, "stax_init_with_state") and hasattr(apply_fun, "stax_apply_with_state"):
        return init_fun.stax_init_with_state, apply_fun.stax_apply_with_state

    def init_with_state(rng, input_shape):
        out_shape, params = init_fun(rng, input_shape)
        return out_shape, params, ()

    def apply_with_state(params, state, inputs, *, train, rng=None, **kwargs):
        return apply_fun(params, inputs, rng=rng, **kwargs), state

    return init_with_state, apply_with_state


def stateful(layer):
    """The explicit-state form of ``layer``, threading running state (BatchNorm's) and a ``train`` flag.

    ``train`` must be a Python bool (static under ``jit``). Layers without state behave as their
    ``apply_fun``, except :func:`Dropout`, which is the identity when ``train=False``.

    Args:
      layer: an ``(init_fun, apply_fun)`` pair.

    Returns:
      ``(init, apply)``: ``init(rng, input_shape) -> (output_shape, params, state)`` (params identical
      to ``layer[0](rng, input_shape)``; ``state`` is ``()`` when no inner layer has state) and
      ``apply(params, state, inputs, *, train, rng=None, **kwargs) -> (outputs, new_state)``.
    """
    return plain_stateful(layer)


def any_state(states):
    return any(s != () for s in states) if all(isinstance(s, tuple) for s in states) else True
