"""Data-parallel trials on a streamed split (``parallelism: {devices: 2}``, ``stream: true``): each
of 2 forced CPU devices reads its own half of every global batch, and the curves equal one device's
to float32 rounding (one trial, and a vmapped pair of seeds). One subprocess: JAX fixes its device
count when it starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.data.shards import write_shard

ROOT = Path(__file__).resolve().parents[1]

CHECKS = r'''
import json, sys
import jax
from harness.core.spec import TrialSpec
from harness.data.tokens import load_tokens
from harness.train import loop as trainer

corpus = sys.argv[1]
hp = {"seq_len": 8, "vocab_size": 256, "stream": True, "valid_tokens": 512}
ds = load_tokens(corpus, **hp)
parts = []
real = ds.stream.batches
def batches(seed, start, n, batch, part=slice(None)):
    x, y = real(seed, start, n, batch, part)
    parts.append([part.start, part.stop, x.shape[1]])
    return x, y
ds.stream.batches = batches

def mk(seed=0, devices=1):
    return TrialSpec.make(sweep="sp", model="transformer_lm", optimizer="adam", schedule="constant",
                          dataset="tokens:" + corpus, seed=seed, steps=6, batch_size=4, eval_every=3,
                          steps_per_dispatch=3, model_hparams={"width": 8, "depth": 1, "num_heads": 2},
                          optimizer_hparams={"step_size": 1e-2}, dataset_hparams=hp, devices=devices)

def curves(r):
    return {"train": r.curves.train_loss, "valid": r.curves.eval_loss, "test": r.test_loss,
            "mesh": r.extra.get("mesh")}

out = {"devices": jax.device_count()}
out["one"] = curves(trainer.run_trial(mk(), dataset=ds, measure_perf=False))
del parts[:]
out["two"] = curves(trainer.run_trial(mk(devices=2), dataset=ds, measure_perf=False))
out["two_parts"] = sorted({tuple(p) for p in parts})
pair = trainer.run_trials_batched([mk(0, 2), mk(1, 2)], dataset=ds, measure_perf=False)
out["pair"] = [curves(r) for r in pair]
print("JSON:" + json.dumps(out))
'''


@pytest.fixture(scope="module")
def forced2(tmp_path_factory):
    d = tmp_path_factory.mktemp("stream_par")
    text = np.frombuffer((ROOT / "docs" / "architecture.md").read_bytes()[:16_000], np.uint8)
    write_shard(d / "doc_train_000.bin", text[:6_001])
    write_shard(d / "doc_train_001.bin", text[6_001:12_000])
    write_shard(d / "doc_val_000.bin", text[12_000:])
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2".strip()
    env = {**os.environ, "XLA_FLAGS": flags, "PYTHONPATH": str(ROOT)}
    env.pop("HARNESS_DEVICE_IDS", None)
    p = subprocess.run([sys.executable, "-c", CHECKS, str(d)], cwd=d, env=env, capture_output=True,
                       text=True, timeout=600)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("JSON:")), None)
    assert p.returncode == 0 and line, f"rc={p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
    return json.loads(line[5:])


def _close(a: dict, b: dict) -> None:
    for k in ("train", "valid"):
        assert len(a[k]) == len(b[k]) > 0
        assert np.allclose(a[k], b[k], rtol=1e-5, atol=1e-5), (k, a[k], b[k])
    assert a["test"] == pytest.approx(b["test"], rel=1e-5, abs=1e-5)


def test_each_device_reads_its_own_half_of_every_batch(forced2):
    assert forced2["devices"] == 2
    assert forced2["two_parts"] == [[0, 2, 2], [2, 4, 2]]  # never the whole batch of 4
    assert forced2["two"]["mesh"] == "batch=2"


def test_data_parallel_streamed_curves_equal_one_device(forced2):
    _close(forced2["two"], forced2["one"])
    assert forced2["one"]["valid"][-1] < forced2["one"]["valid"][0]  # it trained


def test_data_parallel_streamed_vmapped_pair_equals_each_alone(forced2):
    _close(forced2["pair"][0], forced2["one"])
    assert forced2["pair"][0]["train"] != forced2["pair"][1]["train"]  # two seeds, two orders
