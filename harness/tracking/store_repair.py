"""Repairing a store that is behind or half-migrated: a backup, then MLflow's upgrade or a rebuild.

:func:`repair` (a behind or unversioned store, under the creation lock of
:mod:`harness.tracking.store`): a backup copy first (``<name>.backup-YYYYmmdd-HHMMSS``), then
MLflow's own upgrade on a temporary copy; where that fails (a migration half-applied:
``duplicate column name ...``) the schema is built fresh and every row copied over, provided that
loses nothing (every table and column holding data exists in the new schema). The repaired copy is
renamed into place; otherwise :class:`~harness.tracking.store_state.StoreError` says in one line what
to do, the original untouched.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import sqlite3
from pathlib import Path

from harness.tracking.store_build import build, fsync, quiet_migrations
from harness.tracking.store_state import FileState, StoreError, inspect_file, side_dir


def _backup(db: Path) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    dst = db.with_name(f"{db.name}.backup-{stamp}")
    n = 1
    while dst.exists():
        dst = db.with_name(f"{db.name}.backup-{stamp}-{n}")
        n += 1
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    out = sqlite3.connect(str(dst))
    try:
        src.backup(out)  # a consistent copy even if a hot journal was just rolled back
    finally:
        out.close()
        src.close()
    fsync(dst)
    return dst


def _columns(con: sqlite3.Connection, schema: str, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA "{schema}".table_info("{table}")')]


def _copy_rows(old: Path, new: Path) -> int:
    """Copy every row of ``old`` into the fresh schema ``new`` (columns in common). Raises
    :class:`StoreError` where that would lose data. Returns the number of rows copied."""
    con = sqlite3.connect(str(new))
    try:
        con.execute("ATTACH DATABASE ? AS old", (str(old),))
        new_tables = {r[0] for r in con.execute("select name from main.sqlite_master where type='table'")}
        old_tables = {r[0] for r in con.execute("select name from old.sqlite_master where type='table'")}
        skip = {"alembic_version", "sqlite_sequence"}
        lost = []
        for t in sorted(old_tables - skip):
            if t.startswith("_alembic_tmp_"):
                continue
            n = con.execute(f'select count(*) from old."{t}"').fetchone()[0]
            if not n:
                continue
            if t not in new_tables:
                lost.append(f"table {t} ({n} rows)")
                continue
            missing = set(_columns(con, "old", t)) - set(_columns(con, "main", t))
            for c in sorted(missing):
                if con.execute(f'select count(*) from old."{t}" where "{c}" is not null').fetchone()[0]:
                    lost.append(f"column {t}.{c}")
        if lost:
            raise StoreError(f"copying would drop {', '.join(lost[:4])}")
        copied = 0
        for t in sorted((old_tables & new_tables) - skip):
            cols = [c for c in _columns(con, "old", t) if c in set(_columns(con, "main", t))]
            n_old = con.execute(f'select count(*) from old."{t}"').fetchone()[0]
            if not cols or not n_old:
                continue
            names = ", ".join(f'"{c}"' for c in cols)
            con.execute(f'DELETE FROM main."{t}"')  # the migrations' own rows (the default workspace)
            cur = con.execute(f'INSERT INTO main."{t}" ({names}) SELECT {names} FROM old."{t}"')
            copied += max(cur.rowcount, 0)
        con.commit()
        return copied
    except sqlite3.Error as e:
        raise StoreError(f"copying the rows failed ({e})") from None
    finally:
        con.close()


def _upgrade_copy(tmp: Path) -> None:
    """MLflow's own upgrade (``mlflow db upgrade``) on the copy ``tmp``."""
    import sqlalchemy
    from mlflow.store.db import utils

    engine = sqlalchemy.create_engine(f"sqlite:///{tmp}", poolclass=sqlalchemy.pool.NullPool)
    with quiet_migrations():
        try:
            utils._upgrade_db(engine)
        finally:
            engine.dispose()


def repair(db: Path, st: FileState) -> str:
    """Bring a ``behind`` or ``unversioned`` store to MLflow's head revision (caller holds the lock).

    Returns a one-line account (what was done, where the backup is). Raises :class:`StoreError`
    (one line: the state, why it could not be repaired, the backup, what to do); the original file
    is then untouched.
    """
    backup = _backup(db)
    tmp = side_dir(db) / f"creating-{os.getpid()}.db"
    try:
        shutil.copyfile(backup, tmp)
        how = "upgraded with MLflow's migrations"
        try:
            _upgrade_copy(tmp)
            if inspect_file(tmp).kind != "ready":
                raise StoreError("the upgrade did not reach the head revision")
        except Exception as first:  # a migration that was half applied: rebuild and copy the rows
            why = (str(first).strip().splitlines() or [type(first).__name__])[0][:160]
            try:
                build(tmp)
                n = _copy_rows(backup, tmp)
            except StoreError as e:
                raise StoreError(
                    f"the MLflow store {db} is half-migrated ({st.detail or st.kind}) and could not be "
                    f"repaired: MLflow's upgrade failed ({why}) and {e}; the file was left untouched and "
                    f"a copy is at {backup}: restore an older backup, or move it away to start a new "
                    f"store") from None
            how = f"schema rebuilt and {n} rows copied (MLflow's upgrade failed: {why})"
        fsync(tmp)
        os.replace(tmp, db)
        fsync(db.parent, directory=True)
        for suffix in ("-journal", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                db.with_name(db.name + suffix).unlink()
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return f"repaired the MLflow store {db} ({st.detail or st.kind}): {how}; the original is kept at {backup}"


