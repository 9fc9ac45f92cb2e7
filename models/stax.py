"""Stax: a drop-in re-implementation of ``jax.example_libraries.stax``, plus explicit layer state.

Every public name of the reference exists here with the same signature and semantics (layers are
``(init_fun, apply_fun)`` pairs; ``init_fun(rng, input_shape) -> (output_shape, params)``;
``apply_fun(params, inputs, *, rng=None, **kwargs) -> outputs``). The same rng and input shape give
the same parameters, and the same parameters and inputs the same outputs, as the reference
(``tests/test_stax.py`` checks this layer by layer).

Beyond the reference (nothing here changes a reference-compatible call):

* **Running statistics** for :func:`BatchNorm`. :func:`stateful` turns any layer into the pair
  ``init(rng, input_shape) -> (output_shape, params, state)`` and
  ``apply(params, state, inputs, *, train, rng=None, **kwargs) -> (outputs, new_state)``.
  ``state`` is a pytree of arrays (``()`` when no layer has state), threaded explicitly, so the pair
  is safe under ``jax.jit`` and ``jax.vmap``. With ``train=True`` BatchNorm normalises with the batch
  statistics exactly as the reference does and returns updated running mean/variance; with
  ``train=False`` it normalises with the running statistics, so a one-example batch gets a real
  output instead of ``beta``. With ``train=False`` every :func:`Dropout` is the identity.
* **Shape errors at init**: a layer given an input shape it cannot take raises :class:`ShapeError`
  naming the layer and the shapes; :func:`serial` prefixes the index of the failing layer.
* :func:`Dropout` without an rng in test mode returns its inputs (jax 0.10.2's reference raises).
* ``GeneralConv(..., impl="patches" | "auto")`` computes the convolution as im2col patches times a
  matrix (much faster inside ``lax.scan`` on XLA:CPU; the default ``impl="xla"`` is the reference's
  ``lax`` call).
* Sequence layers for Transformers (same ``(init_fun, apply_fun)`` contract, appended at the end of
  this file): :func:`Embedding`, :func:`LayerNorm`, :func:`PositionalEmbedding` (learned),
  :func:`SinusoidalPositionalEmbedding`, :func:`MultiHeadSelfAttention` (optional causal mask,
  dropout with :func:`Dropout`'s rng rule) and the :func:`Residual` combinator. Their parameters
  are float32 and cast to the input's dtype at use (bfloat16-clean); ``tests/test_stax_seq.py``
  checks each against a hand-written formula and against ``flax.linen`` at 1e-5, with gradients.
* Modern decoder layers (a section of their own at the end): :func:`RMSNorm`,
  :func:`RotarySelfAttention` (rotary embeddings, QK-norm), :func:`MLP` (ReLU², GELU, SwiGLU),
  :func:`soft_cap`; ``models/gpt.py`` assembles them.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
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


class ShapeError(ValueError):
    """An input shape a layer cannot take, found at init. The message names the layer and shapes."""


# --------------------------------------------------------------------------------------------------
# Layer bookkeeping. A layer stays a plain (init_fun, apply_fun) pair; its name and, for layers
# with state, its stateful versions ride along as function attributes that reference-style code
# never looks at.


def _layer(name, init_fun, apply_fun, init_with_state=None, apply_with_state=None):
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


def _shape(s):
    return tuple(s)


def _fmt(shape):
    """A shape as plain ints for messages, e.g. ``(8, 3)``; lists of shapes as lists."""
    if isinstance(shape, (list, tuple)) and shape and isinstance(shape[0], (list, tuple)):
        return [_fmt(s) for s in shape]
    return tuple(int(d) if d is not None else None for d in shape)


def _check_rank(name, input_shape, rank, what):
    if len(input_shape) != rank:
        raise ShapeError(
            f"{name}: expected an input shape of rank {rank} ({what}), got {_fmt(input_shape)}"
        )


def _feature_shape(name, input_shape):
    """``input_shape`` as a tuple; :class:`ShapeError` unless its last (feature) dimension is known."""
    input_shape = _shape(input_shape)
    if len(input_shape) == 0 or input_shape[-1] is None or input_shape[-1] <= 0:
        raise ShapeError(f"{name}: needs a known last (feature) dimension, got input shape "
                         f"{_fmt(input_shape)}")
    return input_shape


def _check_positive(name, input_shape, output_shape):
    if any(d is not None and d != -1 and d <= 0 for d in output_shape):
        raise ShapeError(
            f"{name}: input shape {_fmt(input_shape)} gives an empty output (spatial dims "
            f"{_fmt(output_shape)}; input too small for the window/filter)"
        )


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


#: Set inside :func:`conv_outside_loops`: the convolutions being traced run outside any loop.
_OUTSIDE_LOOPS = contextvars.ContextVar("stax_conv_outside_loops", default=False)


@contextlib.contextmanager
def conv_outside_loops():
    """Within it, ``impl='auto'`` convolutions trace as ``'xla'`` on a CPU too: for a caller whose
    convolutions run outside any ``lax.scan``/``while`` (XLA:CPU, jax 0.10.2, runs a convolution and
    its gradients inside a loop ~40x slower than outside: 4.9 s against 0.12 s per step of two 3x3
    convs at 64x32x32x16; the patches form there 1.8x of the top-level convolution)."""
    token = _OUTSIDE_LOOPS.set(True)
    try:
        yield
    finally:
        _OUTSIDE_LOOPS.reset(token)


def _resolve_conv_impl(impl):
    if impl == "auto":
        return "patches" if jax.default_backend() == "cpu" and not _OUTSIDE_LOOPS.get() else "xla"
    return impl


def _conv_patches(inputs, W, strides, padding, dimension_numbers):
    """``lax.conv_general_dilated`` (no dilation, one feature group) as im2col patches @ matrix.

    The input is moved to ``(N, *spatial, C)``, padded, and for every filter offset a strided slice
    ``(N, *out_spatial, C)`` is taken; the slices are concatenated on the channel axis (offset-major,
    channel-minor) and multiplied by the kernel reshaped to ``(prod(filter) * C, O)``. Slices and
    pads have cheap gradients, so the backward pass is two matmuls. Same values as the reference
    convolution up to float32 summation order.
    """
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    lhs_sp = [i for i, c in enumerate(lhs_spec) if c not in "NC"]
    rhs_sp = [i for i, c in enumerate(rhs_spec) if c not in "IO"]
    x = jnp.transpose(inputs, [lhs_spec.index("N"), *lhs_sp, lhs_spec.index("C")])
    Wt = jnp.transpose(W, [*rhs_sp, rhs_spec.index("I"), rhs_spec.index("O")])
    filt = Wt.shape[:-2]
    in_sp = x.shape[1:-1]
    pads = lax.padtype_to_pads(in_sp, filt, strides, padding) if isinstance(padding, str) else padding
    x = jnp.pad(x, [(0, 0), *[tuple(p) for p in pads], (0, 0)])
    out_sp = [(n + lo + hi - k) // s + 1
              for n, (lo, hi), k, s in zip(in_sp, pads, filt, strides, strict=True)]
    cols = []
    for offset in itertools.product(*[range(k) for k in filt]):
        start = (0, *offset, 0)
        limit = (x.shape[0], *[o + s * (m - 1) + 1 for o, s, m in zip(offset, strides, out_sp, strict=True)],
                 x.shape[-1])
        cols.append(lax.slice(x, start, limit, (1, *strides, 1)))
    patches = jnp.concatenate(cols, axis=-1) if len(cols) > 1 else cols[0]
    # A 2-D matmul (rows = N * out positions) is what CPU/GPU BLAS-like kernels run fastest.
    out = jnp.dot(jnp.reshape(patches, (-1, patches.shape[-1])), jnp.reshape(Wt, (-1, Wt.shape[-1])))
    out = jnp.reshape(out, (*patches.shape[:-1], Wt.shape[-1]))
    # out is (N, *spatial, O) in lhs spatial order; move to out_spec.
    canon = "N" + "".join(c for c in lhs_spec if c not in "NC") + "C"
    perm = [canon.index(c) if c in canon else None for c in out_spec]
    if None in perm:  # out_spec names its spatial dims differently: match them by position
        out_sp_names = [c for c in out_spec if c not in "NC"]
        mapping = dict(zip(out_sp_names, [c for c in canon if c not in "NC"], strict=True))
        perm = [canon.index(mapping.get(c, c)) for c in out_spec]
    return jnp.transpose(out, perm)


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
      ShapeError: (at init) an input rank other than ``len(lhs_spec)`` or an empty output.

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


def _bn_checked_shape(name, axis, input_shape):
    """``input_shape`` as a tuple; :class:`ShapeError` for an axis outside its rank."""
    input_shape = _shape(input_shape)
    if any(not -len(input_shape) <= a < len(input_shape) for a in axis):
        raise ShapeError(f"{name}: axis out of range for input shape {_fmt(input_shape)}")
    return input_shape


def _bn_state_shape(name, axis, input_shape):
    """The running statistics' shape; :class:`ShapeError` for a negative axis (the reference's params
    keep its dim, the statistics would not), one out of range, or unknown sizes off ``axis``."""
    if any(a < 0 for a in axis):
        raise ShapeError(f"{name}: with running statistics, give the axes as non-negative indices")
    _, stat, _ = _bn_stat_shapes(_bn_checked_shape(name, axis, input_shape), axis)
    if any(d is None or d < 0 for d in stat):
        raise ShapeError(f"{name}: running statistics need known sizes off the normalised axes, "
                         f"got input shape {_fmt(input_shape)}")
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


def _bn_with_state(params, state, x, train, axis, epsilon, momentum, center_scale):
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


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _tiled_max_pool(x, window):
    """Max pooling whose windows tile the input (``strides == window``, ``VALID``).

    The value is the reference's ``lax.reduce_window`` max. The derivative is defined explicitly
    (:func:`_tiled_max_pool_jvp`) so that its transpose is made of strided slices, selects and pads
    instead of XLA's ``select_and_scatter``, which XLA:CPU runs slowly (2-3x the whole CNN step
    inside ``lax.scan``). Used on CPU only; bit-identical values and gradients to the reference,
    ties included (the first maximal element of a window in row-major order gets the gradient),
    except in a window holding a NaN: its value is NaN as the reference's, and its gradient is 0
    where the reference's ``select_and_scatter`` passes it to one element (which one depends on the
    NaN's place in the window).
    """
    return lax.reduce_window(x, -jnp.inf, lax.max, window, window, "VALID")


@_tiled_max_pool.defjvp
def _tiled_max_pool_jvp(window, primals, tangents):
    # Each spatial axis of size n is cropped to whole windows and split into (n // w, w); the
    # tangent of a window is the tangent at its first maximal element (row-major position inside
    # the window). Built from a reshape, a compare, a min-reduction and a select, all of which XLA
    # fuses; the transpose is the same ops backwards (no scatter).
    (x,), (t,) = primals, tangents
    y = _tiled_max_pool(x, window)
    nd = x.ndim
    limit = [o * w for o, w in zip(y.shape, window, strict=True)]
    split = [d for o, w in zip(y.shape, window, strict=True) for d in (o, w)]
    win_axes = tuple(range(1, 2 * nd, 2))
    xs = lax.slice(x, (0,) * nd, limit).reshape(split)
    ts = lax.slice(t, (0,) * nd, limit).reshape(split)
    size = math.prod(window)
    pos = jnp.zeros((1,) * (2 * nd), jnp.int32)
    stride = 1
    for k in reversed(range(nd)):
        shape = [1] * (2 * nd)
        shape[2 * k + 1] = window[k]
        pos = pos + lax.broadcasted_iota(jnp.int32, shape, 2 * k + 1) * stride
        stride *= window[k]
    cand = jnp.where(xs == jnp.expand_dims(y, win_axes), pos, size)
    first = (cand == jnp.min(cand, axis=win_axes, keepdims=True)) & (cand < size)
    return y, jnp.sum(jnp.where(first, ts, jnp.zeros((), ts.dtype)), axis=win_axes)


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
          ShapeError: (at init) an input rank other than ``len(window_shape) + 2``, or an empty output.

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
        if len({s for s in shapes}) != 1:
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


def _plain_stateful(layer):
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
    return _plain_stateful(layer)


def _any_state(states):
    return any(s != () for s in states) if all(isinstance(s, tuple) for s in states) else True


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
      ShapeError: (at init) the number of input shapes differs from the number of layers.
    """
    nlayers = len(layers)
    init_funs, apply_funs = zip(*layers, strict=True) if layers else ((), ())
    inner = [_plain_stateful(layer) for layer in layers]

    def _check(input_shape):
        if len(input_shape) != nlayers:
            raise ShapeError(f"parallel of {nlayers} layers got {len(input_shape)} input shapes: "
                             f"{list(input_shape)}")

    def init_fun(rng, input_shape):
        _check(input_shape)
        rngs = random.split(rng, nlayers)
        return zip(*[init(r, shape) for init, r, shape in zip(init_funs, rngs, input_shape, strict=True)],
                   strict=True)

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.pop("rng", None)
        rngs = random.split(rng, nlayers) if rng is not None else (None,) * nlayers
        return [f(p, x, rng=r, **kwargs) for f, p, x, r in zip(apply_funs, params, inputs, rngs, strict=True)]

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
# Sequence layers (beyond the reference): Embedding, LayerNorm, positional embeddings, multi-head
# self-attention and a residual combinator, for Transformers built from (init_fun, apply_fun) pairs.
#
# Precision rule of these layers: parameters are created float32 (by the initializers) and are cast
# to the compute dtype where they are used; the compute dtype is the floating input's dtype (for
# Embedding, whose inputs are integer ids: the table's dtype, or ``dtype=`` when given). Statistics
# (LayerNorm's mean and variance) and the attention softmax are computed in at least float32 and
# the results cast back, so a bfloat16 forward pass keeps its reductions accurate.


