"""Resuming a sweep: which of its trials the store (or the spool) already holds, and one run per trial.

- :func:`make_plan` reads the experiment's trial runs (:func:`harness.tracking.trial_run.trial_state`,
  the one rule): a trial with a FINISHED run is done (skipped); FAILED, KILLED, RUNNING or missing
  ones are to do. A run under the trial's legacy id (the target in it: stores written before the
  target left the identity) counts as the trial's (:func:`runs_of`). :class:`Plan` holds the split.
- :func:`why_to_run`: for each trial to do, why (the dry run's table): failed, killed or unfinished
  before; or, when the store holds a run of a trial this config no longer makes that differs from
  it only in its optimizer's source digest or a few settings, ``source changed`` / ``config
  changed`` naming what; else ``new``.
- :func:`finished_trials`: the trials a FINISHED run holds, for the pre-flight (which traces none of
  them), read-only, before the store is opened for writing.
- :func:`take_spooled`: trials whose results wait in the local spool are trained: they leave the
  plan's to-do list (the spool's replay writes them).
- :func:`count_done`: how many trials are done after a Ctrl-C.
- :func:`dedupe_sweep`: once the executor returns, keep one FINISHED run per trial
  (:func:`harness.tracking.client.dedupe_finished_runs`), whatever the executor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.core import names, reached
from harness.core.clock import cost_seconds, modeled_seconds
from harness.core.context import RunContext
from harness.core.mlflow_rows import values_of
from harness.core.outcome import TrialOutcome
from harness.core.spec import Target, TrialSpec
from harness.tracking import spool
from harness.tracking.client import prepare_store, trial_runs
from harness.tracking.dedupe import dedupe_finished_runs
from harness.tracking.trial_run import trial_state
from harness.tracking.uris import is_server, sqlite_path


@dataclass
class Plan:
    """Which trials of a sweep are already done (a FINISHED run exists) and which will run."""

    specs: list[TrialSpec]
    todo: list[TrialSpec]
    done: dict[str, Any] = field(default_factory=dict)  # trial_id -> FINISHED run
    failed_before: set[str] = field(default_factory=set)
    #: every trial run of the experiment, ``{trial_id: [runs]}`` (those of other versions too)
    runs: dict[str, list] = field(default_factory=dict)
    #: the targets the stored runs were trained with (:func:`stored_targets`: their legacy ids)
    targets: tuple[Target, ...] = ()

    #: the store's client (reads the curves of a done trial whose target moved); ``None``: none
    client: Any = None

    @property
    def done_outcomes(self) -> list[TrialOutcome]:
        """The done trials' outcomes, read back from their FINISHED runs (``skipped``); a run trained
        with another target than the config's now has its steps and times to target read off its
        stored validation curve for the config's (:func:`retarget_outcome`)."""
        by_id = {s.trial_id: s for s in self.specs}
        out = []
        for tid, run in self.done.items():
            o = TrialOutcome.from_run(by_id[tid], run)
            target = by_id[tid].target
            if target is not None and self.client is not None and not _trained_for(run, target):
                retarget_outcome(o, run, target, self.client)
            out.append(o)
        return out


def _trained_for(run, target: Target) -> bool:
    """Whether ``run`` was trained (and its steps to target logged) for ``target``."""
    p = run.data.params
    try:
        value = float(p.get(names.PARAM_TARGET_VALUE, "nan"))
    except ValueError:
        return False
    metric = p.get(names.PARAM_TARGET_METRIC)
    return metric is not None and names.canonical_metric(metric) == target.metric and value == target.value


