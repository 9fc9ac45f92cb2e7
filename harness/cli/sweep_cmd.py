"""``sweep``: run a config (resumable) and map what went wrong to the exit code."""

from __future__ import annotations

import signal
from pathlib import Path

import typer

from harness.cli import shared
from harness.cli.shared import URI_HELP, err
from harness.config.limits import DEFAULT_MAX_TRIALS

EPILOG = """\b
Examples:
  python -m harness sweep experiments/quickstart.yaml
  # the plan, nothing trained:
  python -m harness sweep experiments/quickstart.yaml --dry-run
  # 2 local worker processes:
  python -m harness sweep experiments/mnist1d.yaml --jobs 2
  # part of a config (the same trial ids as the whole config):
  python -m harness sweep experiments/quickstart.yaml --only optimizer=adam
  # a smoke run: the first 2 steps of every trial (new trial ids):
  python -m harness sweep experiments/quickstart.yaml --max-steps 2
  python -m harness sweep experiments/mnist1d.yaml \\
      --tracking-uri http://127.0.0.1:5000
  python -m harness sweep experiments/mnist1d.yaml --executor ray \\
      --address HOST:6379 --tracking-uri http://HOST:5000 --cpus-per-trial 2
\b
Exit codes: 0 ok; 1 some trial failed; 2 invalid config or usage; 3
tracking store unreachable or unusable (also when results are left in
the local spool: the next run writes them); 130 interrupted by Ctrl-C,
143 stopped by SIGTERM (either way the results queued for the store are
written first and the parent run is ended KILLED; re-run the same
command to resume)."""


#: ``sweep``'s options with long help, each its own ``typer.Option``.
JOBS = typer.Option(None, "--jobs", "-j", min=1, help="Local worker processes, each on "
                    "its own device(s) of the host (CUDA_VISIBLE_DEVICES on GPUs, "
                    "HARNESS_DEVICE_IDS on CPU); more workers than devices share them, "
                    "without GPU memory preallocation [default: the config's jobs, "
                    "else 1; N > 1 implies --executor process].")
BATCHING = typer.Option(None, "--batching", parser=shared.one_of("auto", "on", "off"),
                        metavar="auto|on|off", help="Train seed/step-size siblings "
                        "together under vmap: auto | on | off [default: the "
                        "config's batching, else auto: where a short "
                        "measurement, cached per machine, finds it faster].")
GPUS_PER_TRIAL = typer.Option(None, "--gpus-per-trial", min=0,
                              help="Ray: GPUs each trial's task declares (Ray sets its "
                              "CUDA_VISIBLE_DEVICES); a fraction shares a GPU, "
                              "without memory preallocation (default 0).")
MAX_TRIALS = typer.Option(DEFAULT_MAX_TRIALS, "--max-trials", min=1,
                          help="Refuse a config that expands to more trials than this "
                          "(checked from axis sizes, before anything is built), or whose "
                          "adaptive search can train more; an adaptive search whose "
                          "diverged trials leave steps for more stops proposing here.")
NO_COMPILE_CACHE = typer.Option(False, "--no-compile-cache",
                                help="Compile every program afresh instead of loading it "
                                "from the persistent XLA cache in $HARNESS_CACHE_DIR/xla "
                                "(also: HARNESS_COMPILE_CACHE=0).")
ONLY = typer.Option(None, "--only", metavar="AXIS=VALUE[,VALUE]",
                    help="Run only the trials with these values (axes: optimizer, "
                    "model, dataset, schedule, seed, workload; repeat for "
                    "several axes), with the same trial ids as the whole "
                    "config; the whole config is still validated.")
MAX_STEPS = typer.Option(None, "--max-steps", min=1,
                         help="Smoke run: train at most this many steps of every trial, "
                         "its schedule over its full budget (new trial ids; the "
                         "summary says it is a smoke run).")


