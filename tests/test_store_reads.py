"""Issue 35 §2: the resume check (make_plan), de-duplication and ``status`` read the store once per
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

    from harness.sweep.run import run_sweep

    cfg = {**TINY_SWEEP, "name": f"reads{n}", "seeds": list(range(n))}
    uri = f"sqlite:///{tmp_path / f'store{n}.db'}"
    summary = run_sweep(cfg, tracking_uri=uri, quiet=True)
    assert sum(o.status == "finished" for o in summary.outcomes) == n
    return uri, cfg


def test_resume_dedupe_and_status_read_the_store_once_whatever_its_size(tmp_path, fake_trainer, searches,
                                                                       monkeypatch):
    from harness.config.load import parse_config
    from harness.plan.expansion import expand
    from harness.sweep.resume import dedupe_sweep, finished_trials, make_plan
    from harness.sweep.run import run_sweep
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
    # one search each (one page: up to 1000 runs); status: one per experiment (the sweep's and
    # MLflow's Default); the re-run: the resume check, the dead invocations (RUNNING runs) and the
    # settings (parents)
    # (the pre-flight's read of a SQLite store is one query of two columns, no MLflow search; so is
    # the closing de-duplication's, which searches only the trials it finds twice: none here)
    assert per_size[6] == {"make_plan": 1, "status": 2, "rerun": 3}  # dedupe_sweep: none


def _ctx(uri: str, exp_id: str):
    from harness.core.context import RunContext

    return RunContext(tracking_uri=uri, experiment_id=exp_id, parent_run_id="", sweep_id="", sweep="reads")


def test_the_preflights_read_agrees_with_the_resume_check(tmp_path, fake_trainer, monkeypatch):
    """The pre-flight's SQLite query (two columns) names the trials make_plan calls done, no other:
    of 4 seeds, seed 2 raised (FAILED) and seed 3 diverged (FINISHED, harness.status diverged); a
    missing store holds nothing and is not created."""
    from conftest import TINY_SWEEP

    from harness.config.load import parse_config
    from harness.plan.expansion import expand
    from harness.sweep.resume import finished_trials, make_plan
    from harness.sweep.run import run_sweep
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
    """Issue 35 §1: on a new store, each trial costs one ``create_run`` (with every tag it ends
    with), one ``log_batch`` (params and metrics) and one ``set_terminated``; its artifacts go
    straight to its repository (no ``log_artifacts``: it looks the run up again); the searches and
    the dataset input are per sweep, not per trial (a held claim answers the FINISHED check). The
    same for 6 and 60 trials."""
    from conftest import TINY_SWEEP

    from harness.sweep.run import run_sweep

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
