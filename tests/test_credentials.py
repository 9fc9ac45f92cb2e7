"""Credentials in a tracking URI: the health check authenticates as MLflow's client does,
a server that refuses them is one line, and the password appears nowhere: output, store (tags,
params, artifacts), report, spool."""

from __future__ import annotations

import base64
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from harness.core.redact import mask_text, mask_uri, split_userinfo
from harness.tracking import uris
from harness.tracking.store_errors import TrackingUnavailableError, one_line

SECRET = "S3cretPW"
CRED_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN",
            "MLFLOW_TRACKING_URI")


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No credentials from the environment or ~/.mlflow/credentials; restored afterwards (the code
    under test writes os.environ)."""
    saved = {k: os.environ.get(k) for k in CRED_ENV}
    for k in CRED_ENV:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


# --------------------------------------------------------------------------- the masking rule


def test_mask_uri_and_text():
    assert mask_uri(f"http://alice:{SECRET}@127.0.0.1:5000") == "http://alice:***@127.0.0.1:5000"
    assert mask_uri("postgresql+psycopg://u:p%40ss@db:5432/mlflow?x=1") == \
        "postgresql+psycopg://u:***@db:5432/mlflow?x=1"
    assert mask_uri("http://alice@host:5000/x") == "http://alice@host:5000/x"  # no secret
    assert mask_uri("sqlite:////tmp/a@b/mlflow.db") == "sqlite:////tmp/a@b/mlflow.db"
    assert mask_uri("http://:pw@h") == "http://:***@h"
    assert mask_uri("http://a:p@w:rd@h:1") == "http://a:***@h:1"  # an unescaped "@" in the password
    text = f"cannot open postgresql://u:{SECRET}@db/x; also https://b:{SECRET}@h/y (no)"
    assert SECRET not in mask_text(text) and mask_text(text).count("***") == 2
    assert split_userinfo("http://al%20ice:p%3Aw@h:1/p") == ("http://h:1/p", "al ice", "p:w")
    assert split_userinfo("http://h:1") == ("http://h:1", None, None)


def test_one_line_masks_a_stores_error():
    e = RuntimeError(f"(psycopg.OperationalError) connection to postgresql://u:{SECRET}@db:5432/m failed")
    assert SECRET not in one_line(e) and "u:***@db" in one_line(e)


def test_err_masks(capsys):
    from harness.cli.shared import err

    err(f"error: cannot open the MLflow store postgresql://u:{SECRET}@db/x: boom")
    assert capsys.readouterr().err == "error: cannot open the MLflow store postgresql://u:***@db/x: boom\n"


# --------------------------------------------------------------------------- the health check


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list] = []
    status = 200

    def do_GET(self):
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        self.send_response(type(self).status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"OK")

    def log_message(self, *a):
        pass


@pytest.fixture
def recorder():
    """A tiny HTTP server on 127.0.0.1 recording each request's path and Authorization header."""
    handler = type("H", (_Recorder,), {"seen": [], "status": 200})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield handler, srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


def _basic(user, pw):
    return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()


def test_health_check_sends_the_uris_user_info_as_basic_auth(recorder, clean_env):
    h, port = recorder
    uris.check_server(f"http://alice:{SECRET}@127.0.0.1:{port}")
    assert h.seen == [("/health", _basic("alice", SECRET))]


def test_health_check_uses_mlflows_environment_then_token(recorder, clean_env, monkeypatch):
    h, port = recorder
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "bob")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "pw2")
    uris.check_server(f"http://127.0.0.1:{port}")
    uris.check_server(f"http://alice:{SECRET}@127.0.0.1:{port}")  # the URI's wins, as in MLflow
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok")
    uris.check_server(f"http://127.0.0.1:{port}")
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN")
    uris.check_server(f"http://127.0.0.1:{port}")
    assert [a for _, a in h.seen] == [_basic("bob", "pw2"), _basic("alice", SECRET), "Bearer tok", None]


def test_mlflows_own_client_sends_the_same_header(recorder, clean_env):
    """What the health check mirrors: MLflow's REST client with the moved credentials."""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    h, port = recorder
    bare = uris.resolve_tracking_uri(f"http://alice:{SECRET}@127.0.0.1:{port}")
    assert bare == f"http://127.0.0.1:{port}"
    http_request(get_default_host_creds(bare), "/health", "GET", max_retries=0)
    uris.check_server(bare)
    assert h.seen[0][1] == h.seen[1][1] == _basic("alice", SECRET)


@pytest.mark.parametrize("status", [401, 403])
def test_refused_credentials_are_one_masked_line(recorder, clean_env, status):
    h, port = recorder
    h.status = status
    with pytest.raises(TrackingUnavailableError) as e:
        uris.check_server(f"http://alice:{SECRET}@127.0.0.1:{port}")
    msg = str(e.value)
    assert msg == (f"the MLflow tracking server at http://alice:***@127.0.0.1:{port} refused the "
                   f"credentials of user 'alice' (HTTP {status}); check the user name and password; "
                   f"nothing was run")
    with pytest.raises(TrackingUnavailableError, match="asks for credentials"):
        uris.check_server(f"http://127.0.0.1:{port}")
    uris.resolve_tracking_uri(f"http://alice:{SECRET}@127.0.0.1:{port}")  # moved to the environment
    with pytest.raises(TrackingUnavailableError, match=f"^the MLflow tracking server at http://127.0.0.1:"
                                                      f"{port} refused the credentials of user 'alice'"):
        uris.check_server(f"http://127.0.0.1:{port}")


def test_unreachable_server_message_is_masked(clean_env):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TrackingUnavailableError) as e:
        uris.check_server(f"http://alice:{SECRET}@127.0.0.1:{port}", timeout=2)
    assert SECRET not in str(e.value) and f"http://alice:***@127.0.0.1:{port}" in str(e.value)
    assert "Connection refused" in str(e.value) or "refused" in str(e.value).lower()


