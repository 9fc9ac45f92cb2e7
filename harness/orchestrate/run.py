"""A sweep from config to MLflow: :func:`run_sweep` validates, plans and runs a config.

The steps live in their own modules; this one orchestrates them (and re-exports their public names,
so ``from harness.orchestrate.run import expand`` keeps working):

- :mod:`harness.plan.expansion`: config → ordered, de-duplicated trials (:func:`expand`), the stable
  :func:`sweep_id_of`; :mod:`harness.plan.units`: work units (:func:`group_units`);
- :mod:`harness.orchestrate.preflight`: every dataset, model, optimizer and schedule built once before any
  write;
- :mod:`harness.orchestrate.resume`: which trials are done in the store (:func:`make_plan`) or wait in
  the spool, and one FINISHED run per trial at the end;
- :mod:`harness.orchestrate.parent_run`: the parent run of one invocation (started before any worker,
  ended with the counts);
- :mod:`harness.orchestrate.execution`: the units on the executor; :mod:`harness.orchestrate.progress`: the
  dry-run plan table, the progress bar and per-trial lines;
- :mod:`harness.orchestrate.summary`: :class:`SweepSummary`, :func:`best_configs`, the end table.

:func:`run_sweep` does it all (:class:`SweepOptions` are its keyword arguments): store preparation
(before any worker), experiment, one parent run per invocation, the executor, a progress bar, and
the end summary table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.errors import ConfigError, UsageError
from harness.config.given import GivenConfig, given_config, load_given
from harness.config.limits import DEFAULT_MAX_TRIALS, tracking_uri_problem
from harness.config.load import Registries, SweepConfig
from harness.core import budget, interrupt, xla_threads
from harness.core.builders import did_you_mean, known_executors
from harness.core.conditions import one_line_warnings
from harness.core.context import RunContext
from harness.core.outcome import TrialOutcome
from harness.core.processes import python_command
from harness.core.redact import mask_uri
from harness.core.spec import TrialSpec
from harness.execute.devices import parent_off_devices
from harness.execute.executors import Executor, InProcessExecutor, get_executor
from harness.execute.writing import replay_spool
from harness.orchestrate.adaptive import Rounds, keep_only, print_search_plan
from harness.orchestrate.execution import execute_units
from harness.orchestrate.only import describe, parse_only, select
from harness.orchestrate.parent_run import end_parent, kill_dead_invocations, record_settings, start_parent
from harness.orchestrate.preflight import preflight
from harness.orchestrate.progress import ProgressDisplay, StageLine, print_plan
from harness.orchestrate.resume import Plan, count_done, finished_trials, make_plan, take_spooled
from harness.orchestrate.searchers import SweepSearch, searcher_for
from harness.orchestrate.smoke import cap_steps, check_max_steps, smoke_line, smoke_name
from harness.orchestrate.summary import SweepSummary, best_configs, boundary_warnings, print_summary
from harness.orchestrate.sweep_clock import SweepClock
from harness.plan.expansion import TrialList, component_variants, expand, search_tags, sweep_id_of
from harness.plan.units import group_units, unit_tags
from harness.tracking import spool
from harness.tracking.client import analyze_store, get_or_create_experiment, prepare_store
from harness.tracking.health import HEALTH, store_reachable
from harness.tracking.liveness import Heartbeat, end_leftovers
from harness.tracking.provenance import commit_tags
from harness.tracking.uris import is_server, resolve_tracking_uri
from harness.train import compile_cache

__all__ = ["Plan", "SweepInterrupted", "SweepOptions", "SweepSummary", "best_configs",
           "component_variants", "expand", "group_units", "make_plan", "preflight", "print_summary",
           "python_command", "run_sweep", "sweep_id_of"]


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM (``signum``, default :data:`harness.core.interrupt.SIGNUM`) in a sweep (parent
    run ended KILLED): ``done`` of ``total`` trials are FINISHED in the store (resume.count_done)."""

    def __init__(self, done: int, total: int, signum: int | None = None):
        super().__init__(done, total)
        self.done, self.total = done, total
        self.signum = interrupt.SIGNUM[0] if signum is None else signum


