"""Ray at width: 1,000 short trials on a local Ray head with 2 workers and a shared
``mlflow server``, with the driver and a worker SIGKILLed on the way.

Run: ``pytest tests/benchmarks/test_bench_ray_width.py --benchmark-only -s`` (about 8 minutes on 2
cores; ``BENCH_RAY_N=200`` for fewer trials). The head is ``ray start --head --num-cpus=2`` (the
``ray_head`` fixture of ``tests/test_ray_cluster.py``), the store the suite's ``mlflow_server``
fixture (``--workers 1``, SQLite behind it), both on 127.0.0.1. The sweep is :data:`CONFIG`: N
trials of 20 steps of logistic regression on digits (quasi-random Adam step sizes × 2 seeds), with
``batching: off`` so that each trial is its own Ray task (N tasks, the widest the driver gets).

1. **Uninterrupted**: ``run_sweep(..., executor_obj=RayExecutor(...))`` in a fresh process. Printed:
   wall-clock per trial, and the per-trial tracking cost as the workers measured it (each trial's
   MLflow calls, :attr:`TrialOutcome.tracking_seconds`: the FINISHED check, the run's creation, its
   batch, artifacts and end state), median and mean.
2. **Killed**: the same sweep under another name through the CLI; the driver is SIGKILLed once a
   quarter of the trials are FINISHED; the restart has one Ray worker process SIGKILLed mid-task
   and runs to the end; a third invocation must train nothing.

Asserted after each: every trial id has exactly one FINISHED run, no run is left RUNNING, and the
killed sweep's trials are the uninterrupted one's (nothing lost, nothing trained twice).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from paired import record

pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")
psutil = pytest.importorskip("psutil")

from harness.core.names import TAG_TRIAL_ID  # noqa: E402
from harness.execute.ray_executor import TASK_PREFIX  # noqa: E402
from harness.tracking.client import client_for, search_all  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_ray_cluster import RAY_ENV, ray_head  # noqa: E402,F401  (the fixture)

pytestmark = [pytest.mark.ray, pytest.mark.server, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
N = int(os.environ.get("BENCH_RAY_N", "1000"))
CONFIG = {"search": {"method": "quasirandom", "trials": N // 2, "seed": 0},
          "models": ["logreg"],
          "optimizers": [{"name": "adam", "hparams": {"step_size": {"log_uniform": [1.0e-4, 1.0e-1]}}}],
          "schedules": ["constant"], "datasets": ["digits"], "seeds": 2, "batch_size": 64,
          "budget": {"steps": 20}, "eval_every": 10, "measure_perf": False, "batching": "off"}

DRIVER = """\
import time
t0 = time.perf_counter()
import json, statistics, sys
from harness.execute.ray_executor import RayExecutor
from harness.orchestrate.run import run_sweep
s = run_sweep(sys.argv[1], tracking_uri=sys.argv[2], quiet=True,
              executor_obj=RayExecutor(address=sys.argv[3], cpus_per_trial=1))
trained = [o for o in s.outcomes if not o.skipped]
track = [o.tracking_seconds for o in trained]
print(json.dumps({"finished": s.counts()["finished"], "trained": len(trained),
                  "seconds": time.perf_counter() - t0, "budget": s.budget,
                  "tracking_median_s": statistics.median(track) if track else None,
                  "tracking_mean_s": statistics.mean(track) if track else None}))
