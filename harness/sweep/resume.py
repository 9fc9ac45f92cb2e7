"""Resuming a sweep: which of its trials the store (or the spool) already holds, and one run per trial.

- :func:`make_plan` reads the experiment's trial runs (:func:`harness.tracking.trial_run.trial_state`,
  the one rule): a trial with a FINISHED run is done (skipped); FAILED, KILLED, RUNNING or missing
  ones are to do. :class:`Plan` holds the split.
- :func:`take_spooled`: trials whose results wait in the local spool are trained: they leave the
  plan's to-do list (the spool's replay writes them).
- :func:`count_done`: how many trials are done after a Ctrl-C.
- :func:`dedupe_sweep`: once the executor returns, keep one FINISHED run per trial
  (:func:`harness.tracking.client.dedupe_finished_runs`), whatever the executor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.core.context import RunContext
from harness.core.outcome import TrialOutcome
from harness.core.spec import TrialSpec
from harness.tracking import spool
from harness.tracking.client import trial_runs
from harness.tracking.dedupe import dedupe_finished_runs
from harness.tracking.trial_run import trial_state


@dataclass
class Plan:
    """Which trials of a sweep are already done (a FINISHED run exists) and which will run."""

    specs: list[TrialSpec]
    todo: list[TrialSpec]
    done: dict[str, Any] = field(default_factory=dict)  # trial_id -> FINISHED run
    failed_before: set[str] = field(default_factory=set)

    @property
    def done_outcomes(self) -> list[TrialOutcome]:
        """The done trials' outcomes, read back from their FINISHED runs (``skipped``)."""
        by_id = {s.trial_id: s for s in self.specs}
        return [TrialOutcome.from_run(by_id[tid], run) for tid, run in self.done.items()]


def make_plan(specs: list[TrialSpec], client, experiment_id: str | None) -> Plan:
    """Split ``specs`` into done / to do from the runs stored in ``experiment_id`` (None: none)."""
    runs = trial_runs(client, experiment_id) if experiment_id else {}
    done, failed, todo = {}, set(), []
    for s in specs:
        state, run = trial_state(runs.get(s.trial_id, []))
        if run is not None:
            done[s.trial_id] = run
        else:
            if state == "failed":
                failed.add(s.trial_id)
            todo.append(s)
    return Plan(specs, todo, done, failed)


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
