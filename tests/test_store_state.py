"""What an existing SQLite file is: another program's database, even one that keeps an
``alembic_version`` table, is "not an MLflow store", never "written by a newer MLflow"; an MLflow store
whose revision this MLflow does not know is "newer" and says its revision. Files made with sqlite3."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys

import pytest

from harness.tracking import store, store_state


def _make(db, *sql: str) -> str:
    con = sqlite3.connect(db)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()
    return hashlib.sha256(db.read_bytes()).hexdigest()


def _error(db) -> str:
    with pytest.raises(store_state.StoreError) as ei:
        store.ensure_sqlite_store(db)
    return str(ei.value)


def test_other_programs_alembic_database_is_not_an_mlflow_store(tmp_path):
    db = tmp_path / "app.db"
    sha = _make(db, "create table users (id integer primary key, name text)",
                "create table orders (id integer, user_id integer)",
                "create table alembic_version (version_num varchar(32) not null)",
                "insert into alembic_version values ('1f2e3d4c5b6a')")
    st = store_state.inspect_file(db)
    assert (st.kind, st.revision, st.detail) == ("foreign", "1f2e3d4c5b6a",
                                                 "its tables: alembic_version, orders, users")
    assert _error(db) == (f"{db} is not an MLflow store (its tables: alembic_version, orders, users): "
                          f"give --tracking-uri (or MLFLOW_TRACKING_URI) a new file or an MLflow store; "
                          f"the file was left untouched")
    assert hashlib.sha256(db.read_bytes()).hexdigest() == sha


def test_empty_alembic_table_beside_other_tables_is_not_repaired(tmp_path):
    """Before: any alembic_version table made the file "unversioned" and the harness ran MLflow's
    migrations into another program's database."""
    db = tmp_path / "app.db"
    sha = _make(db, "create table notes (x)", "create table alembic_version (version_num varchar(32))")
    assert store_state.inspect_file(db).kind == "foreign"
    assert "is not an MLflow store (its tables: alembic_version, notes)" in _error(db)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == sha


def test_many_tables_are_listed_briefly(tmp_path):
    db = tmp_path / "big.db"
    _make(db, *[f"create table t{i:02d} (x)" for i in range(12)])
    assert store_state.inspect_file(db).detail == (
        "its tables: t00, t01, t02, t03, t04, t05, t06, t07, ... (12 tables)")


def test_mlflow_store_at_an_unknown_revision_is_newer_and_says_it(tmp_path):
    db = tmp_path / "mlflow.db"
    store.ensure_sqlite_store(db)
    sha = _make(db, "update alembic_version set version_num = 'ffffeeee0000'")
    head, ver = store_state.schema_head(), store_state.mlflow_version()
    st = store_state.inspect_file(db)
    assert (st.kind, st.revision) == ("newer", "ffffeeee0000")
    assert _error(db) == (f"the MLflow store {db} was written by a newer MLflow (schema revision "
                          f"ffffeeee0000, newer than MLflow {ver} knows (its newest is {head})); upgrade "
                          f"mlflow, or point --tracking-uri / MLFLOW_TRACKING_URI at another store; the "
                          f"file was left untouched")
    assert hashlib.sha256(db.read_bytes()).hexdigest() == sha


def test_mlflow_creation_killed_after_its_first_table_is_still_repairable(tmp_path):
    db = tmp_path / "mlflow.db"
    _make(db, "create table alembic_version (version_num varchar(32) not null)")
    assert store_state.inspect_file(db).kind == "unversioned"


