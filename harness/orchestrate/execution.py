"""Running a sweep's work units on its executor, under the progress display.

:func:`execute_units` hands the units to the executor and every reported outcome to the sweep's
list and the display. Trials ``deferred`` because another invocation on this machine holds their
claim are run again at the end, each waiting for its claim (they are then found done, or trained
here). A trial the executor could not run at all (its worker process died each time, Ray gave up:
``executors.NOT_RUN``) is written FAILED with its reason here, before it is shown. A result that a
worker (possibly on another machine) could not write arrives in its outcome (``extra["spool_entry"]``)
and is kept in this machine's spool. Once the executor returns, one FINISHED run per trial is kept
(:func:`harness.orchestrate.resume.dedupe_sweep`).

**Throughput first, interleaved.** On the in-process executor (the default) the step of every
program the units will time is measured before any unit trains, the programs interleaved round by
round (:func:`harness.execute.training.measure_throughput`): one figure per (program, device), taken
under the same load for all, so that ranks on the modeled clock do not follow load that comes and
goes. Its seconds are the time budget's ``throughput``, but for its compiles (the chunks training
then reuses): ``compile``. Process and Ray workers (``--jobs N``) keep
each unit's own measurement after it trains: a worker's programs are known only as its units arrive,
and workers time while other workers train, so a sweep-wide interleaving is not available there
(each worker's clock check still re-measures a figure that disagrees with its training).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable

from harness.core import budget
from harness.core.context import RunContext
from harness.core.outcome import TrialOutcome
from harness.core.spec import TrialSpec
from harness.execute import isolation, training
from harness.execute.claims import CLAIM_WAIT_S
from harness.execute.executors import NOT_RUN, Executor, InProcessExecutor, write_not_run
from harness.orchestrate.progress import ProgressDisplay
from harness.orchestrate.resume import dedupe_sweep
from harness.orchestrate.sweep_clock import SweepClock
from harness.tracking import spool
from harness.tracking.health import HEALTH


def keep_spool_entry(o: TrialOutcome, uri: str) -> None:
    """A worker's result the store did not take (``o.extra["spool_entry"]``): note the store's
    failure, and spool the entry here when it was spooled on another machine."""
    entry = o.extra.pop("spool_entry", None)
    if entry is None:
        return
    HEALTH.failed(RuntimeError(entry.get("error", "write failed")))
    if not os.path.exists(entry.get("path", "")):  # written on another machine
        entry.pop("path", None)
        spool.put(uri, entry)


def _measure_first(units: list[list[TrialSpec]], ctx: RunContext, display: ProgressDisplay,
                   clock: SweepClock | None) -> None:
    """The in-process executor's interleaved throughput measurement of ``units`` before any trains,
    its seconds counted in ``clock``'s ``compile`` and ``throughput``."""
    t0 = time.perf_counter()
    # units with user code time their own steps in their worker (harness.execute.isolation)
    timed = [units[i] for i in isolation.split(units)[0]] if ctx.dispatch_timeout_s else units
    compile_s = training.measure_throughput(timed, on_stage=display.stage)
    display.stage_done()
    if clock is not None:  # its compiles are the budget's compile (training reuses them)
        clock.timing = training.timing_note()
        stage_s = time.perf_counter() - t0
        budget.add(clock.parts, {"compile": min(compile_s, stage_s),
                                 "throughput": max(0.0, stage_s - compile_s)})


def execute_units(ex: Executor, units: list[list[TrialSpec]], ctx: RunContext,
                  outcomes: list[TrialOutcome], display: ProgressDisplay,
                  clock: SweepClock | None = None,
                  on_outcome: Callable[[TrialOutcome], None] | None = None) -> float:
    """Run ``units`` on ``ex``, appending every outcome to ``outcomes`` and showing it on
    ``display`` (on the in-process executor the throughput of their programs is measured first,
    interleaved, counted in ``clock``'s ``throughput`` and ``compile``: the module docstring);
    then run the deferred trials again and keep one FINISHED run per trial. ``on_outcome(o)`` hears
    each outcome as it arrives (an adaptive sweep's searchers: :mod:`harness.orchestrate.adaptive`).
    Returns the seconds that last step took (MLflow calls: the time budget's ``tracking``)."""
    deferred: list[str] = []
    if ctx.measure_perf and isinstance(ex, InProcessExecutor):
        _measure_first(units, ctx, display, clock)
    by_id = {s.trial_id: s for u in units for s in u}

    def on_done(batch: list[TrialOutcome]) -> None:
        n = 0
        for o in batch:
            if o.deferred:
                deferred.append(o.trial_id)
                continue
            if o.extra.get(NOT_RUN):  # could not run (its worker died, Ray gave up): FAILED in the store
                o = write_not_run(by_id[o.trial_id], ctx, o.reason)
            keep_spool_entry(o, ctx.tracking_uri)
            outcomes.append(o)
            if on_outcome is not None:
                on_outcome(o)
            n += 1
            display.trial(o)
        display.unit_done(n)

    ex.note = display.note  # a worker that died, a unit tried again: said above the bar
    ex.run(units, ctx, on_done)
    if deferred:
        display.note(f"{len(deferred)} trials are being trained by another invocation on this machine: "
                     f"waiting for them")
        again = [[by_id[t]] for t in deferred]
        deferred.clear()
        ex.run(again, dataclasses.replace(ctx, claim_wait_s=CLAIM_WAIT_S), on_done)
    t0 = time.perf_counter()
    dedupe_sweep(ctx, units)
    return time.perf_counter() - t0
