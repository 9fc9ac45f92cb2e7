"""Everything that talks to MLflow while a sweep runs (the conventions are in docs/architecture.md).

Stores: with no ``--tracking-uri`` / ``MLFLOW_TRACKING_URI`` / config ``tracking_uri``, the store is
``sqlite:///<cwd>/mlflow.db`` with artifacts beside it in ``<cwd>/mlruns``. :func:`prepare_store`
makes it ready before any worker starts (:mod:`harness.store`: atomic, exclusive creation, repair of a
half-migrated file, one-line errors). An ``http(s)://`` server is probed with :func:`check_server`
(one ``GET /health`` with a short timeout) so a server that is down is a clear error before any
training starts, and MLflow's HTTP retries are bounded (:func:`bound_http_retries`) so that a server
that goes away mid-sweep costs seconds per call, not minutes: results that cannot be written go to
the local spool (:mod:`harness.spool`) and are written when the store answers again.

Liveness: every run the harness creates names its owner (``harness.owner`` = ``host:pid``,
``harness.owner_start``), and a sweep's parent run gets a heartbeat (``harness.heartbeat``, every
:data:`HEARTBEAT_S` s). :func:`kill_stale` marks KILLED only RUNNING runs whose owner is gone.

Writes use :class:`mlflow.MlflowClient` (no fluent active-run state, safe in worker processes).
Metrics are buffered and written with ``log_batch`` (≤ 1000 per call); non-finite values are
dropped. Costs measured here: ~4 ms a call on SQLite, ~10 ms against a server, and a ``log_batch``
of a trial's ~300 metric points 30–180 ms; a trial makes about eight calls in all. The in-process
executor therefore writes them on a background thread (``worker.execute_unit(background=True)``).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

TRIAL_TAG = "harness.trial_id"
SWEEP_TAG = "harness.sweep"
SWEEP_ID_TAG = "harness.sweep_id"
KIND_TAG = "harness.kind"  # "parent" or "trial"
PARENT_TAG = "mlflow.parentRunId"
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100


class TrackingUnavailableError(RuntimeError):
    """The tracking store cannot be reached (server down, bad URI). Raised before training."""


TrackingUnavailable = TrackingUnavailableError  # short alias


# --------------------------------------------------------------------------- store and server


def default_tracking_uri(cwd: str | Path | None = None) -> str:
    """``sqlite:///<cwd>/mlflow.db`` (absolute path)."""
    return f"sqlite:///{Path(cwd or os.getcwd()).resolve() / 'mlflow.db'}"


def resolve_tracking_uri(cli_uri: str | None = None, config_uri: str | None = None) -> str:
    """Precedence: ``--tracking-uri`` > ``MLFLOW_TRACKING_URI`` > the config's ``tracking_uri`` >
    :func:`default_tracking_uri`."""
    return cli_uri or os.environ.get("MLFLOW_TRACKING_URI") or config_uri or default_tracking_uri()


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def check_server(uri: str, timeout: float = 3.0) -> None:
    """One ``GET {uri}/health`` with ``timeout`` seconds; no retries.

    Raises:
      TrackingUnavailableError: with the URI and the cause, e.g. connection refused.
    """
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            if r.status != 200:
                raise TrackingUnavailableError(f"MLflow tracking server {uri} answered /health with HTTP "
                                          f"{r.status}; nothing was run")
    except (urllib.error.URLError, OSError) as e:
        cause = getattr(e, "reason", e)
        raise TrackingUnavailableError(
            f"cannot reach the MLflow tracking server at {uri} ({cause}); start it (e.g. `mlflow "
            f"server --host 127.0.0.1 --port PORT`) or drop --tracking-uri / MLFLOW_TRACKING_URI to "
            f"use the local SQLite store; nothing was run") from None


def artifact_root_for(uri: str) -> str | None:
    """Artifact root for a SQLite store: ``mlruns/`` beside the database file; else ``None``."""
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        return (db.parent / "mlruns").resolve().as_uri()
    return None


