"""flax.linen twins of the zoo's Transformer pieces, and the maps from their params to stax params.

Used by the parity tests (``tests/test_stax_seq.py``, ``tests/test_zoo_transformers.py``) and by the
benchmark ``tests/benchmarks/test_bench_transformer.py`` (the same network in flax.linen + optax).
Importing this module needs flax (the ``dev`` extra).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp


def mha_to_stax(p):
    """flax ``MultiHeadDotProductAttention`` params -> ``(W_qkv, b_qkv, W_out, b_out)`` of
    :func:`models.stax.MultiHeadSelfAttention`: the q, k, v kernels ``(F, H, D)`` flattened
    head-major to ``(F, H·D)`` and concatenated, their ``(H, D)`` biases likewise; the output
    kernel ``(H, D, F)`` flattened to ``(H·D, F)``."""
    names = ("query", "key", "value")
    F = p["query"]["kernel"].shape[0]
    W_qkv = jnp.concatenate([p[n]["kernel"].reshape(F, -1) for n in names], axis=1)
    b_qkv = jnp.concatenate([p[n]["bias"].reshape(-1) for n in names])
    W_out = p["out"]["kernel"].reshape(-1, p["out"]["kernel"].shape[-1])
    return W_qkv, b_qkv, W_out, p["out"]["bias"]


def ln_to_stax(p):
    """flax ``LayerNorm`` params -> ``(beta, gamma)`` of :func:`models.stax.LayerNorm`."""
    return p["bias"], p["scale"]


def dense_to_stax(p):
    return p["kernel"], p["bias"]


class Block(nn.Module):
    """Pre-LN Transformer block, as ``models.zoo._encoder_block`` (no dropout)."""

    width: int
    num_heads: int
    mlp_dim: int
    causal: bool
    epsilon: float = 1e-6

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm(epsilon=self.epsilon, name="ln1")(x)
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2])) if self.causal else None
        h = nn.MultiHeadDotProductAttention(num_heads=self.num_heads, name="attn")(h, mask=mask)
        x = x + h
        h = nn.LayerNorm(epsilon=self.epsilon, name="ln2")(x)
        h = nn.Dense(self.mlp_dim, name="fc1")(h)
        h = nn.gelu(h)
        h = nn.Dense(self.width, name="fc2")(h)
        return x + h


class TransformerLM(nn.Module):
    """flax.linen twin of ``models.zoo.transformer_lm`` (learned positions, untied head)."""

    vocab_size: int
    width: int
    depth: int
    num_heads: int
    context: int
    mlp_ratio: int = 4

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(self.vocab_size, self.width, name="embed")(tokens)
        pos = self.param("pos", nn.initializers.normal(0.02), (self.context, self.width))
        x = x + pos[: tokens.shape[1]]
        for i in range(self.depth):
            x = Block(self.width, self.num_heads, self.mlp_ratio * self.width, True, name=f"block{i}")(x)
        x = nn.LayerNorm(epsilon=1e-6, name="ln_f")(x)
        return nn.Dense(self.vocab_size, name="head")(x)


def lm_to_stax(params, depth):
    """``TransformerLM`` params -> the params list of ``models.zoo.transformer_lm`` (dropout 0)."""
    p = params.get("params", params)
    out = [(p["embed"]["embedding"],), (p["pos"],)]
    for i in range(depth):
        b = p[f"block{i}"]
        out.append([ln_to_stax(b["ln1"]), mha_to_stax(b["attn"])])
        out.append([ln_to_stax(b["ln2"]), dense_to_stax(b["fc1"]), (), dense_to_stax(b["fc2"])])
    out += [ln_to_stax(p["ln_f"]), dense_to_stax(p["head"])]
    return out


class ResBlock(nn.Module):
    """flax.linen twin of ``models.zoo._res_block``: conv-BN-relu-conv-BN, shortcut (1x1 conv-BN when
    ``project``), sum, relu. BatchNorm as the zoo's (batch statistics, momentum 0.9, eps 1e-5)."""

    out_chan: int
    stride: int
    project: bool

    @nn.compact
    def __call__(self, x, train: bool = True):
        bn = lambda: nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5)  # noqa: E731
        s = (self.stride, self.stride)
        h = nn.relu(bn()(nn.Conv(self.out_chan, (3, 3), s, padding="SAME")(x)))
        h = bn()(nn.Conv(self.out_chan, (3, 3), padding="SAME")(h))
        if self.project:
            x = bn()(nn.Conv(self.out_chan, (1, 1), s, padding="SAME")(x))
        return nn.relu(h + x)


class ResNet18(nn.Module):
    """flax.linen twin of ``models.zoo.resnet18`` (CIFAR stem, 4 stages of 2 blocks, global average
    pool, dense head)."""

    num_classes: int
    width: int = 64

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = nn.Conv(self.width, (3, 3), padding="SAME")(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5)(x))
        chans = self.width
        for s in range(4):
            out = self.width * 2**s
            for b in range(2):
                stride = 2 if (s > 0 and b == 0) else 1
                x = ResBlock(out, stride, stride != 1 or out != chans)(x, train)
                chans = out
        return nn.Dense(self.num_classes)(jnp.mean(x, axis=(1, 2)))
