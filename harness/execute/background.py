"""This process's background writer: one thread that does MLflow writes while the next unit trains.

:func:`submit` queues a call on the thread (in order: one writer, so a unit's writes end before
anything queued after them starts); :func:`flush_logging` waits for everything queued and raises the
first error a write met. Why: docs/decisions.md, "Tracking off the critical path".
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections.abc import Callable
from typing import Any

_POOL: list[cf.ThreadPoolExecutor] = []
#: Futures of the queued writes not yet waited for by :func:`flush_logging`.
PENDING: list[cf.Future] = []


#: CPU seconds the writer thread has spent on queued calls in this process (``time.thread_time``).
WRITER_CPU_S = [0.0]


def _timed(fn: Callable[..., Any], *args: Any) -> Any:
    t0 = time.thread_time()
    try:
        return fn(*args)
    finally:
        WRITER_CPU_S[0] += time.thread_time() - t0


#: At most this many writes wait for the writer thread; :func:`submit` blocks for a free slot. A
#: sweep of short trials trains faster than MLflow writes them (training can run thousands of trials
#: ahead), and a trained result that waits only in memory is lost to a kill (its trial trains
#: again): the queue stays short and training waits for the writer instead. 4 bounds what a kill
#: trains again at 4 per process and costs short trials nothing measurable: the writer is the
#: bottleneck there, and a longer trial leaves the queue empty anyway.
MAX_QUEUED = 4
_SLOTS = threading.BoundedSemaphore(MAX_QUEUED)


def submit(fn: Callable[..., Any], *args: Any) -> cf.Future:
    """Queue ``fn(*args)`` on the writer thread (started on first use), waiting while
    :data:`MAX_QUEUED` writes are queued; returns its future. Its CPU seconds add to
    :data:`WRITER_CPU_S`."""
    if not _POOL:
        _POOL.append(cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-mlflow"))
    _SLOTS.acquire()
    try:
        fut = _POOL[0].submit(_timed, fn, *args)
    except BaseException:
        _SLOTS.release()
        raise
    fut.add_done_callback(lambda _f: _SLOTS.release())
    PENDING.append(fut)
    return fut


def flush_logging() -> float:
    """Wait until every result handed to the background logger (``execute_unit(...,
    background=True)``) is in the store or the spool; return the seconds waited.

    Raises:
      Exception: the first error met by a background write that could not even be spooled.
    """
    t0 = time.perf_counter()
    first: BaseException | None = None
    while PENDING:
        fut = PENDING.pop(0)
        err = fut.exception()
        first = first or err
    if first is not None:
        raise first
    return time.perf_counter() - t0