def prepare_store(uri: str, health_timeout: float = 3.0, *, create: bool = True):
    """Make the store ready for concurrent writers and return an ``MlflowClient`` on it.

    A server is health-checked first and MLflow's HTTP retries are bounded for this process
    (:func:`bound_http_retries`). A SQLite store goes through
    :func:`harness.tracking.store.ensure_sqlite_store`: created atomically under an exclusive lock (other
    invocations wait), a half-migrated one repaired after a backup copy, a file that is not a usable
    store refused untouched. With ``create=False`` (the read-only commands ``status``, ``ui``,
    ``report``) a SQLite file that does not exist is an error instead of a new empty store.

    Raises:
      TrackingUnavailableError: one line (the store, the cause, what to do), for every way the
        store can fail to open; the CLI exits 3 on it.
    """
    if is_server(uri):
        check_server(uri, health_timeout)
        bound_http_retries()
    elif uri.startswith("sqlite:///"):
        from harness.tracking import store

        try:
            store.ensure_sqlite_store(Path(uri[len("sqlite:///"):]), create=create)
        except store.StoreError as e:
            raise TrackingUnavailableError(str(e)) from None
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


def one_line(e: BaseException, limit: int = 300) -> str:
    """What a one-line error shows of a store's exception: the first non-empty line of the message
    of its root cause (``sqlite3.OperationalError: unable to open database file`` rather than
    SQLAlchemy's wrapper note), at most ``limit`` characters."""
    root, seen = e, 0
    while root.__cause__ is not None and seen < 10:
        root, seen = root.__cause__, seen + 1
    lines = [ln.strip() for ln in str(root).splitlines() if ln.strip()]
    if root is not e and lines:
        text = f"{type(root).__name__}: {lines[0]}"
    else:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        text = lines[0] if lines else type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: MLflow's HTTP defaults retry a failed request 7 times with backoff (~4 min) and wait 120 s for an
#: answer; the harness's own calls use these instead (a value already in the environment wins), and
#: a result that cannot be written goes to the local spool (:mod:`harness.spool`).
HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
               "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


def bound_http_retries() -> None:
    """Set :data:`HTTP_LIMITS` in ``os.environ`` where unset (MLflow reads them on every request;
    worker processes inherit them): a failed call then gives up after ~7 s (retries after 0, 2 and 4
    s), and a server that does not answer after 20 s."""
    for k, v in HTTP_LIMITS.items():
        os.environ.setdefault(k, v)


_CLIENTS: dict[str, object] = {}


def client_for(uri: str):
    """An ``MlflowClient`` for ``uri``, one per process and URI (building one opens the store,
    ~0.3 s on SQLite, so it is cached; imports mlflow)."""
    client = _CLIENTS.get(uri)
    if client is None:
        import logging

        from mlflow import MlflowClient

        # MLflow logs every failed SQL statement at ERROR with its whole traceback (dozens of lines per
        # call while a store folder is unwritable); the harness reports store errors itself, in one line.
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)

        client = _CLIENTS[uri] = MlflowClient(tracking_uri=uri)
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
            SWEEP_TAG: name, "mlflow.experimentKind": "custom_model_development"})
    except Exception:  # created meanwhile by someone else
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


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
    """All trial runs of an experiment grouped by ``harness.trial_id``."""
    runs = search_all(client, experiment_id, f"tags.`{KIND_TAG}` = 'trial'")
    out: dict[str, list] = {}
    for r in runs:
        tid = r.data.tags.get(TRIAL_TAG)
        if tid:
            out.setdefault(tid, []).append(r)
    return out


def runs_of_trial(client, experiment_id: str, trial_id: str) -> list:
    return search_all(client, experiment_id, f"tags.`{TRIAL_TAG}` = '{trial_id}'")


# --------------------------------------------------------------------------- liveness


OWNER_TAG = "harness.owner"  # "host:pid" of the process that created the run
OWNER_START_TAG = "harness.owner_start"  # "<boot id>:<start time in clock ticks>" (pid reuse)
HEARTBEAT_TAG = "harness.heartbeat"  # epoch seconds of the owner's last sign of life (parent runs)
KILLED_REASON_TAG = "harness.killed_reason"
#: How often a sweep's parent run gets a fresh heartbeat.
HEARTBEAT_S = 30.0
#: A run owned by another host is taken for dead when its heartbeat is this old.
STALE_AFTER_S = 300.0


