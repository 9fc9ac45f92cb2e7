"""Stax: a drop-in re-implementation of ``jax.example_libraries.stax``.

Every public name of the reference exists here with the same signature and semantics (layers are
``(init_fun, apply_fun)`` pairs; ``init_fun(rng, input_shape) -> (output_shape, params)``;
``apply_fun(params, inputs, *, rng=None, **kwargs) -> outputs``). The same rng and input shape give
the same parameters, and the same parameters and inputs the same outputs, as the reference
(``tests/test_stax.py`` checks this layer by layer). This file holds the reference's layers and
combinators; what goes beyond the reference lives in its own module and is re-exported here
(nothing there changes a reference-compatible call):

* ``models/stax_state.py``: **running statistics** for :func:`BatchNorm`. :func:`stateful` turns
  any layer into the pair ``init(rng, input_shape) -> (output_shape, params, state)`` and
  ``apply(params, state, inputs, *, train, rng=None, **kwargs) -> (outputs, new_state)``.
  ``state`` is a pytree of arrays (``()`` when no layer has state), threaded explicitly, so the pair
  is safe under ``jax.jit`` and ``jax.vmap``. With ``train=True`` BatchNorm normalises with the batch
  statistics exactly as the reference does and returns updated running mean/variance; with
  ``train=False`` it normalises with the running statistics, so a one-example batch gets a real
  output instead of ``beta``. With ``train=False`` every :func:`Dropout` is the identity. Also the
  **shape errors at init**: a layer given an input shape it cannot take raises :class:`ShapeError`
  naming the layer and the shapes; :func:`serial` prefixes the index of the failing layer.
* ``models/stax_cpu.py``: ``GeneralConv(..., impl="patches" | "auto")`` computes the convolution
  as im2col patches times a matrix (much faster inside ``lax.scan`` on XLA:CPU; the default
  ``impl="xla"`` is the reference's ``lax`` call), and a tiled ``MaxPool`` whose gradient avoids
  ``select_and_scatter``.
* ``models/stax_seq.py``: sequence and decoder layers for Transformers: ``Embedding``,
  ``LayerNorm``, ``PositionalEmbedding``, ``SinusoidalPositionalEmbedding``,
  ``MultiHeadSelfAttention``, ``RMSNorm``, ``RotarySelfAttention``, ``MLP``, ``soft_cap``; the
  :func:`Residual` combinator is at the end of this file.
* :func:`Dropout` without an rng in test mode returns its inputs (jax 0.10.2's reference raises).
"""

from __future__ import annotations

import functools
import math
import numbers

import jax
import jax.numpy as jnp
from jax import lax, random
from jax.nn import (
    elu,
    gelu,
    leaky_relu,
    log_softmax,
    relu,
    selu,
    sigmoid,
    softmax,
    softplus,
    standardize,
)
from jax.nn.initializers import glorot_normal, normal, ones, zeros

from models.stax_cpu import conv_outside_loops  # noqa: F401  (re-exported: harness.train uses it)
from models.stax_cpu import conv_patches as _conv_patches
from models.stax_cpu import resolve_conv_impl as _resolve_conv_impl
from models.stax_cpu import tiled_max_pool as _tiled_max_pool
from models.stax_seq import (
    MLP,
    MLP_KINDS,
    Embedding,
    LayerNorm,
    MultiHeadSelfAttention,
    PositionalEmbedding,
    RMSNorm,
    RotarySelfAttention,
    SinusoidalPositionalEmbedding,
    apply_rope,
    attention,
    causal_mask,
    rms_normalize,
    rope_frequencies,
    sinusoidal_table,
    soft_cap,
)
from models.stax_state import ShapeError, has_state, layer_name, stateful
from models.stax_state import any_state as _any_state
from models.stax_state import as_shape as _shape
from models.stax_state import bn_checked_shape as _bn_checked_shape
from models.stax_state import bn_state_shape as _bn_state_shape
from models.stax_state import bn_with_state as _bn_with_state
from models.stax_state import check_positive as _check_positive
from models.stax_state import check_rank as _check_rank
from models.stax_state import feature_shape as _feature_shape
from models.stax_state import fmt_shape as _fmt
from models.stax_state import make_layer as _layer
from models.stax_state import plain_stateful as _plain_stateful
from models.stax_state import strict_shapes as _strict_shapes

