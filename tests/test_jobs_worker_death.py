"""A ``--jobs 2`` worker that dies costs only its own unit.

Done for real: ``python -m harness sweep ... --jobs 2`` in a subprocess, and

- one worker SIGKILLed while it trains (the moment is the first chunk end it reports through
  ``HARNESS_TEST_TRACE``): the other worker and the queue go on, the killed unit is tried again on a
  fresh worker, every trial has exactly one FINISHED (or, at worst, FAILED) run, and a re-run trains
  nothing twice;
- a unit whose optimizer SIGKILLs its own worker whenever it is built: tried once more, then written
  FAILED (``worker process died (signal 9) twice``) by the sweep's process, the other trials FINISHED,
  exit 1 (the documented code of a sweep with a failed trial).

Before the fix either case printed every trial ``failed ... (being written) worker process died``,
wrote no FINISHED or FAILED run at all, and exited 1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from conftest import TINY_SWEEP
from subproc import with_hooks

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")

psutil = pytest.importorskip("psutil")


def _sweep(cfg: Path, uri: str, env: dict[str, str]) -> subprocess.Popen:
    env = {k: v for k, v in env.items() if k != "MLFLOW_TRACKING_URI"}
    env["COLUMNS"] = "250"  # one line per note and trial (at 80 columns a note wrapped inside its trial id)
    return subprocess.Popen([sys.executable, "-m", "harness", "sweep", str(cfg), "--jobs", "2",
                             "--tracking-uri", uri], cwd=cfg.parent, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _runs(uri: str, name: str) -> dict[str, list]:
    """``trial id -> [run, ...]`` and the parent runs (key ``"parent"``) of experiment ``name``."""
    from mlflow.tracking import MlflowClient

    from harness.core.names import TAG_TRIAL_ID

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    out: dict[str, list] = {}
    for r in client.search_runs([exp.experiment_id], max_results=1000):
        out.setdefault(r.data.tags.get(TAG_TRIAL_ID, "parent"), []).append(r)
    return out


def _results(runs: list) -> list:
    return [r for r in runs if r.info.status in ("FINISHED", "FAILED")]


def _trial_lines(out: str) -> dict[str, str]:
    """``trial id -> its progress line`` (each trial must be printed once)."""
    lines: dict[str, str] = {}
    for ln in out.splitlines():
        if ln.split(" ", 1)[0] in ("finished", "failed", "trained", "diverged") and "[" in ln:
            tid = ln.split("[", 1)[1].split("]", 1)[0]
            assert tid not in lines, f"trial {tid} printed twice:\n{out[-3000:]}"
            lines[tid] = ln
    return lines


@pytest.mark.slow
def test_a_worker_killed_mid_training_costs_only_its_own_unit(tmp_path):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump({**TINY_SWEEP, "seeds": [0, 1, 2, 3, 4, 5], "batching": "off",
                                   "budget": {"steps": 200}, "eval_every": 100}, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    trace = tmp_path / "trace"
    env = with_hooks({**os.environ, "HARNESS_CHECKPOINT_EVERY": "20"}, HARNESS_TEST_TRACE=str(trace),
                     HARNESS_TEST_CHUNK_SLEEP_S="0.1")
    proc = _sweep(cfg, uri, env)
    try:
        deadline = time.monotonic() + 120
        while not (trace.exists() and trace.read_text().strip()):  # a worker is training
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "no worker started training"
            time.sleep(0.05)
        victim = int(trace.read_text().split()[0])
        assert victim in {c.pid for c in psutil.Process(proc.pid).children()}  # one of the sweep's workers
        os.kill(victim, signal.SIGKILL)
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert f"worker process {victim} died (signal 9)" in out, out[-3000:]
    killed_tid = out.split(f"worker process {victim} died (signal 9) while running 1 trial(s) from ")[1][:16]
    runs = _runs(uri, "tiny")
    parents = runs.pop("parent")
    assert [p.info.status for p in parents] == ["FINISHED"]
    assert len(runs) == 6
    lines = _trial_lines(out)
    assert set(lines) == set(runs), out[-3000:]
    for tid, rs in runs.items():
        done = _results(rs)
        assert len(done) == 1, (tid, [r.info.status for r in rs])  # exactly one result per trial
        assert not [r for r in rs if r.info.status == "RUNNING"]
        if tid != killed_tid:
            assert [r.info.status for r in rs] == ["FINISHED"], tid
        else:  # the sweep's process writes the runs: its first attempt left none
            assert [r.info.status for r in rs] in (["FINISHED"], ["FAILED"])
            if done[0].info.status == "FAILED":
                assert "worker process died" in done[0].data.tags.get("harness.reason", "")
        # what was printed is what the store holds: a result back from its worker is "trained ...
        # (being written)" until the sweep's writer has written it, as in-process
        status = done[0].info.status.lower()
        shown = "trained" if "(being written)" in lines[tid] and status == "finished" else status[:6]
        assert lines[tid].startswith(shown), lines[tid]
    failed = {t for t, rs in runs.items() if _results(rs)[0].info.status == "FAILED"}
    assert proc.returncode == (1 if failed else 0), out[-3000:]

    # The same command again trains only what failed (here: nothing, unless the retry failed too).
    again = _sweep(cfg, uri, {**os.environ})
    out2, _ = again.communicate(timeout=240)
    assert again.returncode == (1 if failed else 0), out2[-3000:]
    after = _runs(uri, "tiny")
    after.pop("parent")
    for tid, rs in after.items():
        new = len(_results(rs)) - len(_results(runs[tid]))
        assert new == (1 if tid in failed else 0), (tid, [r.info.status for r in rs])


KILLER = textwrap.dedent('''
    """sgd, except that building it SIGKILLs the process when that is a --jobs worker."""
    import multiprocessing
    import os
    import signal

    from optimizers import sgd


    def killer_sgd(step_size):
        if multiprocessing.parent_process() is not None:  # a worker; the sweep's own pre-flight lives
            os.kill(os.getpid(), signal.SIGKILL)
        return sgd(step_size)
''')


@pytest.mark.slow
def test_a_unit_that_kills_its_worker_is_tried_once_more_then_recorded_failed(tmp_path):
    (tmp_path / "killer.py").write_text(KILLER)
    cfg = tmp_path / "killer.yaml"
    cfg.write_text(yaml.safe_dump({
        **TINY_SWEEP, "name": "killer", "seeds": [0], "batching": "off",
        "optimizers": [{"name": "killer", "source": "killer.py:killer_sgd", "hparams": {"step_size": 0.1}},
                       {"name": "sgd", "hparams": {"step_size": [0.1, 0.05, 0.02]}}]}, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = _sweep(cfg, uri, {**os.environ})
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 1, out[-3000:]  # a failed trial: exit 1 (harness.cli.sweep_cmd)
    runs = _runs(uri, "killer")
    assert [p.info.status for p in runs.pop("parent")] == ["FINISHED"]
    assert len(runs) == 4
    lines = _trial_lines(out)
    by_opt = {}
    for tid, rs in runs.items():
        done = _results(rs)
        assert len(done) == 1 and not [r for r in rs if r.info.status == "RUNNING"], tid
        by_opt.setdefault(done[0].data.tags["optimizer"], []).append((tid, done[0]))
    assert [r.info.status for _, r in by_opt["sgd"]] == ["FINISHED"] * 3
    [(tid, run)] = by_opt["killer"]
    assert run.info.status == "FAILED" and run.data.tags["status"] == "failed"
    assert run.data.tags["harness.reason"] == "worker process died (signal 9) twice"
    assert lines[tid].startswith("failed") and "(being written)" not in lines[tid]
    assert lines[tid].endswith("worker process died (signal 9) twice"), lines[tid]
    assert out.count("died (signal 9) while running 1 trial(s) from " + tid) == 2, out[-3000:]
    assert "trying it again on a fresh worker" in out


class _CrashedRay:
    """Stands in for the ``ray`` module when every task's worker dies and Ray gives up on it."""

    class exceptions:
        class RayError(Exception):
            pass

        class RayTaskError(RayError):
            pass

        class TaskCancelledError(RayError):
            pass

    def put(self, x):
        return x

    def remote(self, fn):
        crash = self.exceptions.RayError

        class Remote:
            def options(self, **opts):
                return self

            def remote(self, unit, ctx):  # each submission its own reference
                return crash("WorkerCrashedError: the worker died (SIGKILL)")

        return Remote()

    def wait(self, refs, num_returns, timeout):
        return refs[:1], refs[1:]

    def get(self, ref):
        raise ref