@dataclass
class SweepOptions:
    """How to run a sweep: :func:`run_sweep`'s keyword arguments.

    Attributes:
      tracking_uri: the store (``--tracking-uri``; else ``MLFLOW_TRACKING_URI``, the config's, or
        ``./mlflow.db``).
      jobs, executor, address, batching: override the config's values (``--jobs N`` alone picks the
        ``process`` executor).
      dry_run: print the plan; write nothing. quiet: print nothing. explain: the summary's rules in full.
      registries: the model/optimizer/schedule/dataset registries (tests inject their own).
      console: a ``rich`` console to print to (default: stdout at ``COLUMNS``, the terminal's width,
        else 80 columns; :func:`harness.orchestrate.tables.stdout_console`).
      executor_obj: an :class:`~harness.execute.executors.Executor` to use instead of building one.
      executor_opts: extra keyword arguments of the executor (``cpus_per_trial``...).
      max_trials: bound on the plan (checked from axis sizes before expansion,
        :func:`harness.config.load.check_plan_size`).
      compile_cache: use the persistent XLA compilation cache (``--no-compile-cache`` turns it off;
        :mod:`harness.train.compile_cache`).
      process_start: ``time.perf_counter()`` at the process start (the command line passes
        :data:`harness.PROCESS_START`): the time budget's ``startup`` and wall-clock start there
        (default: when :func:`run_sweep` is called; :mod:`harness.orchestrate.sweep_clock`).
      only: run the trials of these axis values only (``{"optimizer": "adam"}``, ``sweep --only
        optimizer=adam``; :mod:`harness.orchestrate.only`): the whole config is validated and expanded,
        the kept trials have their ids in the whole config, the parent run is the whole config's
        sweep's.
      max_steps: a smoke run (``sweep --max-steps N``, :mod:`harness.orchestrate.smoke`): every trial
        capped at ``N`` steps, its schedule kept over its full budget; new trial ids.
    """

    tracking_uri: str | None = None
    jobs: int | None = None
    executor: str | None = None
    address: str | None = None
    batching: str | None = None
    dry_run: bool = False
    quiet: bool = False
    explain: bool = False
    registries: Registries | None = None
    console: Any = None
    executor_obj: Executor | None = None
    executor_opts: dict[str, Any] | None = None
    max_trials: int = DEFAULT_MAX_TRIALS
    compile_cache: bool = True
    process_start: float | None = None
    only: Any = None
    max_steps: int | None = None


def run_sweep(config_path: str | Path | Any, **options: Any) -> SweepSummary:
    """Validate, plan and run a sweep config; see the module docstring. ``config_path`` is a YAML
    file's path, a mapping or a :class:`~harness.config.schema.SweepConfig`
    (:mod:`harness.config.given`); ``options`` are the fields of :class:`SweepOptions`
    (``tracking_uri=``, ``jobs=``, ``dry_run=``, ``only=``, ...).

    Raises:
      TypeError: an unknown option, or a config that is neither a path, a mapping nor a SweepConfig.
      harness.config.load.ConfigError: invalid config (nothing logged); its subclass
        :class:`harness.config.errors.UsageError`: a tracking URI, executor or ``only`` the harness
        cannot use.
      harness.tracking.client.TrackingUnavailableError: the store cannot be reached (nothing trained).
      SweepInterrupted: Ctrl-C (a ``KeyboardInterrupt``); the parent run is ended KILLED.
    """
    opts = SweepOptions(**options)
    given = given_config(config_path)
    t_start = time.perf_counter()
    clock = SweepClock(t_start, opts.process_start)
    from harness.orchestrate.tables import stdout_console

    console = opts.console if opts.console is not None else stdout_console()
    # within a second of the start: what the seconds before the plan or the bar are spent on (a
    # transient line on a terminal; on a pipe one line per stage on stderr: stdout is unchanged).
    # Said before JAX or MLflow is imported (seconds each): the first stage is the first thing done.
    stages = StageLine(console, opts.quiet, since=opts.process_start)
    try:
        with one_line_warnings(), interrupt.kept():  # a warning is one line; Ctrl-C never lost
            return _run_sweep(given, opts, console, stages, t_start, clock)
    finally:
        stages.stop()


