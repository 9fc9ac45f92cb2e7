"""A sweep from config to MLflow: :func:`run_sweep` validates, plans and runs a config.

The steps live in their own modules; this one orchestrates them (and re-exports their public names,
so ``from harness.sweep import expand`` keeps working):

- :mod:`harness.expansion`: config → ordered, de-duplicated trials (:func:`expand`), the stable
  :func:`sweep_id_of`;
- :mod:`harness.preflight`: every dataset, model, optimizer and schedule built once before any write;
- :mod:`harness.plan`: which trials are done in the store (:func:`make_plan`), work units
  (:func:`group_units`);
- :mod:`harness.parent_run`: the parent run of one invocation (started before any worker, ended with
  the counts);
- :mod:`harness.progress`: the dry-run plan table, the progress bar and per-trial lines;
- :mod:`harness.summary`: :class:`SweepSummary`, :func:`best_configs`, the end table.

:func:`run_sweep` does it all: store preparation (before any worker), experiment, one parent run per
invocation, the executor, a progress bar, and the end summary table.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from harness.tracking import spool
from harness.tracking.client import get_or_create_experiment, prepare_store
from harness.tracking.health import HEALTH, store_reachable
from harness.tracking.liveness import Heartbeat, end_leftovers
from harness.tracking.provenance import git_commit
from harness.tracking.uris import is_server, resolve_tracking_uri
from harness.config.load import load_config
from harness.config.registries import Registries
from harness.plan.expansion import component_variants, expand, search_tags, sweep_id_of
from harness.config.limits import DEFAULT_MAX_TRIALS, tracking_uri_problem
from harness.sweep.parent_run import end_parent, kill_dead_invocations, start_parent
from harness.plan.units import Plan, group_units, make_plan
from harness.sweep.preflight import preflight
from harness.sweep.progress import execute_with_progress, print_plan
from harness.core.registry import did_you_mean, known_executors
from harness.core.spec import TrialSpec
from harness.sweep.summary import SweepSummary, best_configs, print_summary, python_command
from harness.execute.worker import RunContext, TrialOutcome, replay_spool

__all__ = ["Plan", "SweepInterrupted", "SweepSummary", "best_configs", "component_variants", "expand",
           "group_units", "make_plan", "preflight", "print_summary", "python_command", "run_sweep",
           "sweep_id_of"]


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep (the parent run is ended KILLED): ``done`` of ``total`` trials have a
    FINISHED run in the store (earlier invocations included; see :func:`_n_done_after_interrupt`)."""

    def __init__(self, done: int, total: int):
        super().__init__(done, total)
        self.done, self.total = done, total


def _n_done_after_interrupt(specs: list[TrialSpec], client, experiment_id: str,
                            outcomes: list[TrialOutcome]) -> int:
    """How many of ``specs`` are done after a Ctrl-C, read back from the store as :func:`make_plan`
    does (a trial with a FINISHED run): with ``--jobs N`` units in flight finish while the pool shuts
    down and their outcomes never reach ``outcomes``. If the store cannot be read (or a second Ctrl-C
    comes), the trials in ``outcomes`` that did not fail."""
    try:
        return len(make_plan(specs, client, experiment_id).done)
    except (Exception, KeyboardInterrupt):
        return len({o.trial_id for o in outcomes if o.status != "failed"})


