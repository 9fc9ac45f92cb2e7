"""Which trials of a work unit this process trains: per-trial claims, and FINISHED runs in the store.

- :func:`take_claims`: on a SQLite store, each trial's claim (:class:`harness.tracking.store.Claim`,
  a lock file beside the store) keeps two invocations on one machine from training it at once. A
  trial whose claim another process holds is ``deferred``; one whose claim marker says a run was
  written meanwhile is read back (skipped). Against a server there are no claims.
- :func:`take_unfinished`: the store's word: a trial with a FINISHED run is skipped (its outcome
  read back from that run); RUNNING runs of it whose owner is gone are marked KILLED.
- :func:`release`: let a claim go, with a marker saying what became of the trial.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.core.context import RunContext
from harness.core.outcome import TrialOutcome
from harness.core.spec import TrialSpec
from harness.tracking import spool
from harness.tracking.claim_locks import NO_CLAIMS, Claim
from harness.tracking.client import client_for, runs_of_trial
from harness.tracking.health import HEALTH
from harness.tracking.liveness import kill_stale
from harness.tracking.trial_run import trial_state

#: How long a deferred trial waits for the claim of another invocation (that is training it).
CLAIM_WAIT_S = 24 * 3600.0


def take_unfinished(client, unit: list[TrialSpec], ctx: RunContext,
                    outcomes: dict[str, TrialOutcome]) -> list[TrialSpec]:
    """The specs of ``unit`` still to train: a trial with a FINISHED run gets a ``skipped`` outcome
    in ``outcomes``; RUNNING runs whose owner is gone are marked KILLED (never a live owner's)."""
    todo = []
    for spec in unit:
        runs = runs_of_trial(client, ctx.experiment_id, spec.trial_id)
        _, done = trial_state(runs)
        if done is not None:
            outcomes[spec.trial_id] = TrialOutcome.from_run(spec, done)
            continue
        kill_stale(client, runs)
        todo.append(spec)
    return todo


def _claims_db(ctx: RunContext) -> Path | None:
    """The SQLite file whose side directory holds the trial claims, or ``None`` (a server, or
    ``HARNESS_CLAIMS=0``): claims only coordinate processes of one machine."""
    uri = ctx.tracking_uri
    if not uri.startswith("sqlite:///") or os.environ.get("HARNESS_CLAIMS", "1") == "0":
        return None
    return Path(uri[len("sqlite:///"):])


def _done_elsewhere(spec: TrialSpec, ctx: RunContext) -> TrialOutcome | None:
    """A trial whose claim marker says a run was written: its spooled result's outcome, or its
    FINISHED run's, else ``None`` (train it)."""
    e = spool.pending_trials(ctx.tracking_uri).get(spec.trial_id)
    if e is not None:
        return TrialOutcome.from_spool(e)
    try:
        client = client_for(ctx.tracking_uri)
        _, done = trial_state(runs_of_trial(client, ctx.experiment_id, spec.trial_id))
    except Exception as exc:
        HEALTH.failed(exc)
        return None
    return None if done is None else TrialOutcome.from_run(spec, done)


def take_claims(unit: list[TrialSpec], ctx: RunContext, wait_s: float):
    """Claim the trials of ``unit`` (sorted by trial id: deadlock-free when waiting).

    Returns ``(todo, claims, outcomes)``: the specs to train, ``{trial_id: Claim}`` held for them,
    and outcomes for the others (``deferred``: another process holds the claim; ``skipped``: done
    meanwhile, by another invocation).
    """
    db = _claims_db(ctx)
    if db is None:
        return list(unit), {}, {}
    claims: dict = {}
    outcomes: dict[str, TrialOutcome] = {}
    for spec in sorted(unit, key=lambda s: s.trial_id):
        c = Claim.try_take(db, spec.trial_id, wait_s=wait_s)
        if c is NO_CLAIMS:  # e.g. a side directory that cannot be written: proceed unclaimed
            continue
        if c is None:
            outcomes[spec.trial_id] = TrialOutcome.deferred_to_other(spec)
            continue
        if c.marker():  # a run of this trial was written (or spooled) since the claims exist
            done = _done_elsewhere(spec, ctx)
            if done is not None:
                c.release()
                outcomes[spec.trial_id] = done
                continue
        claims[spec.trial_id] = c
    todo = [s for s in unit if s.trial_id not in outcomes]
    return todo, claims, outcomes


def release(claim, marker: str | None = None) -> None:
    """Release ``claim`` (``None``: nothing held), first writing ``marker`` (``"done RUN_ID"``,
    ``"spooled"``, ``"failed"``) for the next process that takes it."""
    if claim is not None:
        if marker:
            claim.mark(marker)
        claim.release()
