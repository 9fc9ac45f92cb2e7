"""The report's figures: :data:`FIGURES`, one :class:`FigureSpec` per figure, each a view of the tidy
frame of :mod:`reports.frame`, and :func:`make_figures`.

The figures themselves live by family: :mod:`reports.fig_convergence`, :mod:`reports.fig_time`
(time to target, tuned time-to-result), :mod:`reports.fig_tuning` (tuning curves, performance
profiles), :mod:`reports.fig_sensitivity`, :mod:`reports.fig_throughput`, :mod:`reports.fig_budget`
(the time budget); the leaderboard table is
:mod:`reports.leaderboard`, the shared look :mod:`reports.style`. Their public names are
re-exported here (``reports.figures.leaderboard``, ``reports.figures.curve_bands``, …).
Each ``*_figure`` function returns a ``Figure``, or ``None`` when the sweep holds no data for that
view (the report then says why), or a sentence where a figure would say nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
from matplotlib.figure import Figure

from reports import interactive, protocol
from reports.compute_curves import compute_curves, reach_words
from reports.fig_budget import budget_figure, time_budget
from reports.fig_convergence import (
    TIME_GRID_POINTS,
    best_curves,
    convergence_data,
    convergence_figure,
    curve_bands,
)
from reports.fig_sensitivity import sensitivity_data, sensitivity_figure, single_step_sizes
from reports.fig_throughput import suspect_caption, throughput, throughput_figure
from reports.fig_time import time_to_target, time_to_target_figure, tuned_time_figure
from reports.fig_tuning import BAND_MAX_OPTIMIZERS, compute_figure, profile_figure, tuning_figure
from reports.leaderboard import format_interval, interval_words, leaderboard
from reports.objectives import METRIC_LABELS
from reports.protocol import SOLVED_FRACTION
from reports.report_clock import clock_note
from reports.scaling_frontier import frontier_caption, frontier_figure, frontier_table
from reports.scaling_report import scaling_caption, scaling_figure, scaling_table
from reports.scoring import performance_profile, profile_times
from reports.selection import tuning_value_words
from reports.style import palette, png_bytes

__all__ = [
    "FIGURES",
    "METRIC_LABELS",
    "TIME_GRID_POINTS",
    "FigureSpec",
    "best_curves",
    "budget_figure",
    "convergence_data",
    "convergence_figure",
    "curve_bands",
    "format_interval",
    "interval_words",
    "leaderboard",
    "make_figures",
    "palette",
    "performance_profile",
    "png_bytes",
    "profile_figure",
    "profile_times",
    "sensitivity_data",
    "sensitivity_figure",
    "single_step_sizes",
    "throughput",
    "throughput_figure",
    "time_budget",
    "time_to_target",
    "time_to_target_figure",
    "tuned_time_figure",
    "tuning_figure",
]


@dataclass(frozen=True)
class FigureSpec:
    """One figure of the report.

    ``build(frame)`` returns the ``Figure``, ``None`` (no data: the report shows ``empty``, or leaves
    an ``optional`` figure out) or a
    sentence (``str``) the report shows instead of a figure that would say nothing. ``data(frame)``
    is the table the figure is drawn from (the report's per-figure CSV download); ``interactive``
    (optional) returns a Vega-Lite spec (``dict``) of the same view for the report's interactive
    version (:mod:`reports.interactive`).
    """

    key: str
    title: str
    caption: str | Callable[[pd.DataFrame], str]  # a callable: the caption depends on the frame
    build: Callable[[pd.DataFrame], Figure | str | None]
    empty: str  # shown instead when ``build`` returns None
    data: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    interactive: Callable[[pd.DataFrame], dict | None] | None = None
    #: a figure only some sweeps have (a ladder's scaling): without data it is left out of the page
    #: instead of saying ``empty``
    optional: bool = False


def rule_words(frame: pd.DataFrame) -> str:
    """What the frame's tuned-time rule is (:func:`reports.protocol.scoring`), for a caption."""
    if protocol.scoring(frame) == "algoperf":
        return ("AlgoPerf's rule (scoring: algoperf): each seed is a study whose time is its fastest "
                "configuration's (∞ when none reached the target); the tuned time is the median over "
                "seeds; a time above 4× the task's fastest counts as not solved; τ runs over [1, 4], "
                "and the leaderboard's AlgoPerf score is the profile's integral over it divided by 3.")
    return ("The harness's rule (scoring: harness, not AlgoPerf's): the time of the fastest of the "
            "optimizer's configurations, a configuration reaching the target when "
            f"≥ {SOLVED_FRACTION:.0%} of its seeds do, its time the median across those seeds; no 4× "
            "cap, no score (AlgoPerf's rule: scoring: algoperf, or report --scoring algoperf).")


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec(
        "convergence_steps",
        "Convergence against steps",
        "Best configuration of each optimizer; line: median across seeds, band: interquartile "
        "range. Panels are titled with the task's short label (see Tasks).",
        lambda f: convergence_figure(f, "step"),
        "No curves were logged.",
        lambda f: convergence_data(f, "step"),
        lambda f: interactive.convergence_spec(f),
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
        lambda f: "Median seconds to reach the target across seeds of each optimizer's best "
        "configuration (whiskers: interquartile range). ▷: no seed reached the target; the marker "
        "sits at the seconds the training ran (its budget, on the same clock: modeled, steps trained × "
        "the step time). " + clock_note(f),
        time_to_target_figure,
        "The sweep has no target.",
        time_to_target,
    ),
    FigureSpec(
        "performance_profile",
        "Performance profiles",
        lambda f: "Fraction of tasks an optimizer solves within τ × the fastest optimizer's tuned " \
        f"time-to-result on that task. {rule_words(f)}",
        profile_figure,
        "The sweep has no target.",
        performance_profile,
    ),
    FigureSpec(
        "tuning_curves",
        "Tuning curves",
        lambda f: (
            "Expected best validation metric after k configurations (solid, with the optimizer's "
            "marker) and expected test metric of the configuration validation selects among those k "
            f"(dashed); its 95% bootstrap band over configurations is drawn in panels of at most "
            f"{BAND_MAX_OPTIMIZERS} tuned optimizers (with more, hover a line in the interactive view; "
            "every band is in the CSV). Computed exactly from the N configurations tried (Dodge et al. 2019; "
            + ("k draws with replacement, as Dodge et al.'s formula and code; the default draws "
               "k-subsets without replacement: report --tuning-curves without-replacement"
               if protocol.tuning_draws(f) == "with-replacement" else
               "k-subsets drawn without replacement, \u201chad I run only k of them\u201d; Dodge et al.'s "
               "paper and code draw with replacement: report --tuning-curves with-replacement")
            + "; a configuration's value is the mean over its seeds). " + tuning_value_words(f)),
        tuning_figure,
        "No finished configuration.",
        lambda f: protocol.tuning_curves(f),
        lambda f: interactive.tuning_curves_spec(f),
    ),
    FigureSpec(
        "tuning_compute",
        "Tuning against compute",
        lambda f: "The best validation metric against the training steps spent on tuning, per "
        "optimizer and task, so that tuning methods share one axis: an adaptive search "
        "(asha, coordinate_descent, optuna, ...) as its own path, its trials in the order they ended, a "
        "stopped or diverged trial counting the steps it ran, the best configuration updated as each "
        "configuration's seeds have all ended; a fixed plan (grid, random, quasirandom) as the tuning "
        "curve's expected best after k configurations placed at k × the steps one configuration costs. "
        "Line style by method: fixed plans dashed, early stopping solid, coordinate descent dash-dot, "
        "Optuna dotted; one panel per optimizer where it was tuned by several methods. A "
        "configuration's value is the mean over its seeds, a seed "
        "that did not finish counted as the task's worst value." + reach_words(f),
        compute_figure,
        "No finished configuration.",
        compute_curves,
    ),
    FigureSpec(
        "tuned_time_to_result",
        "Tuned time-to-result",
        lambda f: "Per task, each optimizer's tuned time to the validation target over the N "
        "configurations it tried; ▷ at the longest training (the budget): not reached. " + rule_words(f),
        tuned_time_figure,
        "The sweep has no target.",
        lambda f: protocol.tuned_time_to_result(f),
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
        lambda f: interactive.tuning_spec(f),
    ),
    FigureSpec(
        "throughput",
        "Throughput",
        lambda f: "Steady-state training throughput, utilisation of the measured peak FLOP/s and "
        "compile time of one training step (wall-clock: what this machine delivered, load included). "
        + suspect_caption(f),
        throughput_figure,
        "No throughput was measured.",
        throughput,
    ),
    FigureSpec(
        "time_budget",
        "Time budget",
        "Where the seconds went. First the whole sweep, as long as its wall-clock (its parent runs, "
        "every invocation: start-up, pre-flight, the batching decision, the throughput stage and "
        "what its trials spent, as the summary's time line); then each task, summed over the trials "
        "those invocations trained (each bar says how many), and apart, labelled \u201cof other "
        "invocations\u201d, the trials the report shows that other invocations trained (a grown "
        "search's trials carried over from an earlier version, or an invocation that logged no time "
        "budget), which the sweep's bar does not hold. A trial's seconds are "
        "compiling (or loading) programs, training steps, evaluation, its own throughput "
        "measurement, MLflow writes on the critical path, and the rest (data, initialisation, "
        "checkpoints). A vmapped batch's seconds are divided between its trials; with several "
        "workers the tasks' seconds ran side by side and can add up to more than the sweep's.",
        budget_figure,
        "No time budget was logged (runs from before the harness logged one).",
        time_budget,
    ),
    FigureSpec(
        "scaling",
        "Scaling: speed-up across model sizes",
        scaling_caption,
        scaling_figure,
        "The sweep has no model-size ladder (a config's ladder: section).",
        scaling_table,
        optional=True,
    ),
    FigureSpec(
        "scaling_frontier",
        "Scaling: loss against compute",
        frontier_caption,
        frontier_figure,
        "The sweep has no model-size ladder (a config's ladder: section).",
        frontier_table,
        optional=True,
    ),
)



def make_figures(frame: pd.DataFrame) -> dict[str, Figure | str | None]:
    """Every figure of :data:`FIGURES` by key (``None`` where the sweep holds no data for it, a
    sentence where a figure would say nothing)."""
    return {spec.key: spec.build(frame) for spec in FIGURES}

