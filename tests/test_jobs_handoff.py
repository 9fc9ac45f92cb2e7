"""The ``--jobs`` workers hand their results to the sweep's process and start with its datasets
(issue 35 §4): checked in fresh interpreters, where what a worker imports is visible.

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