def _compute(p, dtype):
    """``p`` cast to ``dtype`` (no-op when it already has it)."""
    return p if p.dtype == dtype else p.astype(dtype)


def _stats_dtype(dtype):
    """The dtype statistics are reduced in: float32 for 16-bit floats, else ``dtype`` itself."""
    return jnp.promote_types(jnp.float32, dtype)


def Embedding(vocab_size, features, W_init=None, *, dtype=None):
    """Token embedding: integer ids ``(...)`` -> vectors ``(..., features)`` (a table lookup).

    ``apply_fun`` returns ``jnp.take(table, ids, axis=0)``: ids in ``[-vocab_size, 0)`` wrap around
    as in numpy; ids outside ``[-vocab_size, vocab_size)`` give rows of NaN (so a wrong vocabulary
    size shows up as a non-finite loss, not as silently clipped ids). Gradients w.r.t. the table are
    a scatter-add.

    Args:
      vocab_size: the number of rows, > 0.
      features: the embedding size, > 0.
      W_init: the table's initializer; default normal of standard deviation ``1 / sqrt(features)``
        (flax.linen.Embed's, ``variance_scaling(1, 'fan_in', 'normal', out_axis=0)``).
      dtype: the output's dtype (default: the table's).

    Returns:
      ``(init_fun, apply_fun)``; params ``(table,)``, ``table`` float32 ``(vocab_size, features)``.

    Raises:
      ValueError: non-positive sizes, and (at apply) non-integer inputs.

    Source: ``flax.linen.Embed``.
    """
    if int(vocab_size) <= 0 or int(features) <= 0:
        raise ValueError(f"Embedding: vocab_size and features must be positive, got {vocab_size}, "
                         f"{features}")
    vocab_size, features = int(vocab_size), int(features)
    W_init = W_init or jax.nn.initializers.variance_scaling(1.0, "fan_in", "normal", in_axis=1,
                                                            out_axis=0)
    name = f"Embedding({vocab_size}, {features})"

    def init_fun(rng, input_shape):
        return (*_shape(input_shape), features), (W_init(rng, (vocab_size, features)),)

    def apply_fun(params, inputs, **kwargs):
        (table,) = params
        if not jnp.issubdtype(jnp.asarray(inputs).dtype, jnp.integer):
            raise ValueError(f"{name}: inputs must be integer token ids, got dtype "
                             f"{jnp.asarray(inputs).dtype}")
        out = jnp.take(table, inputs, axis=0)
        return _compute(out, jnp.dtype(dtype)) if dtype is not None else out

    return _layer(name, init_fun, apply_fun)


