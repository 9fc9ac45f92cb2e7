"""The MLflow client of this process: opening a store, experiments, and the queries a sweep makes.

:func:`prepare_store` makes a store ready before any worker starts (a server health-checked with
bounded HTTP retries, :mod:`harness.tracking.uris`; a SQLite file created or repaired atomically,
:mod:`harness.tracking.store`) and fails in one line (:class:`TrackingUnavailableError`) when it
cannot. :func:`client_for` caches one ``mlflow.MlflowClient`` per process and URI (no fluent
active-run state, safe in worker processes).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3

from harness.config.environment import SQLITE_WAL, switch
from harness.core import mlflow_rows
from harness.core.filters import tag_is
from harness.core.names import KIND_TRIAL, TAG_KIND, TAG_SWEEP, TAG_TRIAL_ID
from harness.tracking.mlflow_ui import EXPERIMENT_KIND_TAG, TRAINING_KIND
from harness.tracking.store import ensure_sqlite_store
from harness.tracking.store_errors import SnapshotOnlyError, TrackingUnavailableError, one_line
from harness.tracking.store_state import StoreError, UnopenableStoreError
from harness.tracking.uris import artifact_root_for, bound_http_retries, check_server, is_server, sqlite_path

_CLIENTS: dict[str, object] = {}


def client_for(uri: str):
    """An ``MlflowClient`` for ``uri``, one per process and URI (building one opens the store,
    so it is cached; imports mlflow)."""
    client = _CLIENTS.get(uri)
    if client is None:
        import logging

        from mlflow import MlflowClient

        # MLflow logs every failed SQL statement at ERROR with its whole traceback (dozens of lines per
        # call while a store folder is unwritable); the harness reports store errors itself, in one line.
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)

        client = _CLIENTS[uri] = MlflowClient(tracking_uri=uri)
        if uri.startswith("sqlite:") and switch(SQLITE_WAL):
            write_ahead_log(client)
    return client


def write_ahead_log(client) -> None:
    """Put the SQLite store of ``client`` in WAL mode with ``synchronous=NORMAL`` on every
    connection of its engine (``HARNESS_SQLITE_WAL=0``: MLflow's defaults, a rollback journal and
    ``synchronous=FULL``).

    A commit then appends to the ``-wal`` file without an fsync (one at each checkpoint), and
    readers (the MLflow UI, ``status``, another invocation) do not block the writer. A killed
    process loses nothing committed (SQLite's WAL is durable against a process crash); a power loss
    may roll back the last commits, never corrupt the file (those trials then run again: nothing
    FINISHED twice). WAL needs shared memory: a store on NFS wants it off.
    WAL mode stays with the file (``PRAGMA journal_mode``), so MLflow's own server and ``sqlite3``
    read it as usual.
    """
    from sqlalchemy import event

    engine = getattr(getattr(getattr(client, "_tracking_client", None), "store", None), "engine", None)
    if engine is None:  # not MLflow's SQLAlchemy store: nothing to set
        return

    def on_connect(dbapi_conn, _record) -> None:  # per connection; needs no lock
        cur = dbapi_conn.cursor()
        try:
            cur.execute("PRAGMA synchronous=NORMAL")
        finally:
            cur.close()

    # The journal mode is the file's, set once here: set on every new connection it raced the
    # report's reader threads opening theirs ("database disk image is malformed").
    with contextlib.suppress(Exception), engine.connect() as conn:  # a busy store keeps its journal
        conn.exec_driver_sql("PRAGMA journal_mode=WAL")
    event.listen(engine, "connect", on_connect)
    engine.dispose()  # the connections already open get the pragma when made again


#: Rows ``ANALYZE`` samples per index (``PRAGMA analysis_limit``): ~0.1 s on a 230 MB store of
#: 10,000 trials (a full ``ANALYZE`` 0.4 s), and the same plans.
ANALYSIS_LIMIT = 400
#: How long :func:`analyze_store` waits for another process's write transaction before it gives
#: up (it is only an optimisation, not worth a silent wait at the end of a sweep).
ANALYZE_WAIT_S = 2.0


def analyze_store(uri: str) -> bool:
    """Give SQLite's query planner the statistics of a local SQLite store (``ANALYZE``, bounded by
    :data:`ANALYSIS_LIMIT`; stored in its ``sqlite_stat1`` table). Returns whether it ran: ``False``
    for any other store, or one SQLite refused (busy past :data:`ANALYZE_WAIT_S`, read-only): it is
    only an optimisation, never an error.

    Without statistics, SQLite 3.40 joins MLflow's tag subquery by scanning it once per run, so the
    MLflow UI's runs page (sorted by run name, ``tags.`mlflow.runName```) is slow at thousands of
    runs, and as slow again for each "Load more"; with them, an automatic index serves the join
    (docs/decisions.md). Run at the end of every invocation and
    by ``harness ui``.
    """

    db = sqlite_path(uri)
    if db is None or not db.is_file():
        return False
    try:
        con = sqlite3.connect(db, timeout=ANALYZE_WAIT_S)
        try:
            con.execute(f"PRAGMA analysis_limit={ANALYSIS_LIMIT}")
            con.execute("ANALYZE")
            con.commit()
        finally:
            con.close()
    except sqlite3.Error:
        return False
    return True


def _silent(msg: str) -> None:
    """Say nothing (``quiet``)."""


def ready_sqlite_store(uri: str, *, create: bool = True, quiet: bool = False):
    """The file of a SQLite store made ready (:func:`harness.tracking.store.ensure_sqlite_store`;
    with ``create=False`` a missing file is an error), or ``None`` for any other store. Imports no
    MLflow: ``status`` reads such a store with :mod:`sqlite3` alone. ``quiet``: the wait for another
    process's lock is not said (a repair, which leaves a backup, always is).

    Raises:
      TrackingUnavailableError: one line (the store, the cause, what to do); SnapshotOnlyError
        where the store is sound but SQLite cannot open it where it is (the commands that only read
        then read it as an immutable snapshot).
    """
    db = sqlite_path(uri)
    if db is not None:
        try:
            ensure_sqlite_store(db, create=create, **({"say": _silent} if quiet else {}))
        except UnopenableStoreError as e:
            raise SnapshotOnlyError(str(e), db) from None
        except StoreError as e:
            raise TrackingUnavailableError(str(e)) from None
    return db


def prepare_store(uri: str, health_timeout: float = 3.0, *, create: bool = True, quiet: bool = False):
    """Make the store ready for concurrent writers and return an ``MlflowClient`` on it.

    A server is health-checked first and MLflow's HTTP retries are bounded for this process
    (:func:`harness.tracking.uris.bound_http_retries`). A SQLite store goes through
    :func:`harness.tracking.store.ensure_sqlite_store`: created atomically under an exclusive lock (other
    invocations wait), a half-migrated one repaired after a backup copy, a file that is not a usable
    store refused untouched. With ``create=False`` (the read-only commands ``status``, ``ui``,
    ``report``) a SQLite file that does not exist is an error instead of a new empty store.
    ``quiet``: the wait for another process's lock is not said on stderr (a repair always is).

    Raises:
      TrackingUnavailableError: one line (the store, the cause, what to do), for every way the
        store can fail to open; the CLI exits 3 on it.
    """
    if is_server(uri):
        check_server(uri, health_timeout)
        bound_http_retries()
    else:
        ready_sqlite_store(uri, create=create, quiet=quiet)
    saved = {k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    if is_server(uri):  # the first request: fail fast rather than after MLflow's retries
        os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
        os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(max(1, int(health_timeout * 3)))
    try:
        client = client_for(uri)
        client.search_experiments(max_results=1)
    except Exception as e:
        _CLIENTS.pop(uri, None)
        raise TrackingUnavailableError(f"cannot open the MLflow store {uri}: {one_line(e)}") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return client


def get_or_create_experiment(client, name: str, uri: str) -> str:
    """The id of the experiment ``name`` (restored if it was deleted; created if missing)."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    root = artifact_root_for(uri)
    loc = f"{root}/{_safe(name)}" if root else None
    try:
        # mlflow.experimentKind: MLflow 3's UI shows the experiment as model training, not GenAI
        return client.create_experiment(name, artifact_location=loc, tags={
            TAG_SWEEP: name, EXPERIMENT_KIND_TAG: TRAINING_KIND})
    except Exception:  # created meanwhile by someone else
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def _safe(name: str) -> str:
    """``name`` as one folder name inside the artifact root: letters, digits, ``-_.`` kept, others
    ``_``; a leading dot gets a ``_`` before it, so that ``..`` or ``.`` never names the root's
    parent or the root itself (``..`` → ``_..``)."""
    out = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return "_" + out if out.startswith(".") else out


