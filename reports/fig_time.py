"""Time figures: seconds to the validation target of each optimizer's best configuration, and
its tuned time-to-result (the fastest of its configurations), one row per optimizer and task panel.

A "not reached" is a hollow ▷ at the budget (the seconds the training ran), never a bar whose
length would read as a time."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from harness.core.names import (
    M_COST_SECONDS_TO_TARGET,
    M_MODELED_STEP_MS,
    M_SECONDS_TO_TARGET,
    M_STEP_MS,
    M_STEPS_TO_TARGET,
    M_WALL_S,
)
from reports import protocol
from reports.frame import curves, summaries
from reports.layout import grid_shape, hide_unused, new_figure, task_labels
from reports.objectives import METRIC_LABELS, objective, objectives_differ, target_words
from reports.report_clock import clock_of
from reports.selection import best_configs
from reports.style import markers, palette

#: A time axis turns logarithmic when its plotted values span more than this factor (a decade).
LOG_SPAN = 10.0


def time_axis(ax, values, xlabel: str) -> str:
    """Set the x axis of a time-per-optimizer panel from the values it plots (``values``: every
    marker and whisker end, a not-reached marker's budget included; never a reached optimizer's
    budget, which would stretch the axis to the slowest training): logarithmic when they span
    more than :data:`LOG_SPAN` (and are all positive), else linear from 0; the label says which.
    Returns ``"log"`` or ``"linear"``."""
    v = np.asarray([x for x in values if math.isfinite(x)], float)
    lo, hi = (float(v.min()), float(v.max())) if v.size else (0.0, 1.0)
    if lo > 0 and hi / lo > LOG_SPAN:
        ax.set_xscale("log")
        ax.set_xlim(lo / 1.6, hi * 1.6)
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # 0.2, 0.5, 1, 2, 5, ...
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"{xlabel}, log scale")
        return "log"
    ax.set_xlim(0, hi * 1.08 if hi > 0 else 1.0)
    ax.xaxis.set_major_locator(MaxNLocator(5))
    ax.set_xlabel(xlabel)
    return "linear"


def row_words(ax, i: int, words: str, x_at: float) -> None:
    """Write ``words`` above row ``i`` of a time-per-optimizer panel, at the side away from the
    marker at ``x_at`` (data coordinates; the axis must be set, :func:`time_axis`), in axes
    coordinates: the words cannot spill past the axes, and they take no part in layout."""
    frac = (ax.transScale + ax.transLimits).transform((x_at, 0.0))[0] if math.isfinite(x_at) else 1.0
    side = 0.02 if frac > 0.5 else 0.98
    txt = ax.text(side, i - 0.2, words, transform=ax.get_yaxis_transform(), va="bottom",
                  ha="left" if side < 0.5 else "right", fontsize=8, color="0.15")
    txt.set_in_layout(False)


def time_rows_axes(ax, opts: list, values, title: str, xlabel: str) -> str:
    """One row per optimizer, seconds on x chosen from ``values`` (:func:`time_axis`): the axes of
    both time figures. Returns the x scale."""
    ax.set_yticks(range(len(opts)), opts)
    ax.set_ylim(len(opts) - 0.4, -0.75)
    ax.set_title(title)
    return time_axis(ax, values, xlabel)


def budget_seconds(g: pd.DataFrame, ends: pd.Series, clock: str) -> pd.Series:
    """The seconds each trial of ``g`` (summary rows) trained, on ``clock`` (the clock its task's
    time to target is on, :func:`reports.report_clock.clock_of`): ``measured``, its last logged
    ``time/wall_s`` (``ends``, by trial id); ``modeled``, its steps trained × its program's
    ``perf/modeled_step_ms`` (``perf/step_time_ms`` for runs from before it); ``cost``, its steps
    trained × FLOPs per step ÷ peak; so that a not-reached marker and the axis are on the clock of the
    times beside them."""
    steps = pd.to_numeric(g["train_steps"], errors="coerce")
    if clock == "modeled":
        ms = pd.to_numeric(g[M_MODELED_STEP_MS], errors="coerce") if M_MODELED_STEP_MS in g else None
        wall = pd.to_numeric(g[M_STEP_MS], errors="coerce")
        return steps * (wall if ms is None else ms.fillna(wall)) / 1e3
    if clock == "cost" and M_COST_SECONDS_TO_TARGET in g:  # the same cost per step for every trial
        per_step = (pd.to_numeric(g[M_COST_SECONDS_TO_TARGET], errors="coerce")
                    / pd.to_numeric(g[M_STEPS_TO_TARGET], errors="coerce").where(lambda x: x > 0))
        return steps * per_step.median()
    return g["trial_id"].map(ends)


def time_to_target(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (task, optimizer), for its best configuration: seeds, seeds that reached the target,
    the median / 25th / 75th percentile of seconds and steps to target over those that did, and the
    budget (``budget_steps``; ``budget_seconds``: median over seeds of the seconds trained on the
    task's clock, :func:`budget_seconds`). Empty when the sweep has no target."""
    obj = objective(frame)
    if obj.target_metric is None:
        return pd.DataFrame()
    s = summaries(frame).merge(
        best_configs(frame)[["task", "optimizer", "config_id"]], on=["task", "optimizer", "config_id"]
    )
    c = curves(frame)
    ends = c.groupby("trial_id")[M_WALL_S].max() if len(c) else pd.Series(dtype=float)
    rows = []
    for (task, opt), g in s.groupby(["task", "optimizer"], sort=True):
        budget_s = budget_seconds(g, ends, clock_of(frame, task)).dropna()
        secs = g.loc[g["status"] == "finished", M_SECONDS_TO_TARGET].dropna()
        steps = g.loc[g["status"] == "finished", M_STEPS_TO_TARGET].dropna()
        rows.append(
            {
                "task": task,
                "optimizer": opt,
                "config": g["config"].iloc[0],
                "n_seeds": len(g),
                "n_reached": int(max(len(secs), len(steps))),
                "seconds_median": secs.median() if len(secs) else math.nan,
                "seconds_q25": secs.quantile(0.25) if len(secs) else math.nan,
                "seconds_q75": secs.quantile(0.75) if len(secs) else math.nan,
                "steps_median": steps.median() if len(steps) else math.nan,
                "budget_seconds": float(budget_s.median()) if len(budget_s) else math.nan,
                "budget_steps": g["train_steps"].dropna().max() if g["train_steps"].notna().any() else pd.NA,
            }
        )
    return pd.DataFrame(rows)