def LayerNorm(epsilon=1e-6, center=True, scale=True, beta_init=zeros, gamma_init=ones):
    """Layer normalisation over the last (feature) axis.

    ``y = gamma * (x - mean) / sqrt(var + epsilon) + beta`` with ``mean`` and the biased ``var``
    (one pass: ``max(mean(x**2) - mean**2, 0)``, as flax's ``use_fast_variance``) over the last axis
    of each position, computed in at least float32; ``y`` has the input's dtype.

    Args:
      epsilon: added to the variance (default flax.linen.LayerNorm's 1e-6).
      center, scale: whether there is a ``beta`` / ``gamma`` (``()`` in its place when False).
      beta_init, gamma_init: their initializers (default zeros, ones).

    Returns:
      ``(init_fun, apply_fun)``; params ``(beta, gamma)``, float32 ``(features,)``.

    Raises:
      ShapeError: (at init) a rank-0 input or an unknown feature size.

    Source: Ba et al. 2016, arXiv:1607.06450.
    """
    name = f"LayerNorm(eps={epsilon})"

    def init_fun(rng, input_shape):
        input_shape = _feature_shape(name, input_shape)
        k1, k2 = random.split(rng)
        feat = (input_shape[-1],)
        beta = beta_init(k1, feat) if center else ()
        gamma = gamma_init(k2, feat) if scale else ()
        return input_shape, (beta, gamma)

    def apply_fun(params, x, **kwargs):
        beta, gamma = params
        return _normalize(x, epsilon, gamma if scale else None, beta if center else None, centered=True)

    return _layer(name, init_fun, apply_fun)


