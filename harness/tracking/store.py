"""The default SQLite store: atomic, exclusive creation, validation, repair, and per-trial claims.

MLflow creates a SQLite store by running its alembic migrations in place (1,668 statements, 2 s on
a quiet 2-core machine, over 15 s on a loaded one). SQLite's Python driver commits every DDL
statement on its own, so a process killed in that window leaves a half-migrated file that neither
MLflow nor ``mlflow db upgrade`` can open, and several processes opening a new file at once race
each other's migrations. This module makes creation atomic and exclusive:

- :func:`ensure_sqlite_store` takes an exclusive lock (``filelock``) on ``create.lock`` in the
  store's side directory ``.<name>.harness/`` (beside the database file), builds the complete
  schema in a temporary file in that directory, and links it into place only when complete
  (``os.link``: never over a file that appeared meanwhile). Other invocations (and ``status``,
  ``report``, ``ui``) wait for the lock instead of opening a file being created. A SIGKILL at any
  moment leaves either no store (the next invocation creates it) or a complete one.
- The schema is MLflow's own: the first store of an MLflow version on a machine runs MLflow's
  migrations (``mlflow.store.db.utils._initialize_tables``) into a template
  (``$HARNESS_CACHE_DIR/mlflow-schema/<mlflow version>-<schema head>.db``, itself built in a
  temporary file and renamed); later stores copy that template (milliseconds instead of seconds).
  The template holds only what the migrations write (the tables, ``alembic_version`` and the
  ``default`` workspace row); MLflow adds the ``Default`` experiment when it first opens the store,
  exactly as for a store it creates itself. ``HARNESS_STORE_TEMPLATE=0`` migrates every new store.
- :func:`inspect_file` classifies an existing file without writing to it: ready (schema at
  MLflow's head revision), empty, behind (a known older revision: an old store or a half-migrated
  one), unversioned (MLflow tables but no revision: killed before the first revision was stamped),
  newer (a revision this MLflow does not know), foreign (SQLite, not MLflow) or corrupt (not SQLite,
  truncated, malformed). Costs: the header, the page count and ``PRAGMA quick_check`` (skipped for
  files over :data:`QUICK_CHECK_MAX_BYTES`).
- :func:`repair` (a behind or unversioned store, under the lock): a backup copy first
  (``<name>.backup-YYYYmmdd-HHMMSS``), then MLflow's own upgrade on a temporary copy; where that
  fails (a migration half-applied: ``duplicate column name ...``) the schema is built fresh and every
  row copied over, provided that loses nothing (every table and column holding data exists in the
  new schema). The repaired copy is renamed into place; otherwise :class:`StoreError` says in one
  line what to do, the original untouched.
- :class:`Claim`: an advisory lock per trial (``fcntl.flock`` on ``claims/<trial_id>`` in the side
  directory) that concurrent invocations on one machine take before training a trial, so that no
  trial is trained twice. The file's text is a marker written by the holder before it writes the
  trial's run (``writing``, then ``done <run id>``, ``spooled`` or ``failed``): a process that takes
  a claim whose marker is empty knows no run of that trial was written since the claim files exist,
  and trains without asking the store; any other marker sends it to the store (and the spool) first.

Errors for the user are :class:`StoreError` (one line, with what to do); the CLI maps them to exit 3.
Test-only hook (never set it otherwise): ``HARNESS_TEST_KILL_AT`` makes the process SIGKILL itself
at one point of store creation, so the fault suite can kill it at exact places: ``stmt:N`` (before
the N-th SQL statement of a migration, 1-based; :data:`LAST_MIGRATION` counts a whole one) or a
stage: ``locked`` (lock held, nothing built), ``built`` (temporary file complete, not yet synced),
``before_link``, ``linked`` (store in place, temporary file not yet removed), ``unlocked``.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SQLITE_HEADER = b"SQLite format 3\x00"
#: ``PRAGMA quick_check`` reads every page (~0.1 s per 20 MB here); larger files skip it.
QUICK_CHECK_MAX_BYTES = 256 * 2**20
#: How long an invocation waits for another one that holds the creation lock.
LOCK_WAIT_S = 600.0


class StoreError(RuntimeError):
    """The SQLite store cannot be used as it is; the message is one line that says what to do."""


# --------------------------------------------------------------------------- paths


def side_dir(db: Path) -> Path:
    """``<dir>/.<name>.harness``: the creation lock, temporary files and trial claims of ``db``."""
    return db.parent / f".{db.name}.harness"


def lock_path(db: Path) -> Path:
    return side_dir(db) / "create.lock"


def _owner_path(db: Path) -> Path:
    return side_dir(db) / "create.owner"


# --------------------------------------------------------------------------- MLflow's schema


_HEAD: list[str] = []
_KNOWN: set[str] = set()


def schema_head() -> str:
    """MLflow's latest schema revision (alembic head), e.g. ``dc11669786a5`` for MLflow 3.17.2."""
    if not _HEAD:
        from alembic.script import ScriptDirectory
        from mlflow.store.db.utils import _get_alembic_config

        script = ScriptDirectory.from_config(_get_alembic_config(db_url=""))
        heads = script.get_heads()
        if len(heads) != 1:  # MLflow itself refuses this state
            raise StoreError(f"MLflow's migration scripts have {len(heads)} heads {heads}; reinstall mlflow")
        _HEAD.append(heads[0])
        _KNOWN.update(r.revision for r in script.walk_revisions())
    return _HEAD[0]