"""


def _env() -> dict[str, str]:
    env = {**os.environ, **RAY_ENV, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def _config(tmp: Path, name: str) -> Path:
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump({"name": name, **CONFIG}))
    return p


def _runs(client, name: str) -> tuple[Counter, Counter, set[str]]:
    """``(FINISHED runs per trial id, runs per status, the FINISHED runs' names)`` of experiment
    ``name``'s trial runs (a name says the trial's model, optimizer, step size and seed; the trial id
    hashes the sweep's name too)."""
    eid = client.get_experiment_by_name(name).experiment_id
    finished, statuses, names = Counter(), Counter(), set()
    for r in search_all(client, eid, f"tags.`{TAG_TRIAL_ID}` != ''"):
        statuses[r.info.status] += 1
        if r.info.status == "FINISHED":
            finished[r.data.tags[TAG_TRIAL_ID]] += 1
            names.add(r.info.run_name)
    return finished, statuses, names


def _count_finished(client, name: str) -> int:
    exp = client.get_experiment_by_name(name)
    if exp is None:
        return 0
    return len(search_all(client, exp.experiment_id, "attributes.status = 'FINISHED' and "
                                                     f"tags.`{TAG_TRIAL_ID}` != ''"))


def _kill_a_worker(stop: threading.Event, killed: list) -> None:
    """SIGKILL the first Ray worker process found running a unit (``ray::harness-unit:...``)."""
    while not stop.is_set():
        for p in psutil.process_iter(["cmdline"]):
            try:
                if (p.info["cmdline"] or [""])[0].startswith(f"ray::{TASK_PREFIX}:"):
                    p.send_signal(signal.SIGKILL)
                    killed.append(p.pid)
                    return
            except (psutil.Error, IndexError):
                continue
        time.sleep(0.05)


def test_a_thousand_trials_on_ray_lose_nothing_and_train_nothing_twice(
        benchmark, ray_head, mlflow_server, tmp_path):  # noqa: F811
    client = client_for(mlflow_server)
    tag = f"{os.getpid()}-{int(time.time())}"

    # 1. Uninterrupted.
    quiet = _config(tmp_path, f"raywidth-{tag}")
    p = subprocess.run([sys.executable, "-c", DRIVER, str(quiet), mlflow_server, ray_head], cwd=tmp_path,
                       env=_env(), capture_output=True, text=True, timeout=3600)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["finished"] == got["trained"] == N
    fin, statuses, names = _runs(client, quiet.stem)
    assert len(fin) == N and set(fin.values()) == {1}, statuses
    assert set(statuses) == {"FINISHED"}, statuses

    # 2. The same sweep, its driver SIGKILLed at a quarter, a worker SIGKILLed in the restart.
    killed_cfg = _config(tmp_path, f"raywidth-killed-{tag}")
    cmd = [sys.executable, "-m", "harness", "sweep", str(killed_cfg), "--executor", "ray", "--address",
           ray_head, "--tracking-uri", mlflow_server]
    first = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while first.poll() is None and _count_finished(client, killed_cfg.stem) < N // 4:
            time.sleep(0.5)
        assert first.poll() is None, "the driver ended before a quarter of its trials were FINISHED"
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    before = _count_finished(client, killed_cfg.stem)
    killed: list = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_a_worker, args=(stop, killed), daemon=True)
    t0 = time.perf_counter()
    killer.start()
    try:
        second = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=3600)
    finally:
        stop.set()
        killer.join(5)
    restart_s = time.perf_counter() - t0
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert killed, "no Ray worker was found running a unit to kill"
    fin_k, statuses_k, names_k = _runs(client, killed_cfg.stem)
    third = subprocess.run([*cmd, "--quiet"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                           timeout=600)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    assert _runs(client, killed_cfg.stem) == (fin_k, statuses_k, names_k)  # the third wrote no run
    assert len(fin_k) == N and set(fin_k.values()) == {1}, statuses_k
    assert set(statuses_k) <= {"FINISHED", "KILLED"}, statuses_k
    assert names_k == names and len(names) == N  # the same trials

    per_trial_ms = got["seconds"] / N * 1000
    benchmark.extra_info.update({
        "trials": N, "wall_s": got["seconds"], "wall_ms_per_trial": per_trial_ms,
        "tracking_median_ms": got["tracking_median_s"] * 1000,
        "tracking_mean_ms": got["tracking_mean_s"] * 1000, "budget": got["budget"],
        "killed_run": {"finished_before_kill": before, "restart_s": restart_s,
                       "runs": dict(statuses_k)}})
    print(f"\n{N} trials on a local Ray head (2 CPUs), written to an mlflow server on 127.0.0.1:")
    print(f"  uninterrupted: {got['seconds']:.1f} s, {per_trial_ms:.0f} ms of wall-clock per trial; "
          f"tracking per trial (the worker's MLflow calls): median {got['tracking_median_s'] * 1000:.0f} ms, "
          f"mean {got['tracking_mean_s'] * 1000:.0f} ms")
    print(f"  budget: {json.dumps({k: round(v, 1) for k, v in (got['budget'] or {}).items()})}")
    print(f"  killed: driver SIGKILLed at {before} FINISHED, a worker (pid {killed[0]}) SIGKILLed in the "
          f"restart ({restart_s:.0f} s); runs {dict(statuses_k)}, each of the {N} trials FINISHED once; "
          f"a third invocation trained nothing")
    record(benchmark, [got["seconds"]])
