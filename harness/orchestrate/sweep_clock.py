"""The parent run's time budget: :class:`SweepClock` times the sweep's own parts and adds its
trials' (the rules: :mod:`harness.core.budget`).

The sweep's wall-clock starts at the process start when the command line gives it
(:data:`harness.PROCESS_START`), else when :func:`harness.orchestrate.run.run_sweep` is called, and ends
when the parent run's metrics are computed (the parent's last MLflow write, after it, is not in it).
The parent's parts:

- ``startup``: the start to the pre-flight (imports, the command line, loading the config);
- ``preflight``: :func:`harness.orchestrate.preflight.preflight`; ``batching``: forming the work units
  (:func:`harness.plan.units.group_units`, the measured vmap-or-not decision), less the compiles of
  its measurements (:func:`harness.train.batching.compile_seconds`: programs the in-process
  executor's training reuses, and that ``--jobs`` workers load from the persistent compilation
  cache), which are ``compile``;
- ``tracking``: the parent's own MLflow calls (preparing the store, replaying the spool, planning
  from the store, the parent run's creation and end, ending leftovers, keeping one run per trial)
  plus the execution's (each trial's ``tracking_seconds``, the final wait for the background writer);
- ``compile``, ``train``, ``eval``, ``throughput``: the sums of the trained trials' parts, plus,
  for ``throughput`` and ``compile``, the in-process sweep's interleaved throughput stage before
  training (:mod:`harness.orchestrate.execution`: its timing, and its compiles);
- ``other``: the rest (building the executor, the workers' start-up, data loading, checkpoints...).

With several workers the trials' seconds (their ``wall_seconds``, summed) exceed the execution's
wall-clock: the trials' parts (and their tracking) are scaled by wall / summed
(:func:`harness.core.budget.scale_parallel`), i.e. each part is its fraction of the workers' summed
seconds, times the execution's wall-clock.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from harness.core import budget
from harness.core.names import TIME_PARTS
from harness.core.outcome import TrialOutcome


class SweepClock:
    """The parent's parts as the sweep goes (:meth:`part`, :meth:`execution`), and the budget at the
    end (:meth:`finish`)."""

    def __init__(self, t_start: float, process_start: float | None = None):
        self.start = t_start if process_start is None or process_start > t_start else process_start
        self.parts: dict[str, float] = {}
        self.wall_s = 0.0
        self.budget: dict[str, float] | None = None
        self.timing = ""  # the throughput timing's bound, when it cut the rounds (the time line)

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Add the seconds of the ``with`` block to part ``name``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            budget.add(self.parts, {name: time.perf_counter() - t0})

    def startup_ends(self) -> None:
        """The sweep starts its work now: ``startup`` is the seconds since the start."""
        self.parts["startup"] = time.perf_counter() - self.start

    def execution(self, outcomes: list[TrialOutcome], wall_s: float, flush_wait_s: float = 0.0) -> None:
        """Add the trials trained in an execution of ``wall_s`` seconds (``outcomes``; skipped ones
        count nothing) and the wait for the background writer at its end."""
        ran = [o for o in outcomes if not o.skipped and not o.deferred]
        scale = budget.scale_parallel(sum(o.wall_seconds for o in ran), wall_s)
        for o in ran:
            trainer = {k: v for k, v in o.time_parts.items() if k in budget.TRAINER_PARTS}
            budget.add(self.parts, trainer, scale)
            budget.add(self.parts, {"tracking": o.tracking_seconds}, scale)
        budget.add(self.parts, {"tracking": flush_wait_s})

    def finish(self) -> dict[str, float]:
        """Every part of :data:`~harness.core.names.TIME_PARTS` now, ``other`` the rest of the
        wall-clock (kept in :attr:`budget`, the wall-clock in :attr:`wall_s`)."""
        self.wall_s = time.perf_counter() - self.start
        self.budget = budget.complete(self.wall_s, self.parts, TIME_PARTS)
        return self.budget
