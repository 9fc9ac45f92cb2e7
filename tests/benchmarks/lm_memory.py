"""Compiled memory of ``gpt`` training steps and evaluation batches, against flax.linen + optax.

Helpers of tests/benchmarks/test_bench_lm_loss.py (also runnable: ``python
tests/benchmarks/lm_memory.py [B T V WIDTH DEPTH]`` prints the table). Compile only, nothing runs:
the peak of a step is XLA's ``memory_analysis()`` of the compiled program, ``arguments + outputs -
aliased (donated) + temporaries``, as :func:`harness.train.capacity.footprint` reads it.

Variants of one adam step on float32 parameters (``jax.jit``, carry donated), same network
(RMSNorm, QK-norm, half RoPE, ReLU² MLP, untied head with biases, heads of 128):

* ``log_softmax``: the zoo's loss before: ``log_softmax`` of the whole logits, a gather;
* ``whole``: ``gpt(loss_block=0)``: logsumexp minus the target logit on the whole logits;
* ``blocked``: ``gpt`` as built by default (``loss_block`` auto: the head fused with the loss
  over blocks of tokens, :mod:`models.lm_loss`);
* ``flax``: :class:`FlaxGPT` (flax.linen) + ``optax.softmax_cross_entropy_with_integer_labels``
  + ``optax.adam``, written for this benchmark.
"""

from __future__ import annotations

import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

import optimizers as O
from models.zoo import MODELS

EPS = 1e-6


def peak_bytes(compiled) -> int:
    """``arguments + outputs - aliased + temporaries`` of a compiled executable (bytes)."""
    m = compiled.memory_analysis()
    return int(m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
               + m.temp_size_in_bytes)


def rope(x):
    """Half-truncated rotary embedding of ``x (B, T, H, D)`` (modded-nanogpt's, written anew)."""
    D = x.shape[-1]
    freq = (1.0 / 1024) ** jnp.linspace(0.0, 1.0, D // 4)
    freq = jnp.concatenate([freq, jnp.zeros(D // 2 - D // 4)])
    angle = jnp.arange(x.shape[1], dtype=jnp.float32)[:, None] * freq
    c, s = jnp.cos(angle)[None, :, None], jnp.sin(angle)[None, :, None]
    a, b = x[..., : D // 2], x[..., D // 2:]
    return jnp.concatenate([a * c + b * s, b * c - a * s], axis=-1)


def qk_norm(x):
    """RMS normalisation over the last axis, no scale (QK-norm)."""
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS)


class FlaxBlock(nn.Module):
    heads: int

    @nn.compact
    def __call__(self, x):
        B, T, F = x.shape
        h = nn.RMSNorm(epsilon=EPS)(x)
        q, k, v = (nn.Dense(F)(h).reshape(B, T, self.heads, F // self.heads) for _ in range(3))
        a = jax.nn.dot_product_attention(rope(qk_norm(q)), rope(qk_norm(k)), v, is_causal=True)
        x = x + nn.Dense(F)(a.reshape(B, T, F))
        h = nn.RMSNorm(epsilon=EPS)(x)
        return x + nn.Dense(F)(jnp.square(nn.relu(nn.Dense(4 * F)(h))))


class FlaxGPT(nn.Module):
    vocab: int
    width: int
    depth: int
    heads: int

    @nn.compact
    def __call__(self, tokens):
        x = nn.RMSNorm(epsilon=EPS)(nn.Embed(self.vocab, self.width)(tokens))
        for _ in range(self.depth):
            x = FlaxBlock(self.heads)(x)
        return nn.Dense(self.vocab)(nn.RMSNorm(epsilon=EPS)(x))


def _log_softmax_loss(logits, targets):
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


def gpt_model(T, V, width, depth, **hp):
    """The zoo's ``gpt`` at this shape (heads of 128)."""
    return MODELS["gpt"](input_shape=(T,), num_classes=V, width=width, depth=depth,
                         num_heads=max(1, width // 128), norm_eps=EPS, **hp)


def harness_step(model, loss="fused"):
    """``(step, carry shapes)``: one adam step of ``model``'s loss (``fused``: its fused_loss;
    ``log_softmax``: the old formula on ``apply``'s logits)."""
    opt = O.adam(1e-3)

    def loss_fn(p, x, y):
        if loss == "fused":
            return model.fused_loss(p, (), x, y, train=True)[0]
        return _log_softmax_loss(model.apply(p, (), x, train=True)[0], y)

    def step(carry, x, y):
        i, opt_state = carry
        value, grads = jax.value_and_grad(loss_fn)(opt.params_fn(opt_state), x, y)
        return (i + 1, opt.update_fn(i, grads, opt_state)), value

    params = jax.eval_shape(lambda k: model.init(k, (1, model.input_shape[0]))[1], jax.random.PRNGKey(0))
    carry = jax.eval_shape(lambda p: (jnp.int32(0), opt.init_fn(p)), params)
    return jax.jit(step, donate_argnums=0), carry


def flax_step(T, V, width, depth):
    """``(step, carry shapes)`` of the flax.linen + optax reference."""
    net, tx = FlaxGPT(V, width, depth, max(1, width // 128)), optax.adam(1e-3)

    def step(carry, x, y):
        p, opt_state = carry

        def loss_fn(q):
            return optax.softmax_cross_entropy_with_integer_labels(net.apply(q, x), y).mean()

        value, grads = jax.value_and_grad(loss_fn)(p)
        updates, opt_state = tx.update(grads, opt_state, p)
        return (optax.apply_updates(p, updates), opt_state), value

    params = jax.eval_shape(lambda k: net.init(k, jnp.zeros((1, T), jnp.int32)), jax.random.PRNGKey(0))
    carry = jax.eval_shape(lambda p: (p, tx.init(p)), params)
    return jax.jit(step, donate_argnums=0), carry


def step_peaks(B, T, V, width, depth, variants=("log_softmax", "whole", "blocked", "flax")) -> dict:
    """``{variant: (peak bytes, compile seconds)}`` of one training step at batch ``B``."""
    tok = jax.ShapeDtypeStruct((B, T), jnp.int32)
    out = {}
    for name in variants:
        if name == "flax":
            step, carry = flax_step(T, V, width, depth)
        else:
            model = gpt_model(T, V, width, depth, loss_block=0 if name != "blocked" else None)
            step, carry = harness_step(model, "log_softmax" if name == "log_softmax" else "fused")
        t0 = time.perf_counter()
        compiled = step.lower(carry, tok, tok).compile()
        out[name] = (peak_bytes(compiled), time.perf_counter() - t0)
    return out


if __name__ == "__main__":
    B, T, V, W, D = (int(a) for a in sys.argv[1:6]) if len(sys.argv) > 5 else (64, 1024, 50304, 768, 12)
    for k, (b, s) in step_peaks(B, T, V, W, D).items():
        print(f"{k:>12}: {b / 2**30:8.2f} GiB  (compiled in {s:.0f} s)", flush=True)
