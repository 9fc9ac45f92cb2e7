"""``ui``: start ``mlflow ui`` on the store (or point at the tracking server) and print the URL of the
sweep's runs view. A server URI's credentials go to the environment (``resolve_tracking_uri``), so the
URL printed holds none; a database URI is shown with its password masked and handed to ``mlflow ui``
in its environment, never on its command line."""

from __future__ import annotations

import os
import sys

import typer

from harness.cli.shared import URI_HELP, err, exit_no_experiment
from harness.core.names import KIND_PARENT, TAG_KIND


def ui(
    experiment: str | None = typer.Option(None, "--experiment", "-e", help="Sweep name to open."),
    port: int = typer.Option(5000, "--port", help="Port for the UI on 127.0.0.1."),
    host: str = typer.Option("127.0.0.1", "--host"),
    tracking_uri: str | None = typer.Option(None, "--tracking-uri", help=URI_HELP),
) -> None:
    """Start `mlflow ui` on the store and print the URL of the experiment's runs view (charts of
    the trials grouped by optimizer; default experiment: the sweep that ran last). Ctrl-C stops it."""
    from harness.tracking import mlflow_ui
    from harness.tracking.uris import is_server, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    exp_id, share_key = _prepare_view(uri, experiment)
    base = uri if is_server(uri) else f"http://{host}:{port}"
    url = mlflow_ui.runs_view_url(base, exp_id, share_key) if exp_id else base.rstrip("/")
    if is_server(uri):
        typer.echo(f"The tracking server already serves the UI: {url}")
        return
    busy = _port_in_use(host, port)
    if busy:
        err(f"error: cannot serve the UI on {host}:{port}: {busy}; choose another port, e.g. "
             f"--port {port + 1}")
        raise typer.Exit(2)
    cmd, env = _ui_command(uri, host, port)
    if exp_id is None:
        typer.echo("No sweep in this store yet: run `python -m harness sweep CONFIG` first.")
    raise typer.Exit(_serve(cmd, env, url, uri, host, port))


def _prepare_view(uri: str, experiment: str | None) -> tuple[str | None, str | None]:
    """The id of the experiment ``ui`` opens (:func:`_ui_experiment`) and its grouped chart view's
    key (:func:`harness.tracking.mlflow_ui.prepare`), both ``None`` without one; the store analysed
    for SQLite's statistics. Exits 3 when the store cannot be opened."""
    from harness.tracking import mlflow_ui
    from harness.tracking.client import analyze_store, prepare_store
    from harness.tracking.store_errors import TrackingUnavailableError

    exp_id = share_key = None
    try:
        client = prepare_store(uri, create=False)
        exp = _ui_experiment(client, experiment, uri)
        if exp is not None:
            exp_id = exp.experiment_id
            share_key = mlflow_ui.prepare(client, exp_id)  # training kind + the grouped chart view
        analyze_store(uri)  # SQLite's statistics: the runs page's first 100 of 10,000 in 0.09 s, not 4.9 s
    except TrackingUnavailableError as e:
        err(f"error: {e}")
        raise typer.Exit(3) from None
    return exp_id, share_key


def _ui_command(uri: str, host: str, port: int) -> tuple[list[str], dict[str, str]]:
    """The ``mlflow ui`` command line and its environment: the store's URI (a database's may hold a
    password) in the environment, which MLflow's CLI reads, not on the command line, which any
    local user can read in the process list; the registry in the same store (MLflow's default, said
    out loud), and none of the server's own deprecation warnings (a Starlette module) before the URL."""
    from harness.tracking.uris import artifact_root_for

    cmd = [sys.executable, "-m", "mlflow", "ui", "--host", host, "--port", str(port), "--workers", "1"]
    root = artifact_root_for(uri)
    if root:
        cmd += ["--default-artifact-root", root]
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", MLFLOW_BACKEND_STORE_URI=uri,
               MLFLOW_REGISTRY_STORE_URI=uri)
    env.setdefault("PYTHONWARNINGS",
                   "ignore::DeprecationWarning,ignore:starlette.middleware.wsgi is deprecated")
    return cmd, env


def _raise_interrupt(*_: object) -> None:
    """A SIGTERM handler: stop as Ctrl-C does."""
    raise KeyboardInterrupt


def _serve(cmd: list[str], env: dict[str, str], url: str, uri: str, host: str, port: int) -> int:
    """Run ``mlflow ui`` (``cmd`` in ``env``) until it exits or Ctrl-C / SIGTERM, printing ``url``
    once it answers on ``host:port``; returns the exit code for ``ui`` (0 when stopped)."""
    import signal
    import subprocess

    from harness.tracking.uris import mask_uri

    # the server's own log lines on stderr: stdout holds the URL alone (a script reads its first line)
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=2)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        # the URL once the server answers (it takes seconds to start; a URL printed at once led to
        # a browser's "connection refused")
        err(f"starting mlflow ui on {host}:{port} (the URL follows when it answers; Ctrl-C to stop)")
        if _wait_until_answering(proc, host, port):
            typer.echo(f"MLflow UI: {url}")
            typer.echo(f"  (store {mask_uri(uri)}; Ctrl-C to stop)")
        else:
            err(f"error: mlflow ui exited with code {proc.returncode} before it answered on {host}:{port}")
        code = proc.wait()
    except KeyboardInterrupt:
        code = 0
    finally:
        if proc.poll() is None:  # stop mlflow ui and its uvicorn worker (one process group)
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    return code


def _ui_experiment(client, name: str | None, uri: str):
    """The experiment ``ui`` opens: ``name``, else the one whose sweep ran last (None if the store
    holds no sweep). Exits 2 naming the experiments there when ``name`` is unknown."""
    if name:
        exp = client.get_experiment_by_name(name)
        if exp is None:
            exit_no_experiment(client, name, uri)
        return exp
    latest = None
    for exp in client.search_experiments():
        runs = client.search_runs([exp.experiment_id], f"tags.`{TAG_KIND}` = '{KIND_PARENT}'",
                                  max_results=1, order_by=["attributes.start_time DESC"])
        if runs and (latest is None or runs[0].info.start_time > latest[0]):
            latest = (runs[0].info.start_time, exp)
    return latest[1] if latest else None


def _port_in_use(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound (e.g. ``address already in use``), or None if it can."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        return f"cannot resolve host {host!r} ({e.strerror or e})"
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server will
        try:
            s.bind(addr)
        except OSError as e:
            return (e.strerror or str(e)).lower()
    return None


#: Seconds between two checks of whether ``mlflow ui`` answers.
POLL_S = 0.25


def _wait_until_answering(proc, host: str, port: int) -> bool:
    """Wait until ``mlflow ui`` (``proc``) answers HTTP on ``host:port`` (its ``/health``): True;
    False if it exits first. A wildcard host (``0.0.0.0``, ``::``) is asked on the loopback."""
    import time
    import urllib.error
    import urllib.request

    ask = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    url = f"http://[{ask}]:{port}/health" if ":" in ask else f"http://{ask}:{port}/health"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
    while proc.poll() is None:
        try:
            with opener.open(url, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True  # it answered (whatever it said about /health)
        except OSError:
            time.sleep(POLL_S)
    return False
