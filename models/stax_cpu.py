"""CPU kernels behind ``models.stax``'s convolution and max pooling (beyond the reference).

``GeneralConv(..., impl='patches' | 'auto')`` computes a convolution as im2col patches times a
matrix (:func:`conv_patches`), and ``MaxPool`` with tiling windows uses :func:`tiled_max_pool`,
whose gradient avoids ``select_and_scatter``: XLA:CPU runs both of the reference's forms slowly
inside ``lax.scan``. Values equal the reference's up to float32 summation order.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import math

import jax
import jax.numpy as jnp
from jax import lax

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


def resolve_conv_impl(impl):
    if impl == "auto":
        return "patches" if jax.default_backend() == "cpu" and not _OUTSIDE_LOOPS.get() else "xla"
    return impl


def conv_patches(inputs, W, strides, padding, dimension_numbers):
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


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def tiled_max_pool(x, window):
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


@tiled_max_pool.defjvp
def _tiled_max_pool_jvp(window, primals, tangents):
    # Each spatial axis of size n is cropped to whole windows and split into (n // w, w); the
    # tangent of a window is the tangent at its first maximal element (row-major position inside
    # the window). Built from a reshape, a compare, a min-reduction and a select, all of which XLA
    # fuses; the transpose is the same ops backwards (no scatter).
    (x,), (t,) = primals, tangents
    y = tiled_max_pool(x, window)
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