def hostname() -> str:
    import socket

    return socket.gethostname()


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return "?"


def _start_ticks(pid: int) -> str | None:
    """Field 22 of ``/proc/PID/stat`` (the process's start time since boot), or ``None``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[19]


def owner_tags() -> dict[str, str]:
    """Tags naming this process as a run's owner, with a first heartbeat."""
    pid = os.getpid()
    return {OWNER_TAG: f"{hostname()}:{pid}", OWNER_START_TAG: f"{_boot_id()}:{_start_ticks(pid) or '?'}",
            HEARTBEAT_TAG: str(int(time.time()))}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def owner_state(tags: Mapping[str, str], now: float | None = None) -> tuple[str, str]:
    """``("alive" | "gone" | "unknown", why)`` for the owner recorded in a run's ``tags``.

    On this host the owner's pid decides (and its start time, so a reused pid is not taken for the
    owner); on another host the heartbeat does (older than :data:`STALE_AFTER_S`: gone). A run
    without an owner tag (written before owners were recorded) is ``unknown``.
    """
    owner = tags.get(OWNER_TAG)
    if not owner or ":" not in owner:
        return "unknown", "no owner recorded"
    host, _, pid_s = owner.rpartition(":")
    now = time.time() if now is None else now
    if host == hostname() and pid_s.isdigit():
        pid = int(pid_s)
        boot, _, ticks = tags.get(OWNER_START_TAG, "").partition(":")
        if boot and boot != "?" and boot != _boot_id():
            return "gone", f"process {owner} belonged to an earlier boot"
        if not _pid_alive(pid):
            return "gone", f"process {owner} is gone"
        if ticks and ticks != "?" and _start_ticks(pid) not in (None, ticks):
            return "gone", f"process {owner} is gone (its pid now belongs to another process)"
        return "alive", f"process {owner} is running"
    try:
        age = now - float(tags.get(HEARTBEAT_TAG, ""))
    except ValueError:
        return "unknown", f"owner {owner} on another host, no heartbeat"
    if age > STALE_AFTER_S:
        return "gone", f"no heartbeat from {owner} for {age / 60:.0f} min"
    return "alive", f"{owner}, heartbeat {age:.0f} s ago"


def run_liveness(client, run, cache: dict | None = None, now: float | None = None) -> tuple[str, str]:
    """:func:`owner_state` of a RUNNING ``run``; a trial run owned by another host (which has no
    heartbeat of its own) takes its parent run's state (an ended parent: gone)."""
    state, why = owner_state(run.data.tags, now)
    parent_id = run.data.tags.get(PARENT_TAG)
    if state == "unknown" and run.data.tags.get(OWNER_TAG) and parent_id:
        cache = {} if cache is None else cache
        if parent_id not in cache:
            try:
                cache[parent_id] = client.get_run(parent_id)
            except Exception:
                cache[parent_id] = None
        parent = cache[parent_id]
        if parent is None or parent.info.status != "RUNNING":
            return "gone", f"its sweep's parent run {parent_id} has ended"
        return owner_state(parent.data.tags, now)
    return state, why


def kill_stale(client, runs: Iterable, *, now: float | None = None) -> int:
    """Mark KILLED the RUNNING runs whose owner is gone (:func:`run_liveness`), each re-read just
    before, with the tag ``harness.killed_reason``. A run of a live owner is never touched, and
    neither is a run that is not RUNNING (a FINISHED run is never changed). Runs without an owner
    tag (from harness versions before owners were recorded) count as gone. Returns how many."""
    n, cache = 0, {}
    for r in runs:
        if r.info.status != "RUNNING":
            continue
        state, why = run_liveness(client, r, cache, now)
        if state == "alive" or (state == "unknown" and r.data.tags.get(OWNER_TAG)):
            continue
        try:
            fresh = client.get_run(r.info.run_id)
            if fresh.info.status != "RUNNING":
                continue
            client.set_tag(r.info.run_id, KILLED_REASON_TAG, why)
            client.set_terminated(r.info.run_id, status="KILLED")
            n += 1
        except Exception as e:  # e.g. a concurrent invocation killed it first
            _log().info("could not mark run %s KILLED: %s", r.info.run_id, one_line(e))
    return n


