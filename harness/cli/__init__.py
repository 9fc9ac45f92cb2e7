"""``python -m harness``: the command line (typer).

Commands: ``sweep`` (run a config), ``list`` (registries and hyperparameters), ``status`` (per sweep:
finished/diverged/failed/pending), ``ui`` (the MLflow UI on the store), ``report`` (HTML report, or
the tables as Markdown, LaTeX or CSV), ``reproduce`` (one stored trial trained again and compared),
``data tokenize|info`` (token shards),
one module each (``harness.cli.<command>_cmd``); this package makes the typer ``app`` of them and
``main``. jax, MLflow, pydantic and the registries are imported inside the commands, so ``--help`` is
fast. The top layer of ``harness``: may import every subpackage, and ``reports`` (``report`` only).

Exit codes: 0 ok; 1 some trials failed (``sweep``) or a runtime error; 2 invalid config or usage;
3 the tracking store cannot be reached.

The process ends after its command whatever threads a user's code left running: when a thread
that is not a daemon is still alive as the command returns (an optimizer file that started one),
a daemon watch gives the interpreter's own shutdown (which joins such threads, then runs the
``atexit`` handlers) :data:`EXIT_GRACE_S` seconds, then runs the ``atexit`` handlers, flushes
stdout and stderr and ends the process with the command's exit code (``os._exit``).

A ``jax.debug.callback`` (or ``pure_callback``, ``io_callback``) of a user's optimizer that raises
fails its trial, whose run records the error and its traceback; JAX's own log record of it (the
traceback again, on stderr) is dropped (:class:`harness.core.conditions.CallbackFailed`, in every
worker too), as a failed trial prints one line, and so is the same error raised once more by
JAX's ``atexit`` wait for its runtime tokens
(:func:`_settle_jax_effects`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time

import typer

import harness
from harness.cli import data_cmd, list_cmd, report_cmd, reproduce_cmd, shared, status_cmd, sweep_cmd, ui_cmd
from harness.core import conditions

_EPILOG = """\b
Examples:
  python -m harness list optimizers         # names, hyperparameters
  python -m harness sweep experiments/quickstart.yaml --dry-run
  python -m harness sweep experiments/quickstart.yaml     # ./mlflow.db
  python -m harness sweep experiments/mnist1d.yaml --jobs 2
  python -m harness status                  # finished / failed / pending
  python -m harness report --experiment quickstart -o quickstart.html
  python -m harness reproduce TRIAL_ID       # train it again: identical?
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
app.command("list", short_help="Models, optimizers, schedules, datasets, workloads.")(list_cmd.list_)
app.command(short_help="Finished/diverged/failed/pending per sweep.")(status_cmd.status)
app.command(short_help="Start the MLflow UI on the store.")(ui_cmd.ui)
app.command(short_help="Write the HTML comparison report.", epilog=report_cmd.EPILOG)(report_cmd.report)
app.command(short_help="Re-train one stored trial; compare its values.",
            epilog=reproduce_cmd.EPILOG)(reproduce_cmd.reproduce)
app.add_typer(data_cmd.app, name="data", short_help="Token shards: tokenize text, describe a folder.")

__all__ = ["EXIT_GRACE_S", "app", "main"]

#: Seconds the interpreter's shutdown may wait for threads left alive before the process ends anyway.
EXIT_GRACE_S = 5.0


def _settle_jax_effects() -> None:
    """Wait for JAX's pending side effects now (``jax.effects_barrier``); a callback's error it
    raises again (its trial already failed with it) is dropped with the tokens that hold it, so
    that JAX's ``atexit`` handlers do not print it as a traceback."""
    if "jax" not in sys.modules:
        return
    try:
        sys.modules["jax"].effects_barrier()
    except Exception:
        with contextlib.suppress(Exception):
            from jax._src import dispatch  # the token set JAX's atexit handlers wait on

            dispatch.runtime_tokens.clear()


def _exit_code(code: object) -> int:
    """``SystemExit.code`` as the process's exit status (``None`` 0, an int itself, text 1)."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _end_despite_threads(code: int, grace_s: float = EXIT_GRACE_S) -> None:
    """When a non-daemon thread other than this one is alive, start the daemon watch (module
    docstring) that ends the process with ``code`` ``grace_s`` seconds from now."""
    me = threading.current_thread()
    if not any(t is not me and t.is_alive() and not t.daemon for t in threading.enumerate()):
        return

    def watch() -> None:
        time.sleep(grace_s)
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)

    threading.Thread(target=watch, name="harness-exit-watch", daemon=True).start()


def main() -> None:
    """Entry point of ``python -m harness`` and the ``harness`` script."""
    # MLflow announces schema creation and migrations at INFO; the CLI reports what matters itself.
    # (MLflow reads this when it is first imported; a user's own setting wins.)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    shared.PROCESS_START = harness.PROCESS_START  # a sweep's time budget starts at the process start
    conditions.drop_callback_failures()
    try:
        app()
    except SystemExit as e:  # typer ends every command so
        _settle_jax_effects()
        _end_despite_threads(_exit_code(e.code))
        raise
