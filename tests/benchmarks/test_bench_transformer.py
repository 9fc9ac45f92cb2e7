"""Training step of ``transformer_lm`` against the same network in flax.linen + optax.

Run: ``pytest tests/benchmarks/test_bench_transformer.py --benchmark-only -s`` (skipped in the
normal run by ``--benchmark-skip``). Network: vocabulary 256, context 128, width 256, depth 4,
4 heads (head size 64), MLP 1024, learned positions, untied head (3.4M parameters); batch 32;
adam(1e-3); loss mean per-token cross-entropy. Both steps are ``jax.jit``-ed with their
optimizer state (params inside) donated, the way the harness trainer calls its step.

* ``harness``: ``models.zoo.transformer_lm`` + ``optimizers.adam``;
* ``flax``: ``tests/flax_reference.TransformerLM`` (flax.linen.Embed, LayerNorm,
  MultiHeadDotProductAttention with a causal mask, Dense) + ``optax.adam`` + ``apply_updates``.

``test_transformer_step_ratio`` interleaves the two round by round (order alternating), each
round timing ``K`` steps of each, and reports the median of the per-round ratios harness / flax;
target <= 1.0. The VM's speed swings within a minute, so only such paired ratios mean anything.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/flax_reference.py

import optimizers as O
from models.zoo import MODELS, sequence_cross_entropy

optax = pytest.importorskip("optax")
pytest.importorskip("flax")
from flax_reference import TransformerLM  # noqa: E402
from paired import record  # noqa: E402

VOCAB, CONTEXT, WIDTH, DEPTH, HEADS, BATCH = 256, 128, 256, 4, 4, 32
K = 3        # steps per variant per round
# interleaved rounds; the figure is the median of the per-round ratios (HARNESS_BENCH_ROUNDS: more)
ROUNDS = int(os.environ.get("HARNESS_BENCH_ROUNDS", "9"))


def _data():
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(0, VOCAB, (BATCH, CONTEXT + 1)), jnp.int32)
    return tokens[:, :-1], tokens[:, 1:]


def harness_step():
    """(step, state): ``step(state, x, y) -> (state, loss)``, jitted, the state donated."""
    model = MODELS["transformer_lm"](input_shape=(CONTEXT,), num_classes=VOCAB, width=WIDTH,
                                     depth=DEPTH, num_heads=HEADS)
    _, params, mstate = model.init(jax.random.PRNGKey(0), (-1, CONTEXT))
    opt = O.adam(1e-3)

    def step(carry, x, y):
        i, opt_state = carry

        def loss_fn(p):
            out, _ = model.apply(p, mstate, x, train=True)
            return model.loss(out, y)

        loss, grads = jax.value_and_grad(loss_fn)(opt.params_fn(opt_state))
        return (i + 1, opt.update_fn(i, grads, opt_state)), loss

    return jax.jit(step, donate_argnums=0), (jnp.int32(0), opt.init_fn(params))


def flax_step():
    """The flax.linen + optax twin of :func:`harness_step`."""
    net = TransformerLM(VOCAB, WIDTH, DEPTH, HEADS, CONTEXT)
    x, _ = _data()
    params = net.init(jax.random.PRNGKey(0), x)
    tx = optax.adam(1e-3)

    def step(carry, x, y):
        params, opt_state = carry
        loss, grads = jax.value_and_grad(lambda p: sequence_cross_entropy(net.apply(p, x), y))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    return jax.jit(step, donate_argnums=0), (params, tx.init(params))


def _time_k(step, box, x, y):
    carry = box["carry"]
    t0 = time.perf_counter()
    for _ in range(K):
        carry, loss = step(carry, x, y)
    jax.block_until_ready((carry, loss))
    box["carry"] = carry
    return (time.perf_counter() - t0) / K


def interleaved_ratio(variants, rounds=ROUNDS):
    """Median per-step seconds of each variant and the median of the per-round ratios a / b."""
    x, y = _data()
    boxes = {}
    for name, (step, carry) in variants.items():
        boxes[name] = {"carry": carry}
        _time_k(step, boxes[name], x, y)  # compile and warm up
    (a, (sa, _)), (b, (sb, _)) = variants.items()
    times = {a: [], b: []}
    ratios = []
    for r in range(rounds):
        order = [(a, sa), (b, sb)] if r % 2 == 0 else [(b, sb), (a, sa)]
        for name, step in order:
            times[name].append(_time_k(step, boxes[name], x, y))
        ratios.append(times[a][-1] / times[b][-1])
    return {k: float(np.median(v)) for k, v in times.items()}, float(np.median(ratios)), ratios, times


def _param_count(carry, slot):
    """Parameter count of a step's carry: the harness's params are slot 0 of each leaf's
    ``(x, m, v)`` adam state, flax's the first element of ``(params, opt_state)``."""
    if slot == "harness":
        return sum(int(leaf[0].size) for leaf in carry[1].packed_state)
    return sum(int(x.size) for x in jax.tree.leaves(carry[0]))


def test_transformer_step_ratio(benchmark):
    variants = {"harness": harness_step(), "flax": flax_step()}
    counts = {name: _param_count(carry, name) for name, (_, carry) in variants.items()}
    print(f"\n[transformer_lm] parameters: harness {counts['harness']:,}, flax {counts['flax']:,}")
    assert counts["harness"] == counts["flax"], counts  # the same network on both sides
    med, ratio, ratios, times = interleaved_ratio(variants)
    info = {"harness_ms": med["harness"] * 1e3, "flax_ms": med["flax"] * 1e3,
            "harness_over_flax": ratio, "ratio_min": min(ratios), "ratio_max": max(ratios),
            "params": counts["harness"]}
    benchmark.extra_info.update(info)
    shown = ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items())
    print(f"\n[transformer_lm B=32 T=128 d=256 L=4] {shown}; per-round ratios "
          + " ".join(f"{r:.3f}" for r in ratios))
    record(benchmark, times["harness"])  # seconds per harness step, the interleaved rounds
    assert ratio <= 1.0, f"harness / flax step time {ratio:.3f} > 1.0"
