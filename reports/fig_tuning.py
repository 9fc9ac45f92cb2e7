"""The protocol's tuning figures (:mod:`reports.protocol`): tuning curves (expected best
validation metric after k configurations) and performance profiles of the tuned time-to-result
(:mod:`reports.scoring`, by the frame's rule)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from reports import protocol
from reports.compute_curves import ADAPTIVE
from reports.layout import grid_shape, hide_unused, new_figure, task_labels
from reports.objectives import METRIC_LABELS, objectives_differ
from reports.scoring import performance_profile, profile_times
from reports.style import NEUTRAL, legend, log_count_x, markers, palette

#: Tuning-curve bands (validation, 95% bootstrap) are drawn in the static figure only in panels of
#: at most this many tuned optimizers: more translucent bands overlap into one muddy colour (issue
#: 36: seven bands and their edge lines); then the lines alone, the bands in the interactive view
#: (on hover) and the CSV.
BAND_MAX_OPTIMIZERS = 4
#: Fill opacity of a band (0.15 turned muddy where bands overlap).
BAND_ALPHA = 0.1


def profile_figure(frame: pd.DataFrame) -> Figure | str | None:
    """Step plot of :func:`reports.scoring.performance_profile` (the frame's rule) for every
    optimizer, the legend above the axes (a legend inside covers a profile at 0 or 1); a sentence
    instead with fewer than 2 tasks (a profile of one task is a single step that says no more than
    the time-to-target figure)."""
    p = performance_profile(frame)
    if p.empty:
        return None
    n_tasks = len(profile_times(frame))
    if n_tasks < 2:
        return (f"A performance profile needs at least 2 tasks; this sweep has {n_tasks}. "
                "The tuned time-to-result below shows its times.")
    pal, marks = palette(frame), markers(frame)
    fig, axes = new_figure(1, 1, 3.6)
    ax = axes[0, 0]
    for i, (opt, g) in enumerate(p.groupby("optimizer", sort=True)):
        # small vertical offsets keep coinciding profiles visible
        ax.step(g["tau"], g["rho"] + 0.006 * (i - 1), where="post", color=pal[opt], lw=2, label=opt,
                marker=marks[opt], ms=5, markevery=(i % 2, 2))
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlim(1.0, float(p["tau"].max()))
    ax.set_xlabel("τ (time relative to the fastest optimizer on each task)")
    ax.set_ylabel(f"fraction of tasks solved\n(of {n_tasks})")
    legend(fig, {o: pal[o] for o in sorted(p["optimizer"].unique())}, marks=marks)
    return fig


def tuning_figure(frame: pd.DataFrame) -> Figure | None:
    """Expected best validation metric after k configurations (solid, with the optimizer's marker)
    and the expected test metric of the configuration validation selects among them (dashed, the
    marker hollow), per
    task and optimizer (:func:`reports.protocol.tuning_curves`); the validation curve's 95% bootstrap
    band as a fill in panels of at most :data:`BAND_MAX_OPTIMIZERS` tuned optimizers. Every line
    drawn is explained by the legend: its colour (and marker) by the optimizer's key, its line
    style by "validation (selects)" or "test of the selected". A self-tuning optimizer (a ``tuning:
    none`` entry: one configuration) is a horizontal line at its validation value (solid) and its
    test value (dashed) across every k, labelled ``"prodigy (self-tuning)"``: where a tuned curve
    crosses it is the budget at which tuning pays."""
    tc = protocol.tuning_curves(frame)
    if tc.empty:
        return None
    pal, marks, labels = palette(frame), markers(frame), task_labels(frame)
    tasks = sorted(tc["task"].unique())
    nrows, ncols = grid_shape(len(tasks))
    fig, axes = new_figure(nrows, ncols, 3.2 * nrows + 0.9)
    mixed = objectives_differ(frame)  # tasks with different objectives: each panel names its own
    banded = False
    for i, task in enumerate(tasks):
        ax = axes[i // ncols, i % ncols]
        here = tc[tc["task"] == task]
        metric = here["metric"].iloc[0]
        banded |= _draw_panel(ax, here, pal, marks)
        if here["self_tuning"].all():  # no tuned curve sets the k axis
            ax.set_xlim(0.5, 1.5)
        ax.set_title(labels.get(task, task))
        ax.set_xlabel("configurations tried (k)")
        name = METRIC_LABELS.get(metric, metric).replace("final validation ", "")
        if i % ncols == 0 or mixed:
            ax.set_ylabel(f"expected {name}\nof the validation-best")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    hide_unused(axes, len(tasks))
    own = tc[tc["self_tuning"]].drop_duplicates("label")
    only_own = set(own["optimizer"]) - set(tc.loc[~tc["self_tuning"], "optimizer"])
    keys = {o: c for o, c in pal.items() if o not in only_own and o in set(tc["optimizer"])}
    extra = [Line2D([], [], color=pal.get(r.optimizer, NEUTRAL), lw=2.2, label=r.label)
             for r in own.itertuples()]
    extra += [Line2D([], [], color=NEUTRAL, lw=2, label="validation (selects)"),
              Line2D([], [], color=NEUTRAL, lw=1.5, ls="--", marker="o", ms=5, mfc="white",
                     label="test of the selected")]
    if banded:
        extra.append(Patch(facecolor=NEUTRAL, alpha=BAND_ALPHA * 2, lw=0, label="95% band (validation)"))
    legend(fig, keys, extra, marks=marks)
    return fig


def _draw_panel(ax, here: pd.DataFrame, pal: dict, marks: dict) -> bool:
    """One task's tuning curves (``here``: its rows of the tuning curves): the tuned optimizers'
    lines (with bands when few), the self-tuning ones' horizontal lines. Returns whether a band
    was drawn."""
    tuned = here[~here["self_tuning"]]
    bands = tuned["optimizer"].nunique() <= BAND_MAX_OPTIMIZERS
    banded = False
    for opt, g in tuned.groupby("optimizer", sort=True):
        c = pal.get(opt, NEUTRAL)
        ax.plot(g["k"], g["valid"], color=c, lw=2, marker=marks.get(opt, "o"), ms=5)
        if bands:
            ax.fill_between(g["k"], g["valid_lo"], g["valid_hi"], color=c, alpha=BAND_ALPHA, lw=0)
            banded = True
        if g["test"].notna().any():  # the same marker, hollow: 9+ optimizers share colours
            ax.plot(g["k"], g["test"], color=c, lw=1.5, ls="--", marker=marks.get(opt, "o"), ms=5,
                    mfc="white")
    for r in here[here["self_tuning"]].itertuples():
        c = pal.get(r.optimizer, NEUTRAL)
        ax.axhline(r.valid, color=c, lw=2, label=r.label)
        if np.isfinite(r.test):
            ax.axhline(r.test, color=c, lw=1.5, ls="--", label=f"{r.label}: test")
    return banded


#: Line style of each search method in "Tuning against compute" (colour is the optimizer's).
METHOD_STYLES = {"grid": "--", "random": "--", "quasirandom": "--", "asha": "-", "hyperband": "-",
                 "successive_halving": "-", "coordinate_descent": "-.", "optuna": ":"}


def compute_figure(frame: pd.DataFrame) -> Figure | None:
    """The best validation metric against training steps spent on tuning, per task and optimizer
    (:func:`reports.compute_curves.compute_curves`): an adaptive search's own path, a fixed plan's
    expectation, as step lines styled by method (:data:`METHOD_STYLES`: fixed plans dashed, early
    stopping solid, coordinate descent dash-dot, Optuna dotted) in the optimizer's colour, each
    labelled ``optimizer (method)``, marked where the best improves; steps on a log axis. One panel
    per task, or per task and optimizer where an optimizer was tuned by several methods."""
    from reports.compute_curves import compute_curves

    cc = compute_curves(frame)
    if cc.empty:
        return None
    pal, marks, labels = palette(frame), markers(frame), task_labels(frame)
    by_optimizer = bool((cc.groupby(["task", "optimizer"])["method"].nunique() > 1).any())
    panels = (sorted(set(zip(cc["task"], cc["optimizer"], strict=True))) if by_optimizer
              else [(task, None) for task in sorted(cc["task"].unique())])
    nrows, ncols = grid_shape(len(panels))
    fig, axes = new_figure(nrows, ncols, 3.2 * nrows + 0.9)
    mixed = objectives_differ(frame)
    for i, (task, opt) in enumerate(panels):
        ax = axes[i // ncols, i % ncols]
        here = cc[(cc["task"] == task) & ((cc["optimizer"] == opt) if opt else True)]
        for (o, method), g in here.groupby(["optimizer", "method"], sort=True):
            v = g["valid"].to_numpy()
            moves = [0, *(j for j in range(1, len(v)) if v[j] != v[j - 1])]  # a marker where it improves
            ax.step(g["steps"], v, where="post", color=pal.get(o, NEUTRAL), lw=2,
                    ls=METHOD_STYLES.get(method, "-"), marker=marks.get(o, "o"), ms=4, markevery=moves,
                    label=f"{o} ({method})")
        log_count_x(ax)
        title = labels.get(task, task)
        ax.set_title(f"{title}: {opt}" if opt else title)
        ax.set_xlabel("training steps spent on tuning")
        name = METRIC_LABELS.get(here["metric"].iloc[0], here["metric"].iloc[0]).replace(
            "final validation ", "")
        if i % ncols == 0 or mixed:
            ax.set_ylabel(f"best {name}\nso far (validation)")
    hide_unused(axes, len(panels))
    methods = sorted(set(cc["method"]))
    extra = [Line2D([], [], color=NEUTRAL, lw=2, ls=METHOD_STYLES.get(m, "-"),
                    label=f"{m}: {'expected best' if m not in ADAPTIVE else 'its path'}") for m in methods]
    keys = {o: c for o, c in pal.items() if o in set(cc["optimizer"])}
    legend(fig, keys, extra, marks=marks)
    return fig
