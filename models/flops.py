"""Forward FLOP counts: from XLA's compiled cost analysis and analytically from a jaxpr.

Both count a multiply-add as 2 FLOPs (XLA's convention). ``xla_flops`` is what the harness's timing
module reports as FLOPs/step; ``jaxpr_flops`` is the independent analytic count it is checked
against (matmuls and convolutions exactly, elementwise arithmetic as one FLOP per output element).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr

__all__ = ["conv_flops", "cost_analysis_flops", "jaxpr_flops", "lm_train_flops_per_token",
           "transformer_matmul_flops", "xla_flops"]


def cost_analysis_flops(cost: Any) -> float | None:
    """The ``'flops'`` entry of a ``Compiled.cost_analysis()`` result, robustly.

    Args:
      cost: a dict (recent jax), a list/tuple of dicts (older jax: one per computation; their
        counts are summed) or None.

    Returns:
      The count as a float, or None when there is none or XLA reports a negative (``-1``: "cannot
      count") or non-finite one.
    """
    if cost is None:
        return None
    if isinstance(cost, Mapping):
        cost = [cost]
    total, found = 0.0, False
    for entry in cost:
        if not isinstance(entry, Mapping) or entry.get("flops") is None:
            continue
        try:
            value = float(entry["flops"])
        except (TypeError, ValueError):
            continue
        if not math.isfinite(value) or value < 0:
            return None
        total += value
        found = True
    return total if found else None


def xla_flops(fn: Callable, *args: Any, **kwargs: Any) -> float | None:
    """FLOPs of one call ``fn(*args, **kwargs)`` from XLA's compiled cost analysis.

    Reads ``jax.jit(fn).lower(*args, **kwargs).compile().cost_analysis()`` (a multiply-add counts 2).
    Note (jax 0.10.2): for a ``lax.scan`` XLA reports the body's count, not multiplied by the trip
    count.

    Args:
      fn: the function to count.
      *args, **kwargs: its arguments: arrays or ``jax.ShapeDtypeStruct``s.

    Returns:
      The count as a float, or None where XLA cannot count (any exception from lowering, compiling
      or the cost analysis, a missing entry or -1).
    """
    try:
        compiled = jax.jit(fn).lower(*args, **kwargs).compile()
        cost = compiled.cost_analysis()
    except Exception:  # a backend without cost analysis: no number rather than a crash
        return None
    return cost_analysis_flops(cost)


# Elementwise primitives counted as one FLOP per output element (XLA counts these likewise).
_ELEMENTWISE = frozenset({
    "add", "sub", "mul", "div", "max", "min", "neg", "exp", "log", "tanh", "logistic", "sqrt",
    "rsqrt", "pow", "integer_pow", "abs", "sign", "exp2", "log1p", "expm1", "erf", "select_n",
    "square", "erf_inv", "atan2", "sin", "cos",
})
_REDUCE = frozenset({"reduce_sum", "reduce_max", "reduce_min", "argmax", "argmin"})


def _size(shape) -> int:
    return int(np.prod(shape)) if len(shape) else 1


def _valid_taps(n, k, stride, pad, lhs_dil, rhs_dil, out) -> int:
    """Number of (output position, kernel tap) pairs of one spatial dim that hit a real input element
    (not padding, not a hole of an lhs dilation): what XLA counts for a convolution."""
    lo = pad[0]
    last = (n - 1) * lhs_dil
    count = 0
    for o in range(out):
        for t in range(k):
            j = o * stride + t * rhs_dil - lo
            if 0 <= j <= last and j % lhs_dil == 0:
                count += 1
    return count


def _conv_flops(eqn) -> float:
    lhs = eqn.invars[0].aval.shape
    rhs = eqn.invars[1].aval.shape
    out = eqn.outvars[0].aval.shape
    dn = eqn.params["dimension_numbers"]
    p = eqn.params
    nsp = len(dn.lhs_spec) - 2
    lhs_dil = p.get("lhs_dilation") or (1,) * nsp
    rhs_dil = p.get("rhs_dilation") or (1,) * nsp
    pairs = 1
    for d in range(nsp):
        pairs *= _valid_taps(lhs[dn.lhs_spec[2 + d]], rhs[dn.rhs_spec[2 + d]], p["window_strides"][d],
                             p["padding"][d], lhs_dil[d], rhs_dil[d], out[dn.out_spec[2 + d]])
    batch = lhs[dn.lhs_spec[0]] // p.get("batch_group_count", 1)
    in_per_group = rhs[dn.rhs_spec[1]]
    return 2.0 * batch * out[dn.out_spec[1]] * in_per_group * pairs


def _eqn_flops(eqn) -> float:
    name = eqn.primitive.name
    if name == "dot_general":
        (lc, _rc), (_lb, _rb) = eqn.params["dimension_numbers"]
        lhs = eqn.invars[0].aval.shape
        out = eqn.outvars[0].aval.shape
        contract = _size([lhs[i] for i in lc])
        return 2.0 * _size(out) * contract
    if name == "conv_general_dilated":
        return _conv_flops(eqn)
    if name in _ELEMENTWISE:
        return float(_size(eqn.outvars[0].aval.shape))
    if name in _REDUCE:
        return float(_size(eqn.invars[0].aval.shape))
    if name.startswith("reduce_window"):
        window = eqn.params.get("window_dimensions", ())
        return float(_size(eqn.outvars[0].aval.shape) * max(_size(window) - 1, 1))
    return 0.0


def _subjaxprs(eqn):
    for v in eqn.params.values():
        for item in v if isinstance(v, (tuple, list)) else (v,):
            if isinstance(item, ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, Jaxpr):
                yield item


def _jaxpr_flops(jaxpr, matmul_only: bool) -> float:
    total = 0.0
    for eqn in jaxpr.eqns:
        subs = list(_subjaxprs(eqn))
        if subs:
            # cond/switch branches: count the costliest one.
            counts = [_jaxpr_flops(sub, matmul_only) for sub in subs]
            total += max(counts) if eqn.primitive.name == "cond" else sum(counts)
        elif not matmul_only or eqn.primitive.name in ("dot_general", "conv_general_dilated"):
            total += _eqn_flops(eqn)
    return total


def jaxpr_flops(fn: Callable, *args: Any, matmul_only: bool = False, **kwargs: Any) -> float:
    """Analytic FLOPs of ``fn(*args, **kwargs)`` counted from its jaxpr (no compilation).

    ``dot_general``: 2 × output size × contracted size; ``conv_general_dilated``: 2 × batch ×
    output channels × input channels per group × the (output position, filter tap) pairs that hit
    real input (padding and lhs-dilation holes excluded, as XLA counts); elementwise arithmetic: 1
    per output element; reductions: 1 per input element; ``reduce_window``: window size - 1 (at
    least 1) per output element. Nested jaxprs (``jit``, ``custom_jvp``) are entered; loops are
    counted once (as XLA does); of a ``cond``, the costliest branch.

    Args:
      fn: the function to count.
      *args, **kwargs: its arguments: arrays or ``jax.ShapeDtypeStruct``s.
      matmul_only: count only matmuls and convolutions.

    Returns:
      The count as a float.
    """
    return _jaxpr_flops(jax.make_jaxpr(fn)(*args, **kwargs).jaxpr, matmul_only)


def _conv_only(jaxpr) -> float:
    total = 0.0
    for eqn in jaxpr.eqns:
        total += sum(_conv_only(sub) for sub in _subjaxprs(eqn))
        if eqn.primitive.name == "conv_general_dilated":
            total += _conv_flops(eqn)
    return total


def conv_flops(fn: Callable, *args: Any, **kwargs: Any) -> float:
    """Analytic FLOPs of the convolutions alone in ``fn(*args, **kwargs)``; nothing compiled.

    Args:
      fn: the function to count.
      *args, **kwargs: its arguments: arrays or ``jax.ShapeDtypeStruct``s.

    Returns:
      The convolutions' count as :func:`jaxpr_flops` makes it (loops once), a float; 0.0 without any.
    """
    return _conv_only(jax.make_jaxpr(fn)(*args, **kwargs).jaxpr)


def transformer_matmul_flops(tokens: int, width: int, depth: int, mlp_dim: int,
                             qkv_features: int | None = None) -> float:
    """Closed-form matmul FLOPs of one example through ``depth`` Transformer blocks.

    Blocks of :func:`models.stax.MultiHeadSelfAttention` plus a Dense-Dense MLP; per block, with
    ``T = tokens``, ``d = width``, ``i = qkv_features or width``, ``m = mlp_dim`` (multiply-add = 2):
    q/k/v projections ``2·T·d·3i``, scores ``2·T·T·i``, weighted values ``2·T·T·i``, output
    projection ``2·T·i·d``, MLP ``2·T·d·m·2``. Causal masking does not halve the score matmuls (all
    ``T × T`` scores are computed, then masked), so this is the work executed, as XLA counts it.
    Embedding lookups, heads and elementwise work are not included (models add their own ends).

    Args:
      tokens: positions per example, ``T``.
      width: the model width ``d``.
      depth: the number of blocks.
      mlp_dim: the MLP's hidden size ``m``.
      qkv_features: the attention's inner size ``i`` (default ``width``).

    Returns:
      ``depth`` × the per-block count, a float.
    """
    T, d, m = int(tokens), int(width), int(mlp_dim)
    i = int(qkv_features or width)
    per_block = 2 * T * d * 3 * i + 2 * 2 * T * T * i + 2 * T * i * d + 2 * 2 * T * d * m
    return float(depth * per_block)


def lm_train_flops_per_token(*, width: int, depth: int, context: int, vocab_size: int, mlp_dim: int,
                             mlp_matrices: int = 2, attn_features: int | None = None,
                             causal: bool = True) -> float:
    """Training FLOPs per token of a decoder LM as MaxText counts them for MFU: ``6·N + attention``.

    ``N`` = matmul weights a token passes through: per block ``4·d·i`` (q, k, v, out) +
    ``mlp_matrices·d·m``, plus the head ``d·vocab_size`` (the embedding lookup is not a matmul; a
    tied head still computes its logits). Attention: ``12·depth·context·i`` (scores and weighted
    values, forward ×3 for training), halved when ``causal``. Norms, biases and elementwise work
    are left out.

    Args:
      width: the model width ``d``.
      depth: the number of blocks.
      context: the sequence length attended over.
      vocab_size: the head's output size.
      mlp_dim: the MLP's hidden size ``m``.
      mlp_matrices: the MLP's weight matrices: 2 for ReLU²/GELU, 3 for SwiGLU.
      attn_features: the attention's inner size ``i`` (default ``width``).
      causal: halve the attention term (MaxText's causal count).

    Returns:
      FLOPs per token, a float.

    Source: MaxText ``calculate_tflops_training_per_device``; PaLM (Chowdhery et al. 2022,
    arXiv:2204.02311, appendix B) for the non-causal form.
    """
    d, m, i = int(width), int(mlp_dim), int(attn_features or width)
    n_matmul = int(depth) * (4 * d * i + int(mlp_matrices) * d * m) + d * int(vocab_size)
    attention = 12.0 * int(depth) * int(context) * i * (0.5 if causal else 1.0)
    return 6.0 * n_matmul + attention
