"""``harness.sweep`` at its edges: a config mapping that contains itself is a ``ConfigError`` (not
``RecursionError``); ``console`` that is not a rich Console is a ``ConfigError`` before the store is
made; ``quiet=True`` prints nothing, also while another process holds the store's creation lock.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from conftest import TINY_SWEEP

import harness
from harness.tracking.store import lock_path


def test_a_config_that_contains_itself_is_a_config_error_with_its_key_path(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = dict(TINY_SWEEP)
    cfg["extra"] = cfg
    with pytest.raises(harness.ConfigError) as e:  # old code: RecursionError
        harness.sweep(cfg, tracking_uri=uri, quiet=True)
    assert str(e.value) == ("<dict>: extra: contains itself (a cycle); a config is a tree of mappings, "
                            "lists and values")
    models = [{"name": "mlp", "hparams": {"width": [16]}}]
    models[0]["hparams"]["depth"] = models
    with pytest.raises(harness.ConfigError, match=r"^<dict>: models\[0\]\.hparams\.depth: contains itself"):
        harness.sweep({**TINY_SWEEP, "models": models}, tracking_uri=uri, quiet=True)
    deep: list = [1]
    for _ in range(60):
        deep = [deep]
    with pytest.raises(harness.ConfigError, match="nested more than 50 levels deep"):
        harness.sweep({**TINY_SWEEP, "seeds": deep}, tracking_uri=uri, quiet=True)
    shared = {"width": 16, "depth": 1}  # one object twice, not a cycle: accepted
    run = harness.sweep({**TINY_SWEEP, "models": [{"name": "mlp", "hparams": shared},
                                                  {"name": "mlp", "hparams": shared}]},
                        tracking_uri=uri, quiet=True, dry_run=True)
    assert len(run.trial_ids) == 2
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def test_a_console_that_is_not_a_rich_console_is_refused_before_the_store_is_made(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(harness.ConfigError) as e:  # old code: AttributeError after mlflow.db was made
        harness.sweep(dict(TINY_SWEEP), tracking_uri="sqlite:///mlflow.db", quiet=True, console="x")
    assert e.value.key_path == "console"
    assert str(e.value) == "console: must be a rich.console.Console (None: stdout), got str 'x'"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_quiet_prints_nothing_while_another_process_creates_the_store(tmp_path, capfd, fake_trainer):
    db = tmp_path / "mlflow.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from filelock import FileLock; l = FileLock(sys.argv[1]); "
         "l.acquire(); print('held', flush=True); time.sleep(2.5)", str(lock_path(db))],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        t0 = time.monotonic()
        run = harness.sweep({**TINY_SWEEP, "seeds": [0]}, tracking_uri=f"sqlite:///{db}", quiet=True)
        waited = time.monotonic() - t0
    finally:
        holder.kill()
        holder.wait()
    assert run.counts["finished"] == 1 and waited > 1.0  # it did wait for the lock
    out, err = capfd.readouterr()
    assert out == "" and err == "", err  # old code: "waiting for pid ..., which is creating or repairing"


def test_a_best_value_at_the_edge_of_a_grid_is_warned_like_one_at_the_edge_of_a_range(tmp_path, tracking_uri,
                                                                                     fake_trainer):
    """The fake trainer's loss is 1 / (1 + step x step_size): the largest step size is best. Of the
    grid [0.01, 0.1, 0.3] the best is its largest: the summary warns (before: only sampled ranges
    did); momentum's grids of two values (every choice an edge) say nothing."""
    cfg = {**TINY_SWEEP, "name": "grid_edge", "seeds": [0], "target": {"metric": "valid/loss", "value": 0.05},
           "optimizers": [{"name": "sgd", "hparams": {"step_size": [0.01, 0.1, 0.3]}},
                          {"name": "momentum", "hparams": {"step_size": [0.1, 0.3], "mass": [0.5, 0.9]}}]}
    run = harness.sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    assert run.counts["finished"] == 7
    assert run.summary.boundary == [
        "sgd: best step_size 0.3 is the largest of its grid [0.01, 0.1, 0.3] (mlp · digits): extend the grid"]
    # the report says it alike, from what MLflow stored
    from reports.selection import boundary_warnings as report_warnings

    frame = harness.results("grid_edge", tracking_uri=tracking_uri).frame
    assert [w.replace(" (mlp / digits)", " (mlp · digits)") for w in report_warnings(frame)] == \
        run.summary.boundary


def test_results_refuses_a_tracking_uri_that_is_not_a_string(tmp_path):
    from harness.config.errors import UsageError

    with pytest.raises(UsageError, match=r"tracking_uri: must be a string .* got int 5"):
        harness.results("x", tracking_uri=5)  # it failed deep inside with an AttributeError
