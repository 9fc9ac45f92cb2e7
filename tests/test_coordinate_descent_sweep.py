"""Coordinate descent on real sweeps: digits, a small MLP, 20 steps, SQLite.

adamw on a 3 x 3 grid (``b1`` x ``step_size``), one seed, selected by final validation accuracy:
the trials the store holds are exactly those of the descent replayed from the store (read back
with :meth:`TrialOutcome.from_run`), the replay proposes nothing more and describes the search as
the parent run's ``search.json`` says; the HTML report and ``harness.results(...).search`` show the
path and the certificate. A sweep SIGKILLed twice mid-descent (a real ``python`` subprocess, trials
slowed by ``HARNESS_TEST_CHUNK_SLEEP_S``) and run again ends with the uninterrupted sweep's trials
and path, each trial FINISHED once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import yaml
from subproc import with_hooks
from sweep_store import finished_ids, kill_when_finished, start_sweep

import harness
from harness.config.load import load_config
from harness.core.outcome import TrialOutcome
from harness.orchestrate.coordinate import CoordinateDescent
from harness.plan.cells import cells_of
from harness.plan.expansion import expand

CONFIG = {
    "name": "cdsweep", "datasets": ["digits"], "seeds": [0], "batch_size": 64,
    "models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}],
    "optimizers": [{"name": "adamw", "hparams": {"step_size": {"log_grid": [0.001, 0.1, 3]},
                                                 "b1": [0.5, 0.9, 0.99]}}],
    "schedules": ["constant"], "budget": {"steps": 20}, "eval_every": 10, "steps_per_dispatch": 10,
    "measure_perf": False, "batching": "off", "selection": {"by": "final"},
    "search": {"method": "coordinate_descent"},
}


def _write(folder: Path) -> Path:
    p = folder / "cd.yaml"
    p.write_text(yaml.safe_dump(CONFIG))
    return p


def test_the_dry_run_says_what_its_candidates_are_how_trials_group_and_the_data_memory(tmp_path,
                                                                                      capsys):
    """The dry run said "first trials: 9" for the candidate grid beside "at most (trials): 4", and
    said nothing of batching or data memory, which a grid's dry run does (a descent vmaps)."""
    cfg = {**CONFIG, "seeds": [0, 1], "batching": "on", "search": {**CONFIG["search"], "trials": 2}}
    harness.sweep(cfg, tracking_uri=f"sqlite:///{tmp_path}/m.db", dry_run=True)
    out = " ".join(capsys.readouterr().out.split())
    assert "first trials" not in out and "│ candidates │" not in out
    assert "candidates: coordinate_descent: the candidate grid (every configuration and seed" in out
    assert ("batching on: the trials of one round that differ only in seed and step size are vmapped "
            "together; the 18 candidates form 3 such groups") in out
    assert "device memory for data: " in out and "(1 dataset, one device copy each)" in out
    assert not (tmp_path / "m.db").exists()


def _logged(uri: str, name: str = "cdsweep") -> tuple[list[dict], list[str]]:
    """The latest parent run's ``search.json`` and ``trials.json`` ids."""
    from mlflow import MlflowClient

    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(name)
    parent = c.search_runs([exp.experiment_id], "tags.`harness.kind` = 'parent'",
                           order_by=["attributes.start_time DESC"])[0].info.run_id
    d = tempfile.mkdtemp()
    search = json.loads(Path(c.download_artifacts(parent, "search.json", d)).read_text())
    trials = json.loads(Path(c.download_artifacts(parent, "trials.json", d)).read_text())
    return search, [t["trial_id"] for t in trials]


