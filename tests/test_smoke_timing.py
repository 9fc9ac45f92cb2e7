"""A smoke run (``--max-steps``) trains without timing: the throughput stage took 68% of a
``--max-steps 20`` run of ``experiments/lm_text.yaml``, longer than the full sweep's header said."""

from __future__ import annotations

import mlflow

import harness

CFG = {"name": "smoke_timing", "models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}],
       "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}}], "schedules": ["constant"],
       "datasets": ["digits"], "seeds": 1, "batch_size": 32, "budget": {"steps": 40}, "eval_every": 10,
       "steps_per_dispatch": 10, "measure_perf": True}


def _perf_metrics(uri: str, experiment: str = "smoke_timing-smoke") -> list[str]:
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    (run,) = [r for r in client.search_runs([exp.experiment_id]) if "harness.trial_id" in r.data.tags]
    assert run.info.status == "FINISHED"
    return sorted(k for k in run.data.metrics if k.startswith("perf/step_time"))


def test_a_smoke_run_is_not_timed_and_says_so(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/smoke.db"
    harness.sweep(CFG, tracking_uri=uri, max_steps=5)
    out = " ".join(capsys.readouterr().out.split())
    assert "capped at 5 steps (--max-steps), its schedule over its full budget, not timed" in out
    assert _perf_metrics(uri) == []


def test_the_full_run_of_the_same_config_is_timed(tmp_path):
    uri = f"sqlite:///{tmp_path}/full.db"
    harness.sweep(CFG, tracking_uri=uri, quiet=True)
    assert "perf/step_time_ms" in _perf_metrics(uri, "smoke_timing")


def test_a_smoke_run_never_stands_for_the_full_sweep(tmp_path):
    """A smoke run after the full sweep became the experiment's current version: ``report`` and
    ``harness.results`` showed its 5-step numbers as the leaderboard. It goes to NAME-smoke."""
    uri = f"sqlite:///{tmp_path}/both.db"
    harness.sweep(CFG, tracking_uri=uri, quiet=True)
    smoke = harness.sweep(CFG, tracking_uri=uri, quiet=True, max_steps=5)
    assert smoke.experiment == "smoke_timing-smoke"
    for experiment, steps in (("smoke_timing", [40]), ("smoke_timing-smoke", [5])):
        trials = harness.results(tracking_uri=uri, experiment=experiment).trials
        assert trials["train_steps"].tolist() == steps
