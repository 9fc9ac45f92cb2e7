"""MLflow tracking: a sweep into a real `mlflow server`, a server that is down, metric buffering."""

from __future__ import annotations

import math
import socket
import subprocess
import sys
import time

import pytest
from mlflow import MlflowClient

from harness.orchestrate.run import run_sweep
from harness.tracking.client import get_or_create_experiment, prepare_store
from harness.tracking.run_data import MetricBuffer
from harness.tracking.store_errors import TrackingUnavailableError
from harness.tracking.uris import artifact_root_for, resolve_tracking_uri


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_down_is_a_clear_error_before_training(tmp_path, write_sweep, fake_trainer):
    uri = f"http://127.0.0.1:{_closed_port()}"
    t0 = time.monotonic()
    with pytest.raises(TrackingUnavailableError) as ei:
        run_sweep(write_sweep(), tracking_uri=uri, quiet=True)
    assert time.monotonic() - t0 < 10
    assert str(ei.value).startswith(f"cannot reach the MLflow tracking server at {uri} (")
    assert "nothing was run" in str(ei.value)
    assert fake_trainer["calls"] == []


def test_server_down_cli_exit_code(tmp_path, write_sweep):
    uri = f"http://127.0.0.1:{_closed_port()}"
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", str(write_sweep()), "--tracking-uri", uri],
                       capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert r.returncode == 3
    assert f"error: cannot reach the MLflow tracking server at {uri}" in r.stderr
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.server
def test_sweep_into_real_server(tmp_path, write_sweep, mlflow_server, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = write_sweep(name="server_sweep", seeds=[0, 1])
    s = run_sweep(cfg, tracking_uri=mlflow_server, quiet=True)
    assert s.counts() == {"finished": 2, "diverged": 0, "failed": 0, "skipped": 0}
    c = MlflowClient(mlflow_server)
    exp = c.get_experiment_by_name("server_sweep")
    trials = c.search_runs([exp.experiment_id], "tags.`harness.kind` = 'trial'")
    assert len(trials) == 2 and all(r.info.status == "FINISHED" for r in trials)
    for r in trials:
        assert r.data.tags["harness.sweep_id"] == s.sweep_id
        assert [m.step for m in c.get_metric_history(r.info.run_id, "valid/loss")] == [0, 20, 40]
        assert {a.path for a in c.list_artifacts(r.info.run_id)} == {"curves.csv", "trial.json"}
    assert not (tmp_path / "mlflow.db").exists()
    # resume against the server: nothing new
    again = run_sweep(cfg, tracking_uri=mlflow_server, quiet=True)
    assert again.counts()["skipped"] == 2
    assert len(c.search_runs([exp.experiment_id], "tags.`harness.kind` = 'trial'")) == 2


def test_metric_buffer_drops_non_finite_and_batches(tracking_uri):
    c = prepare_store(tracking_uri)
    exp = get_or_create_experiment(c, "buf", tracking_uri)
    rid = c.create_run(exp).info.run_id
    buf = MetricBuffer()
    for s in range(1200):
        buf.add("train/loss", 1.0 / (s + 1), s)
    buf.add("train/loss", math.nan, 1200)
    buf.add("train/loss", math.inf, 1201)
    buf.add("eval/loss", None, 0)
    assert buf.flush(c, rid) == 1200
    hist = c.get_metric_history(rid, "train/loss")
    assert len(hist) == 1200 and max(m.step for m in hist) == 1199
    assert c.get_run(rid).data.metrics.get("eval/loss") is None


def test_resolve_tracking_uri(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_tracking_uri() == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert resolve_tracking_uri(None, "http://cfg") == "http://cfg"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://env")
    assert resolve_tracking_uri(None, "http://cfg") == "http://env"
    assert resolve_tracking_uri("http://cli", "http://cfg") == "http://cli"
    assert artifact_root_for(f"sqlite:///{tmp_path}/x.db") == (tmp_path / "mlruns").as_uri()


@pytest.mark.parametrize("name,folder", [("..", "_.."), (".", "_."), ("../x", "_.._x"), ("a.b", "a.b")])
def test_a_sweep_named_dot_dot_keeps_its_artifacts_inside_mlruns(tmp_path, name, folder):
    """A sweep named ``..`` put its runs' artifacts in the store's parent folder."""
    from pathlib import Path

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    c = prepare_store(uri)
    exp = c.get_experiment(get_or_create_experiment(c, name, uri))
    loc = Path(exp.artifact_location.removeprefix("file://"))
    root = Path(artifact_root_for(uri).removeprefix("file://"))
    assert loc == root / folder and loc.resolve().parent == root.resolve()