def _replayed(cfg_path: Path, uri: str) -> tuple[CoordinateDescent, dict]:
    """A fresh searcher and ``seen`` read back from the store (every FINISHED trial run)."""
    from mlflow import MlflowClient

    from harness.tracking.client import trial_runs

    cfg = load_config(cfg_path)
    (cell,) = cells_of(expand(cfg))
    c = MlflowClient(uri)
    runs = trial_runs(c, c.get_experiment_by_name("cdsweep").experiment_id)
    specs = {s.trial_id: s for s in cell.trials}
    seen = {t: TrialOutcome.from_run(specs[t], r) for t, rs in runs.items() for r in rs
            if r.info.status == "FINISHED"}
    return CoordinateDescent(cell, cfg.selection.by), seen


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted sweep: (folder, config path, uri, summary)."""
    from harness.orchestrate.run import run_sweep

    folder = tmp_path_factory.mktemp("cd_ref")
    cfg = _write(folder)
    uri = f"sqlite:///{folder}/m.db"
    summary = run_sweep(str(cfg), tracking_uri=uri, quiet=True)
    return folder, cfg, uri, summary


def test_the_stored_trials_are_the_descents_and_the_report_shows_the_certificate(reference):
    folder, cfg, uri, summary = reference
    stored = finished_ids(folder / "m.db")
    assert Counter(stored).most_common(1)[0][1] == 1  # no trial trained twice
    assert len(summary.outcomes) == len(stored)
    search, proposed = _logged(uri)
    assert set(proposed) == set(stored)
    cd, seen = _replayed(cfg, uri)
    assert cd.propose(seen) == []  # the descent replayed from the store is over
    walk = cd._walk(seen)
    assert set(walk.used) == set(stored)  # every stored trial is one the descent used, and only those
    (rec,) = search
    again = json.loads(json.dumps(cd.describe(seen)))
    assert again["path"] == rec["path"] and again["certificate"] == rec["certificate"]
    assert rec["method"] == "coordinate_descent" and rec["stop"] in ("converged", "passes")
    assert rec["trials"] == len(stored) and rec["steps_spent"] == 20 * len(stored)
    # each step moved to the best value tried, only when strictly better than where it was
    for step in rec["path"]:
        vals = {t["value"]: t["objective"]["value"] for t in step["tried"]}
        assert vals[step["chosen"]] == max(vals.values())
        assert step["moved"] == (vals[step["chosen"]] > vals[step["from"]])
    cert = rec["certificate"]
    n = len(cert["neighbours"])
    if rec["stop"] == "converged":
        assert cert["certified"]
        assert cert["words"].startswith(f"certified: all {n} neighbours trained, none better")
    # the HTML report's section and harness.results
    from reports import make_report

    html = make_report("cdsweep", output=str(folder / "r.html"), tracking_uri=uri).read_text()
    assert 'id="tuning-paths"' in html and 'href="#tuning-paths"' in html
    assert cert["words"] in html.replace("&#39;", "'")
    table = harness.results("cdsweep", tracking_uri=uri).search
    assert list(table["optimizer"]) == ["adamw"]
    assert table["certificate"].iloc[0] == cert["words"] and table["certified"].iloc[0] == cert["certified"]


@pytest.mark.slow
def test_a_sweep_killed_twice_follows_the_same_path(reference, tmp_path):
    """SIGKILL once 2 and then once 5 trials are FINISHED, run again to the end: the uninterrupted
    sweep's trials (each FINISHED once) and the same path and certificate."""
    _, _, ref_uri, _ = reference
    ref_search, _ = _logged(ref_uri)
    ref_ids = set(finished_ids(Path(ref_uri.removeprefix("sqlite:///"))))
    cfg = _write(tmp_path)
    db = tmp_path / "k.db"
    env = with_hooks({**os.environ, "PYTHONPATH": os.getcwd()}, HARNESS_TEST_CHUNK_SLEEP_S="0.3")

    def go() -> subprocess.Popen:
        return start_sweep([sys.executable, "-m", "harness", "sweep", str(cfg), "--quiet",
                            "--tracking-uri", f"sqlite:///{db}"], Path(os.getcwd()), env)

    for at in (2, 5):
        assert at <= kill_when_finished(go(), db, at) < len(ref_ids)
    last = go()
    assert last.wait(timeout=600) == 0, last.stderr.read()
    got = finished_ids(db)
    assert Counter(got).most_common(1)[0][1] == 1  # no trial FINISHED twice
    assert set(got) == ref_ids
    search, _ = _logged(f"sqlite:///{db}")
    assert search[0]["path"] == ref_search[0]["path"]
    assert search[0]["certificate"] == ref_search[0]["certificate"]
    assert search[0]["selected"] == ref_search[0]["selected"]
