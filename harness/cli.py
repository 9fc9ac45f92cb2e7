"""``python -m harness``: the command line (typer).

Commands: ``sweep`` (run a config), ``list`` (registries and hyperparameters), ``status`` (per sweep:
finished/diverged/failed/pending), ``ui`` (the MLflow UI on the store), ``report`` (HTML report).
jax, MLflow, pydantic and the registries are imported inside the commands, so ``--help`` is fast.

Exit codes: 0 ok; 1 some trials failed (``sweep``) or a runtime error; 2 invalid config or usage;
3 the tracking store cannot be reached.
"""

from __future__ import annotations

import os
import re
import sys
from enum import StrEnum
from pathlib import Path

import typer

from harness.config.limits import DEFAULT_MAX_TRIALS

_EPILOG = """\b
Examples:
  python -m harness list optimizers                     # names, hyperparameters, defaults
  python -m harness sweep experiments/quickstart.yaml --dry-run
  python -m harness sweep experiments/quickstart.yaml   # results in ./mlflow.db
  python -m harness sweep experiments/mnist1d.yaml --jobs 2
  python -m harness status                              # finished / diverged / failed / pending
  python -m harness report --experiment quickstart -o quickstart.html
  python -m harness ui --experiment quickstart          # MLflow UI on the same store
\b
Re-running a sweep skips finished trials. Use --tracking-uri http://HOST:PORT (or
MLFLOW_TRACKING_URI) for a shared MLflow server. Docs: README.md, docs/architecture.md."""

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Benchmark harness for training algorithms in JAX (sweeps logged to MLflow).",
                  epilog=_EPILOG)

_URI_HELP = "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, then sqlite:///<cwd>/mlflow.db)."


class Batching(StrEnum):
    auto = "auto"
    on = "on"
    off = "off"


def _err(msg: str) -> None:
    typer.echo(msg, err=True)


_SWEEP_EPILOG = """\b
Examples:
  python -m harness sweep experiments/quickstart.yaml
  python -m harness sweep experiments/quickstart.yaml --dry-run     # the plan, nothing trained
  python -m harness sweep experiments/mnist1d.yaml --jobs 2         # 2 local worker processes
  python -m harness sweep experiments/mnist1d.yaml --tracking-uri http://127.0.0.1:5000
  python -m harness sweep experiments/mnist1d.yaml --executor ray --address HOST:6379 \\
      --tracking-uri http://HOST:5000 --cpus-per-trial 2
\b
Exit codes: 0 ok; 1 some trial failed; 2 invalid config or usage; 3 tracking store
unreachable or unusable (also when results are left in the local spool: the next run
writes them); 130 interrupted (re-run the same command to resume)."""