def _log():
    import logging

    return logging.getLogger(__name__)


class Heartbeat:
    """A daemon thread that sets ``harness.heartbeat`` on ``run_id`` every ``every_s`` seconds
    (errors are recorded in :data:`HEALTH`, never raised). ``start()``/``stop()``."""

    def __init__(self, uri: str, run_id: str, every_s: float = HEARTBEAT_S):
        import threading

        self.uri, self.run_id, self.every_s = uri, run_id, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="harness-heartbeat")

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                client_for(self.uri).set_tag(self.run_id, HEARTBEAT_TAG, str(int(time.time())))
            except Exception as e:
                HEALTH.failed(e)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)


class StoreHealth:
    """Whether this process's last write to the store failed (thread-safe enough: plain attribute
    writes). ``down_since`` (epoch s) is ``None`` while writes succeed; ``spooled`` counts results
    this process put in the local spool; the progress line shows both."""

    def __init__(self) -> None:
        self.down_since: float | None = None
        self.error = ""
        self.spooled = 0
        self.last_probe = 0.0

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, e: BaseException) -> None:
        if self.down_since is None:
            self.down_since = time.time()
        self.error = one_line(e, 160)

    def ok(self) -> None:
        self.down_since = None
        self.error = ""


HEALTH = StoreHealth()

_OUTAGE_TEXT = ("max retries exceeded", "connection refused", "connection aborted", "connection reset",
                "connectionerror", "timed out", "timeout", "remotedisconnected", "name or service not known",
                "temporarily unavailable", "service unavailable", "bad gateway", "readonly database",
                "read-only file system", "unable to open database", "disk i/o error", "database is locked",
                "database or disk is full", "no space left", "permission denied", "operation not permitted",
                "store is unreachable")


def is_outage(e: BaseException) -> bool:
    """Whether a store error means "try again later" (server down or unreachable, store folder not
    writable, disk full, database locked, HTTP 5xx) rather than "the store refuses this write"."""
    import sqlite3

    seen = 0
    while e is not None and seen < 5:
        if isinstance(e, OSError | TrackingUnavailableError | ConnectionError | TimeoutError |
                      sqlite3.OperationalError):
            return True
        if getattr(e, "error_code", "") in ("INTERNAL_ERROR", "TEMPORARILY_UNAVAILABLE"):
            return True
        text = str(e).lower()
        if any(t in text for t in _OUTAGE_TEXT):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


def end_leftovers(client, experiment_id: str, parent_run_id: str) -> int:
    """At the end of an invocation: mark KILLED its own trial runs still RUNNING (a write that failed
    half-way; every unit has returned, so nothing of this process is still writing them), and any of
    them whose owner is gone. A live other process's run is left alone. Returns how many."""
    runs = search_all(client, experiment_id, f"tags.`{PARENT_TAG}` = '{parent_run_id}' and "
                                             f"attributes.status = 'RUNNING'")
    me = owner_tags()[OWNER_TAG]
    n = 0
    for r in runs:
        if r.data.tags.get(OWNER_TAG) == me:
            client.set_tag(r.info.run_id, KILLED_REASON_TAG, "left RUNNING by its invocation")
            client.set_terminated(r.info.run_id, status="KILLED")
            n += 1
    return n + kill_stale(client, [r for r in runs if r.data.tags.get(OWNER_TAG) != me])


def store_reachable(uri: str, timeout: float = 2.0) -> bool:
    """A cheap probe: ``GET /health`` for a server; for a SQLite store, whether its file and folder
    can be written (the next write then tells for sure)."""
    if is_server(uri):
        try:
            check_server(uri, timeout)
            return True
        except TrackingUnavailableError:
            return False
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        return os.access(db, os.W_OK) and os.access(db.parent, os.W_OK) and _not_immutable(db)
    return True


