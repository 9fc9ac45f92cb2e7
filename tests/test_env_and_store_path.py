"""The ``HARNESS_*`` environment is checked with the config, before any write; a new
SQLite store's folder is created only by the one rule (its own folder, in an existing writable
folder that is not the filesystem root); a resumed trial's ``curves.csv`` equals an uninterrupted
run's in every column but ``wall_s`` (and the reliability page says exactly that).

Each test failed before its fix: ``HARNESS_CHECKPOINT_EVERY=garbage`` was refused only after
``mlflow.db`` was created; ``HARNESS_BATCH``, ``HARNESS_CLAIMS``, ``HARNESS_STORE_TEMPLATE`` and a
file as ``HARNESS_SPOOL_DIR`` were not refused at all (``HARNESS_CACHE_DIR`` naming a file was a
``NotADirectoryError`` traceback); ``sqlite:///<tmp>/a/b/c/x.db`` made ``a/b/c`` and a store, and
``sqlite:////nonexistent_dir/x.db`` made ``/nonexistent_dir``.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from harness.tracking.store import ensure_sqlite_store
from harness.tracking.store_state import StoreError

ROOT = Path(__file__).resolve().parents[1]
TINY = {"name": "tiny", "models": [{"name": "mlp", "hparams": {"width": 8, "depth": 1}}],
        "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}}], "datasets": ["digits"],
        "seeds": 1, "batch_size": 32, "budget": {"steps": 4}, "eval_every": 2,
        "steps_per_dispatch": 2, "measure_perf": False}


def _sweep(tmp_path: Path, uri: str, **env: str) -> subprocess.CompletedProcess:
    """``python -m harness sweep tiny.yaml -q --tracking-uri URI`` in ``tmp_path`` with ``env`` set
    (every other ``HARNESS_*`` variable removed)."""
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(TINY, sort_keys=False))
    base = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    base.setdefault("PYTHONPATH", str(ROOT))
    return subprocess.run([sys.executable, "-m", "harness", "sweep", str(cfg), "-q", "--tracking-uri", uri],
                          cwd=tmp_path, env={**base, "HARNESS_CACHE_DIR": str(tmp_path / "cache"), **env},
                          capture_output=True, text=True, timeout=300)


# --------------------------------------------------------------------------- 1. the environment


@pytest.mark.parametrize(("name", "value", "says"), [
    ("HARNESS_CHECKPOINT_EVERY", "garbage", "is not a checkpoint cadence: use a number of steps"),
    ("HARNESS_BATCH", "sometimes", "is none of always (1, true, yes), never (0, false, no) or auto"),
    ("HARNESS_CLAIMS", "false", "is neither 1 (per-trial claims, the default) nor 0 (off)"),
    ("HARNESS_STORE_TEMPLATE", "perhaps", "is neither on (1, on, true, yes) nor off"),
    ("HARNESS_SQLITE_WAL", "maybe", "is neither on (1, on, true, yes) nor off"),
    ("HARNESS_SPOOL_DIR", "{file}/spool", "is a file, not a folder"),
])
def test_a_bad_environment_variable_is_one_line_exit_2_before_any_write(tmp_path, name, value, says):
    (tmp_path / "a-file").write_text("x")
    value = value.format(file=tmp_path / "a-file")
    r = _sweep(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}", **{name: value})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert lines == [lines[0]] and lines[0].startswith(f"error: {name}={value!r}") and says in lines[0]
    assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()
    assert not (tmp_path / "cache").exists()  # nothing written anywhere, the cache included


def test_every_problem_is_named_and_the_value_bounded(tmp_path):
    from harness.config.environment import EnvSettingError, check_environment, problems

    (tmp_path / "f").write_text("x")
    env = {"HARNESS_CHECKPOINT_EVERY": "x" * 100_000, "HARNESS_CACHE_DIR": str(tmp_path / "f"),
           "HARNESS_CHECKPOINT_DIR": "gs://bucket/ckpt",  # a URL Orbax writes: not checked
           "HARNESS_COMPILE_CACHE": "2", "HARNESS_COMPILE_CACHE_MAX_BYTES": "lots"}
    lines = problems(env)
    assert [ln.split("=", 1)[0] for ln in lines] == ["HARNESS_CHECKPOINT_EVERY", "HARNESS_CACHE_DIR",
                                                      "HARNESS_COMPILE_CACHE",
                                                      "HARNESS_COMPILE_CACHE_MAX_BYTES"]
    assert max(len(ln) for ln in lines) < 400 and "(100,000 characters)" in lines[0]
    assert f"{tmp_path / 'f'} is not a folder" in lines[1]
    with pytest.raises(EnvSettingError) as ei:
        check_environment(env)
    assert ei.value.errors == lines


@pytest.mark.parametrize("env", [
    {}, {"HARNESS_CHECKPOINT_EVERY": "20"}, {"HARNESS_CHECKPOINT_EVERY": "90s"},
    {"HARNESS_CHECKPOINT_EVERY": "off"}, {"HARNESS_BATCH": "never"}, {"HARNESS_BATCH": "auto"},
    {"HARNESS_BATCH": "on"}, {"HARNESS_BATCH": "off"},
    {"HARNESS_CLAIMS": "0"}, {"HARNESS_STORE_TEMPLATE": "0"}, {"HARNESS_COMPILE_CACHE": " Off "},
    {"HARNESS_SQLITE_WAL": "off"},
    {"HARNESS_COMPILE_CACHE_MAX_BYTES": "2e9"}, {"HARNESS_CACHE_DIR": "{tmp}/new/deeper"},
    {"HARNESS_CHECKPOINT_EVERY": ""},  # empty is unset
])
def test_good_values_pass(tmp_path, env):
    from harness.config.environment import problems

    assert problems({k: v.format(tmp=tmp_path) for k, v in env.items()}) == []


def test_the_batching_values_are_the_trainers():
    from harness.config import environment
    from harness.train import batching

    assert environment.BATCH_ALWAYS == batching._ALWAYS and environment.BATCH_NEVER == batching._NEVER


# --------------------------------------------------------------------------- 3. the store's folder


def test_a_store_path_under_missing_folders_is_refused_and_nothing_created(tmp_path):
    (tmp_path / "tmp").mkdir()
    r = _sweep(tmp_path, f"sqlite:///{tmp_path / 'tmp/a/b/c/x.db'}")
    assert r.returncode == 3, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: the folder {tmp_path / 'tmp/a/b/c'} does not exist, nor does {tmp_path / 'tmp/a/b'}: "
        f"create it or choose another --tracking-uri"]
    assert list((tmp_path / "tmp").iterdir()) == []


def test_the_store_folder_is_never_made_at_the_filesystem_root():
    folder = Path(f"/harness-test-missing-{uuid.uuid4().hex[:12]}")
    try:
        with pytest.raises(StoreError) as ei:
            ensure_sqlite_store(folder / "x.db")
        assert str(ei.value) == (f"the folder {folder} does not exist (a store's folder is never made "
                                 f"at the filesystem root): create it or choose another --tracking-uri")
        assert not folder.exists()
    finally:
        if folder.exists():  # the unfixed code made it (as root)
            import shutil

            shutil.rmtree(folder)


def test_the_store_folder_is_made_in_an_existing_writable_folder(tmp_path):
    ensure_sqlite_store(tmp_path / "runs" / "mlflow.db")
    assert (tmp_path / "runs" / "mlflow.db").is_file()


# --------------------------------------------------------------------------- 2. resume's curves.csv


def test_a_resumed_curves_csv_equals_in_every_column_but_wall_s(tmp_path):
    """What the reliability page promises is what is compared: a trial interrupted after its 3rd
    chunk and resumed writes a ``curves.csv`` whose rows are those of an uninterrupted run in
    ``split``, ``step``, ``loss``, ``accuracy`` (text, bit for bit); ``wall_s`` is a clock."""
    from interrupting import Interrupt, Interrupting

    from harness.core.spec import TrialSpec
    from harness.tracking.trial_run import write_curves
    from harness.train import loop as trainer
    from harness.train.checkpoint import UnitCheckpoints, parse_every

    spec = TrialSpec.make(sweep="ck", model="mlp", optimizer="adam", schedule="constant", dataset="digits",
                          seed=0, steps=24, batch_size=64, eval_every=12, steps_per_dispatch=4,
                          model_hparams={"width": 16, "depth": 1}, optimizer_hparams={"step_size": 0.01})
    every, d = parse_every(4), str(tmp_path / "ck")
    with pytest.raises(Interrupt):
        trainer.run_trial(spec, measure_perf=False,
                          checkpoints=Interrupting(d, [spec.trial_id], None, every, stop_after=3))
    again = UnitCheckpoints(d, [spec.trial_id], None, every)
    resumed = trainer.run_trial(spec, measure_perf=False, checkpoints=again)
    assert again.resumed_from == 12
    again.release()
    rows = {}
    for name, res in (("resumed", resumed), ("whole", trainer.run_trial(spec, measure_perf=False))):
        write_curves(res, tmp_path / f"{name}.csv")
        with open(tmp_path / f"{name}.csv") as f:
            rows[name] = list(csv.DictReader(f))
    splits = [r["split"] for r in rows["resumed"]]
    assert [splits.count(k) for k in ("train", "valid", "test")] == [24, 3, 1]  # valid at 0, 12, 24
    for a, b in zip(rows["resumed"], rows["whole"], strict=True):
        assert {k: v for k, v in a.items() if k != "wall_s"} == {k: v for k, v in b.items() if k != "wall_s"}
    train_s = [float(r["wall_s"]) for r in rows["resumed"] if r["split"] == "train"]
    assert train_s == sorted(train_s) and train_s[0] > 0  # a clock, carried on across the resume
    page = (ROOT / "docs" / "reliability.md").read_text()
    assert "equals an uninterrupted run's bit for bit in every column but `wall_s`" in page
    assert "equals an uninterrupted run bit for bit;" not in page