@app.command(short_help="Run a sweep config (resumable).", epilog=_SWEEP_EPILOG)
def sweep(
    config: Path = typer.Argument(..., help="Sweep config (YAML), e.g. experiments/quickstart.yaml."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (trials, done, to run); "
                                 "train nothing."),
    tracking_uri: str | None = typer.Option(None, "--tracking-uri", help=_URI_HELP),
    jobs: int | None = typer.Option(None, "--jobs", "-j", min=1, help="Local worker processes, each on "
                                    "its own device(s) of the host (CUDA_VISIBLE_DEVICES on GPUs, "
                                    "HARNESS_DEVICE_IDS on CPU); more workers than devices share them, "
                                    "without GPU memory preallocation [default: the config's jobs, "
                                    "else 1; N > 1 implies --executor process]."),
    executor: str | None = typer.Option(None, "--executor", help="inprocess | process | ray "
                                        "[default: the config's executor, else inprocess]."),
    address: str | None = typer.Option(None, "--address", help="Cluster address (ray)."),
    batching: Batching | None = typer.Option(None, "--batching", help="Train seed/step-size siblings "
                                             "together under vmap: auto | on | off [default: the "
                                             "config's batching, else auto: where a short "
                                             "measurement, cached per machine, finds it faster]."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or summary."),
    cpus_per_trial: float | None = typer.Option(None, "--cpus-per-trial", min=0,
                                                help="Ray: CPUs each trial's task declares (default 1)."),
    gpus_per_trial: float | None = typer.Option(None, "--gpus-per-trial", min=0,
                                                help="Ray: GPUs each trial's task declares (Ray sets its "
                                                "CUDA_VISIBLE_DEVICES); a fraction shares a GPU, "
                                                "without memory preallocation (default 0)."),
    max_trials: int = typer.Option(DEFAULT_MAX_TRIALS, "--max-trials", min=1,
                                   help="Refuse a config that expands to more trials than this "
                                   "(checked from axis sizes, before anything is built)."),
) -> None:
    """Run every trial of CONFIG not yet FINISHED in MLflow (resumable), then print a summary."""
    from harness.config.load import ConfigError
    from harness.execute.executors import ExecutorUnavailableError
    from harness.sweep.run import SweepInterrupted, run_sweep
    from harness.tracking.errors import TrackingUnavailableError

    try:
        summary = run_sweep(config, tracking_uri=tracking_uri, jobs=jobs, executor=executor,
                            address=address, batching=batching.value if batching else None,
                            dry_run=dry_run, quiet=quiet, max_trials=max_trials,
                            executor_opts={k: v for k, v in (("cpus_per_trial", cpus_per_trial),
                                                             ("gpus_per_trial", gpus_per_trial))
                                           if v is not None})
    except ConfigError as e:
        _err(f"invalid sweep config:\n{e}")
        raise typer.Exit(2) from None
    except TrackingUnavailableError as e:
        _err(f"error: {e}")
        raise typer.Exit(3) from None
    except SweepInterrupted as e:
        _err(f"interrupted: {e.done}/{e.total} trials done; run the same command again to resume")
        raise typer.Exit(130) from None
    except ExecutorUnavailableError as e:  # e.g. --executor ray without Ray installed
        _err(f"error: {e}")
        raise typer.Exit(2) from None
    except ValueError as e:  # e.g. an unknown executor from the command line
        _err(f"error: {e}")
        raise typer.Exit(2) from None
    account = summary.spool_account()
    if account:
        _err(account)
    if summary.spooled_left:
        raise typer.Exit(3)
    if not dry_run and summary.counts()["failed"]:
        raise typer.Exit(1)


_ROLE = re.compile(r":\w+:`~?([^`]+)`")


def _first_sentence(text: str) -> str:
    para = " ".join(text.strip().split("\n\n")[0].split())
    m = re.search(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)\.\s", para)  # not at "et al. ", "e.g. "
    return para if m is None else para[: m.start() + 1]


def describe(builder) -> str:
    """One line for ``list``: the first sentence of the builder's docstring, reST roles and literal
    markup removed; a docstring that only points at another function (``:func:`optimizers.core.adam```,
    as the registry's thin factories say) is replaced by that function's first sentence."""
    import importlib
    import inspect

    text = _first_sentence(inspect.getdoc(builder) or "")
    m = re.match(r":\w+:`~?([\w.]+)`(.*)$", text)
    if m and "." in m.group(1):
        module, _, attr = m.group(1).rpartition(".")
        try:
            target = getattr(importlib.import_module(module), attr)
            rest = _plain(m.group(2).strip().lstrip(":").strip().rstrip("."))
            text = _first_sentence(inspect.getdoc(target) or "").rstrip(".")
            text += f"; {rest}." if rest and not _says_again(rest, text) else "."
        except (ImportError, AttributeError):
            pass
    return _plain(text)


def _plain(text: str) -> str:
    return _ROLE.sub(r"\1", text).replace("``", "")


def _norm(text: str) -> str:
    return re.sub(r"[\s\-_()]+", " ", _plain(text).lower()).strip()


def _says_again(rest: str, text: str) -> bool:
    """Whether the registry's remark ``rest`` only repeats the target's sentence ``text`` (its
    formula, its words) or a default the hyperparameter column already shows."""
    rest = re.sub(r"\bwith \w+ defaulting to [^;,]+", "", rest).strip(" ;,")
    rest = re.sub(r"^\w+\(i\)\s*=\s*", "", rest)  # "lr(i) = f" repeats "schedule(i) = f"
    return not _norm(rest) or _norm(rest) in _norm(text)


_PROBE_SHAPES = {"(L,)": (40,), "(H, W, C)": (8, 8, 1)}


def input_kinds(builder) -> str:
    """Which example shapes a model builder accepts, probed with its defaults on a 1-D input
    (40,) and an image (8, 8, 1): e.g. ``(L,) · (H, W, C)``; ``—`` when neither builds."""
    ok = []
    for kind, shape in _PROBE_SHAPES.items():
        try:
            md = builder(input_shape=shape, num_classes=10)
        except Exception:  # the builder refuses the shape (a 2-D CNN on (L,), ...)
            continue
        ok.append("tokens (T,)" if str(getattr(md, "input_dtype", "float32")).startswith("int") else kind)
    return " · ".join(dict.fromkeys(ok)) or "—"


@app.command("list", short_help="Models, optimizers, schedules, datasets.")
def list_(
    kind: str | None = typer.Argument(
        None, help="models | optimizers | schedules | datasets | workloads (default all)."),
) -> None:
    """Registered models, optimizers, schedules, datasets and workloads with their hyperparameters
    and defaults (a workload: dataset, model, loss, validation target, steps × batch size)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from harness.config.load import builder_hparams, default_registries

    reg = default_registries()
    kinds = {"models": ("model", reg.models), "optimizers": ("optimizer", reg.optimizers),
             "schedules": ("schedule", reg.schedules), "datasets": ("dataset", reg.datasets)}
    if kind is not None and kind not in (*kinds, "workloads"):
        from harness.core.registry import did_you_mean

        valid = [*kinds, "workloads"]
        _err(f"unknown kind {kind!r}; valid choices: {', '.join(valid)}{did_you_mean(kind, valid)}")
        raise typer.Exit(2)
    console = Console()
    for k, (single, registry) in kinds.items():
        if kind and k != kind:
            continue
        t = Table(title=k)
        t.add_column("name")
        t.add_column("hyperparameters (default)")
        if k == "models":
            t.add_column("inputs", no_wrap=True)
        t.add_column("description", overflow="fold")
        for name in sorted(registry):
            b = registry[name]
            hps = builder_hparams(single, b)
            hp = ", ".join(f"{h.name}" if h.required else f"{h.name}={h.default!r}" for h in hps.values())
            extra = [input_kinds(b)] if k == "models" else []
            t.add_row(escape(name), escape(hp or "—"), *extra, escape(describe(b)))
        if k == "datasets":
            t.add_row("tfds:NAME", "data_dir, ...", "a TFDS dataset prepared in a data_dir (array_record)")
        if k == "models":
            t.caption = ("inputs: the example shapes a model builds on — (L,): 1-D data such as mnist1d "
                         "or synthetic; (H, W, C): images such as digits; tokens (T,): int sequences")
        console.print(t)
    if kind in (None, "workloads"):
        _print_workloads(console)


def _print_workloads(console) -> None:
    """The :data:`harness.config.workloads.WORKLOADS` table for ``list``."""
    from rich.markup import escape
    from rich.table import Table

    from harness.config.workloads import WORKLOADS

    t = Table(title="workloads (validation targets)")
    t.add_column("name", no_wrap=True)
    for col in ("dataset / model", "target", "steps x batch"):
        t.add_column(col, overflow="fold")
    for name in sorted(WORKLOADS):
        w = WORKLOADS[name]
        op = ">=" if w.target_mode == "max" else "<="
        data = f"{w.dataset}{' (data_dir)' if w.needs_data_dir else ''} / {w.model}"
        t.add_row(escape(name), escape(data), escape(f"{w.metric} {op} {w.target:g}"),
                  f"{w.steps} x {w.batch_size}")
    console.print(t)


@app.command(short_help="Finished/diverged/failed/pending per sweep.")
def status(
    config: Path | None = typer.Argument(None, help="A sweep config: count its pending trials exactly."),
    experiment: str | None = typer.Option(None, "--experiment", "-e", help="Only this sweep name."),
    tracking_uri: str | None = typer.Option(None, "--tracking-uri", help=_URI_HELP),
) -> None:
    """Per sweep: finished / diverged / failed / pending trials."""
    from rich.console import Console
    from rich.table import Table

    from harness.core.names import TAG_KIND, TAG_SWEEP_ID
    from harness.tracking.client import prepare_store, search_all, trial_runs
    from harness.tracking.errors import TrackingUnavailableError
    from harness.tracking.uris import resolve_tracking_uri
    from harness.config.load import ConfigError

    uri = resolve_tracking_uri(tracking_uri)
    expected: dict[str, set[str]] = {}
    names: list[str] | None = [experiment] if experiment else None
    if config is not None:
        from harness.config.load import load_config
        from harness.sweep.run import expand, sweep_id_of

        try:
            cfg = load_config(config)
        except ConfigError as e:
            _err(f"invalid sweep config:\n{e}")
            raise typer.Exit(2) from None
        uri = resolve_tracking_uri(tracking_uri, cfg.tracking_uri)
        specs = expand(cfg)
        expected[sweep_id_of(cfg.name, specs)] = {s.trial_id for s in specs}
        names = [cfg.name]
    try:
        client = prepare_store(uri, create=False)
    except TrackingUnavailableError as e:
        _err(f"error: {e}")
        raise typer.Exit(3) from None
    exps = [client.get_experiment_by_name(n) for n in names] if names else client.search_experiments()
    if experiment and config is None and exps[0] is None:
        from harness.core.registry import did_you_mean

        known = [e.name for e in client.search_experiments()]
        _err(f"error: no experiment {experiment!r} in {uri}; experiments: {', '.join(known) or '(none)'}"
             f"{did_you_mean(experiment, known)}")
        raise typer.Exit(2)
    t = Table(title=f"sweeps in {uri}")
    for col in ("sweep", "sweep_id", "trials", "finished", "diverged", "failed", "pending", "last run"):
        # names and ids are never truncated: they are what users copy into other commands
        t.add_column(col, no_wrap=col != "last run", overflow="fold")
    for exp in exps:
        if exp is None:
            continue
        parents = search_all(client, exp.experiment_id, f"tags.`{TAG_KIND}` = 'parent'")
        by_trial = trial_runs(client, exp.experiment_id)
        sweep_ids: dict[str, dict] = {}
        for p in sorted(parents, key=lambda r: r.info.start_time):
            sid = p.data.tags.get(TAG_SWEEP_ID, "?")
            d = sweep_ids.setdefault(sid, {"n": 0, "last": p})
            d["last"] = p
            d["n"] = max(d["n"], int(p.data.params.get("n_trials", 0) or 0))
        for sid in expected:
            sweep_ids.setdefault(sid, {"n": len(expected[sid]), "last": None})
        for sid, d in sweep_ids.items():
            ids = expected.get(sid)
            if ids is None:  # trials that ran under this sweep id
                ids = {tid for tid, rs in by_trial.items()
                       if any(r.data.tags.get(TAG_SWEEP_ID) == sid for r in rs)}
            c = {"finished": 0, "diverged": 0, "failed": 0}
            for tid in ids:
                rs = by_trial.get(tid, [])
                fin = [r for r in rs if r.info.status == "FINISHED"]
                if fin:
                    c["diverged" if fin[0].data.tags.get("status") == "diverged" else "finished"] += 1
                elif any(r.info.status == "FAILED" for r in rs):
                    c["failed"] += 1
            n = max(d["n"], len(ids))
            pending = n - sum(c.values())
            last = d["last"]
            last_s = "—" if last is None else _parent_state(client, last)
            t.add_row(exp.name, sid, str(n), str(c["finished"]), str(c["diverged"]), str(c["failed"]),
                      str(pending), last_s)
    console = Console()
    if not console.is_terminal:  # piped or logged: do not squeeze ids into 80 columns
        console = Console(width=140)
    console.print(t)
    from harness.tracking import spool

    n_spooled = len(spool.entries(uri))
    if n_spooled:
        console.print(f"{n_spooled} trained results are in the local spool {spool.spool_dir(uri)} (the "
                      f"store did not take them); the next sweep on this store writes them", soft_wrap=True)


def _parent_state(client, run) -> str:
    """``name (STATUS)``; for a RUNNING parent also whether its process is alive, e.g.
    ``sweep-... (RUNNING, but its process host:123 is gone; the next sweep marks it KILLED)``."""
    from harness.tracking.liveness import run_liveness

    s = f"{run.info.run_name} ({run.info.status}"
    if run.info.status == "RUNNING":
        state, why = run_liveness(client, run)
        if state == "gone":
            s += f", but {why}; the next sweep marks it KILLED"
        elif state == "alive":
            s += f": {why}"
        else:
            s += f": {why}"
    return s + ")"


@app.command(short_help="Start the MLflow UI on the store.")
def ui(
    experiment: str | None = typer.Option(None, "--experiment", "-e", help="Sweep name to open."),
    port: int = typer.Option(5000, "--port", help="Port for the UI on 127.0.0.1."),
    host: str = typer.Option("127.0.0.1", "--host"),
    tracking_uri: str | None = typer.Option(None, "--tracking-uri", help=_URI_HELP),
) -> None:
    """Start `mlflow ui` on the store and print the URL of the experiment's runs view (charts of
    the trials grouped by optimizer; default experiment: the sweep that ran last). Ctrl-C stops it."""
    import subprocess

    from harness.tracking import mlflow_ui
    from harness.tracking.client import prepare_store
    from harness.tracking.errors import TrackingUnavailableError
    from harness.tracking.uris import artifact_root_for, is_server, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    exp_id = share_key = None
    try:
        client = prepare_store(uri, create=False)
        exp = _ui_experiment(client, experiment, uri)
        if exp is not None:
            exp_id = exp.experiment_id
            share_key = mlflow_ui.prepare(client, exp_id)  # training kind + the grouped chart view
    except TrackingUnavailableError as e:
        _err(f"error: {e}")
        raise typer.Exit(3) from None
    base = uri if is_server(uri) else f"http://{host}:{port}"
    url = mlflow_ui.runs_view_url(base, exp_id, share_key) if exp_id else base.rstrip("/")
    if is_server(uri):
        typer.echo(f"The tracking server already serves the UI: {url}")
        return
    busy = _port_in_use(host, port)
    if busy:
        _err(f"error: cannot serve the UI on {host}:{port}: {busy}; choose another port, e.g. "
             f"--port {port + 1}")
        raise typer.Exit(2)
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host,
           "--port", str(port), "--workers", "1"]
    root = artifact_root_for(uri)
    if root:
        cmd += ["--default-artifact-root", root]
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    if exp_id is None:
        typer.echo("No sweep in this store yet: run `python -m harness sweep CONFIG` first.")
    typer.echo(f"MLflow UI: {url}")
    typer.echo(f"  (store {uri}; Ctrl-C to stop)")
    import signal

    proc = subprocess.Popen(cmd, env=env, start_new_session=True)

    def _stop(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    try:
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
    raise typer.Exit(code)


def _ui_experiment(client, name: str | None, uri: str):
    """The experiment ``ui`` opens: ``name``, else the one whose sweep ran last (None if the store
    holds no sweep). Exits 2 naming the experiments there when ``name`` is unknown."""
    from harness.core.names import TAG_KIND

    if name:
        exp = client.get_experiment_by_name(name)
        if exp is None:
            from harness.core.registry import did_you_mean

            known = [e.name for e in client.search_experiments()]
            _err(f"error: no experiment {name!r} in {uri}; experiments: {', '.join(known) or '(none)'}"
                 f"{did_you_mean(name, known)}")
            raise typer.Exit(2)
        return exp
    latest = None
    for exp in client.search_experiments():
        runs = client.search_runs([exp.experiment_id], f"tags.`{TAG_KIND}` = 'parent'",
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


_REPORT_EPILOG = """\b
Examples:
  python -m harness report --experiment quickstart                  # latest sweep
  python -m harness report -e quickstart -o quickstart.html
  python -m harness report -e mnist1d --sweep 1a2b3c4d5e6f --baseline 0f9e8d7c6b5a
