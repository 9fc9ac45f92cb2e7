"""The protocol's tuning figures (:mod:`reports.protocol`): tuning curves (expected best
validation metric after k configurations) and performance profiles of the tuned time-to-result
(:mod:`reports.scoring`, by the frame's rule)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from reports import protocol
from reports.layout import grid_shape, hide_unused, new_figure, task_labels
from reports.objectives import METRIC_LABELS, objectives_differ
from reports.scoring import performance_profile, profile_times
from reports.style import legend, palette

#: Tuning-curve bands: fill opacity (validation) and the edge lines that keep overlapping bands
#: of several optimizers apart (a stack of translucent fills turns into one muddy colour).
BAND_ALPHA, BAND_EDGE_LW = 0.08, 0.7


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
    pal = palette(frame)
    fig, axes = new_figure(1, 1, 3.6)
    ax = axes[0, 0]
    for i, (opt, g) in enumerate(p.groupby("optimizer", sort=True)):
        # small vertical offsets keep coinciding profiles visible
        ax.step(g["tau"], g["rho"] + 0.006 * (i - 1), where="post", color=pal[opt], lw=2, label=opt)
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlim(1.0, float(p["tau"].max()))
    ax.set_xlabel("τ (time relative to the fastest optimizer on each task)")
    ax.set_ylabel(f"fraction of tasks solved\n(of {n_tasks})")
    legend(fig, {o: pal[o] for o in sorted(p["optimizer"].unique())})
    return fig


def tuning_figure(frame: pd.DataFrame) -> Figure | None:
    """Expected best validation metric after k configurations (solid, band: bootstrap 95%) and the
    expected test metric of the configuration validation selects among them (dashed), per task
    and optimizer (:func:`reports.protocol.tuning_curves`). A self-tuning optimizer (a ``tuning:
    none`` entry: one configuration) is a horizontal line at its validation value (solid) and its
    test value (dashed) across every k, labelled ``"prodigy (self-tuning)"``: where a tuned curve
    crosses it is the budget at which tuning pays."""
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
        here = tc[tc["task"] == task]
        metric = here["metric"].iloc[0]
        for opt, g in here[~here["self_tuning"]].groupby("optimizer", sort=True):
            c = pal.get(opt, "0.3")
            ax.plot(g["k"], g["valid"], color=c, lw=2, marker="o", ms=3)
            # a faint fill with thin edges: bands of several optimizers stay apart where they overlap
            ax.fill_between(g["k"], g["valid_lo"], g["valid_hi"], color=c, alpha=BAND_ALPHA, lw=0)
            for edge in ("valid_lo", "valid_hi"):
                ax.plot(g["k"], g[edge], color=c, lw=BAND_EDGE_LW, alpha=0.8, gid="band-edge")
            if g["test"].notna().any():  # the test band: its edges only (dotted)
                ax.plot(g["k"], g["test"], color=c, lw=1.6, ls="--")
                for edge in ("test_lo", "test_hi"):
                    ax.plot(g["k"], g[edge], color=c, lw=BAND_EDGE_LW, ls=":", gid="band-edge")
        for r in here[here["self_tuning"]].itertuples():
            c = pal.get(r.optimizer, "0.3")
            ax.axhline(r.valid, color=c, lw=2, label=r.label)
            if np.isfinite(r.test):
                ax.axhline(r.test, color=c, lw=1.6, ls="--", label=f"{r.label}: test")
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
    keys = {o: c for o, c in pal.items() if o not in only_own}
    extra = [Line2D([], [], color=pal.get(r.optimizer, "0.3"), lw=2.5, label=r.label)
             for r in own.itertuples()]
    legend(fig, keys, [*extra, Line2D([], [], color="0.3", lw=2, label="validation (selects)"),
                       Line2D([], [], color="0.3", lw=1.6, ls="--", label="test of the selected")])
    return fig