def run_sweep(config_path: str | Path, *, tracking_uri: str | None = None, jobs: int | None = None,
              executor: str | None = None, address: str | None = None, batching: str | None = None,
              dry_run: bool = False, quiet: bool = False, registries: Registries | None = None,
              console=None, executor_obj=None,
              executor_opts: dict[str, Any] | None = None,
              max_trials: int = DEFAULT_MAX_TRIALS) -> SweepSummary:
    """Validate, plan and run a sweep config; see the module docstring. ``max_trials`` bounds the
    plan (checked from axis sizes before expansion, :func:`harness.config.load.check_plan_size`).

    Raises:
      harness.config.errors.ConfigError: invalid config (nothing logged).
      harness.tracking.errors.TrackingUnavailableError: the store cannot be reached (nothing trained).
      SweepInterrupted: Ctrl-C (a ``KeyboardInterrupt``); the parent run is ended KILLED.
    """
    from rich.console import Console

    if console is None:
        import os

        console = Console(stderr=False)
        if not console.is_terminal and not os.environ.get("COLUMNS"):
            console = Console(stderr=False, width=140)  # piped or logged: room for the commands
    t_start = time.perf_counter()
    cfg = load_config(config_path, registries, max_trials=max_trials)
    _check_uri(tracking_uri)
    overrides: dict[str, Any] = {}
    if jobs is not None:
        overrides["jobs"] = jobs
    if executor is not None:
        overrides["executor"] = executor
    if address is not None:
        overrides["address"] = address
    if batching is not None:
        overrides["batching"] = batching
    if overrides:
        cfg = cfg.model_copy(update=overrides)
    if cfg.jobs > 1 and cfg.executor == "inprocess" and executor is None:
        cfg = cfg.model_copy(update={"executor": "process"})
    if cfg.executor not in known_executors():
        ex_names = known_executors()
        raise ValueError(f"unknown executor {cfg.executor!r}; valid choices: {', '.join(ex_names)}"
                         f"{did_you_mean(cfg.executor, ex_names)}")
    from harness.execute.devices import parent_off_devices
    from harness.execute.executors import InProcessExecutor

    # With workers (--jobs N, Ray) the parent trains nothing: the JAX backend its preflight starts
    # must not preallocate the GPU memory the workers need (harness.execute.devices.parent_off_devices).
    trains_here = isinstance(executor_obj, InProcessExecutor) if executor_obj is not None \
        else cfg.executor == "inprocess"
    off = contextlib.nullcontext() if trains_here else parent_off_devices()
    with off:
        specs = preflight(cfg, str(config_path), registries)  # before the store is touched, dry run too
    sweep_id = sweep_id_of(cfg.name, specs)
    uri = resolve_tracking_uri(tracking_uri, cfg.tracking_uri)

    from harness.execute.executors import get_executor

    # The executor is built and validated before the dry-run branch: a dry run promises what a run
    # would do, so it refuses what a run would refuse (a bad HARNESS_DEVICE_IDS, a --jobs device plan
    # that does not fit, Ray with an unshareable store).
    # Devices per trial for --jobs' device plan: the config's parallelism.devices once it has one.
    # (Passed only when it is not 1, so that executors registered without the option keep working.)
    per_trial = getattr(getattr(cfg, "parallelism", None), "devices", None) or 1
    opts = {**({"devices_per_trial": per_trial} if per_trial != 1 else {}), **(executor_opts or {})}
    ex = executor_obj or get_executor(cfg.executor, jobs=cfg.jobs, address=cfg.address, **opts)
    if hasattr(ex, "validate"):  # e.g. Ray refuses a SQLite store with a remote cluster, before any write
        ex.validate(uri)  # (--jobs N: plans the workers' devices, refuses a plan that does not fit)
    device_plan = getattr(ex, "device_plan", None)
    if device_plan is not None and not quiet and (device_plan.platform != "cpu" or device_plan.n_devices > 1):
        console.print(f"devices: {device_plan.describe()}", soft_wrap=True)
    if dry_run:
        # Read-only: do not create a store that does not exist yet.
        exp_id = None
        client = None
        if is_server(uri) or not uri.startswith("sqlite:///") or Path(uri[10:]).exists():
            client = prepare_store(uri)
            exp = client.get_experiment_by_name(cfg.name)
            exp_id = exp.experiment_id if exp else None
        plan = make_plan(specs, client, exp_id) if client else Plan(specs, list(specs))
        print_plan(console, cfg, plan, sweep_id, uri)
        return SweepSummary(cfg.name, sweep_id, exp_id, None, uri, plan.done_outcomes,
                            time.perf_counter() - t_start, dry_run=True)

    client = prepare_store(uri)  # health check / schema creation, before any worker
    replayed = replay_spool(uri)  # results an earlier invocation could not write
    if replayed.written and not quiet:
        console.print(f"{replayed.written} results kept in the local spool by an earlier run were "
                      f"written to the store")
    exp_id = get_or_create_experiment(client, cfg.name, uri)
    plan = make_plan(specs, client, exp_id)
    outcomes: list[TrialOutcome] = plan.done_outcomes
    outcomes += _still_spooled(plan, uri)  # trained, not yet in the store: not trained again
    batching_tags: dict[str, str] = {}  # trial_id -> harness.batching (how its unit trains, and why)
    units = group_units(plan.todo, cfg.batching, labels=batching_tags) if plan.todo else []
    if not plan.todo:
        # Nothing to train: no new parent run (an empty one would hold no trial, get the report of
        # the runs it does not describe, and be what `status` calls the sweep's last run). A dead
        # invocation's runs are still marked KILLED, as `status` promises.
        kill_dead_invocations(client, exp_id)
        if not quiet:
            console.print(f"{len(plan.done)} trials already finished: nothing to train, no new parent run.")
        summary = SweepSummary(cfg.name, sweep_id, exp_id, None, uri, plan.done_outcomes,
                               time.perf_counter() - t_start)
        if not quiet:
            print_summary(console, summary)
        return summary

    parent_id = start_parent(client, exp_id, cfg, config_path, specs, plan, sweep_id, uri)
    heartbeat = Heartbeat(uri, parent_id).start()
    from harness.train import checkpoint

    ctx = RunContext(tracking_uri=uri, experiment_id=exp_id, parent_run_id=parent_id, sweep_id=sweep_id,
                     sweep=cfg.name, git_commit=git_commit(), measure_perf=cfg.measure_perf,
                     trial_tags=_with_batching_tags(search_tags(specs), batching_tags),
                     checkpoint_every=cfg.checkpoint_every or "default",
                     checkpoint_dir=checkpoint.root_for(uri, cfg.checkpoint_dir),
                     keep_final_checkpoint=cfg.keep_final_checkpoint)
    status = "KILLED"
    try:
        execute_with_progress(console, ex, units, ctx, outcomes, plan, quiet)
        status = "FINISHED"
    except KeyboardInterrupt:
        raise SweepInterrupted(_n_done_after_interrupt(specs, client, exp_id, outcomes), len(specs)) from None
    except Exception:
        status = "FAILED"
        raise
    finally:
        heartbeat.stop()
        _close_invocation(client, exp_id, parent_id, uri, outcomes, time.perf_counter() - t_start, status,
                          getattr(ex, "flush_wait_s", 0.0))
    left = spool.entries(uri)
    summary = SweepSummary(cfg.name, sweep_id, exp_id, parent_id, uri, outcomes,
                           time.perf_counter() - t_start, spooled_left=len(left),
                           spool_dir=str(spool.spool_dir(uri)) if left else "",
                           spooled_during=max(HEALTH.spooled,
                                     sum(o.spooled and not o.skipped for o in outcomes)),
                           store_error=HEALTH.error)
    if not quiet:
        print_summary(console, summary)
    return summary