__all__ = [
    "MLP", "MLP_KINDS", "AvgPool", "BatchNorm", "Conv", "Conv1DTranspose", "ConvTranspose", "Dense",
    "Dropout", "Elu", "Embedding", "Exp", "FanInConcat", "FanInSum", "FanOut", "Flatten", "Gelu",
    "GeneralConv", "GeneralConvTranspose", "Identity", "LayerNorm", "LeakyRelu", "LogSoftmax",
    "MaxPool", "MultiHeadSelfAttention", "PositionalEmbedding", "RMSNorm", "Relu", "Residual",
    "RotarySelfAttention", "Selu", "ShapeError", "Sigmoid", "SinusoidalPositionalEmbedding",
    "Softmax", "Softplus", "SumPool", "Tanh", "apply_rope", "attention", "causal_mask",
    "elementwise", "elu", "gelu", "glorot", "glorot_normal", "has_state", "layer_name",
    "leaky_relu", "log_softmax", "logsoftmax", "normal", "ones", "parallel", "randn", "relu",
    "rms_normalize", "rope_frequencies", "selu", "serial", "shape_dependent", "sigmoid",
    "sinusoidal_table", "soft_cap", "softmax", "softplus", "standardize", "stateful", "zeros",
]

# Initializer and function aliases kept by the reference for backwards compatibility.
glorot = glorot_normal
randn = normal
logsoftmax = log_softmax


# --------------------------------------------------------------------------------------------------
# Layers


def Dense(out_dim, W_init=glorot_normal(), b_init=normal()):
    """Dense (fully-connected) layer: ``inputs @ W + b`` over the last axis.

    Args:
      out_dim: the number of output features.
      W_init: the kernel's initializer (default Glorot normal).
      b_init: the bias's initializer (default ``normal()``, stddev 1e-2).

    Returns:
      ``(init_fun, apply_fun)``: ``apply_fun(params, x)`` maps ``(..., in_dim)`` to ``(..., out_dim)``;
      params ``(W (in_dim, out_dim), b (out_dim,))``, float32 from the initializers.

    Raises:
      ShapeError: (at init) an empty input shape or an unknown last dimension.

    Source: ``jax.example_libraries.stax.Dense``.
    """
    name = f"Dense({out_dim})"

    def init_fun(rng, input_shape):
        input_shape = _feature_shape(name, input_shape)
        output_shape = (*input_shape[:-1], out_dim)
        k1, k2 = random.split(rng)
        W = W_init(k1, (input_shape[-1], out_dim))
        b = b_init(k2, (out_dim,))
        return output_shape, (W, b)

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return jnp.dot(inputs, W) + b

    return _layer(name, init_fun, apply_fun)


def _kernel_shape(lhs_spec, rhs_spec, out_chan, filter_shape, input_shape):
    it = iter(filter_shape)
    return [
        out_chan if c == "O" else input_shape[lhs_spec.index("C")] if c == "I" else next(it)
        for c in rhs_spec
    ]


def _conv_defaults(rhs_spec, filter_shape, strides, W_init):
    """The strides (default all 1) and the kernel initializer (default Glorot normal over the
    kernel's I and O axes), as the reference's conv layers set them."""
    return (strides or (1,) * len(filter_shape),
            W_init or glorot_normal(rhs_spec.index("I"), rhs_spec.index("O")))


def _conv_params(rng, kernel_shape, out_spec, out_chan, W_init, b_init):
    """``(W, b)`` of a conv layer: the kernel, and a bias broadcastable over ``out_spec``."""
    bias_shape = [out_chan if c == "C" else 1 for c in out_spec]
    k1, k2 = random.split(rng)
    return W_init(k1, kernel_shape), b_init(k2, bias_shape)


