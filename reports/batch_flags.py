"""Configurations whose outcome depends on how they were trained: vmapped in a batch or alone.

One configuration and seed trained vmapped beside others and trained alone compute in different
float32 rounding (docs/decisions.md gives the measured rate), and near a divergence edge the two
can part: one diverges, the other finishes. :func:`batching_flags` finds, among the store's trials
of one configuration and seed trained to the same steps (none stopped early), those trained in
different batches (tag ``harness.batch``; alone where absent) whose outcome differs: diverged or
not, reached the target or not. Within one experiment a trial trains once, so the other batching
is found in the store's other experiments (:func:`observed_elsewhere`): a grid that vmapped a
configuration beside a coordinate descent that trained it alone.
"""

from __future__ import annotations

import pandas as pd

from harness.core.filters import tag_is
from harness.core.names import KIND_TRIAL, M_STEPS_TO_TARGET, TAG_KIND
from reports.frame import summaries, summary_rows
from reports.runs import search_all_runs

__all__ = ["batching_flags", "observed_elsewhere"]

#: The columns that make two trials one configuration and seed trained to the same steps, where the
#: rows carry no ``params.*`` columns (the run's MLflow params: its whole trial but the sweep's name).
KEYS = ("task", "optimizer", "config_id", "seed", "train_steps")


def _identity(s: pd.DataFrame) -> pd.Series:
    """Each row's configuration, seed and steps as one hashable key: its ``params.*`` values (the
    same across sweeps and experiments, unlike the report's labels), else :data:`KEYS`."""
    cols = sorted(c for c in s if str(c).startswith("params."))
    if not cols:
        keys = [k for k in KEYS if k in s]
        return s[keys].astype(str).apply(tuple, axis=1) if keys else pd.Series([()] * len(s), index=s.index)
    return s[cols].apply(lambda r: tuple((c, str(v)) for c, v in r.items() if pd.notna(v)), axis=1)


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


def observed_elsewhere(client, frame: pd.DataFrame) -> pd.DataFrame:
    """Summary rows of the trial runs in the store's other experiments (``client`` an MLflow client)
    of the frame's configurations, seeds and steps (:func:`_identity`), finished or diverged."""
    s = summaries(frame)
    if s.empty or "run_id" not in s:
        return pd.DataFrame()
    mine, wanted = set(s["run_id"]), set(_identity(s))
    found = []
    for exp in client.search_experiments():
        if exp.name == frame.attrs.get("experiment"):
            continue  # one experiment trains a trial (its params and the sweep's name) once
        runs = [r for r in search_all_runs(client, [exp.experiment_id], tag_is(TAG_KIND, KIND_TRIAL))
                if r.info.run_id not in mine]
        rows = summary_rows(runs, exp.name) if runs else pd.DataFrame()
        if not rows.empty:
            found.append(rows[_identity(rows).isin(wanted) & rows["status"].isin(["finished", "diverged"])])
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame()


def batching_flags(frame: pd.DataFrame, labels: dict[str, str] | None = None,
                   elsewhere: pd.DataFrame | None = None) -> list[str]:
    """One line per configuration and seed of ``frame`` whose outcome differs between the batches
    it was trained in (module docstring), e.g. ``"nesterov mass=0.95 lr=0.316, seed 0 (mlp ·
    mnist1d): diverged alone; reached the target vmapped in a batch of 14"`` (the task by its label
    in ``labels``), counting the store's other runs of them in ``elsewhere``
    (:func:`observed_elsewhere`); ``[]`` when there is none."""
    s = summaries(frame).assign(_here=True)
    if elsewhere is not None and not elsewhere.empty:
        s = pd.concat([s, elsewhere.assign(_here=False)], ignore_index=True)
    if s.empty or "batch" not in s:
        return []
    s = s[s["status"].isin(["finished", "diverged"])]
    out = []
    for _, g in s.groupby(_identity(s), sort=False):
        if not g["_here"].astype(bool).any():
            continue
        seen: dict[str, str] = {}
        for _, r in g.iterrows():
            seen.setdefault(_outcome(r), _how(r["batch"]))
        if len(seen) > 1 and len(set(seen.values())) > 1:
            r = g[g["_here"].astype(bool)].iloc[0]
            where = (labels or {}).get(r["task"], r["task"])
            said = "; ".join(f"{o} {h}" for o, h in seen.items())
            config = str(r["config"])
            config = config if config.startswith(str(r["optimizer"])) else f"{r['optimizer']} {config}"
            out.append(f"{config}, seed {r['seed']} ({where}): {said}")
    return out