def time_to_target_figure(frame: pd.DataFrame) -> Figure | None:
    """Median seconds to target across seeds (dot; whiskers: interquartile range) of each
    optimizer's best configuration, one panel per task. An optimizer none of whose seeds reached
    the target gets a hollow marker at its budget (the seconds its training ran) with the words
    "not reached" — never a bar, whose length would read as a time."""
    t = time_to_target(frame)
    if t.empty:
        return None
    obj, pal, marks, labels = objective(frame), palette(frame), markers(frame), task_labels(frame)
    mixed = objectives_differ(frame)
    tasks = sorted(t["task"].unique())
    opts = sorted(t["optimizer"].unique())
    nrows, ncols = grid_shape(len(tasks), max_columns=3)
    fig, axes = new_figure(nrows, ncols, nrows * (0.42 * len(opts) + 1.3) + 0.5)
    for k, task in enumerate(tasks):
        ax = axes.ravel()[k]
        d = t[t["task"] == task].set_index("optimizer")
        reached = (d["n_reached"] > 0) & d["seconds_median"].notna()
        budget = d["budget_seconds"].where(~reached)
        values = [*d.loc[reached, ["seconds_q25", "seconds_median", "seconds_q75"]].to_numpy(float).ravel(),
                  *budget.dropna().to_numpy(float)]
        title = labels.get(task, task)
        if mixed:  # each panel names its own target
            title += f"\n{target_words(objective(frame, task))}"
        time_rows_axes(ax, opts, values, title, f"seconds to target ({clock_of(frame, task)})")
        xmax = ax.get_xlim()[1]
        for i, opt in enumerate(opts):
            if opt not in d.index:
                continue
            row = d.loc[opt]
            if reached[opt]:
                med = row["seconds_median"]
                err = [[med - row["seconds_q25"]], [row["seconds_q75"] - med]]
                ax.errorbar(med, i, xerr=err, fmt=marks[opt], color=pal[opt], ms=7, capsize=3, lw=1.5)
                steps = f" · {row['steps_median']:.0f} steps" if math.isfinite(row["steps_median"]) else ""
                words = f"{med:.3g} s{steps} ({row['n_reached']}/{row['n_seeds']} seeds)"
                x_at = row["seconds_q75"]
            else:
                at = row["budget_seconds"] if math.isfinite(row["budget_seconds"]) else xmax / 1.08
                ax.plot(at, i, marker=">", ms=8, mfc="white", mec=pal[opt], mew=1.6, ls="")
                steps = f" in {int(row['budget_steps'])} steps" if pd.notna(row["budget_steps"]) else ""
                words = f"not reached{steps} (0/{row['n_seeds']} seeds)"
                x_at = at
            row_words(ax, i, words, x_at)
    hide_unused(axes, len(tasks))
    goal = "each task's validation target" if mixed else (
        f"{METRIC_LABELS.get(obj.target_metric, obj.target_metric)} "
        f"{'≥' if obj.mode == 'max' else '≤'} {obj.target_value:g}")
    fig.suptitle(f"Time to reach {goal}  (▷ at the budget: not reached)", fontsize=11)
    return fig