def retarget_outcome(o: TrialOutcome, run, target: Target, client) -> None:
    """Set ``o``'s steps and times to target (steps, measured, modeled and cost seconds, target at
    initialisation) for ``target``, read off ``run``'s stored validation curve with training's rule
    (:func:`harness.core.reached.first_reached`); in place."""
    rid, m = run.info.run_id, run.data.metrics
    hist = {h.step: h.value for h in client.get_metric_history(rid, target.metric)}
    walls = {h.step: h.value for h in client.get_metric_history(rid, names.M_WALL_S)}
    steps = sorted(hist)
    i = reached.first_reached(steps, [hist[s] for s in steps], target)
    o.target_at_init = bool(steps) and steps[0] == 0 and target.reached(hist[0])
    o.steps_to_target = steps[i] if i is not None else None
    o.seconds_to_target = walls.get(steps[i]) if i is not None else None
    o.modeled_seconds_to_target = modeled_seconds(o.steps_to_target, m.get(names.M_MODELED_STEP_MS))
    o.cost_seconds_to_target = cost_seconds(o.steps_to_target, m.get(names.M_FLOPS),
                                            m.get(names.M_PEAK_FLOPS))


def make_plan(specs: list[TrialSpec], client, experiment_id: str | None,
              runs: dict[str, list] | None = None) -> Plan:
    """Split ``specs`` into done / to do from the runs stored in ``experiment_id`` (None: none);
    ``runs`` (``{trial_id: [runs]}``, :func:`harness.tracking.client.trial_runs`) when the caller
    read them already (an adaptive sweep's rounds read the store once)."""
    if runs is None:
        runs = trial_runs(client, experiment_id) if experiment_id else {}
    done, failed, todo = {}, set(), []
    targets = stored_targets(runs)
    for s in specs:
        state, run = trial_state(runs_of(s, runs, targets))
        if run is not None:
            done[s.trial_id] = run
        else:
            if state == "failed":
                failed.add(s.trial_id)
            todo.append(s)
    return Plan(specs, todo, done, failed, runs, targets, client)


def runs_of(spec: TrialSpec, runs: dict[str, list], targets: tuple[Target, ...] = ()) -> list:
    """The runs of ``spec`` among ``runs`` (``{trial_id: [runs]}``): those under its id, then those
    under a legacy id (a store written while the target was part of every trial's id: its FINISHED
    runs stay done), :func:`legacy_ids`."""
    found = list(runs.get(spec.trial_id, []))
    for tid in legacy_ids(spec, targets):
        found.extend(runs.get(tid, []))
    return found


def legacy_ids(spec: TrialSpec, targets: tuple[Target, ...] = ()) -> list[str]:
    """The ids ``spec`` had while the target was part of every trial's id, other than its own: with
    its own target (:attr:`~harness.core.spec.TrialSpec.legacy_trial_id`) and with each of
    ``targets`` (those the store's runs were trained with, :func:`stored_targets`: a target moved
    after the store was written still finds them). None for a trial whose target stays in its id."""
    if spec.target_in_identity:
        return []
    out = [spec.legacy_trial_id] if spec.legacy_trial_id != spec.trial_id else []
    own = spec.target
    for t in targets:
        if own is not None and t == own and type(t.value) is type(own.value):
            continue  # its own target: legacy_trial_id above
        tid = dataclasses.replace(spec, target=t).legacy_trial_id
        if tid != spec.trial_id and tid not in out:
            out.append(tid)
    return out


def stored_targets(runs: dict[str, list]) -> tuple[Target, ...]:
    """The targets the trial runs ``runs`` (``{trial_id: [runs]}``) were trained with, from their
    ``target.*`` params (:func:`harness.core.reached.stored_targets`)."""
    return tuple(reached.stored_targets(r.data.params for rs in runs.values() for r in rs))


#: At most this many settings may differ for a trial to be called a changed version of an older one
#: (``config changed``); more, and it is ``new``.
MAX_CHANGED = 3


