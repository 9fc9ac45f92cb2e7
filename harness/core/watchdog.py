"""The per-dispatch limit on a user's code while it trains: the trainer's side and the watcher's.

A trial whose optimizer or model comes from a ``source:`` entry trains in a worker process of its
own (:class:`harness.execute.executors.ProcessExecutor`). The trainer marks each dispatch (a chunk
of training steps, an evaluation, the throughput timing) with :func:`dispatch`: it writes when the
dispatch began, at which step and of which kind into a small array shared with the process that
watches (:func:`new_board`, installed in the worker by :func:`install`). The watcher reads it with
:func:`overdue`: a dispatch running longer than the limit (the config's ``dispatch_timeout_s``) is a
hang, and the watcher ends the worker with SIGKILL. A training chunk's compile is not timed
(:func:`untimed`), nor is anything between dispatches (data loading, checkpoints, MLflow writes).
:func:`last_dispatch` says, after a worker's death, where it was.

Outside a worker nothing is installed and :func:`dispatch` costs one attribute read.
Standard library only.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["DEFAULT_DISPATCH_TIMEOUT_S", "KINDS", "dispatch", "install", "last_dispatch", "new_board",
           "overdue", "untimed"]

#: Seconds one dispatch of a sourced trial may take (the config's ``dispatch_timeout_s`` default; as
#: the limit of one call into an AlgoPerf submission).
DEFAULT_DISPATCH_TIMEOUT_S = 600.0
#: What a dispatch is, by its code in the board (index 0 is unused: "none").
KINDS = ("", "training chunk", "evaluation", "throughput timing")

# The board: [monotonic start of the running dispatch (0: none), its step, its kind's index,
# the start of the last dispatch begun, its step, its kind]
_SIZE = 6
_BOARD: Any = None


def new_board(ctx: Any) -> Any:
    """A board shared with a worker process of the multiprocessing context ``ctx`` (pass it to the
    worker, which calls :func:`install` with it)."""
    return ctx.Array("d", _SIZE, lock=False)


def install(board: Any) -> None:
    """Make :func:`dispatch` write to ``board`` in this process (``None``: to nothing)."""
    global _BOARD
    _BOARD = board


@contextlib.contextmanager
def dispatch(kind: str, step: int = 0) -> Iterator[None]:
    """Mark the ``with`` body as one dispatch of ``kind`` (one of :data:`KINDS`) at ``step``.

    Raises:
      ValueError: ``kind`` is not one of :data:`KINDS`.
    """
    board = _BOARD
    if board is None:
        yield
        return
    code = KINDS.index(kind)
    now = time.monotonic()
    board[3], board[4], board[5] = now, float(step), float(code)
    board[1], board[2], board[0] = float(step), float(code), now
    try:
        yield
    finally:
        board[0] = 0.0


@contextlib.contextmanager
def untimed() -> Iterator[None]:
    """Inside a :func:`dispatch`: the ``with`` body is not timed (a compile), and the dispatch's
    clock starts again after it."""
    board = _BOARD
    if board is None or board[0] <= 0.0:
        yield
        return
    board[0] = 0.0
    try:
        yield
    finally:
        board[0] = time.monotonic()


def _where(start: float, step: float, code: float) -> str:
    kind = KINDS[int(code)] if 0 < int(code) < len(KINDS) else "dispatch"
    return f"{kind} at step {int(step)}"


def overdue(board: Any, limit_s: float, now: float | None = None) -> str | None:
    """The reason a worker is hung, or ``None``: a dispatch has run more than ``limit_s`` seconds.

    Returns:
      ``"a training chunk at step 5 did not return within 2 s (dispatch_timeout_s: 2)"``, or ``None``.
    """
    start, step, code = board[0], board[1], board[2]
    now = time.monotonic() if now is None else now
    if start <= 0.0 or now - start <= limit_s:
        return None
    return (f"its {_where(start, step, code)} did not return within {limit_s:g} s "
            f"(dispatch_timeout_s: {limit_s:g})")


def last_dispatch(board: Any) -> str:
    """Where a dead worker was: ``"during its training chunk at step 40"``, ``"between dispatches,
    after its evaluation at step 40"``, or ``""`` before its first dispatch."""
    if board[0] > 0.0:
        return f"during its {_where(board[0], board[1], board[2])}"
    if board[3] > 0.0:
        return f"between dispatches, after its {_where(board[3], board[4], board[5])}"
    return ""