def _feature_stats(xs, centered):
    """``(mean or None, var)`` over the last axis of ``xs`` (already in the statistics dtype).

    ``centered``: the mean and the biased variance in one pass (``max(mean(x**2) - mean**2, 0)``,
    as flax's ``use_fast_variance``); else ``(None, mean(x**2))``, the mean square of RMSNorm.
    """
    mean_sq = jnp.mean(jnp.square(xs), axis=-1, keepdims=True)
    if not centered:
        return None, mean_sq
    mean = jnp.mean(xs, axis=-1, keepdims=True)
    return mean, jnp.maximum(mean_sq - jnp.square(mean), 0.0)


def _normalize(x, epsilon, gamma=None, beta=None, *, centered):
    """``x`` normalised over its last axis (LayerNorm if ``centered``, else RMSNorm), times
    ``gamma``, plus ``beta`` (each skipped when ``None``); statistics in at least float32, the
    result in ``x``'s dtype."""
    sd = _stats_dtype(x.dtype)
    xs = x.astype(sd)
    mean, var = _feature_stats(xs, centered)
    # gamma folded into the (B, T, 1) inverse deviation first, as flax.linen.LayerNorm: one
    # (B, T, F) multiply instead of two, and no separate (x - mean) pass kept for the gradient
    mul = lax.rsqrt(var + jnp.asarray(epsilon, sd))
    if gamma is not None:
        mul = mul * _compute(gamma, sd)
    y = (xs - mean) * mul if mean is not None else xs * mul
    if beta is not None:
        y = y + _compute(beta, sd)
    return y.astype(x.dtype)


def _check_sequence(name, input_shape, max_len=None):
    """A ``(batch, length, features)`` input shape with a known feature size (and length <= max_len)."""
    _check_rank(name, input_shape, 3, "batch, length, features")
    if input_shape[-1] is None or input_shape[-1] <= 0:
        raise ShapeError(f"{name}: needs a known feature dimension, got input shape {_fmt(input_shape)}")
    length = input_shape[1]
    if max_len is not None and length is not None and length > max_len:
        raise ShapeError(f"{name}: sequence length {length} exceeds max_len {max_len} "
                         f"(input shape {_fmt(input_shape)}); build it with a larger max_len")


def PositionalEmbedding(max_len, W_init=normal(0.02)):
    """Learned absolute positional embedding: ``x + table[:T]`` for ``x (B, T, F)``.

    Args:
      max_len: the table's length, the longest ``T`` it takes.
      W_init: the table's initializer (default normal, stddev 0.02, as GPT-2).

    Returns:
      ``(init_fun, apply_fun)``; params ``(table,)``, float32 ``(max_len, F)``; the slice is cast to
      ``x``'s dtype.

    Raises:
      ShapeError: (at init) a non-rank-3 input, an unknown ``F`` or ``T > max_len``.
    """
    name = f"PositionalEmbedding({max_len})"

    def init_fun(rng, input_shape):
        input_shape = _shape(input_shape)
        _check_sequence(name, input_shape, max_len)
        return input_shape, (W_init(rng, (max_len, input_shape[-1])),)

    def apply_fun(params, inputs, **kwargs):
        (table,) = params
        return inputs + _compute(table[: inputs.shape[1]], inputs.dtype)

    return _layer(name, init_fun, apply_fun)


def sinusoidal_table(length, features, max_timescale=10_000.0):
    """The fixed sinusoidal position table.

    ``table[p, 2i] = sin(p / max_timescale**(2i / features))`` and ``table[p, 2i + 1] = cos(...)``
    (sines and cosines interleaved; for odd ``features`` the last column is a sine).

    Args:
      length: the number of positions ``p``.
      features: the number of columns.
      max_timescale: the base of the wavelengths' geometric progression (the paper's 10 000).

    Returns:
      The table, float32 ``(length, features)``.

    Source: Vaswani et al. 2017, arXiv:1706.03762.
    """
    pos = jnp.arange(length, dtype=jnp.float32)[:, None]
    two_i = jnp.arange(0, features, 2, dtype=jnp.float32)
    angles = pos / jnp.power(jnp.float32(max_timescale), two_i / features)  # (length, ceil(F/2))
    table = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1).reshape(length, -1)
    return table[:, :features]


