"""Sweeps through a real Ray head and a real MLflow server, both started here on 127.0.0.1.

- A sweep of 6 trials (4 single-trial units and one vmapped batch of 2) runs as Ray tasks while a
  worker process is SIGKILLed in the middle of a trial; MLflow then holds exactly one FINISHED run
  per trial, the killed attempt is KILLED, and every metric equals an in-process run of the same
  trials (float32: ``rtol=1e-5, atol=1e-6``; on one machine they are in fact bit-identical).
- ``python -m harness sweep --executor ray``: the driver killed mid-sweep and restarted completes
  exactly the missing trials.

The MLflow server is the session's ``mlflow_server`` fixture (tests/conftest.py). The head is
``ray start --head`` in its own process group with its own temp dir; it is stopped by
killing that group (SIGTERM, then SIGKILL), never with ``ray stop`` (which would stop every Ray on
the machine).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")
psutil = pytest.importorskip("psutil")

from harness.core.context import RunContext  # noqa: E402
from harness.core.names import TAG_KIND, TAG_SWEEP, TAG_TRIAL_ID  # noqa: E402
from harness.core.spec import TrialSpec  # noqa: E402
from harness.execute.executors import InProcessExecutor  # noqa: E402
from harness.execute.ray_executor import TASK_PREFIX, RayExecutor  # noqa: E402
from harness.tracking.client import (  # noqa: E402
    client_for,
    get_or_create_experiment,
    prepare_store,
    search_all,
    trial_runs,
)

pytestmark = [pytest.mark.ray, pytest.mark.server, pytest.mark.slow]

#: float32 tolerance for "results do not depend on the executor".
RTOL, ATOL = 1e-5, 1e-6
METRICS = ("train/loss", "valid/loss", "valid/accuracy", "test/loss", "test/accuracy")
# Environment for the head and the drivers: no token file written into $HOME, no usage stats.
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group_alive(pgid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error, OSError):
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == pgid:
                out.append(p)
    return out


def _stop_group(pgid: int, marker: str | None = None) -> None:
    """SIGTERM the process group, then SIGKILL what is left, and any process naming ``marker``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        deadline = time.time() + 3
        while _group_alive(pgid) and time.time() < deadline:
            time.sleep(0.1)
        if not _group_alive(pgid):
            break
    if marker:  # a process that left the group but still runs from our temp dir
        for p in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if any(marker in a for a in p.info["cmdline"] or []):
                    p.kill()


def _ray_start_cmd(tmp: str, port: int) -> list[str]:
    return [
        str(Path(sys.executable).with_name("ray")), "start", "--head", "--node-ip-address=127.0.0.1",
        f"--port={port}", "--num-cpus=2", "--num-gpus=0", "--include-dashboard=false",
        "--disable-usage-stats", f"--temp-dir={tmp}", "--object-store-memory=100000000",
        f"--ray-client-server-port={_free_port()}", f"--node-manager-port={_free_port()}",
        f"--object-manager-port={_free_port()}", f"--dashboard-agent-grpc-port={_free_port()}",
        f"--dashboard-agent-listen-port={_free_port()}", f"--runtime-env-agent-port={_free_port()}",
        f"--metrics-export-port={_free_port()}",
    ]


