"""Training step of the zoo's ``gpt`` against the same network in flax.linen + optax.

Run: ``pytest tests/benchmarks/test_bench_gpt.py --benchmark-only -s`` (skipped in the normal run
by ``--benchmark-skip``). Network: vocabulary 512, context 128, width 256, depth 4, 4 heads (head
size 64), RMSNorm, QK-norm, half-truncated RoPE, ReLU² MLP 1024, untied head with biases; batch
8; adam(1e-3); mean per-token cross-entropy. Both steps are ``jax.jit``-ed with their state
donated, as the harness trainer calls its step.

* ``harness``: ``models.zoo.gpt`` (its ``fused_loss``, as the trainer) + ``optimizers.adam``;
* ``flax``: :class:`FlaxGPT` below (flax.linen.Embed, RMSNorm, Dense; rotary embeddings and
  QK-norm written out; ``flax.linen.dot_product_attention`` with a causal mask) + ``optax.adam``
  and ``optax.softmax_cross_entropy_with_integer_labels``.

The two compute the same loss from the same weights (checked first, 1e-5). Then they take turns
round by round (:func:`paired.interleave`), each round timed in wall seconds and in CPU seconds
(``time.process_time``). The figure asserted is the median of the per-round **CPU-time** ratios
harness / flax, target <= 1.0: CPU time is what the harness's clock ranks by
(``harness.train.cpu_clock``) and the steadier figure on a shared machine (a core lost to another
process is wall time, not CPU time); the wall-time ratio is printed beside it. XLA's CPU pool has
one thread here (``import harness``, :mod:`harness.core.xla_threads`), so the two differ by
waiting, not by idle workers spinning. MFU = analytic training FLOPs per step
(:func:`models.flops.lm_train_flops_per_token` × tokens, MaxText's count) ÷ (median step time ×
the float32 peak: a 2048² matmul timed as a third variant of the same interleaved rounds, so the
peak is the machine's at the same moments, not a figure cached under another load).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # paired.py

import optimizers as O
from models.zoo import MODELS, sequence_cross_entropy

optax = pytest.importorskip("optax")
nn = pytest.importorskip("flax.linen")
from lm_memory import qk_norm, rope  # noqa: E402
from paired import interleave, paired, record  # noqa: E402

VOCAB, CONTEXT, WIDTH, DEPTH, HEADS, BATCH = 512, 128, 256, 4, 4, 8
K = 3  # steps per variant per round
ROUNDS = int(os.environ.get("HARNESS_BENCH_ROUNDS", "11"))
EPS = 1e-6


class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        B, T, F = x.shape
        h = nn.RMSNorm(epsilon=EPS, name="attn_norm")(x)
        q, k, v = (nn.Dense(F, name=n)(h).reshape(B, T, HEADS, F // HEADS) for n in "qkv")
        q, k = rope(qk_norm(q)), rope(qk_norm(k))
        a = nn.dot_product_attention(q, k, v, mask=nn.make_causal_mask(jnp.ones((B, T))))
        x = x + nn.Dense(F, name="out")(a.reshape(B, T, F))
        h = nn.RMSNorm(epsilon=EPS, name="mlp_norm")(x)
        return x + nn.Dense(F, name="proj")(jnp.square(nn.relu(nn.Dense(4 * F, name="fc")(h))))


class FlaxGPT(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        x = nn.RMSNorm(epsilon=EPS, name="embed_norm")(nn.Embed(VOCAB, WIDTH, name="embed")(tokens))
        for i in range(DEPTH):
            x = Block(name=f"block{i}")(x)
        return nn.Dense(VOCAB, name="head")(nn.RMSNorm(epsilon=EPS, name="norm")(x))


def to_flax(p):
    """The harness ``gpt``'s params as :class:`FlaxGPT`'s."""
    lin = lambda q: {"kernel": q["kernel"], "bias": q["bias"]}  # noqa: E731
    out = {"embed": {"embedding": p["embed"][0]}, "embed_norm": {"scale": p["embed_norm"][0]},
           "norm": {"scale": p["norm"][0]}, "head": lin(p["head"])}
    for i, b in enumerate(p["blocks"]):
        out[f"block{i}"] = {"attn_norm": {"scale": b["attn_norm"][0]},
                            "mlp_norm": {"scale": b["mlp_norm"][0]},
                            **{n: lin(b["attn"][n]) for n in ("q", "k", "v", "out")},
                            "fc": lin(b["mlp"]["fc"]), "proj": lin(b["mlp"]["proj"])}
    return {"params": out}


def _data():
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, VOCAB, (BATCH, CONTEXT + 1)), jnp.int32)
    return tokens[:, :-1], tokens[:, 1:]


def _model():
    return MODELS["gpt"](input_shape=(CONTEXT,), num_classes=VOCAB, width=WIDTH, depth=DEPTH,
                         num_heads=HEADS, zero_init=False, norm_eps=EPS)


def harness_step(model, params):
    _, _, mstate = model.init(jax.random.PRNGKey(0), (-1, CONTEXT))
    opt = O.adam(1e-3)

    def step(carry, x, y):
        i, opt_state = carry

        def loss_fn(p):  # what the trainer differentiates: the model's fused_loss
            return model.fused_loss(p, mstate, x, y, train=True)[0]

        loss, grads = jax.value_and_grad(loss_fn)(opt.params_fn(opt_state))
        return (i + 1, opt.update_fn(i, grads, opt_state)), loss

    return jax.jit(step, donate_argnums=0), (jnp.int32(0), opt.init_fn(params))


def flax_step(params):
    net, tx = FlaxGPT(), optax.adam(1e-3)

    def step(carry, x, y):
        p, opt_state = carry
        loss, grads = jax.value_and_grad(
            lambda q: optax.softmax_cross_entropy_with_integer_labels(net.apply(q, x), y).mean())(p)
        updates, opt_state = tx.update(grads, opt_state, p)
        return (optax.apply_updates(p, updates), opt_state), loss

    return jax.jit(step, donate_argnums=0), (params, tx.init(params))


def _runner(step, carry, x, y):
    box = {"carry": carry}

    def run():
        c = box["carry"]
        for _ in range(K):
            c, loss = step(c, x, y)
        jax.block_until_ready((c, loss))
        box["carry"], box["loss"] = c, loss

    return run, box


def _peak_runner(n=2048):
    a = jnp.asarray(np.random.default_rng(0).normal(size=(n, n)), jnp.float32)
    mm = jax.jit(lambda x: x @ x)
    mm(a).block_until_ready()

    def run():
        for _ in range(K):
            out = mm(a)
        out.block_until_ready()

    return run, 2.0 * n**3


def test_gpt_step_ratio(benchmark):
    model = _model()
    _, params, _ = model.init(jax.random.PRNGKey(0), (-1, CONTEXT))
    x, y = _data()
    fparams = to_flax(params)
    ours = model.loss(jax.jit(lambda p: model.apply(p, (), x, train=False)[0])(params), y)
    theirs = sequence_cross_entropy(jax.jit(FlaxGPT().apply)(fparams, x), y)
    np.testing.assert_allclose(float(ours), float(theirs), rtol=1e-5)  # the same network
    fns, boxes = {}, {}
    fns["harness"], boxes["harness"] = _runner(*harness_step(model, params), x, y)
    fns["flax"], boxes["flax"] = _runner(*flax_step(jax.tree.map(jnp.copy, fparams)), x, y)
    fns["peak"], peak_flop = _peak_runner()
    cpu: dict[str, list[float]] = {}
    times = interleave(fns, ROUNDS, cpu=cpu)
    ratio, wall_ratio = paired(cpu["harness"], cpu["flax"]), paired(times["harness"], times["flax"])
    flops = 3 * model.flops_per_example() * BATCH  # MaxText's analytic count per training step
    ms = {k: float(np.median(v)) / K * 1e3 for k, v in times.items()}
    peak = peak_flop / (ms.pop("peak") / 1e3)
    mfu = {k: flops / (v / 1e3) / peak for k, v in ms.items()}
    cpu_ms = {k: float(np.median(cpu[k])) / K * 1e3 for k in ("harness", "flax")}
    info = {"harness_ms": ms["harness"], "flax_ms": ms["flax"], "harness_cpu_ms": cpu_ms["harness"],
            "flax_cpu_ms": cpu_ms["flax"], "harness_over_flax": ratio.median, "ratio_q1": ratio.q1,
            "ratio_q3": ratio.q3, "ratio_min": ratio.lo, "ratio_max": ratio.hi,
            "wall_harness_over_flax": wall_ratio.median, "mfu_harness": mfu["harness"],
            "mfu_flax": mfu["flax"], "peak_gflops": peak / 1e9, "train_gflop_per_step": flops / 1e9}
    benchmark.extra_info.update(info)
    print(f"\n[gpt B={BATCH} T={CONTEXT} d={WIDTH} L={DEPTH} H={HEADS} V={VOCAB}] "
          + ", ".join(f"{k}={v:.3f}" for k, v in info.items())
          + f"\n  harness / flax, CPU time: {ratio}\n  harness / flax, wall time: {wall_ratio}")
    record(benchmark, times["harness"], per=K)
    assert ms["harness"] >= 50.0 or ms["flax"] >= 50.0, ms  # a size where a step takes >= 50 ms
    assert ratio.median <= 1.0, f"harness / flax step CPU time {ratio.median:.3f} > 1.0"
