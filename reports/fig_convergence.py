"""Convergence figures: each optimizer's best configuration's curves, median across seeds with an
interquartile band, against optimizer steps or against seconds since the start of training."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from harness.core.names import M_TRAIN_LOSS, M_VALID_ACC, M_VALID_LOSS, M_WALL_S
from reports.frame import curves, per_frame
from reports.layout import grid_shape, new_figure, task_labels
from reports.objectives import METRIC_LABELS, objective, objectives_differ
from reports.selection import best_configs
from reports.style import NEUTRAL, legend, log_y, markers, palette

#: Points of the common time grid that curves against seconds are interpolated onto.
TIME_GRID_POINTS = 80


@per_frame
def best_curves(frame: pd.DataFrame) -> pd.DataFrame:
    """Curve rows of each (task, optimizer)'s best configuration (see ``best_configs``)."""
    best = best_configs(frame)[["task", "optimizer", "config_id"]]
    return curves(frame).merge(best, on=["task", "optimizer", "config_id"])


def _wall_at_steps(g: pd.DataFrame) -> np.ndarray:
    """Seconds at each row's step, interpolated from the steps where ``time/wall_s`` was logged
    (with 0 s at step 0: wall time counts from the start of training)."""
    known = g[[M_WALL_S]].assign(step=g["step"].astype(float)).dropna()
    xs, ys = known["step"].to_numpy(), known[M_WALL_S].to_numpy()
    if len(xs) == 0:
        return np.full(len(g), np.nan)
    if xs[0] > 0:
        xs, ys = np.r_[0.0, xs], np.r_[0.0, ys]
    return np.interp(g["step"].astype(float).to_numpy(), xs, ys, left=np.nan, right=np.nan)


def curve_bands(frame: pd.DataFrame, metric: str, x: str = "step") -> pd.DataFrame:
    """Median and interquartile range across seeds of ``metric`` for each (task, optimizer).

    ``x="step"`` aggregates at equal steps; ``x="seconds"`` interpolates each seed's curve onto
    a common grid of ``TIME_GRID_POINTS`` times from 0 to the latest end time of the seeds (no
    extrapolation past a seed's last point, so ``n`` falls where seeds end).
    Columns: ``task, optimizer, x, median, q25, q75, n``.
    """
    c = best_curves(frame)
    c.attrs = {}  # a copy: its per-trial slices need not deep-copy the frame's attrs
    out = []
    for (task, opt), g in c.groupby(["task", "optimizer"], sort=True):
        per_trial = {}
        for tid, t in g.groupby("trial_id", sort=True):
            xs = t["step"].astype(float).to_numpy() if x == "step" else _wall_at_steps(t)
            ok = np.isfinite(xs) & t[metric].notna().to_numpy()
            if ok.any():
                per_trial[tid] = pd.Series(t[metric].to_numpy()[ok], index=xs[ok])
        if not per_trial:
            continue
        if x == "step":
            table = pd.DataFrame(per_trial).sort_index()
        else:
            end = float(max(s.index.max() for s in per_trial.values()))
            grid = np.linspace(0.0, end, TIME_GRID_POINTS)
            table = pd.DataFrame(
                {
                    tid: np.interp(grid, s.index.to_numpy(), s.to_numpy(), left=np.nan, right=np.nan)
                    for tid, s in per_trial.items()
                },
                index=grid,
            )
        table = table.dropna(how="all")
        out.append(
            pd.DataFrame(
                {
                    "task": task,
                    "optimizer": opt,
                    "x": table.index.to_numpy(),
                    "median": table.median(axis=1).to_numpy(),
                    "q25": table.quantile(0.25, axis=1).to_numpy(),
                    "q75": table.quantile(0.75, axis=1).to_numpy(),
                    "n": table.notna().sum(axis=1).to_numpy(),
                }
            )
        )
    cols = ["task", "optimizer", "x", "median", "q25", "q75", "n"]
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=cols)


def _dropouts(b: pd.DataFrame) -> pd.DataFrame:
    """Rows of one (task, optimizer) band where the number of seeds behind the median falls."""
    n = b["n"].to_numpy()
    drop = np.r_[False, n[1:] < n[:-1]]
    return b[drop]