def why_to_run(plan: Plan) -> dict[str, str]:
    """``{trial_id: reason}`` for each trial of ``plan.todo``:

    - ``failed before`` / ``killed before``: the trial has a FAILED / KILLED run (and no FINISHED
      one); ``unfinished before (RUNNING)``: a RUNNING run (another invocation training it, or one
      that died without ending it: the next sweep marks it KILLED);
    - otherwise, from the runs of trials this config no longer makes (older versions: of the same
      optimizer name and seed) the one whose params differ least from what this trial would log
      (its params and its builders' defaults, :func:`harness.execute.writing.resolved_defaults`):
      ``source changed (opts.py:f 1a2b3c4d -> 5e6f7a8b)`` when only the optimizer's source digest
      differs, ``config changed (train.steps 30 -> 50)`` when at most :data:`MAX_CHANGED` params
      differ (``source and config changed (...)`` when both); ``data changed (tokens:DIR a1b2 -> c3d4)``
      when only the dataset's content digest differs;
    - else ``new``.
    """
    planned = {s.trial_id for s in plan.specs}
    planned |= {tid for s in plan.specs for tid in legacy_ids(s, plan.targets)}
    older: dict[tuple[str, str], list] = {}
    for tid, rs in plan.runs.items():
        if tid in planned:
            continue
        for r in rs:
            if r.data.params:
                key = (r.data.tags.get(names.TAG_OPTIMIZER, ""), r.data.tags.get(names.TAG_SEED, ""))
                older.setdefault(key, []).append(r)
    out: dict[str, str] = {}
    for s in plan.todo:
        statuses = {r.info.status for r in runs_of(s, plan.runs, plan.targets)}
        if "FAILED" in statuses:
            out[s.trial_id] = "failed before"
        elif "KILLED" in statuses:
            out[s.trial_id] = "killed before"
        elif "RUNNING" in statuses:
            out[s.trial_id] = "unfinished before (RUNNING)"
        else:
            candidates = older.get((s.optimizer, str(s.seed)), [])
            out[s.trial_id] = _changed_from(s, candidates) if candidates else "new"
    return out


def _expected_params(spec: TrialSpec) -> dict[str, str]:
    """The params a run of ``spec`` gets (:func:`harness.tracking.trial_run.result_params`), without
    those that are not its identity (``parallelism.*``)."""
    try:
        from harness.execute.writing import resolved_defaults

        params = {**resolved_defaults(spec), **spec.flat_params()}
    except Exception:  # a builder that cannot be read here: the config's own values
        params = spec.flat_params()
    if spec.target is not None:
        params[names.PARAM_TARGET_MODE] = spec.target.mode
    return {k: v for k, v in params.items() if not k.startswith("parallelism.")}


def _changed_from(spec: TrialSpec, runs: list) -> str:
    """``source changed (...)``, ``config changed (...)``, both, or ``new``: ``spec`` against the
    closest of ``runs`` (see :func:`why_to_run`)."""
    want = _expected_params(spec)
    best: tuple[int, list[str], Any] | None = None
    for r in runs:
        have = {k: v for k, v in r.data.params.items() if not k.startswith("parallelism.")}
        keys = sorted(k for k in want.keys() | have.keys() if want.get(k) != have.get(k))
        if best is None or len(keys) < best[0]:
            best = (len(keys), keys, r)
    assert best is not None
    n, keys, run = best
    if n > MAX_CHANGED:
        return "new"
    old_hash = run.data.tags.get(names.TAG_OPTIMIZER_SOURCE_HASH, "")
    source = ""
    if spec.optimizer_source and old_hash and old_hash != spec.optimizer_source_hash:
        source = f"{spec.optimizer_source} {old_hash[:8]} -> {spec.optimizer_source_hash[:8]}"
    if names.PARAM_DATASET_DIGEST in keys:  # rewritten data: said as such, as a source change is
        keys.remove(names.PARAM_DATASET_DIGEST)
        old = run.data.params.get(names.PARAM_DATASET_DIGEST, "(none)")
        data = f"{spec.dataset} {old[:8]} -> {spec.dataset_digest[:8] or '(none)'}"
        if not keys and not source:
            return f"data changed ({data})"
        source = f"{source}; data {data}" if source else f"data {data}"
    if not keys:
        return f"source changed ({source})" if source else "config changed"
    have = run.data.params
    changes = ", ".join(f"{k} {have.get(k, '(none)')} -> {want.get(k, '(none)')}" for k in keys)
    return f"source and config changed ({source}; {changes})" if source else f"config changed ({changes})"