def _run_sweep(given: GivenConfig, opts: SweepOptions, console, stages: StageLine,
               t_start: float, clock: SweepClock) -> SweepSummary:
    """:func:`run_sweep`'s body; ``stages`` says what it does until the plan or the bar prints."""
    config_path = given.label
    only = parse_only(opts.only)  # before the config: an unknown axis is said at once
    max_steps = check_max_steps(opts.max_steps)
    stages.stage("config", f"checking {config_path}: reading it (nothing is trained or written yet)")
    cfg = _load(given, opts)  # a config error is said without importing JAX
    compile_cache.enable(opts.compile_cache)  # imports JAX; before this process compiles anything
    trains_here = isinstance(opts.executor_obj, InProcessExecutor) if opts.executor_obj is not None \
        else cfg.executor == "inprocess"
    # With workers (--jobs N, Ray) the parent trains nothing: the JAX backend its preflight starts
    # must not preallocate the GPU memory the workers need (harness.execute.devices.parent_off_devices).
    clock.startup_ends()
    finished = finished_trials(lambda: resolve_tracking_uri(opts.tracking_uri, cfg.tracking_uri), cfg.name)
    with contextlib.nullcontext() if trains_here else parent_off_devices(), clock.part("preflight"):
        # before the store: dry run too
        whole = preflight(cfg, str(config_path), opts.registries, on_stage=stages.stage, finished=finished)
    param_shapes = getattr(whole, "param_shapes", None)  # the dry run's step cost reads them
    if (pool := xla_threads.mismatch()) is not None:  # JAX computed before `import harness`
        console.print(f"warning: {pool}", soft_wrap=True)
    try:  # the seam of every method; a searcher's config error names the file
        search = searcher_for(whole, cfg.selection.by, opts.max_trials)
    except ConfigError as e:
        raise ConfigError([f"{config_path}: {line}" for line in e.errors]) from None
    whole = cap_steps(whole, max_steps, search.adaptive)  # a smoke run: new trial ids
    if max_steps is not None:  # a smoke run checks that trials run; timing them would be most of it
        cfg = cfg.model_copy(update={"measure_perf": False, "name": smoke_name(cfg.name)})
    if search.adaptive:  # the candidates stand for the search (ASHA's carry their rule)
        whole = _listed(search.candidates(), whole)
        search.adopt(whole, whole.origins)
    sweep_id = sweep_id_of(cfg.name, whole)  # the whole config's, also for a part of it (only)
    specs = select(whole, only, config_path)
    uri = resolve_tracking_uri(opts.tracking_uri, cfg.tracking_uri)
    # The executor is built and validated before the dry-run branch: a dry run promises what a run
    # would do, so it refuses what a run would refuse (a bad HARNESS_DEVICE_IDS, a --jobs device plan
    # that does not fit, Ray with an unshareable store).
    ex = _executor(cfg, opts, uri, console)
    if opts.dry_run:
        stages.stage("store", f"reading what the store {mask_uri(uri)} holds of this sweep")
        return _dry_run(cfg, specs, sweep_id, uri, console, t_start, stages, opts.quiet,
                        search if search.adaptive else None, param_shapes)

    with ex.session():  # workers started now (prestart) are stopped however this ends
        interrupt.check()  # a Ctrl-C lost in the pre-flight (harness.core.interrupt)
        done_before = finished(specs)  # read by the pre-flight: nothing to start for a re-run
        ex.prestart([s for s in specs if s.trial_id not in done_before])
        stages.stage("store", f"opening the store {mask_uri(uri)}; finding the trials already done")
        with clock.part("tracking"):
            client = prepare_store(uri, quiet=opts.quiet)  # health check, schema; before any unit
            replayed = replay_spool(uri)  # results an earlier invocation could not write
        if replayed.written and not opts.quiet:
            console.print(f"{replayed.written} results kept in the local spool by an earlier run were "
                          f"written to the store")
        rounds: Rounds | None = None
        with clock.part("tracking"):
            exp_id = get_or_create_experiment(client, cfg.name, uri)
            if search.adaptive:  # round by round (harness.orchestrate.adaptive); the first with work to do
                outcomes: list[TrialOutcome] = []
                rounds = Rounds(search, client, exp_id, uri, keep_only(only), carried=outcomes,
                                origins=whole.origins)
                plan = rounds.next_plan() or Plan(rounds.proposed_specs(), [])
            else:
                plan = make_plan(specs, client, exp_id)
                outcomes = plan.done_outcomes
                outcomes += take_spooled(plan, uri)  # trained, not yet in the store: not trained again
        if not plan.todo:
            stages.stop()
            return _nothing_to_train(cfg, client, exp_id, plan, sweep_id, uri, console, opts, t_start,
                                     outcomes, rounds.describe() if rounds is not None else [])
        parent_id = _run_invocation(cfg, given, specs, plan, outcomes, ex, client, exp_id, sweep_id,
                                    uri, console, stages, opts.quiet, clock, whole, describe(only), rounds)
    if rounds is not None:
        specs = _listed(rounds.proposed_specs(), whole)
    left = spool.entries(uri)
    summary = SweepSummary(cfg.name, sweep_id, exp_id, parent_id, uri, outcomes,
                           time.perf_counter() - t_start, spooled_left=len(left),
                           spool_dir=str(spool.spool_dir(uri)) if left else "",
                           spooled_during=max(HEALTH.spooled,
                                              sum(o.spooled and not o.skipped for o in outcomes)),
                           store_error=HEALTH.error,
                           in_spool=frozenset(spool.pending_trials(uri)) if left else frozenset(),
                           config_path=str(config_path),
                           boundary=boundary_warnings(outcomes, specs, cfg.selection.by),
                           select_by=cfg.selection.by, time_clock=cfg.time,
                           budget=clock.budget, budget_wall_s=clock.wall_s, timing=clock.timing,
                           trial_ids=[s.trial_id for s in specs],
                           search=rounds.describe() if rounds is not None else [],
                           smoke=smoke_line(max_steps, cfg.name))
    if not opts.quiet:
        print_summary(console, summary, opts.explain)
    return summary