def SinusoidalPositionalEmbedding(max_timescale=10_000.0):
    """Fixed sinusoidal positional encoding: ``x + sinusoidal_table(T, F)`` for ``x (B, T, F)``.

    The table is a constant under ``jit``, cast to ``x``'s dtype.

    Args:
      max_timescale: as :func:`sinusoidal_table`.

    Returns:
      ``(init_fun, apply_fun)``, no params.

    Raises:
      ShapeError: (at init) a non-rank-3 input or an unknown ``F``.

    Source: Vaswani et al. 2017, arXiv:1706.03762.
    """
    name = "SinusoidalPositionalEmbedding"

    def init_fun(rng, input_shape):
        input_shape = _shape(input_shape)
        _check_sequence(name, input_shape)
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        table = sinusoidal_table(inputs.shape[1], inputs.shape[2], max_timescale)
        return inputs + table.astype(inputs.dtype)

    return _layer(name, init_fun, apply_fun)


def _dropout_mask(rng, keep, x):
    """Inverted dropout with keep probability ``keep``: ``where(bernoulli(rng, keep), x / keep, 0)``."""
    mask = random.bernoulli(rng, keep, x.shape)
    return jnp.where(mask, x / jnp.asarray(keep, x.dtype), jnp.zeros((), x.dtype))


def causal_mask(length):
    """Boolean causal mask: True where query position ``q`` may attend to key ``k <= q``.

    Args:
      length: the sequence length.

    Returns:
      A bool ``(length, length)`` lower-triangular array.
    """
    return jnp.tril(jnp.ones((length, length), jnp.bool_))


def attention(q, k, v, *, causal=False, dropout=0.0, rng=None, scale=None):
    """Scaled dot-product attention on ``(B, T, H, D)`` queries/keys/values -> ``(B, T, H, D)``.

    ``softmax(scale · q k^T [masked]) v`` per head; the scores are formed from ``scale · q`` (fewer
    multiplies than scaling the scores), masked positions get ``finfo(float32).min`` (so a fully
    masked row would be uniform, never NaN), and the softmax runs in at least float32 before being
    cast back to the inputs' dtype.

    Args:
      q: queries ``(B, T, H, D)``.
      k, v: keys and values ``(B, S, H, D)``.
      causal: mask the keys after each query (query ``t`` sits at key position ``t + S - T``).
      dropout: a DROP probability in [0, 1) on the attention weights.
      rng: a PRNG key, required when ``dropout > 0``.
      scale: the scores' scale (default ``1 / sqrt(D)``).

    Returns:
      The attended values ``(B, T, H, D)``, in ``v``'s dtype.

    Raises:
      ValueError: ``dropout > 0`` without an ``rng``.

    Source: Vaswani et al. 2017, arXiv:1706.03762.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    q = q * jnp.asarray(scale, q.dtype)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(_stats_dtype(q.dtype))
    if causal:
        T, S = q.shape[1], k.shape[1]
        mask = jnp.tril(jnp.ones((T, S), jnp.bool_), S - T)
        scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
    weights = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    if dropout > 0:
        if rng is None:
            raise ValueError("attention: dropout > 0 needs an rng")
        weights = _dropout_mask(rng, 1.0 - dropout, weights)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v)


def _to_heads(x, kernel, bias, heads):
    """``x (B, T, F) @ kernel (F, H·D) + bias (H·D,)`` as heads ``(B, T, H, D)``, ``bias`` ``None``
    for none; params cast to ``x``'s dtype.

    The kernel is contracted as ``(F, H, D)`` straight into heads, as flax's ``DenseGeneral``: no
    reshape of activations (measured on the 2-core CPU, gradient of attention: 0.96x the time of a
    matmul then a reshape, medians of 21-25 paired rounds; the same products).
    """
    F, HD = kernel.shape
    y = jnp.einsum("btf,fhd->bthd", x, _compute(kernel, x.dtype).reshape(F, heads, HD // heads))
    return y if bias is None else y + _compute(bias, x.dtype).reshape(heads, HD // heads)


def _from_heads(a, kernel, bias):
    """``a (B, T, H, D)`` merged by ``kernel (H·D, F)`` (contracted as ``(H, D, F)``) ``+ bias (F,)``
    -> ``(B, T, F)``, ``bias`` ``None`` for none; params cast to ``a``'s dtype."""
    H, D = a.shape[-2:]
    y = jnp.einsum("bthd,hdf->btf", a, _compute(kernel, a.dtype).reshape(H, D, kernel.shape[-1]))
    return y if bias is None else y + _compute(bias, a.dtype)


_ATTN_DROPOUT_MSG = ("MultiHeadSelfAttention with dropout in train mode requires apply_fun to be "
                     "called with a PRNG key: `apply_fun(params, inputs, rng=key)` (or build it with "
                     "mode='test', or call it through stateful(...) with train=False).")


