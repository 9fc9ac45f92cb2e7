"""The step-size sensitivity figure: each task's final validation metric against the step size."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from harness.core.names import M_FINAL_ACC, M_FINAL_LOSS
from reports.frame import summaries
from reports.layout import grid_shape, hide_unused, new_figure, task_labels
from reports.objectives import objective, objectives_differ, task_objective_values
from reports.style import NEUTRAL, legend, markers, palette


def single_step_sizes(frame: pd.DataFrame) -> dict[tuple[str, str], float]:
    """(task, optimizer) → its step size, for the optimizers run at only one step size on a task
    (their sensitivity cannot be measured)."""
    s = summaries(frame)
    s = s[s["step_size"].notna() & (s["step_size"] > 0)]
    out = {}
    for (task, opt), g in s.groupby(["task", "optimizer"], sort=True):
        vals = g["step_size"].unique()
        if len(vals) == 1:
            out[(task, opt)] = float(vals[0])
    return out


def sensitivity_figure(frame: pd.DataFrame) -> Figure | str | None:
    """Final metric against ``optimizer.step_size`` (log axis), one panel per task, each with its own
    y axis (tasks' metrics differ in range: an MNIST-1D logistic regression near 0.3 would be a flat
    line at the bottom of a CNN's 0.9 scale):
    median over finished trials at each step size (seeds and other hyperparameters) with
    interquartile bars; an × at the bottom edge marks a step size where trials diverged or failed.
    An optimizer run at a single step size is named in its panel instead of drawn as a dot; when
    every optimizer has a single step size the result is the sentence that says so (a ``str``)."""
    s = summaries(frame)
    s = s[s["step_size"].notna() & (s["step_size"] > 0)]
    s = s.assign(_value=task_objective_values(frame, s))  # each task's own metric
    fin = s[(s["status"] == "finished") & s["_value"].notna()]
    if fin.empty:
        return None
    single = single_step_sizes(frame)
    keep = ~pd.Series([(t, o) in single for t, o in zip(s["task"], s["optimizer"], strict=True)], s.index)
    if not keep.any():
        return _single_sentence(single)
    s, fin = s[keep], fin[keep.reindex(fin.index, fill_value=False)]

    pal, marks, labels = palette(frame), markers(frame), task_labels(frame)
    tasks = sorted(set(s["task"]) | {t for t, _o in single})
    mixed = objectives_differ(frame)  # then every panel names its own metric
    nrows, ncols = grid_shape(len(tasks))
    fig, axes = new_figure(nrows, ncols, 3.1 * nrows + 0.7, sharey=False)
    for k, task in enumerate(tasks):
        ax = axes.ravel()[k]
        ax.set_xscale("log")
        d = fin[fin["task"] == task]
        _draw_panel(ax, d, s[(s["task"] == task) & s["status"].isin(["diverged", "failed"])], pal, marks)
        alone = sorted((o, v) for (t, o), v in single.items() if t == task)
        if alone:
            note = "one step size only: " + ", ".join(f"{o} {v:g}" for o, v in alone)
            ax.text(0.02, 0.03, note, transform=ax.transAxes, fontsize=8, style="italic", color="0.25",
                    wrap=True)
        if not len(d):
            ax.set_xticks([])
        ax.set_title(labels.get(task, task))
        ax.set_xlabel("step size (log scale)")
        if k % ncols == 0 or mixed:
            ax.set_ylabel(objective(frame, task).label)
        ax.yaxis.set_tick_params(labelleft=True)
    hide_unused(axes, len(tasks))
    shown = {o: c for o, c in pal.items() if o in set(s["optimizer"])}
    legend(fig, shown, [Line2D([], [], color=NEUTRAL, marker="x", ls="", label="diverged / failed")],
           marks=marks)
    return fig


def _single_sentence(single: dict) -> str:
    """What the figure says when every optimizer ran at a single step size (``single``:
    (task, optimizer) → its step size)."""
    opts = sorted({o for _t, o in single})
    vals = ", ".join(
        f"{o} {'/'.join(sorted({f'{v:g}' for (_t, oo), v in single.items() if oo == o}))}" for o in opts
    )
    return (
        f"Every optimizer ran at a single step size ({vals}): the sweep measures no step-size "
        "sensitivity. Give step_size a grid (e.g. {log_grid: [1.0e-3, 1.0e-1, 5]}) to see it."
    )


def _draw_panel(ax, d: pd.DataFrame, bad: pd.DataFrame, pal: dict, marks: dict) -> None:
    """One task's panel: the median of the finished trials ``d`` per step size with interquartile
    bars, an × at the bottom edge for each trial in ``bad`` (diverged or failed)."""
    import seaborn as sns

    if len(d):
        sns.lineplot(
            data=d,
            x="step_size",
            y="_value",
            hue="optimizer",
            palette=pal,
            style="optimizer",  # the optimizer's marker, as in every figure (solid lines)
            markers={o: marks[o] for o in d["optimizer"].unique()},
            dashes=False,
            estimator="median",
            errorbar=("pi", 50),
            err_style="bars",
            legend=False,
            ax=ax,
        )
    for opt, g in bad.groupby("optimizer"):
        ax.scatter(g["step_size"], np.zeros(len(g)), transform=ax.get_xaxis_transform(), marker="x", s=60,
                   color=pal[opt], clip_on=False, zorder=5)


def sensitivity_data(frame: pd.DataFrame) -> pd.DataFrame:
    """The trials :func:`sensitivity_figure` draws from (one row per trial with a step size)."""
    s = summaries(frame)
    obj = objective(frame)
    cols = ["task", "optimizer", "config", "seed", "step_size", "status", obj.final]
    if objectives_differ(frame):  # both final metrics, and which one each task is drawn by
        cols = [*cols[:-1], M_FINAL_ACC, M_FINAL_LOSS]
        s = s.assign(objective=s["task"].map({t: objective(frame, t).final for t in s["task"].unique()}))
        cols.append("objective")
    return s.loc[s["step_size"].notna(), cols].reset_index(drop=True)
