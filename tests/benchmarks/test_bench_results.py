"""``harness.results()`` on a 1,000-trial experiment (target: at most 5 s of CPU).

Run: ``pytest tests/benchmarks/test_bench_results.py --benchmark-only -s``. The store is built
once by the harness's own sweep and writer (``harness.sweep`` with :func:`conftest.fake_result` as
the trainer: 4 optimizers x 50 step sizes x 5 seeds of a digits MLP, 40 steps, evaluations every
10; every run as a real sweep writes it: tags, params, 40 train/loss points, valid curves, test,
trial.json, curves.csv) and kept in ``$HARNESS_CACHE_DIR/bench/`` (about 4 minutes on 2 shared
cores the first time; keyed by the MLflow version and this file's config). Each round is a fresh
process (imports included, as a notebook's first call): the CPU seconds (``time.process_time``) of
``harness.results(...)`` alone and with every table (``trials``, ``curves``, ``leaderboard``,
``tuning_curves``, ``tuned_times``); pytest-benchmark's table gets the whole, ``extra_info`` each
part. The same process then calls it again (warm imports).

Measured on 2 shared cores (2026-12-05, 5 fresh processes, medians): at a load average of 0.6,
``results()`` 1.86 s of CPU (``import pandas`` alone is 0.7-1.1 s of it), with every table 3.84 s
(3.63-4.49), called again in the same process 3.02 s. This VM's speed swings: the same code read
2.4 s / 4.9 s in one process minutes before. Through ``MlflowClient`` (``reports.frame.load_frame``,
one history call per run and metric) the frame alone took about a minute; the first cut of
``results()`` (arrow-backed text in the views' frame, every column taken at every selection, a
frame per trial) read 3.0 s / 6.6 s.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from paired import record

#: The budget the issue sets: CPU seconds of results() and its tables on 1,000 trials.
BUDGET_S = 5.0
N_CONFIGS = 50  # step sizes per optimizer: 4 optimizers x 50 x 5 seeds = 1,000 trials
CONFIG = {"name": "bench1000", "models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}],
          "optimizers": [{"name": o, "hparams": {"step_size": {"log_grid": [1.0e-3, 1.0, N_CONFIGS]}}}
                         for o in ("sgd", "momentum", "adam", "nesterov")],
          "schedules": ["constant"], "datasets": ["digits"], "seeds": 5, "batch_size": 32,
          "budget": {"steps": 40}, "eval_every": 10, "steps_per_dispatch": 10, "measure_perf": False,
          "target": {"metric": "valid/accuracy", "value": 0.3}}

BUILD = """
import sys, harness, harness.train.loop as trainer, harness.execute.training as training
sys.path.insert(0, {tests!r})
from conftest import fake_result
trainer.run_trial = lambda spec, **kw: fake_result(spec)
trainer.run_trials_batched = lambda specs, **kw: [fake_result(s) for s in specs]
trainer.should_batch = lambda specs: False
training.measure_throughput = lambda units, on_stage=None: 0.0
run = harness.sweep({config!r}, tracking_uri={uri!r}, quiet=True)
assert run.counts["finished"] == 1000, run.counts
"""

MEASURE = """
import json, time
c0 = time.process_time()
import harness
res = harness.results("bench1000", tracking_uri={uri!r})
c1 = time.process_time()
n = len(res.trials), len(res.curves), len(res.leaderboard), len(res.tuning_curves), len(res.tuned_times)
c2 = time.process_time()
again = harness.results("bench1000", tracking_uri={uri!r})
again.trials, again.curves, again.leaderboard, again.tuning_curves, again.tuned_times
c3 = time.process_time()
print(json.dumps({{"results_s": c1 - c0, "total_s": c2 - c0, "warm_total_s": c3 - c2, "rows": n}}))
"""


@pytest.fixture(scope="module")
def store() -> str:
    """The 1,000-trial store's URI (built once, kept in the harness's cache folder)."""
    import mlflow

    from harness.core.cache_files import cache_dir

    key = hashlib.sha256(json.dumps([mlflow.__version__, CONFIG], sort_keys=True).encode()).hexdigest()[:12]
    folder = cache_dir("bench", f"results-1000-{key}")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    if not (folder / "done").exists():
        folder.mkdir(parents=True, exist_ok=True)
        tests = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "HARNESS_BATCH": "never"}
        subprocess.run([sys.executable, "-c", BUILD.format(tests=tests, config=CONFIG, uri=uri)],
                       check=True, cwd=folder, env=env, timeout=3600)
        (folder / "done").write_text("1000 trials\n")
    return uri


def test_results_of_1000_trials_within_5_cpu_seconds(benchmark, store):
    rounds = []
    for _ in range(5):
        out = subprocess.run([sys.executable, "-c", MEASURE.format(uri=store)], check=True,
                             capture_output=True, text=True, timeout=600).stdout
        rounds.append(json.loads(out.strip().splitlines()[-1]))
    assert rounds[0]["rows"][0] == 1000
    record(benchmark, [r["total_s"] for r in rounds])
    for k in ("results_s", "total_s", "warm_total_s"):
        benchmark.extra_info[f"median_{k}"] = statistics.median(r[k] for r in rounds)
    benchmark.extra_info["rows"] = rounds[0]["rows"]
    print(json.dumps(benchmark.extra_info, indent=1))
    assert statistics.median(r["total_s"] for r in rounds) <= BUDGET_S, rounds