def MultiHeadSelfAttention(num_heads, *, causal=False, dropout=0.0, out_dropout=0.0,
                           qkv_features=None, mode="train", W_init=None, b_init=zeros):
    """Multi-head self-attention on ``x (B, T, F)`` -> ``(B, T, F)``.

    ``[q | k | v] = x @ W_qkv + b_qkv`` (one matmul per column block), split into ``num_heads``
    heads of size ``D``; ``a = attention(q, k, v, causal=causal)`` (see :func:`attention`); output
    ``a.reshape(B, T, H * D) @ W_out + b_out``; params are cast to ``x``'s dtype at use. The rng
    rule is :func:`Dropout`'s: with ``mode='train'`` and a dropout > 0, ``apply_fun`` needs
    ``rng=key`` (split into one per dropout); through :func:`stateful`, ``train=False`` is
    deterministic whatever the mode.

    Args:
      num_heads: the number of heads ``H``, > 0.
      causal: mask the keys after each query.
      dropout, out_dropout: DROP probabilities in [0, 1) (unlike :func:`Dropout`'s keep rate) on the
        attention weights and on the output.
      qkv_features: ``H * D`` (default ``F``), divisible by ``num_heads``.
      mode: ``'train'`` (dropout active) or ``'test'`` (deterministic).
      W_init: the kernels' initializer (default LeCun normal: variance ``1 / fan_in``, flax's).
      b_init: the biases' initializer (default zeros).

    Returns:
      ``(init_fun, apply_fun)``; params ``(W_qkv (F, 3·H·D), b_qkv (3·H·D,), W_out (H·D, F), b_out
      (F,))``, float32; columns of ``W_qkv`` are ``[q heads | k heads | v heads]``, each head-major
      (column ``h·D + d``).

    Raises:
      ValueError: a bad ``num_heads`` or dropout; (at apply) dropout in train mode without an ``rng``.
      ShapeError: (at init) a non-``(B, T, F)`` input, or ``qkv_features`` not divisible by ``num_heads``.

    Source: Vaswani et al. 2017, arXiv:1706.03762.
    """
    if int(num_heads) <= 0:
        raise ValueError(f"MultiHeadSelfAttention: num_heads must be positive, got {num_heads}")
    for what, p in (("dropout", dropout), ("out_dropout", out_dropout)):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"MultiHeadSelfAttention: {what} is a drop probability and must be in "
                             f"[0, 1), got {p}")
    num_heads = int(num_heads)
    W_init = W_init or jax.nn.initializers.lecun_normal()
    name = f"MultiHeadSelfAttention(heads={num_heads}{', causal' if causal else ''})"
    stochastic = dropout > 0 or out_dropout > 0

    def init_fun(rng, input_shape):
        input_shape = _shape(input_shape)
        _check_sequence(name, input_shape)
        F = input_shape[-1]
        inner = int(qkv_features or F)
        if inner % num_heads:
            raise ShapeError(f"{name}: qkv features {inner} are not divisible by num_heads {num_heads}")
        k1, k2, k3, k4 = random.split(rng, 4)
        params = (W_init(k1, (F, 3 * inner)), b_init(k2, (3 * inner,)),
                  W_init(k3, (inner, F)), b_init(k4, (F,)))
        return input_shape, params

    def _apply(params, x, rng, train):
        W_qkv, b_qkv, W_out, b_out = (_compute(p, x.dtype) for p in params)
        inner = W_out.shape[0]
        drop = train and stochastic
        if drop and rng is None:
            raise ValueError(_ATTN_DROPOUT_MSG)
        r_attn, r_out = random.split(rng) if drop else (None, None)
        # three projections on column blocks of W_qkv, not one fused (B, T, 3·H·D) matmul split and
        # reshaped: the blocks' cotangents are small (F, H·D) kernels where the split costs a
        # (B, T, 3·H·D) concatenate of dq, dk, dv in the backward pass (measured on the 2-core CPU,
        # B 32, T 128, F 256, 4 heads, gradient: 0.94x the fused form's time, medians of 21-25
        # paired rounds); each head-shaped (_to_heads)
        q, k, v = (_to_heads(x, W_qkv[:, j * inner:(j + 1) * inner], b_qkv[j * inner:(j + 1) * inner],
                             num_heads) for j in range(3))
        a = attention(q, k, v, causal=causal, dropout=dropout if drop else 0.0, rng=r_attn)
        out = _from_heads(a, W_out, b_out)
        if drop and out_dropout > 0:
            out = _dropout_mask(r_out, 1.0 - out_dropout, out)
        return out

    def apply_fun(params, inputs, **kwargs):
        return _apply(params, inputs, kwargs.get("rng"), mode == "train")

    def init_with_state(rng, input_shape):
        out_shape, params = init_fun(rng, input_shape)
        return out_shape, params, ()

    def apply_with_state(params, state, inputs, *, train, rng=None, **kwargs):
        return _apply(params, inputs, rng, train and mode == "train"), state

    out = _layer(name, init_fun, apply_fun, init_with_state, apply_with_state)
    init_fun.stax_has_state = False  # train-flag aware (dropout) but carries no state
    init_fun.stax_stochastic = stochastic
    return out


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


# --------------------------------------------------------------------------------------------------
# Modern decoder layers (beyond the reference): RMSNorm, rotary position embeddings, QK-norm inside
# self-attention, ReLU² and SwiGLU MLPs. Same precision rule as the sequence layers above; their
# params are dicts with readable keys (``q``, ``k``, ``v``, ``out``; ``fc``, ``gate``, ``proj``;
# each ``{"kernel", "bias"}``), so parameter paths name what a parameter is.


def RMSNorm(epsilon=1e-6, scale=True, gamma_init=ones):
    """Root-mean-square normalisation over the last axis.

    ``y = gamma * x / sqrt(mean(x**2) + epsilon)`` (``torch.nn.functional.rms_norm``'s formula), the
    statistic in at least float32 (shared with :func:`LayerNorm`), ``y`` in the input's dtype.

    Args:
      epsilon: added to the mean square.
      scale: whether there is a gain ``gamma`` (params ``((),)`` when False).
      gamma_init: its initializer (default ones).

    Returns:
      ``(init_fun, apply_fun)``; params ``(gamma,)``, float32 ``(features,)``.

    Raises:
      ShapeError: (at init) a rank-0 input or an unknown feature size.

    Source: Zhang & Sennrich 2019, arXiv:1910.07467.
    """
    name = f"RMSNorm(eps={epsilon})"

    def init_fun(rng, input_shape):
        input_shape = _feature_shape(name, input_shape)
        return input_shape, (gamma_init(rng, (input_shape[-1],)) if scale else (),)

    def apply_fun(params, x, **kwargs):
        (gamma,) = params
        return _normalize(x, epsilon, gamma if scale else None, centered=False)

    return _layer(name, init_fun, apply_fun)


