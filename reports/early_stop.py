"""Was early stopping right? The audit of an ASHA / Hyperband search (``audit: K``).

An early-stopping search logs, per cell (optimizer on task), a record in the parent run's
``search.json`` (``harness.orchestrate.asha.AshaSearcher.describe``): its ``full_budget`` trials (those
promoted to the end: their rung values and final validation values) and its ``audits`` (stopped
trials also trained to the end: the stopped twin's rung values beside the full training's final
values). :func:`audit_rows` compares, per cell:

- **Kendall's tau** (:func:`scipy.stats.kendalltau`, tau-b) between the values at the first rung
  every compared trial reached and their values after full training, over the promoted and the
  audited trials: 1 when the rung ranks them as full training does; ``None`` with fewer than 2;
- **stops right**: audited trials whose full training is not better than the best promoted trial;
- **would a stopped trial have won?**: whether an audited trial's full training beats every promoted
  trial (by the search's objective: its metric, ``max``/``min``, ``final`` or ``best``).

Imports ``harness.core`` only through what its records hold (JSON); scipy for the rank correlation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["EARLY_STOP_METHODS", "audit_rows", "kendall_tau"]

#: The methods whose records this module reads.
EARLY_STOP_METHODS = ("asha", "successive_halving", "hyperband")


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b of ``x`` and ``y`` (``None`` with fewer than 2 pairs, or when it is
    undefined: every value of one side tied)."""
    if len(x) < 2:
        return None
    from scipy.stats import kendalltau

    t = kendalltau(list(x), list(y)).statistic
    return None if t is None or not math.isfinite(float(t)) else float(t)


def _final(rec: dict[str, Any], objective: dict[str, Any]) -> float | None:
    """The full-training value the search's objective reads (``None``: absent)."""
    name = str(objective.get("metric", "valid/loss")).split("/", 1)[-1]
    kind = "best" if objective.get("value") == "best" else "final"
    v = rec.get(f"{kind}_valid_{name}")
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def _better(a: float, b: float, mode: str) -> bool:
    return a > b if mode == "max" else a < b


def audit_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per early-stopping cell of ``search.json``'s ``records`` (by task, then optimizer):
    ``task``, ``optimizer``, ``method``, ``configurations``, ``stopped``, ``steps_spent``,
    ``budget_steps``, ``audited`` (audits trained to the end), ``stops_right`` (of those, not better
    than the best promoted trial), ``rung`` (the rung step compared), ``kendall_tau`` and ``pairs``
    (its number of trials), ``stopped_would_win`` (bool; ``None`` without an audit or a promoted
    trial) and ``winner`` (the audited configuration that would have won, ``""``)."""
    out = []
    recs = sorted((r for r in records if r.get("method") in EARLY_STOP_METHODS),
                  key=lambda r: (str(r.get("task")), str(r.get("optimizer"))))
    for r in recs:
        obj = r.get("objective") or {}
        mode = obj.get("mode", "max")
        full = [(t["rungs"], _final(t, obj), t.get("config", "")) for t in r.get("full_budget", [])]
        audited = [(a["rungs"], _final(a, obj), a.get("config", "")) for a in r.get("audits", [])
                   if a.get("status") == "finished"]
        full = [f for f in full if f[1] is not None]
        audited = [a for a in audited if a[1] is not None]
        both = full + audited
        common = set.intersection(*(set(rg) for rg, _, _ in both)) if both else set()
        rung = min(common, key=int) if common else None
        tau = kendall_tau([rg[rung] for rg, _, _ in both], [v for _, v, _ in both]) if rung else None
        best = None
        for _, v, _ in full:
            best = v if best is None or _better(v, best, mode) else best
        winners = [c for _, v, c in audited if best is not None and _better(v, best, mode)]
        out.append({"task": r.get("task"), "optimizer": r.get("optimizer"), "method": r.get("method"),
                    "configurations": r.get("configurations"), "stopped": r.get("stopped"),
                    "steps_spent": r.get("steps_spent"), "budget_steps": r.get("budget_steps"),
                    "audited": len(audited),
                    "stops_right": None if best is None else len(audited) - len(winners),
                    "rung": int(rung) if rung else None, "kendall_tau": tau,
                    "pairs": len(both) if rung else 0,
                    "stopped_would_win": None if best is None or not audited else bool(winners),
                    "winner": winners[0] if winners else ""})
    return out