def test_a_unit_ray_gives_up_on_is_written_failed_as_printed(tmp_path):
    """The Ray executor retries a dead worker's task itself (Ray's ``max_retries``, then the driver's
    ``resubmits``: ``tests/test_ray_cluster.py`` kills one for real); a unit it gives up on is now
    written FAILED with the reason, and its line no longer says "(being written)" of nothing."""
    import io

    from conftest import make_spec
    from rich.console import Console

    from harness.core.context import RunContext
    from harness.execute.ray_executor import RayExecutor
    from harness.orchestrate.execution import execute_units
    from harness.orchestrate.progress import ProgressDisplay
    from harness.tracking.client import get_or_create_experiment, prepare_store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = prepare_store(uri)
    eid = get_or_create_experiment(client, "t", uri)
    parent = client.create_run(eid, tags={"harness.kind": "parent"}).info.run_id
    ctx = RunContext(tracking_uri=uri, experiment_id=eid, parent_run_id=parent, sweep_id="x", sweep="t",
                     measure_perf=False, log_dataset=False)

    class GivesUp(RayExecutor):
        def run(self, units, ctx, on_done):
            self._drive(_CrashedRay(), units, ctx, on_done)

    units = [[make_spec(seed=0)], [make_spec(seed=1), make_spec(seed=2)]]
    outcomes: list = []
    buf = io.StringIO()
    with ProgressDisplay(Console(file=buf, width=200), 3, 0, uri, quiet=False) as display:
        ex = GivesUp(address="127.0.0.1:1", resubmits=1, max_retries=0)
        execute_units(ex, units, ctx, outcomes, display)
    assert len(outcomes) == 3 and all(o.status == "failed" and o.run_id for o in outcomes)
    runs = _runs(uri, "t")
    runs.pop("parent")
    assert sorted(runs) == sorted(s.trial_id for u in units for s in u)
    for rs in runs.values():
        [run] = rs
        assert run.info.status == "FAILED" and run.data.tags["status"] == "failed"
        assert run.data.tags["harness.reason"].startswith(
            "Ray could not complete the task after 2 submission(s) with 0 retries each")
    printed = buf.getvalue()
    assert printed.count("failed ") >= 3 and "(being written)" not in printed, printed