def _not_immutable(db: Path) -> bool:
    """False when the file or its folder carries the immutable attribute (``chattr +i``), which
    ``os.access`` does not see for root."""
    try:
        import fcntl
        import struct

        for p in (db, db.parent):
            fd = os.open(p, os.O_RDONLY | (os.O_DIRECTORY if p.is_dir() else 0))
            try:
                buf = fcntl.ioctl(fd, 0x80086601, struct.pack("l", 0))  # FS_IOC_GETFLAGS
            finally:
                os.close(fd)
            if struct.unpack("l", buf)[0] & 0x10:  # FS_IMMUTABLE_FL
                return False
    except (OSError, ImportError):
        pass
    return True


# --------------------------------------------------------------------------- writing


def finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


class MetricBuffer:
    """Buffers ``(key, value, step, timestamp_ms)`` and writes them with ``log_batch``.

    Non-finite values (and ``None``) are dropped at :meth:`add`.
    """

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, int, int]] = []

    def add(self, key: str, value: Any, step: int, timestamp_ms: int | None = None) -> None:
        if value is None or not finite(float(value)):
            return
        ts = int(timestamp_ms if timestamp_ms is not None else time.time() * 1000)
        self.rows.append((key, float(value), int(step), ts))

    def flush(self, client, run_id: str, params: Mapping[str, Any] | None = None,
              tags: Mapping[str, Any] | None = None) -> int:
        """Write the buffered metrics (plus ``params`` and ``tags``, ≤ 100 each) in as few
        ``log_batch`` calls as MLflow's limits allow (1000 entities a call). Returns the number of
        metrics written."""
        from mlflow.entities import Metric, Param, RunTag

        ps = [Param(k, str(v)[:6000]) for k, v in (params or {}).items()]
        ts = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        if len(ps) > MAX_PARAMS_PER_BATCH or len(ts) > MAX_PARAMS_PER_BATCH:
            log_params_tags(client, run_id, dict(params or {}), dict(tags or {}))
            ps, ts = [], []
        n = len(self.rows)
        room = MAX_METRICS_PER_BATCH - len(ps) - len(ts)
        chunks = [self.rows[:room]] + [self.rows[i:i + MAX_METRICS_PER_BATCH]
                                       for i in range(room, n, MAX_METRICS_PER_BATCH)]
        for j, rows in enumerate(chunks):
            ms = [Metric(k, v, t, s) for k, v, s, t in rows]
            if ms or (j == 0 and (ps or ts)):
                client.log_batch(run_id, metrics=ms, params=ps if j == 0 else [],
                                 tags=ts if j == 0 else [], synchronous=True)
        self.rows = []
        return n


def log_params_tags(client, run_id: str, params: Mapping[str, Any], tags: Mapping[str, Any]) -> None:
    """Params (≤100 a call) and tags with as few ``log_batch`` calls as possible."""
    from mlflow.entities import Param, RunTag

    ps = [Param(k, str(v)[:6000]) for k, v in params.items()]
    ts = [RunTag(k, str(v)) for k, v in tags.items()]
    first = True
    for i in range(0, max(len(ps), 1), MAX_PARAMS_PER_BATCH):
        client.log_batch(run_id, params=ps[i:i + MAX_PARAMS_PER_BATCH], tags=ts if first else [],
                         synchronous=True)
        first = False


def log_dataset_input(client, run_id: str, dataset: Any, name: str, digest_cache: dict) -> None:
    """Log the training split as an MLflow dataset input (``mlflow.data.from_numpy``).

    The dataset entity (whose digest hashes the arrays) is built once per dataset name per process
    and cached in ``digest_cache``.
    """
    from mlflow.entities import DatasetInput, InputTag

    ent = digest_cache.get(name)
    if ent is None:
        import mlflow.data

        src = getattr(dataset, "source", "") or name
        ds = mlflow.data.from_numpy(dataset.x_train, targets=dataset.y_train, name=name,
                                    source=_source(src))
        ent = ds._to_mlflow_entity()
        digest_cache[name] = ent
    client.log_inputs(run_id, datasets=[DatasetInput(ent, tags=[InputTag("mlflow.data.context", "train")])])