def GeneralConv(dimension_numbers, out_chan, filter_shape, strides=None, padding="VALID",
                W_init=None, b_init=normal(1e-6), *, impl="xla"):
    """General convolution layer (``lax.conv_general_dilated`` plus a bias).

    Args:
      dimension_numbers: ``(lhs_spec, rhs_spec, out_spec)`` strings, e.g. ``('NHWC', 'HWIO', 'NHWC')``.
      out_chan: the number of output channels.
      filter_shape: the spatial window, e.g. ``(3, 3)``.
      strides: per spatial dim (default all 1).
      padding: ``'VALID'``, ``'SAME'`` or explicit ``(low, high)`` pairs.
      W_init: default ``glorot_normal(in_axis=rhs_spec.index('I'), out_axis=rhs_spec.index('O'))``.
      b_init: default ``normal(1e-6)``; bias shape is 1 everywhere but ``out_chan`` on 'C'.
      impl: ``'xla'`` (default, the reference's call), ``'patches'`` (im2col patches @ matrix, equal up to
        float32 summation order: matmul speed inside ``lax.scan``, where XLA:CPU runs convolutions ~40x
        slower, jax 0.10.2) or ``'auto'`` (``'patches'`` on CPU outside :func:`conv_outside_loops`).

    Returns:
      ``(init_fun, apply_fun)``; params ``(W, b)``.

    Raises:
      ValueError: an unknown ``impl``.
      ShapeError: (at init) an input rank other than ``len(lhs_spec)``; through :func:`stateful`, an
        empty output (the reference's init gives its shape).

    Source: ``jax.example_libraries.stax.GeneralConv``.
    """
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    one = (1,) * len(filter_shape)  # no dilation
    strides, W_init = _conv_defaults(rhs_spec, filter_shape, strides, W_init)
    if impl not in ("xla", "patches", "auto"):
        raise ValueError(f"GeneralConv: impl must be 'xla', 'patches' or 'auto', got {impl!r}")
    name = f"GeneralConv({lhs_spec},{rhs_spec},{out_spec}; {out_chan}, {tuple(filter_shape)})"

    def init_fun(rng, input_shape):
        input_shape = _shape(input_shape)
        _check_rank(name, input_shape, len(lhs_spec), f"lhs spec {lhs_spec!r}")
        kernel_shape = _kernel_shape(lhs_spec, rhs_spec, out_chan, filter_shape, input_shape)
        output_shape = lax.conv_general_shape_tuple(
            input_shape, kernel_shape, strides, padding, dimension_numbers)
        _check_positive(name, input_shape, [d for i, d in enumerate(output_shape)
                                            if i != out_spec.index("N")])
        return output_shape, _conv_params(rng, kernel_shape, out_spec, out_chan, W_init, b_init)

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        if _resolve_conv_impl(impl) == "patches":
            return _conv_patches(inputs, W, strides, padding, dimension_numbers) + b
        return lax.conv_general_dilated(inputs, W, strides, padding, one, one,
                                        dimension_numbers=dimension_numbers) + b

    return _layer(name, init_fun, apply_fun)


Conv = functools.partial(GeneralConv, ("NHWC", "HWIO", "NHWC"))
Conv.__doc__ = "2-D convolution, NHWC inputs and HWIO kernel: ``GeneralConv(('NHWC', 'HWIO', 'NHWC'), ...)``."


def GeneralConvTranspose(dimension_numbers, out_chan, filter_shape, strides=None, padding="VALID",
                         W_init=None, b_init=normal(1e-6)):
    """General transposed-convolution layer (``lax.conv_transpose`` plus a bias).

    Output spatial size: ``in * stride`` for ``'SAME'``, ``in * stride + max(filter - stride, 0)``
    for ``'VALID'``.

    Args:
      dimension_numbers, out_chan, filter_shape, strides, padding, W_init, b_init: as :func:`GeneralConv`.

    Returns:
      ``(init_fun, apply_fun)``; params ``(W, b)``.

    Raises:
      ShapeError: (at init) an input rank other than ``len(lhs_spec)``.

    Source: ``jax.example_libraries.stax.GeneralConvTranspose``.
    """
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    strides, W_init = _conv_defaults(rhs_spec, filter_shape, strides, W_init)
    name = f"GeneralConvTranspose({lhs_spec},{rhs_spec},{out_spec}; {out_chan}, {tuple(filter_shape)})"

    def init_fun(rng, input_shape):
        input_shape = _shape(input_shape)
        _check_rank(name, input_shape, len(lhs_spec), f"lhs spec {lhs_spec!r}")
        kernel_shape = _kernel_shape(lhs_spec, rhs_spec, out_chan, filter_shape, input_shape)
        output_shape = lax.conv_transpose_shape_tuple(
            input_shape, kernel_shape, strides, padding, dimension_numbers)
        return output_shape, _conv_params(rng, kernel_shape, out_spec, out_chan, W_init, b_init)

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return lax.conv_transpose(inputs, W, strides, padding,
                                  dimension_numbers=dimension_numbers) + b

    return _layer(name, init_fun, apply_fun)


Conv1DTranspose = functools.partial(GeneralConvTranspose, ("NHC", "HIO", "NHC"))
Conv1DTranspose.__doc__ = "1-D transposed convolution: ``GeneralConvTranspose(('NHC', 'HIO', 'NHC'), ...)``."
ConvTranspose = functools.partial(GeneralConvTranspose, ("NHWC", "HWIO", "NHWC"))
ConvTranspose.__doc__ = "2-D transposed convolution: ``GeneralConvTranspose(('NHWC', 'HWIO', 'NHWC'), ...)``."


