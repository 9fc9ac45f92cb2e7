"""Where the tracking store is: its URI, a server's health, artifact roots, MLflow's HTTP limits.

With no ``--tracking-uri`` / ``MLFLOW_TRACKING_URI`` / config ``tracking_uri``, the store is
``sqlite:///<cwd>/mlflow.db`` with artifacts beside it in ``<cwd>/mlruns``. An ``http(s)://`` server
is probed with :func:`check_server` (one ``GET /health`` with a short timeout) so a server that is
down is a clear error before any training starts, and MLflow's HTTP retries are bounded
(:func:`bound_http_retries`) so that a server that goes away mid-sweep costs seconds per call, not
minutes.

Credentials. A server URI may carry user-info (``http://alice:PW@host:5000``). MLflow's client sends
it as a Basic ``Authorization`` header (``requests`` reads the URI's user-info, else MLflow reads
``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD`` or ``~/.mlflow/credentials``, else
``MLFLOW_TRACKING_TOKEN`` as a Bearer token); :func:`check_server` authenticates the same way
(:func:`auth_header`). :func:`resolve_tracking_uri` takes the user-info out of a server URI and puts
it into ``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD`` of this process (inherited by
``--jobs`` workers), so the URI that flows through the harness (messages, the spool, run contexts)
holds no password at all. A database URI (``postgresql://u:PW@db/mlflow``) needs its password, so
it keeps it, and every message shows it through :func:`harness.core.redact.mask_uri`
(``postgresql://u:***@db/mlflow``), the one masking rule.
"""

from __future__ import annotations

import base64
import os
import urllib.error
import urllib.request
from pathlib import Path

from harness.core.redact import mask_uri, split_userinfo
from harness.tracking.store_errors import TrackingUnavailableError

SQLITE_PREFIX = "sqlite:///"


def default_tracking_uri(cwd: str | Path | None = None) -> str:
    """``sqlite:///<cwd>/mlflow.db`` (absolute path)."""
    return f"{SQLITE_PREFIX}{Path(cwd or os.getcwd()).resolve() / 'mlflow.db'}"


def resolve_tracking_uri(cli_uri: str | None = None, config_uri: str | None = None) -> str:
    """Precedence: ``--tracking-uri`` > ``MLFLOW_TRACKING_URI`` > the config's ``tracking_uri`` >
    :func:`default_tracking_uri`; a server URI's credentials moved into the environment
    (:func:`adopt_credentials`)."""
    env_uri = os.environ.get("MLFLOW_TRACKING_URI")
    uri = cli_uri or env_uri or config_uri or default_tracking_uri()
    bare = adopt_credentials(uri)
    if env_uri and bare != uri and uri == env_uri:  # what MLflow and workers read: no password either
        os.environ["MLFLOW_TRACKING_URI"] = bare
    return bare


#: Where MLflow's REST client reads a user name and password (besides ``~/.mlflow/credentials``).
USER_ENV, PASSWORD_ENV = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"
#: Where MLflow's REST client reads a Bearer token (used when no user name and password are given).
TOKEN_ENV = "MLFLOW_TRACKING_TOKEN"


def adopt_credentials(uri: str) -> str:
    """A server URI with a user name and password (``http://alice:PW@host:5000``) without them
    (``http://host:5000``), the two put into :data:`USER_ENV` and :data:`PASSWORD_ENV` of this
    process, where MLflow's client (and :func:`check_server`) read them. They replace values already
    there, as the URI's user-info wins over those in MLflow's own client. Any other URI: unchanged."""
    if not is_server(uri):
        return uri
    bare, user, password = split_userinfo(uri)
    if user is None or password is None:
        return uri  # no secret to move (``http://alice@host`` is sent as requests sends it)
    os.environ[USER_ENV], os.environ[PASSWORD_ENV] = user, password
    return bare


def auth_header(uri: str) -> str | None:
    """The ``Authorization`` header MLflow's client sends to the server ``uri``, or ``None``:
    the URI's user-info (Basic), else MLflow's user name and password (environment, then
    ``~/.mlflow/credentials``; Basic), else :data:`TOKEN_ENV` (Bearer)."""
    _, user, password = split_userinfo(uri)
    if user is None:
        user, password = _mlflow_creds()
        if not (user and password):
            token = os.environ.get(TOKEN_ENV)
            return f"Bearer {token}" if token else None
    raw = f"{user}:{password or ''}".encode()
    return "Basic " + base64.standard_b64encode(raw).decode()


def _mlflow_creds() -> tuple[str | None, str | None]:
    """MLflow's own reading of a user name and password (environment over its credentials file)."""
    try:
        from mlflow.utils.credentials import read_mlflow_creds
    except Exception:  # an MLflow without it: the environment alone
        return os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV)
    creds = read_mlflow_creds()
    return creds.username, creds.password


def is_server(uri: str) -> bool:
    """Whether ``uri`` names a tracking server (``http://`` or ``https://``)."""
    return uri.startswith(("http://", "https://"))


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` URI, or ``None`` for any other store."""
    return Path(uri[len(SQLITE_PREFIX):]) if uri.startswith(SQLITE_PREFIX) else None


def check_server(uri: str, timeout: float = 3.0) -> None:
    """One ``GET {uri}/health`` with ``timeout`` seconds, authenticated as MLflow's client is
    (:func:`auth_header`; the user-info never in the URL itself); no retries.

    Raises:
      TrackingUnavailableError: one line with the URI (its password masked) and the cause, e.g.
        connection refused, or the server refusing the credentials (HTTP 401/403).
    """
    bare, _, _ = split_userinfo(uri)
    shown = mask_uri(uri)
    req = urllib.request.Request(bare.rstrip("/") + "/health")
    auth = auth_header(uri)
    if auth:
        req.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
        e.close()
    except (urllib.error.URLError, OSError) as e:
        cause = mask_uri(str(getattr(e, "reason", e)))
        raise TrackingUnavailableError(
            f"cannot reach the MLflow tracking server at {shown} ({cause}); start it (e.g. `mlflow "
            f"server --host 127.0.0.1 --port PORT`) or drop --tracking-uri / MLFLOW_TRACKING_URI to "
            f"use the local SQLite store; nothing was run") from None
    if status in (401, 403):
        if auth:
            user = split_userinfo(uri)[1] or (_mlflow_creds()[0] if auth.startswith("Basic ") else None)
            whose = f" of user {user!r}" if user else ""
            why = f"refused the credentials{whose} (HTTP {status}); check the user name and password"
        else:
            why = (f"asks for credentials (HTTP {status}); give them as http://USER:PASSWORD@HOST:PORT "
                   f"or in {USER_ENV} and {PASSWORD_ENV}")
        raise TrackingUnavailableError(f"the MLflow tracking server at {shown} {why}; nothing was run")
    if status != 200:
        raise TrackingUnavailableError(f"MLflow tracking server {shown} answered /health with HTTP "
                                       f"{status}; nothing was run")


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