def finished_trials(uri: Callable[[], str], experiment: str) -> Callable[[list[TrialSpec]], set[str]]:
    """``finished(specs) -> ids of specs with a FINISHED run`` (:func:`trial_state`'s rule) in
    experiment ``experiment`` of the store ``uri()`` names: the pre-flight traces none of them.
    Read-only and never creating anything: a SQLite file that does not exist, a store that
    cannot be read or a URI that is refused (``uri()`` raising: said later, where the sweep opens the
    store) hold nothing. The store is read once, on the first call (later calls, the parts of a config
    with workloads, reuse it): a SQLite file by one read-only query of the two columns it needs
    (:func:`_finished_in_sqlite`, not MLflow's search of whole runs), a server by one
    :func:`harness.tracking.client.trial_runs`."""
    box: dict[str, set[str]] = {}

    def done_ids() -> set[str]:
        if "ids" not in box:
            box["ids"] = set()
            try:
                u = uri()
                db = sqlite_path(u)
                if db is not None and db.exists():  # the two columns it needs, not MLflow's whole runs
                    box["ids"] = _finished_in_sqlite(db, experiment)
                elif is_server(u):
                    client = prepare_store(u, create=False)
                    exp = client.get_experiment_by_name(experiment)
                    if exp is not None and exp.lifecycle_stage == "active":
                        box["ids"] = {tid for tid, rs in trial_runs(client, exp.experiment_id).items()
                                      if trial_state(rs)[1] is not None}
            except Exception:  # the sweep opens the store later and says what is wrong with it
                box["ids"] = set()
        return box["ids"]

    def finished(specs: list[TrialSpec]) -> set[str]:
        ids = done_ids()
        return {s.trial_id for s in specs if s.trial_id in ids or s.legacy_trial_id in ids}

    return finished


def _finished_in_sqlite(db, experiment: str) -> set[str]:
    """The ``harness.trial_id`` of every active FINISHED trial run of the active experiment named
    ``experiment`` in the MLflow SQLite file ``db`` (a :class:`pathlib.Path` that exists), read with
    :mod:`sqlite3` read-only (``mode=ro``: nothing is created or migrated), in one query of the two
    columns it needs (:func:`trial_state`'s rule: a FINISHED run makes a trial done, whatever its
    ``harness.status``). Raises :class:`sqlite3.Error` for a file that is not such a store."""
    return values_of(
        db, "SELECT t.value FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id "
        "JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = ? "
        "JOIN tags k ON k.run_uuid = r.run_uuid AND k.key = ? AND k.value = ? "
        "WHERE e.name = ? AND e.lifecycle_stage = 'active' AND r.lifecycle_stage = 'active' "
        "AND r.status = 'FINISHED'",
        (names.TAG_TRIAL_ID, names.TAG_KIND, names.KIND_TRIAL, experiment))


def take_spooled(plan: Plan, uri: str) -> list[TrialOutcome]:
    """Take the trials whose results are still in the local spool (the store did not take them
    yet) out of ``plan.todo``; their outcomes, ``skipped`` and ``spooled``."""
    pending = spool.pending_trials(uri)
    if not pending:
        return []
    out = [TrialOutcome.from_spool(pending[s.trial_id]) for s in plan.todo if s.trial_id in pending]
    plan.todo = [s for s in plan.todo if s.trial_id not in pending]
    return out


def count_done(specs: list[TrialSpec], client, experiment_id: str, outcomes: list[TrialOutcome]) -> int:
    """How many of ``specs`` are done after a Ctrl-C, read back from the store as :func:`make_plan`
    does (a trial with a FINISHED run): with ``--jobs N`` units in flight finish while the pool shuts
    down and their outcomes never reach ``outcomes``. If the store cannot be read (or a second Ctrl-C
    comes), the trials in ``outcomes`` that did not fail."""
    try:
        return len(make_plan(specs, client, experiment_id).done)
    except (Exception, KeyboardInterrupt):
        return len({o.trial_id for o in outcomes if o.status != "failed"})


def dedupe_sweep(ctx: RunContext, units: list[list[TrialSpec]]) -> dict[str, list[str]]:
    """Keep one FINISHED run per trial of ``units``: an invocation on another machine (or a retried
    Ray task) may have finished a trial too. Returns the demoted runs, ``{trial_id: [run ids]}``."""
    return dedupe_finished_runs(ctx.tracking_uri, ctx.experiment_id,
                                         {s.trial_id for unit in units for s in unit})