@pytest.fixture(scope="module")
def ray_head():
    """``ray start --head`` on 127.0.0.1 with 2 CPUs, its own temp dir and process group; yields
    ``127.0.0.1:PORT``. Stopped afterwards by killing its process group."""
    if not Path(sys.executable).with_name("ray").exists():
        pytest.skip(f"no `ray` command beside {sys.executable}")
    tmp = tempfile.mkdtemp(prefix="rayt", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    port = _free_port()
    head = None
    try:
        head = subprocess.Popen(_ray_start_cmd(tmp, port), env={**os.environ, **RAY_ENV},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        out, _ = head.communicate(timeout=90)
        if head.returncode != 0:
            pytest.fail(f"`ray start --head` failed ({head.returncode}):\n{out[-3000:]}")
        yield f"127.0.0.1:{port}"
    finally:
        if head is not None:
            if head.poll() is None:
                head.kill()
            _stop_group(head.pid, marker=tmp)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def ray_env(monkeypatch):
    for k, v in RAY_ENV.items():
        monkeypatch.setenv(k, v)


def _specs(sweep: str) -> list[TrialSpec]:
    return [
        TrialSpec.make(sweep=sweep, model="mlp", optimizer="sgd", schedule="constant", dataset="digits",
                       seed=seed, steps=60, batch_size=32, eval_every=20, steps_per_dispatch=10,
                       model_hparams={"width": 32, "depth": 1}, optimizer_hparams={"step_size": lr})
        for seed in (0, 1, 2) for lr in (0.1, 0.03)
    ]


def _context(uri: str, sweep: str) -> tuple[RunContext, object]:
    client = prepare_store(uri)
    eid = get_or_create_experiment(client, sweep, uri)
    parent = client.create_run(eid, tags={TAG_KIND: "parent", TAG_SWEEP: sweep})
    ctx = RunContext(tracking_uri=uri, experiment_id=eid, parent_run_id=parent.info.run_id,
                     sweep_id="test", sweep=sweep, measure_perf=False, log_dataset=False)
    return ctx, client


def _histories(client, eid: str) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """{trial_id: {metric: [(step, value), ...]}} of the FINISHED run of every trial."""
    out = {}
    for tid, runs in trial_runs(client, eid).items():
        (run,) = [r for r in runs if r.info.status == "FINISHED"]
        out[tid] = {k: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, k))
                    for k in METRICS}
    return out


def _kill_a_worker_mid_trial(client, eid: str, unit_of: dict[str, str], stop: threading.Event,
                             killed: list) -> None:
    """Find a trial whose MLflow run is RUNNING, find the Ray worker whose process title names its
    unit (``ray::harness-unit:<first trial id>``), and SIGKILL it."""
    while not stop.is_set():
        with contextlib.suppress(Exception):
            running = search_all(client, eid, "attributes.status = 'RUNNING'")
            for r in running:
                tid = r.data.tags.get(TAG_TRIAL_ID)
                if tid not in unit_of:
                    continue
                title = f"ray::{TASK_PREFIX}:{unit_of[tid]}"
                for p in psutil.process_iter(["cmdline"]):
                    if (p.info["cmdline"] or [""])[0] == title:
                        p.send_signal(signal.SIGKILL)
                        killed.append((tid, p.pid))
                        return
        time.sleep(0.05)


def test_ray_sweep_survives_a_killed_worker_and_matches_a_local_run(ray_head, mlflow_server, ray_env,
                                                                    tmp_path):
    sweep = "ray-faults"
    specs = _specs(sweep)
    assert len({s.batch_key() for s in specs}) == 1  # the last two may share one vmapped program
    units = [[s] for s in specs[:4]] + [specs[4:]]
    ctx, client = _context(mlflow_server, sweep)
    unit_of = {s.trial_id: u[0].trial_id for u in units for s in u}

    killed: list = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_a_worker_mid_trial,
                              args=(client, ctx.experiment_id, unit_of, stop, killed), daemon=True)
    reported: list = []
    ex = RayExecutor(address=ray_head, cpus_per_trial=1, max_retries=3, poll_s=0.2)
    killer.start()
    try:
        ex.run(units, ctx, reported.extend)
    finally:
        stop.set()
        killer.join(10)

    # The driver saw each trial exactly once, none failed.
    assert sorted(o.trial_id for o in reported) == sorted(s.trial_id for s in specs)
    assert {o.status for o in reported} == {"finished"}, [o.reason for o in reported]

    # MLflow: every trial exactly once FINISHED; the killed attempt was marked KILLED by the retry.
    assert killed, "no worker was caught running a trial"
    by_trial = trial_runs(client, ctx.experiment_id)
    assert set(by_trial) == {s.trial_id for s in specs}
    for tid, runs in by_trial.items():
        assert [r.info.status for r in runs].count("FINISHED") == 1, tid
        assert {r.data.tags["mlflow.parentRunId"] for r in runs} == {ctx.parent_run_id}
    killed_tid = killed[0][0]
    statuses = sorted(r.info.status for r in by_trial[killed_tid])
    assert statuses == ["FINISHED", "KILLED"], statuses
    assert not psutil.pid_exists(killed[0][1]) or psutil.Process(killed[0][1]).status() == "zombie"

    # Same trials in this process into a SQLite store: equal metrics.
    local_uri = f"sqlite:///{tmp_path}/local.db"
    lctx, lclient = _context(local_uri, sweep)
    InProcessExecutor().run(units, lctx, lambda outs: None)
    remote, local = _histories(client, ctx.experiment_id), _histories(lclient, lctx.experiment_id)
    assert set(remote) == set(local)
    for tid in local:
        for k in METRICS:
            ls, lv = zip(*local[tid][k], strict=True)
            rs, rv = zip(*remote[tid][k], strict=True)
            assert ls == rs, (tid, k)
            np.testing.assert_allclose(rv, lv, rtol=RTOL, atol=ATOL, err_msg=f"{tid} {k}")


