"""Selection on validation: the best configuration of each optimizer on each task, and its rank.

The selection rule itself is :func:`harness.core.selection_rule.selection_key`, the one rule this
module and the sweep's end-of-run table (:mod:`harness.orchestrate.summary`) both apply, so that both
always select the same configuration.
"""

from __future__ import annotations

import math
import typing

import numpy as np
import pandas as pd

from harness.core.boundary import edge, edge_warning, grid_edge, grid_warning, parse_space
from harness.core.names import M_SECONDS_TO_TARGET, M_STEPS_TO_TARGET
from harness.core.selection_rule import check_select_by, selection_key, selection_order, selection_words
from reports.frame import SELECT_BY_ATTR, per_frame, summaries, tuning_rows
from reports.objectives import METRIC_LABELS, objective, objectives_differ, target_words
from reports.report_clock import COST_CLASS, COST_HI, COST_LO


def select_by(frame: pd.DataFrame) -> str:
    """The frame's selection objective (``frame.attrs[SELECT_BY_ATTR]``: the sweep's recorded one,
    or ``report --select-by``), one of :data:`harness.core.selection_rule.SELECT_BY`; default
    ``time_to_target``.

    Raises:
      ValueError: the frame names another objective.
    """
    return check_select_by(frame.attrs.get(SELECT_BY_ATTR))


def selection_caption(frame: pd.DataFrame) -> str:
    """``"selected on validation by final accuracy"`` for the frame's objective and metric (each
    task's metric, said as "metric", when the tasks' objectives differ)."""
    metric = "valid/metric" if objectives_differ(frame) else \
        objective(frame).final.replace("final/valid_", "valid/")
    return selection_words(select_by(frame), metric)


def objective_words(frame: pd.DataFrame, task: str | None = None) -> str:
    """The objective a configuration is selected on, as the report's header names it, for the
    frame's objective (:func:`select_by`) and ``task``'s metric (default the sweep's):
    ``"time to valid/accuracy ≥ 0.9 (ties: final validation accuracy)"`` (``time_to_target``),
    ``"final validation accuracy (target valid/accuracy ≥ 0.9)"`` (``final``), ``"best validation
    accuracy during training (target ...)"`` (``best``). A task without a target selected by time
    to target says what decides instead: its final value."""
    obj, by = objective(frame, task), select_by(frame)
    target = target_words(obj)
    if by == "time_to_target":
        if target:
            return f"time to {target} (ties: {obj.label})"
        return f"{obj.label} (no target: time to target cannot decide)"
    label = f"{METRIC_LABELS.get(obj.best, obj.best)} during training" if by == "best" else obj.label
    return label + (f" (target {target})" if target else "")


def selection_sentence(frame: pd.DataFrame, objective_words: str) -> str:
    """The leaderboard's account of its selection (the report's text under "Leaderboard"):
    :func:`selection_caption` and the order :func:`best_configs` applies; ``objective_words`` names
    the validation metric (``final validation accuracy (target valid/accuracy ≥ 0.9)``) in the
    ``time_to_target`` order, where the final value breaks ties."""
    by = select_by(frame)
    if by == "time_to_target":
        ranked = ("optimizers are ranked by seeds reaching the target, then median seconds to it, "
                  "except that those reaching it at the same median steps (the same evaluation) and the same "
                  "per-step cost are a "
                  "tie on time, ordered by seeds finished, then the validation metric")
    else:
        ranked = "optimizers are ranked the same way, with median seconds to target before the name"
    return (f"{selection_caption(frame)} ({selection_order(by, objective_words)}; {ranked}; "
            f"report --select-by changes it)")


def tuning_value_words(frame: pd.DataFrame) -> str:
    """What a configuration's validation value is in the tuning curves, for their caption: it
    follows the frame's objective (:func:`select_by`), except ``time_to_target``, which gives a
    configuration no validation value: those curves use the final one, and say so."""
    by = select_by(frame)
    if by == "best":
        return ("Its validation value is its best evaluation during training, as the leaderboard "
                "selects (selection by best).")
    if by == "final":
        return "Its validation value is its final one, as the leaderboard selects (selection by final)."
    return ("The leaderboard selects by time to target, which gives no validation value to draw: "
            "these curves use each configuration's final validation value "
            "(report --select-by final|best selects on it).")