def _with_batching_tags(tags: dict[str, dict[str, str]], batching: dict[str, str]) -> dict:
    """``trial_tags`` plus each trial's ``harness.batching`` tag."""
    out = {tid: dict(t) for tid, t in tags.items()}
    for tid, label in batching.items():
        out.setdefault(tid, {})["harness.batching"] = label
    return out


def _still_spooled(plan: Plan, uri: str) -> list[TrialOutcome]:
    """Take the trials whose results are still in the local spool (the store did not take them
    yet) out of ``plan.todo``; their outcomes, ``skipped`` and ``spooled``."""
    pending = spool.pending_trials(uri)
    if not pending:
        return []
    from harness.execute.worker import _outcome

    out = []
    for s in [s for s in plan.todo if s.trial_id in pending]:
        o = _outcome(pending[s.trial_id]["result"], None, 0.0)
        o.skipped = o.spooled = True
        out.append(o)
    plan.todo = [s for s in plan.todo if s.trial_id not in pending]
    return out


def _close_invocation(client, exp_id: str, parent_id: str, uri: str, outcomes: list[TrialOutcome],
                      wall_s: float, status: str, flush_wait_s: float) -> None:
    """End of an invocation, whatever happened: write what the spool holds (the store may answer
    again), end this invocation's leftover RUNNING trial runs, end the parent run. A store that
    fails here leaves the parent RUNNING with an owner that is about to exit: the next invocation
    marks it KILLED, and ``status`` shows it as gone meanwhile."""
    try:
        if spool.entries(uri) and store_reachable(uri):
            replay_spool(uri)
        end_leftovers(client, exp_id, parent_id)
        end_parent(client, parent_id, outcomes, wall_s, status, flush_wait_s=flush_wait_s)
    except Exception as e:
        HEALTH.failed(e)


def _check_uri(cli_uri: str | None) -> None:
    """A ``--tracking-uri`` or ``MLFLOW_TRACKING_URI`` the harness cannot use is a usage error
    before anything is loaded or written (the config's ``tracking_uri`` was checked with it).

    Raises:
      ValueError: names the source and the problem (the CLI exits 2).
    """
    import os

    for source, uri in (("--tracking-uri", cli_uri),
                        ("MLFLOW_TRACKING_URI", os.environ.get("MLFLOW_TRACKING_URI"))):
        if uri:
            if (msg := tracking_uri_problem(uri)) is not None:
                raise ValueError(f"{source}: {msg}")
            return
