"""The time budget figure: where the sweep's seconds went, and each task's.

The first bar is the whole sweep: its parent runs' ``time/<part>_s`` (every part of
:data:`harness.core.names.TIME_PARTS`: start-up, pre-flight, the batching decision and the
throughput stage included; summed over its invocations, ``frame.attrs[SWEEP_BUDGET_ATTR]``), as long
as its wall-clock. Then one bar per task: each trial's run holds its share of its work unit's seconds
(:mod:`harness.core.budget`: a vmapped batch's seconds divided between its trials), so a task's bar
is the sum over its trials of compiling, training, evaluating, the unit's own throughput measurement,
MLflow and the rest. With ``--jobs N`` the trials' seconds ran side by side, so the tasks' bars can
add up to more than the sweep's.

The bars describe the same invocations: a task's bar holds the trials the sweep's bar's
invocations trained; trials the report shows that other invocations trained (a grown search's
trials carried over from an earlier sweep id, or an invocation that logged no budget) are a bar
of their own, labelled so, outside the sweep's. Every bar's label says how many invocations or
trials it sums.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from harness.core.budget import TRIAL_PARTS
from harness.core.names import M_TIME, TIME_PARTS
from reports.frame import SWEEP_BUDGET_ATTR, SWEEP_BUDGET_PARENTS_ATTR, summaries
from reports.layout import new_figure, task_labels
from reports.style import fit_legend

#: The parts a trial's run holds, in the order they are stacked.
PARTS = TRIAL_PARTS
#: The parts of the sweep's bar (its parent runs'), in the order they are stacked.
SWEEP_PARTS = TIME_PARTS
#: The ``task`` of the sweep's rows in :func:`time_budget`, and its bar's label.
SWEEP_ROW = "whole sweep"

#: A style per part: greys and hatches, never an optimizer's colour (the bars are tasks; a part
#: coloured like an optimizer would read as that optimizer).
PART_STYLES = {
    "startup": {"facecolor": "0.4", "hatch": "--"},
    "preflight": {"facecolor": "0.85", "hatch": "||"},
    "compile": {"facecolor": "0.25", "hatch": ""},
    "train": {"facecolor": "0.55", "hatch": ""},
    "eval": {"facecolor": "0.75", "hatch": "//"},
    "throughput": {"facecolor": "0.9", "hatch": ".."},
    "batching": {"facecolor": "0.45", "hatch": "++"},
    "tracking": {"facecolor": "0.6", "hatch": "xx"},
    "other": {"facecolor": "1.0", "hatch": "\\\\"},
}


def _rows(task: str, bar: str, secs: dict[str, float], n_trials: int) -> list[dict]:
    total = sum(secs.values())
    return [{"task": task, "bar": bar, "part": p, "seconds": v, "share": v / total if total > 0 else np.nan,
             "n_trials": n_trials} for p, v in secs.items()]


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def time_budget(frame: pd.DataFrame) -> pd.DataFrame:
    """Per bar and part: the seconds (``seconds``, summed over the trials of the bar that logged a
    time budget), its share of the bar's total (``share``) and ``n_trials``; ``bar`` is the bar's
    label. First, when the parent runs logged one, the rows of :data:`SWEEP_ROW` (every part of
    :data:`SWEEP_PARTS`; its label counts the invocations); then per task the trials those
    invocations trained (label: the task's and their count), and apart (label "... of other
    invocations") the trials other invocations trained; without a sweep bar, one bar per task
    labelled by the task alone. Empty when nothing logged a budget (runs from before budgets)."""
    s = summaries(frame)
    cols = [M_TIME[p] for p in PARTS]
    for c in cols:
        if c not in s:
            s[c] = np.nan
    labels = task_labels(frame)
    sweep = frame.attrs.get(SWEEP_BUDGET_ATTR) or {}
    own = set(frame.attrs.get(SWEEP_BUDGET_PARENTS_ATTR) or [])
    rows = []
    if sweep:
        n_inv = len(own) or len(frame.attrs.get("parent_run_ids") or []) or 1
        rows = _rows(SWEEP_ROW, f"{SWEEP_ROW}: {_count(n_inv, 'invocation')}",
                     {p: float(sweep.get(p, 0.0)) for p in SWEEP_PARTS}, len(s))
    s = s[s[cols].notna().any(axis=1)]
    for task, g in s.groupby("task", sort=True):
        label = labels.get(task, task)
        mine = g["parent_run_id"].isin(own) if sweep and own else pd.Series(True, index=g.index)
        for part, bar in ((g[mine], f"{label}: {_count(int(mine.sum()), 'trial')}" if sweep else label),
                          (g[~mine], f"{label}: {_count(int((~mine).sum()), 'trial')} of other invocations")):
            if len(part):
                rows.extend(_rows(task, bar, {p: float(part[M_TIME[p]].fillna(0.0).clip(lower=0.0).sum())
                                              for p in PARTS}, len(part)))
    return pd.DataFrame(rows, columns=["task", "bar", "part", "seconds", "share", "n_trials"])


def budget_figure(frame: pd.DataFrame) -> Figure | None:
    """The whole sweep's bar (when its parents logged a budget), then one horizontal bar per task,
    stacked by part (seconds summed over its trials), the total at each bar's end; ``None`` without
    a time budget."""
    t = time_budget(frame)
    if t.empty or not (t["seconds"] > 0).any():
        return None
    bars = list(dict.fromkeys(t["bar"]))  # the sweep first, then the tasks sorted
    fig, axes = new_figure(1, 1, 0.45 * len(bars) + 1.6)
    ax = axes[0, 0]
    left = np.zeros(len(bars))
    shown = [p for p in SWEEP_PARTS if p in set(t["part"])]
    for p in shown:
        d = t[t["part"] == p].drop_duplicates("bar").set_index("bar").reindex(bars)
        vals = d["seconds"].fillna(0.0).to_numpy(float)
        ax.barh(np.arange(len(bars)), vals, left=left, height=0.6, edgecolor="0.15", label=p,
                **PART_STYLES[p])
        left += vals
    for y, total in enumerate(left):
        ax.text(total, y, f" {total:.3g} s", va="center", fontsize=9)
    ax.set_xlim(0, left.max() * 1.15)
    ax.set_yticks(range(len(bars)), bars)
    ax.set_ylim(len(bars) - 0.5, -0.5)
    ax.set_xlabel("seconds: the sweep's wall-clock over its invocations; a task's, summed over the trials "
                  "named")
    handles = [Patch(edgecolor="0.15", label=p, **PART_STYLES[p]) for p in shown]
    fit_legend(fig, handles, max_columns=5)
    return fig
