"""The CPU time of the step's work: the process's CPU seconds less those of its other Python threads.

:func:`cpu_snapshot` reads the process's CPU clock (all threads, :func:`time.process_time`) and the
CPU clock of every other live Python thread; :func:`work_cpu_s` of two snapshots is what the process
spent between them outside those threads (a background MLflow writer, heartbeats, a progress bar are
not the step's work): the calling thread's dispatch plus the XLA threads' computation, summed over
threads. :mod:`harness.train.timing` times its blocks with it (item 7 there: the figure the modeled
clock ranks on, on a CPU device) and the trainer its dispatches (the clock a figure is checked
against). Standard library only.
"""

from __future__ import annotations

import threading
import time
from typing import NamedTuple

__all__ = ["CpuSnapshot", "cpu_snapshot", "work_cpu_s"]


class CpuSnapshot(NamedTuple):
    """The process's CPU seconds (all threads, :func:`time.process_time`) and the CPU seconds of each
    other live Python thread (``{thread ident: seconds}``) at one moment: :func:`work_cpu_s` of two
    snapshots is the CPU the step's work took between them."""

    process_s: float
    others: dict[int, float]


def cpu_snapshot() -> CpuSnapshot:
    """A :class:`CpuSnapshot` now, taken from the calling thread (every other Python thread's clock
    is read with :func:`time.pthread_getcpuclockid`; a thread that ends meanwhile is left out)."""
    me = threading.get_ident()
    others: dict[int, float] = {}
    for t in threading.enumerate():
        if t.ident is None or t.ident == me:
            continue
        try:
            others[t.ident] = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except (OSError, ValueError, AttributeError):  # ended since enumerate, or no such clock
            continue
    return CpuSnapshot(time.process_time(), others)


def work_cpu_s(before: CpuSnapshot, after: CpuSnapshot) -> float:
    """CPU seconds the process spent between two :func:`cpu_snapshot` s, less what its other Python
    threads spent (the background MLflow writer, heartbeats, a progress bar: not the step's work).
    What remains is the calling thread's dispatch and the XLA threads' computation, summed over
    threads (a step that keeps two cores busy for 1 ms costs 2 ms). Other processes on the machine do
    not move it: time spent waiting for a core is not CPU time.
    A Python thread that started or ended between the snapshots counts as work (rare; a block's
    median hides it). Never negative."""
    spent = after.process_s - before.process_s
    for ident, s in after.others.items():
        if ident in before.others:
            spent -= s - before.others[ident]
    return max(spent, 0.0)
