"""A modern decoder-only GPT as one stax layer: the zoo's ``gpt`` (see :func:`models.zoo.gpt`).

Built from :mod:`models.stax`'s modern decoder layers (RMSNorm, rotary self-attention with QK-norm,
ReLU²/SwiGLU/GELU MLP, logit soft-cap). The architecture is that of modded-nanogpt's optimization
track (``records/track_3_optimization/train_gpt_simple.py``); its setting is ``vocab_size=50304,
width=768, depth=12, num_heads=6`` (head size 128), ``attn_scale=0.12``, ``logit_softcap=15``
(``softcap_form='algebraic'``) and torch's RMSNorm epsilon (float32 machine epsilon), where the
defaults here are small and ``1/sqrt(head size)``, no cap, 1e-6. Imports only jax and
:mod:`models.stax` (and its :mod:`models.stax_seq`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import random
from jax.nn.initializers import normal

from models import stax
from models.attention import ATTENTION_IMPLS
from models.lm_loss import head_nll_sum, head_stats, loss_block_tokens, token_nll
from models.stax_seq import matmul_2d

__all__ = ["GPT", "INITS", "check_gpt", "mlp_dim", "torch_init"]

SOFTCAP_FORMS = ("algebraic", "tanh")
#: :func:`GPT`'s initialisations: modded-nanogpt's Muon baseline's (the default), torch's defaults.
INITS = ("modded", "torch")
#: The linear layers :func:`GPT`'s ``zero_init`` starts at zero (modded-nanogpt's ``proj`` layers).
_ZERO_LAYERS = ("out", "proj", "head")
REMAT = ("none", "block")


def mlp_dim(width: int, mlp_ratio: float) -> int:
    """The MLP's hidden size: ``round(mlp_ratio · width)``.

    Args:
      width: the model width (features).
      mlp_ratio: hidden size over width.

    Returns:
      The hidden size, an int.
    """
    return round(float(mlp_ratio) * int(width))


def _check_sizes(vocab_size, width, depth, num_heads, mlp_ratio, norm_eps) -> None:
    """:func:`check_gpt`'s sizes: positive, ``depth >= 0``, an even integer head size."""
    for key, value in (("vocab_size", vocab_size), ("width", width), ("num_heads", num_heads),
                       ("mlp_ratio", mlp_ratio), ("norm_eps", norm_eps)):
        if not value > 0:
            raise ValueError(f"gpt: {key} must be positive, got {value}")
    if depth < 0:
        raise ValueError(f"gpt: depth must be >= 0, got {depth}")
    if width % num_heads:
        raise ValueError(f"gpt: width {width} must be divisible by num_heads {num_heads}")
    if (width // num_heads) % 2:
        raise ValueError(f"gpt: head dimension width / num_heads = {width // num_heads} must be even "
                         f"for rotary embeddings (they rotate pairs of features)")


def check_gpt(*, vocab_size, width, depth, num_heads, mlp, mlp_ratio, logit_softcap, softcap_form,
              rope_base, rope_fraction, attn_scale, norm_eps, init="modded", remat="none",
              loss_block=None, attn_impl="auto") -> None:
    """Check the hyperparameters of a :func:`GPT` (keyword-only, named as :func:`GPT` names them).

    Args:
      vocab_size, width, num_heads, mlp_ratio, norm_eps: must be > 0; ``width / num_heads`` (the head
        size) an even integer (rotary embeddings rotate pairs of features).
      depth: must be >= 0.
      mlp: one of :data:`models.stax.MLP_KINDS`.
      logit_softcap: must be >= 0 (0 = off).
      softcap_form: ``'algebraic'`` or ``'tanh'``.
      rope_base: must be > 1.
      rope_fraction: must be in [0, 1].
      attn_scale: must be > 0, or None (``1/sqrt(head size)``).
      init: one of :data:`INITS`.
      remat: ``'none'`` or ``'block'``.
      loss_block: an int >= 0, or None.
      attn_impl: one of :data:`models.attention.ATTENTION_IMPLS`.

    Raises:
      ValueError: the first bad value; the message names its hyperparameter.
    """
    _check_sizes(vocab_size, width, depth, num_heads, mlp_ratio, norm_eps)
    if mlp not in stax.MLP_KINDS:
        raise ValueError(f"gpt: mlp must be one of {sorted(stax.MLP_KINDS)}, got {mlp!r}")
    if logit_softcap < 0:
        raise ValueError(f"gpt: logit_softcap must be >= 0 (0 = off), got {logit_softcap}")
    if softcap_form not in SOFTCAP_FORMS:
        raise ValueError(f"gpt: softcap_form must be one of {list(SOFTCAP_FORMS)}, got {softcap_form!r}")
    if not rope_base > 1:
        raise ValueError(f"gpt: rope_base must be > 1, got {rope_base}")
    if not 0 <= rope_fraction <= 1:
        raise ValueError(f"gpt: rope_fraction must be in [0, 1], got {rope_fraction}")
    if attn_scale is not None and not attn_scale > 0:
        raise ValueError(f"gpt: attn_scale must be positive (or null: 1/sqrt(head dim)), got {attn_scale}")
    if init not in INITS:
        raise ValueError(f"gpt: init must be one of {list(INITS)}, got {init!r}")
    if attn_impl not in ATTENTION_IMPLS:
        raise ValueError(f"gpt: attn_impl must be one of {list(ATTENTION_IMPLS)}, got {attn_impl!r}")
    if remat not in REMAT:
        raise ValueError(f"gpt: remat must be one of {list(REMAT)}, got {remat!r}")
    if loss_block is not None and (isinstance(loss_block, bool) or not isinstance(loss_block, int)
                                   or loss_block < 0):
        raise ValueError(f"gpt: loss_block must be an integer >= 0 (0: whole logits) or null (auto), "
                         f"got {loss_block!r}")


def torch_init(params, rng, zero_init=True):
    """:func:`GPT`'s parameters re-drawn as torch's default initialisation draws them.

    Every linear layer's kernel ``(fan_in, fan_out)`` and bias are uniform on
    ``[-1/sqrt(fan_in), 1/sqrt(fan_in))`` (``nn.Linear.reset_parameters``: ``kaiming_uniform_`` with
    ``a=sqrt(5)``, and its bias bound); the embedding table normal(0, 1) (``nn.Embedding``); gains
    ones. With ``zero_init`` the attention's ``out``, the MLP's ``proj`` and the head start at zero,
    bias included (modded-nanogpt's AdamW baseline zeroes every parameter named ``proj``).

    Args:
      params: a :func:`GPT` parameter tree (shapes only are read).
      rng: a PRNG key.
      zero_init: zero the ``out``/``proj``/``head`` layers.

    Returns:
      A tree shaped as ``params``, float32.

    Source: torch ``nn.Linear``/``nn.Embedding`` ``reset_parameters``; modded-nanogpt
    ``records/track_3_optimization/results/a63a68d1-24aa-4a22-af9a-224e43209ea4.txt`` (result #2).
    """
    paths, treedef = jax.tree_util.tree_flatten_with_path(params)
    fan_in = {}  # a linear layer's path -> its kernel's fan-in
    for path, leaf in paths:
        if getattr(path[-1], "key", None) == "kernel":
            fan_in[path[:-1]] = leaf.shape[0]
    out = []
    for j, (path, leaf) in enumerate(paths):
        key, names = random.fold_in(rng, j), [str(getattr(p, "key", "")) for p in path]
        layer = path[:-1]
        if layer in fan_in or names[0] == "head":  # a tied head's bias: the width is its fan-in
            n_in = fan_in.get(layer, params["embed"][0].shape[1])
            if zero_init and names[-2] in _ZERO_LAYERS:
                out.append(jnp.zeros(leaf.shape, jnp.float32))
            else:
                bound = 1.0 / n_in ** 0.5
                out.append(random.uniform(key, leaf.shape, jnp.float32, -bound, bound))
        elif names[0] == "embed":
            out.append(random.normal(key, leaf.shape, jnp.float32))
        else:  # RMSNorm gains
            out.append(jnp.ones(leaf.shape, jnp.float32))
    return jax.tree_util.tree_unflatten(treedef, out)


def _block(width, num_heads, hidden, hp):
    """One pre-norm block's ``(init_fun, apply_fun)``: ``x + attn(attn_norm(x))``, then
    ``x + mlp(mlp_norm(x))``; params ``{"attn_norm", "attn", "mlp_norm", "mlp"}``."""
    layers = {
        "attn_norm": stax.RMSNorm(hp["norm_eps"]),
        "attn": stax.RotarySelfAttention(num_heads, qk_norm=hp["qk_norm"], rope_base=hp["rope_base"],
                                         rope_fraction=hp["rope_fraction"], scale=hp["attn_scale"],
                                         bias=hp["bias"], zero_out=hp["zero_init"], epsilon=hp["norm_eps"],
                                         impl=hp["attn_impl"]),
        "mlp_norm": stax.RMSNorm(hp["norm_eps"]),
        "mlp": stax.MLP(hidden, hp["mlp"], bias=hp["bias"], zero_out=hp["zero_init"]),
    }

    def init_fun(rng, input_shape):
        keys = random.split(rng, len(layers))
        params = {}
        for (name, layer), key in zip(layers.items(), keys, strict=True):
            _, params[name] = layer[0](key, input_shape)
        return input_shape, params

    def apply_fun(params, x):
        x = x + layers["attn"][1](params["attn"], layers["attn_norm"][1](params["attn_norm"], x))
        return x + layers["mlp"][1](params["mlp"], layers["mlp_norm"][1](params["mlp_norm"], x))

    return init_fun, apply_fun


def GPT(vocab_size, width, depth, num_heads, *, mlp="relu2", mlp_ratio=4.0, tied_head=False,
        zero_init=True, logit_softcap=0.0, softcap_form="algebraic", qk_norm=True, rope_base=1024.0,
        rope_fraction=0.5, attn_scale=None, bias=True, norm_eps=1e-6, init="modded", remat="none",
        loss_block=None, attn_impl="auto"):
    """Decoder-only GPT: int tokens ``(N, T)`` -> float32 next-token logits ``(N, T, vocab_size)``.

    ``x = embed_norm(embed[tokens])``; ``depth`` × (``x + attn(attn_norm(x))``,
    ``x + mlp(mlp_norm(x))``); then ``soft_cap(norm(x) @ head + b, logit_softcap, softcap_form)`` in
    float32. Values as :func:`check_gpt` checks them. Params (the paths parameter-group rules match)::

        embed:      (table (vocab_size, width),)          normal(1), as torch's nn.Embedding
        embed_norm: (gamma (width,),)
        blocks:     [ {attn_norm: (gamma,), attn: {q, k, v, out: {kernel (width, width), bias}},
                       mlp_norm: (gamma,), mlp: {fc, [gate,] proj: {kernel, bias}}} ] × depth
        norm:       (gamma (width,),)
        head:       {kernel (width, vocab_size), bias (vocab_size,)}; with tied_head only {bias}

    Args:
      vocab_size, width, depth, num_heads: vocabulary size, model width, number of blocks, and heads
        of the causal :func:`models.stax.RotarySelfAttention` (head size ``width / num_heads``).
      mlp, mlp_ratio: the :func:`models.stax.MLP` kind and ``mlp_dim(width, mlp_ratio)``, its hidden size.
      tied_head: logits ``x @ embed.T`` (no head kernel).
      zero_init: the attention's ``out``, the MLP's ``proj`` and the untied head's kernel start at zero
        (modded-nanogpt's init); other kernels are normal of variance ``0.33 / fan_in`` (an untied
        head's without ``zero_init``: std ``width**-0.5``).
      logit_softcap, softcap_form: :func:`models.stax.soft_cap` of the logits (``logit_softcap=0``: none).
      qk_norm, rope_base, rope_fraction, attn_scale: :func:`models.stax.RotarySelfAttention`'s
        ``qk_norm``, ``rope_base``, ``rope_fraction`` and ``scale`` (None: ``1/sqrt(head size)``).
      attn_impl: the attention's ``impl`` (:func:`models.attention.dot_product_attention`: ``auto``
        is cuDNN's fused attention for 16-bit compute on NVIDIA GPUs, else XLA's; ``einsum`` the
        attention written out, :func:`models.stax.attention`).
      bias: zero-initialised biases in the attention, MLP and head projections (gains are ones).
      norm_eps: epsilon of every :func:`models.stax.RMSNorm` and of the QK-norm.
      init: ``"modded"`` (as above) or ``"torch"``: torch's default initialisation, the projections
        ``zero_init`` names at zero (:func:`torch_init`), as modded-nanogpt's AdamW baseline.
      remat: ``'block'`` recomputes each block's activations in the backward pass
        (``jax.checkpoint`` per block: memory for time on long contexts); ``'none'`` keeps them.
      loss_block: tokens per block of the fused head + loss (:func:`models.lm_loss.head_nll_sum`)
        in ``apply_fun.loss_stats``; 0 whole logits; None auto (:func:`models.lm_loss.loss_block_tokens`).

    Returns:
      ``(init_fun, apply_fun)``; ``init_fun(rng, (N, T))`` gives ``((N, T, vocab_size), params)``.
      ``apply_fun.loss_stats(params, tokens, targets, *, train)`` gives float32 ``(nll_sum, hits,
      count)`` over the non-padding targets (< 0: padding) without the whole logits (``hits``: 0
      when ``train``, where the loss is differentiable).

    Source: modded-nanogpt, ``records/track_3_optimization/train_gpt_simple.py``.
    """
    hp = dict(mlp=mlp, zero_init=zero_init, qk_norm=qk_norm, rope_base=rope_base, rope_fraction=rope_fraction,
              attn_scale=attn_scale, bias=bias, norm_eps=norm_eps, attn_impl=attn_impl)
    embed = stax.Embedding(vocab_size, width, W_init=normal(1.0))
    norms = {n: stax.RMSNorm(norm_eps) for n in ("embed_norm", "norm")}
    blocks = [_block(width, num_heads, mlp_dim(width, mlp_ratio), hp) for _ in range(depth)]

    def init_fun(rng, input_shape):
        N, T = input_shape
        k_embed, k_head, k_norm0, k_norm, *k_blocks = random.split(rng, 4 + depth)
        _, table = embed[0](k_embed, input_shape)
        shape = (N, T, width)
        params = {"embed": table, "embed_norm": norms["embed_norm"][0](k_norm0, shape)[1],
                  "blocks": [blk[0](k, shape)[1] for blk, k in zip(blocks, k_blocks, strict=True)],
                  "norm": norms["norm"][0](k_norm, shape)[1],
                  "head": _head_params(k_head, width, vocab_size, tied_head, zero_init, bias)}
        if init == "torch":
            params = torch_init(params, random.fold_in(rng, depth + 4), zero_init)
        return (N, T, vocab_size), params

    def features(params, inputs):
        x = embed[1](params["embed"], inputs)
        x = norms["embed_norm"][1](params["embed_norm"], x)
        for blk, p in zip(blocks, params["blocks"], strict=True):
            x = (jax.checkpoint(blk[1]) if remat == "block" else blk[1])(p, x)
        return norms["norm"][1](params["norm"], x)

    def apply_fun(params, inputs, **kwargs):
        logits = _head(params, features(params, inputs), tied_head, bias)
        return stax.soft_cap(logits.astype(jnp.float32), logit_softcap, softcap_form)

    def loss_stats(params, inputs, targets, *, train):
        x = features(params, inputs)
        kernel = params["head"]["kernel"] if not tied_head else params["embed"][0].T
        b = params["head"]["bias"] if bias else None
        t = jnp.asarray(targets, jnp.int32)
        block = loss_block_tokens(math.prod(t.shape), vocab_size, loss_block)
        count = jnp.sum(t >= 0, dtype=jnp.float32)
        if not train:
            return head_stats(x, kernel, b, t, logit_softcap, softcap_form, block)
        if block is None:
            logits = stax.soft_cap(_head(params, x, tied_head, bias).astype(jnp.float32), logit_softcap,
                                   softcap_form)
            return jnp.sum(token_nll(logits, t)[0]), jnp.float32(0.0), count
        return head_nll_sum(x, kernel, b, t, logit_softcap, softcap_form, block), jnp.float32(0.0), count

    init_fun.stax_name = f"GPT(depth={depth}, width={width}, heads={num_heads})"
    apply_fun.loss_stats = loss_stats
    return init_fun, apply_fun


def _head_params(k_head, width, vocab_size, tied_head, zero_init, bias) -> dict:
    """:func:`GPT`'s ``head`` params: ``kernel`` (zeros with ``zero_init``, else normal of std
    ``width**-0.5``; none when tied) and ``bias`` (zeros; none without ``bias``)."""
    head = {}
    if not tied_head:
        head["kernel"] = (jnp.zeros((width, vocab_size), jnp.float32) if zero_init
                          else normal(width ** -0.5)(k_head, (width, vocab_size)))
    if bias:
        head["bias"] = jnp.zeros((vocab_size,), jnp.float32)
    return head


def _head(params, x, tied_head, bias):
    """The logits ``x @ kernel + bias`` in ``x``'s dtype (the embedding's transpose when tied)."""
    head = params["head"]
    kernel = head["kernel"] if not tied_head else params["embed"][0].T
    logits = matmul_2d(x, kernel.astype(x.dtype))
    if bias:
        logits = logits + head["bias"].astype(x.dtype)
    return logits
