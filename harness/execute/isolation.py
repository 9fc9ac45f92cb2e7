"""User code kept apart: which units train in a worker process of their own, and the reasons a
worker's death or hang becomes.

A trial whose optimizer or model comes from a ``source:`` entry (a file, a module, an AlgoPerf
submission; not ``optax:``, an installed library) runs code the harness cannot bound from inside:
a ``jax.debug.callback`` that sleeps blocks the dispatch in C, and one that calls ``os._exit``
ends the process from a thread of XLA's. So such a unit (:func:`isolated`) trains in a worker
process (on the in-process executor too: :func:`split`), whose every dispatch the parent watches
(:mod:`harness.core.watchdog`): one that runs past ``dispatch_timeout_s`` is a hang, the worker is
ended with SIGKILL and the unit's trials are FAILED with the reason (:func:`hang_reason`), not tried
again. A worker that dies is replaced and its unit tried once more, as any ``--jobs`` unit; the
FAILED reason then says where the last one was (:func:`death_where`). Either way the sweep goes on
with the rest and then exits 1, as for any failed trial.

Standard library only (the executors import it before any JAX).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from harness.core import watchdog
from harness.core.spec import TrialSpec

__all__ = ["death_reason", "death_where", "gave_up_reason", "hang", "hang_reason", "isolated",
           "isolated_env", "split"]

#: Optimizer sources that are installed libraries, trusted as the harness's own code.
_LIBRARY_PREFIXES = ("optax:", "optax.contrib:")


def isolated(spec: TrialSpec) -> bool:
    """Whether ``spec`` runs a user's code while it trains: an optimizer ``source`` other than
    ``optax:`` or a model ``source``."""
    opt = spec.optimizer_source
    return bool(spec.model_source) or (bool(opt) and not opt.startswith(_LIBRARY_PREFIXES))


def split(units: Sequence[Sequence[TrialSpec]]) -> tuple[list[int], list[int]]:
    """``(plain, sourced)``: the indices of ``units`` without and with an :func:`isolated` trial."""
    plain, sourced = [], []
    for i, u in enumerate(units):
        (sourced if any(isolated(s) for s in u) else plain).append(i)
    return plain, sourced


def hang(board: Any, unit: Sequence[TrialSpec], limit_s: float | None) -> str | None:
    """The reason the worker holding ``unit`` is hung (:func:`harness.core.watchdog.overdue`), or
    ``None``: none, no limit, or a unit without user code (never timed)."""
    if limit_s is None or board is None or not any(isolated(s) for s in unit):
        return None
    return watchdog.overdue(board, limit_s)


def _sources(unit: Sequence[TrialSpec]) -> str:
    names = [s.optimizer_source for s in unit if s.optimizer_source] + [s.model_source for s in unit
                                                                         if s.model_source]
    return ", ".join(dict.fromkeys(names))


def hang_reason(unit: Sequence[TrialSpec], hung: str) -> str:
    """The FAILED reason of a unit with user code whose worker hung (``hung``, from :func:`hang`),
    naming its sources.

    Returns:
      ``"hung: its training chunk at step 5 did not return within 2 s (dispatch_timeout_s: 2);
      its worker process was killed (source: slow.py:sleepy)"``.
    """
    return f"hung: {hung}; its worker process was killed (source: {_sources(unit)})"


def death_where(board: Any) -> str:
    """Where a worker that died was, for its reason: ``", the last during its training chunk at
    step 30"`` (:func:`harness.core.watchdog.last_dispatch`), ``""`` before its first dispatch."""
    where = watchdog.last_dispatch(board) if board is not None else ""
    return f", the last {where}" if where else ""


def isolated_env(parent_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the in-process executor's worker for user code adds: it shares the
    sweep's devices, so it allocates GPU memory on demand unless the user set
    ``XLA_PYTHON_CLIENT_PREALLOCATE``."""
    env = os.environ if parent_env is None else parent_env
    var = "XLA_PYTHON_CLIENT_PREALLOCATE"
    return {} if var in env else {var: "false"}


def death_reason(exitcode: int | None) -> str:
    """How a worker process ended, for a reason: ``signal 9`` (SIGKILL), ``exit code 1``."""
    if exitcode is None:
        return "unknown exit"
    if exitcode < 0:
        return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def gave_up_reason(deaths: list[str]) -> str:
    """The FAILED reason of a unit whose worker died ``len(deaths)`` times:
    ``worker process died (signal 9) twice`` (``... died twice (signal 9; exit code 1)`` when the
    deaths differ)."""
    times = {1: "once", 2: "twice"}.get(len(deaths), f"{len(deaths)} times")
    if len(set(deaths)) == 1:
        return f"worker process died ({deaths[0]}) {times}"
    return f"worker process died {times} ({'; '.join(deaths)})"