#: Columns of :func:`best_configs`.
BEST_COLUMNS = ["task", "optimizer", "config_id", "config", "n_seeds", "n_finished", "n_reached", "rank",
                "has_results"]


@per_frame
def best_configs(frame: pd.DataFrame) -> pd.DataFrame:
    """The best configuration of each optimizer on each task, one row per (task, optimizer):
    :func:`select_best` with the audit trials, memoised per frame."""
    return select_best(frame)


def select_best(frame: pd.DataFrame, audits: bool = True) -> pd.DataFrame:
    """The best configuration of each optimizer on each task, one row per (task, optimizer);
    ``audits=False``: without an early-stopping search's audit trials.

    Selection among one optimizer's configurations by the frame's objective (:func:`select_by`;
    :func:`harness.core.selection_rule.selection_key`). ``final``/``best``: more seeds finished, then
    the better mean final / best-during-training validation value of the task's objective
    (``final/valid_*`` / ``best/valid_*``), then the time-to-target order below; optimizers are
    ranked the same way (finished, value, reached, median seconds, name). ``time_to_target`` (the
    default), first difference decides: more seeds that
    reached the target; lower median ``convergence/steps_to_target`` over the seeds that reached
    it (one optimizer's steps all cost the same, so steps measure its speed without the
    wall-clock's noise); more seeds that finished (not diverged/failed); better mean of the
    objective's final metric over finished seeds; then lower median seconds to target, then the
    configuration's smallest ``trial_id`` (as the sweep's summary: the ``config_id`` hash here and
    the name there once picked different configurations among exact ties).
    Identical per-trial results therefore always select the same configuration.
    An optimizer every trial of which failed on a task ranks last (``has_results`` false; the
    leaderboard shows it unranked, :data:`harness.core.ties.UNRANKED`); of successive halving's
    rounds only each seed's last counts (the rows selection reads), as in the sweep's summary.
    Columns: ``task, optimizer, config_id, config, n_seeds, n_finished, n_reached, rank, has_results``
    (``rank`` 1 = best optimizer on the task: more seeds reaching the target, then lower median
    **seconds** to target (on the report's clock, :mod:`reports.report_clock`), since optimizers' steps
    cost different times, then more finished, then the final metric; optimizers that reached the
    target in the same median number of steps and the same cost class (:func:`cost_class`) are tied
    on time and ordered by seeds finished, then the final validation metric, never by seconds).
    """
    allc = _configs_in_order(frame, audits)
    if allc is None:
        return pd.DataFrame(columns=BEST_COLUMNS)
    best = allc.groupby(["task", "optimizer"], sort=False).head(1).copy()
    best = pd.concat([_ranked(g) for _, g in best.groupby("task", sort=False)])
    return best.drop(columns=["_key", "_rank_key", "_tie_key", "_metric_key"]).sort_values(
        ["task", "rank"]).reset_index(drop=True)


def _configs_in_order(frame: pd.DataFrame, audits: bool = True) -> pd.DataFrame | None:
    """Every configuration's row (:func:`_config_row`), in the selection rule's order (``None``:
    no trial)."""
    s = tuning_rows(summaries(frame), audits)  # an audit trial stands for its stopped twin
    if s.empty:
        return None
    by = select_by(frame)
    arrays = _trial_arrays(frame, s, by)
    groups = s.groupby(["task", "optimizer", "config_id"], sort=True).indices
    rows = [_config_row(arrays, key, idx, by) for key, idx in sorted(groups.items())]
    return pd.DataFrame(rows).sort_values("_key", kind="stable")


@per_frame
def selection_positions(frame: pd.DataFrame) -> pd.DataFrame:
    """The one tie-break of every table that picks a configuration: each configuration's position in
    the selection rule's order among its optimizer's on its task (0 = the one the leaderboard
    selects; :func:`harness.core.selection_rule.selection_key`, whose last resort is the
    configuration's smallest trial id). ``res.tuned_times`` breaks a tie in tuned time by it, so an
    exact tie picks the leaderboard's configuration.

    Args:
      frame: a sweep's tidy frame.
    Returns:
      a DataFrame with columns ``task, optimizer, config_id, position`` (``int64``).
    """
    allc = _configs_in_order(frame)
    cols = ["task", "optimizer", "config_id", "position"]
    if allc is None:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c == "position" else object) for c in cols})
    out = allc[cols[:3]].copy()
    out["position"] = out.groupby(["task", "optimizer"], sort=False).cumcount().astype("int64")
    return out.reset_index(drop=True)