def known_revisions() -> set[str]:
    schema_head()
    return _KNOWN


# --------------------------------------------------------------------------- inspection


@dataclass(frozen=True)
class FileState:
    """What :func:`inspect_file` found. ``kind`` is one of ``missing``, ``empty``, ``ready``,
    ``behind``, ``unversioned``, ``newer``, ``foreign``, ``corrupt``; ``revision`` the schema
    revision stored in ``alembic_version`` (or ``None``); ``detail`` a short reason."""

    kind: str
    revision: str | None = None
    detail: str = ""


def _hot_journal(db: Path) -> bool:
    for suffix in ("-journal", "-wal"):
        p = db.with_name(db.name + suffix)
        with contextlib.suppress(OSError):
            if p.stat().st_size > 0:
                return True
    return False


def _header_problem(db: Path, size: int) -> str | None:
    """Why the first 100 bytes say the file is not a complete SQLite database, or ``None``."""
    with db.open("rb") as f:
        head = f.read(100)
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


def inspect_file(db: Path) -> FileState:
    """Classify the file ``db`` without writing to it (see the module docstring)."""
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
    try:
        con = sqlite3.connect(f"file:{db}?mode={mode}", uri=True, timeout=30)
    except sqlite3.Error as e:
        return FileState("corrupt", detail=f"SQLite cannot open it ({e})")
    try:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
        if size <= QUICK_CHECK_MAX_BYTES:
            rows = [r[0] for r in con.execute("PRAGMA quick_check(3)")]
            if rows != ["ok"]:
                text = " ".join("; ".join(rows).split())  # its rows hold line breaks
                return FileState("corrupt", detail=f"SQLite's quick_check reports: {text[:200]}")
        if not tables:
            return FileState("empty", detail="no tables")
        rev = None
        if "alembic_version" in tables:
            row = con.execute("select version_num from alembic_version").fetchone()
            rev = row[0] if row else None
    except sqlite3.DatabaseError as e:
        return FileState("corrupt", detail=f"SQLite reports: {' '.join(str(e).split())[:200]}")
    finally:
        con.close()
    if rev is None:
        if "experiments" in tables or "alembic_version" in tables:
            return FileState("unversioned", detail="MLflow tables without a schema revision")
        return FileState("foreign", detail=f"its tables ({', '.join(sorted(tables)[:5])}) are not MLflow's")
    if rev == schema_head():
        return FileState("ready", rev)
    if rev in known_revisions():
        return FileState("behind", rev, f"schema revision {rev}, MLflow {_mlflow_version()} needs "
                                        f"{schema_head()}")
    return FileState("newer", rev, f"schema revision {rev} is unknown to MLflow {_mlflow_version()}")


