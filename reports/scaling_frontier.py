"""The scaling section's loss-against-compute frontier: for a ladder sweep, each optimizer's final
validation loss (its tuned configuration at every rung and data budget, mean over seeds with the
seeds' range) against the estimated training FLOPs of the run (the ``ladder.flops`` tag,
:attr:`harness.core.ladder.Rung.flops`), and each optimizer's frontier: the runs whose loss no
cheaper run of the same optimizer reached (the lowest loss bought with that compute or less).
Computed from :func:`reports.scaling_report.scaling_study`'s tuned points only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports.scaling_report import NEUTRAL, early_training_note, scaling_study

__all__ = ["frontier_caption", "frontier_figure", "frontier_table"]


def frontier_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per optimizer, rung and budget of a ladder sweep: the tuned configuration's loss.

    Args:
      frame: the report's tidy frame (:func:`reports.frame.load_frame`).

    Returns:
      ``optimizer, rung, ratio, N, D, flops`` (estimated training FLOPs), ``loss`` (mean final
      validation loss over seeds, nats), ``low``/``high`` (the seeds' min and max), ``seeds`` and
      ``frontier`` (True where no run of the optimizer with fewer FLOPs reached a loss as low),
      sorted by optimizer and FLOPs; empty without a ladder.
    """
    st = scaling_study(frame)
    if st is None or st.points.empty:
        return pd.DataFrame()
    g = st.points.groupby(["optimizer", "rung", "ratio"], as_index=False).agg(
        N=("N", "first"), D=("D", "first"), flops=("flops", "first"), loss=("loss", "mean"),
        low=("loss", "min"), high=("loss", "max"), seeds=("loss", "size"))
    g = g.sort_values(["optimizer", "flops", "loss"], kind="stable").reset_index(drop=True)
    best = g.groupby("optimizer")["loss"].cummin()
    prev = best.groupby(g["optimizer"]).shift(1)
    g["frontier"] = prev.isna() | (g["loss"] < prev)
    return g


def frontier_figure(frame: pd.DataFrame):
    """Loss against compute, one colour per optimizer, its frontier as a step line; ``None``
    without a ladder."""
    from reports.layout import new_figure
    from reports.style import legend, palette

    t = frontier_table(frame)
    if t.empty or not np.isfinite(t["flops"]).any():
        return None
    colours = palette(frame)
    fig, axes = new_figure(1, 1, 3.2)
    ax = axes.ravel()[0]
    for o, g in t.groupby("optimizer", sort=True):
        c = colours.get(o, NEUTRAL)
        ax.errorbar(g["flops"], g["loss"], yerr=[g["loss"] - g["low"], g["high"] - g["loss"]], fmt="o",
                    color=c, ms=4, capsize=2, lw=1, alpha=0.6)
        f = g[g["frontier"]]
        ax.plot(f["flops"], f["loss"], color=c, lw=1.5, drawstyle="steps-post")
    ax.set_xscale("log")
    ax.set_xlabel("estimated training FLOPs of the run")
    ax.set_ylabel("final valid loss (nats)")
    legend(fig, {o: c for o, c in colours.items() if o in set(t["optimizer"])})
    return fig


def frontier_caption(frame: pd.DataFrame) -> str:
    """The frontier's caption: what is drawn, each optimizer's lowest loss and its compute."""
    t = frontier_table(frame)
    if t.empty:
        return ""
    ends = []
    for o, g in t.groupby("optimizer", sort=True):
        last = g[g["frontier"]].iloc[-1]
        ends.append(f"{o} {last['loss']:.4f} at {last['flops']:.3g} FLOPs (N {last['N']:,.0f}, "
                    f"{last['ratio']:g} tokens/param)")
    return ("Final validation loss of each optimizer's tuned configuration at every rung and data budget "
            "(mean over seeds, bars: the seeds' range) against the run's estimated training FLOPs "
            "(3 × the model's analytic forward FLOPs × examples, or 6ND); line: each optimizer's frontier, "
            "the lowest loss it reached with that compute or less. Lowest: " + "; ".join(ends) + "."
            + early_training_note(frame))
