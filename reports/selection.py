"""Selection on validation: the best configuration of each optimizer on each task, and its rank.

The selection rule itself is :func:`harness.core.selection.selection_key`, the one rule this
module and the sweep's end-of-run table (:mod:`harness.sweep.summary`) both apply, so that both
always select the same configuration.
"""

from __future__ import annotations

import math

import pandas as pd

from harness.core.boundary import edge, edge_warning, parse_space
from harness.core.names import M_SECONDS_TO_TARGET, M_STEPS_TO_TARGET
from harness.core.selection import selection_key
from reports.frame import per_frame, summaries
from reports.objectives import objective

#: Columns of :func:`best_configs`.
BEST_COLUMNS = ["task", "optimizer", "config_id", "config", "n_seeds", "n_finished", "n_reached", "rank"]


@per_frame
def best_configs(frame: pd.DataFrame) -> pd.DataFrame:
    """The best configuration of each optimizer on each task, one row per (task, optimizer).

    Selection among one optimizer's configurations (first difference decides,
    :func:`harness.core.selection.selection_key`): more seeds that
    reached the target; lower median ``convergence/steps_to_target`` over the seeds that reached
    it (one optimizer's steps all cost the same, so steps measure its speed without the
    wall-clock's noise); more seeds that finished (not diverged/failed); better mean of the
    objective's final metric over finished seeds; then lower median seconds to target, then
    ``config_id``. Identical per-trial results therefore always select the same configuration.
    Columns: ``task, optimizer, config_id, config, n_seeds, n_finished, n_reached, rank``
    (``rank`` 1 = best optimizer on the task: more seeds reaching the target, then lower median
    **seconds** to target (on the report's clock, :mod:`reports.clock`), since optimizers' steps
    cost different times, then more finished, then the final metric; optimizers that reached the
    target in the same median number of steps are tied on time and ordered by seeds finished, then
    the final validation metric, never by seconds).
    """
    s = summaries(frame)
    if s.empty:
        return pd.DataFrame(columns=BEST_COLUMNS)
    objs = {t: objective(frame, t) for t in s["task"].unique()}  # each task selects on its own metric
    rows = []
    for (task, opt, cid), g in s.groupby(["task", "optimizer", "config_id"], sort=True):
        obj = objs[task]
        sign = -1.0 if obj.mode == "max" else 1.0
        fin = g[g["status"] == "finished"]
        reached = fin[M_SECONDS_TO_TARGET].notna() | fin[M_STEPS_TO_TARGET].notna()
        ttt = fin.loc[fin[M_SECONDS_TO_TARGET].notna(), M_SECONDS_TO_TARGET]
        steps = fin.loc[fin[M_STEPS_TO_TARGET].notna(), M_STEPS_TO_TARGET]
        final = fin[obj.final].dropna()
        secs = float(ttt.median()) if len(ttt) else math.inf
        metric = sign * float(final.mean()) if len(final) else math.inf
        rows.append(
            {
                "task": task,
                "optimizer": opt,
                "config_id": cid,
                "config": g["config"].iloc[0],
                "n_seeds": len(g),
                "n_finished": len(fin),
                "n_reached": int(reached.sum()),
                "_key": selection_key(int(reached.sum()), float(steps.median()) if len(steps) else None,
                                      len(fin), float(final.mean()) if len(final) else None,
                                      obj.mode == "max", float(ttt.median()) if len(ttt) else None, str(cid)),
                "_rank_key": (-int(reached.sum()), secs, -len(fin), metric, str(opt)),
                "_tie_key": (-int(reached.sum()), float(steps.median()) if len(steps) else math.inf),
                "_metric_key": (-len(fin), metric, str(opt)),
            }
        )
    allc = pd.DataFrame(rows).sort_values("_key", kind="stable")
    best = allc.groupby(["task", "optimizer"], sort=False).head(1).copy()
    best = pd.concat([_ranked(g) for _, g in best.groupby("task", sort=False)])
    return best.drop(columns=["_key", "_rank_key", "_tie_key", "_metric_key"]).sort_values(
        ["task", "rank"]).reset_index(drop=True)


def _ranked(g: pd.DataFrame) -> pd.DataFrame:
    """One task's best configurations with ``rank``: ordered by ``_rank_key`` (seeds reaching the
    target, seconds to it, ...), then each run of neighbours that reached the target in the same
    median number of steps (the same evaluation: a tie, whatever the clock says) reordered by
    ``_metric_key`` (seeds finished, then the final validation metric)."""
    g = g.sort_values("_rank_key", kind="stable")
    ties = g["_tie_key"].ne(g["_tie_key"].shift()).cumsum()
    g = pd.concat([run.sort_values("_metric_key", kind="stable") for _, run in g.groupby(ties, sort=True)])
    return g.assign(rank=range(1, len(g) + 1))


def boundary_warnings(frame: pd.DataFrame, labels: dict[str, str] | None = None) -> list[str]:
    """One line per sampled hyperparameter of a selected configuration (:func:`best_configs`) that
    lies in the outer 10% of the search range its trials record (tag ``harness.search_space``; log
    scale for ``log_uniform``, :func:`harness.core.boundary.edge`), as the sweep's summary says it:
    ``"sgd: best step_size 0.0977 is at the top of [0.0001, 0.1] (mlp · digits): widen the range"``
    (the task by its label in ``labels``). Runs without the tag (grid trials, older runs) add none."""
    best = best_configs(frame)
    s = summaries(frame)
    if best.empty or "search_space" not in s:
        return []
    out = []
    for _, b in best.iterrows():
        g = s[(s["task"] == b["task"]) & (s["optimizer"] == b["optimizer"])
              & (s["config_id"] == b["config_id"])]
        spaces = g["search_space"].dropna()
        if spaces.empty:
            continue
        trial = g.loc[spaces.index[0]]
        for rng in parse_space(spaces.iloc[0]):
            value = trial.get(f"params.{rng.key}")
            side = edge(value, rng)
            if side:
                task = (labels or {}).get(b["task"], b["task"])
                out.append(edge_warning(b["optimizer"], rng, value, side, task))
    return out
