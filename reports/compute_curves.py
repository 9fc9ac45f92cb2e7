"""Tuning against compute: the best validation metric against the training steps
spent on tuning, so that random search, early stopping and coordinate descent share one axis.

Per (task, optimizer, method), by how its configurations were proposed (the ``search`` column, the tag
``harness.search``):

- a **fixed plan** (``grid``, ``random``, ``quasirandom``): every configuration trains to its budget,
  so the order is arbitrary; the curve is the tuning curve's expected best after k configurations
  (:func:`reports.protocol.tuning_curves`, Dodge et al. 2019) placed at k × the mean steps one
  configuration costs (its seeds' steps summed);
- an **adaptive search** (``asha``, ``successive_halving``, ``hyperband``, ``coordinate_descent``,
  ``optuna``): the order is the search's, so the curve is its actual path: trials in the order they
  ended, the steps they trained added up (a stopped or diverged trial counts the steps it ran), and
  after each configuration whose every seed has ended, the best configuration value so far
  (:func:`reports.protocol.config_values`: the mean over seeds, a seed that did not finish counted as
  the task's worst value, so a stopped configuration never raises the curve).

A trial's steps are its curve's last step (the budget ``train_steps`` where it logged no curve).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports import protocol
from reports.frame import curves, per_frame, summaries

#: The search methods whose order is their own (a path, not an expectation).
ADAPTIVE = ("asha", "successive_halving", "hyperband", "coordinate_descent", "optuna")
COLUMNS = ["task", "optimizer", "method", "kind", "steps", "valid", "metric", "mode"]


def trial_steps(frame: pd.DataFrame) -> pd.Series:
    """``trial_id`` -> training steps it ran: its curve's last step, else its budget."""
    s = summaries(frame)
    budget = pd.Series(pd.to_numeric(s["train_steps"], errors="coerce").astype("float64").to_numpy(),
                       index=s["trial_id"])
    c = curves(frame)
    ran = (pd.to_numeric(c.groupby("trial_id")["step"].max(), errors="coerce").astype("float64")
           if len(c) else pd.Series(dtype="float64"))
    out = budget.copy()
    out.loc[ran.index.intersection(out.index)] = ran
    return out.fillna(0.0)


