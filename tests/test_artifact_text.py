"""One artifact read as text for ``reproduce``, ``status`` and the reports, from a real MLflow store."""

from __future__ import annotations

import os

import mlflow

from harness.core.artifact_text import PROGRESS_BAR_ENV, artifact_text


def test_an_artifact_is_read_absent_is_none_and_the_progress_bar_setting_is_restored(tmp_path, monkeypatch):
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/m.db")
    exp = client.create_experiment("a", artifact_location=str(tmp_path / "art"))
    run = client.create_run(exp)
    src = tmp_path / "trials.json"
    src.write_text('[{"trial_id": "é1"}]', encoding="utf-8")
    client.log_artifact(run.info.run_id, str(src))
    monkeypatch.setenv(PROGRESS_BAR_ENV, "true")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert artifact_text(client, run.info.run_id, "trials.json", scratch) == '[{"trial_id": "é1"}]'
    assert os.environ[PROGRESS_BAR_ENV] == "true" and list(scratch.iterdir()) == []
    monkeypatch.delenv(PROGRESS_BAR_ENV)
    assert artifact_text(client, run.info.run_id, "missing.json") is None
    assert PROGRESS_BAR_ENV not in os.environ