CONFIG = """\
name: ray-resume
models: [{name: mlp, hparams: {width: 32, depth: 1}}]
optimizers: [{name: sgd, hparams: {step_size: [0.1, 0.03]}}]
datasets: [digits]
seeds: 3
batch_size: 32
budget: {steps: 60}
eval_every: 20
steps_per_dispatch: 10
batching: false
measure_perf: false
"""


def _finished(client, eid: str) -> dict[str, int]:
    return {tid: [r.info.status for r in runs].count("FINISHED")
            for tid, runs in trial_runs(client, eid).items()}


def test_cli_sweep_on_ray_resumes_after_the_driver_is_killed(ray_head, mlflow_server, tmp_path):
    address, uri = ray_head, mlflow_server
    cfg = tmp_path / "ray-resume.yaml"
    cfg.write_text(CONFIG)
    cmd = [sys.executable, "-m", "harness", "sweep", str(cfg), "--executor", "ray", "--address", address,
           "--tracking-uri", uri]
    env = {**os.environ, **RAY_ENV}
    env.pop("MLFLOW_TRACKING_URI", None)
    client = client_for(uri)

    # 1. Kill the driver (SIGKILL) once at least one trial is FINISHED.
    first = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 150
        done_before: set[str] = set()
        while first.poll() is None and time.time() < deadline:
            exp = client.get_experiment_by_name("ray-resume")
            if exp is not None:
                done_before = {t for t, n in _finished(client, exp.experiment_id).items() if n}
                if done_before:
                    break
            time.sleep(0.1)
        assert first.poll() is None, "the first driver finished before it could be killed"
        assert done_before, "no trial finished within the deadline"
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    eid = client.get_experiment_by_name("ray-resume").experiment_id
    done_before = {t for t, n in _finished(client, eid).items() if n}
    assert 1 <= len(done_before) < 6

    # 2. Restart: exactly the missing trials run; the sweep ends with all 6 FINISHED once.
    second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "mlp" in second.stdout and "sgd" in second.stdout  # the summary table
    finished = _finished(client, eid)
    assert len(finished) == 6 and set(finished.values()) == {1}, finished
    parents = search_all(client, eid, f"tags.`{TAG_KIND}` = 'parent'")
    assert len(parents) == 2
    second_parent = next(p for p in parents if p.info.status == "FINISHED").info.run_id
    for tid, runs in trial_runs(client, eid).items():
        fin = next(r for r in runs if r.info.status == "FINISHED")
        # Trials finished before the kill were not re-run; the others ran under the second parent.
        expect = "first" if tid in done_before else "second"
        got = "second" if fin.data.tags["mlflow.parentRunId"] == second_parent else "first"
        assert got == expect, (tid, [r.info.status for r in runs])
        assert all(r.info.status in ("FINISHED", "KILLED") for r in runs), [r.info.status for r in runs]


