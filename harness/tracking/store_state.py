"""What an SQLite file is, read without writing to it: a ready MLflow store, or why it is not.

:func:`inspect_file` classifies an existing file: ready (schema at MLflow's head revision), empty,
behind (a known older revision: an old store or a half-migrated one), unversioned (MLflow tables but
no revision: killed before the first revision was stamped), newer (a revision this MLflow does not
know), foreign (SQLite, not MLflow), corrupt (not SQLite, truncated, malformed) or unopenable (a
sound file SQLite cannot open where it is: it cannot create its ``-wal``/``-shm`` files beside it,
e.g. in a folder that is not writable; the same checks classify it, on an ``immutable=1``
connection; ``status`` and ``report`` read such a store as a snapshot, :func:`snapshot_warning`).
Costs: the header, the page count and ``PRAGMA quick_check`` (skipped for files over
:data:`QUICK_CHECK_MAX_BYTES`). Also the store's side directory (:func:`side_dir`: creation lock,
temporary files, trial claims) and :class:`StoreError`, the one-line error for the user (the CLI
exits 3 on it). See :mod:`harness.tracking.store` for how a store is created and repaired.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from harness.core.mlflow_rows import immutable_uri

SQLITE_HEADER = b"SQLite format 3\x00"
#: ``PRAGMA quick_check`` reads every page (~0.1 s per 20 MB here); larger files skip it.
QUICK_CHECK_MAX_BYTES = 256 * 2**20
#: How long an invocation waits for another one that holds the creation lock.
LOCK_WAIT_S = 600.0


class StoreError(RuntimeError):
    """The SQLite store cannot be used as it is; the message is one line that says what to do."""


class UnopenableStoreError(StoreError):
    """The store is ``unopenable``: sound, but SQLite cannot open it where it is. The commands that
    only read (``status``, ``report``) read it as an immutable snapshot instead
    (:func:`snapshot_warning`); those that write stop on it."""


# --------------------------------------------------------------------------- paths


def side_dir(db: Path) -> Path:
    """``<dir>/.<name>.harness``: the creation lock, temporary files and trial claims of ``db``."""
    return db.parent / f".{db.name}.harness"


def lock_path(db: Path) -> Path:
    """The creation lock of ``db`` (a ``filelock`` file in :func:`side_dir`)."""
    return side_dir(db) / "create.lock"


# --------------------------------------------------------------------------- MLflow's schema

#: Tables every MLflow tracking store has since its first schema revision.
MLFLOW_TABLES = frozenset({"experiments", "runs", "metrics", "params", "tags"})


_HEAD: list[str] = []
_KNOWN: set[str] = set()


def schema_head() -> str:
    """MLflow's latest schema revision (alembic head), e.g. ``dc11669786a5`` for MLflow 3.17.2.

    Read from MLflow's migration scripts once per MLflow version on a machine (importing mlflow,
    alembic and every script is slow) and kept with the known revisions in
    ``$HARNESS_CACHE_DIR/mlflow-schema/<version>.json``, so that ``status`` and the other readers
    start without importing MLflow.
    """
    if not _HEAD:
        from importlib.metadata import version

        from harness.core.cache_files import cache_dir

        cached = cache_dir("mlflow-schema", f"{version('mlflow')}.json")
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            got = json.loads(cached.read_text())
            _KNOWN.update(got["known"])
            _HEAD.append(str(got["head"]))
            return _HEAD[0]
        from alembic.script import ScriptDirectory
        from mlflow.store.db.utils import _get_alembic_config

        script = ScriptDirectory.from_config(_get_alembic_config(db_url=""))
        heads = script.get_heads()
        if len(heads) != 1:  # MLflow itself refuses this state
            raise StoreError(f"MLflow's migration scripts have {len(heads)} heads {heads}; reinstall mlflow")
        _HEAD.append(heads[0])
        _KNOWN.update(r.revision for r in script.walk_revisions())
        with contextlib.suppress(OSError):  # written whole, then renamed: never half a file
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"head": _HEAD[0], "known": sorted(_KNOWN)}))
            os.replace(tmp, cached)
    return _HEAD[0]


def known_revisions() -> set[str]:
    """Every schema revision MLflow's migration scripts know (imports alembic and mlflow)."""
    schema_head()
    return _KNOWN


# --------------------------------------------------------------------------- inspection


@dataclass(frozen=True)
class FileState:
    """What :func:`inspect_file` found. ``kind`` is one of ``missing``, ``empty``, ``ready``,
    ``behind``, ``unversioned``, ``newer``, ``foreign``, ``corrupt``, ``unopenable``
    (:data:`UNUSABLE`: those a store refuses); ``revision`` the schema
    revision stored in ``alembic_version`` (or ``None``); ``detail`` a short reason."""

    kind: str
    revision: str | None = None
    detail: str = ""


