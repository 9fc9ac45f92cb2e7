"""A sound MLflow store SQLite cannot open where it lies (a colleague's results, an archive on a
read-only mount: SQLite cannot create the ``-wal``/``-shm`` files a WAL-mode store needs even to be
read): ``status`` and ``report``, which only read, read it as an immutable snapshot and say so in
one warning line; ``sweep``, which writes, refuses it as before (exit 3). Before, all three stopped
with exit 3. The store is made by a real sweep, the commands are real ``python -m harness``
processes, and the folder is made unopenable by folders named ``m.db-wal`` and ``m.db-shm`` in the
way (as ``tests/test_store_state.py`` does: root ignores a folder's mode)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import TINY_SWEEP

ROOT = Path(__file__).resolve().parents[1]


def _harness(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's harness, wherever cwd is
    return subprocess.run([sys.executable, "-m", "harness", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> dict:
    """A 2-trial sweep's store, copied into a folder where SQLite cannot open it (its artifacts
    stay where the sweep wrote them); the config, the store and the snapshot warning."""
    d = tmp_path_factory.mktemp("snapshot")
    cfg = d / "sweep.yaml"
    cfg.write_text(yaml.safe_dump(TINY_SWEEP, sort_keys=False))
    (d / "made").mkdir()
    r = _harness("sweep", str(cfg), "-q", "--tracking-uri", f"sqlite:///{d / 'made' / 'm.db'}", cwd=d)
    assert r.returncode == 0, r.stderr[-3000:]
    folder = d / "shared"
    folder.mkdir()
    db = folder / "m.db"
    shutil.copyfile(d / "made" / "m.db", db)
    (folder / "m.db-wal").mkdir()
    (folder / "m.db-shm").mkdir()
    warning = (f"warning: read the MLflow store {db} as a snapshot (SQLite's immutable mode): SQLite "
               f"cannot open it where it is, since it cannot create m.db-wal / m.db-shm in {folder} (a "
               f"folder that is not writable?); results another process is writing to it right now "
               f"may be missing")
    return {"dir": d, "cfg": cfg, "db": db, "uri": f"sqlite:///{db}", "warning": warning,
            "digest": hashlib.sha256(db.read_bytes()).hexdigest()}


def _untouched(s: dict) -> None:
    assert hashlib.sha256(s["db"].read_bytes()).hexdigest() == s["digest"]
    assert sorted(os.listdir(s["db"].parent)) == ["m.db", "m.db-shm", "m.db-wal"]  # nothing created


def test_status_reads_the_store_as_a_snapshot(shared):
    r = _harness("status", "--tracking-uri", shared["uri"], cwd=shared["dir"])
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines() == [shared["warning"]]
    lines = r.stdout.splitlines()  # not a terminal: one block per sweep
    block = lines[lines.index("tiny") + 1:]
    assert [b.strip() for b in block[1:6]] == ["trials: 2", "finished: 2", "diverged: 0", "failed: 0",
                                               "pending: 0"], r.stdout
    assert "(FINISHED)" in block[6]
    _untouched(shared)


def test_report_reads_the_store_as_a_snapshot_and_writes_where_it_normally_does(shared, tmp_path):
    r = _harness("report", "-e", "tiny", "--tracking-uri", shared["uri"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith(("warning", "error"))] == [
        shared["warning"] + "; the report is not logged to it"]
    html = [p for p in tmp_path.iterdir() if p.suffix == ".html"]
    assert len(html) == 1 and html[0].name.startswith("report-tiny-"), r.stdout
    assert "</html>" in html[0].read_text(encoding="utf-8")[-200:]
    assert html[0].with_suffix(".csv.gz").stat().st_size > 0
    assert r.stdout.splitlines()[0].startswith(f"report: {html[0]} (")
    assert "logged" not in r.stdout
    r = _harness("report", "-e", "tiny", "-f", "md", "--tracking-uri", shared["uri"], cwd=tmp_path)
    assert r.returncode == 0 and r.stderr.strip().splitlines() == [shared["warning"]], r.stderr
    assert "| sgd" in next(tmp_path.glob("report-tiny-*.md")).read_text()
    _untouched(shared)


def test_report_says_where_to_write_when_its_output_cannot_be_written(shared, tmp_path):
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    r = _harness("report", "-e", "tiny", "-o", str(blocked / "r.html"), "--tracking-uri", shared["uri"],
                 cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: cannot write {blocked / 'r.html'} (File exists: {blocked}); write it elsewhere with -o "
        f"PATH (--output), e.g. -o {Path.home() / 'r.html'}")
    _untouched(shared)


def test_sweep_still_refuses_the_store(shared):
    r = _harness("sweep", str(shared["cfg"]), "-q", "--tracking-uri", shared["uri"], cwd=shared["dir"])
    db, folder = shared["db"], shared["db"].parent
    assert r.returncode == 3, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: SQLite cannot open the MLflow store {db} where it is (SQLite reports: unable to open "
        f"database file), though the file reads whole: it could not create m.db-wal / m.db-shm in "
        f"{folder} (a folder that is not writable?), which it needs even to read this store; make the "
        f"folder writable, or copy the store to a writable folder and point --tracking-uri there; the "
        f"file was left untouched")
    _untouched(shared)
