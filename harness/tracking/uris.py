"""Where the tracking store is: its URI, a server's health, artifact roots, MLflow's HTTP limits.

With no ``--tracking-uri`` / ``MLFLOW_TRACKING_URI`` / config ``tracking_uri``, the store is
``sqlite:///<cwd>/mlflow.db`` with artifacts beside it in ``<cwd>/mlruns``. An ``http(s)://`` server
is probed with :func:`check_server` (one ``GET /health`` with a short timeout) so a server that is
down is a clear error before any training starts, and MLflow's HTTP retries are bounded
(:func:`bound_http_retries`) so that a server that goes away mid-sweep costs seconds per call, not
minutes.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

from harness.tracking.errors import TrackingUnavailableError

SQLITE_PREFIX = "sqlite:///"


def default_tracking_uri(cwd: str | Path | None = None) -> str:
    """``sqlite:///<cwd>/mlflow.db`` (absolute path)."""
    return f"{SQLITE_PREFIX}{Path(cwd or os.getcwd()).resolve() / 'mlflow.db'}"


def resolve_tracking_uri(cli_uri: str | None = None, config_uri: str | None = None) -> str:
    """Precedence: ``--tracking-uri`` > ``MLFLOW_TRACKING_URI`` > the config's ``tracking_uri`` >
    :func:`default_tracking_uri`."""
    return cli_uri or os.environ.get("MLFLOW_TRACKING_URI") or config_uri or default_tracking_uri()


def is_server(uri: str) -> bool:
    """Whether ``uri`` names a tracking server (``http://`` or ``https://``)."""
    return uri.startswith(("http://", "https://"))


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` URI, or ``None`` for any other store."""
    return Path(uri[len(SQLITE_PREFIX):]) if uri.startswith(SQLITE_PREFIX) else None


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
    db = sqlite_path(uri)
    return None if db is None else (db.parent / "mlruns").resolve().as_uri()


#: MLflow's HTTP defaults retry a failed request 7 times with backoff (~4 min) and wait 120 s for an
#: answer; the harness's own calls use these instead (a value already in the environment wins), and
#: a result that cannot be written goes to the local spool (:mod:`harness.tracking.spool`).
HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
               "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


def bound_http_retries() -> None:
    """Set :data:`HTTP_LIMITS` in ``os.environ`` where unset (MLflow reads them on every request;
    worker processes inherit them): a failed call then gives up after ~7 s (retries after 0, 2 and 4
    s), and a server that does not answer after 20 s."""
    for k, v in HTTP_LIMITS.items():
        os.environ.setdefault(k, v)
