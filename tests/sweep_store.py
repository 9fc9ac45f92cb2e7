"""Helpers the sweep tests share: a SQLite MLflow store's trial runs read with sqlite3, read-only
(an MLflow client beside a running sweep would take part in creating the store), a sweep started as
a real subprocess in its own session, and a SIGKILL once it has a number of FINISHED trials."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path


def trial_runs(db: Path) -> list[dict]:
    """Every trial run of the store, in start order: ``run_id``, ``status``, ``start`` and its
    ``tags``; ``[]`` while the file or its schema does not exist yet."""
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("select r.run_uuid, r.status, r.start_time from runs r join tags t on "
                           "t.run_uuid = r.run_uuid and t.key = 'harness.kind' and t.value = 'trial' "
                           "order by r.start_time").fetchall()
        tags = "select key, value from tags where run_uuid = ?"
        return [{"run_id": rid, "status": status, "start": start,
                 "tags": dict(con.execute(tags, (rid,)).fetchall())} for rid, status, start in rows]
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


def finished_ids(db: Path) -> list[str]:
    """The trial ids of the FINISHED trial runs, in start order (a trial FINISHED twice: twice)."""
    return [r["tags"]["harness.trial_id"] for r in trial_runs(db) if r["status"] == "FINISHED"]


def start_sweep(argv: list[str], cwd: Path, env: dict) -> subprocess.Popen:
    """``argv`` (a sweep) as a subprocess in a new session (so that a kill takes its workers too),
    stdout discarded, stderr kept for the assertion's message."""
    return subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def kill_when_finished(proc: subprocess.Popen, db: Path, n: int, timeout: float = 300) -> int:
    """SIGKILL ``proc``'s process group once ``db`` holds ``n`` FINISHED trial runs (the sweep must
    still be running then); returns how many it holds after the kill."""
    try:
        t0 = time.time()
        while len(finished_ids(db)) < n and time.time() - t0 < timeout:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return len(finished_ids(db))
