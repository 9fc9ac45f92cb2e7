"""Token cross-entropy of language models: log-sum-exp minus the target logit, whole or blocked.

* :func:`token_nll` is the per-token loss from logits: ``logsumexp(z) - z[target]`` in float32,
  padding (targets < 0) masked on the ``(N, T)`` losses, never on the ``(N, T, V)`` logits. It is the
  form of ``optax.softmax_cross_entropy_with_integer_labels``; no ``log_softmax`` array is built.
* :func:`head_nll_sum` fuses the output head's matmul with that loss over blocks of tokens: the
  logits of one block of ``block`` tokens exist at a time, and under ``jax.grad`` each block's
  gradients (features, kernel, bias) are taken while its logits are there (a ``jax.custom_vjp``),
  so the ``(tokens, vocabulary)`` logits are never whole and never recomputed.
* :func:`head_stats` is the same blocked pass for evaluation: loss sum and argmax hits.
* :func:`loss_block_tokens` picks the block for a shape (``None``: whole logits).

Imports only jax and :mod:`models.stax` (the soft-cap).
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp

from models import stax

__all__ = ["AUTO_BLOCK_BYTES", "head_nll_sum", "head_stats", "loss_block_tokens", "token_nll"]

#: ``loss_block=None`` blocks the logits when the whole float32 ``(tokens, vocabulary)`` array would
#: exceed this many bytes (128 MiB), in blocks of about this size. Measured on the CPU
#: (tests/benchmarks/test_bench_lm_loss.py, gpt 8 × 256 tokens, vocabulary 50,304): blocks of 512
#: tokens (103 MB) took 0.57x the CPU time of the whole logits, blocks of 1,024 0.61x.
AUTO_BLOCK_BYTES = 1 << 27


def token_nll(logits, targets):
    """Per-token softmax cross-entropy ``logsumexp(z) - z[target]``, 0 at padding.

    Args:
      logits: ``(..., V)``, any float dtype (computed in float32).
      targets: int ``(...)`` in ``[0, V)``; ids < 0 are padding.

    Returns:
      ``(nll, valid)``: float32 ``(...)`` losses (nats; 0 where padding) and the bool mask of
      non-padding targets.

    Source: ``optax.softmax_cross_entropy_with_integer_labels`` (the same formula).
    """
    z = jnp.asarray(logits).astype(jnp.float32)
    t = jnp.asarray(targets, jnp.int32)
    valid = t >= 0
    lse = jax.nn.logsumexp(z, axis=-1)
    picked = jnp.take_along_axis(z, jnp.maximum(t, 0)[..., None], axis=-1)[..., 0]
    return jnp.where(valid, lse - picked, 0.0), valid


def loss_block_tokens(tokens: int, vocab_size: int, loss_block: int | None) -> int | None:
    """Tokens per block of :func:`head_nll_sum` for ``tokens`` tokens, or None for whole logits.

    Args:
      tokens: tokens in the batch (``N · T``).
      vocab_size: the logits' last axis.
      loss_block: the model's setting: 0 whole logits; > 0 that many tokens per block; None
        (auto) whole while ``4 · tokens · vocab_size <= AUTO_BLOCK_BYTES``, else blocks of about
        :data:`AUTO_BLOCK_BYTES` of float32 logits.

    Returns:
      The block size (``<= tokens``; one that divides ``tokens`` when at most twice as many blocks
      do), or None.
    """
    if loss_block == 0:
        return None
    if loss_block is None:
        if 4 * tokens * vocab_size <= AUTO_BLOCK_BYTES:
            return None
        loss_block = max(1, AUTO_BLOCK_BYTES // (4 * vocab_size))
    nb = math.ceil(tokens / min(loss_block, tokens))
    for n in range(nb, min(tokens, 2 * nb) + 1):  # the fewest blocks that divide the tokens, if <= 2 nb
        if tokens % n == 0:
            return tokens // n
    return math.ceil(tokens / nb)  # equal blocks, the last padded by < nb tokens


def _logits(x, kernel, bias, cap, form):
    """``soft_cap(x @ kernel + bias)`` in float32; the matmul in ``x``'s dtype (as the GPT's head)."""
    z = x @ kernel.astype(x.dtype)
    if bias is not None:
        z = z + bias.astype(x.dtype)
    return stax.soft_cap(z.astype(jnp.float32), cap, form)


def _blocks(x, targets, block):
    """``x (..., F)`` and ``targets (...)`` as ``(nb, block, F)`` and ``(nb, block)``, the tail
    padded with zero features and padding targets (-1)."""
    F = x.shape[-1]
    x, t = x.reshape(-1, F), jnp.asarray(targets, jnp.int32).reshape(-1)
    M = t.shape[0]
    nb = math.ceil(M / block)
    pad = nb * block - M
    if pad:
        x = jnp.concatenate([x, jnp.zeros((pad, F), x.dtype)])
        t = jnp.concatenate([t, jnp.full((pad,), -1, jnp.int32)])
    return x.reshape(nb, block, F), t.reshape(nb, block), M


def _block_sum(xb, kernel, bias, tb, cap, form):
    nll, _ = token_nll(_logits(xb, kernel, bias, cap, form), tb)
    return jnp.sum(nll)


@partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def head_nll_sum(x, kernel, bias, targets, cap=0.0, form="algebraic", block=1024):
    """Sum of :func:`token_nll` of the logits ``soft_cap(x @ kernel + bias)``, ``block`` tokens at a time.

    Differentiable in ``x``, ``kernel`` and ``bias``; the gradients equal those of the whole-logits
    loss to float32 rounding, with one matmul per block more than the forward (none recomputed).

    Args:
      x: features ``(..., F)``, float (the matmul runs in its dtype).
      kernel: ``(F, V)``. bias: ``(V,)`` or None.
      targets: int ``(...)`` in ``[0, V)``; ids < 0 are padding (no loss, no gradient).
      cap, form: :func:`models.stax.soft_cap` of the logits (``cap=0``: none).
      block: tokens per block (static).

    Returns:
      The float32 sum over the non-padding tokens (nats), a scalar.
    """
    xs, ts, _ = _blocks(x, targets, block)

    def body(acc, blk):
        return acc + _block_sum(blk[0], kernel, bias, blk[1], cap, form), None

    return jax.lax.scan(body, jnp.float32(0.0), (xs, ts))[0]


def _head_fwd(x, kernel, bias, targets, cap, form, block):
    xs, ts, M = _blocks(x, targets, block)
    zeros = lambda a: None if a is None else jnp.zeros(a.shape, jnp.float32)  # noqa: E731

    def body(carry, blk):
        total, dk, db = carry
        s, vjp = jax.vjp(lambda xb, k, b: _block_sum(xb, k, b, blk[1], cap, form), blk[0], kernel, bias)
        dxb, dkb, dbb = vjp(jnp.ones((), s.dtype))
        dk = dk + dkb.astype(jnp.float32)
        db = None if db is None else db + dbb.astype(jnp.float32)
        return (total + s, dk, db), dxb

    (total, dk, db), dxs = jax.lax.scan(body, (jnp.float32(0.0), zeros(kernel), zeros(bias)), (xs, ts))
    dx = dxs.reshape(-1, x.shape[-1])[:M].reshape(x.shape)
    return total, (dx, dk.astype(kernel.dtype), None if db is None else db.astype(bias.dtype))


def _head_bwd(cap, form, block, res, g):
    dx, dk, db = res
    scale = lambda a: None if a is None else (g * a.astype(jnp.float32)).astype(a.dtype)  # noqa: E731
    return scale(dx), scale(dk), scale(db), None


head_nll_sum.defvjp(_head_fwd, _head_bwd)


def head_stats(x, kernel, bias, targets, cap=0.0, form="algebraic", block=None):
    """Loss sum, argmax hits and token count of the head's logits, ``block`` tokens at a time.

    Args:
      x, kernel, bias, targets, cap, form: as :func:`head_nll_sum`.
      block: tokens per block, or None for the whole logits at once.

    Returns:
      ``(nll_sum, hits, count)``: float32 scalars; ``hits`` counts non-padding tokens whose target
      is the argmax of the logits, ``count`` the non-padding tokens.
    """
    def stats(xb, tb):
        z = _logits(xb, kernel, bias, cap, form)
        nll, valid = token_nll(z, tb)
        hits = (jnp.argmax(z, axis=-1) == tb) & valid
        return jnp.stack([jnp.sum(nll), jnp.sum(hits, dtype=jnp.float32), jnp.sum(valid, dtype=jnp.float32)])

    if block is None:
        out = stats(x, jnp.asarray(targets, jnp.int32))
    else:
        xs, ts, _ = _blocks(x, targets, block)
        out = jax.lax.scan(lambda acc, blk: (acc + stats(*blk), None), jnp.zeros(3, jnp.float32), (xs, ts))[0]
    return out[0], out[1], out[2]
