"""The ``--jobs`` workers hand their results to the sweep's process and start with its datasets:
checked in fresh interpreters, where what a worker imports is visible.

- ``execute_unit(..., handoff=True)`` trains with a store that does not exist (an ``http`` URI on
  a closed port): no MLflow call is made, MLflow is never imported, and each outcome carries its
  result and start time for the caller to write; the same unit written by
  :class:`harness.execute.handoff.Handoff` into a SQLite store gives one FINISHED run with the
  metrics the worker computed.
- :func:`harness.data.sources.memoised` / :func:`~harness.data.sources.preload`: a process handed
  its parent's digits arrays loads them without importing scikit-learn, bit for bit the same; a
  byte limit leaves a larger dataset out.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import TINY_SWEEP

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, cwd: Path) -> str:
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True,
                       text=True, timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                                     "HOME": str(cwd)})
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_a_handoff_unit_makes_no_mlflow_call_and_its_result_is_written_by_the_caller(tmp_path):
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY_SWEEP, "seeds": [0]}))
    out = _python("""
        import json, sys
        from harness.config.load import load_config
        from harness.plan.expansion import expand
        from harness.core.context import RunContext
        from harness.execute.worker import HANDOFF, execute_unit
        (spec,) = list(expand(load_config("tiny.yaml")))
        ctx = RunContext(tracking_uri="http://127.0.0.1:9", experiment_id="1", parent_run_id="p",
                         sweep_id="s", sweep="tiny", log_dataset=False)
        (o,) = execute_unit([spec], ctx, handoff=True)
        res, t0_ms = o.extra[HANDOFF]
        print(json.dumps({"mlflow": "mlflow" in sys.modules, "status": o.status, "run_id": o.run_id,
                          "same": res.spec.trial_id == spec.trial_id, "t0": isinstance(t0_ms, int),
                          "valid": res.final_valid_accuracy, "o_valid": o.final_valid_accuracy}))
    """, tmp_path)
    got = json.loads(out.strip().splitlines()[-1])
    assert {k: got[k] for k in ("mlflow", "status", "run_id", "same", "t0")} == \
        {"mlflow": False, "status": "finished", "run_id": None, "same": True, "t0": True}
    assert 0.0 < got["valid"] <= 1.0 and got["valid"] == got["o_valid"]

    # The caller's side: claims taken, the result queued on its writer, one FINISHED run.
    out = _python("""
        import json
        from harness.config.load import load_config
        from harness.plan.expansion import expand
        from harness.core.context import RunContext
        from harness.execute import background
        from harness.execute.handoff import Handoff
        from harness.execute.worker import execute_unit
        from harness.tracking.client import client_for, get_or_create_experiment, prepare_store
        uri = "sqlite:///m.db"
        client = prepare_store(uri)
        eid = get_or_create_experiment(client, "tiny", uri)
        parent = client.create_run(eid).info.run_id
        (spec,) = list(expand(load_config("tiny.yaml")))
        ctx = RunContext(tracking_uri=uri, experiment_id=eid, parent_run_id=parent, sweep_id="s",
                         sweep="tiny", log_dataset=False)
        book = Handoff([[spec]], ctx)
        assert book.claim(0) and book.todo[0] == [spec]
        (o,) = book.outcomes(0, execute_unit(book.todo[0], ctx, handoff=True))
        background.flush_logging()
        runs = client.search_runs([eid], "tags.`harness.kind` = 'trial'")
        print(json.dumps({"runs": [(r.info.status, r.data.tags["harness.trial_id"],
                                     r.data.metrics["valid/accuracy"]) for r in runs],
                          "tid": spec.trial_id, "valid": o.final_valid_accuracy,
                          "left": {k: len(v) for k, v in book.held.items()}}))
    """, tmp_path)
    got = json.loads(out.strip().splitlines()[-1])
    assert got["runs"] == [["FINISHED", got["tid"], got["valid"]]]
    assert got["left"] == {}


def test_a_worker_handed_its_parents_digits_loads_them_without_scikit_learn(tmp_path):
    from harness.data.sources import load_dataset, memoised

    ds = load_dataset("digits")
    entries = memoised([("digits", {}), ("digits", {}), ("synthetic", {})], 64 << 20)
    assert [k for k, _ in entries] == [("digits", ())]  # loaded here once; synthetic never was
    assert memoised([("digits", {})], ds.x_train.nbytes) == []  # over the limit: left out
    (tmp_path / "entries.pkl").write_bytes(pickle.dumps(entries))
    _python("""
        import pickle, sys
        import numpy as np
        from harness.data.sources import load_dataset, preload
        entries = pickle.load(open("entries.pkl", "rb"))
        preload(entries)
        ds = load_dataset("digits")
        assert "sklearn" not in sys.modules, "digits were loaded again"
        np.save("x_train.npy", ds.x_train); np.save("y_test.npy", ds.y_test)
    """, tmp_path)
    assert np.array_equal(np.load(tmp_path / "x_train.npy"), ds.x_train)
    assert np.array_equal(np.load(tmp_path / "y_test.npy"), ds.y_test)
    assert np.load(tmp_path / "x_train.npy").dtype == ds.x_train.dtype == np.float32


def test_jobs_workers_start_before_the_store_is_opened_and_never_for_a_rerun(tmp_path, monkeypatch):
    """``ProcessExecutor.prestart``: both workers are alive when the sweep opens its
    store (their interpreter and JAX overlap the parent's MLflow import and plan), the sweep trains
    on them (two started in all), and none is left when it returns. A re-run with every trial
    FINISHED starts none; a store that cannot be opened stops the ones started."""
    import psutil

    from harness.execute.executors import ProcessExecutor
    from harness.orchestrate import run as run_mod
    from harness.orchestrate.run import run_sweep

    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY_SWEEP, "budget": {"steps": 4},
                                                        "eval_every": 2, "steps_per_dispatch": 2}))
    uri = f"sqlite:///{tmp_path}/m.db"
    seen: list = []
    real = run_mod.prepare_store

    def spy(u, **kw):
        seen.append([(w.proc.pid, w.proc.is_alive()) for w in ex._kept or []])
        return real(u, **kw)

    def children() -> set[int]:  # live children but the resource tracker (and a session's server)
        return {c.pid for c in psutil.Process().children()
                if c.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(c.cmdline())}

    before = children()
    monkeypatch.setattr(run_mod, "prepare_store", spy)
    ex = ProcessExecutor(jobs=2)
    s = run_sweep(tmp_path / "tiny.yaml", tracking_uri=uri, quiet=True, executor_obj=ex)
    assert s.counts()["finished"] == 2 and ex.started == 2
    assert [alive for _, alive in seen[0]] == [True, True]
    assert children() - before == set()
    ex = ProcessExecutor(jobs=2)
    again = run_sweep(tmp_path / "tiny.yaml", tracking_uri=uri, quiet=True, executor_obj=ex)
    assert again.counts()["skipped"] == 2
    assert ex.started == 0

    def refused(u, **kw):
        spy(u, **kw)
        raise RuntimeError("the store refused")

    monkeypatch.setattr(run_mod, "prepare_store", refused)
    ex = ProcessExecutor(jobs=2)
    with pytest.raises(RuntimeError, match="the store refused"):
        run_sweep(tmp_path / "tiny.yaml", tracking_uri=f"sqlite:///{tmp_path}/other.db", quiet=True,
                  executor_obj=ex)
    assert ex.started == 2 and [alive for _, alive in seen[-1]] == [True, True]
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid, _ in seen[-1])


def test_a_script_without_a_main_guard_ends_its_jobs_sweep_with_an_error_instead_of_hanging(tmp_path):
    """A script that calls ``run_sweep(..., jobs=2)`` at its top level, without ``if __name__ ==
    "__main__":``, is re-imported by each spawned worker, which dies as it starts (multiprocessing's
    bootstrapping error). Before, the parent hung for ever: the worker's start-up payload held the
    parent's datasets (digits, ~0.5 MB, over a pipe's 64 KiB), and a child that dies before reading
    it all leaves ``Process.start`` blocked in its write; with the datasets sent on the worker's own
    pipe, dead workers were replaced for ever (each death before a unit was charged to none). Now
    two workers that die before they are set up end the sweep with an error that says what to do,
    and nothing is trained or left running."""
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY_SWEEP, "budget": {"steps": 4},
                                                        "eval_every": 2, "steps_per_dispatch": 2}))
    (tmp_path / "unguarded.py").write_text(textwrap.dedent(f"""
        from harness.orchestrate.run import run_sweep
        s = run_sweep("tiny.yaml", tracking_uri="sqlite:///{tmp_path}/m.db", quiet=True, jobs=2)
        print("COUNTS", s.counts())
    """))
    p = subprocess.run([sys.executable, "unguarded.py"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=240, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                         "HOME": str(tmp_path)})
    assert p.returncode == 1 and "COUNTS" not in p.stdout
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("harness.execute.executors.WorkerStartError: --jobs worker processes died "
                           "before they were set up (exit code 1), 2 in a row; their error is printed "
                           "above. Nothing was trained."), last
    assert last.endswith('must make that call under `if __name__ == "__main__":` (each worker process '
                         're-imports the script)'), last
    import sqlite3

    with sqlite3.connect(tmp_path / "m.db") as db:
        assert db.execute("select status from runs").fetchall() == [("FAILED",)]  # the parent run only


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_ctrl_c_lost_in_a_garbage_collection_callback_still_stops_the_sweep(tmp_path, jobs):
    """Python drops a ``KeyboardInterrupt`` raised inside a gc callback (JAX registers one) with
    "Exception ignored in: ...". Here SIGINT arrives inside such a callback as the sweep opens its
    store: before, the sweep went on, trained every trial and returned (an attack on ``--jobs 2``
    lost 2 of 4 early Ctrl-Cs, exit 0); now the noted interrupt stops it before any unit."""
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY_SWEEP, "budget": {"steps": 4},
                                                        "eval_every": 2, "steps_per_dispatch": 2}))
    out = _python(f"""
        import gc, os, signal
        from harness.orchestrate import run as R

        # Python's own Ctrl-C handler, as in a terminal (a test runner's worker may pass SIGINT on
        # ignored, and an ignored SIGINT interrupts nothing: the case tested would not happen)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        real = R.prepare_store

        def loses_a_ctrl_c(uri, **kw):
            def callback(phase, info):
                gc.callbacks.remove(callback)
                os.kill(os.getpid(), signal.SIGINT)  # its KeyboardInterrupt is raised in here: lost
                sum(range(1000))
            gc.callbacks.append(callback)
            gc.collect()
            return real(uri, **kw)

        R.prepare_store = loses_a_ctrl_c
        if __name__ == "__main__":
            try:
                uri = "sqlite:///{tmp_path}/m.db"
                s = R.run_sweep("tiny.yaml", tracking_uri=uri, quiet=True, jobs={jobs})
                print("RETURNED", s.counts())
            except KeyboardInterrupt as e:
                print("INTERRUPTED", type(e).__name__)
    """, tmp_path)
    assert out.strip().splitlines()[-1] == "INTERRUPTED SweepInterrupted", out
    import sqlite3

    with sqlite3.connect(tmp_path / "m.db") as db:
        kinds = db.execute("select value from tags where key = 'harness.kind'").fetchall()
    assert kinds == [("parent",)]  # the parent run (ended KILLED), no trial