def test_a_ray_task_resumes_a_unit_from_the_checkpoint_of_an_attempt_that_died(ray_head, ray_env, tmp_path):
    """The first attempt of two units (one trial, one vmapped pair) dies after chunk 3 in this
    process (a hook raises, as a killed worker would stop), leaving their checkpoints in a shared
    directory; Ray workers then run the units: each resumes from step 30 (``harness.resumed_from_step``)
    and its ``curves.csv`` equals an uninterrupted run bit for bit."""
    import csv

    from harness.train import checkpoint
    from harness.train import loop as trainer

    sweep = "ray-ckpt"
    specs = _specs(sweep)
    units = [specs[:1], specs[2:4]]
    ck_root = str(tmp_path / "ckpt")
    uri = f"sqlite:///{tmp_path}/ray.db"
    ctx, client = _context(uri, sweep)
    ctx = dataclasses.replace(ctx, checkpoint_every="10 steps", checkpoint_dir=ck_root)

    class Died(Exception):
        pass

    class DiesAfter3(checkpoint.UnitCheckpoints):
        n = 0

        def after_chunk(self, *a, **kw):
            super().after_chunk(*a, **kw)
            self.n += 1
            if self.n == 3:
                raise Died

    ref = {}
    for u in units:
        T = len(u) if len(u) > 1 else None
        d = f"{ck_root}/{ctx.experiment_id}/{checkpoint.unit_key([s.trial_id for s in u], T)}"
        ck = DiesAfter3(d, [s.trial_id for s in u], T, checkpoint.parse_every(10))
        with pytest.raises(Died):
            trainer.run_trials_batched(u, measure_perf=False, checkpoints=ck)
        ck.release()
        for r in trainer.run_trials_batched(u, measure_perf=False):
            ref[r.spec.trial_id] = [["train", str(s), str(v)] for s, v in
                                    zip(r.curves.train_step, r.curves.train_loss, strict=True)]
    reported: list = []
    RayExecutor(address=ray_head, cpus_per_trial=1, poll_s=0.2).run(units, ctx, reported.extend)
    assert {o.status for o in reported} == {"finished"}, [o.reason for o in reported]
    for tid, runs in trial_runs(client, ctx.experiment_id).items():
        (run,) = runs
        assert run.info.status == "FINISHED" and run.data.tags["harness.resumed_from_step"] == "30"
        path = client.download_artifacts(run.info.run_id, "curves.csv", str(tmp_path / tid))
        with open(path) as f:
            rows = [[r["split"], r["step"], r["loss"]] for r in csv.DictReader(f) if r["split"] == "train"]
        assert rows == ref[tid], tid
    assert list(Path(ck_root).glob("*/*")) == []  # removed once the results were in the store


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_ray_sweep_stops_on_sigterm_and_ctrl_c_as_an_in_process_one_does(ray_head, tmp_path, sig):
    """A Ray sweep sent SIGTERM ended with exit 15 and no line (``ray.init`` replaces the sweep's
    SIGTERM handler with ``sys.exit(15)``; here the old code exits -6, aborted by Ray's C++
    handler); cancelling the pending tasks, forced or not, now and then aborted the driver inside
    Ray ("Check failed: ... Tried to complete task that was not pending", exit 1, the parent run
    left RUNNING); and a Ctrl-C that ``ray.wait`` swallowed let the sweep train to the end (exit 0).
    Now either signal stops it as in-process:
    exit 128 + the signal, one line, the parent run KILLED, every trial the driver printed as
    finished FINISHED once; the same command then trains exactly the rest."""
    from sweep_store import finished_ids

    db = tmp_path / "m.db"
    cfg = tmp_path / "ray-stop.yaml"
    cfg.write_text("name: ray-stop\nsearch: {method: quasirandom, trials: 30, seed: 0}\nmodels: [logreg]\n"
                   "optimizers: [{name: adam, hparams: {step_size: {log_uniform: [1.0e-4, 1.0e-1]}}}]\n"
                   "datasets: [digits]\nseeds: 2\nbatch_size: 64\nbudget: {steps: 20}\neval_every: 10\n"
                   "measure_perf: false\nbatching: off\n")
    cmd = [sys.executable, "-m", "harness", "sweep", str(cfg), "--executor", "ray", "--address", ray_head,
           "--tracking-uri", f"sqlite:///{db}"]
    env = {**os.environ, **RAY_ENV, "PYTHONUNBUFFERED": "1", "COLUMNS": "250"}
    out = tmp_path / "out.txt"
    with out.open("w") as f:
        # SIGINT at its default in the sweep: pytest-xdist's workers ignore it, a child inherits
        # that, and the sweep rightly leaves an ignored SIGINT alone (CI: exit 0, all 60 trained)
        p = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=f, stderr=subprocess.STDOUT,
                             start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            deadline = time.time() + 180
            while len(finished_ids(db)) < 6 and time.time() < deadline:
                assert p.poll() is None, out.read_text()[-3000:]
                time.sleep(0.05)
            p.send_signal(sig)  # the driver only, as `kill PID` or a terminal's Ctrl-C to it
            rc = p.wait(timeout=60)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    text = out.read_text()
    assert "Check failed" not in text, text[-3000:]
    assert rc == 128 + sig, (rc, len(finished_ids(db)), text[-3000:])
    stored = finished_ids(db)
    assert 6 <= len(stored) < 60 and len(set(stored)) == len(stored), stored
    said = "interrupted" if sig == signal.SIGINT else "stopped by SIGTERM"
    assert re.search(rf"^{said}: {len(stored)}/60 trials done; run the same command again to resume$",
                     text, re.M), text[-3000:]
    printed = set(re.findall(r"^finished .*\[([0-9a-f]{16})\]", text, re.M))
    assert printed and printed <= set(stored), (printed - set(stored), text[-3000:])
    with sqlite3.connect(db) as con:
        parents = con.execute("select r.status from runs r join tags t on t.run_uuid = r.run_uuid "
                              "where t.key = 'harness.kind' and t.value = 'parent'").fetchall()
    assert parents == [("KILLED",)]

    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    after = finished_ids(db)
    assert len(after) == 60 and len(set(after)) == 60 and set(stored) <= set(after)