def BatchNorm(axis=(0, 1, 2), epsilon=1e-5, center=True, scale=True, beta_init=zeros,
              gamma_init=ones, *, momentum=0.99):
    """Batch normalisation over ``axis`` (``jax.example_libraries.stax.BatchNorm``) plus running statistics.

    ``gamma * standardize(x, axis) + beta`` with the batch's mean and biased variance, as the reference.
    Through :func:`stateful`, state ``(running_mean, running_var)`` (float32, zeros and ones): ``train=True``
    updates ``r <- momentum * r + (1 - momentum) * batch``; ``train=False`` normalises with ``r``, unchanged.

    Args:
      axis: the normalised axes (default N, H, W of NHWC); params and state have the other dims
        (the params, as the reference's, keep a negative axis's dim: non-negative axes with state).
      epsilon: added to the variance.
      center, scale: whether there is a ``beta`` / ``gamma`` (``()`` in its place when False).
      beta_init, gamma_init: their initializers.
      momentum: the running statistics' decay, in ``[0, 1)`` (0: those of the last training batch).

    Returns:
      ``(init_fun, apply_fun)``; params ``(beta, gamma)``.

    Raises:
      ValueError: ``momentum`` not a number in ``[0, 1)``.
      ShapeError: (at init) an axis outside the input rank; with state, a negative axis or unknown
        sizes off ``axis``.
    """
    if isinstance(momentum, bool) or not isinstance(momentum, numbers.Real) or not 0 <= momentum < 1:
        raise ValueError(f"BatchNorm: momentum must be a number in [0, 1), got {momentum!r}")
    _beta_init = lambda rng, shape: beta_init(rng, shape) if center else ()  # noqa: E731
    _gamma_init = lambda rng, shape: gamma_init(rng, shape) if scale else ()  # noqa: E731
    axis = (axis,) if jnp.isscalar(axis) else tuple(axis)
    name = f"BatchNorm(axis={axis})"

    def init_fun(rng, input_shape):
        input_shape = _bn_checked_shape(name, axis, input_shape)
        shape = tuple(d for i, d in enumerate(input_shape) if i not in axis)
        k1, k2 = random.split(rng)
        beta, gamma = _beta_init(k1, shape), _gamma_init(k2, shape)
        return input_shape, (beta, gamma)

    def apply_fun(params, x, **kwargs):
        return _bn_affine(params, standardize(x, axis, epsilon=epsilon), jnp.ndim(x), axis, (center, scale))

    def init_with_state(rng, input_shape):
        stat = _bn_state_shape(name, axis, input_shape)
        out_shape, params = init_fun(rng, input_shape)
        return out_shape, params, (jnp.zeros(stat, jnp.float32), jnp.ones(stat, jnp.float32))

    def apply_with_state(params, state, x, *, train, rng=None, **kwargs):
        return _bn_with_state(params, state, x, train, axis, epsilon, momentum, (center, scale))

    return _layer(name, init_fun, apply_fun, init_with_state, apply_with_state)


def _bn_affine(params, z, ndim, axis, center_scale):
    """:func:`BatchNorm`'s ``gamma * z + beta`` (each only when enabled in ``center_scale``),
    broadcast over the normalised ``axis``."""
    center, scale = center_scale
    beta, gamma = params
    ed = tuple(None if i in axis else slice(None) for i in range(ndim))
    if center and scale:
        return gamma[ed] * z + beta[ed]
    if center:
        return z + beta[ed]
    if scale:
        return gamma[ed] * z
    return z


def elementwise(fun, **fun_kwargs):
    """Layer applying ``fun(inputs, **fun_kwargs)`` elementwise; no params, shape unchanged.

    Args:
      fun: an array function, e.g. ``jnp.tanh``.
      **fun_kwargs: keyword arguments passed to every call, e.g. ``axis=-1``.

    Returns:
      ``(init_fun, apply_fun)``.

    Source: ``jax.example_libraries.stax.elementwise``.
    """
    init_fun = lambda rng, input_shape: (input_shape, ())  # noqa: E731
    apply_fun = lambda params, inputs, **kwargs: fun(inputs, **fun_kwargs)  # noqa: E731
    return _layer(f"elementwise({getattr(fun, '__name__', 'fun')})", init_fun, apply_fun)


Tanh = elementwise(jnp.tanh)
Relu = elementwise(relu)
Exp = elementwise(jnp.exp)
LogSoftmax = elementwise(log_softmax, axis=-1)
Softmax = elementwise(softmax, axis=-1)
Softplus = elementwise(softplus)
Sigmoid = elementwise(sigmoid)
Elu = elementwise(elu)
LeakyRelu = elementwise(leaky_relu)
Selu = elementwise(selu)
Gelu = elementwise(gelu)