\b
Writes one self-contained HTML file (vector figures, interactive curves, downloads) and the
tidy CSV beside it, prints both paths, and logs both to the parent runs whose trials it shows."""


@app.command(short_help="Write the HTML comparison report.", epilog=_REPORT_EPILOG)
def report(
    experiment: str = typer.Option(..., "--experiment", "-e", help="Sweep name (MLflow experiment)."),
    sweep_id: str | None = typer.Option(None, "--sweep", help="Sweep id (default: the latest)."),
    output: str | None = typer.Option(None, "-o", "--output", help="Output HTML path."),
    baseline: str | None = typer.Option(None, "--baseline", help="Sweep id to compare against."),
    tracking_uri: str | None = typer.Option(None, "--tracking-uri", help=_URI_HELP),
) -> None:
    """Build one self-contained HTML comparison report from what MLflow holds."""
    from harness.tracking.client import prepare_store
    from harness.tracking.errors import TrackingUnavailableError
    from harness.tracking.uris import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    try:
        prepare_store(uri, create=False)
    except TrackingUnavailableError as e:
        _err(f"error: {e}")
        raise typer.Exit(3) from None
    from reports import make_report

    try:
        path = make_report(experiment, sweep_id, output, baseline, uri)
    except (LookupError, ValueError) as e:  # unknown experiment / sweep id, nothing to report
        _err(f"error: {e.args[0] if e.args else e}")
        raise typer.Exit(2) from None
    csv = path.with_suffix(".csv")
    typer.echo(f"report: {path} ({path.stat().st_size / 1e6:.1f} MB, one self-contained HTML file)")
    if csv.exists():
        typer.echo(f"data:   {csv} (the tidy table behind every figure)")
    typer.echo("Both are also logged to the sweep's parent run(s) in MLflow, under reports/.")


def main() -> None:
    """Entry point of ``python -m harness`` and the ``harness`` script."""
    # MLflow announces schema creation and migrations at INFO; the CLI reports what matters itself.
    # (MLflow reads this when it is first imported; a user's own setting wins.)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    app()