def convergence_figure(frame: pd.DataFrame, x: str = "step") -> Figure | None:
    """Curves per optimizer (best configuration), median across seeds with an interquartile band;
    one panel per (metric, task): with one task the metrics sit side by side, with several each
    metric is a row of task panels (wrapped at :data:`reports.layout.MAX_COLUMNS`). ``x`` is
    ``"step"`` or ``"seconds"``. Against seconds, seeds end at different times: the line turns
    dashed where fewer seeds than at the start remain, a ``|`` marks each seed's end, and the band
    is drawn only where at least two seeds remain."""
    c = curves(frame)
    metrics = [m for m in (M_TRAIN_LOSS, M_VALID_LOSS, M_VALID_ACC) if m in c and c[m].notna().any()]
    tasks = sorted(c["task"].unique())
    if not metrics or not tasks:
        return None
    bands = {m: curve_bands(frame, m, x) for m in metrics}
    if all(b.empty for b in bands.values()):
        return None
    pal, marks, labels = palette(frame), markers(frame), task_labels(frame)
    style = (pal, marks, {o: i for i, o in enumerate(pal)})
    one_task = len(tasks) == 1
    panels, nrows, ncols = _panels(metrics, tasks)
    fig, axes = new_figure(nrows, ncols, 2.6 * nrows + 0.9)
    xlabel = "optimizer step" if x == "step" else "seconds since the start of training"
    any_drop = False
    for i, (m, task) in enumerate(panels):
        ax = axes.ravel()[i]
        if task is None:
            ax.set_visible(False)
            continue
        any_drop |= _draw_panel(ax, frame, bands[m][bands[m]["task"] == task], m, task, style, x)
        ax.set_title(METRIC_LABELS.get(m, m) if one_task else labels.get(task, task))
        col = i % ncols
        if one_task or col == 0:
            ax.set_ylabel(METRIC_LABELS.get(m, m))
        below = i + ncols
        last_row_of_block = below >= len(panels) or panels[below][1] is None or panels[below][0] != m
        if last_row_of_block:
            ax.set_xlabel(xlabel)
        ax.xaxis.set_major_locator(MaxNLocator(5))
    extra = _legend_extra(frame, metrics, tasks, any_drop)
    legend(fig, pal, extra, title=labels.get(tasks[0], tasks[0]) if one_task else None, marks=marks)
    return fig


def _panels(metrics: list[str], tasks: list[str]) -> tuple[list[tuple], int, int]:
    """``(panels, nrows, ncols)``: the (metric, task) of each panel in reading order, ``task``
    ``None`` for a blank one. One task: the metrics side by side; several: a block of task panels
    per metric."""
    if len(tasks) == 1:
        return [(m, tasks[0]) for m in metrics], 1, len(metrics)
    block, ncols = grid_shape(len(tasks))
    panels = []
    for m in metrics:
        panels += [(m, t) for t in tasks] + [(m, None)] * (block * ncols - len(tasks))
    return panels, block * len(metrics), ncols


def _draw_panel(ax, frame: pd.DataFrame, b: pd.DataFrame, m: str, task: str, style: tuple, x: str) -> bool:
    """Draw one panel's curves (``b``: the bands of metric ``m`` on ``task``), its target and its
    scale; ``style`` is ``(palette, markers, order)``. Returns whether a seed's end was marked."""
    pal, marks, order = style
    any_drop = False
    for opt, g in b.groupby("optimizer", sort=True):
        full = g["n"].max()
        whole = g["n"].to_numpy() == full
        # solid while every seed is behind the median, dashed once some have ended; the
        # optimizer's marker at a few points, staggered so that coinciding lines keep theirs
        every = max(1, len(g) // 5)
        ax.plot(g["x"].where(whole), g["median"].where(whole), color=pal[opt], lw=1.8,
                marker=marks[opt], ms=5, markevery=(order[opt] * every // max(1, len(pal)), every))
        if not whole.all():
            tail = g.iloc[max(0, int(np.argmin(whole)) - 1) :]
            ax.plot(tail["x"], tail["median"], color=pal[opt], lw=1.3, ls=(0, (3, 2)))
        two = g["n"] >= 2
        ax.fill_between(g["x"], g["q25"], g["q75"], where=two, color=pal[opt], alpha=0.2, lw=0)
        if x != "step":
            d = _dropouts(g)
            if len(d):
                any_drop = True
                ax.plot(d["x"], d["median"], ls="", marker="|", ms=9, mew=1.6, color=pal[opt])
    tobj = objective(frame, task)  # each task's own target (workloads mix loss and accuracy)
    if m == tobj.target_metric and math.isfinite(tobj.target_value):
        ax.axhline(tobj.target_value, color=NEUTRAL, ls="--", lw=1)
    if "loss" in m and len(b) and (b["q25"].dropna() > 0).all() and (b["median"] > 0).all():
        log_y(ax, float(b[["q25", "median"]].min().min()), float(b[["q75", "median"]].max().max()))
    return any_drop


def _legend_extra(frame: pd.DataFrame, metrics: list[str], tasks: list[str], any_drop: bool) -> list:
    """The legend's entries beside the optimizers': the target line, and a seed's end."""
    obj, extra = objective(frame), []
    if objectives_differ(frame) and any(objective(frame, t).target_metric in metrics for t in tasks):
        extra.append(Line2D([], [], color=NEUTRAL, ls="--", lw=1, label="each task's validation target"))
    elif obj.target_metric in metrics and math.isfinite(obj.target_value):
        label = f"target {METRIC_LABELS.get(obj.target_metric, obj.target_metric)} {obj.target_value:g}"
        extra.append(Line2D([], [], color=NEUTRAL, ls="--", lw=1, label=label))
    if any_drop:
        extra.append(Line2D([], [], color=NEUTRAL, ls=(0, (3, 2)), marker="|", ms=9, mew=1.6,
                            label="| a seed ends; dashed: fewer seeds remain"))
    return extra


def convergence_data(frame: pd.DataFrame, x: str = "step") -> pd.DataFrame:
    """The bands :func:`convergence_figure` draws, one row per (metric, task, optimizer, x)."""
    c = curves(frame)
    parts = [
        curve_bands(frame, m, x).assign(metric=m)
        for m in (M_TRAIN_LOSS, M_VALID_LOSS, M_VALID_ACC)
        if m in c and c[m].notna().any()
    ]
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    return out.rename(columns={"x": "step" if x == "step" else "seconds"})