def rms_normalize(x, epsilon=1e-6):
    """``x / sqrt(mean(x**2, -1) + epsilon)`` with no gain (QK-norm), statistics in >= float32.

    Args:
      x: an array normalised over its last axis.
      epsilon: added to the mean square.

    Returns:
      The normalised array, ``x``'s shape and dtype.
    """
    return _normalize(x, epsilon, centered=False)


def rope_frequencies(head_dim, base=1024.0, fraction=0.5):
    """Angular frequencies of rotary embeddings.

    The first ``n = int(fraction * (head_dim // 2))`` pairs rotate at ``base ** (-i / (n - 1))``,
    ``i = 0..n-1`` (from 1 down to ``1 / base``), the rest at 0 (not rotated): modded-nanogpt's
    "half-truncated" RoPE at the defaults.

    Args:
      head_dim: the head size ``D``, even and > 0.
      base: > 1; of two or more rotating pairs the slowest turns at ``1 / base`` radians per position.
      fraction: the share of the pairs that rotate, in [0, 1].

    Returns:
      The frequencies in radians per position, float32 ``(head_dim // 2,)``.

    Raises:
      ValueError: an odd or non-positive ``head_dim``, ``base <= 1`` or ``fraction`` outside [0, 1].
    """
    if int(head_dim) != head_dim or head_dim <= 0 or head_dim % 2:  # 2.5 is not truncated to 2
        raise ValueError(f"rotary embeddings need an even head dimension, got {head_dim}")
    head_dim = int(head_dim)
    _check_rope("rope_frequencies: base", base, "fraction", fraction)
    half = head_dim // 2
    n = int(fraction * half)
    exps = jnp.linspace(0.0, 1.0, n, dtype=jnp.float32) if n > 1 else jnp.zeros((n,), jnp.float32)
    freqs = jnp.power(jnp.float32(1.0 / base), exps)
    return jnp.concatenate([freqs, jnp.zeros((half - n,), jnp.float32)])


def _check_rope(base_name, base, fraction_name, fraction):
    """``ValueError`` unless ``base > 1`` and ``0 <= fraction <= 1`` (:func:`rope_frequencies`)."""
    if not base > 1.0 or not 0.0 <= fraction <= 1.0:
        raise ValueError(f"{base_name} must be > 1 and {fraction_name} in [0, 1], got {base}, {fraction}")


def apply_rope(x, freqs):
    """Rotary position embedding of ``x (B, T, H, D)``.

    With ``x1, x2`` the two halves of the last axis and ``θ = t · freqs`` at position ``t``:
    ``[x1 cos θ + x2 sin θ, x2 cos θ - x1 sin θ]`` (the rotation's sign as modded-nanogpt's
    ``Rotary``), computed in at least float32.

    Args:
      x: queries or keys ``(B, T, H, D)``; position ``t`` is the index on axis 1.
      freqs: angular frequencies ``(D // 2,)``, e.g. from :func:`rope_frequencies`.

    Returns:
      The rotated ``x``, its shape and dtype.

    Source: Su et al. 2021 (RoFormer), arXiv:2104.09864.
    """
    pos = jnp.arange(x.shape[1], dtype=jnp.float32)
    theta = (pos[:, None] * freqs[None, :])[None, :, None, :]
    cos, sin = jnp.cos(theta), jnp.sin(theta)
    xs = x.astype(_stats_dtype(x.dtype))
    x1, x2 = jnp.split(xs, 2, axis=-1)
    return jnp.concatenate([x1 * cos + x2 * sin, x2 * cos - x1 * sin], axis=-1).astype(x.dtype)


def _linear_params(rng, shape, W_init, bias, zero):
    """``{"kernel": W_init(shape) (zeros if zero), "bias": zeros}`` (no ``bias`` key if not bias)."""
    out = {"kernel": jnp.zeros(shape, jnp.float32) if zero else W_init(rng, shape)}
    if bias:
        out["bias"] = jnp.zeros(shape[-1:], jnp.float32)
    return out


def _linear(p, x, spec="...f,fo->...o"):
    """``x @ kernel (+ bias)`` with ``p = {"kernel", "bias"?}`` cast to ``x``'s dtype."""
    y = jnp.einsum(spec, x, _compute(p["kernel"], x.dtype))
    return y + _compute(p["bias"], x.dtype) if "bias" in p else y


