"""One trial, again: ``harness.reproduce`` / ``python -m harness reproduce TRIAL_ID``
trains a stored trial again from its recorded spec into a scratch store and compares every logged
value but the clocks. A quickstart trial comes out identical, bit for bit; the same trial after one
stored value was altered does not (the difference found where it was made, the versions that
differ named); a user's optimizer is rebuilt from the file text its run kept, and a kept file that
no longer digests to the trial's id is refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml
from conftest import TINY_SWEEP
from typer.testing import CliRunner

import harness
from harness.cli import app
from harness.orchestrate.reproduce import CLOCK_PREFIXES, ReproduceError

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "experiments" / "quickstart.yaml"


def _alter(tracking_uri: str, run_id: str, key: str, step: int, delta: float) -> None:
    """Add ``delta`` to one stored value (its history and MLflow's latest-value table)."""
    con = sqlite3.connect(tracking_uri[len("sqlite:///"):])
    with con:
        for table in ("metrics", "latest_metrics"):
            con.execute(f"UPDATE {table} SET value = value + ? WHERE run_uuid = ? AND key = ? AND step = ?",
                        (delta, run_id, key, step))
    con.close()


def test_a_quickstart_trial_is_identical_and_one_altered_value_is_found(tmp_path, tracking_uri):
    from mlflow import MlflowClient

    run = harness.sweep(QUICKSTART, tracking_uri=tracking_uri, quiet=True,
                        only={"model": "mlp", "optimizer": "sgd", "schedule": "constant", "seed": 0})
    assert run.counts["finished"] == 1 and len(run.trial_ids) == 1
    tid = run.trial_ids[0]

    same = harness.reproduce(tid, tracking_uri=tracking_uri, scratch=tmp_path / "one")
    assert same.identical, str(same)
    assert same.differences == 0 and same.largest is None and same.status == ("finished", "finished")
    client = MlflowClient(tracking_uri)
    stored = client.get_run(same.stored_run_id).data.metrics
    compared = sorted(k for k in stored if not k.startswith(CLOCK_PREFIXES) and k != "time/wall_s")
    assert same.metrics == compared
    assert {"train/loss", "valid/loss", "valid/accuracy", "test/accuracy", "final/valid_accuracy",
            "convergence/steps_to_target"} <= set(compared)
    n_values = sum(len({m.step for m in client.get_metric_history(same.stored_run_id, k)}) for k in compared)
    assert same.compared == n_values and n_values > 250  # 250 train/loss points, 9 evaluations, ...
    assert str(same).splitlines()[0].endswith(f"identical: {n_values} values of {len(compared)} metrics "
                                              f"equal bit for bit")
    new = MlflowClient(same.scratch_uri).get_run(same.new_run_id)
    assert new.data.metrics["valid/accuracy"] == stored["valid/accuracy"]

    _alter(tracking_uri, same.stored_run_id, "valid/accuracy", 200, 0.001)
    client.set_tag(same.stored_run_id, "jax_version", "0.4.0")
    changed = harness.reproduce(tid, tracking_uri=tracking_uri, scratch=tmp_path / "two")
    assert not changed.identical and changed.differences == 1 and changed.compared == n_values
    d = changed.largest
    assert (d.metric, d.step) == ("valid/accuracy", 200) and d.stored - d.new == pytest.approx(0.001)
    assert d.abs_diff == pytest.approx(0.001)
    import jax

    assert changed.versions == {"jax_version": ("0.4.0", jax.__version__)}

    r = CliRunner().invoke(app, ["reproduce", tid, "--tracking-uri", tracking_uri,
                                 "--scratch", str(tmp_path / "three")])
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    assert lines[0].endswith(f"NOT identical: 1 of {n_values} values differ")
    assert lines[1].startswith("largest difference: valid/accuracy at step 200: stored ")
    assert lines[2] == f"versions that differ: jax_version 0.4.0 -> {jax.__version__}"


MY_OPT = """from optimizers import momentum


def my_momentum(step_size, mass: float = 0.9):
    return momentum(step_size, mass)
"""


def test_a_users_optimizer_is_rebuilt_from_the_file_its_run_kept(tmp_path, tracking_uri):
    (tmp_path / "my_opts.py").write_text(MY_OPT)
    cfg = tmp_path / "mine.yaml"
    cfg.write_text(yaml.safe_dump({**TINY_SWEEP, "name": "mine", "seeds": [0], "optimizers": [
        {"name": "my_momentum", "source": "my_opts.py:my_momentum", "hparams": {"step_size": 0.05}}]}))
    run = harness.sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    tid = run.trial_ids[0]
    (tmp_path / "my_opts.py").unlink()  # the run's own copy is what trains again
    same = harness.reproduce(tid, tracking_uri=tracking_uri, scratch=tmp_path / "s")
    assert same.identical, str(same)
    assert (tmp_path / "s" / "source" / "my_opts.py").read_text() == MY_OPT

    from mlflow import MlflowClient

    art = MlflowClient(tracking_uri).get_run(same.stored_run_id).info.artifact_uri
    kept = Path(unquote(urlparse(art).path)) / "source" / "my_opts.py"
    kept.write_text(MY_OPT.replace("momentum(step_size, mass)", "momentum(step_size, 0.5)"))
    with pytest.raises(ReproduceError, match=r"digests to [0-9a-f]{16} now, the trial ran"):
        harness.reproduce(tid, tracking_uri=tracking_uri, scratch=tmp_path / "t")


def test_an_unknown_trial_is_said_in_one_line(tmp_path, tracking_uri, fake_trainer):
    harness.sweep({**TINY_SWEEP, "seeds": [0]}, tracking_uri=tracking_uri, quiet=True)
    with pytest.raises(ReproduceError, match="no FINISHED run of trial '0123456789abcdef'"):
        harness.reproduce("0123456789abcdef", tracking_uri=tracking_uri)
    r = CliRunner().invoke(app, ["reproduce", "0123456789abcdef", "--tracking-uri", tracking_uri])
    assert r.exit_code == 2 and r.output.strip() == (
        "error: no FINISHED run of trial '0123456789abcdef' in the store (its runs: none)")
    r = CliRunner().invoke(app, ["reproduce", "0123456789abcdef", "--tracking-uri", f"sqlite:///{tmp_path}/none.db"])
    assert r.exit_code == 3, r.output


MODULE_OPT = """from optimizers import nesterov


def make(step_size, mass: float = 0.8):
    return nesterov(step_size, mass)
"""

SUBS = Path(__file__).resolve().parent / "algoperf_submissions"


def _one_trial(tmp_path: Path, tracking_uri: str, entry: dict) -> str:
    """A real sweep of one tiny digits-MLP trial (40 steps) of the optimizer ``entry``; its trial id."""
    cfg = tmp_path / "one.yaml"
    cfg.write_text(yaml.safe_dump({**TINY_SWEEP, "name": "one", "seeds": [0], "optimizers": [entry]}))
    run = harness.sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    assert run.counts["finished"] == 1, run.counts
    return run.trial_ids[0]


def test_an_optax_source_is_identical(tmp_path, tracking_uri):
    tid = _one_trial(tmp_path, tracking_uri, {"name": "oadam", "source": "optax:adam",
                                              "hparams": {"step_size": 0.01, "b1": 0.8}})
    same = harness.reproduce(tid, tracking_uri=tracking_uri, scratch=tmp_path / "s")
    assert same.identical, str(same)
    assert same.compared > 40 and "valid/accuracy" in same.metrics


def test_a_module_source_is_identical_and_an_edited_module_refused(tmp_path, tracking_uri, monkeypatch):
    pkg = tmp_path / "lib" / "mypkg37"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "opts.py").write_text(MODULE_OPT)
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    tid = _one_trial(tmp_path, tracking_uri, {"name": "mine", "source": "mypkg37.opts:make",
                                              "hparams": {"step_size": 0.05}})
    monkeypatch.chdir(tmp_path / "lib")  # not where the sweep's config was: the module is found by import
    same = harness.reproduce(tid, tracking_uri=tracking_uri, scratch=tmp_path / "s")
    assert same.identical, str(same)
    (pkg / "opts.py").write_text(MODULE_OPT.replace("nesterov(step_size, mass)", "nesterov(step_size, 0.5)"))
    with pytest.raises(ReproduceError, match=r"digests to [0-9a-f]{16} now, the trial ran"):
        harness.reproduce(tid, tracking_uri=tracking_uri, scratch=tmp_path / "t")


