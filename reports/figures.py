"""Seaborn figures and tables, each a view of the tidy frame of :mod:`reports.frame`.

Figures are drawn on ``matplotlib.figure.Figure`` objects with an Agg canvas (no pyplot, no global
backend switch), so this module is safe to call from notebooks, threads and headless machines.
Each ``*_figure`` function returns a ``Figure``, or ``None`` when the sweep holds no data for that
view (the report then says why). :func:`make_figures` returns them all by name.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import EngFormatter, FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from reports.frame import (
    M_COMPILE_S,
    M_EVAL_ACC,
    M_EVAL_LOSS,
    M_EXAMPLES_PER_S,
    M_FINAL_ACC,
    M_FINAL_GAP,
    M_FINAL_LOSS,
    M_SECONDS_TO_TARGET,
    M_STEP_MS,
    M_STEP_MS_P10,
    M_STEP_MS_P90,
    M_STEPS_TO_TARGET,
    M_TEST_ACC,
    M_TEST_LOSS,
    M_TRAIN_LOSS,
    M_UTIL,
    M_WALL_S,
    PROTOCOL_ONE_SPLIT,
    best_configs,
    curves,
    objective,
    objectives_differ,
    per_frame,
    summaries,
    target_words,
    task_objective_values,
)
from reports.layout import grid_shape, new_figure, task_labels
from reports.protocol import MIN_SEEDS

METRIC_LABELS = {
    M_TRAIN_LOSS: "train loss",
    M_EVAL_LOSS: "validation loss",
    M_EVAL_ACC: "validation accuracy",
    M_FINAL_ACC: "final validation accuracy",
    M_FINAL_LOSS: "final validation loss",
    M_TEST_ACC: "test accuracy",
    M_TEST_LOSS: "test loss",
}
#: Points of the common time grid that curves against seconds are interpolated onto.
TIME_GRID_POINTS = 80
#: A task counts as solved by an optimizer when at least this fraction of seeds reached the target.
SOLVED_FRACTION = 0.5


def _sns():
    import seaborn as sns

    return sns


def palette(frame: pd.DataFrame) -> dict[str, tuple]:
    """One colour per optimizer (seaborn's colour-blind palette), the same in every figure."""
    opts = sorted(summaries(frame)["optimizer"].dropna().unique())
    return dict(zip(opts, _sns().color_palette("colorblind", max(len(opts), 1)), strict=False))


def _legend(fig: Figure, pal: dict[str, tuple], extra: list | None = None, title: str | None = None) -> None:
    """The figure's legend above the panels; ``title`` (a one-task figure's task label) is the
    legend's own title: a separate ``suptitle`` collides with an "outside" legend of two rows."""
    handles = [Line2D([], [], color=c, lw=2.5, label=o) for o, c in pal.items()] + (extra or [])
    fig.legend(handles=handles, loc="outside upper center", ncols=min(len(handles), 6), frameon=False,
               title=title, title_fontsize=11)


def _log_y(ax, lo: float, hi: float) -> None:
    """Log y axis with plain numbers (0.2, 0.5, 1, 2) instead of 2×10⁰; minor ticks labelled only
    when the data span less than about one and a half decades."""
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    if hi / lo < 30:
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
        ax.yaxis.set_minor_formatter(plain)
    else:
        ax.yaxis.set_minor_formatter(NullFormatter())


def png_bytes(fig: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (no metadata, so no URL of matplotlib is embedded)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# Convergence curves
# ---------------------------------------------------------------------------------------------
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
    metrics = [m for m in (M_TRAIN_LOSS, M_EVAL_LOSS, M_EVAL_ACC) if m in c and c[m].notna().any()]
    tasks = sorted(c["task"].unique())
    if not metrics or not tasks:
        return None
    bands = {m: curve_bands(frame, m, x) for m in metrics}
    if all(b.empty for b in bands.values()):
        return None
    pal, obj, labels = palette(frame), objective(frame), task_labels(frame)
    mixed = objectives_differ(frame)
    one_task = len(tasks) == 1
    if one_task:
        panels = [(m, tasks[0]) for m in metrics]
        nrows, ncols = 1, len(metrics)
        block = 1
    else:
        block, ncols = grid_shape(len(tasks))
        nrows = block * len(metrics)
        panels = []
        for m in metrics:
            panels += [(m, t) for t in tasks] + [(m, None)] * (block * ncols - len(tasks))
    fig, axes = new_figure(nrows, ncols, 2.6 * nrows + 0.9)
    xlabel = "optimizer step" if x == "step" else "seconds since the start of training"
    any_drop = False
    for i, (m, task) in enumerate(panels):
        ax = axes.ravel()[i]
        if task is None:
            ax.set_visible(False)
            continue
        b = bands[m][bands[m]["task"] == task]
        for opt, g in b.groupby("optimizer", sort=True):
            full = g["n"].max()
            whole = g["n"].to_numpy() == full
            # solid while every seed is behind the median, dashed once some have ended
            ax.plot(g["x"].where(whole), g["median"].where(whole), color=pal[opt], lw=1.8)
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
            ax.axhline(tobj.target_value, color="0.3", ls="--", lw=1)
        if "loss" in m and len(b) and (b["q25"].dropna() > 0).all() and (b["median"] > 0).all():
            _log_y(ax, float(b[["q25", "median"]].min().min()), float(b[["q75", "median"]].max().max()))
        ax.set_title(METRIC_LABELS.get(m, m) if one_task else labels.get(task, task))
        col = i % ncols
        if one_task or col == 0:
            ax.set_ylabel(METRIC_LABELS.get(m, m))
        below = i + ncols
        last_row_of_block = below >= len(panels) or panels[below][1] is None or panels[below][0] != m
        if last_row_of_block:
            ax.set_xlabel(xlabel)
        ax.xaxis.set_major_locator(MaxNLocator(5))
    extra = []
    if mixed and any(objective(frame, t).target_metric in metrics for t in tasks):
        extra.append(Line2D([], [], color="0.3", ls="--", lw=1, label="each task's validation target"))
    elif obj.target_metric in metrics and math.isfinite(obj.target_value):
        extra.append(
            Line2D(
                [],
                [],
                color="0.3",
                ls="--",
                lw=1,
                label=f"target {METRIC_LABELS.get(obj.target_metric, obj.target_metric)} "
                f"{obj.target_value:g}",
            )
        )
    if any_drop:
        extra.append(Line2D([], [], color="0.3", ls=(0, (3, 2)), marker="|", ms=9, mew=1.6,
                            label="| a seed ends; dashed: fewer seeds remain"))
    _legend(fig, pal, extra, title=labels.get(tasks[0], tasks[0]) if one_task else None)
    return fig


# ---------------------------------------------------------------------------------------------
# Step-size sensitivity
# ---------------------------------------------------------------------------------------------
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
        opts = sorted({o for _t, o in single})
        vals = ", ".join(
            f"{o} {'/'.join(sorted({f'{v:g}' for (_t, oo), v in single.items() if oo == o}))}" for o in opts
        )
        return (
            f"Every optimizer ran at a single step size ({vals}): the sweep measures no step-size "
            "sensitivity. Give step_size a grid (e.g. {log_grid: [1.0e-3, 1.0e-1, 5]}) to see it."
        )
    s, fin = s[keep], fin[keep.reindex(fin.index, fill_value=False)]
    sns, pal, labels = _sns(), palette(frame), task_labels(frame)
    tasks = sorted(set(s["task"]) | {t for t, _o in single})
    mixed = objectives_differ(frame)  # then every panel names its own metric
    nrows, ncols = grid_shape(len(tasks))
    fig, axes = new_figure(nrows, ncols, 3.1 * nrows + 0.7, sharey=False)
    for k, task in enumerate(tasks):
        ax = axes.ravel()[k]
        ax.set_xscale("log")
        d = fin[fin["task"] == task]
        if len(d):
            sns.lineplot(
                data=d,
                x="step_size",
                y="_value",
                hue="optimizer",
                palette=pal,
                estimator="median",
                errorbar=("pi", 50),
                err_style="bars",
                marker="o",
                legend=False,
                ax=ax,
            )
        bad = s[(s["task"] == task) & s["status"].isin(["diverged", "failed"])]
        for opt, g in bad.groupby("optimizer"):
            ax.scatter(
                g["step_size"],
                np.zeros(len(g)),
                transform=ax.get_xaxis_transform(),
                marker="x",
                s=60,
                color=pal[opt],
                clip_on=False,
                zorder=5,
            )
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
    for ax in axes.ravel()[len(tasks) :]:
        ax.set_visible(False)
    shown = {o: c for o, c in pal.items() if o in set(s["optimizer"])}
    _legend(fig, shown, [Line2D([], [], color="0.3", marker="x", ls="", label="diverged / failed")])
    return fig


# ---------------------------------------------------------------------------------------------
# Time to target
# ---------------------------------------------------------------------------------------------

def _row_words(ax, i: int, words: str, x_at: float, xmax: float) -> None:
    """Write ``words`` above row ``i`` of a time-per-optimizer panel, at the side away from the
    marker at ``x_at`` (axes coordinates: the words cannot spill past the axes, and they take no part
    in layout)."""
    side = 0.02 if x_at > 0.5 * xmax else 0.98
    txt = ax.text(side, i - 0.2, words, transform=ax.get_yaxis_transform(), va="bottom",
                  ha="left" if side < 0.5 else "right", fontsize=8, color="0.15")
    txt.set_in_layout(False)


def _time_rows_axes(ax, opts: list, xmax: float, title: str, xlabel: str) -> None:
    """One row per optimizer, seconds on x from 0 to ``xmax``: the axes of both time figures."""
    ax.set_yticks(range(len(opts)), opts)
    ax.set_ylim(len(opts) - 0.4, -0.75)
    ax.set_xlim(0, xmax)
    ax.xaxis.set_major_locator(MaxNLocator(5))
    ax.set_title(title)
    ax.set_xlabel(xlabel)

def time_to_target(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (task, optimizer), for its best configuration: seeds, seeds that reached the target,
    the median / 25th / 75th percentile of seconds and steps to target over those that did, and the
    budget (``budget_steps``; ``budget_seconds``: median over seeds of the last logged
    ``time/wall_s``). Empty when the sweep has no target."""
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
        budget_s = g["trial_id"].map(ends).dropna()
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
    obj, pal, labels = objective(frame), palette(frame), task_labels(frame)
    mixed = objectives_differ(frame)
    tasks = sorted(t["task"].unique())
    opts = sorted(t["optimizer"].unique())
    nrows, ncols = grid_shape(len(tasks), max_columns=3)
    fig, axes = new_figure(nrows, ncols, nrows * (0.42 * len(opts) + 1.3) + 0.5)
    for k, task in enumerate(tasks):
        ax = axes.ravel()[k]
        d = t[t["task"] == task].set_index("optimizer")
        xs = np.r_[d["seconds_q75"].to_numpy(float), d["budget_seconds"].to_numpy(float)]
        xs = xs[np.isfinite(xs)]
        xmax = float(xs.max()) * 1.08 if xs.size and xs.max() > 0 else 1.0
        for i, opt in enumerate(opts):
            if opt not in d.index:
                continue
            row = d.loc[opt]
            reached = row["n_reached"] > 0 and math.isfinite(row["seconds_median"])
            if reached:
                med = row["seconds_median"]
                err = [[med - row["seconds_q25"]], [row["seconds_q75"] - med]]
                ax.errorbar(med, i, xerr=err, fmt="o", color=pal[opt], ms=7, capsize=3, lw=1.5)
                steps = f" · {row['steps_median']:.0f} steps" if math.isfinite(row["steps_median"]) else ""
                words = f"{med:.3g} s{steps} ({row['n_reached']}/{row['n_seeds']} seeds)"
                x_at = row["seconds_q75"]
            else:
                at = row["budget_seconds"] if math.isfinite(row["budget_seconds"]) else xmax / 1.08
                ax.plot(at, i, marker=">", ms=8, mfc="white", mec=pal[opt], mew=1.6, ls="")
                budget = f" in {int(row['budget_steps'])} steps" if pd.notna(row["budget_steps"]) else ""
                words = f"not reached{budget} (0/{row['n_seeds']} seeds)"
                x_at = at
            _row_words(ax, i, words, x_at, xmax)
        title = labels.get(task, task)
        if mixed:  # each panel names its own target
            title += f"\n{target_words(objective(frame, task))}"
        _time_rows_axes(ax, opts, xmax, title, "seconds to target (median of seeds)")
    for ax in axes.ravel()[len(tasks) :]:
        ax.set_visible(False)
    goal = "each task's validation target" if mixed else (
        f"{METRIC_LABELS.get(obj.target_metric, obj.target_metric)} "
        f"{'≥' if obj.mode == 'max' else '≤'} {obj.target_value:g}")
    fig.suptitle(f"Time to reach {goal}  (▷ at the budget: not reached)", fontsize=11)
    return fig


# ---------------------------------------------------------------------------------------------
# Throughput
# ---------------------------------------------------------------------------------------------
def throughput(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (task, optimizer): median over its trials of examples/s, step time (ms, p10/p50/p90),
    utilisation and compile time; ``examples_per_sec_lo``/``_hi`` are examples/s at the p90/p10
    step time (the spread of steady-state steps)."""
    s = summaries(frame)
    s = s[s[M_EXAMPLES_PER_S].notna() | s[M_STEP_MS].notna()]
    rows = []
    for (task, opt), g in s.groupby(["task", "optimizer"], sort=True):
        eps, ms = g[M_EXAMPLES_PER_S].median(), g[M_STEP_MS].median()
        p10, p90 = g[M_STEP_MS_P10].median(), g[M_STEP_MS_P90].median()
        rows.append(
            {
                "task": task,
                "optimizer": opt,
                "examples_per_sec": eps,
                "step_time_ms": ms,
                "step_time_ms_p10": p10,
                "step_time_ms_p90": p90,
                "examples_per_sec_lo": eps * ms / p90 if p90 > 0 else math.nan,
                "examples_per_sec_hi": eps * ms / p10 if p10 > 0 else math.nan,
                "utilization": g[M_UTIL].median(),
                "compile_s": g[M_COMPILE_S].median(),
                "n_trials": len(g),
            }
        )
    return pd.DataFrame(rows)


def throughput_figure(frame: pd.DataFrame) -> Figure | None:
    """Three panels: examples/s (bars from the p90 to the p10 step time), utilisation (% of the
    device's measured peak FLOP/s) and compile time (s), per optimizer, one colour per task."""
    t = throughput(frame)
    if t.empty or t["examples_per_sec"].isna().all():
        return None
    tasks = sorted(t["task"].unique())
    opts = sorted(t["optimizer"].unique())
    labels = task_labels(frame)
    tcol = dict(zip(tasks, _sns().color_palette("muted", len(tasks)), strict=False))
    fig, axes = new_figure(1, 3, 0.5 * len(opts) * max(1, len(tasks)) ** 0.5 + 2.0, sharey=True)
    h = 0.8 / len(tasks)
    panels = [
        ("examples_per_sec", "examples / s (bars: p90–p10 step time)", 1.0),
        ("utilization", "utilisation (% of measured peak)", 100.0),
        ("compile_s", "compile time (s)", 1.0),
    ]
    for j, (col, label, scale) in enumerate(panels):
        ax = axes[0, j]
        for k, task in enumerate(tasks):
            d = t[t["task"] == task].set_index("optimizer").reindex(opts)
            y = np.arange(len(opts)) - 0.4 + h * (k + 0.5)
            vals = d[col].to_numpy(float) * scale
            xerr = None
            if col == "examples_per_sec":
                lo, hi = d["examples_per_sec_lo"].to_numpy(float), d["examples_per_sec_hi"].to_numpy(float)
                xerr = np.nan_to_num(np.vstack([vals - lo, hi - vals]), nan=0.0).clip(min=0)
            ax.barh(y, np.nan_to_num(vals), height=h, color=tcol[task], xerr=xerr, capsize=2, label=task)
            for yi, v in zip(y, vals, strict=True):
                if not math.isfinite(v):
                    ax.text(0, yi, " not measured", va="center", fontsize=8, style="italic", color="0.3")
        ax.set_yticks(range(len(opts)), opts)
        ax.set_ylim(len(opts) - 0.5, -0.5)
        ax.xaxis.set_major_locator(MaxNLocator(5))
        if col == "examples_per_sec":
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 120k, not 120000
        ax.set_xlabel(label)
    handles = [Patch(color=c, label=labels.get(tk, tk)) for tk, c in tcol.items()]
    fig.legend(handles=handles, loc="outside upper center", ncols=min(len(handles), 4), frameon=False)
    return fig


# ---------------------------------------------------------------------------------------------
# Performance profiles (AlgoPerf style)
# ---------------------------------------------------------------------------------------------
def profile_times(frame: pd.DataFrame) -> pd.DataFrame:
    """Task × optimizer table of tuned time-to-result (:func:`reports.protocol.tuned_time_to_result`:
    the fastest of the optimizer's configurations to the validation target, a configuration's time
    being the median over its seeds; ``inf`` where no configuration had at least
    ``SOLVED_FRACTION`` of its seeds reach the target). Empty when the sweep has no target."""
    from reports import protocol

    if objective(frame).target_metric is None:
        return pd.DataFrame()
    t = protocol.tuned_time_to_result(frame)
    if t.empty:
        return pd.DataFrame()
    return t.pivot(index="task", columns="optimizer", values="seconds").fillna(np.inf)


def performance_profile(frame: pd.DataFrame, taus: np.ndarray | None = None) -> pd.DataFrame:
    """ρ_o(τ): the fraction of tasks optimizer ``o`` solves within ``τ`` × the fastest optimizer's
    time on that task (Dolan & Moré 2002, as used by AlgoPerf: Dahl et al. 2023, §4.5).

    Columns ``optimizer, tau, rho``; ``taus`` defaults to 200 points from 1 to max(4, 1.1 × the
    largest finite ratio). A task no optimizer solved counts as unsolved for all.
    """
    times = profile_times(frame)
    if times.empty:
        return pd.DataFrame(columns=["optimizer", "tau", "rho"])
    best = times.min(axis=1)
    ratios = times.div(best.where(np.isfinite(best)), axis=0)  # nan row where nobody solved
    finite = ratios.to_numpy()[np.isfinite(ratios.to_numpy())]
    if taus is None:
        taus = np.linspace(1.0, max(4.0, 1.1 * float(finite.max()) if finite.size else 4.0), 200)
    n_tasks = len(times)
    rows = []
    for opt in times.columns:
        r = ratios[opt].to_numpy()
        for tau in taus:
            rows.append(
                {
                    "optimizer": opt,
                    "tau": float(tau),
                    "rho": float(np.sum(np.isfinite(r) & (r <= tau)) / n_tasks),
                }
            )
    return pd.DataFrame(rows)


def profile_figure(frame: pd.DataFrame) -> Figure | None:
    """Step plot of :func:`performance_profile` for every optimizer."""
    p = performance_profile(frame)
    if p.empty:
        return None
    pal = palette(frame)
    n_tasks = len(profile_times(frame))
    fig, axes = new_figure(1, 1, 3.6)
    ax = axes[0, 0]
    for i, (opt, g) in enumerate(p.groupby("optimizer", sort=True)):
        # small vertical offsets keep coinciding profiles visible
        ax.step(g["tau"], g["rho"] + 0.006 * (i - 1), where="post", color=pal[opt], lw=2, label=opt)
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlim(1.0, float(p["tau"].max()))
    ax.set_xlabel("τ (time relative to the fastest optimizer on each task)")
    ax.set_ylabel(f"fraction of tasks solved\n(of {n_tasks})")
    ax.legend(loc="lower right", frameon=True)
    return fig


# ---------------------------------------------------------------------------------------------
# Leaderboard (a table, not a figure)
# ---------------------------------------------------------------------------------------------
def format_pm(mean: float, half: float, n: int, unit: str = "") -> str:
    """``mean ± half`` rounded to two significant digits of ``half`` (``mean (n=1)`` without spread)."""
    if n == 0 or not math.isfinite(mean):
        return "—"
    if not math.isfinite(half) or half <= 0:
        return f"{mean:.4g}{unit}" + (" (n=1)" if n == 1 else "")
    d = max(0, 1 - math.floor(math.log10(half)))
    return f"{mean:.{d}f} ± {half:.{d}f}{unit}"


def interval_words(how: str, n: int) -> str:
    """What an interval across ``n`` seeds is: ``min–max of 2 seeds (< 5)``, ``95% bootstrap, 6 seeds``."""
    return f"min–max of {n} seeds (< {MIN_SEEDS})" if how == "min–max" else f"95% bootstrap, {n} seeds"


def format_interval(mean: float, lo: float, hi: float, n: int, how: str = "", unit: str = "",
                    say_how: bool = True) -> str:
    """``mean [lo, hi] · how`` (:func:`interval_words`; left out with ``say_how=False``, for a
    table that says it once per row), rounded to two significant digits of the interval's width;
    ``mean (1 seed)``; ``—`` without values."""
    if n == 0 or not math.isfinite(mean):
        return "—"
    if n == 1:
        return f"{mean:.4g}{unit} (1 seed)"
    what = f" · {interval_words(how, n)}" if say_how else ""
    if not hi > lo:
        return f"{mean:.4g} [{lo:.4g}, {hi:.4g}]{unit}{what}"
    d = max(0, 1 - math.floor(math.log10(hi - lo)))
    return f"{mean:.{d}f} [{lo:.{d}f}, {hi:.{d}f}]{unit}{what}"


def leaderboard(frame: pd.DataFrame) -> pd.DataFrame:
    """Best configuration per optimizer on each task, **selected on validation** (``best_configs``),
    headlined by its **test** metric across seeds (:func:`reports.protocol.headline`).

    Intervals across seeds are :func:`reports.protocol.seed_interval`: min–max with fewer than
    ``MIN_SEEDS`` seeds (the row's "Interval" column says so, once; a cell whose interval is of
    another kind, e.g. time to target over fewer seeds, says its own), else a 95% bootstrap percentile interval of the mean;
    both stay inside the metric's range. "Beats" lists the optimizers whose test metric this one's
    exceeds by a paired bootstrap across seeds at 95% (needs ``MIN_SEEDS`` paired seeds;
    :func:`reports.protocol.pairwise_comparisons`). Runs from before the three-split protocol show
    "— (selected and reported on one split)" as their test number. Each task is selected and
    headlined by its own objective (:func:`reports.frame.objective` of the task); when the tasks'
    metrics differ the headline column is "Test metric (selected on validation)" and each cell
    names its metric ("loss 1.927 …"). Returns display strings plus numeric ``_``-prefixed columns.
    """
    from reports import protocol

    best = best_configs(frame)
    if best.empty:
        return pd.DataFrame()
    s = summaries(frame)
    obj = objective(frame)
    head = protocol.headline(frame).set_index(["task", "optimizer"])
    comps = protocol.pairwise_comparisons(frame)
    mixed = objectives_differ(frame)  # e.g. a loss-target task beside an accuracy-target one
    test_col = "Test metric (selected on validation)" if mixed else \
        f"Test {obj.test.split('/', 1)[1]} (selected on validation)"
    rows = []
    for b in best.itertuples():
        task_test = objective(frame, b.task).test.split("/", 1)[1]
        g = s[(s["task"] == b.task) & (s["optimizer"] == b.optimizer) & (s["config_id"] == b.config_id)]
        fin = g[g["status"] == "finished"]
        h = head.loc[(b.task, b.optimizer)]
        acc = protocol.seed_interval(fin[M_FINAL_ACC])
        loss = protocol.seed_interval(fin[M_FINAL_LOSS])
        ttt = protocol.seed_interval(fin[M_SECONDS_TO_TARGET])
        bad = g["status"].value_counts().drop("finished", errors="ignore")
        c = comps[(comps["task"] == b.task) & (comps["a"] == b.optimizer)]
        won = c[c["a_better"]]
        row_how = (acc[4], acc[3]) if h["protocol"] == PROTOCOL_ONE_SPLIT else (h["interval"], int(h["test_n"]))

        def cell(mean, lo, hi, n, how, row_how=row_how):
            return format_interval(mean, lo, hi, n, how, say_how=(how, n) != row_how and n > 1)

        if h["protocol"] == PROTOCOL_ONE_SPLIT:
            test_cell, beats = f"— ({PROTOCOL_ONE_SPLIT})", "—"
        else:
            test_cell = cell(h["test"], h["test_lo"], h["test_hi"], int(h["test_n"]), h["interval"])
            if mixed:
                test_cell = f"{task_test} {test_cell}"
            if len(won):
                beats = ", ".join(f"{r.b} ({r.diff:+.3g})" for r in won.itertuples())
            elif len(c) and int(c["n"].max()) < MIN_SEEDS:
                beats = f"not tested (< {MIN_SEEDS} paired seeds)"
            else:
                beats = "—"
        row = {
            "Task": b.task,
            "Rank": b.rank,
            "Optimizer": b.optimizer,
            "Best configuration": b.config,
            "Seeds finished": f"{b.n_finished}/{b.n_seeds}"
            + (" (" + ", ".join(f"{n} {k}" for k, n in bad.items()) + ")" if len(bad) else ""),
            "Interval": interval_words(*row_how) if row_how[1] > 1 else "—",
            test_col: test_cell,
            "Beats (paired bootstrap, 95%)": beats,
            "Validation accuracy": cell(*acc),
            "Validation loss": cell(*loss),
        }
        if M_FINAL_GAP in s and s[M_FINAL_GAP].notna().any():  # a dataset with a known optimum
            row["Gap to entropy rate (nats)"] = cell(*protocol.seed_interval(fin[M_FINAL_GAP]))
        if obj.target_metric is not None:
            row["Time to target (s)"] = (
                (cell(*ttt) + f" ({b.n_reached}/{b.n_seeds} reached)")
                if ttt[3]
                else f"not reached (0/{b.n_seeds})"
            )
        row["Step time (ms, median)"] = f"{g[M_STEP_MS].median():.3g}" if g[M_STEP_MS].notna().any() else "—"
        row.update(
            {
                "_test_mean": h["test"],
                "_test_lo": h["test_lo"],
                "_test_hi": h["test_hi"],
                "_acc_mean": acc[0],
                "_acc_lo": acc[1],
                "_acc_hi": acc[2],
                "_loss_mean": loss[0],
                "_loss_lo": loss[1],
                "_loss_hi": loss[2],
                "_ttt_mean": ttt[0],
                "_n": acc[3],
                "_protocol": h["protocol"],
            }
        )
        rows.append(row)
    return pd.DataFrame(rows)



# ---------------------------------------------------------------------------------------------
# Tuning curves and tuned time-to-result (the protocol's statistics: reports.protocol)
# ---------------------------------------------------------------------------------------------
def _wrap_title(task: str, width: int = 48) -> str:
    """A long task label on several lines, so that facet titles never run into each other."""
    import textwrap

    return "\n".join(textwrap.wrap(task, width)) or task


def tuning_figure(frame: pd.DataFrame) -> Figure | None:
    """Expected best validation metric after k configurations (solid, band: bootstrap 95%) and the
    expected test metric of the configuration validation selects among them (dashed), per task
    and optimizer (:func:`reports.protocol.tuning_curves`)."""
    from reports import protocol

    tc = protocol.tuning_curves(frame)
    if tc.empty:
        return None
    pal, labels = palette(frame), task_labels(frame)
    tasks = sorted(tc["task"].unique())
    nrows, ncols = grid_shape(len(tasks))
    fig, axes = new_figure(nrows, ncols, 3.2 * nrows + 0.9)
    mixed = objectives_differ(frame)  # tasks with different objectives: each panel names its own
    for i, task in enumerate(tasks):
        ax = axes[i // ncols, i % ncols]
        metric = tc.loc[tc["task"] == task, "metric"].iloc[0]
        for opt, g in tc[tc["task"] == task].groupby("optimizer", sort=True):
            c = pal.get(opt, "0.3")
            ax.plot(g["k"], g["valid"], color=c, lw=2, marker="o", ms=3)
            ax.fill_between(g["k"], g["valid_lo"], g["valid_hi"], color=c, alpha=0.15, lw=0)
            if g["test"].notna().any():
                ax.plot(g["k"], g["test"], color=c, lw=1.6, ls="--")
                ax.fill_between(g["k"], g["test_lo"], g["test_hi"], color=c, alpha=0.07, lw=0)
        ax.set_title(labels.get(task, task))
        ax.set_xlabel("configurations tried (k)")
        name = METRIC_LABELS.get(metric, metric).replace("final validation ", "")
        if i % ncols == 0 or mixed:
            ax.set_ylabel(f"expected {name}\nof the validation-best")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for j in range(len(tasks), nrows * ncols):
        axes[j // ncols, j % ncols].set_visible(False)
    _legend(fig, pal, [Line2D([], [], color="0.3", lw=2, label="validation (selects)"),
                       Line2D([], [], color="0.3", lw=1.6, ls="--", label="test of the selected")])
    return fig


def tuned_time_figure(frame: pd.DataFrame) -> Figure | None:
    """Per task, each optimizer's tuned time-to-result (the fastest of its N configurations to the
    validation target; :func:`reports.protocol.tuned_time_to_result`) as a dot; where none of its
    configurations reached the target, a hollow ▷ at the seconds its best configuration trained
    (the budget) with the words "not reached" — never a bar."""
    from reports import protocol

    obj = objective(frame)
    if obj.target_metric is None:
        return None
    t = protocol.tuned_time_to_result(frame)
    if t.empty:
        return None
    pal, labels = palette(frame), task_labels(frame)
    tasks = sorted(t["task"].unique())
    opts = sorted(t["optimizer"].unique())
    tt = time_to_target(frame)
    budget = tt.set_index(["task", "optimizer"])["budget_seconds"] if len(tt) else pd.Series(dtype=float)
    nrows, ncols = grid_shape(len(tasks), max_columns=3)
    fig, axes = new_figure(nrows, ncols, nrows * (0.42 * len(opts) + 1.3) + 0.3)
    for k, task in enumerate(tasks):
        ax = axes.ravel()[k]
        d = t[t["task"] == task].set_index("optimizer")
        xs = [float(v) for v in d["seconds"] if math.isfinite(v)]
        xs += [float(budget.get((task, o), math.nan)) for o in d.index]
        xs = [v for v in xs if math.isfinite(v)]
        xmax = max(xs) * 1.08 if xs and max(xs) > 0 else 1.0
        for i, opt in enumerate(opts):
            if opt not in d.index:
                continue
            row = d.loc[opt]
            if math.isfinite(row["seconds"]):
                at = float(row["seconds"])
                ax.plot(at, i, "o", color=pal[opt], ms=7)
                words = f"{at:.3g} s (best of {row['n_configs']})"
            else:
                at = float(budget.get((task, opt), math.nan))
                at = at if math.isfinite(at) else xmax / 1.08
                ax.plot(at, i, marker=">", ms=8, mfc="white", mec=pal[opt], mew=1.6, ls="")
                words = f"not reached (0 of {row['n_configs']} configurations)"
            _row_words(ax, i, words, at, xmax)
        _time_rows_axes(ax, opts, xmax, labels.get(task, task), "tuned seconds to the target")
    for ax in axes.ravel()[len(tasks) :]:
        ax.set_visible(False)
    return fig


# ---------------------------------------------------------------------------------------------
def _protocol():
    from reports import protocol

    return protocol


def _interactive():
    from reports import interactive

    return interactive


def convergence_data(frame: pd.DataFrame, x: str = "step") -> pd.DataFrame:
    """The bands :func:`convergence_figure` draws, one row per (metric, task, optimizer, x)."""
    c = curves(frame)
    parts = [
        curve_bands(frame, m, x).assign(metric=m)
        for m in (M_TRAIN_LOSS, M_EVAL_LOSS, M_EVAL_ACC)
        if m in c and c[m].notna().any()
    ]
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    return out.rename(columns={"x": "step" if x == "step" else "seconds"})


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


@dataclass(frozen=True)
class FigureSpec:
    """One figure of the report.

    ``build(frame)`` returns the ``Figure``, ``None`` (no data: the report shows ``empty``) or a
    sentence (``str``) the report shows instead of a figure that would say nothing. ``data(frame)``
    is the table the figure is drawn from (the report's per-figure CSV download); ``interactive``
    (optional) returns a Vega-Lite spec (``dict``) of the same view for the report's interactive
    version (:mod:`reports.interactive`).
    """

    key: str
    title: str
    caption: str
    build: Callable[[pd.DataFrame], Figure | str | None]
    empty: str  # shown instead when ``build`` returns None
    data: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    interactive: Callable[[pd.DataFrame], dict | None] | None = None


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec(
        "convergence_steps",
        "Convergence against steps",
        "Best configuration of each optimizer; line: median across seeds, band: interquartile "
        "range. Panels are titled with the task's short label (see Tasks).",
        lambda f: convergence_figure(f, "step"),
        "No curves were logged.",
        lambda f: convergence_data(f, "step"),
        lambda f: _interactive().convergence_spec(f),
    ),
    FigureSpec(
        "convergence_seconds",
        "Convergence against wall-clock time",
        "As above against seconds since the start of training (compilation excluded); each "
        "seed's curve is interpolated onto a common time grid before taking the median. Seeds end at "
        "different times: | marks where one ends, the line is dashed where fewer seeds remain and "
        "the band is drawn only while at least two do.",
        lambda f: convergence_figure(f, "seconds"),
        "No curves with wall-clock time were logged.",
        lambda f: convergence_data(f, "seconds"),
    ),
    FigureSpec(
        "time_to_target",
        "Time to target",
        "Median seconds to reach the target across seeds of each optimizer's best configuration "
        "(whiskers: interquartile range). ▷: no seed reached the target; the marker sits at the "
        "seconds the training ran (its budget).",
        time_to_target_figure,
        "The sweep has no target.",
        time_to_target,
    ),
    FigureSpec(
        "performance_profile",
        "Performance profiles",
        "AlgoPerf-style: fraction of tasks an optimizer solves within τ × the fastest optimizer's "
        "tuned time-to-result on that task (time of the fastest of its configurations to the "
        f"validation target; a configuration reaches it when ≥ {SOLVED_FRACTION:.0%} of its seeds do, "
        "its time = median across those seeds).",
        profile_figure,
        "The sweep has no target.",
        performance_profile,
    ),
    FigureSpec(
        "tuning_curves",
        "Tuning curves",
        "Expected best validation metric after k configurations (solid; band: 95% bootstrap over "
        "configurations) and expected test metric of the configuration validation selects among "
        "those k (dashed), computed exactly from the N configurations tried (Dodge et al. 2019, "
        "k-subsets drawn without replacement; a configuration's value is the mean over its seeds).",
        tuning_figure,
        "No finished configuration.",
        lambda f: _protocol().tuning_curves(f),
        lambda f: _interactive().tuning_curves_spec(f),
    ),
    FigureSpec(
        "tuned_time_to_result",
        "Tuned time-to-result",
        "AlgoPerf-style: per task, the time to the validation target of each optimizer's fastest "
        "configuration among the N it tried (median over that configuration's seeds); "
        "▷ at the longest training (the budget): none of its configurations reached the target.",
        tuned_time_figure,
        "The sweep has no target.",
        lambda f: _protocol().tuned_time_to_result(f),
    ),
    FigureSpec(
        "sensitivity",
        "Step-size sensitivity",
        "Final metric against step size: median over finished trials (seeds and other "
        "hyperparameters), bars: interquartile range; × on the axis: diverged or failed trials. "
        "Optimizers run at a single step size are named in their panel, not drawn.",
        sensitivity_figure,
        "No finished trial with a step size.",
        sensitivity_data,
        lambda f: _interactive().tuning_spec(f),
    ),
    FigureSpec(
        "throughput",
        "Throughput",
        "Steady-state training throughput, utilisation of the measured peak FLOP/s and compile "
        "time of one training step.",
        throughput_figure,
        "No throughput was measured.",
        throughput,
    ),
)


def make_figures(frame: pd.DataFrame) -> dict[str, Figure | str | None]:
    """Every figure of :data:`FIGURES` by key (``None`` where the sweep holds no data for it, a
    sentence where a figure would say nothing)."""
    return {spec.key: spec.build(frame) for spec in FIGURES}
