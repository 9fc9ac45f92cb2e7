"""Shared ranks: optimizers whose ranking numbers are not distinguishable share a rank ("2="), the
rows of a tie in the order of the column the reader sees, and the seeds that would separate two
tied neighbours.

The rule is :mod:`harness.core.ties`, the one the sweep's end table applies too (its docstring
states it in full): :func:`reports.selection.best_configs` orders the optimizers of a task
strictly; two neighbours are **not distinguishable** when they agree on what is counted (seeds
reaching the target; seeds finished) and the per-seed numbers that order them — seconds to the
target (at different median steps), else the validation value the objective selects on (final,
or best during training) — are not told apart: with at least :data:`MIN_SEEDS` paired seeds a
paired bootstrap 95% interval of the mean difference contains 0, with fewer their min–max ranges
overlap. Ranks are competition ranks over groups (an optimizer joins the current group when it is
not distinguishable from one of its members); a group of several is written ``"2="`` (all share
rank 2, the next group is ranked 2 + its size), a lone optimizer ``"2"``; an optimizer every trial
of which failed on the task has no rank (``"—"``, :data:`harness.core.ties.UNRANKED`;
``shared_rank`` ``None``) and comes last.

Within a group the rows are shown in the order of the column the reader sees
(:func:`harness.core.ties.tie_column`): the leaderboard's time to target (its mean across seeds,
fastest first) when every member reached the target and the task ranks by time, else the
validation value that ranks it (its mean, best first). For each pair of neighbours in that order,
:func:`harness.core.ties.separation` gives the seeds (in all) at which the rank rule would tell them
apart with probability 0.8 at their observed mean paired difference and its SD (the power of the
rule's paired test, two-sided, nominal α = 0.05, from a noncentral t).
"""

from __future__ import annotations

import math

import pandas as pd

from harness.core import ties
from harness.core.names import M_SECONDS_TO_TARGET, M_STEPS_TO_TARGET
from harness.core.ties import MIN_SEEDS, TIE_MARK
from reports.frame import summaries
from reports.objectives import objective
from reports.selection import best_configs, cost_class, cost_range, select_by

__all__ = ["MIN_SEEDS", "TIE_MARK", "distinguishable", "shared_ranks", "standings"]

#: Columns of :func:`shared_ranks`.
COLUMNS = ["task", "optimizer", "rank", "shared_rank", "label", "order", "tie_on", "separation",
           "separation_seeds", "separation_on"]


def distinguishable(a: pd.Series, b: pd.Series) -> bool:
    """Whether per-seed values ``a`` and ``b`` (indexed by seed) tell the two apart
    (:func:`harness.core.ties.distinguishable`: a paired bootstrap with ``MIN_SEEDS`` pairs or
    more, else disjoint min–max ranges)."""
    return ties.distinguishable(a.dropna().to_dict(), b.dropna().to_dict())


def standings(frame: pd.DataFrame) -> dict[str, list[ties.Standing]]:
    """Task → its optimizers' :class:`harness.core.ties.Standing` (their selected configuration's
    seeds), in :func:`reports.selection.best_configs`' strict order."""
    best = best_configs(frame)
    if best.empty:
        return {}
    s = summaries(frame)
    by = select_by(frame)
    out: dict[str, list[ties.Standing]] = {}
    for task, bt in best.groupby("task", sort=True):
        obj = objective(frame, task)
        rows = []
        for b in bt.sort_values("rank").itertuples():
            g = s[(s["task"] == task) & (s["optimizer"] == b.optimizer) & (s["config_id"] == b.config_id)
                  & (s["status"] == "finished")].set_index("seed")
            steps = g[M_STEPS_TO_TARGET].dropna()
            rows.append(ties.Standing(
                name=b.optimizer, reached=int(b.n_reached), finished=int(b.n_finished),
                median_steps=float(steps.median()) if len(steps) else None,
                seconds=g[M_SECONDS_TO_TARGET].dropna().to_dict(),
                values=g[obj.selected(by)].dropna().to_dict(), higher_is_better=obj.mode == "max",
                cost_class=cost_class(g), cost_range=cost_range(g), has_results=bool(b.has_results)))
        out[task] = rows
    return out


def _mean(values: dict) -> float | None:
    xs = [float(v) for v in values.values() if v is not None and math.isfinite(float(v))]
    return sum(xs) / len(xs) if xs else None


def shared_ranks(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (task, optimizer): ``rank`` (the strict position, :func:`best_configs`), ``shared_rank``
    (its group's rank), ``label`` (``"2="`` for a group of several, else ``"2"``), ``order`` (the
    row's position on the leaderboard, 1-based: groups in rank order, a group's rows in the order
    of the column shown, module docstring), ``tie_on`` (for a group of several, what orders its
    rows: ``"time to target"`` or ``"validation value"``; else ``""``), and for a row below a tied
    neighbour ``separation`` (:attr:`harness.core.ties.Separation.words`, e.g. ``"7 seeds would
    separate"``; ``""`` on the first row of a group and on a lone one) and ``separation_seeds``
    (that number; ``None`` when there is none) and ``separation_on`` (what the two are compared on:
    ``"time to target"``, or ``"validation value"``, also for two that reached the target at the
    same median steps)."""
    by = select_by(frame)
    rows = []
    for task, ordered in standings(frame).items():
        groups = ties.share_ranks(ordered, by)
        labels = ties.tie_labels(groups, ordered)
        position = 0
        for grp in groups:
            members = [ordered[i] for i in grp]
            on = ties.tie_column(members, by)
            shown = [_mean(m.seconds) if on == ties.TIME else _mean(m.values) for m in members]
            best_low = on == ties.TIME or not members[0].higher_is_better
            shown_order = [grp[j] for j in ties.order_within(shown, best_low)]
            prev = None
            for i in shown_order:
                position += 1
                sep = ties.separation(ordered[prev], ordered[i], by) if prev is not None else None
                at, label = labels[i]
                rows.append({"task": task, "optimizer": ordered[i].name, "rank": i + 1, "shared_rank": at,
                             "label": label, "order": position, "tie_on": on if len(grp) > 1 else "",
                             "separation": sep.words if sep is not None else "",
                             "separation_seeds": sep.seeds if sep is not None else None,
                             "separation_on": sep.what if sep is not None else ""})
                prev = i
    return pd.DataFrame(rows, columns=COLUMNS)
