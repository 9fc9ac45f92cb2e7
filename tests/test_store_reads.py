"""The resume check (make_plan), de-duplication and ``status`` read the store once per
sweep, whatever its number of trials: the MLflow searches counted on real SQLite stores of 6 and 60
trials (written by the harness's own writer; the trainer is the test suite's deterministic fake)."""

from __future__ import annotations

import collections

import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from harness.cli import app


@pytest.fixture
def searches(monkeypatch):
    """``{caller: number of MlflowClient.search_runs calls}``, the real method called each time."""
    counts: collections.Counter = collections.Counter()
    real = MlflowClient.search_runs

    def counting(self, *a, **kw):
        counts[counting.where] += 1
        return real(self, *a, **kw)

    counting.where = "sweep"
    monkeypatch.setattr(MlflowClient, "search_runs", counting)
    return counts, counting


def _store(tmp_path, n: int) -> tuple[str, dict]:
    """A SQLite store holding a finished sweep of ``n`` trials (seeds 0..n-1); its config."""
    from conftest import TINY_SWEEP

    from harness.orchestrate.run import run_sweep

    cfg = {**TINY_SWEEP, "name": f"reads{n}", "seeds": list(range(n))}
    uri = f"sqlite:///{tmp_path / f'store{n}.db'}"
    summary = run_sweep(cfg, tracking_uri=uri, quiet=True)
    assert sum(o.status == "finished" for o in summary.outcomes) == n
    return uri, cfg


def test_resume_dedupe_and_status_read_the_store_once_whatever_its_size(tmp_path, fake_trainer, searches,
                                                                       monkeypatch):
    from harness.config.load import parse_config
    from harness.orchestrate.resume import dedupe_sweep, finished_trials, make_plan
    from harness.orchestrate.run import run_sweep
    from harness.plan.expansion import expand
    from harness.tracking.client import client_for

    monkeypatch.setenv("HARNESS_BATCH", "never")
    counts, counting = searches
    per_size = {}
    for n in (6, 60):
        uri, cfg = _store(tmp_path, n)
        client = client_for(uri)
        exp_id = client.get_experiment_by_name(cfg["name"]).experiment_id
        specs = expand(parse_config(cfg))
        seen = {}
        counts.clear()
        counting.where = "finished_trials"
        assert len(finished_trials(lambda u=uri: u, cfg["name"])(specs)) == n
        counting.where = "make_plan"
        plan = make_plan(specs, client, exp_id)
        assert (len(plan.done), len(plan.todo)) == (n, 0)
        counting.where = "dedupe_sweep"
        assert dedupe_sweep(_ctx(uri, exp_id), [specs]) == {}
        seen.update(counts)
        counts.clear()
        counting.where = "status"
        p = tmp_path / f"reads{n}.yaml"
        p.write_text(yaml.safe_dump(cfg))
        r = CliRunner().invoke(app, ["status", "--tracking-uri", uri])
        assert r.exit_code == 0 and f"reads{n}" in r.output, r.output
        seen["status"] = counts["status"]
        # a re-run with everything finished: the pre-flight's read and the resume check's
        counts.clear()
        counting.where = "rerun"
        again = run_sweep(cfg, tracking_uri=uri, quiet=True)
        assert again.parent_run_id is None and len(again.outcomes) == n
        seen["rerun"] = counts["rerun"]
        per_size[n] = seen
    assert per_size[6] == per_size[60], per_size
    # On a SQLite store the resume check, the de-duplication and status read MLflow's tables with
    # sqlite3 (harness.core.mlflow_rows; the de-duplication searches only trials it finds twice):
    # no MLflow search; the re-run searches for the dead invocations' RUNNING runs and the
    # settings (parents); the pre-flight's read is one query of two columns
    assert per_size[6] == {"status": 0, "rerun": 2}, per_size  # make_plan, dedupe_sweep: none


def _ctx(uri: str, exp_id: str):
    from harness.core.context import RunContext

    return RunContext(tracking_uri=uri, experiment_id=exp_id, parent_run_id="", sweep_id="", sweep="reads")


def test_the_preflights_read_agrees_with_the_resume_check(tmp_path, fake_trainer, monkeypatch):
    """The pre-flight's SQLite query (two columns) names the trials make_plan calls done, no other:
    of 4 seeds, seed 2 raised (FAILED) and seed 3 diverged (FINISHED, harness.status diverged); a
    missing store holds nothing and is not created."""
    from conftest import TINY_SWEEP

    from harness.config.load import parse_config
    from harness.orchestrate.resume import finished_trials, make_plan
    from harness.orchestrate.run import run_sweep
    from harness.plan.expansion import expand
    from harness.tracking.client import client_for

    monkeypatch.setenv("HARNESS_BATCH", "never")
    fake_trainer["raise_for"], fake_trainer["diverge_for"] = (2,), (3,)
    cfg = {**TINY_SWEEP, "name": "agree", "seeds": [0, 1, 2, 3]}
    uri = f"sqlite:///{tmp_path / 'agree.db'}"
    run_sweep(cfg, tracking_uri=uri, quiet=True)
    specs = expand(parse_config(cfg))
    client = client_for(uri)
    plan = make_plan(specs, client, client.get_experiment_by_name("agree").experiment_id)
    got = finished_trials(lambda: uri, "agree")(specs)
    assert got == set(plan.done) and {s.seed for s in specs if s.trial_id in got} == {0, 1, 3}
    assert finished_trials(lambda: uri, "other")(specs) == set()
    missing = tmp_path / "missing.db"
    assert finished_trials(lambda: f"sqlite:///{missing}", "agree")(specs) == set()
    assert not missing.exists()


