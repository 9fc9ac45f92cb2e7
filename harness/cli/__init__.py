"""``python -m harness``: the command line (typer).

Commands: ``sweep`` (run a config), ``list`` (registries and hyperparameters), ``status`` (per sweep:
finished/diverged/failed/pending), ``ui`` (the MLflow UI on the store), ``report`` (HTML report),
one module each (``harness.cli.<command>_cmd``); this package makes the typer ``app`` of them and
``main``. jax, MLflow, pydantic and the registries are imported inside the commands, so ``--help`` is
fast. The top layer of ``harness``: may import every subpackage, and ``reports`` (``report`` only).

Exit codes: 0 ok; 1 some trials failed (``sweep``) or a runtime error; 2 invalid config or usage;
3 the tracking store cannot be reached.
"""

from __future__ import annotations

import os

import typer

import harness
from harness.cli import common, list_cmd, report_cmd, status_cmd, sweep_cmd, ui_cmd

_EPILOG = """\b
Examples:
  python -m harness list optimizers         # names, hyperparameters
  python -m harness sweep experiments/quickstart.yaml --dry-run
  python -m harness sweep experiments/quickstart.yaml     # ./mlflow.db
  python -m harness sweep experiments/mnist1d.yaml --jobs 2
  python -m harness status                  # finished / failed / pending
  python -m harness report --experiment quickstart -o quickstart.html
  python -m harness ui --experiment quickstart   # MLflow UI, same store
\b
Re-running a sweep skips finished trials. Use --tracking-uri
http://HOST:PORT (or MLFLOW_TRACKING_URI) for a shared MLflow server.
Docs: README.md, docs/architecture.md."""

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Benchmark harness for training algorithms in JAX (sweeps logged to MLflow).",
                  epilog=_EPILOG)

# Registered in this order, which ``--help`` keeps.
app.command(short_help="Run a sweep config (resumable).", epilog=sweep_cmd.EPILOG)(sweep_cmd.sweep)
app.command("list", short_help="Models, optimizers, schedules, datasets.")(list_cmd.list_)
app.command(short_help="Finished/diverged/failed/pending per sweep.")(status_cmd.status)
app.command(short_help="Start the MLflow UI on the store.")(ui_cmd.ui)
app.command(short_help="Write the HTML comparison report.", epilog=report_cmd.EPILOG)(report_cmd.report)

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of ``python -m harness`` and the ``harness`` script."""
    # MLflow announces schema creation and migrations at INFO; the CLI reports what matters itself.
    # (MLflow reads this when it is first imported; a user's own setting wins.)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    common.PROCESS_START = harness.PROCESS_START  # a sweep's time budget starts at the process start
    app()