def _mlflow_version() -> str:
    import mlflow

    return mlflow.__version__


def _unusable(db: Path, st: FileState) -> StoreError:
    if st.kind == "newer":
        return StoreError(f"the MLflow store {db} was written by a newer MLflow ({st.detail}); upgrade "
                          f"mlflow, or point --tracking-uri / MLFLOW_TRACKING_URI at another store; the "
                          f"file was left untouched")
    what = "is not an MLflow store" if st.kind == "foreign" else "is not a usable SQLite database"
    return StoreError(f"{db} {what} ({st.detail}); restore it from a backup or move it away (a new "
                      f"store is then created there), or point --tracking-uri / MLFLOW_TRACKING_URI "
                      f"at another store; the file was left untouched")


# --------------------------------------------------------------------------- building


def _test_point(stage: str) -> None:
    if os.environ.get("HARNESS_TEST_KILL_AT") == stage:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


#: SQL statements run by the last :func:`migrate` of this process (1,668 for MLflow 3.17.2).
LAST_MIGRATION = [0]


def _fsync(path: Path, *, directory: bool = False) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def migrate(path: Path) -> None:
    """Run MLflow's migrations into the new file ``path`` (which must not be in use elsewhere).

    The connection uses ``synchronous=OFF`` and an in-memory journal: safe because the file is
    discarded unless complete, and ~2.5x faster than MLflow's defaults here. The caller fsyncs it.
    """
    import sqlalchemy
    from mlflow.store.db import utils

    engine = sqlalchemy.create_engine(f"sqlite:///{path}", poolclass=sqlalchemy.pool.NullPool)
    kill_at = os.environ.get("HARNESS_TEST_KILL_AT", "")
    LAST_MIGRATION[0] = 0

    @sqlalchemy.event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):
        dbapi_conn.execute("PRAGMA synchronous=OFF")
        dbapi_conn.execute("PRAGMA journal_mode=MEMORY")

    @sqlalchemy.event.listens_for(engine, "before_cursor_execute")
    def _count(*_args):
        LAST_MIGRATION[0] += 1
        if kill_at.startswith("stmt:"):
            _test_point(f"stmt:{LAST_MIGRATION[0]}")

    with _quiet_migrations():
        try:
            utils._initialize_tables(engine)
        finally:
            engine.dispose()


@contextlib.contextmanager
def _quiet_migrations():
    """Silence alembic's and MLflow's INFO lines about migrations ("Running upgrade ..." x60)."""
    import logging

    loggers = [logging.getLogger(n) for n in ("alembic", "mlflow.store.db.utils")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, lv in zip(loggers, levels, strict=True):
            lg.setLevel(lv)


def _template_enabled() -> bool:
    return os.environ.get("HARNESS_STORE_TEMPLATE", "1").lower() not in ("0", "false", "no", "off")


def template_path() -> Path:
    from harness.core.util import cache_dir

    return cache_dir() / "mlflow-schema" / f"{_mlflow_version()}-{schema_head()}.db"


def _template() -> Path | None:
    """The cached fresh schema of this MLflow version (built on first use), or ``None`` where the
    cache is disabled or cannot be written (the caller then migrates in place of copying)."""
    if not _template_enabled():
        return None
    from filelock import FileLock, Timeout

    try:
        tpl = template_path()
        if inspect_file(tpl).kind == "ready":
            return tpl
        tpl.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(tpl) + ".lock", timeout=LOCK_WAIT_S):
            if inspect_file(tpl).kind == "ready":
                return tpl
            tmp = tpl.with_name(f"{tpl.name}.{os.getpid()}.tmp")
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            try:
                migrate(tmp)
                _fsync(tmp)
                os.replace(tmp, tpl)
                _fsync(tpl.parent, directory=True)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
        return tpl if inspect_file(tpl).kind == "ready" else None
    except (OSError, Timeout, sqlite3.Error):
        return None