def RotarySelfAttention(num_heads, *, causal=True, qk_norm=True, rope_base=1024.0, rope_fraction=0.5,
                        scale=None, bias=True, zero_out=True, epsilon=1e-6, W_init=None):
    """Rotary self-attention with QK-norm, ``x (B, T, F)`` -> ``(B, T, F)``, as modded-nanogpt's.

    Args:
      num_heads: the number of heads, > 0, of an even size ``D = F / num_heads``: q and k are
        QK-normed and rotated (:func:`apply_rope`), then :func:`attention`.
      causal: mask the keys after each query.
      qk_norm, epsilon: RMS-normalise each head's q and k (no gain) with this epsilon.
      rope_base, rope_fraction: :func:`rope_frequencies`'s ``base`` and ``fraction``.
      scale: the attention scale (default ``1/sqrt(D)``).
      bias, zero_out: zero-initialised biases (none if False); the ``out`` kernel starts at zero.
      W_init: the kernels' initializer (default normal of variance ``0.33 / fan_in``, modded-nanogpt's).

    Returns:
      ``(init_fun, apply_fun)``; params ``{"q", "k", "v", "out"}``, each ``{"kernel" (F, F), "bias" (F,)}``.

    Raises:
      ValueError: ``num_heads`` not a positive integer, ``rope_base <= 1``, ``rope_fraction`` not in [0, 1].
      ShapeError: (at init) a non-``(B, T, F)`` input or ``F`` not in ``num_heads`` even-sized heads.
    """
    if int(num_heads) != num_heads or int(num_heads) <= 0:
        raise ValueError(f"RotarySelfAttention: num_heads must be a positive integer, got {num_heads}")
    _check_rope("RotarySelfAttention: rope_base", rope_base, "rope_fraction", rope_fraction)
    H = int(num_heads)
    W_init = W_init or jax.nn.initializers.variance_scaling(0.33, "fan_in", "normal")
    name = f"RotarySelfAttention(heads={H})"

    def init_fun(rng, input_shape):
        input_shape = _shape(input_shape)
        _check_sequence(name, input_shape)
        F = input_shape[-1]
        if F % H or (F // H) % 2:
            raise ShapeError(f"{name}: width {F} must split into {H} heads of an even size (rotary "
                             f"embeddings rotate pairs)")
        keys = random.split(rng, 4)
        params = {n: _linear_params(r, (F, F), W_init, bias, zero_out and n == "out")
                  for n, r in zip(("q", "k", "v", "out"), keys, strict=True)}
        return input_shape, params

    def apply_fun(params, x, **kwargs):
        freqs = rope_frequencies(x.shape[-1] // H, rope_base, rope_fraction)
        q, k, v = (_to_heads(x, params[n]["kernel"], params[n].get("bias"), H) for n in ("q", "k", "v"))
        if qk_norm:
            q, k = rms_normalize(q, epsilon), rms_normalize(k, epsilon)
        q, k = apply_rope(q, freqs), apply_rope(k, freqs)
        a = attention(q, k, v, causal=causal, scale=scale)
        return _from_heads(a, params["out"]["kernel"], params["out"].get("bias"))

    return _layer(name, init_fun, apply_fun)


#: The MLP kinds of :func:`MLP`: name -> (number of input matrices, activation of the first).
MLP_KINDS = {"relu2": 1, "gelu": 1, "swiglu": 2}


def MLP(hidden, kind="relu2", *, bias=True, zero_out=True, W_init=None):
    """Transformer MLP on ``x (..., F)`` -> ``(..., F)``.

    Args:
      hidden: the hidden size, > 0.
      kind: ``'relu2'`` ``proj(relu(fc(x))**2)`` (So et al. 2021, arXiv:2109.08668, modded-nanogpt);
        ``'gelu'`` ``proj(gelu(fc(x)))`` (GPT-2, tanh approximation); ``'swiglu'``
        ``proj(silu(gate(x)) * fc(x))`` (Shazeer 2020, arXiv:2002.05202).
      bias: zero-initialised biases (none if False).
      zero_out: the ``proj`` kernel starts at zero.
      W_init: the kernels' initializer (default as :func:`RotarySelfAttention`).

    Returns:
      ``(init_fun, apply_fun)``; params ``{"fc", ["gate",] "proj"}``, each ``{"kernel", "bias"}``
      (``fc``/``gate`` ``(F, hidden)``, ``proj`` ``(hidden, F)``).

    Raises:
      ValueError: an unknown ``kind`` or ``hidden <= 0``.
      ShapeError: (at init) an input whose feature size ``F`` is unknown.
    """
    if kind not in MLP_KINDS:
        raise ValueError(f"MLP: kind must be one of {sorted(MLP_KINDS)}, got {kind!r}")
    if int(hidden) <= 0:
        raise ValueError(f"MLP: hidden must be positive, got {hidden}")
    hidden = int(hidden)
    W_init = W_init or jax.nn.initializers.variance_scaling(0.33, "fan_in", "normal")
    names = ("fc", "gate")[:MLP_KINDS[kind]]

    def init_fun(rng, input_shape):
        input_shape = _shape(input_shape)
        if len(input_shape) == 0 or input_shape[-1] is None or input_shape[-1] <= 0:
            raise ShapeError(f"MLP: needs a known feature dimension, got {_fmt(input_shape)}")
        F = input_shape[-1]
        keys = random.split(rng, 3)
        params = {n: _linear_params(r, (F, hidden), W_init, bias, False)
                  for n, r in zip(names, keys, strict=False)}
        params["proj"] = _linear_params(keys[2], (hidden, F), W_init, bias, zero_out)
        return input_shape, params

    def apply_fun(params, x, **kwargs):
        h = _linear(params["fc"], x)
        if kind == "relu2":
            h = jnp.square(relu(h))
        elif kind == "gelu":
            h = gelu(h)
        else:
            h = jax.nn.silu(_linear(params["gate"], x)) * h
        return _linear(params["proj"], h)

    return _layer(f"MLP({hidden}, {kind})", init_fun, apply_fun)


def soft_cap(logits, cap, form="tanh"):
    """Logit soft-cap: ``cap · tanh(x / cap)`` or ``cap · x / sqrt(x² + cap²)``.

    Args:
      logits: a float array.
      cap: the bound on ``|output|``; None or <= 0 returns ``logits`` unchanged.
      form: ``'tanh'`` (Gemma 2, arXiv:2408.00118) or ``'algebraic'`` (modded-nanogpt's optimization track).

    Returns:
      The capped logits, same shape and dtype.

    Raises:
      ValueError: an unknown ``form`` (with ``cap > 0``).
    """
    if cap is None or cap <= 0:
        return logits
    c = jnp.asarray(cap, logits.dtype)
    if form == "tanh":
        return c * jnp.tanh(logits / c)
    if form == "algebraic":
        return c * logits * lax.rsqrt(jnp.square(logits) + c * c)
    raise ValueError(f"soft_cap: form must be 'tanh' or 'algebraic', got {form!r}")