def _source(src: str):
    from mlflow.data.http_dataset_source import HTTPDatasetSource

    if str(src).startswith(("http://", "https://")):
        return HTTPDatasetSource(src)
    from mlflow.data.code_dataset_source import CodeDatasetSource

    return CodeDatasetSource(tags={"source": str(src)[:500]})


def log_json_artifact(client, run_id: str, obj: Any, name: str, tmpdir: Path) -> None:
    p = tmpdir / name
    p.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str))
    client.log_artifact(run_id, str(p))


# --------------------------------------------------------------------------- provenance


def git_commit(cwd: str | Path | None = None) -> str:
    """``git rev-parse HEAD`` of the working directory (``+dirty`` if modified), or ``unknown``."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                              timeout=5)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=5)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment_tags() -> dict[str, str]:
    """``jax_version``, ``jaxlib_version``, ``harness_version``, ``device_kind`` (imports jax)."""
    import jax
    import jaxlib

    import harness

    try:
        dev = jax.devices()[0]
        kind = f"{dev.platform}:{dev.device_kind}"
    except Exception:
        kind = "unknown"
    return {"jax_version": jax.__version__, "jaxlib_version": jaxlib.__version__,
            "harness_version": harness.__version__, "device_kind": kind}


def dedupe_finished_runs(uri: str, experiment_id: str, trial_ids: set[str]) -> dict[str, list[str]]:
    """Leave at most one FINISHED child run per trial of ``trial_ids`` in the experiment.

    On a SQLite store the per-trial claims (:class:`harness.tracking.store.Claim`) keep concurrent
    invocations on one machine from training a trial twice, so this finds nothing there. Against a
    server, invocations on several machines (or a Ray task retried while its first attempt was still
    writing) can each finish a trial: the earliest FINISHED run (by start time, then run id: every
    invocation picks the same one) is kept and later ones are set KILLED with the tag
    ``harness.duplicate_of=<kept run id>``. Idempotent and safe under races: a run another
    invocation is demoting at the same moment (MLflow's ``UNIQUE constraint failed: tags.key,
    tags.run_uuid``) is re-read, not an error; a failure is logged, never raised. Returns
    ``{trial_id: [run ids demoted by this call]}``, empty for a clean sweep.
    """
    if not trial_ids:
        return {}
    client = client_for(uri)
    demoted: dict[str, list[str]] = {}
    try:
        groups = trial_runs(client, experiment_id)
    except Exception as e:
        HEALTH.failed(e)
        return {}
    for tid, runs in groups.items():
        done = sorted((r for r in runs if r.info.status == "FINISHED"),
                      key=lambda r: (r.info.start_time or 0, r.info.run_id))
        if tid not in trial_ids or len(done) < 2:
            continue
        keep = done[0].info.run_id
        for r in done[1:]:
            if _demote(client, r.info.run_id, keep):
                demoted.setdefault(tid, []).append(r.info.run_id)
        _log().warning("trial %s had %d FINISHED runs; kept %s", tid, len(done), keep)
    return demoted


def _demote(client, run_id: str, keep: str) -> bool:
    """Tag ``run_id`` a duplicate of ``keep`` and end it KILLED; ``False`` where a concurrent
    invocation did it first (or the store refused: logged)."""
    for attempt in range(3):
        try:
            client.set_tag(run_id, "harness.duplicate_of", keep)
            client.set_terminated(run_id, status="KILLED")
            return True
        except Exception as e:
            try:
                r = client.get_run(run_id)
            except Exception:
                r = None
            if r is not None and r.info.status == "KILLED" and r.data.tags.get("harness.duplicate_of"):
                return False
            if attempt == 2:
                _log().warning("could not mark duplicate run %s: %s", run_id, one_line(e))
            time.sleep(0.05 * (attempt + 1))
    return False