def _load(given: GivenConfig, opts: SweepOptions) -> SweepConfig:
    """The validated config with the command line's overrides; the executor name checked.

    Raises:
      harness.config.load.ConfigError: invalid config; its subclass
        :class:`harness.config.errors.UsageError`: a bad tracking URI or executor.
    """
    cfg = load_given(given, opts.registries, max_trials=opts.max_trials)
    _check_uri(opts.tracking_uri)
    overrides = {k: _override(k, v) for k, v in (("jobs", opts.jobs), ("executor", opts.executor),
                                                 ("address", opts.address), ("batching", opts.batching))
                 if v is not None}
    if overrides:
        cfg = cfg.model_copy(update=overrides)
    if cfg.jobs > 1 and cfg.executor == "inprocess" and opts.executor is None:
        cfg = cfg.model_copy(update={"executor": "process"})
    if cfg.executor not in known_executors():
        ex_names = known_executors()
        raise UsageError(f"unknown executor {cfg.executor!r}; valid choices: {', '.join(ex_names)}"
                         f"{did_you_mean(cfg.executor, ex_names)}", "executor")
    return cfg


def _override(key: str, value: Any) -> Any:
    """``value`` for the config field ``key`` checked by that field's own type and bounds (the
    config's ``jobs: Field(gt=0, le=MAX_JOBS)``, ``batching``'s choices): ``model_copy`` would take
    it unchecked (``harness.sweep(jobs=0)`` trained; ``jobs="two"`` raised a bare TypeError).

    Raises:
      harness.config.errors.UsageError: the value the field refuses, with pydantic's reason; key
        path ``key``.
    """
    from typing import Annotated

    from pydantic import TypeAdapter, ValidationError

    field = SweepConfig.model_fields[key]
    try:
        kind = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        return TypeAdapter(kind).validate_python(value)
    except ValidationError as e:
        raise UsageError(f"{key}: {e.errors()[0]['msg']}; got {value!r}", key) from None


