"""Causal self-attention through ``jax.nn.dot_product_attention``, its implementation selectable.

:func:`dot_product_attention` is what :func:`models.stax.RotarySelfAttention` (the ``gpt``'s
attention) calls with ``impl`` other than ``'einsum'``: XLA's attention on every backend, or
cuDNN's fused (flash) attention on NVIDIA GPUs, where ``'auto'`` picks it for 16-bit inputs.
``'einsum'`` is :func:`models.stax.attention` (scores, mask, softmax and weighted sum written out).
Imports only jax.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["ATTENTION_IMPLS", "dot_product_attention", "resolve_impl"]

#: The values of ``impl``: ``auto`` (cudnn for bfloat16/float16 on a GPU, else xla), ``xla``,
#: ``cudnn`` (NVIDIA GPUs, 16-bit inputs), ``einsum`` (:func:`models.stax.attention`).
ATTENTION_IMPLS = ("auto", "xla", "cudnn", "einsum")


def resolve_impl(impl: str, dtype, backend: str | None = None) -> str:
    """The implementation ``impl`` means for inputs of ``dtype`` on ``backend``.

    Args:
      impl: one of :data:`ATTENTION_IMPLS`.
      dtype: the queries' dtype.
      backend: ``jax.default_backend()`` when None.

    Returns:
      ``'xla'``, ``'cudnn'`` or ``'einsum'``: ``'auto'`` is ``'cudnn'`` on ``'gpu'`` for bfloat16 or
      float16 inputs (cuDNN's fused attention takes no float32), else ``'xla'``.

    Raises:
      ValueError: an unknown ``impl``.
    """
    if impl not in ATTENTION_IMPLS:
        raise ValueError(f"attention: impl must be one of {list(ATTENTION_IMPLS)}, got {impl!r}")
    if impl != "auto":
        return impl
    backend = jax.default_backend() if backend is None else backend
    half = jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
    return "cudnn" if backend == "gpu" and half else "xla"


def dot_product_attention(q, k, v, *, causal=True, scale=None, impl="auto"):
    """``softmax(scale · q kᵀ [causal mask]) v`` per head by ``jax.nn.dot_product_attention``.

    Args:
      q, k, v: ``(B, T, H, D)`` queries, keys and values of one dtype (self-attention: same T).
      causal: mask the keys after each query.
      scale: the scores' scale (default ``1 / sqrt(D)``).
      impl: ``'auto'``, ``'xla'`` or ``'cudnn'`` (:func:`resolve_impl`; not ``'einsum'``).

    Returns:
      The attended values ``(B, T, H, D)`` in ``q``'s dtype; the softmax runs in float32.

    Raises:
      ValueError: an unknown ``impl``, or ``'einsum'`` (that is :func:`models.stax.attention`).

    Source: ``jax.nn.dot_product_attention``; Vaswani et al. 2017, arXiv:1706.03762.
    """
    impl = resolve_impl(impl, q.dtype)
    if impl == "einsum":
        raise ValueError("attention: impl 'einsum' is models.stax.attention, not dot_product_attention")
    return jax.nn.dot_product_attention(q, k, v, scale=None if scale is None else float(scale),
                                        is_causal=bool(causal), implementation=impl)
