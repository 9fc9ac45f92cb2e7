"""Overhead of mid-trial checkpoints at the default cadence (``harness.train.checkpoint.DEFAULT_EVERY``).

Run: ``pytest tests/benchmarks/test_bench_checkpoint.py --benchmark-only -s``.

Two cases at batch 128 (adam, constant step size): the MNIST-1D CNN (``cnn1d`` on ``mnist1d``) and
the largest model of the zoo by parameter count among those that train on 32×32×3 images or flat
vectors here (chosen when the test runs, from :data:`CANDIDATES`, so a bigger model added to the
zoo is picked up). Each case trains one trial whose length is ``HARNESS_BENCH_CKPT_TRIAL_S``
(default 2 × the default cadence, sized from a calibration run: this VM's speed swings several-fold
within minutes, and a checkpointed run must write at least one mid-trial checkpoint, its final state,
and remove them: what a trial of that length pays) with checkpoints on (default cadence,
a fresh directory each time, the clean-up included) and off, interleaved round by round
(``HARNESS_BENCH_CKPT_ROUNDS``, default 3; the order alternates), compile time excluded (the trainer
reports it). The overhead is the median over rounds of the paired ratio ``t_on / t_off`` minus 1;
``save_fraction`` (seconds spent inside checkpoint saves over the run's training time) is the same
cost counted directly, free of the VM's speed swings. Both must be at most 2%.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import tempfile
import time

import jax
import pytest
from paired import record

from harness.core.spec import TrialSpec
from harness.data.sources import load_dataset
from harness.train import checkpoint
from harness.train import loop as trainer

BATCH = 128
IMAGES = ("synthetic", {"input_shape": [32, 32, 3], "num_examples": 2048, "num_test": 256})
VECTORS = ("synthetic", {"input_shape": [784], "num_examples": 2048, "num_test": 256})
#: zoo model -> the dataset it trains on in this benchmark
CANDIDATES = {"resnet18": IMAGES, "vit": IMAGES, "resnet": IMAGES, "cnn": IMAGES, "mlp": VECTORS,
              "cnn1d": ("mnist1d", {}), "logreg": VECTORS}
MAX_OVERHEAD = 0.02


def _n_params(name: str, ds) -> int:
    from models.zoo import MODELS

    model = MODELS[name](input_shape=ds.input_shape, num_classes=ds.num_classes)
    _, params, _ = jax.eval_shape(lambda k: model.init(k, (1, *ds.input_shape)), jax.random.PRNGKey(0))
    return sum(math.prod(p.shape) for p in jax.tree.leaves(params))


def _largest() -> tuple[str, str, dict, int]:
    from models.zoo import MODELS

    best = None
    for name, (ds_name, hp) in CANDIDATES.items():
        if name not in MODELS:
            continue
        n = _n_params(name, load_dataset(ds_name, **hp))
        if best is None or n > best[3]:
            best = (name, ds_name, hp, n)
    assert best is not None
    return best


def _spec(model: str, ds_name: str, ds_hp: dict, steps: int, K: int) -> TrialSpec:
    return TrialSpec.make(sweep="bench-ckpt", model=model, optimizer="adam", schedule="constant",
                          dataset=ds_name, dataset_hparams=ds_hp, seed=0, steps=steps, batch_size=BATCH,
                          eval_every=steps, steps_per_dispatch=K, optimizer_hparams={"step_size": 1e-3})


def _case(name: str) -> tuple[str, str, dict]:
    if name == "cnn1d":
        return "cnn1d", "mnist1d", {}
    m, ds_name, hp, _ = _largest()
    return m, ds_name, hp


@pytest.mark.parametrize("case", ["cnn1d", "largest"])
def test_checkpoint_overhead_at_the_default_cadence(benchmark, case):
    model, ds_name, ds_hp = _case(case)
    ds = load_dataset(ds_name, **ds_hp)
    cadence = checkpoint.parse_every(None)
    trial_s = float(os.environ.get("HARNESS_BENCH_CKPT_TRIAL_S", 2.0 * cadence.seconds))
    rounds = int(os.environ.get("HARNESS_BENCH_CKPT_ROUNDS", 3))

    # calibrate the step time (a short trial; its compile excluded) and size the trial to trial_s
    K = 10
    cal = trainer.run_trial(_spec(model, ds_name, ds_hp, 4 * K, K), dataset=ds, measure_perf=False)
    cal = trainer.run_trial(_spec(model, ds_name, ds_hp, 4 * K, K), dataset=ds, measure_perf=False)
    step_s = cal.train_seconds / (4 * K)
    K = max(1, min(50, round(2.0 / step_s)))  # chunks of about 2 s (at most 50 steps)
    steps = K * max(2, round(trial_s / step_s / K))
    spec = _spec(model, ds_name, ds_hp, steps, K)

    def run(on: bool) -> tuple[float, dict]:
        d = tempfile.mkdtemp(prefix="bench-ckpt-")
        # adaptive=True: the default cadence as a sweep uses it (worker.unit_checkpoints)
        ck = (checkpoint.UnitCheckpoints(f"{d}/u", [spec.trial_id], None, cadence, adaptive=True)
              if on else None)
        t0 = time.perf_counter()
        res = trainer.run_trial(spec, dataset=ds, measure_perf=False, checkpoints=ck)
        if ck is not None:
            ck.cleanup()
        t = time.perf_counter() - t0 - res.compile_seconds
        shutil.rmtree(d, ignore_errors=True)
        return t, res.extra.get("checkpoint", {}) | {"train_s": res.train_seconds}

    ratios, on_t, off_t, saves, save_s = [], [], [], [], []
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        got = {on: run(on) for on in order}
        (t_off, _), (t_on, info) = got[False], got[True]
        ratios.append(t_on / t_off)
        on_t.append(t_on)
        off_t.append(t_off)
        saves.append(info["saves"])
        save_s.append(info["save_s"])
    overhead = statistics.median(ratios) - 1.0
    save_fraction = statistics.median(s / t for s, t in zip(save_s, on_t, strict=True))
    info = {"model": model, "dataset": ds_name, "params": _n_params(model, ds), "batch": BATCH,
            "steps": steps, "steps_per_dispatch": K, "step_ms": step_s * 1e3, "cadence": str(cadence),
            "rounds": rounds, "t_off_s": off_t, "t_on_s": on_t, "paired_ratios": ratios,
            "overhead_median_paired": overhead, "saves_per_run": saves, "save_s": save_s,
            "save_fraction": save_fraction, "device": jax.devices()[0].device_kind}
    benchmark.extra_info.update(info)
    print(f"\n[checkpoint overhead, {case}] {info}")
    record(benchmark, on_t)  # seconds of the trial with checkpoints on, compile excluded
    assert all(n >= 1 for n in saves), "no checkpoint was written: the trial is shorter than the cadence"
    assert save_fraction <= MAX_OVERHEAD
    assert overhead <= MAX_OVERHEAD