class _Trials(typing.NamedTuple):
    """:func:`select_best`'s inputs per summary row, as numpy arrays: each configuration reads its
    rows' positions (a pandas slice per configuration is slow at thousands of configurations);
    medians and means are numpy's over the same values in the same order, equal to
    Series.median/mean's."""

    objs: dict  # task -> its objective (each task selects on its own metric)
    fin: np.ndarray  # finished
    secs: np.ndarray  # seconds to target
    steps: np.ndarray  # steps to target
    value_of: dict  # task -> the value that selects (final or best during training)
    classes: np.ndarray | None  # cost classes
    configs: np.ndarray
    trial_ids: np.ndarray  # an exact tie: the smallest (a frame without trial ids: config_id)
    with_results: set  # (task, optimizer) with a trial that did not fail


def _trial_arrays(frame: pd.DataFrame, s: pd.DataFrame, by: str) -> _Trials:
    objs = {t: objective(frame, t) for t in s["task"].unique()}
    # an optimizer every trial of which failed on a task has no result: unranked, last (ties.UNRANKED)
    ran = s[s["status"] != "failed"]
    return _Trials(
        objs=objs,
        fin=(s["status"] == "finished").to_numpy(),
        secs=s[M_SECONDS_TO_TARGET].to_numpy(float),
        steps=s[M_STEPS_TO_TARGET].to_numpy(float),
        value_of={t: s[o.selected(by)].to_numpy(float) for t, o in objs.items()},
        classes=s[COST_CLASS].to_numpy(object) if COST_CLASS in s else None,
        configs=s["config"].to_numpy(),
        trial_ids=s["trial_id" if "trial_id" in s else "config_id"].astype(str).to_numpy(),
        with_results=set(zip(ran["task"], ran["optimizer"], strict=True)),
    )


def _config_row(a: _Trials, key: tuple, idx: np.ndarray, by: str) -> dict:
    """One configuration's row of :func:`select_best` (``key = (task, optimizer, config_id)``,
    ``idx`` its rows' positions), with the sort keys ``_key``, ``_rank_key``, ``_tie_key`` and
    ``_metric_key``."""
    task, opt, cid = key
    obj = a.objs[task]
    sign = -1.0 if obj.mode == "max" else 1.0
    fin = idx[a.fin[idx]]
    n_fin = len(fin)
    ttt = a.secs[fin][~np.isnan(a.secs[fin])]
    steps = a.steps[fin][~np.isnan(a.steps[fin])]
    n_reached = int((~np.isnan(a.secs[fin]) | ~np.isnan(a.steps[fin])).sum())
    final = a.value_of[task][fin]
    final = final[~np.isnan(final)]  # the final or the best-during-training value
    mean = float(final.sum() / len(final)) if len(final) else None
    secs = float(np.median(ttt)) if len(ttt) else math.inf
    med_steps = float(np.median(steps)) if len(steps) else None
    metric = sign * mean if mean is not None else math.inf
    last = (task, opt) not in a.with_results
    return {
        "task": task,
        "optimizer": opt,
        "config_id": cid,
        "config": a.configs[idx[0]],
        "n_seeds": len(idx),
        "n_finished": n_fin,
        "n_reached": n_reached,
        "_key": selection_key(n_reached, med_steps, n_fin, mean, obj.mode == "max",
                              secs if len(ttt) else None, min(a.trial_ids[idx]), by),
        "has_results": not last,
        "_rank_key": (last, -n_reached, secs, -n_fin, metric, str(opt))
        if by == "time_to_target" else (last, -n_fin, metric, -n_reached, secs, str(opt)),
        # ranked by time: equal steps to the target (the same evaluation) in one cost class is
        # a tie, ordered by the metric (_ranked); ranked by the metric: no such ties
        "_tie_key": (last, -n_reached, med_steps if med_steps is not None else math.inf,
                     _first_class(a.classes, fin)) if by == "time_to_target" else (str(opt),),
        "_metric_key": (-n_fin, metric, str(opt)),
    }