def test_sigterm_after_the_local_instance_is_shut_down_still_stops_the_sweep(tmp_path):
    """``ray.shutdown`` resets the process's SIGTERM action to the default while
    ``signal.getsignal`` still names the sweep's handler, so a SIGTERM during the end-of-sweep writes
    of a local-instance Ray sweep killed the driver (exit -15, no line, the parent run RUNNING; found
    by an attack). ``interrupt.retake`` now sets the handler whatever ``getsignal``
    says, after ``ray.shutdown`` as after ``ray.init``."""
    script = (
        "import os, time, ray\n"
        "from harness.core import interrupt\n"
        "with interrupt.kept():\n"
        "    ray.init(include_dashboard=False, num_cpus=1, logging_level='ERROR')\n"
        "    interrupt.retake()\n"
        "    ray.shutdown()\n"
        "    interrupt.retake()  # what RayExecutor.run does after ray.shutdown\n"
        "    try:\n"
        "        os.kill(os.getpid(), 15)\n"
        "        time.sleep(2)\n"
        "        print('not stopped')\n"
        "    except KeyboardInterrupt:\n"
        "        print('stopped by', interrupt.SIGNUM[0])\n")
    env = {**os.environ, **RAY_ENV}
    p = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=180)
    assert p.returncode == 0 and p.stdout.strip().splitlines()[-1] == "stopped by 15", (
        p.returncode, p.stdout[-2000:], p.stderr[-2000:])
