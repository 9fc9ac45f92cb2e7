"""Shared ranks: optimizers whose ranking numbers are not distinguishable share a rank.

:func:`reports.selection.best_configs` orders the optimizers of a task strictly (seeds reaching the
target, then median seconds to it, then seeds finished, then the final validation metric). Two
neighbours in that order are **not distinguishable** when they agree on what is counted (seeds
reaching the target; without any, seeds finished) and the per-seed numbers that order them, seconds
to the target (when they reached it; at the same median steps, a tie on time that
:func:`reports.selection.best_configs` orders by the final metric: that metric) or else the final
validation metric, are not told apart
(selecting by ``final`` or ``best``, :func:`reports.selection.select_by`: the seeds finished and
the selected validation value, the order :func:`best_configs` ranks by then):

* with at least :data:`reports.protocol.MIN_SEEDS` paired seeds: the paired bootstrap of
  :func:`reports.protocol.paired_comparison` has a 95% interval containing 0;
* with fewer: their intervals across seeds (:func:`reports.protocol.seed_interval`, the seeds'
  min–max) overlap.

Ranks are competition ranks over groups: walking down the order, an optimizer joins the current
group when it is not distinguishable from one of its members, else it starts a new group ranked by
its position. (Measured from the group's first member only, an optimizer whose results equal a
member's could rank apart from it: momentum "1=" and sgd "3" with the same steps and the same
accuracies, found by an attacking helper.) A group of several is written ``"2="`` (all its members
share rank 2, the next group is ranked 2 + its size); a lone optimizer ``"2"``.
"""

from __future__ import annotations

import pandas as pd

from harness.core.names import M_SECONDS_TO_TARGET, M_STEPS_TO_TARGET
from reports.frame import summaries
from reports.objectives import objective
from reports.protocol import MIN_SEEDS, paired_comparison, seed_interval
from reports.selection import best_configs, select_by

__all__ = ["TIE_MARK", "distinguishable", "shared_ranks"]

#: Suffix of a shared rank (``"2="``): after the number, so a table sorts the column numerically.
TIE_MARK = "="


def distinguishable(a: pd.Series, b: pd.Series, mode: str) -> bool:
    """Whether per-seed values ``a`` and ``b`` (indexed by seed) tell the two apart (module
    docstring): a paired bootstrap with ``MIN_SEEDS`` pairs or more, else disjoint seed intervals."""
    a, b = a.dropna(), b.dropna()
    if len(a) == 0 or len(b) == 0:
        return len(a) != len(b)
    paired = a.index.intersection(b.index)
    if len(paired) >= MIN_SEEDS:
        c = paired_comparison(a, b, mode)
        return not (c["lo"] <= 0.0 <= c["hi"])
    _, alo, ahi, _, _ = seed_interval(a)
    _, blo, bhi, _, _ = seed_interval(b)
    return ahi < blo or bhi < alo


def shared_ranks(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (task, optimizer): ``rank`` (the strict position, :func:`best_configs`), ``shared_rank``
    (its group's rank) and ``label`` (``"2="`` for a group of several, else ``"2"``)."""
    best = best_configs(frame)
    cols = ["task", "optimizer", "rank", "shared_rank", "label"]
    if best.empty:
        return pd.DataFrame(columns=cols)
    s = summaries(frame)
    by = select_by(frame)
    rows = []
    for task, bt in best.groupby("task", sort=True):
        obj = objective(frame, task)
        bt = bt.sort_values("rank")
        per = {}
        for b in bt.itertuples():
            g = s[(s["task"] == task) & (s["optimizer"] == b.optimizer) & (s["config_id"] == b.config_id)
                  & (s["status"] == "finished")].set_index("seed")
            # ranked by time to target: seconds to it (the same median steps: a tie on time, the
            # final value decides, as reports.selection orders them), else the final value; by final
            # or best: that value
            n_reached = b.n_reached if by == "time_to_target" else 0
            steps = g[M_STEPS_TO_TARGET].dropna()
            per[b.optimizer] = (n_reached, b.n_finished, g[M_SECONDS_TO_TARGET], g[obj.selected(by)],
                                float(steps.median()) if len(steps) else None)
        groups: list[list] = []
        for b in bt.itertuples():
            if groups and any(_tied(per[m.optimizer], per[b.optimizer], obj.mode) for m in groups[-1]):
                groups[-1].append(b)
            else:
                groups.append([b])
        for grp in groups:
            at = int(grp[0].rank)
            for b in grp:
                rows.append({"task": task, "optimizer": b.optimizer, "rank": int(b.rank), "shared_rank": at,
                             "label": f"{at}{TIE_MARK}" if len(grp) > 1 else str(at)})
    return pd.DataFrame(rows, columns=cols)


def _tied(lead: tuple, other: tuple, mode: str) -> bool:
    (r1, f1, sec1, val1, st1), (r2, f2, sec2, val2, st2) = lead, other
    if r1 != r2:
        return False
    if r1 > 0 and st1 != st2:
        return not distinguishable(sec1, sec2, "min")
    return f1 == f2 and not distinguishable(val1, val2, mode)