def test_resolve_moves_a_server_uris_credentials_into_the_environment(clean_env, monkeypatch):
    assert uris.resolve_tracking_uri(f"http://alice:{SECRET}@h:5000/p") == "http://h:5000/p"
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "alice"
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == SECRET
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://carol:x%2Fy@h2")
    assert uris.resolve_tracking_uri() == "https://h2"
    assert os.environ["MLFLOW_TRACKING_URI"] == "https://h2"
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == "x/y"
    db = f"postgresql://u:{SECRET}@db/x"
    assert uris.resolve_tracking_uri(db) == db  # a database needs its password in its URI


# --------------------------------------------------------------------------- end to end


def _run(args, cwd, env, timeout=600):
    p = subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def test_a_uri_with_user_info_works_end_to_end_and_the_password_appears_nowhere(mlflow_server, tmp_path):
    """A real sweep, status, report and ui against a real server with ``alice:S3cretPW@`` in the URI
    (a plain server ignores the header: enough to prove the URI is usable and the password masked)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import TINY_SWEEP
    from mlflow import MlflowClient

    port = mlflow_server.rsplit(":", 1)[1]
    cred = f"http://alice:{SECRET}@127.0.0.1:{port}"
    cfg = tmp_path / "cred.yaml"
    cfg.write_text(yaml.safe_dump({**TINY_SWEEP, "name": "cred-e2e"}))
    spool_dir = tmp_path / "spool"
    env = {k: v for k, v in os.environ.items() if k not in CRED_ENV}
    env.update(HARNESS_SPOOL_DIR=str(spool_dir), HOME=str(tmp_path / "home"),
               HARNESS_CACHE_DIR=str(tmp_path / "cache"))
    outputs = []
    rc, out = _run(["sweep", str(cfg), "--tracking-uri", cred], tmp_path, env)
    outputs.append(out)
    assert rc == 0, out
    rc, out = _run(["status", "--tracking-uri", cred], tmp_path, env)
    outputs.append(out)
    assert rc == 0, out
    report = tmp_path / "report.html"
    rc, out = _run(["report", "-e", "cred-e2e", "--tracking-uri", cred, "-o", str(report)], tmp_path, env)
    outputs.append(out)
    assert rc == 0, out
    rc, out = _run(["ui", "--tracking-uri", cred], tmp_path, env, timeout=120)
    outputs.append(out)
    assert rc == 0 and f"http://127.0.0.1:{port}/#/experiments/" in out, out
    env_uri = dict(env, MLFLOW_TRACKING_URI=cred)  # the same through the environment
    rc, out = _run(["status"], tmp_path, env_uri)
    outputs.append(out)
    assert rc == 0, out
    for out in outputs:
        assert SECRET not in out, out
    # the store: every tag, param and artifact of every run of the sweep, the experiment's tags
    c = MlflowClient(mlflow_server)
    exp = c.get_experiment_by_name("cred-e2e")
    assert SECRET not in repr(exp.tags)
    runs = c.search_runs([exp.experiment_id], max_results=1000)
    assert len([r for r in runs if r.data.tags.get("harness.kind") == "trial"]) == 2
    for r in runs:
        assert SECRET not in repr(r.data.tags) and SECRET not in repr(r.data.params)
        local = c.download_artifacts(r.info.run_id, "", str(tmp_path / "dl" / r.info.run_id))
        for f in Path(local).rglob("*"):
            if f.is_file():
                assert SECRET.encode() not in f.read_bytes(), f
    assert SECRET not in report.read_text()
    for f in (spool_dir.rglob("*") if spool_dir.exists() else []):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f


def test_a_database_uri_password_is_masked_in_the_summary_hints_and_stage_lines(tmp_path):
    """The rerun hint, the UI/report commands and the stage lines print a database URI's password
    masked (a server URI's credentials already move into the environment). Before: the summary's
    ``--tracking-uri postgresql://u:secretpw@...`` hint and ``opening the store postgresql://u:secretpw@``."""
    import io

    from rich.console import Console

    from harness.orchestrate.summary import SweepSummary, print_summary

    uri = "postgresql://u:secretpw@127.0.0.1:1/db"
    s = SweepSummary("s", "sid", None, None, uri, [], 1.0)
    # shell-quoted (the commands are pasted into a shell, where *** would be a glob)
    assert s.uri_option() == " --tracking-uri 'postgresql://u:***@127.0.0.1:1/db'"
    buf = io.StringIO()
    print_summary(Console(file=buf, width=200), s)
    assert "secretpw" not in buf.getvalue() and "u:***@127.0.0.1" in buf.getvalue()
    import inspect

    from harness.orchestrate import progress, run

    for mod in (run, progress):  # every line that prints the store's URI masks it
        src = inspect.getsource(mod)
        assert "{uri}" not in src and "mask_uri(uri)" in src


def test_ray_tasks_get_the_tracking_servers_credentials(monkeypatch):
    """A Ray task on another machine authenticates as the driver does: the credentials the harness
    moved out of the URI into MLflow's variables go into the tasks' environment. Before: none did,
    and a remote task's writes were refused by a server that asks for them."""
    from harness.execute.ray_executor import RayExecutor

    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "S3cretPW")
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN", raising=False)
    env = RayExecutor()._task_env()
    assert env["MLFLOW_TRACKING_USERNAME"] == "alice" and env["MLFLOW_TRACKING_PASSWORD"] == "S3cretPW"
    assert "MLFLOW_TRACKING_TOKEN" not in env
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME")
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD")
    assert not {"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"} & set(RayExecutor()._task_env())