def _pooling_layer(kind, reducer, init_val, rescaler=None):
    def PoolingLayer(window_shape, strides=None, padding="VALID", spec=None):
        """Pooling layer over the spatial dims (``lax.reduce_window``).

        Args:
          window_shape: the window per spatial dim, e.g. ``(2, 2)``.
          strides: per spatial dim (default all 1).
          padding: ``'VALID'`` or ``'SAME'``.
          spec: the input layout, e.g. ``'NCHW'``, saying where N and C are (default: N first, C last).

        Returns:
          ``(init_fun, apply_fun)``, no params.

        Raises:
          ShapeError: (at init) an input rank other than ``len(window_shape) + 2``; through
            :func:`stateful`, an empty output (the reference's init gives its shape).

        Source: ``jax.example_libraries.stax``'s MaxPool, SumPool, AvgPool (AvgPool divides by the
        number of in-bounds window elements).
        """
        name = f"{kind}({tuple(window_shape)})"
        strides = strides or (1,) * len(window_shape)
        rescale = rescaler(window_shape, strides, padding) if rescaler else None
        non_spatial_axes = (0, len(window_shape) + 1) if spec is None else (spec.index("N"), spec.index("C"))
        dims, strd = tuple(window_shape), tuple(strides)
        for i in sorted(non_spatial_axes):
            dims = (*dims[:i], 1, *dims[i:])
            strd = (*strd[:i], 1, *strd[i:])

        def init_fun(rng, input_shape):
            input_shape = _shape(input_shape)
            _check_rank(name, input_shape, len(dims), "spatial dims plus N and C")
            pads = lax.padtype_to_pads(input_shape, dims, strd, padding)
            ones_ = (1,) * len(dims)
            out_shape = lax.reduce_window_shape_tuple(input_shape, dims, strd, pads, ones_, ones_)
            spatial_out = [d for i, d in enumerate(out_shape) if i not in non_spatial_axes]
            _check_positive(name, input_shape, spatial_out)
            return out_shape, ()

        tiled_max = kind == "MaxPool" and padding == "VALID" and dims == strd

        def apply_fun(params, inputs, **kwargs):
            if tiled_max and jax.default_backend() == "cpu":
                return _tiled_max_pool(inputs, dims)
            out = lax.reduce_window(inputs, init_val, reducer, dims, strd, padding)
            return rescale(out, inputs, spec) if rescale else out

        return _layer(name, init_fun, apply_fun)

    PoolingLayer.__name__ = kind
    return PoolingLayer


MaxPool = _pooling_layer("MaxPool", lax.max, -jnp.inf)
SumPool = _pooling_layer("SumPool", lax.add, 0.0)


def _normalize_by_window_size(dims, strides, padding):
    def rescale(outputs, inputs, spec):
        non_spatial = (0, inputs.ndim - 1) if spec is None else (spec.index("N"), spec.index("C"))
        spatial_shape = tuple(d for i, d in enumerate(inputs.shape) if i not in non_spatial)
        counts = lax.reduce_window(jnp.ones(spatial_shape, dtype=inputs.dtype), 0.0, lax.add,
                                   dims, strides, padding)
        for i in sorted(non_spatial):
            counts = jnp.expand_dims(counts, i)
        return outputs / counts

    return rescale


AvgPool = _pooling_layer("AvgPool", lax.add, 0.0, _normalize_by_window_size)


def _flatten():
    def init_fun(rng, input_shape):
        input_shape = _shape(input_shape)
        if len(input_shape) == 0:
            raise ShapeError("Flatten: needs a leading batch dimension, got input shape ()")
        return (input_shape[0], math.prod(input_shape[1:])), ()

    def apply_fun(params, inputs, **kwargs):
        return jnp.reshape(inputs, (inputs.shape[0], -1))

    return _layer("Flatten", init_fun, apply_fun)


#: Flatten all but the leading (batch) dim: ``(N, d1, d2, ...) -> (N, d1 * d2 * ...)``.
Flatten = _flatten()


def _identity():
    init_fun = lambda rng, input_shape: (input_shape, ())  # noqa: E731
    apply_fun = lambda params, inputs, **kwargs: inputs  # noqa: E731
    return _layer("Identity", init_fun, apply_fun)


#: Identity layer: no params, outputs its inputs.
Identity = _identity()


