"""A mesh chunk whose convolutions are large on a CPU runs as K dispatches of one step (XLA's
convolution, no loop), as the one-device chunk does, and trains as the one-executable mesh chunk.

In a subprocess with ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` (one JAX start): the
digits CNN (~0.5 MFLOP of convolutions a step) with ``CONV_LOOP_FLOPS`` above it (a ``lax.scan``
with im2col patches) and below it (``MeshLoopChunk``), ``shard: batch`` and ``shard: trials``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r'''
import collections, json
import jax, numpy as np
from harness.core.spec import TrialSpec
from harness.data.sources import load_dataset
from harness.train import loop as trainer
from harness.train import program

ds = load_dataset("digits")
out = {"devices": jax.device_count()}


def mk(**kw):
    base = dict(sweep="t", model="cnn", optimizer="adam", schedule="constant", dataset="digits", seed=0,
                steps=4, batch_size=16, eval_every=4, steps_per_dispatch=2,
                model_hparams={"width": 4, "hidden": 0}, optimizer_hparams={"step_size": 0.01}, devices=2)
    base.update(kw)
    return TrialSpec.make(**base)


for threshold in (1e12, 1.0):
    program.CONV_LOOP_FLOPS = threshold
    program.PROGRAMS.clear()
    one = trainer.run_trial(mk(), dataset=ds, measure_perf=False)
    pair = trainer.run_trials_batched([mk(seed=s, shard="trials") for s in (0, 1)], dataset=ds,
                                      measure_perf=False)
    prog = next(iter(program.PROGRAMS.values()))
    kinds = sorted({type(exe).__name__ for key, exe in prog.compiled.items() if key[2] is not None})
    out[str(threshold)] = {"batch": one.curves.train_loss, "trials": [r.curves.train_loss for r in pair],
                           "kinds": kinds}
print("JSON:" + json.dumps(out, default=float))
'''


@pytest.fixture(scope="module")
def runs():
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2".strip()
    env = {**os.environ, "XLA_FLAGS": flags, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    (line,) = [ln for ln in p.stdout.splitlines() if ln.startswith("JSON:")]
    return json.loads(line[5:])


def test_large_convolutions_on_a_mesh_run_as_one_step_dispatches(runs):
    assert runs["devices"] == 2
    assert "MeshLoopChunk" not in runs["1000000000000.0"]["kinds"]
    assert runs["1.0"]["kinds"] == ["MeshLoopChunk"]


def test_the_mesh_loop_chunk_trains_as_the_mesh_scan(runs):
    scan, loop = runs["1000000000000.0"], runs["1.0"]
    assert len(loop["batch"]) == len(scan["batch"]) == 4
    np.testing.assert_allclose(loop["batch"], scan["batch"], rtol=1e-5)
    for a, b in zip(loop["trials"], scan["trials"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    assert not np.allclose(loop["trials"][0], loop["trials"][1])  # two seeds, two curves
