"""``harness.results`` on a store it cannot simply open says so as ``report`` and ``status`` do: a
sound store SQLite cannot open where it lies (its folder not writable: here folders named
``m.db-wal`` / ``m.db-shm`` are in the way, as root ignores a folder's mode) is read as a snapshot
with one warning; a file that is not a store, or a server that does not answer, is one
``TrackingUnavailableError`` line, at once. Before: SQLAlchemy's ``OperationalError: unable to open
database file`` and, after 12.7 s, ``DatabaseError: file is not a database``."""

from __future__ import annotations

import shutil
import sqlite3
import time
import warnings

import pytest
from conftest import TINY_SWEEP

import harness
from harness.results_api import SnapshotWarning
from harness.tracking.store_errors import TrackingUnavailableError
from harness.tracking.store_state import snapshot_warning


def test_a_store_in_a_folder_sqlite_cannot_write_is_read_as_a_snapshot(tmp_path, fake_trainer):
    made = tmp_path / "made" / "m.db"
    made.parent.mkdir()
    harness.sweep(TINY_SWEEP, tracking_uri=f"sqlite:///{made}", quiet=True)
    folder = tmp_path / "shared"
    folder.mkdir()
    db = folder / "m.db"
    with sqlite3.connect(made) as src, sqlite3.connect(db) as dst:
        src.backup(dst)
    dst.close()
    for side in ("m.db-wal", "m.db-shm"):
        (folder / side).unlink(missing_ok=True)
        (folder / side).mkdir()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        res = harness.results("tiny", tracking_uri=f"sqlite:///{db}")
    assert [str(w.message) for w in seen if w.category is SnapshotWarning] == [snapshot_warning(db)]
    assert sorted(res.trials["status"]) == ["finished", "finished"]
    with warnings.catch_warnings(record=True) as seen:  # said to be a snapshot: not tried, no warning
        warnings.simplefilter("always")
        assert len(harness.results("tiny", tracking_uri=f"sqlite:///{db}", immutable=True).trials) == 2
    assert not [w for w in seen if w.category is SnapshotWarning]


def test_a_file_that_is_not_a_store_is_one_line_at_once(tmp_path):
    bad = tmp_path / "notes.db"
    bad.write_bytes(b"these are my notes, not a database\n" * 200)
    t0 = time.perf_counter()
    with pytest.raises(TrackingUnavailableError) as e:
        harness.results("tiny", tracking_uri=f"sqlite:///{bad}")
    assert time.perf_counter() - t0 < 5
    assert len(str(e.value).splitlines()) == 1 and str(bad) in str(e.value), str(e.value)
    assert "not" in str(e.value) and "database" in str(e.value).lower()
    shutil.copyfile(bad, tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == bad.read_bytes()  # left untouched


def test_a_server_that_does_not_answer_is_one_line(tmp_path):
    with pytest.raises(TrackingUnavailableError) as e:
        harness.results("tiny", tracking_uri="http://127.0.0.1:9")
    assert len(str(e.value).splitlines()) == 1, str(e.value)