def _executor(cfg: SweepConfig, opts: SweepOptions, uri: str, console) -> Executor:
    """The sweep's executor, validated against ``uri`` before any write (Ray refuses a SQLite store
    with a remote cluster; ``--jobs N`` plans the workers' devices and refuses a plan that does not
    fit); its device plan printed where there is something to say."""
    # Devices per trial for --jobs' device plan: the config's parallelism.devices once it has one.
    # (Passed only when it is not 1, so that executors registered without the option keep working.)
    per_trial = cfg.parallelism.devices or 1
    kw = {**({"devices_per_trial": per_trial} if per_trial != 1 else {}), **(opts.executor_opts or {})}
    ex = opts.executor_obj or get_executor(cfg.executor, jobs=cfg.jobs, address=cfg.address, **kw)
    ex.validate(uri)
    plan = ex.device_plan
    if plan is not None and not opts.quiet and (plan.platform != "cpu" or plan.n_devices > 1):
        console.print(f"devices: {plan.describe()}", soft_wrap=True)
    return ex


def _listed(specs: list[TrialSpec], whole: TrialList) -> TrialList:
    """``specs`` as a :class:`TrialList` with (a copy of) ``whole``'s origins (an adaptive search's
    trials; :meth:`SweepSearch.adopt` adds those of the trials the expansion did not make)."""
    out = TrialList(specs)
    out.origins = dict(getattr(whole, "origins", {}))
    return out


def _dry_run(cfg: SweepConfig, specs: TrialList, sweep_id: str, uri: str, console,
             t_start: float, stages: StageLine, quiet: bool = False,
             search: SweepSearch | None = None, param_shapes: Any = None) -> SweepSummary:
    """Print the plan (unless ``quiet``: ``harness.sweep(..., dry_run=True, quiet=True)`` asks for
    the planned trials only; an adaptive ``search``: per cell its method, candidates and the most it
    can spend); read-only: a store that does not exist yet is not created. ``param_shapes``: the
    pre-flight's, for the step costs (:func:`harness.orchestrate.step_cost.cost_lines`)."""
    exp_id = None
    client = None
    if is_server(uri) or not uri.startswith("sqlite:///") or Path(uri[10:]).exists():
        client = prepare_store(uri, quiet=quiet)
        exp = client.get_experiment_by_name(cfg.name)
        exp_id = exp.experiment_id if exp else None
    plan = make_plan(specs, client, exp_id) if client else Plan(specs, list(specs))
    stages.stop()
    if not quiet and search is not None:
        print_search_plan(console, search, sweep_id, cfg, {o.trial_id: o for o in plan.done_outcomes})
    elif not quiet:
        print_plan(console, cfg, plan, sweep_id, uri, param_shapes)
    return SweepSummary(cfg.name, sweep_id, exp_id, None, uri, plan.done_outcomes,
                        time.perf_counter() - t_start, dry_run=True,
                        trial_ids=[s.trial_id for s in specs])