def sweep(
    config: Path = typer.Argument(..., help="Sweep config (YAML), e.g. experiments/quickstart.yaml."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (trials, done, to run); "
                                 "train nothing."),
    tracking_uri: str | None = typer.Option(None, "--tracking-uri", help=URI_HELP),
    jobs: int | None = JOBS,
    executor: str | None = typer.Option(None, "--executor", help="inprocess | process | ray "
                                        "[default: the config's executor, else inprocess]."),
    address: str | None = typer.Option(None, "--address", help="Cluster address (ray)."),
    batching: str | None = BATCHING,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar, summary or dry-run plan."),
    explain: bool = typer.Option(False, "--explain", help="Under the summary, its rules in full (the rank "
                                 "rule, the selection order, the clock) instead of two short sentences."),
    cpus_per_trial: float | None = typer.Option(None, "--cpus-per-trial", min=0,
                                                help="Ray: CPUs each trial's task declares (default 1)."),
    gpus_per_trial: float | None = GPUS_PER_TRIAL,
    max_trials: int = MAX_TRIALS,
    no_compile_cache: bool = NO_COMPILE_CACHE,
    only: list[str] | None = ONLY,
    max_steps: int | None = MAX_STEPS,
) -> None:
    """Run every trial of CONFIG not yet FINISHED in MLflow (resumable), then print a summary."""
    summary = _run_or_exit(config, tracking_uri=tracking_uri, jobs=jobs, executor=executor,
                           address=address, batching=batching,
                           dry_run=dry_run, quiet=quiet, explain=explain, max_trials=max_trials,
                           compile_cache=not no_compile_cache, process_start=shared.PROCESS_START,
                           only=only or None, max_steps=max_steps,
                           executor_opts={k: v for k, v in (("cpus_per_trial", cpus_per_trial),
                                                            ("gpus_per_trial", gpus_per_trial))
                                          if v is not None})
    account = summary.spool_account()
    if account:
        err(account)
    if summary.spooled_left:
        raise typer.Exit(3)
    if not dry_run and summary.counts()["failed"]:
        raise typer.Exit(1)


def _run_or_exit(config: Path, **options):
    """:func:`harness.orchestrate.run.run_sweep` of ``config`` with ``options``: its summary, or what went
    wrong as one message on stderr and the exit code (2 config or usage, 3 store, 128 + signal)."""
    from harness.config.environment import EnvSettingError
    from harness.config.errors import ConfigError, UsageError
    from harness.execute.executors import ExecutorUnavailableError
    from harness.orchestrate.run import SweepInterrupted, run_sweep
    from harness.tracking.store_errors import TrackingUnavailableError

    try:
        return run_sweep(config, **options)
    except ConfigError as e:  # an EnvSettingError (a HARNESS_* variable) is one line of its own,
        # so is a UsageError (a tracking URI, executor or --only the harness cannot use)
        err(f"error: {e}" if isinstance(e, EnvSettingError | UsageError) else f"invalid sweep config:\n{e}")
        raise typer.Exit(2) from None
    except TrackingUnavailableError as e:
        err(f"error: {e}")
        raise typer.Exit(3) from None
    except SweepInterrupted as e:  # Ctrl-C: 130; SIGTERM: 143 (128 + the signal, as a shell says)
        if shared.PROCESS_START is not None:  # the process ends now: another signal changes nothing
            for s in (signal.SIGINT, signal.SIGTERM):  # (was exit -15); in a longer process, kept
                signal.signal(s, signal.SIG_IGN)
        err(f"{_stopped_by(e.signum)}: {e.done}/{e.total} trials done; run the same command again to resume")
        raise typer.Exit(128 + e.signum) from None
    except KeyboardInterrupt:  # before any trial was handed out (the config, pre-flight, the store)
        from harness.core import interrupt

        err(f"{_stopped_by(interrupt.SIGNUM[0])} before training started; run the same command again")
        raise typer.Exit(128 + interrupt.SIGNUM[0]) from None
    except ExecutorUnavailableError as e:  # e.g. --executor ray without Ray installed
        err(f"error: {e}")
        raise typer.Exit(2) from None
    except ValueError as e:  # e.g. an unknown executor from the command line
        err(f"error: {e}")
        raise typer.Exit(2) from None


def _stopped_by(signum: int) -> str:
    """``"interrupted"`` (Ctrl-C) or ``"stopped by SIGTERM"``."""
    return "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