def test_foreign_alembic_file_through_the_cli_is_one_line_exit_3(tmp_path):
    db = tmp_path / "app.db"
    sha = _make(db, "create table users (id)", "create table alembic_version (version_num varchar(32))",
                "insert into alembic_version values ('abcdef123456')")
    r = subprocess.run([sys.executable, "-m", "harness", "status", "--tracking-uri", f"sqlite:///{db}"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert r.returncode == 3, r.stdout + r.stderr
    assert len(lines) == 1 and "newer" not in lines[0], lines
    assert f"{db} is not an MLflow store (its tables: alembic_version, users): give --tracking-uri" \
        in lines[0]
    assert hashlib.sha256(db.read_bytes()).hexdigest() == sha


def test_reading_the_store_file_keeps_this_processes_sqlite_locks(tmp_path):
    """The harness's own reads of the store file (``inspect_file``'s header, the immutable-flag
    check) while this process has a WAL connection open: another process that then opens and closes
    the store must not take itself for the last connection (checkpoint, delete ``-wal``), or the
    rows this process commits afterwards are lost to every other process. Before the fix, a plain
    ``open()``/``close()`` of the file dropped this process's locks: the other process saw 20,001
    rows, not 25,001."""
    import subprocess
    import sys

    from harness.tracking.health import store_reachable
    from harness.tracking.store_state import inspect_file

    db = tmp_path / "t.db"
    a = sqlite3.connect(db)
    a.execute("PRAGMA journal_mode=WAL")
    a.execute("create table t(x)")
    a.executemany("insert into t values (?)", [(i,) for i in range(20000)])
    a.commit()
    assert inspect_file(db).kind == "foreign"  # read the header (and quick_check) in this process
    assert store_reachable(f"sqlite:///{db}")  # the immutable-flag check opens the file too
    other = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); {}; c.close()"
    subprocess.run([sys.executable, "-c", other.format("c.execute('insert into t values (1)'); c.commit()"),
                    str(db)], check=True)
    assert (tmp_path / "t.db-wal").exists()  # this process's connection still counts
    a.executemany("insert into t values (?)", [(i,) for i in range(5000)])
    a.commit()
    seen = subprocess.run([sys.executable, "-c", other.format("print(c.execute('select count(*) from t')"
                                                              ".fetchone()[0])"), str(db)],
                          check=True, capture_output=True, text=True).stdout.strip()
    assert seen == "25001"
    a.close()


def test_a_sound_store_that_sqlite_cannot_open_where_it_is_is_not_called_corrupt(tmp_path):
    """Found by an attack: a good store in a read-only folder (SQLite must create
    ``-wal``/``-shm`` beside a WAL-mode store even to read it) was "not a usable SQLite database
    ... restore it from a backup or move it away (a new store is then created there)", advice that
    hides the user's results, from `status`, `report` and `sweep` alike. Here SQLite cannot create
    them because folders of their names are in the way (a root user ignores a folder's mode): the
    file reads whole as immutable, so the message (of the commands that write: `status` and `report`
    read it as a snapshot, tests/test_store_snapshot.py) names the folder and says to make it
    writable."""
    from harness.tracking.client import prepare_store

    good = tmp_path / "made" / "m.db"
    good.parent.mkdir()
    prepare_store(f"sqlite:///{good}")
    d = tmp_path / "shared"
    d.mkdir()
    db = d / "m.db"
    db.write_bytes(good.read_bytes())
    (d / "m.db-wal").mkdir()
    (d / "m.db-shm").mkdir()
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    st = store_state.inspect_file(db)
    assert (st.kind, st.revision) == ("unopenable", store_state.schema_head())
    want = (f"SQLite cannot open the MLflow store {db} where it is (SQLite reports: unable to open "
            f"database file), though the file reads whole: it could not create m.db-wal / m.db-shm in "
            f"{d} (a folder that is not writable?), which it needs even to read this store; make the "
            f"folder writable, or copy the store to a writable folder and point --tracking-uri there; "
            f"the file was left untouched")
    assert _error(db) == want
    r = subprocess.run([sys.executable, "-m", "harness", "status", "--tracking-uri", f"sqlite:///{db}"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr.startswith(f"warning: read the MLflow store {db} as a snapshot"), \
        r.stderr
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
    # a file that is not SQLite at all is still corrupt
    bad = d / "bad.db"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x01" * 200)
    assert store_state.inspect_file(bad).kind == "corrupt"


def test_a_damaged_store_sqlite_cannot_open_where_it_is_is_still_corrupt(tmp_path):
    """Found by the review: the "unopenable" check read only the first page, so a damaged store in a
    read-only folder was called sound ("the file reads whole"). It now runs quick_check and wants
    MLflow's tables first; a page of zeros in the middle makes the file corrupt again."""
    from harness.tracking.client import prepare_store

    good = tmp_path / "made" / "m.db"
    good.parent.mkdir()
    prepare_store(f"sqlite:///{good}")
    d = tmp_path / "shared"
    d.mkdir()
    raw = bytearray(good.read_bytes())
    page = int.from_bytes(raw[16:18], "big")
    assert len(raw) >= 8 * page
    raw[4 * page:6 * page] = b"\xff" * (2 * page)  # two pages of the b-trees overwritten
    (d / "m.db").write_bytes(bytes(raw))
    (d / "m.db-wal").mkdir()
    (d / "m.db-shm").mkdir()
    st = store_state.inspect_file(d / "m.db")
    assert st.kind == "corrupt", st


def test_a_store_sqlite_cannot_open_where_it_is_gets_the_checks_of_any_store(tmp_path):
    """One set of checks classifies a file, on the ``mode=ro`` connection or, where SQLite cannot
    open it so, on an ``immutable=1`` one: another program's WAL-mode database in such a folder is
    "not an MLflow store" (before: a second, narrower check on the immutable connection wanted
    MLflow's tables and called it corrupt, advising to move it away)."""
    d = tmp_path / "shared"
    d.mkdir()
    db = d / "app.db"
    sha = _make(db, "PRAGMA journal_mode=WAL", "create table users (id integer primary key, name text)")
    (d / "app.db-wal").mkdir()
    (d / "app.db-shm").mkdir()
    st = store_state.inspect_file(db)
    assert (st.kind, st.detail) == ("foreign", "its tables: users")
    assert _error(db).startswith(f"{db} is not an MLflow store (its tables: users)")
    assert hashlib.sha256(db.read_bytes()).hexdigest() == sha


def test_the_snapshot_warning_says_finished_results_in_an_unread_wal_may_be_missing(tmp_path):
    """A store read as a snapshot with a non-empty ``-wal`` beside it: the attack found a whole
    finished sweep missing from ``status`` and the report while the warning blamed only "another
    process writing right now". It now says finished results may be missing and how to see them."""
    from harness.tracking.store_state import snapshot_warning

    db = tmp_path / "m.db"
    db.write_bytes(b"x")
    (tmp_path / "m.db-wal").write_bytes(b"\0" * 4096)
    line = snapshot_warning(db)
    assert "m.db-wal holds 4096 bytes of commits not yet in the store file, which were not read" in line
    assert "results already finished (whole sweeps, even) may be missing here" in line
    assert "copy m.db and m.db-wal together" in line