#: The kinds of :class:`FileState` no command uses (:func:`unusable_error` says why, in one line).
UNUSABLE = ("corrupt", "foreign", "newer", "unopenable")


def _hot_journal(db: Path) -> bool:
    for suffix in ("-journal", "-wal"):
        p = db.with_name(db.name + suffix)
        with contextlib.suppress(OSError):
            if p.stat().st_size > 0:
                return True
    return False


#: ``(st_dev, st_ino)`` → a descriptor of that store file, opened once and never closed.
_HELD: dict[tuple[int, int], int] = {}


def held_fd(path: Path) -> int:
    """A read-only descriptor of the store file ``path`` that this process keeps open until it exits.

    Closing *any* descriptor of a file drops every POSIX lock this process holds on it, SQLite's
    included: a header read with ``open()``/``close()`` while the sweep's connections are open lets
    another process believe it holds the last connection of a WAL store, checkpoint it and delete
    its ``-wal`` file, and the commits this process makes afterwards go to the deleted file (lost;
    shown by ``tests/test_store_state.py``). SQLite itself defers such closes; this is the same rule
    for the harness's own reads (the header here, the immutable flag in
    :mod:`harness.tracking.health`).

    Raises:
      OSError: the file cannot be opened.
    """
    with contextlib.suppress(OSError):
        st = os.stat(path)
        if (fd := _HELD.get((st.st_dev, st.st_ino))) is not None:
            return fd
    fd = os.open(path, os.O_RDONLY)
    st = os.fstat(fd)
    return _HELD.setdefault((st.st_dev, st.st_ino), fd)  # a second one (a race) stays open too


def _header_problem(db: Path, size: int) -> str | None:
    """Why the first 100 bytes say the file is not a complete SQLite database, or ``None``."""
    head = os.pread(held_fd(db), 100, 0)
    if not head.startswith(SQLITE_HEADER):
        return f"its first bytes are {head[:16]!r}, not an SQLite header"
    if len(head) < 100:
        return f"it has only {size} bytes"
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    n_pages = int.from_bytes(head[28:32], "big")
    counter, valid_for = head[24:28], head[92:96]
    if page < 512 or page & (page - 1):
        return f"its header gives an impossible page size {page}"
    if n_pages and counter == valid_for and not _hot_journal(db) and size < n_pages * page:
        return f"it is truncated: {size} bytes where its header says {n_pages * page}"
    return None


def _contents(con: sqlite3.Connection, size: int) -> tuple[set[str], str | None] | FileState:
    """The tables and schema revision read on ``con``, or ``corrupt`` when ``PRAGMA quick_check``
    finds damage (files over :data:`QUICK_CHECK_MAX_BYTES` are not checked).

    Raises:
      sqlite3.Error: SQLite could not read it.
    """
    tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
    if size <= QUICK_CHECK_MAX_BYTES:
        rows = [r[0] for r in con.execute("PRAGMA quick_check(3)")]
        if rows != ["ok"]:
            text = " ".join("; ".join(rows).split())  # its rows hold line breaks
            return FileState("corrupt", detail=f"SQLite's quick_check reports: {text[:200]}")
    rev = None
    if "alembic_version" in tables:
        row = con.execute("select version_num from alembic_version").fetchone()
        rev = row[0] if row else None
    return tables, rev


def _read(uri: str, size: int) -> tuple[set[str], str | None] | FileState:
    """:func:`_contents` on a connection to ``uri``.

    Raises:
      sqlite3.Error: SQLite could not open or read it.
    """
    con = sqlite3.connect(uri, uri=True, timeout=30)
    try:
        return _contents(con, size)
    finally:
        con.close()


def _reports(e: sqlite3.Error) -> str:
    return f"SQLite reports: {' '.join(str(e).split())[:200]}"