def _nothing_to_train(cfg: SweepConfig, client, exp_id: str, plan: Plan, sweep_id: str, uri: str,
                      console, opts: SweepOptions, t_start: float,
                      done: list[TrialOutcome] | None = None,
                      search: list[dict] | None = None) -> SweepSummary:
    """Every trial is done: no new parent run (an empty one would hold no trial, get the report of
    the runs it does not describe, and be what ``status`` calls the sweep's last run). A dead
    invocation's runs are still marked KILLED, as ``status`` promises."""
    kill_dead_invocations(client, exp_id)
    record_settings(client, exp_id, sweep_id, cfg)  # the report ranks as this summary
    done = plan.done_outcomes if done is None else done
    if not opts.quiet:
        console.print(f"{len(done)} trials already finished: nothing to train, no new parent run.")
    summary = SweepSummary(cfg.name, sweep_id, exp_id, None, uri, done, time.perf_counter() - t_start,
                           boundary=boundary_warnings(done, plan.specs, cfg.selection.by),
                           select_by=cfg.selection.by, time_clock=cfg.time,
                           trial_ids=[s.trial_id for s in plan.specs], search=search or [],
                           smoke=smoke_line(opts.max_steps, cfg.name))
    if not opts.quiet:
        print_summary(console, summary, opts.explain)
    return summary


def _run_invocation(cfg: SweepConfig, given: GivenConfig, specs: TrialList, plan: Plan,
                    outcomes: list[TrialOutcome], ex: Executor, client, exp_id: str, sweep_id: str,
                    uri: str, console, stages: StageLine, quiet: bool, clock: SweepClock,
                    whole: TrialList, only: str = "", rounds: Rounds | None = None) -> str:
    """One invocation's parent run around the execution of ``plan.todo`` (appending to
    ``outcomes``), with its heartbeat; the parent ends FINISHED, FAILED or KILLED. Returns its id.
    ``whole`` is the config's every trial (the parent's ``trials.json``), ``specs`` those this
    invocation runs (fewer with ``only``, its text). An adaptive sweep's ``rounds`` give the rounds
    after ``plan`` (:mod:`harness.orchestrate.adaptive`), trained under the same parent run and bar.

    Raises:
      SweepInterrupted: Ctrl-C.
    """
    batching_tags: dict[str, str] = {}  # trial_id -> harness.batching (how its unit trains, and why)
    n_programs = len({s.batch_key() for s in plan.todo})
    building = (f"building {n_programs} program{'s' * (n_programs != 1)} for {len(plan.todo)} trials "
                f"(batching {cfg.batching}")
    stages.stage("build", f"{building})")

    def measuring(i: int, n: int) -> None:  # each group auto decides may compile and time programs
        stages.stage("build", f"{building}): measuring group {i} of {n} (where vmap pays)")

    compiled_before = _batching_compile_s()
    with clock.part("batching"):
        units = group_units(plan.todo, cfg.batching, labels=batching_tags, on_measure=measuring)
    # the measurements' compiles (init, chunks) are training's programs: the budget's compile
    moved = _batching_compile_s() - compiled_before
    budget.add(clock.parts, {"compile": moved, "batching": -moved})
    stages.stop()
    with clock.part("tracking"):
        parent_id = start_parent(client, exp_id, cfg, given, whole, plan, sweep_id, uri, only=only)
        heartbeat = Heartbeat(uri, parent_id).start()
    ctx = _run_context(cfg, given.commit_path, uri, exp_id, parent_id, sweep_id,
                       unit_tags(search_tags(whole), batching_tags, units))
    if rounds is not None:
        ctx = dataclasses.replace(ctx, **rounds.context())
    status = "KILLED"
    n_before, t_exec, dedupe_s = len(outcomes), time.perf_counter(), 0.0
    try:
        with ex.session(), ProgressDisplay(console, sum(len(u) for u in units), len(plan.done), uri,
                                           quiet) as display:  # session: workers kept across rounds
            seen = rounds.add if rounds is not None else None
            dedupe_s = execute_units(ex, units, ctx, outcomes, display, clock, seen)
            while rounds is not None and (nxt := rounds.next_plan()) is not None:
                with clock.part("batching"):
                    units = group_units(nxt.todo, cfg.batching, labels=batching_tags)
                ctx = dataclasses.replace(ctx, trial_tags=unit_tags(search_tags(whole),
                                                                              batching_tags, units))
                display.grow(len(nxt.todo))
                dedupe_s += execute_units(ex, units, ctx, outcomes, display, clock, seen)
        status = "FINISHED"
    except KeyboardInterrupt:
        raise SweepInterrupted(count_done(specs, client, exp_id, outcomes), len(specs)) from None
    except Exception:
        status = "FAILED"
        raise
    finally:
        # the execution's trials, their wall-clock without the final dedupe (the parent's MLflow)
        clock.execution(outcomes[n_before:], time.perf_counter() - t_exec - dedupe_s, ex.flush_wait_s)
        budget.add(clock.parts, {"tracking": dedupe_s})
        with clock.part("tracking"):
            heartbeat.stop()
            if rounds is not None:
                _log_search(rounds, client, parent_id)
        _close_invocation(client, exp_id, parent_id, uri, outcomes, clock, status, ex.flush_wait_s)
    return parent_id


