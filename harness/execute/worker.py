"""One work unit (a trial, or trials trained together under ``jax.vmap``) → nested MLflow runs.

This module is what every executor ships to its workers (in-process, local processes, Ray).
:func:`execute_unit` runs one unit and returns one :class:`~harness.core.outcome.TrialOutcome` per
spec, through one lifecycle whatever the writes' thread:

1. claim the unit's trials (:mod:`harness.execute.claims`; ``deferred`` when another invocation on
   this machine holds one);
2. prepare the writes: synchronously, a trial whose ``harness.trial_id`` already has a FINISHED run
   is skipped (its outcome is read back from that run), RUNNING runs of the trial left by a dead
   invocation are marked KILLED, and each trial's run is created before training, so a retried unit
   never makes a second FINISHED run;
3. train (:func:`harness.execute.training.train_unit`); each result's ``extra["time"]`` becomes the
   trial's time budget (:func:`harness.core.budget.trial_parts`: the trainer's parts, its share of
   the MLflow seconds before training, ``other`` the rest of its share of the unit's wall-clock);
4. write each result (:func:`harness.execute.writing.write_result`: its run filled and ended, or the
   result spooled), releasing its claim;
5. end the unit's checkpoints once its results are in the store or the spool.

With ``background=True`` (the in-process executor) step 2 does nothing and step 4 (the FINISHED
check, run creation, metrics, artifacts, end status) happens on the background writer thread
(:mod:`harness.execute.background`) while the next unit trains;
:func:`~harness.execute.background.flush_logging` waits for it (and runs before any unit whose
throughput is still to be measured, so timing never overlaps a write).

With ``handoff=True`` (the ``--jobs`` workers, :mod:`harness.execute.handoff`) steps 1, 2 and 4
are the caller's: the worker trains, and each result goes back in its outcome for the sweep's
process to write.

A trial that raises ends FAILED (tag ``status=failed``, ``traceback.txt`` artifact) and
:func:`execute_unit` itself never raises for a trial's own failure. A diverged trial ends FINISHED
with tags ``status=diverged`` and ``diverged_step``. The run's layout: :mod:`harness.tracking.trial_run`.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from harness.core import budget
from harness.core.context import RunContext
from harness.core.outcome import TrialOutcome, run_name
from harness.core.spec import TrialResult, TrialSpec
from harness.execute import background as bg
from harness.execute import claims, training, writing
from harness.tracking.client import client_for
from harness.tracking.health import HEALTH
from harness.tracking.trial_run import trial_tags


class _SyncWrites:
    """Every MLflow call of the unit in the calling thread: the FINISHED check and the runs'
    creation before training (``RUNNING`` while it trains), each result's write after it."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.client = None
        self.run_ids: dict[str, str] = {}
        self.artifact_uris: dict[str, str] = {}

    def prepare(self, specs: list[TrialSpec], outcomes: dict[str, TrialOutcome]) -> list[TrialSpec]:
        """The specs still to train; a trial done meanwhile gets its outcome in ``outcomes``. A store
        that fails here is noted (:data:`harness.tracking.client.HEALTH`): training goes on and the
        results are spooled."""
        ctx, todo = self.ctx, specs
        if specs and writing.store_should_be_tried(ctx.tracking_uri):
            try:
                self.client = client_for(ctx.tracking_uri)
                todo = claims.take_unfinished(self.client, specs, ctx, outcomes)
                for spec in todo:
                    run = self.client.create_run(ctx.experiment_id, tags=trial_tags(spec, ctx),
                                                 run_name=run_name(spec))
                    self.run_ids[spec.trial_id] = run.info.run_id
                    self.artifact_uris[spec.trial_id] = run.info.artifact_uri
            except Exception as e:  # the store is down: train anyway, spool the results
                HEALTH.failed(e)
                self.client = None
        return todo

    def before_training(self, todo: list[TrialSpec]) -> None:
        pass

    def abort(self) -> None:
        """Training was interrupted: leave nothing RUNNING."""
        for rid in self.run_ids.values():
            with contextlib.suppress(Exception):
                self.client.set_terminated(rid, status="KILLED")

    def write(self, res: TrialResult, t0_ms: int, claim, final_checkpoint: str | None
              ) -> tuple[str | None, dict[str, Any] | None, bool]:
        """``(run id, spool entry, spooled)`` of one written (or spooled) result."""
        tid = res.spec.trial_id
        rid, entry = writing.write_result(self.client, res, t0_ms, self.ctx, claim, self.run_ids.get(tid),
                                          final_checkpoint, self.artifact_uris.get(tid))
        return (None if entry else rid), entry, entry is not None

    def end_checkpoints(self, cks: training.Checkpoints, results: list[TrialResult],
                        logged: set[str]) -> None:
        training.end_checkpoints(cks, results, logged)


