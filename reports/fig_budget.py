"""The time budget figure (issue 25 §1): where the trials' seconds went, one stacked bar per task.

Each trial's run holds its share of its work unit's seconds (``time/<part>_s``,
:mod:`harness.core.budget`: a vmapped batch's seconds divided between its trials), so a task's bar is
the sum over its trials: compiling, training, evaluating, the throughput protocol, MLflow, the rest.
The sweep-level parts (start-up, pre-flight, the batching decision) are on the sweep's parent run
and in the summary's ``time`` line, not here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from harness.core.budget import TRIAL_PARTS
from harness.core.names import M_TIME
from reports.frame import summaries
from reports.layout import new_figure, task_labels

#: The parts a trial's run holds, in the order they are stacked.
PARTS = TRIAL_PARTS

#: A style per part: greys and hatches, never an optimizer's colour (the bars are tasks; a part
#: coloured like an optimizer would read as that optimizer).
PART_STYLES = {
    "compile": {"facecolor": "0.25", "hatch": ""},
    "train": {"facecolor": "0.55", "hatch": ""},
    "eval": {"facecolor": "0.75", "hatch": "//"},
    "throughput": {"facecolor": "0.9", "hatch": ".."},
    "tracking": {"facecolor": "0.6", "hatch": "xx"},
    "other": {"facecolor": "1.0", "hatch": "\\\\"},
}


def time_budget(frame: pd.DataFrame) -> pd.DataFrame:
    """Per task and part: the seconds its trials spent (``seconds``, summed over the trials that
    logged a time budget), its share of the task's total (``share``) and ``n_trials``. Empty when no
    trial logged one (runs from before issue 25)."""
    s = summaries(frame)
    cols = [M_TIME[p] for p in PARTS]
    for c in cols:
        if c not in s:
            s[c] = np.nan
    s = s[s[cols].notna().any(axis=1)]
    rows = []
    for task, g in s.groupby("task", sort=True):
        secs = {p: float(g[M_TIME[p]].fillna(0.0).clip(lower=0.0).sum()) for p in PARTS}
        total = sum(secs.values())
        rows.extend({"task": task, "part": p, "seconds": v, "share": v / total if total > 0 else np.nan,
                     "n_trials": len(g)} for p, v in secs.items())
    return pd.DataFrame(rows, columns=["task", "part", "seconds", "share", "n_trials"])


def budget_figure(frame: pd.DataFrame) -> Figure | None:
    """One horizontal bar per task, stacked by part (seconds summed over its trials), the total at
    its end; ``None`` without a time budget."""
    t = time_budget(frame)
    if t.empty or not (t["seconds"] > 0).any():
        return None
    labels = task_labels(frame)
    tasks = sorted(t["task"].unique())
    fig, axes = new_figure(1, 1, 0.45 * len(tasks) + 1.6)
    ax = axes[0, 0]
    left = np.zeros(len(tasks))
    for p in PARTS:
        d = t[t["part"] == p].set_index("task").reindex(tasks)
        vals = d["seconds"].fillna(0.0).to_numpy(float)
        ax.barh(np.arange(len(tasks)), vals, left=left, height=0.6, edgecolor="0.15", label=p,
                **PART_STYLES[p])
        left += vals
    for y, total in enumerate(left):
        ax.text(total, y, f" {total:.3g} s", va="center", fontsize=9)
    ax.set_xlim(0, left.max() * 1.15)
    ax.set_yticks(range(len(tasks)), [labels.get(tk, tk) for tk in tasks])
    ax.set_ylim(len(tasks) - 0.5, -0.5)
    ax.set_xlabel("seconds, summed over the task's trials")
    handles = [Patch(edgecolor="0.15", label=p, **PART_STYLES[p]) for p in PARTS]
    fig.legend(handles=handles, loc="outside upper center", ncols=len(handles), frameon=False)
    return fig