def _log_search(rounds: Rounds, client, parent_id: str) -> None:
    """The search's ``search.json`` and proposed ``trials.json`` on the parent run; a store that
    fails here is noted (the trials are written; the next invocation logs the search again)."""
    try:
        rounds.log(client, parent_id)
    except Exception as e:
        HEALTH.failed(e)


def _batching_compile_s() -> float:
    """:func:`harness.train.batching.compile_seconds`, 0 when batching (hence JAX) is not imported."""
    return m.compile_seconds() if (m := sys.modules.get("harness.train.batching")) is not None else 0.0


def _run_context(cfg: SweepConfig, config_path: str | Path, uri: str, exp_id: str, parent_id: str,
                 sweep_id: str, trial_tags: dict[str, dict[str, str]]) -> RunContext:
    """What every worker of this invocation gets with its units."""
    from harness.train import checkpoint

    return RunContext(tracking_uri=uri, experiment_id=exp_id, parent_run_id=parent_id, sweep_id=sweep_id,
                      sweep=cfg.name, **commit_tags(config_path), measure_perf=cfg.measure_perf,
                      trial_tags=trial_tags, checkpoint_every=cfg.checkpoint_every or "default",
                      checkpoint_dir=checkpoint.root_for(uri, cfg.checkpoint_dir),
                      **{k: getattr(cfg, k) for k in ("keep_final_checkpoint", "dispatch_timeout_s")})


def _close_invocation(client, exp_id: str, parent_id: str, uri: str, outcomes: list[TrialOutcome],
                      clock: SweepClock, status: str, flush_wait_s: float) -> None:
    """End of an invocation, whatever happened: write what the spool holds (the store may answer
    again), end this invocation's leftover RUNNING trial runs, end the parent run. A store that
    fails here leaves the parent RUNNING with an owner that is about to exit: the next invocation
    marks it KILLED, and ``status`` shows it as gone meanwhile."""
    try:
        with clock.part("tracking"):
            if spool.entries(uri) and store_reachable(uri):
                replay_spool(uri)
            end_leftovers(client, exp_id, parent_id)
            analyze_store(uri)  # the MLflow UI's runs page: 4.9 s -> 0.09 s at 10,000 trials
        parts = clock.finish()  # the parent's last write below is not in the wall-clock
        end_parent(client, parent_id, outcomes, clock.wall_s, status, flush_wait_s=flush_wait_s,
                   budget=parts)
    except Exception as e:
        HEALTH.failed(e)


def _check_uri(cli_uri: str | None) -> None:
    """A ``--tracking-uri`` or ``MLFLOW_TRACKING_URI`` the harness cannot use is a usage error
    before anything is loaded or written (the config's ``tracking_uri`` was checked with it).

    Raises:
      harness.config.errors.UsageError: names the source and the problem (the CLI exits 2); its key
        path is ``tracking_uri``.
    """
    for source, uri in (("--tracking-uri", cli_uri),
                        ("MLFLOW_TRACKING_URI", os.environ.get("MLFLOW_TRACKING_URI"))):
        if uri:
            if (msg := tracking_uri_problem(uri)) is not None:
                raise UsageError(f"{source}: {msg}", "tracking_uri")
            return