def test_a_trials_write_is_three_mlflow_calls_whatever_the_sweep(tmp_path, fake_trainer, monkeypatch):
    """On a new store, each trial costs one ``create_run`` (with every tag it ends
    with), one ``log_batch`` (params and metrics) and one ``set_terminated``; its artifacts go
    straight to its repository (no ``log_artifacts``: it looks the run up again); the searches and
    the dataset input are per sweep, not per trial (a held claim answers the FINISHED check). The
    same for 6 and 60 trials."""
    from conftest import TINY_SWEEP

    from harness.orchestrate.run import run_sweep

    monkeypatch.setenv("HARNESS_BATCH", "never")
    calls: collections.Counter = collections.Counter()
    for name in ("create_run", "log_batch", "set_terminated", "log_artifacts", "log_inputs", "search_runs",
                 "get_run"):
        real = getattr(MlflowClient, name)

        def counting(self, *a, _real=real, _name=name, **kw):
            calls[_name] += 1
            return _real(self, *a, **kw)

        monkeypatch.setattr(MlflowClient, name, counting)
    per_size = {}
    for n in (6, 60):
        calls.clear()
        cfg = {**TINY_SWEEP, "name": f"writes{n}", "seeds": list(range(n))}
        uri = f"sqlite:///{tmp_path / f'w{n}.db'}"
        summary = run_sweep(cfg, tracking_uri=uri, quiet=True)
        assert sum(o.status == "finished" for o in summary.outcomes) == n
        runs = MlflowClient(uri).search_runs(
            [MlflowClient(uri).get_experiment_by_name(f"writes{n}").experiment_id],
            "tags.`harness.kind` = 'trial'")
        assert len(runs) == n and all(r.info.status == "FINISHED" for r in runs)
        assert all({"curves.csv", "trial.json"} <= {a.path for a in MlflowClient(uri).list_artifacts(
            r.info.run_id)} for r in runs[:3])
        per_size[n] = {k: calls[k] - (n if k in ("create_run", "log_batch", "set_terminated") else 0)
                       for k in calls}
    # what is left once each trial's three calls are taken away: the parent run's, the same for both
    assert per_size[6] == per_size[60], per_size
    assert per_size[6].get("log_artifacts", 0) <= 3 and per_size[6].get("log_inputs", 0) == 1, per_size


def test_the_sqlite_read_of_trial_runs_is_mlflows(tmp_path, fake_trainer):
    """``trial_runs`` on a SQLite store (read with sqlite3, :mod:`harness.core.mlflow_rows`) gives
    what MLflow's ``search_runs`` gives: the same runs per trial in the same order, each with the
    same status, times, name, artifact URI, tags, params and latest metrics (NaN where MLflow has
    NaN)."""
    import math

    from harness.core.names import KIND_TRIAL, TAG_KIND
    from harness.tracking.client import by_trial, client_for, search_all, trial_runs

    uri, cfg = _store(tmp_path, 6)
    client = client_for(uri)
    exp_id = client.get_experiment_by_name(cfg["name"]).experiment_id
    extra = client.create_run(exp_id, tags={"harness.trial_id": "t-failed", TAG_KIND: KIND_TRIAL})
    client.log_metric(extra.info.run_id, "valid/loss", float("nan"))
    client.set_terminated(extra.info.run_id, "FAILED")
    ours = trial_runs(client, exp_id)
    theirs = by_trial(search_all(client, exp_id, f"tags.`{TAG_KIND}` = '{KIND_TRIAL}'"))
    assert list(ours) == list(theirs) and len(ours) == 7
    for tid, runs in theirs.items():
        assert [r.info.run_id for r in ours[tid]] == [r.info.run_id for r in runs]
        for a, b in zip(ours[tid], runs, strict=True):
            assert (a.info.status, a.info.start_time, a.info.end_time, a.info.run_name, a.info.artifact_uri,
                    a.info.experiment_id) == (b.info.status, b.info.start_time, b.info.end_time,
                                              b.info.run_name, b.info.artifact_uri, b.info.experiment_id)
            assert a.data.tags == b.data.tags and a.data.params == b.data.params
            assert a.data.metrics.keys() == b.data.metrics.keys()
            for k, v in b.data.metrics.items():
                assert a.data.metrics[k] == v or (math.isnan(v) and math.isnan(a.data.metrics[k])), k