def FanOut(num):
    """Fan-out: one input -> a list of ``num`` references to it.

    Args:
      num: the number of outputs.

    Returns:
      ``(init_fun, apply_fun)``, no params; output shapes ``[input_shape] * num``.

    Source: ``jax.example_libraries.stax.FanOut``.
    """
    init_fun = lambda rng, input_shape: ([input_shape] * num, ())  # noqa: E731
    apply_fun = lambda params, inputs, **kwargs: [inputs] * num  # noqa: E731
    return _layer(f"FanOut({num})", init_fun, apply_fun)


def _fan_in_sum():
    def init_fun(rng, input_shape):
        shapes = [tuple(s) for s in input_shape]
        if _strict_shapes() and len({s for s in shapes}) != 1:  # the reference broadcasts them
            raise ShapeError(f"FanInSum: inputs must all have one shape, got {_fmt(shapes)}")
        return input_shape[0], ()

    apply_fun = lambda params, inputs, **kwargs: sum(inputs)  # noqa: E731
    return _layer("FanInSum", init_fun, apply_fun)


#: Fan-in sum: a list of same-shaped inputs -> their elementwise sum.
FanInSum = _fan_in_sum()


def FanInConcat(axis=-1):
    """Fan-in concatenation of a list of inputs along ``axis``.

    Args:
      axis: the concatenation axis; the inputs' other dims must agree.

    Returns:
      ``(init_fun, apply_fun)``, no params.

    Raises:
      ShapeError: (at init) inputs that differ in rank or off ``axis``.

    Source: ``jax.example_libraries.stax.FanInConcat``.
    """
    name = f"FanInConcat({axis})"

    def init_fun(rng, input_shape):
        shapes = [tuple(s) for s in input_shape]
        ax = axis % len(shapes[0])
        rest = {s[:ax] + s[ax + 1:] for s in shapes}
        if len(rest) != 1 or len({len(s) for s in shapes}) != 1:
            raise ShapeError(f"{name}: inputs must agree except on axis {axis}, got {_fmt(shapes)}")
        concat_size = sum(s[ax] for s in shapes)
        return (*input_shape[0][:ax], concat_size, *input_shape[0][ax + 1:]), ()

    def apply_fun(params, inputs, **kwargs):
        return jnp.concatenate(inputs, axis)

    return _layer(name, init_fun, apply_fun)


_DROPOUT_MSG = ("Dropout layer requires apply_fun to be called with a PRNG key argument. That is, "
                "instead of `apply_fun(params, inputs)`, call it like `apply_fun(params, inputs, rng)` "
                "where `rng` is a PRNG key (e.g. from `jax.random.key`).")


def Dropout(rate, mode="train"):
    """Inverted dropout. **``rate`` IS THE KEEP PROBABILITY, NOT THE DROP PROBABILITY**.

    ``Dropout(0.9)`` keeps 90% of the units (the reference's meaning, kept for drop-in parity). The
    zoo's ``dropout`` hyperparameter is the DROP probability: it builds ``Dropout(1 - dropout)``.
    Through :func:`stateful`, ``train=False`` makes every Dropout the identity whatever its mode.

    Args:
      rate: the keep probability.
      mode: ``'train'``: each element is kept with probability ``rate`` and scaled by ``1 / rate``,
        the rest set to 0 (``apply_fun`` then needs ``rng=key``); ``'test'`` (or any other): the
        identity, with or without an rng (jax 0.10.2's reference demands one).

    Returns:
      ``(init_fun, apply_fun)``, no params.

    Raises:
      ValueError: (``apply_fun``, ``mode='train'``) no ``rng``.

    Source: ``jax.example_libraries.stax.Dropout``.
    """
    name = f"Dropout(keep={rate})"

    def init_fun(rng, input_shape):
        return input_shape, ()

    def _drop(inputs, rng):
        if rng is None:
            raise ValueError(_DROPOUT_MSG)
        keep = random.bernoulli(rng, rate, inputs.shape)
        return jnp.where(keep, inputs / rate, 0)

    def apply_fun(params, inputs, **kwargs):
        if mode == "train":
            return _drop(inputs, kwargs.get("rng"))
        return inputs

    def init_with_state(rng, input_shape):
        return input_shape, (), ()

    def apply_with_state(params, state, inputs, *, train, rng=None, **kwargs):
        if train and mode == "train":
            return _drop(inputs, rng), state
        return inputs, state

    out = _layer(name, init_fun, apply_fun, init_with_state, apply_with_state)
    init_fun.stax_has_state = False  # stateful-aware (train flag) but carries no state
    return out