def test_an_algoperf_submission_is_rebuilt_from_the_file_its_run_kept(tmp_path, tracking_uri):
    sub = tmp_path / "subs" / "ema.py"
    sub.parent.mkdir()
    sub.write_text((SUBS / "ema.py").read_text())
    tid = _one_trial(tmp_path, tracking_uri, {"name": "ema", "source": "algoperf:subs/ema.py",
                                              "hparams": {"learning_rate": 0.05, "ema_decay": 0.9}})
    sub.unlink()  # the run's own copy is what trains again
    same = harness.reproduce(tid, tracking_uri=tracking_uri, scratch=tmp_path / "s")
    assert same.identical, str(same)
    assert (tmp_path / "s" / "source" / "ema.py").read_text() == (SUBS / "ema.py").read_text()


def test_a_trial_trains_again_on_the_xla_cpu_pool_it_recorded(tmp_path, tracking_uri, write_sweep):
    """A trial swept with ``HARNESS_XLA_CPU_THREADS=2`` (its run records ``xla_cpu_threads`` 2) is
    trained again on a pool of 2 threads, in a subprocess since this process's pool has 1; with
    ``threads="here"`` it trains on this process's pool and the pool's size is named among the
    versions that differ (before: not compared, not named)."""
    import os
    import subprocess
    import sys

    from mlflow import MlflowClient

    from harness.core.names import TAG_XLA_CPU_THREADS
    from harness.tracking.provenance import environment_tags

    assert environment_tags()[TAG_XLA_CPU_THREADS] == "1"  # this process imported harness first
    cfg = write_sweep(seeds=[0])
    env = {**os.environ, "HARNESS_XLA_CPU_THREADS": "2", "JAX_PLATFORMS": "cpu"}
    env.pop("NPROC", None)
    out = subprocess.run([sys.executable, "-m", "harness", "sweep", str(cfg), "--tracking-uri", tracking_uri],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    client = MlflowClient(tracking_uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              "tags.`harness.kind` = 'trial'")
    assert len(runs) == 1 and runs[0].data.tags[TAG_XLA_CPU_THREADS] == "2"
    tid = runs[0].data.tags["harness.trial_id"]

    same = harness.reproduce(tid, tracking_uri=tracking_uri, scratch=tmp_path / "stored")
    assert same.subprocess_threads == 2 and same.pool_here == 1
    new = MlflowClient(same.scratch_uri).get_run(same.new_run_id)
    assert new.data.tags[TAG_XLA_CPU_THREADS] == "2"  # the subprocess computed on the stored pool
    assert TAG_XLA_CPU_THREADS not in same.versions
    assert same.identical, str(same)
    assert ("trained in a subprocess on XLA's CPU pool of 2 threads, as the stored run "
            "(xla_cpu_threads; this process computes on 1)") in str(same).splitlines()
    assert (tmp_path / "stored" / "retrained.json").exists()

    here = harness.reproduce(tid, tracking_uri=tracking_uri, scratch=tmp_path / "here", threads="here")
    assert here.subprocess_threads is None
    assert MlflowClient(here.scratch_uri).get_run(here.new_run_id).data.tags[TAG_XLA_CPU_THREADS] == "1"
    assert here.versions == {TAG_XLA_CPU_THREADS: ("2", "1")}
    assert "versions that differ: xla_cpu_threads 2 -> 1" in str(here).splitlines()

    r = CliRunner().invoke(app, ["reproduce", tid, "--tracking-uri", tracking_uri, "--scratch",
                                 str(tmp_path / "cli"), "--threads", "here"])
    assert r.exit_code == (0 if here.identical else 1), r.output
    assert "versions that differ: xla_cpu_threads 2 -> 1" in r.output.splitlines()
    r = CliRunner().invoke(app, ["reproduce", tid, "--tracking-uri", tracking_uri, "--threads", "mine"])
    assert r.exit_code == 2 and "'mine' is not one of 'stored', 'here'" in r.output
    with pytest.raises(ValueError, match="threads='mine'"):
        harness.reproduce(tid, tracking_uri=tracking_uri, threads="mine")


def test_a_trial_that_fails_when_trained_again_says_why(tmp_path, tracking_uri, fake_trainer, monkeypatch):
    """A fresh process whose dataset is not prepared: the trial fails there. The answer says why,
    beside every value differing (before: ``NOT identical: ... values differ`` and ``status: stored
    finished, now failed`` without the reason)."""
    import harness.train.loop as trainer
    from harness.data.dataset import DatasetNotPreparedError

    run = harness.sweep({**TINY_SWEEP, "seeds": [0]}, tracking_uri=tracking_uri, quiet=True)

    def unprepared(spec, **kw):
        raise DatasetNotPreparedError("tfds:mnist is not prepared in /nowhere: run tfds build mnist")

    monkeypatch.setattr(trainer, "run_trial", unprepared)
    rep = harness.reproduce(run.trial_ids[0], tracking_uri=tracking_uri, scratch=tmp_path / "scratch",
                            threads="here")
    assert not rep.identical and rep.status == ("finished", "failed")
    assert ("status: stored finished, now failed (harness.data.dataset.DatasetNotPreparedError: tfds:mnist "
            "is not prepared in /nowhere: run tfds build mnist)") in rep.lines()
