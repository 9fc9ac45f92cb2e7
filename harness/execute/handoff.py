"""The ``--jobs`` parent as its workers' only MLflow writer: :class:`Handoff`.

A worker (``execute_unit(..., handoff=True)``) trains and writes nothing to the store: two workers
never wait on each other's SQLite write lock, and a worker imports MLflow only where an
early-stopping sweep's gate reads its peers' rung values (:func:`harness.execute.rung_gate.read_peers`). The
parent takes each unit's claims before handing it out, and queues every result that comes back on
its own background writer (:mod:`harness.execute.background`), as the in-process executor does
with its own results: a trial's run is created, filled and ended in one writer round after it
trained, and a sweep killed before the write leaves no run of it, so the next invocation trains it
(nothing FINISHED lost, nothing FINISHED twice). A unit's checkpoints are removed by its worker once
its results are handed over.
"""

from __future__ import annotations

from harness.core.context import RunContext
from harness.core.outcome import TrialOutcome
from harness.core.spec import TrialSpec
from harness.execute import background, claims, writing
from harness.execute.worker import HANDOFF
from harness.tracking.health import HEALTH


class Handoff:
    """The parent's side of the ``--jobs`` workers' results (``execute_unit(..., handoff=True)``):
    the claims of each unit's trials, taken before the unit is handed out and held until its results
    are written; the outcomes of the trials not to train (``deferred`` to another invocation, done
    meanwhile); and each trained result queued on this process's background writer
    (:func:`harness.execute.writing.write_result`: the FINISHED check, the run, its end state, the
    claim's release), while the workers train on."""

    def __init__(self, units: list[list[TrialSpec]], ctx: RunContext) -> None:
        self.units, self.ctx = units, ctx
        self.todo: dict[int, list[TrialSpec]] = {}
        self.held: dict[int, dict] = {}
        self.early: dict[int, dict[str, TrialOutcome]] = {}

    def claim(self, i: int) -> bool:
        """Take unit ``i``'s claims (once: a retried unit keeps them); whether it has trials to train."""
        if i not in self.todo:
            self.todo[i], self.held[i], self.early[i] = claims.take_claims(
                self.units[i], self.ctx, self.ctx.claim_wait_s)
        return bool(self.todo[i])

    def outcomes(self, i: int, trained: list[TrialOutcome]) -> list[TrialOutcome]:
        """Unit ``i``'s outcomes in its order: ``trained`` (the worker's, or :func:`not_run`'s) with
        each handed-back result queued for writing, and the others."""
        held, by_id = self.held.pop(i, {}), dict(self.early.pop(i, {}))
        for o in trained:
            handed = o.extra.pop(HANDOFF, None)
            if handed is not None:
                res, t0_ms = handed
                background.submit(writing.write_result, None, res, t0_ms, self.ctx,
                                  held.pop(o.trial_id, None), None, None)
                o.spooled = HEALTH.down
            by_id[o.trial_id] = o
        for c in held.values():  # not trained here (given up: write_not_run asks the store)
            claims.release(c)
        return [by_id[s.trial_id] for s in self.units[i]]

    def release_all(self) -> None:
        """Let go of the claims of units never collected (an interrupted run)."""
        for held in self.held.values():
            for c in held.values():
                claims.release(c)
        self.held.clear()