class _BackgroundWrites:
    """Every MLflow call of the unit on the background writer thread (the sweep's plan has just
    checked which trials are done; the writer checks again before creating a run)."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.futures: dict[str, Any] = {}

    def prepare(self, specs: list[TrialSpec], outcomes: dict[str, TrialOutcome]) -> list[TrialSpec]:
        return specs

    def before_training(self, todo: list[TrialSpec]) -> None:
        if self.ctx.measure_perf and training.needs_perf_measurement(todo):
            bg.flush_logging()  # throughput is timed on a quiet process: no MLflow writes alongside

    def abort(self) -> None:
        pass

    def write(self, res: TrialResult, t0_ms: int, claim, final_checkpoint: str | None
              ) -> tuple[str | None, dict[str, Any] | None, bool]:
        self.futures[res.spec.trial_id] = bg.submit(
            writing.write_result, None, res, t0_ms, self.ctx, claim, None, final_checkpoint)
        return None, None, HEALTH.down

    def end_checkpoints(self, cks: training.Checkpoints, results: list[TrialResult],
                        logged: set[str]) -> None:
        if cks:  # queued after the unit's writes: the single writer thread runs them in order
            bg.submit(_end_checkpoints_after, self.futures, cks, results)


class _HandoffWrites:
    """No MLflow write in the worker: each result goes back to the sweep's process in its outcome
    (``extra[HANDOFF] = (result, t0_ms)``), which writes it on its own background writer (the
    ``--jobs`` executor, :class:`harness.execute.executors.ProcessExecutor`, whose process also holds
    the trials' claims). A unit's checkpoints are removed once its results are handed over."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.handed: dict[str, tuple[TrialResult, int]] = {}

    def prepare(self, specs: list[TrialSpec], outcomes: dict[str, TrialOutcome]) -> list[TrialSpec]:
        return specs

    def before_training(self, todo: list[TrialSpec]) -> None:
        pass

    def abort(self) -> None:
        pass

    def write(self, res: TrialResult, t0_ms: int, claim, final_checkpoint: str | None
              ) -> tuple[str | None, dict[str, Any] | None, bool]:
        self.handed[res.spec.trial_id] = (res, t0_ms)
        return None, None, False

    def end_checkpoints(self, cks: training.Checkpoints, results: list[TrialResult],
                        logged: set[str]) -> None:
        training.end_checkpoints(cks, results, logged)


#: ``TrialOutcome.extra`` key of a result handed back for the caller to write (``handoff=True``).
HANDOFF = "handoff"


def _end_checkpoints_after(futures: dict[str, Any], cks: training.Checkpoints,
                           results: list[TrialResult]) -> None:
    """Writer-thread body: end a unit's checkpoints; a trial counts as logged when its write
    succeeded (its result is in the store or the spool)."""
    logged = {tid for tid, f in futures.items() if f.done() and f.exception() is None}
    training.end_checkpoints(cks, results, logged)


def execute_unit(unit: list[TrialSpec], ctx: RunContext, *, background: bool = False,
                 handoff: bool = False, wait_claims_s: float = 0.0) -> list[TrialOutcome]:
    """Train one work unit and log each trial as a nested child run of ``ctx.parent_run_id``.

    Args:
      unit: one trial, or trials with equal :meth:`TrialSpec.batch_key` (trained together with
        ``harness.train.loop.run_trials_batched``).
      ctx: where to log.
      background: write each trial's results (metrics, artifacts, dataset input, end status) on a
        background thread of this process, so that the next unit trains meanwhile; the caller must
        call :func:`harness.execute.background.flush_logging` before it relies on the store (the
        in-process executor does, at the end of the sweep). A process killed before that leaves
        the trial's run RUNNING, so the next invocation re-runs it: nothing FINISHED is lost,
        nothing runs twice.
      handoff: write nothing to the store and take no claim here: the caller holds the trials'
        claims and writes each result, which comes back in its outcome's ``extra[HANDOFF]`` as
        ``(result, t0_ms)`` for :func:`harness.execute.writing.write_result` (the ``--jobs``
        workers: their sweep's process is the store's only writer; a worker reads the store only
        for an early-stopping gate's peers).
      wait_claims_s: on a SQLite store, how long to wait for a trial's claim held by another
        invocation (0: do not wait; the trial's outcome is then ``deferred``).

    Returns:
      One :class:`TrialOutcome` per spec of ``unit``, in order (``skipped=True`` for trials that
      already had a FINISHED run; ``deferred=True`` for trials another invocation holds;
      ``spooled=True`` for results kept in the local spool because the store failed).

    Idempotent and safe to retry: see the module docstring. The store's errors never propagate: a
    result that cannot be written is spooled (its outcome carries ``extra["spool_entry"]``, so a
    driver on another machine can spool it too).
    """
    writes = _HandoffWrites(ctx) if handoff else _BackgroundWrites(ctx) if background else _SyncWrites(ctx)
    if handoff:
        specs, held, outcomes = list(unit), {}, {}
    else:
        specs, held, outcomes = claims.take_claims(unit, ctx, wait_claims_s or ctx.claim_wait_s)
    t_track = time.perf_counter()
    todo = writes.prepare(specs, outcomes)
    for tid in [t for t in held if t in outcomes]:  # done meanwhile (found by prepare)
        claims.release(held.pop(tid))
    if todo:
        writes.before_training(todo)  # may wait for the background writer: tracking too
    pre_s = time.perf_counter() - t_track
    if todo:
        _train_and_write(todo, ctx, writes, held, outcomes, pre_s, handoff)
    for c in held.values():  # claimed, but not trained (cannot happen; be safe)
        claims.release(c)
    return [outcomes[s.trial_id] for s in unit]


def _train_and_write(todo: list[TrialSpec], ctx: RunContext, writes: Any, held: dict, outcomes: dict,
                     pre_s: float, handoff: bool) -> None:
    """Train ``todo`` (:func:`harness.execute.training.train_unit`) and write each result with
    ``writes``, its outcome into ``outcomes``, its claim in ``held`` released; on an interrupt in
    training nothing is left RUNNING or locked. ``pre_s``: the unit's seconds before training."""
    t0_ms = int(time.time() * 1000)
    t_train = time.perf_counter()
    cks: training.Checkpoints = []
    try:
        results = training.train_unit(todo, ctx, cks)
    except BaseException:  # KeyboardInterrupt etc.: leave nothing RUNNING, nothing locked
        writes.abort()
        for c in held.values():
            claims.release(c)
        training.release_checkpoints(cks)
        raise
    train_s = time.perf_counter() - t_train
    logged: set[str] = set()
    try:
        for res in results:
            t1 = time.perf_counter()
            tid = res.spec.trial_id
            res.extra["time"] = budget.trial_parts(
                {k: v for k, v in (res.extra.get("time") or {}).items() if k in budget.TRAINER_PARTS},
                train_s / len(todo), pre_s / len(todo))
            rid, entry, spooled = writes.write(res, t0_ms, held.pop(tid, None),
                                               training.final_checkpoint(cks, tid))
            logged.add(tid)
            spent = time.perf_counter() - t1 + pre_s / len(todo)
            o = TrialOutcome.from_result(res, rid, spent)
            o.wall_seconds = spent + train_s / len(todo)
            o.spooled = spooled
            if entry is not None:
                o.extra["spool_entry"] = entry
            if handoff:
                o.extra[HANDOFF] = writes.handed.pop(tid)
            outcomes[tid] = o
    finally:  # in the store or the spool: no longer needed
        writes.end_checkpoints(cks, results, logged)