# --------------------------------------------------------------------------------------------------
# Combinators


def _wrap_init_error(i, layer, input_shape, err):
    if isinstance(err, ShapeError):
        return ShapeError(f"layer {i} of serial: {err}")
    return ShapeError(f"layer {i} of serial: {layer_name(layer)} cannot take input shape "
                      f"{_fmt(input_shape)}: {type(err).__name__}: {err}")


def serial(*layers):
    """Compose ``layers`` in sequence: the output of one is the input of the next.

    ``apply_fun(params, inputs, rng=key)`` splits ``key`` into one key per layer
    (``random.split(key, len(layers))``) as the reference does.

    Args:
      *layers: ``(init_fun, apply_fun)`` pairs, applied in order.

    Returns:
      ``(init_fun, apply_fun)``; params a list with one entry per layer.

    Raises:
      ShapeError: (at init) a layer rejects its input shape; the message starts ``"layer {i} of serial"``.

    Source: ``jax.example_libraries.stax.serial``.
    """
    nlayers = len(layers)
    init_funs, apply_funs = zip(*layers, strict=True) if layers else ((), ())
    inner = [_plain_stateful(layer) for layer in layers]

    def init_fun(rng, input_shape):
        out_shape, params, _ = _serial_init(layers, inner, rng, input_shape, False)
        return out_shape, params

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.pop("rng", None)
        rngs = random.split(rng, nlayers) if rng is not None else (None,) * nlayers
        for fun, param, r in zip(apply_funs, params, rngs, strict=True):
            inputs = fun(param, inputs, rng=r, **kwargs)
        return inputs

    def init_with_state(rng, input_shape):
        out_shape, params, states = _serial_init(layers, inner, rng, input_shape, True)
        return out_shape, params, (tuple(states) if _any_state(states) else ())

    def apply_with_state(params, state, inputs, *, train, rng=None, **kwargs):
        rngs = random.split(rng, nlayers) if rng is not None else (None,) * nlayers
        states = state if state != () else ((),) * nlayers
        new_states = []
        for (_, app), param, st, r in zip(inner, params, states, rngs, strict=True):
            inputs, st = app(param, st, inputs, train=train, rng=r, **kwargs)
            new_states.append(st)
        return inputs, (tuple(new_states) if state != () else ())

    del init_funs
    out = _layer(f"serial[{nlayers}]", init_fun, apply_fun, init_with_state, apply_with_state)
    init_fun.stax_has_state = any(has_state(layer) for layer in layers)
    init_fun.stax_layers = layers  # for introspection
    return out


def _serial_init(layers, inner, rng, input_shape, with_state):
    """:func:`serial`'s init: ``(output shape, params, states)``, one key split off ``rng`` per
    layer; a layer's init error is re-raised naming the layer (:func:`_wrap_init_error`)."""
    params, states = [], []
    for i, (layer, (init_s, _)) in enumerate(zip(layers, inner, strict=True)):
        rng, layer_rng = random.split(rng)
        try:
            if with_state:
                new_shape, param, st = init_s(layer_rng, input_shape)
            else:
                new_shape, param = layer[0](layer_rng, input_shape)
                st = ()
        except (ShapeError, TypeError, ValueError, IndexError) as err:
            raise _wrap_init_error(i, layer, input_shape, err) from err
        input_shape = new_shape
        params.append(param)
        states.append(st)
    return input_shape, params, states


