"""Everything that talks to MLflow while a sweep runs (the conventions are in docs/architecture.md).

Stores: with no ``--tracking-uri`` / ``MLFLOW_TRACKING_URI`` / config ``tracking_uri``, the store is
``sqlite:///<cwd>/mlflow.db`` with artifacts beside it in ``<cwd>/mlruns``. The parent process creates
the store (schema migration) once with :func:`prepare_store` before any worker starts, because several
processes opening a new SQLite store at once crash in the migration. An ``http(s)://`` server is
probed with :func:`check_server` (one ``GET /health`` with a short timeout) so a server that is down
is a clear error before any training starts, not MLflow's minutes of retries.

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

    A server is health-checked first; a SQLite store is created (schema migration) here, in the
    calling process only. With ``create=False`` (the read-only commands ``status``, ``ui``,
    ``report``) a SQLite file that does not exist is an error instead of a new empty store.
    Raises :class:`TrackingUnavailableError`.
    """
    if is_server(uri):
        check_server(uri, health_timeout)
    elif uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        if not create and not db.exists():
            raise TrackingUnavailableError(
                f"no MLflow store at {db}: run a sweep here first (python -m harness sweep "
                f"experiments/quickstart.yaml) or point --tracking-uri / MLFLOW_TRACKING_URI at "
                f"your store")
        db.parent.mkdir(parents=True, exist_ok=True)
    client = client_for(uri)
    saved = {k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    if is_server(uri):  # the first request: fail fast rather than after MLflow's long retries
        os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
        os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(max(1, int(health_timeout * 3)))
    try:
        client.search_experiments(max_results=1)
    except Exception as e:
        raise TrackingUnavailableError(f"cannot open the MLflow store {uri}: {e}") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return client


_CLIENTS: dict[str, object] = {}


def client_for(uri: str):
    """An ``MlflowClient`` for ``uri``, one per process and URI (building one opens the store,
    ~0.3 s on SQLite, so it is cached; imports mlflow)."""
    client = _CLIENTS.get(uri)
    if client is None:
        from mlflow import MlflowClient

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


def kill_stale(client, runs: Iterable) -> int:
    """Mark RUNNING runs KILLED (left over from an invocation that died). Returns how many."""
    n = 0
    for r in runs:
        if r.info.status == "RUNNING":
            client.set_terminated(r.info.run_id, status="KILLED")
            n += 1
    return n


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

    A second FINISHED run of a trial can only come from two invocations racing on the same trial
    (two concurrent sweeps of one config, or a Ray task retried while its first attempt was still
    writing). The earliest FINISHED run (by start time, then run id) is kept; later ones are set
    KILLED and tagged ``harness.duplicate_of=<kept run id>``. Returns ``{trial_id: [demoted run
    ids]}``, empty for a clean sweep. Every sweep calls this when its executor returns.
    """
    if not trial_ids:
        return {}
    import logging

    client = client_for(uri)
    demoted: dict[str, list[str]] = {}
    for tid, runs in trial_runs(client, experiment_id).items():
        done = sorted((r for r in runs if r.info.status == "FINISHED"),
                      key=lambda r: (r.info.start_time or 0, r.info.run_id))
        if tid not in trial_ids or len(done) < 2:
            continue
        keep = done[0].info.run_id
        for r in done[1:]:
            client.set_tag(r.info.run_id, "harness.duplicate_of", keep)
            client.set_terminated(r.info.run_id, status="KILLED")
            demoted.setdefault(tid, []).append(r.info.run_id)
        logging.getLogger(__name__).warning("trial %s had %d FINISHED runs; kept %s", tid, len(done), keep)
    return demoted
