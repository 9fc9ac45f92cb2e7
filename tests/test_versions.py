"""Versions of a sweep: ``sweep --dry-run`` says why each trial is to run (new, failed
or killed before, source changed: which source, which digests; config changed: which settings), and
``status`` lists a sweep superseded by a newer version of its config as superseded. Real sweeps into
a real SQLite store (the trainer faked: this is about what the store holds), read back through the
command line."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from harness.cli import app
from harness.config.load import load_config
from harness.orchestrate.run import run_sweep
from harness.plan.expansion import expand
from harness.tracking.client import search_all

runner = CliRunner()

OPTS = textwrap.dedent('''
    from optimizers import make_schedule, optimizer

    FACTOR = 1.0


    def _scale(g):
        return FACTOR * g


    @optimizer
    def scaled(step_size):
        lr = make_schedule(step_size)
        return (lambda x: x), (lambda i, g, x: x - lr(i) * _scale(g)), (lambda x: x)
''')


def _config(tmp_path: Path, **over) -> Path:
    cfg = {"name": "why", "models": [{"name": "mlp", "hparams": {"width": 8, "depth": 1}}],
           "optimizers": [{"name": "scaled", "source": "opts.py:scaled", "hparams": {"step_size": 0.1}},
                          {"name": "sgd", "hparams": {"step_size": 0.1}}],
           "datasets": ["digits"], "seeds": [0, 1], "batch_size": 32, "budget": {"steps": 10},
           "eval_every": 10, "steps_per_dispatch": 10, "measure_perf": False, **over}
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return p


def _states(cfg: Path, uri: str) -> tuple[dict[tuple[str, int], str], str]:
    """``{(optimizer, seed): state}`` from the dry run's table, and its whole output."""
    r = runner.invoke(app, ["sweep", str(cfg), "--dry-run", "--tracking-uri", uri], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    out = {}
    for s in expand(load_config(cfg)):
        row = next(ln for ln in r.output.splitlines() if s.trial_id in ln)
        out[(s.optimizer, s.seed)] = re.sub(r"\s+", " ", row.split("│")[-2]).strip()
    return out, r.output


def test_dry_run_says_why_each_trial_is_to_run(tmp_path, tracking_uri, fake_trainer, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "opts.py").write_text(OPTS)
    cfg = _config(tmp_path)
    states, out = _states(cfg, tracking_uri)  # no store yet: everything is new
    assert set(states.values()) == {"to run (new)"}
    assert "to run: 4 new" in out
    fake_trainer["raise_for"] = (1,)  # seed 1 fails
    run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    # a KILLED run is what a sweep stopped by Ctrl-C leaves (end_leftovers): sgd's seed 1 so
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name("why")
    runs = [r for r in search_all(c, exp.experiment_id) if r.data.tags.get("harness.kind") == "trial"]
    sgd1 = next(r for r in runs if r.data.tags["optimizer"] == "sgd" and r.data.tags["seed"] == "1")
    c.set_terminated(sgd1.info.run_id, "KILLED")
    states, out = _states(cfg, tracking_uri)
    assert states == {("scaled", 0): "done", ("scaled", 1): "re-run (failed before)",
                      ("sgd", 0): "done", ("sgd", 1): "re-run (killed before)"}
    assert "to run: 1 failed before, 1 killed before" in out
    fake_trainer["raise_for"] = ()
    run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    # a helper the factory calls: its trials, and which source, with the old and new digests
    old = next(s for s in expand(load_config(cfg)) if s.optimizer == "scaled").optimizer_source_hash
    (tmp_path / "opts.py").write_text(OPTS.replace("return FACTOR * g", "return 0.5 * FACTOR * g"))
    new = next(s for s in expand(load_config(cfg)) if s.optimizer == "scaled").optimizer_source_hash
    assert old != new
    states, out = _states(cfg, tracking_uri)
    changed = f"to run (source changed (opts.py:scaled {old[:8]} -> {new[:8]}))"
    assert states == {("scaled", 0): changed, ("scaled", 1): changed, ("sgd", 0): "done", ("sgd", 1): "done"}
    assert "to run: 2 source changed (opts.py:scaled)" in out
    # a setting of the config: which one, from what to what; a new seed is new
    cfg = _config(tmp_path, budget={"steps": 20}, seeds=[0, 1, 2])
    states, out = _states(cfg, tracking_uri)
    assert states[("sgd", 0)] == states[("sgd", 1)] == "to run (config changed (train.steps 10 -> 20))"
    assert states[("scaled", 0)] == (f"to run (source and config changed (opts.py:scaled {old[:8]} -> "
                                     f"{new[:8]}; train.steps 10 -> 20))")
    assert states[("sgd", 2)] == states[("scaled", 2)] == "to run (new)"


def test_status_lists_a_sweep_superseded_by_a_newer_version_of_its_config(
        tmp_path, tracking_uri, fake_trainer, monkeypatch):
    from harness.orchestrate.run import sweep_id_of

    monkeypatch.chdir(tmp_path)
    (tmp_path / "opts.py").write_text(OPTS)
    cfg = _config(tmp_path)
    first = sweep_id_of("why", expand(load_config(cfg)))

    def rows(*args: str) -> dict[str, list[str]]:
        r = runner.invoke(app, ["status", *args, "--tracking-uri", tracking_uri], env={"COLUMNS": "250"})
        assert r.exit_code == 0, r.output
        out = {}
        for ln in r.output.splitlines():
            cells = [re.sub(r"\s+", " ", c).strip() for c in ln.split("│")[1:-1]]
            if cells and cells[0] == "why":
                out[cells[1]] = cells
        return out

    run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    only = rows()
    assert list(only) == [first] and len(only[first]) == 8  # one version: no version column
    (tmp_path / "opts.py").write_text(OPTS.replace("return FACTOR * g", "return 0.5 * FACTOR * g"))
    second = sweep_id_of("why", expand(load_config(cfg)))
    assert second != first
    # the config's new version, not run yet: the store's sweep is superseded by it
    pending = rows(str(cfg))
    assert pending[first][-1] == f"superseded by {second}" and pending[second][-1] == "current"
    assert pending[second][2:7] == ["4", "2", "0", "0", "2"]  # sgd's two trials are done already
    run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    both = rows()
    assert both[first][-1] == f"superseded by {second}" and both[second][-1] == "current"
    assert both[first][2:7] == both[second][2:7] == ["4", "4", "0", "0", "0"]
