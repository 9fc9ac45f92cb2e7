"""Configurations whose outcome depends on how they were trained: vmapped in a batch or alone.

One configuration and seed trained vmapped beside others and trained alone compute in different
float32 rounding (docs/decisions.md gives the measured rate), and near a divergence edge the two
can part: one diverges, the other finishes. :func:`batching_flags` finds, among the store's trials
of one configuration and seed trained to the same steps (none stopped early), those trained in
different batches (tag ``harness.batch``; alone where absent) whose outcome differs: diverged or
not, reached the target or not.
"""

from __future__ import annotations

import pandas as pd

from harness.core.names import M_STEPS_TO_TARGET
from reports.frame import summaries

__all__ = ["batching_flags"]


def _how(batch) -> str:
    if batch is None or pd.isna(batch) or not str(batch):
        return "alone"
    ids = str(batch).split(",")
    return f"vmapped in a batch of {len(ids)}" if len(ids) > 1 else f"vmapped ({batch})"


def _outcome(row) -> str:
    if row["status"] == "diverged":
        return "diverged"
    reached = M_STEPS_TO_TARGET in row and not pd.isna(row[M_STEPS_TO_TARGET])
    return "reached the target" if reached else "finished, target not reached"


def batching_flags(frame: pd.DataFrame, labels: dict[str, str] | None = None) -> list[str]:
    """One line per configuration and seed whose outcome differs between the batches it was
    trained in (module docstring), e.g. ``"nesterov mass=0.95 lr=0.316, seed 0 (mlp · mnist1d):
    diverged alone; reached the target vmapped in a batch of 14"`` (the task by its label in
    ``labels``); ``[]`` when there is none or the frame has no ``batch`` column."""
    s = summaries(frame)
    if s.empty or "batch" not in s:
        return []
    s = s[s["status"].isin(["finished", "diverged"])]
    keys = [k for k in ("task", "optimizer", "config_id", "seed", "train_steps") if k in s]
    out = []
    for _, g in s.groupby(keys, sort=True, dropna=False):
        seen: dict[str, str] = {}
        for _, r in g.iterrows():
            seen.setdefault(_outcome(r), _how(r["batch"]))
        if len(seen) > 1 and len(set(seen.values())) > 1:
            r = g.iloc[0]
            where = (labels or {}).get(r["task"], r["task"])
            said = "; ".join(f"{o} {h}" for o, h in seen.items())
            out.append(f"{r['optimizer']} {r['config']}, seed {r['seed']} ({where}): {said}")
    return out
