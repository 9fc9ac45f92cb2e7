"""Grain against the streamed reader the harness ships (``os.pread`` windows, one prefetching
thread): steps per second of the same trial and peak RSS of its process.

Run: ``pytest tests/benchmarks/test_bench_grain.py --benchmark-only -s`` (``grain`` 0.2.18 is in
the ``bench`` extra; skipped without it).

Both variants train one ``transformer_lm`` trial (the trainer, model and compiled updates
unchanged) on the same streamed llm.c shards (``HARNESS_BENCH_GRAIN_MB``, default 200 MB of tokens)
in a fresh subprocess each, ``HARNESS_BENCH_GRAIN_ROUNDS`` (default 4) rounds, the order rotated
each round. The Grain variant replaces only the stream's ``batches``: a
``grain.MapDataset.source`` over the same window ids (``TokenStream.order``, the pure function of
seed and step), ``.map`` reading each window, ``.batch(B)``, ``to_iter_dataset`` with
``ReadOptions(num_threads=4, prefetch_buffer_size=32)``. The windows are checked equal to the
harness's. Reported: the median paired ratio of training seconds (Grain / pread: above 1, Grain
slower), each variant's median ``data_wait_s`` (the loop waiting on data) and peak RSS (``ru_maxrss``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from paired import record
from test_bench_tokens import _corpus

ROOT = Path(__file__).resolve().parents[2]

_TRIAL = r'''
import json, resource, sys
import numpy as np
from harness.core.spec import TrialSpec
from harness.data.tokens import load_tokens
from harness.train import loop as trainer

variant, corpus, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
hp = {"seq_len": 128, "valid_tokens": 4096, "stream": True}
spec = TrialSpec.make(sweep="bench-grain", model="transformer_lm", optimizer="adam", schedule="constant",
                      dataset="tokens:" + corpus, seed=0, steps=steps, batch_size=16, eval_every=steps,
                      steps_per_dispatch=25, optimizer_hparams={"step_size": 1e-3},
                      model_hparams={"width": 64, "depth": 2, "num_heads": 4}, dataset_hparams=hp)
ds = load_tokens(corpus, **hp)
stream = ds.stream
if variant == "grain":
    import grain

    class GrainBatches:
        """The stream's batches(seed, start, n, B) from one Grain iterator per seed, in order."""

        def __init__(self):
            self.its = {}

        def __call__(self, seed, start, n, batch, part=slice(None)):
            if seed not in self.its:
                ids = stream.order(seed, 0, steps, batch).reshape(-1)
                src = grain.MapDataset.source(ids).map(lambda w: stream.window(int(w))).batch(batch)
                it = iter(src.to_iter_dataset(grain.ReadOptions(num_threads=4, prefetch_buffer_size=32)))
                self.its[seed] = [it, 0]
            it, pos = self.its[seed]
            assert pos == start, (pos, start)
            w = np.stack([next(it)[part] for _ in range(n)]).astype(np.int32)
            self.its[seed][1] = start + n
            return w[..., :-1], w[..., 1:]

    want = stream.batches(0, 0, 3, 16)
    stream.batches = GrainBatches()
    got = stream.batches(0, 0, 3, 16)
    assert all(np.array_equal(a, b) for a, b in zip(got, want)), "grain read other windows"
    stream.batches = GrainBatches()
res = trainer.run_trial(spec, dataset=ds, measure_perf=False)
print("JSON:" + json.dumps({"train_s": res.extra["time"]["train"], "wait_s": res.extra["data_wait_s"],
                            "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
'''


def _one(variant: str, corpus: Path, steps: int) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", _TRIAL, variant, str(corpus), str(steps)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=900)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("JSON:")), None)
    assert p.returncode == 0 and line, p.stderr[-3000:]
    return json.loads(line[5:])


def test_grain_against_the_pread_reader(benchmark):
    pytest.importorskip("grain")
    rounds = int(os.environ.get("HARNESS_BENCH_GRAIN_ROUNDS", "4"))
    mb = int(os.environ.get("HARNESS_BENCH_GRAIN_MB", "200"))
    out: dict[str, list[dict]] = {"pread": [], "grain": []}
    with tempfile.TemporaryDirectory(prefix="bench-grain-") as tmp:
        corpus = _corpus(Path(tmp), mb)
        for r in range(rounds):
            for v in (("pread", "grain") if r % 2 else ("grain", "pread")):
                out[v].append(_one(v, corpus, 200))
    ratios = [g["train_s"] / p["train_s"] for g, p in zip(out["grain"], out["pread"], strict=True)]
    info = {"train_s_ratio_grain_over_pread": round(statistics.median(ratios), 3),
            "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3)}
    for v, rows in out.items():
        info[f"{v}_train_s"] = round(statistics.median(x["train_s"] for x in rows), 3)
        info[f"{v}_data_wait_s"] = round(statistics.median(x["wait_s"] for x in rows), 4)
        info[f"{v}_peak_rss_mb"] = round(statistics.median(x["rss"] for x in rows) / 2**20, 1)
    print("\n", info)
    benchmark.extra_info.update(info)
    record(benchmark, [x["train_s"] for x in out["grain"]])
