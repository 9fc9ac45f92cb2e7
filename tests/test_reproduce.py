"""One trial, again (issue 37 §2): ``harness.reproduce`` / ``python -m harness reproduce TRIAL_ID``
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
from harness.sweep.reproduce import CLOCK_PREFIXES, ReproduceError

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
    r = CliRunner().invoke(app, ["reproduce", "x", "--tracking-uri", f"sqlite:///{tmp_path}/none.db"])
    assert r.exit_code == 3, r.output
