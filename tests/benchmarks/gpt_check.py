"""The ``gpt`` part of tests/benchmarks/gpu_check.py: one training step at the track's shape.

The zoo's ``gpt`` at modded-nanogpt's optimization-track setting (vocabulary 50,304, width 768,
depth 12, 6 heads of 128, soft-cap 15, attention scale 0.12), one micro-batch of 64 × 1,024 tokens
with bfloat16 compute (float32 parameters and adam state, the harness's mixed precision), the loss
through its ``fused_loss`` (logits in blocks), attention ``auto`` (cuDNN on NVIDIA GPUs). When the
batch does not fit (``RESOURCE_EXHAUSTED``) it halves, down to 1. Reported: step time (median of
timed steps after a warm-up, each ended with ``block_until_ready``), MFU = MaxText's analytic
training FLOPs (:func:`models.flops.lm_train_flops_per_token` × tokens) ÷ step time ÷ the device's
stated dense bfloat16 peak (:data:`STATED_PEAK_TFLOPS`; none on a CPU), and peak device memory (the
larger of the allocator's ``peak_bytes_in_use``, where the device reports it, and XLA's compiled
``memory_analysis()`` of the step: arguments + outputs − aliased + temporaries).
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp

import optimizers as O
from models.flops import lm_train_flops_per_token
from models.zoo import MODELS

#: Dense bfloat16 peak TFLOP/s as the vendors state them (no sparsity), by device kind substring.
STATED_PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L4": 121.0, "A10G": 70.0,
                      "TPU v5 lite": 197.0, "TPU v4": 275.0}

SHAPES = {"full": dict(batch=64, context=1024, vocab=50304, width=768, depth=12, heads=6),
          "small": dict(batch=2, context=64, vocab=512, width=64, depth=2, heads=1)}


def stated_peak(kind: str) -> float | None:
    """The stated dense bfloat16 peak (FLOP/s) of a device kind, or None when not listed."""
    for key, tflops in STATED_PEAK_TFLOPS.items():
        if key.lower() in kind.lower():
            return tflops * 1e12
    return None


def _step(model, dtype):
    opt = O.adam(1e-3)
    cd = jnp.dtype(dtype)

    def loss_fn(p, x, y):
        p = jax.tree.map(lambda a: a.astype(cd) if jnp.issubdtype(a.dtype, jnp.floating) else a, p)
        return model.fused_loss(p, (), x, y, train=True)[0]

    def step(carry, x, y):
        i, opt_state = carry
        loss, grads = jax.value_and_grad(loss_fn)(opt.params_fn(opt_state), x, y)
        return (i + 1, opt.update_fn(i, grads, opt_state)), loss

    return jax.jit(step, donate_argnums=0), opt


def _peak_memory(dev, compiled) -> tuple[float, str, float]:
    """``(peak bytes, where from, compiled peak bytes)``: the larger of the allocator's
    ``peak_bytes_in_use`` (the process's peak so far, where the device reports it) and the compiled
    program's arguments + outputs - aliased + temporaries (on a TPU v5e the allocator reported
    2.47 GiB for a step whose compiled peak was 15.12 GiB, and the batch above it did not fit)."""
    m = compiled.memory_analysis()
    own = float(m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
                + m.temp_size_in_bytes)
    stats = dev.memory_stats() if hasattr(dev, "memory_stats") else None
    if stats and stats.get("peak_bytes_in_use", 0) > own:
        return float(stats["peak_bytes_in_use"]), "allocator, process peak", own
    return own, "compiled", own


def gpt_row(size: str = "full", dtype: str = "bfloat16", steps: int = 10, remat: str = "none",
            batch: int | None = None) -> dict:
    """One timed ``gpt`` training step at ``SHAPES[size]`` (its batch, or ``batch``, halved until it
    fits), with the model's ``remat`` (``'block'``: activations recomputed per block in the backward
    pass).

    Returns:
      ``{"batch", "context", "step_ms", "tokens_per_s", "tflop_per_s", "mfu_pct" (nan without a
      stated peak), "peak_memory_gib", "memory_source", ...}``.
    """
    s = SHAPES[size]
    model = MODELS["gpt"](input_shape=(s["context"],), num_classes=s["vocab"], width=s["width"],
                          depth=s["depth"], num_heads=s["heads"], logit_softcap=15.0, attn_scale=0.12,
                          zero_init=False, remat=remat)
    dev = jax.devices()[0]
    batch = batch or s["batch"]
    while True:
        try:
            return {**_timed(model, s, batch, dtype, steps, dev), "remat": remat}
        except Exception as err:  # XlaRuntimeError: out of memory at this batch
            if "RESOURCE_EXHAUSTED" not in str(err) or batch == 1:
                raise
            batch //= 2


def _timed(model, s, batch, dtype, steps, dev) -> dict:
    T = s["context"]
    step, opt = _step(model, dtype)
    _, params, _ = model.init(jax.random.PRNGKey(0), (1, T))
    carry = (jnp.int32(0), opt.init_fn(params))
    tok = jax.random.randint(jax.random.PRNGKey(1), (batch, T + 1), 0, s["vocab"])
    x, y = tok[:, :-1], tok[:, 1:]
    t0 = time.perf_counter()
    compiled = step.lower(carry, x, y).compile()
    compile_s = time.perf_counter() - t0
    carry, loss = compiled(carry, x, y)  # warm-up
    jax.block_until_ready(loss)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        carry, loss = compiled(carry, x, y)
        jax.block_until_ready(loss)
        times.append(time.perf_counter() - t0)
    sec = statistics.median(times)
    flops = batch * T * lm_train_flops_per_token(width=s["width"], depth=s["depth"], context=T,
                                                 vocab_size=s["vocab"], mlp_dim=4 * s["width"])
    peak = stated_peak(dev.device_kind)
    mem, source, own = _peak_memory(dev, compiled)
    return {"workload": "gpt", "dtype": dtype, "batch": batch, "context": T, "step_ms": 1e3 * sec,
            "tokens_per_s": batch * T / sec, "tflop_per_s": flops / sec / 1e12,
            "mfu_pct": 100 * flops / sec / peak if peak else float("nan"),
            "stated_peak_tflop_per_s": peak / 1e12 if peak else float("nan"),
            "peak_memory_gib": mem / 2**30, "memory_source": source, "compiled_peak_gib": own / 2**30,
            "compile_s": compile_s,
            "loss": float(loss), "device_kind": dev.device_kind}


def format_row(r: dict) -> str:
    """The row as one line."""
    return (f"gpt {r['batch']}x{r['context']} {r['dtype']} remat {r['remat']}: step {r['step_ms']:.1f} ms, "
            f"{r['tokens_per_s']:.0f} tokens/s, {r['tflop_per_s']:.2f} TFLOP/s, MFU {r['mfu_pct']:.1f}% of "
            f"{r['stated_peak_tflop_per_s']:.0f} TFLOP/s stated ({r['device_kind']}), peak memory "
            f"{r['peak_memory_gib']:.2f} GiB ({r['memory_source']}; the step compiled: "
            f"{r['compiled_peak_gib']:.2f} GiB), compiled in {r['compile_s']:.1f} s")
