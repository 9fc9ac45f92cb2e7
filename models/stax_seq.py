"""Sequence and decoder layers for ``models.stax`` (beyond the reference), re-exported by it.

Same ``(init_fun, apply_fun)`` contract as the reference's layers: :func:`Embedding`,
:func:`LayerNorm`, :func:`PositionalEmbedding` (learned), :func:`SinusoidalPositionalEmbedding`,
:func:`MultiHeadSelfAttention` (optional causal mask, dropout with ``stax.Dropout``'s rng rule);
and the modern decoder layers :func:`RMSNorm`, :func:`RotarySelfAttention` (rotary embeddings,
QK-norm), :func:`MLP` (ReLU², GELU, SwiGLU), :func:`soft_cap` (``models/gpt.py`` assembles them).
Their parameters are float32 and cast to the input's dtype at use (bfloat16-clean);
``tests/test_stax_seq.py`` checks each against a hand-written formula and against ``flax.linen``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax, random
from jax.nn import gelu, relu
from jax.nn.initializers import normal, ones, zeros

from models.attention import dot_product_attention, resolve_impl
from models.stax_state import ShapeError
from models.stax_state import as_shape as _shape
from models.stax_state import check_rank as _check_rank
from models.stax_state import feature_shape as _feature_shape
from models.stax_state import fmt_shape as _fmt
from models.stax_state import make_layer as _layer

__all__ = [
    "MLP", "MLP_KINDS", "Embedding", "LayerNorm", "MultiHeadSelfAttention", "PositionalEmbedding",
    "RMSNorm", "RotarySelfAttention", "SinusoidalPositionalEmbedding", "apply_rope", "attention",
    "causal_mask", "matmul_2d", "rms_normalize", "rope_frequencies", "sinusoidal_table", "soft_cap",
]


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


def _linear(p, x):
    """``x @ kernel (+ bias)`` with ``p = {"kernel", "bias"?}`` cast to ``x``'s dtype.

    ``x (..., F)`` is multiplied as one ``(tokens, F)`` matrix (:func:`matmul_2d`)."""
    y = matmul_2d(x, _compute(p["kernel"], x.dtype))
    return y + _compute(p["bias"], x.dtype) if "bias" in p else y


def matmul_2d(x, kernel):
    """``x (..., F) @ kernel (F, O)`` -> ``(..., O)``, the leading axes of ``x`` merged into one.

    The same products and sums as ``jnp.einsum("...f,fo->...o")`` (the same bits on the CPU), but
    the kernel's gradient is then one 2-D product contracting a single axis: with two or more
    leading axes XLA's CPU backend transposes the output gradient into a copy and runs a slower
    matrix product (MLP of the gpt benchmark, value and gradient: 0.70x the CPU time).

    Args:
      x: ``(..., F)``.
      kernel: ``(F, O)``, ``x``'s dtype.

    Returns:
      ``(..., O)``.
    """
    y = x.reshape(-1, x.shape[-1]) @ kernel
    return y.reshape(*x.shape[:-1], kernel.shape[-1])


def _rotary_qkv(params, x, H, freqs, qk_norm, epsilon):
    """:func:`RotarySelfAttention`'s heads ``(B, T, H, D)`` of ``x (B, T, F)``: q and k RMS-normalised
    (when ``qk_norm``) and rotated by ``freqs``, and v."""
    q, k, v = (_to_heads(x, params[n]["kernel"], params[n].get("bias"), H) for n in ("q", "k", "v"))
    if qk_norm:
        q, k = rms_normalize(q, epsilon), rms_normalize(k, epsilon)
    return apply_rope(q, freqs), apply_rope(k, freqs), v


def RotarySelfAttention(num_heads, *, causal=True, qk_norm=True, rope_base=1024.0, rope_fraction=0.5,
                        scale=None, bias=True, zero_out=True, epsilon=1e-6, W_init=None, impl="auto"):
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
      impl: :func:`models.attention.dot_product_attention`'s (``'einsum'``: :func:`attention`).

    Returns:
      ``(init_fun, apply_fun)``; params ``{"q", "k", "v", "out"}``, each ``{"kernel" (F, F), "bias" (F,)}``.

    Raises:
      ValueError: bad ``num_heads``, ``rope_base <= 1``, ``rope_fraction`` not in [0, 1], bad ``impl``.
      ShapeError: (at init) a non-``(B, T, F)`` input or ``F`` not in ``num_heads`` even-sized heads.
    """
    if int(num_heads) != num_heads or int(num_heads) <= 0:
        raise ValueError(f"RotarySelfAttention: num_heads must be a positive integer, got {num_heads}")
    _check_rope("RotarySelfAttention: rope_base", rope_base, "rope_fraction", rope_fraction)
    H, _ = int(num_heads), resolve_impl(impl, jnp.float32)
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
        q, k, v = _rotary_qkv(params, x, H, freqs, qk_norm, epsilon)
        a = (attention(q, k, v, causal=causal, scale=scale) if impl == "einsum"
             else dot_product_attention(q, k, v, causal=causal, scale=scale, impl=impl))
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