# --------------------------------------------------------------------------- queries


def search_all(client, experiment_id: str, filter_string: str = "") -> list:
    """Every run matching ``filter_string`` (all pages, active runs only)."""
    out, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string=filter_string, max_results=1000,
                                  page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def trial_runs(client, experiment_id: str) -> dict[str, list]:
    """All trial runs of an experiment grouped by ``harness.trial_id``, each group in MLflow's
    order (latest start first). On a local SQLite store they are read with :mod:`sqlite3`
    (:func:`harness.core.mlflow_rows.read_runs`, not MLflow's search)."""
    db = sqlite_path(str(getattr(client, "tracking_uri", "") or ""))
    if db is not None and db.is_file():
        try:
            return by_trial(_sqlite_runs(db, experiment_id))
        except (OSError, ValueError, sqlite3.Error):  # not readable so: MLflow reads it, or says why
            pass
    return by_trial(search_all(client, experiment_id, f"tags.`{TAG_KIND}` = '{KIND_TRIAL}'"))


def _sqlite_runs(db, experiment_id: str) -> list:
    """The active runs of ``experiment_id`` in the SQLite file ``db``, in ``search_runs``' default
    order (start time descending, then run id), read in one read-only transaction."""
    con = mlflow_rows.connect(str(db))
    try:
        con.execute("BEGIN")
        _, runs, _, _ = mlflow_rows.read_runs(con, experiment_ids=[experiment_id])
    finally:
        con.close()
    out = sorted(runs.values(), key=lambda r: r.info.run_id)
    out.sort(key=lambda r: r.info.start_time or 0, reverse=True)
    return out


def by_trial(runs: list) -> dict[str, list]:
    """The trial runs among ``runs`` (tag ``harness.kind`` = trial) grouped by ``harness.trial_id``,
    in ``runs``' order."""
    out: dict[str, list] = {}
    for r in runs:
        tid = r.data.tags.get(TAG_TRIAL_ID)
        if tid and r.data.tags.get(TAG_KIND) == KIND_TRIAL:
            out.setdefault(tid, []).append(r)
    return out


def runs_of_trial(client, experiment_id: str, trial_id: str) -> list:
    """Every run (any status, active only) tagged ``harness.trial_id = trial_id``."""
    return search_all(client, experiment_id, tag_is(TAG_TRIAL_ID, trial_id))