@per_frame
def compute_curves(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per point of each (task, optimizer)'s curve (module docstring).

    Returns columns ``task, optimizer, method, kind, steps, valid, metric, mode``: ``kind`` is
    ``"expected"`` (a fixed plan's expectation) or ``"path"`` (an adaptive search's own order);
    ``steps`` the training steps spent on the optimizer's tuning on that task so far; ``valid`` the
    best (expected best) configuration's validation value; ``metric`` what it is and ``mode`` its
    direction (``max`` or ``min``).
    """
    s = summaries(frame)
    if s.empty:
        return pd.DataFrame(columns=COLUMNS)
    steps = trial_steps(frame)
    cv = protocol.config_values(frame)
    tc = protocol.tuning_curves(frame)
    s = s.assign(method=s["search"].fillna("grid") if "search" in s else "grid")
    n_methods = s.groupby(["task", "optimizer"])["method"].nunique()
    parts = []
    for (task, opt, method), g in s.groupby(["task", "optimizer", "method"], sort=True):
        mine = cv[(cv["task"] == task) & (cv["optimizer"] == opt) & cv["config_id"].isin(g["config_id"])]
        if mine.empty:
            continue
        mode, metric = mine["mode"].iloc[0], mine["metric"].iloc[0]
        if method in ADAPTIVE:
            parts.append(_path(g, mine, steps, task, opt, method, metric, mode))
            continue
        # a fixed plan beside other methods of the same optimizer: its expectation over its own
        # configurations only
        t = (tc if n_methods[(task, opt)] == 1 else
             protocol.tuning_curves(frame[frame["trial_id"].isin(g["trial_id"])]))
        t = t[(t["task"] == task) & (t["optimizer"] == opt) & ~t["self_tuning"]]
        if t.empty:
            continue
        per_config = steps.reindex(g["trial_id"]).groupby(g["config_id"].to_numpy()).sum().mean()
        parts.append(pd.DataFrame({"task": task, "optimizer": opt, "method": method, "kind": "expected",
                                   "steps": t["k"].to_numpy() * float(per_config),
                                   "valid": t["valid"].to_numpy(), "metric": metric, "mode": mode}))
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True)[COLUMNS] if parts else pd.DataFrame(columns=COLUMNS)


def steps_to_reach(cc: pd.DataFrame) -> pd.DataFrame:
    """For each (task, optimizer) tuned by several methods (:func:`compute_curves`' rows), the
    training steps each method spent until its curve first reached the value every one of them
    reached: the worst of their final bests (``mode`` max: the smallest final best).

    Returns columns ``task, optimizer, method, value, steps, final`` (``final``: the method's own
    final best), ordered by task, optimizer, then steps; empty where no optimizer has two methods.
    """
    cols = ["task", "optimizer", "method", "value", "steps", "final"]
    rows = []
    for (task, opt), g in cc.groupby(["task", "optimizer"], sort=True):
        if g["method"].nunique() < 2:
            continue
        mx = g["mode"].iloc[0] == "max"
        finals = g.groupby("method")["valid"].agg("max" if mx else "min")
        value = float(finals.min() if mx else finals.max())
        for method, m in g.groupby("method"):
            hit = m[m["valid"] >= value] if mx else m[m["valid"] <= value]
            rows.append({"task": task, "optimizer": opt, "method": method, "value": value,
                         "steps": float(hit["steps"].min()), "final": float(finals[method])})
    out = pd.DataFrame(rows, columns=cols)
    return out.sort_values(["task", "optimizer", "steps"], kind="stable", ignore_index=True)


def _path(g: pd.DataFrame, mine: pd.DataFrame, steps: pd.Series, task: str, opt: str, method: str,
          metric: str, mode: str) -> pd.DataFrame:
    """An adaptive search's own curve: trials by end time, steps added up, the best configuration
    value after each configuration whose seeds have all ended."""
    order = g.sort_values(["end_time", "trial_id"], kind="stable")
    value = dict(zip(mine["config_id"], mine["valid"], strict=True))
    left = order.groupby("config_id")["trial_id"].count().to_dict()
    spent, best, rows = 0.0, np.nan, []
    for r in order.itertuples():
        spent += float(steps.get(r.trial_id, 0.0))
        left[r.config_id] -= 1
        if left[r.config_id] == 0:
            v = value.get(r.config_id, np.nan)
            if np.isfinite(v) and (not np.isfinite(best) or (v > best if mode == "max" else v < best)):
                best = v
        if np.isfinite(best):
            rows.append({"task": task, "optimizer": opt, "method": method, "kind": "path",
                         "steps": spent, "valid": best, "metric": metric, "mode": mode})
    return pd.DataFrame(rows, columns=COLUMNS)


def reach_words(frame: pd.DataFrame) -> str:
    """A caption sentence from :func:`steps_to_reach`: per optimizer tuned by several methods, the
    value all of them reached and each method's steps to it (``""`` when none is). Reads the
    ``search`` column first, so a sweep of one method per optimizer computes no curves for it."""
    s = summaries(frame)
    if s.empty or "search" not in s or \
            (s.assign(m=s["search"].fillna("grid")).groupby(["task", "optimizer"])["m"].nunique() < 2).all():
        return ""
    t = steps_to_reach(compute_curves(frame))
    parts = []
    for (task, opt), g in t.groupby(["task", "optimizer"], sort=False):
        steps = ", ".join(f"{r.method} {r.steps:,.0f}" for r in g.itertuples())
        where = f", {task}" if t["task"].nunique() > 1 else ""
        parts.append(f"{opt} ({g['value'].iloc[0]:.4g}{where}): {steps}")
    return (" Training steps each method spent until it first reached the best value that every method "
            "of the optimizer reached: " + "; ".join(parts) + ".")