def tuned_time_figure(frame: pd.DataFrame) -> Figure | None:
    """Per task, each optimizer's tuned time-to-result (the fastest of its N configurations to the
    validation target; :func:`reports.protocol.tuned_time_to_result`) as a dot; where none of its
    configurations reached the target, a hollow ▷ at the seconds its best configuration trained
    (the budget) with the words "not reached" — never a bar."""
    obj = objective(frame)
    if obj.target_metric is None:
        return None
    t = protocol.tuned_time_to_result(frame)
    if t.empty:
        return None
    pal, marks, labels = palette(frame), markers(frame), task_labels(frame)
    tasks = sorted(t["task"].unique())
    opts = sorted(t["optimizer"].unique())
    tt = time_to_target(frame)
    budget = tt.set_index(["task", "optimizer"])["budget_seconds"] if len(tt) else pd.Series(dtype=float)
    nrows, ncols = grid_shape(len(tasks), max_columns=3)
    fig, axes = new_figure(nrows, ncols, nrows * (0.42 * len(opts) + 1.3) + 0.3)
    for k, task in enumerate(tasks):
        ax = axes.ravel()[k]
        d = t[t["task"] == task].set_index("optimizer")
        secs = pd.to_numeric(d["seconds"], errors="coerce")
        at_budget = {o: float(budget.get((task, o), math.nan)) for o in d.index if not math.isfinite(secs[o])}
        time_rows_axes(ax, opts, [*secs.dropna(), *at_budget.values()], labels.get(task, task),
                       f"tuned seconds to target ({clock_of(frame, task)})")
        xmax = ax.get_xlim()[1]
        for i, opt in enumerate(opts):
            if opt not in d.index:
                continue
            row = d.loc[opt]
            if math.isfinite(secs[opt]):
                at = float(secs[opt])
                ax.plot(at, i, marks[opt], color=pal[opt], ms=7)
                words = f"{at:.3g} s (best of {row['n_configs']})"
            else:
                at = at_budget[opt] if math.isfinite(at_budget[opt]) else xmax / 1.08
                ax.plot(at, i, marker=">", ms=8, mfc="white", mec=pal[opt], mew=1.6, ls="")
                words = f"not reached (0 of {row['n_configs']} configurations)"
            row_words(ax, i, words, at)
    hide_unused(axes, len(tasks))
    return fig