def parallel(*layers):
    """Apply ``layers[i]`` to ``inputs[i]``; often between :func:`FanOut` and :data:`FanInSum`.

    Returns:
      ``(init_fun, apply_fun)``; params a tuple with one entry per layer; rng split as the reference.

    Raises:
      ShapeError: (at init through :func:`stateful`) the number of input shapes differs from the
        number of layers (the reference's init zips them, dropping the extra ones).
    """
    nlayers = len(layers)
    init_funs, apply_funs = zip(*layers, strict=True) if layers else ((), ())
    inner = [_plain_stateful(layer) for layer in layers]

    def _check(input_shape):
        if len(input_shape) != nlayers:
            raise ShapeError(f"parallel of {nlayers} layers got {len(input_shape)} input shapes: "
                             f"{list(input_shape)}")

    def init_fun(rng, input_shape):
        if _strict_shapes():  # the reference zips layers and inputs, dropping the extra ones
            _check(input_shape)
        rngs = random.split(rng, nlayers)
        return zip(*[init(r, shape) for init, r, shape in zip(init_funs, rngs, input_shape, strict=False)],
                   strict=False)

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.pop("rng", None)
        rngs = random.split(rng, nlayers) if rng is not None else (None,) * nlayers
        return [f(p, x, rng=r, **kwargs)
                for f, p, x, r in zip(apply_funs, params, inputs, rngs, strict=False)]

    def init_with_state(rng, input_shape):
        _check(input_shape)
        rngs = random.split(rng, nlayers)
        outs = [init_s(r, s) for (init_s, _), r, s in zip(inner, rngs, input_shape, strict=True)]
        shapes = tuple(o[0] for o in outs)
        params = tuple(o[1] for o in outs)
        states = [o[2] for o in outs]
        return shapes, params, (tuple(states) if _any_state(states) else ())

    def apply_with_state(params, state, inputs, *, train, rng=None, **kwargs):
        rngs = random.split(rng, nlayers) if rng is not None else (None,) * nlayers
        states = state if state != () else ((),) * nlayers
        outs = [app(p, s, x, train=train, rng=r, **kwargs)
                for (_, app), p, s, x, r in zip(inner, params, states, inputs, rngs, strict=True)]
        new_state = tuple(o[1] for o in outs) if state != () else ()
        return [o[0] for o in outs], new_state

    out = _layer(f"parallel[{nlayers}]", init_fun, apply_fun, init_with_state, apply_with_state)
    init_fun.stax_has_state = any(has_state(layer) for layer in layers)
    return out


def shape_dependent(make_layer):
    """Delay building a layer until the input shape is known.

    ``apply_fun`` rebuilds the layer from ``inputs.shape`` (as the reference does).

    Args:
      make_layer: ``make_layer(input_shape) -> (init_fun, apply_fun)``.

    Returns:
      ``(init_fun, apply_fun)`` with the params of the layer ``make_layer`` builds.

    Source: ``jax.example_libraries.stax.shape_dependent``.
    """

    def init_fun(rng, input_shape):
        return make_layer(input_shape)[0](rng, input_shape)

    def apply_fun(params, inputs, **kwargs):
        return make_layer(inputs.shape)[1](params, inputs, **kwargs)

    def init_with_state(rng, input_shape):
        return _plain_stateful(make_layer(input_shape))[0](rng, input_shape)

    def apply_with_state(params, state, inputs, *, train, rng=None, **kwargs):
        return _plain_stateful(make_layer(inputs.shape))[1](params, state, inputs, train=train, rng=rng,
                                                            **kwargs)

    return _layer("shape_dependent", init_fun, apply_fun, init_with_state, apply_with_state)


# --------------------------------------------------------------------------------------------------
# Combinators beyond the reference


def Residual(*layers):
    """Residual connection around ``serial(*layers)``: ``x + serial(*layers)(x)``.

    Equivalent to ``serial(FanOut(2), parallel(serial(*layers), Identity), FanInSum)`` with flatter
    params. Stateful-aware (BatchNorm, dropout inside work through :func:`stateful`).

    Args:
      *layers: the branch's ``(init_fun, apply_fun)`` pairs; the branch must keep the input shape.

    Returns:
      ``(init_fun, apply_fun)``; params (and state) exactly those of ``serial(*layers)``, which gets
      ``apply_fun``'s rng unchanged.

    Raises:
      ShapeError: (at init) the branch's output shape differs from the input shape.
    """
    inner = serial(*layers)
    inner_init, inner_apply = inner
    inner_init_s, inner_apply_s = _plain_stateful(inner)
    name = f"Residual[{len(layers)}]"

    def _check(input_shape, out_shape):
        if tuple(out_shape) != tuple(input_shape):
            raise ShapeError(f"{name}: the residual branch maps {_fmt(input_shape)} to "
                             f"{_fmt(out_shape)}; it must keep the shape")

    def init_fun(rng, input_shape):
        out_shape, params = inner_init(rng, input_shape)
        _check(input_shape, out_shape)
        return input_shape, params

    def apply_fun(params, inputs, **kwargs):
        return inputs + inner_apply(params, inputs, **kwargs)

    def init_with_state(rng, input_shape):
        out_shape, params, state = inner_init_s(rng, input_shape)
        _check(input_shape, out_shape)
        return input_shape, params, state

    def apply_with_state(params, state, inputs, *, train, rng=None, **kwargs):
        out, new_state = inner_apply_s(params, state, inputs, train=train, rng=rng, **kwargs)
        return inputs + out, new_state

    out = _layer(name, init_fun, apply_fun, init_with_state, apply_with_state)
    init_fun.stax_has_state = has_state(inner)
    init_fun.stax_layers = layers
    return out