def _build(tmp: Path) -> None:
    """A complete fresh store at ``tmp``: a copy of the template, else MLflow's migrations."""
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tpl = _template()
    if tpl is not None:
        shutil.copyfile(tpl, tmp)
    else:
        migrate(tmp)
    _test_point("built")
    _fsync(tmp)
    st = inspect_file(tmp)
    if st.kind != "ready":  # never link an incomplete schema into place
        raise StoreError(f"building a new MLflow store in {tmp} gave {st.kind} ({st.detail})")


def _clean_temporaries(db: Path) -> None:
    """Remove temporary files of earlier creators (the caller holds the lock: they are dead)."""
    for p in side_dir(db).glob("creating-*.db*"):
        with contextlib.suppress(OSError):
            p.unlink()


def _clean_dead_temporaries(db: Path) -> None:
    """Remove ``creating-<pid>.db`` files of creators that are gone (killed after the link)."""
    try:
        found = list(side_dir(db).glob("creating-*.db"))
    except OSError:
        return
    for p in found:
        pid = p.stem.rpartition("-")[2]
        if pid.isdigit() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                p.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _create(db: Path, wait_s: float) -> None:
    _clean_temporaries(db)
    tmp = side_dir(db) / f"creating-{os.getpid()}.db"
    try:
        _build(tmp)
        _test_point("before_link")
        try:
            os.link(tmp, db)  # atomic, and never over a file that appeared meanwhile
        except FileExistsError:
            st = inspect_file(db)
            if st.kind == "empty":  # e.g. `touch mlflow.db`, or a plain MLflow that just opened it
                os.replace(tmp, db)
            else:  # a process outside the harness created it meanwhile: use it once complete
                _wait_until_ready(db, wait_s)
        except OSError:  # a filesystem without hard links
            if db.exists():
                raise
            os.replace(tmp, db)
        _fsync(db.parent, directory=True)
        _test_point("linked")
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _wait_until_ready(db: Path, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        st = inspect_file(db)
        if st.kind == "ready":
            return
        if st.kind in ("corrupt", "foreign", "newer"):
            raise _unusable(db, st)
        if time.monotonic() > deadline:
            raise StoreError(f"the MLflow store {db} stayed {st.kind} ({st.detail}) for {wait_s:.0f} s "
                             f"while another program created it; stop that program, then re-run")
        time.sleep(0.2)


# --------------------------------------------------------------------------- repair


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
    _fsync(dst)
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
    with _quiet_migrations():
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
                _build(tmp)
                n = _copy_rows(backup, tmp)
            except StoreError as e:
                raise StoreError(
                    f"the MLflow store {db} is half-migrated ({st.detail or st.kind}) and could not be "
                    f"repaired: MLflow's upgrade failed ({why}) and {e}; the file was left untouched and "
                    f"a copy is at {backup}: restore an older backup, or move it away to start a new "
                    f"store") from None
            how = f"schema rebuilt and {n} rows copied (MLflow's upgrade failed: {why})"
        _fsync(tmp)
        os.replace(tmp, db)
        _fsync(db.parent, directory=True)
        for suffix in ("-journal", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                db.with_name(db.name + suffix).unlink()
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return f"repaired the MLflow store {db} ({st.detail or st.kind}): {how}; the original is kept at {backup}"


# --------------------------------------------------------------------------- the entry point


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _holder(db: Path) -> str:
    with contextlib.suppress(OSError):
        return _owner_path(db).read_text().strip()
    return "another process"


@contextlib.contextmanager
def _creation_lock(db: Path, wait_s: float, say):
    from filelock import FileLock, Timeout

    lock = FileLock(str(lock_path(db)), timeout=wait_s)
    try:
        lock.acquire(timeout=1.0)
    except Timeout:
        say(f"waiting for {_holder(db)}, which is creating or repairing the MLflow store {db} ...")
        try:
            lock.acquire(timeout=wait_s)
        except Timeout:
            raise StoreError(f"timed out after {wait_s:.0f} s waiting for {_holder(db)} to finish creating "
                             f"the MLflow store {db}; if it is stuck, stop it and re-run") from None
    try:
        with contextlib.suppress(OSError):
            _owner_path(db).write_text(f"pid {os.getpid()}\n")
        _test_point("locked")
        yield
    finally:
        with contextlib.suppress(OSError):
            _owner_path(db).unlink()
        lock.release()
    _test_point("unlocked")


def ensure_sqlite_store(db: str | Path, *, create: bool = True, wait_s: float = LOCK_WAIT_S,
                        say=_say) -> str | None:
    """Make ``db`` a complete MLflow store at MLflow's head revision, or raise :class:`StoreError`.

    ``create=False`` (read-only commands): a missing file is an error (``no MLflow store at ...``)
    unless another process holds the creation lock, which is then waited for; nothing is created.
    A half-migrated store is repaired in both modes (see :func:`repair`). ``say`` gets one-line
    notes (waiting, repaired). Returns the repair account, or ``None``.
    """
    db = Path(db)
    st = inspect_file(db)
    if st.kind == "ready":
        _clean_dead_temporaries(db)
        return None
    if st.kind in ("corrupt", "foreign", "newer"):
        raise _unusable(db, st)
    if not create and st.kind in ("missing", "empty"):
        if lock_path(db).exists():  # being created right now: wait for it, create nothing
            with _creation_lock(db, wait_s, say):
                pass
            st = inspect_file(db)
        if st.kind == "ready":
            return None
        if st.kind in ("missing", "empty"):
            raise StoreError(f"no MLflow store at {db}: run a sweep here first (python -m harness sweep "
                             f"experiments/quickstart.yaml) or point --tracking-uri / MLFLOW_TRACKING_URI "
                             f"at your store")
    try:
        side_dir(db).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create the MLflow store's directory {side_dir(db)} ({e.strerror or e}); "
                         f"run from a writable directory or point --tracking-uri elsewhere") from None
    note = None
    try:
        with _creation_lock(db, wait_s, say):
            st = inspect_file(db)
            if st.kind in ("missing", "empty"):
                _create(db, wait_s)
            elif st.kind in ("behind", "unversioned"):
                note = repair(db, st)
                say(note)
            elif st.kind != "ready":
                raise _unusable(db, st)
    except OSError as e:
        raise StoreError(f"cannot create the MLflow store {db} ({e.strerror or e}); run from a writable "
                         f"directory or point --tracking-uri elsewhere") from None
    return note


# --------------------------------------------------------------------------- trial claims


class Claim:
    """An exclusive claim on one trial by this process (see the module docstring).

    ``Claim.try_take(db, trial_id)`` returns a held claim; ``None`` when another process holds it
    (after waiting up to ``wait_s``); or :data:`NO_CLAIMS` when claims cannot be used here (no
    ``fcntl``, a side directory that cannot be written): the caller then proceeds unclaimed.
    :meth:`release` may be called from any thread; a dead process's claims are released by the
    kernel (``flock``).
    """

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    @classmethod
    def path_for(cls, db: Path, trial_id: str) -> Path:
        return side_dir(db) / "claims" / trial_id

    @classmethod
    def try_take(cls, db: str | Path, trial_id: str, *, wait_s: float = 0.0):
        try:
            import fcntl
        except ImportError:  # not POSIX: no claims
            return NO_CLAIMS
        path = cls.path_for(Path(db), trial_id)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return NO_CLAIMS
        deadline = time.monotonic() + wait_s
        delay = 0.02
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return cls(path, fd)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
            except OSError:
                os.close(fd)
                return NO_CLAIMS

    def marker(self) -> str:
        """The marker text left by the last holder (``""``: no run of the trial was written)."""
        try:
            return os.pread(self.fd, 200, 0).decode(errors="replace").strip()
        except OSError:
            return "unknown"

    def mark(self, text: str) -> None:
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, text.encode() + b"\n", 0)

    def release(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the only descriptor releases the flock

    @property
    def held(self) -> bool:
        return self.fd >= 0


#: What :meth:`Claim.try_take` returns where claims cannot be used (the caller proceeds unclaimed).
NO_CLAIMS = "no-claims"
