"""The recipe's cost per step: grad_accum against the equivalent large batch (per-token throughput
>= 0.95x) and grad_clip against no clipping, interleaved round by round, median of paired ratios.

Run: ``python -m pytest tests/benchmarks/test_bench_recipe.py -s --benchmark-enable --benchmark-only``
(skipped in CI by ``--benchmark-skip``). Measured on the 2 shared, loaded CPU cores (width 128, depth
2, batch 64, 15 rounds of 5 steps): grad_accum 4 0.67x the large batch's step time [IQR 0.64-0.70]
(per-token throughput 1.48x: the micro-batches' activations fit the caches), grad_clip 1.0 1.01x
[IQR 0.96-1.07]."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import make_spec
from paired import interleave, paired, record, table

from harness.data.sources import load_dataset
from harness.train.program import program_for

BATCH, ROUNDS, STEPS = 64, 15, 5
MODEL = {"width": 128, "depth": 2, "num_heads": 4}


def _stepper(recipe):
    spec = make_spec(model="transformer_lm", dataset="markov_lm", optimizer="adamw", batch_size=BATCH,
                     model_hparams=MODEL, optimizer_hparams={"step_size": 1e-3}, recipe=recipe)
    ds = load_dataset("markov_lm")
    prog = program_for(spec, ds)
    state, _ = prog.init_seeded(0, 1e-3)
    xb, yb = jax.device_put(ds.x_train[:BATCH]), jax.device_put(ds.y_train[:BATCH])
    exe = jax.jit(prog.one_step, donate_argnums=(0,))
    box = [state]

    def run():
        for i in range(STEPS):
            box[0], loss = exe(box[0], xb, yb, np.int32(i))
        jax.block_until_ready(loss)

    return run


def test_accumulation_and_clipping_cost(benchmark):
    fns = {"large batch": _stepper({}), "grad_accum 4": _stepper({"grad_accum": 4}),
           "grad_clip 1.0": _stepper({"grad_clip": 1.0})}
    times = interleave(fns, ROUNDS, warmup=2)
    text, rows = table(times, baseline="large batch", steps_per_round=STEPS,
                       title=f"transformer_lm {MODEL} on markov_lm, batch {BATCH}, adamw")
    print("\n" + text)
    record(benchmark, times["grad_accum 4"], per=STEPS)
    benchmark.extra_info.update(rows)
    # the same tokens per update: per-token throughput = large batch time / accumulated time
    throughput = 1 / paired(times["grad_accum 4"], times["large batch"]).median
    print(f"grad_accum 4: per-token throughput {throughput:.2f}x the large batch's")
    assert throughput >= 0.95
