"""The default SQLite store: atomic, exclusive creation (and repair) before any worker opens it.

SQLite's Python driver commits every DDL statement on its own, so a process killed while MLflow
migrates a new store leaves a half-migrated file that neither MLflow nor ``mlflow db upgrade`` can
open, and several processes opening a new file at once race each other's migrations. This module
makes creation atomic and exclusive:

- :func:`ensure_sqlite_store` takes an exclusive lock (``filelock``) on ``create.lock`` in the
  store's side directory ``.<name>.harness/`` (beside the database file), builds the complete
  schema in a temporary file in that directory (:mod:`harness.tracking.store_build`), and links it
  into place only when complete (``os.link``: never over a file that appeared meanwhile). Other
  invocations (and ``status``, ``report``, ``ui``) wait for the lock instead of opening a file being
  created. A SIGKILL at any moment leaves either no store (the next invocation creates it) or a
  complete one.
- An existing file is classified first without writing to it
  (:func:`harness.tracking.store_state.inspect_file`); a behind or half-migrated one is repaired
  under the lock (:func:`harness.tracking.store_repair.repair`), anything else unusable is refused
  untouched.
- Per-trial claims live in the same side directory (:mod:`harness.tracking.claim_locks`).

Errors for the user are :class:`~harness.tracking.store_state.StoreError` (one line, with what to
do); the CLI maps them to exit 3. The points of store creation, where the fault tests SIGKILL the
process (:func:`harness.tracking.store_build.kill_point`, a no-op here): ``stmt:N`` (before the
N-th SQL statement of a migration, 1-based) or a stage: ``locked`` (lock
held, nothing built), ``built`` (temporary file complete, not yet synced), ``before_link``,
``linked`` (store in place, temporary file not yet removed), ``unlocked``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from harness.core.processes import pid_alive
from harness.tracking import store_build
from harness.tracking.store_build import build, fsync
from harness.tracking.store_repair import repair
from harness.tracking.store_state import (
    LOCK_WAIT_S,
    UNUSABLE,
    FileState,
    StoreError,
    inspect_file,
    lock_path,
    side_dir,
    unusable_error,
)


def _owner_path(db: Path) -> Path:
    return side_dir(db) / "create.owner"


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
        if pid.isdigit() and not pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                p.unlink()


def _create(db: Path, wait_s: float) -> None:
    _clean_temporaries(db)
    tmp = side_dir(db) / f"creating-{os.getpid()}.db"
    try:
        build(tmp)
        store_build.kill_point("before_link")
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
        fsync(db.parent, directory=True)
        store_build.kill_point("linked")
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _wait_until_ready(db: Path, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        st = inspect_file(db)
        if st.kind == "ready":
            return
        if st.kind in UNUSABLE:
            raise unusable_error(db, st)
        if time.monotonic() > deadline:
            raise StoreError(f"the MLflow store {db} stayed {st.kind} ({st.detail}) for {wait_s:.0f} s "
                             f"while another program created it; stop that program, then re-run")
        time.sleep(0.2)


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
        store_build.kill_point("locked")
        yield
    finally:
        with contextlib.suppress(OSError):
            _owner_path(db).unlink()
        lock.release()
    store_build.kill_point("unlocked")


def make_store_folder(db: Path) -> None:
    """Create the folder of a new store file ``db``, by the one rule for it: only that one folder,
    and only inside an existing, writable folder that is not the filesystem root. A deeper missing
    path (``sqlite:///tmp/a/b/c/x.db`` with no ``tmp/a``), or a folder the URI would put at ``/``
    (``sqlite:////nonexistent_dir/x.db``), is refused with nothing created.

    Raises:
      StoreError: ``the folder X does not exist: create it or choose another --tracking-uri`` (and
        why it is not created here). OSError: ``mkdir`` itself failed.
    """
    folder = Path(os.path.abspath(db)).parent
    if folder.exists() or folder.is_symlink():  # a folder, or a file / dangling link mkdir reports
        return
    parent = folder.parent
    if parent == parent.parent:
        why = " (a store's folder is never made at the filesystem root)"
    elif not parent.exists():
        why = f", nor does {parent}"
    elif not parent.is_dir():
        why = f" ({parent} is not a folder)"
    elif not os.access(parent, os.W_OK | os.X_OK):
        why = f" ({parent} is not writable)"
    else:
        why = ""
    if why:
        raise StoreError(f"the folder {folder} does not exist{why}: create it or choose another "
                         f"--tracking-uri")
    folder.mkdir(exist_ok=True)


def _created_meanwhile(db: Path, st: FileState, wait_s: float, say) -> FileState:
    """A read-only command's missing or empty store ``db``: its state once the process creating it
    (holding the creation lock) is done; nothing is created.

    Raises:
      StoreError: there is still no store (``no MLflow store at ...``).
    """
    if lock_path(db).exists():  # being created right now: wait for it, create nothing
        with _creation_lock(db, wait_s, say):
            pass
        st = inspect_file(db)
    if st.kind in ("missing", "empty"):
        raise StoreError(f"no MLflow store at {db}: run a sweep here first (python -m harness sweep "
                         f"experiments/quickstart.yaml) or point --tracking-uri / MLFLOW_TRACKING_URI "
                         f"at your store")
    return st


def ensure_sqlite_store(db: str | Path, *, create: bool = True, wait_s: float = LOCK_WAIT_S,
                        say=_say) -> str | None:
    """Make ``db`` a complete MLflow store at MLflow's head revision, or raise :class:`StoreError`.

    ``create=False`` (read-only commands): a missing file is an error (``no MLflow store at ...``)
    unless another process holds the creation lock, which is then waited for; nothing is created.
    A half-migrated store is repaired in both modes (see :func:`repair`). ``say`` gets one-line
    notes (waiting, repaired). Returns the repair account, or ``None``.
    """
    db = Path(db)
    if db.is_symlink() and not db.exists():  # os.link cannot put a store there: it would wait forever
        raise StoreError(f"{db} is a symbolic link to {os.readlink(db)}, which does not exist; remove "
                         f"the link, or point it at an MLflow store")
    st = inspect_file(db)
    if st.kind == "ready":
        _clean_dead_temporaries(db)
        return None
    if st.kind in UNUSABLE:
        raise unusable_error(db, st)
    if not create and st.kind in ("missing", "empty"):
        st = _created_meanwhile(db, st, wait_s, say)
        if st.kind == "ready":
            return None
    try:
        make_store_folder(db)
        side_dir(db).mkdir(exist_ok=True)
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
                _say(note)  # the user's store changed and a backup was left: said even when quiet
            elif st.kind != "ready":
                raise unusable_error(db, st)
    except OSError as e:
        raise StoreError(f"cannot create the MLflow store {db} ({e.strerror or e}); run from a writable "
                         f"directory or point --tracking-uri elsewhere") from None
    return note


