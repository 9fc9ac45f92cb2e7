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

import time
from pathlib import Path
from typing import Any

from harness import tracking
from harness.config import Registries, load_config
from harness.expansion import component_variants, expand, search_tags, sweep_id_of
from harness.parent_run import end_parent, start_parent
from harness.plan import Plan, group_units, make_plan
from harness.preflight import preflight
from harness.progress import execute_with_progress, print_plan
from harness.registry import did_you_mean, known_executors
from harness.spec import TrialSpec
from harness.summary import SweepSummary, best_configs, print_summary, python_command
from harness.worker import RunContext, TrialOutcome

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
              executor_opts: dict[str, Any] | None = None) -> SweepSummary:
    """Validate, plan and run a sweep config; see the module docstring.

    Raises:
      harness.config.ConfigError: invalid config (nothing logged).
      harness.tracking.TrackingUnavailableError: the store cannot be reached (nothing trained).
      SweepInterrupted: Ctrl-C (a ``KeyboardInterrupt``); the parent run is ended KILLED.
    """
    from rich.console import Console

    if console is None:
        console = Console(stderr=False)
        if not console.is_terminal:  # piped or logged: do not squeeze the summary into 80 columns
            console = Console(stderr=False, width=140)
    t_start = time.perf_counter()
    cfg = load_config(config_path, registries)
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
    specs = preflight(cfg, str(config_path), registries)  # before the store is touched, dry run too
    sweep_id = sweep_id_of(cfg.name, specs)
    uri = tracking.resolve_tracking_uri(tracking_uri, cfg.tracking_uri)

    if dry_run:
        # Read-only: do not create a store that does not exist yet.
        exp_id = None
        client = None
        if tracking.is_server(uri) or not uri.startswith("sqlite:///") or Path(uri[10:]).exists():
            client = tracking.prepare_store(uri)
            exp = client.get_experiment_by_name(cfg.name)
            exp_id = exp.experiment_id if exp else None
        plan = make_plan(specs, client, exp_id) if client else Plan(specs, list(specs))
        print_plan(console, cfg, plan, sweep_id, uri)
        return SweepSummary(cfg.name, sweep_id, exp_id, None, uri, plan.done_outcomes,
                            time.perf_counter() - t_start, dry_run=True)

    from harness.executors import get_executor

    ex = executor_obj or get_executor(cfg.executor, jobs=cfg.jobs, address=cfg.address,
                                      **(executor_opts or {}))
    if hasattr(ex, "validate"):  # e.g. Ray refuses a SQLite store with a remote cluster, before any write
        ex.validate(uri)
    client = tracking.prepare_store(uri)  # health check / schema creation, before any worker
    exp_id = tracking.get_or_create_experiment(client, cfg.name, uri)
    plan = make_plan(specs, client, exp_id)
    units = group_units(plan.todo, cfg.batching) if plan.todo else []

    parent_id = start_parent(client, exp_id, cfg, config_path, specs, plan, sweep_id, uri)
    from harness import checkpoint

    ctx = RunContext(tracking_uri=uri, experiment_id=exp_id, parent_run_id=parent_id, sweep_id=sweep_id,
                     sweep=cfg.name, git_commit=tracking.git_commit(), measure_perf=cfg.measure_perf,
                     trial_tags=search_tags(specs), checkpoint_every=cfg.checkpoint_every or "default",
                     checkpoint_dir=checkpoint.root_for(uri, cfg.checkpoint_dir),
                     keep_final_checkpoint=cfg.keep_final_checkpoint)
    outcomes: list[TrialOutcome] = plan.done_outcomes
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
        end_parent(client, parent_id, outcomes, time.perf_counter() - t_start, status,
                   flush_wait_s=getattr(ex, "flush_wait_s", 0.0))
    summary = SweepSummary(cfg.name, sweep_id, exp_id, parent_id, uri, outcomes,
                           time.perf_counter() - t_start)
    if not quiet:
        print_summary(console, summary)
    return summary