def inspect_file(db: Path) -> FileState:
    """Classify the file ``db`` without writing to it (see the module docstring).

    Read on a ``mode=ro`` connection; where SQLite cannot open the file so (``unable to open
    database file``: it cannot create the ``-wal``/``-shm`` files a WAL-mode store needs even to be
    read, e.g. in a folder that is not writable), on an ``immutable=1`` one, which reads the file
    alone. The same checks classify it on either; a file only the immutable connection reads is
    ``unopenable`` unless they find it corrupt, foreign or newer (a sound store in a
    read-only folder is not called unusable).
    """
    try:
        size = db.stat().st_size
    except FileNotFoundError:
        return FileState("missing")
    if size == 0:
        return FileState("empty", detail="0 bytes")
    try:
        problem = _header_problem(db, size)
    except OSError as e:
        return FileState("corrupt", detail=f"it cannot be read ({e.strerror or e})")
    if problem:
        return FileState("corrupt", detail=problem)
    mode = "rw" if _hot_journal(db) else "ro"  # a hot journal is rolled back by the first reader
    refused = None  # why the mode=ro connection could not open it
    try:
        got = _read(f"file:{db}?mode={mode}", size)
    except sqlite3.Error as e:
        if "unable to open database file" not in str(e):
            return FileState("corrupt", detail=_reports(e))
        refused = e
        try:
            got = _read(immutable_uri(db), size)
        except sqlite3.Error:
            return FileState("corrupt", detail=_reports(refused))
    st = got if isinstance(got, FileState) else _kind(*got)
    if refused is None or st.kind in UNUSABLE:
        return st
    return FileState("unopenable", st.revision, _reports(refused))


def _kind(tables: set[str], rev: str | None) -> FileState:
    """What a file with ``tables`` and schema revision ``rev`` is (:class:`FileState`)."""
    if not tables:
        return FileState("empty", detail="no tables")
    # Another program's database is never repaired nor called "newer", whatever alembic_version it
    # holds (alembic is common): a revision MLflow does not know counts as a newer MLflow's only in a
    # file with MLflow's tables; no revision, only in a file with MLflow's experiments table or with
    # nothing but the alembic_version table its migration creates first (a creation killed at once).
    foreign = FileState("foreign", rev, f"its tables: {_table_list(tables)}")
    if rev is None:
        if "experiments" in tables or tables == {"alembic_version"}:
            return FileState("unversioned", detail="MLflow tables without a schema revision")
        return foreign
    if rev == schema_head():
        return FileState("ready", rev)
    if rev in known_revisions():
        return FileState("behind", rev, f"schema revision {rev}, MLflow {mlflow_version()} needs "
                                        f"{schema_head()}")
    if not tables >= MLFLOW_TABLES:
        return foreign
    return FileState("newer", rev, f"schema revision {rev}, newer than MLflow {mlflow_version()} knows "
                                   f"(its newest is {schema_head()})")


def _table_list(tables: set[str], most: int = 8) -> str:
    names = sorted(tables)
    more = f", ... ({len(names)} tables)" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def mlflow_version() -> str:
    """The installed MLflow's version (imports mlflow)."""
    import mlflow

    return mlflow.__version__


def unusable_error(db: Path, st: FileState) -> StoreError:
    """The one-line error for a file of a kind in :data:`UNUSABLE` (which is left untouched)."""
    if st.kind == "newer":
        return StoreError(f"the MLflow store {db} was written by a newer MLflow ({st.detail}); upgrade "
                          f"mlflow, or point --tracking-uri / MLFLOW_TRACKING_URI at another store; the "
                          f"file was left untouched")
    if st.kind == "foreign":
        return StoreError(f"{db} is not an MLflow store ({st.detail}): give --tracking-uri (or "
                          f"MLFLOW_TRACKING_URI) a new file or an MLflow store; the file was left "
                          f"untouched")
    if st.kind == "unopenable":
        return UnopenableStoreError(f"SQLite cannot open the MLflow store {db} where it is ({st.detail}), "
                               f"though the file reads whole: it could not create {db.name}-wal / "
                               f"{db.name}-shm in {db.parent} (a folder that is not writable?), which it "
                               f"needs even to read this store; make the folder writable, or copy the "
                               f"store to a writable folder and point --tracking-uri there; the file was "
                               f"left untouched")
    return StoreError(f"{db} is not a usable SQLite database ({st.detail}); restore it from a backup or "
                      f"move it away (a new store is then created there), or point --tracking-uri / "
                      f"MLFLOW_TRACKING_URI at another store; the file was left untouched")




def snapshot_warning(db: Path) -> str:
    """The one line a reader prints when it reads the ``unopenable`` store ``db`` through
    :func:`immutable_uri`: that it read a snapshot, why, and what that may miss."""
    wal = db.with_name(db.name + "-wal")
    unread = ""
    with contextlib.suppress(OSError):
        if wal.is_file() and (n := wal.stat().st_size) > 0:
            unread = (f"; {wal.name} holds {n} bytes of commits not yet in the store file, which were not "
                      f"read: results already finished (whole sweeps, even) may be missing here; make "
                      f"the folder writable, or copy {db.name} and {wal.name} together to one that is")
    return (f"read the MLflow store {db} as a snapshot (SQLite's immutable mode): SQLite cannot open it "
            f"where it is, since it cannot create {db.name}-wal / {db.name}-shm in {db.parent} (a "
            f"folder that is not writable?); results another process is writing to it right now may be "
            f"missing{unread}")
