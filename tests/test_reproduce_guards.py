"""``reproduce`` against what a careless user or an attacker gives it, on one real ASHA sweep
(digits, a 16-wide MLP, 60 steps, rungs at 10 and 30, SQLite):

- a scratch folder that is the store's own (``--scratch .`` beside ``mlflow.db``) or another sweep's
  store is refused, and the store holds one FINISHED run of the trial as before;
- a trial id that is not 16 hex digits (a quote, ``' OR '1'='1``, an injected clause) is one line,
  exit 2, before any query; a tag value with a quote is searched for as it is;
- a damaged ``trial.json`` (not JSON, not an object, an edited step size) is one line saying so;
- a trial ASHA stopped is stopped again at its rung and comes out identical.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from typer.testing import CliRunner

import harness
from harness.cli import app
from harness.core.filters import BadIdError, literal, tag_is
from harness.orchestrate.reproduce import ReproduceError

runner = CliRunner()


@pytest.fixture(scope="module")
def asha(tmp_path_factory):
    """The store folder, its URI, a stopped trial's id and a finished trial's id."""
    d = tmp_path_factory.mktemp("asha_store")
    cfg = {"name": "asha_repro", "datasets": ["digits"], "seeds": [0], "batch_size": 64,
           "models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}],
           "optimizers": [{"name": "sgd", "hparams": {"step_size": {"log_uniform": [0.001, 1.0]}}}],
           "schedules": ["constant"], "budget": {"steps": 60}, "eval_every": 30, "steps_per_dispatch": 10,
           "measure_perf": False, "batching": "off", "selection": {"by": "final"},
           "search": {"method": "asha", "trials": 4, "seed": 0, "min_steps": 10, "eta": 3}}
    uri = f"sqlite:///{d / 'mlflow.db'}"
    harness.sweep(cfg, tracking_uri=uri, quiet=True)
    con = sqlite3.connect(d / "mlflow.db")
    status = dict(con.execute("select t.value, s.value from tags t join tags s on s.run_uuid = t.run_uuid "
                              "and s.key = 'status' where t.key = 'harness.trial_id'").fetchall())
    con.close()
    stopped = sorted(t for t, s in status.items() if s == "stopped")
    finished = sorted(t for t, s in status.items() if s == "finished")
    assert stopped and finished, status
    return d, uri, stopped[0], finished[0]


def _finished_runs(db: Path, trial_id: str) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("select count(*) from runs r join tags t on t.run_uuid = r.run_uuid where "
                           "t.key = 'harness.trial_id' and t.value = ? and r.status = 'FINISHED'",
                           (trial_id,)).fetchone()[0]
    finally:
        con.close()


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([sys.executable, "-m", "harness", "reproduce", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_scratch_folder_that_is_the_stores_own_is_refused(asha, tmp_path):
    """Old: exit 0, "trained again ... into sqlite:///<the store>", and the trial had two FINISHED
    runs in the store (``cd STORE && python -m harness reproduce TRIAL --scratch .``)."""
    d, uri, _, tid = asha
    p = _cli([tid, "--scratch", "."], cwd=d)  # the store is ./mlflow.db: the default URI
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip() == (f"error: scratch folder . holds the store it reads, sqlite:///{d}/mlflow.db: "
                                f"the trial trained again is written into a scratch store, never beside "
                                f"stored runs; name an empty folder, or none (a new temporary one)")
    assert _finished_runs(d / "mlflow.db", tid) == 1
    link = tmp_path / "link"
    link.symlink_to(d)
    with pytest.raises(ReproduceError, match="holds the store it reads"):
        harness.reproduce(tid, tracking_uri=uri, scratch=link)
    other = tmp_path / "other"  # another sweep's store (a copy): refused too, left as it was
    other.mkdir()
    with sqlite3.connect(d / "mlflow.db") as src, sqlite3.connect(other / "mlflow.db") as dst:
        src.backup(dst)  # with what its -wal holds
    with pytest.raises(ReproduceError, match=r"holds a sweep's store \(.*other/mlflow.db\)"):
        harness.reproduce(tid, tracking_uri=uri, scratch=other)
    assert _finished_runs(other / "mlflow.db", tid) == 1


@pytest.mark.parametrize("bad", ["x'", "' OR '1'='1", "{tid}' AND tags.`harness.kind` LIKE '%"])
def test_a_trial_id_that_is_not_one_is_refused_before_any_query(asha, bad):
    """Old: exit 1 with a 115-line MlflowException traceback; the injected clause found a run."""
    d, uri, _, tid = asha
    text = bad.format(tid=tid)
    p = _cli([text, "--tracking-uri", uri], cwd=d) if "OR" in bad else None
    if p is not None:
        assert p.returncode == 2 and p.stdout == "", p.stderr
        assert p.stderr.strip() == (f"error: {text!r} is not a trial id: 16 hexadecimal digits (0-9, a-f), "
                                    f"as the report's trials table shows them")
    r = runner.invoke(app, ["reproduce", text, "--tracking-uri", uri])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    with pytest.raises(BadIdError, match="is not a trial id"):
        harness.reproduce(text, tracking_uri=uri)


def test_a_tag_value_with_a_quote_is_searched_for_as_it_is(tracking_uri):
    """The old report quoting (``'a\\'b'``) found nothing: MLflow unescapes nothing."""
    from mlflow import MlflowClient

    from reports.runs import sweep_runs
    from reports.snapshot import StoreSnapshot

    c = MlflowClient(tracking_uri)
    exp = c.create_experiment("q")
    for v in ("it's", 'say "x"', "plain"):
        c.create_run(exp, tags={"harness.sweep_id": v})
    for v in ("it's", 'say "x"', "plain"):
        found = c.search_runs([exp], tag_is("harness.sweep_id", v))
        assert [r.data.tags["harness.sweep_id"] for r in found] == [v]
        assert [r.data.tags["harness.sweep_id"] for r in sweep_runs(c, exp, v)] == [v]
    snap = StoreSnapshot(tracking_uri[len("sqlite:///"):])
    assert [r.data.tags["harness.sweep_id"] for r in sweep_runs(snap, exp, "it's")] == ["it's"]
    assert sweep_runs(c, exp, "a\\'b") == []
    for v in ("a\\b", "both ' and \""):
        with pytest.raises(ValueError, match="cannot be searched for in MLflow"):
            literal(v)


def _trial_json(uri: str, trial_id: str) -> Path:
    from mlflow import MlflowClient

    from harness.tracking.client import search_all

    c = MlflowClient(uri)
    run = next(r for r in search_all(c, c.get_experiment_by_name("asha_repro").experiment_id)
               if r.data.tags.get("harness.trial_id") == trial_id and r.info.status == "FINISHED")
    return Path(unquote(urlparse(run.info.artifact_uri).path)) / "trial.json", run.info.run_id


def test_a_damaged_trial_json_is_said_in_one_line(asha):
    """Old: a traceback and exit 1 (``{not json``, ``[1,2,3]``); an edited step size was blamed on
    "identity rules changed"."""
    _, uri, _, tid = asha
    path, rid = _trial_json(uri, tid)
    good = path.read_text()
    edited = json.loads(good)
    old_lr = edited["optimizer_hparams"]["step_size"] if "optimizer_hparams" in edited else None
    head = f"error: the stored record of trial {tid} is damaged: run {rid}'s trial.json "
    try:
        for text, want in (("{not json", "is not JSON (Expecting property name enclosed in double quotes "
                                         "at line 1 column 2)"),
                           ("[1, 2, 3]", "holds a JSON list, not a trial's fields")):
            path.write_text(text)
            r = runner.invoke(app, ["reproduce", tid, "--tracking-uri", uri])
            assert r.exit_code == 2 and r.output.strip() == head + want, r.output
        assert old_lr is not None, sorted(edited)
        edited["optimizer_hparams"]["step_size"] = old_lr * 2
        path.write_text(json.dumps(edited))
        r = runner.invoke(app, ["reproduce", tid, "--tracking-uri", uri])
        assert r.exit_code == 2, r.output
        assert r.output.strip() == head + f"says optimizer.step_size = {old_lr * 2}, the run's params " \
                                          f"{old_lr}"
    finally:
        path.write_text(good)


def test_a_trial_asha_stopped_is_stopped_again_where_it_was(asha, tmp_path):
    """Old: trained to the end, "NOT identical: 74 of 111 values differ ... status: stored stopped,
    now finished"."""
    d, uri, stopped, _ = asha
    out = harness.reproduce(stopped, tracking_uri=uri, scratch=tmp_path / "s")
    assert out.status == ("stopped", "stopped") and out.stopped[0] == out.stopped[1] is not None
    assert out.identical, str(out)
    assert f"stopped at step {out.stopped[0]} as the stored run" in str(out)
    assert _finished_runs(d / "mlflow.db", stopped) == 1


def test_filters_hold_against_a_real_mlflow_server(mlflow_server):
    """The server parses the filter itself: a quoted value is found as it is, an id that is not one
    never reaches it."""
    from mlflow import MlflowClient

    from harness.tracking.client import runs_of_trial

    c = MlflowClient(mlflow_server)
    exp = c.create_experiment("filters_on_a_server")
    tid = "0123456789abcdef"
    for v in ("it's", tid):
        c.create_run(exp, tags={"harness.sweep_id": v, "harness.trial_id": v})
    found = c.search_runs([exp], tag_is("harness.sweep_id", "it's"))
    assert [r.data.tags["harness.sweep_id"] for r in found] == ["it's"]
    assert [r.data.tags["harness.trial_id"] for r in runs_of_trial(c, exp, tid)] == [tid]
    with pytest.raises(BadIdError):
        harness.reproduce(f"{tid}' OR '1'='1", tracking_uri=mlflow_server)


@pytest.mark.parametrize("option", ["alone", "compile_cache"])
def test_a_reproduce_option_that_is_not_a_bool_is_a_usage_error(tmp_path, option):
    """``alone="no"`` trained the trial alone ("alone, as asked"): a non-empty string is true."""
    with pytest.raises(harness.UsageError) as e:
        harness.reproduce("0123456789abcdef", tracking_uri=f"sqlite:///{tmp_path}/none.db", **{option: "no"})
    assert str(e.value) == f"{option}: must be True or False, got str 'no'"