def _first_class(classes: np.ndarray | None, positions: np.ndarray) -> float | None:
    """:func:`cost_class` of the rows at ``positions`` of the column ``classes`` (``None``: no column)."""
    if classes is None:
        return None
    got = [float(v) for v in classes[positions] if v is not None and not pd.isna(v)]
    return got[0] if got else None


def audit_changes(frame: pd.DataFrame, labels: dict[str, str] | None = None) -> list[str]:
    """One line per (task, optimizer) whose selected configuration an early-stopping search's audit
    changed (:func:`best_configs` with and without the audit trials): ``"sgd (mlp · digits):
    step_size=0.744, trained to the end by an audit, is selected; early stopping alone picked
    step_size=0.389"`` (the task by its label in ``labels``); ``[]`` without audits."""
    s = summaries(frame)
    if "audit_of" not in s or not s["audit_of"].notna().any():
        return []
    with_, without = best_configs(frame), select_best(frame, audits=False)
    before = {(r.task, r.optimizer): r.config for r in without.itertuples()}
    labels = labels or {}
    return [f"{r.optimizer} ({labels.get(r.task, r.task)}): {r.config}, trained to the end by an audit, "
            f"is selected; early stopping alone picked {before[(r.task, r.optimizer)]}"
            for r in with_.itertuples()
            if (r.task, r.optimizer) in before and before[(r.task, r.optimizer)] != r.config]


def cost_range(rows: pd.DataFrame) -> tuple[float, float] | None:
    """The relative interval of a configuration's per-step cost (the columns
    :data:`reports.report_clock.COST_LO` / ``COST_HI``; ``None`` where exact or without them)."""
    if COST_LO not in rows or COST_HI not in rows:
        return None
    got = rows[[COST_LO, COST_HI]].dropna()
    return (float(got.iloc[0, 0]), float(got.iloc[0, 1])) if len(got) else None


def cost_class(rows: pd.DataFrame) -> float | None:
    """The cost class of a configuration's trials on its task's clock (the column
    :data:`reports.report_clock.COST_CLASS` that :func:`reports.report_clock.use_clock` adds; ``None`` on the
    measured clock or without it): their programs' one class."""
    if COST_CLASS not in rows:
        return None
    return _first_class(rows[COST_CLASS].to_numpy(object), np.arange(len(rows)))


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
    (the task by its label in ``labels``); and per grid value (a grid trial's ``optimizer.*`` and
    ``schedule.*`` params) that is the smallest or largest of three or more its optimizer's grid
    trials on the task took (:func:`harness.core.boundary.grid_edge`). Older runs without the
    tags add none."""
    best = best_configs(frame)
    s = summaries(frame)
    if best.empty or "search_space" not in s:
        return []
    out = []
    keys = [c for c in s.columns if c.startswith(("params.optimizer.", "params.schedule."))]
    for _, b in best.iterrows():
        task = (labels or {}).get(b["task"], b["task"])
        mine = s[(s["task"] == b["task"]) & (s["optimizer"] == b["optimizer"])]
        g = mine[mine["config_id"] == b["config_id"]]
        spaces = g["search_space"].dropna()
        if not spaces.empty:
            trial = g.loc[spaces.index[0]]
            for rng in parse_space(spaces.iloc[0]):
                value = trial.get(f"params.{rng.key}")
                side = edge(value, rng)
                if side:
                    out.append(edge_warning(b["optimizer"], rng, value, side, task))
        grid = mine[(mine["search"] == "grid") & mine["tuning"].isna()] if "search" in mine else mine[:0]
        if g.empty or g.index[0] not in grid.index:
            continue
        for key in keys:
            values, value = grid[key].dropna().tolist(), g.iloc[0][key]
            if side := grid_edge(value, values):
                name = key.removeprefix("params.")
                out.append(grid_warning(b["optimizer"], name, value, values, side, task))
    return out
