"""The throughput figure: examples/s, utilisation of the measured peak and compile time per optimizer."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import EngFormatter, MaxNLocator

from harness.core.names import (
    M_COMPILE_S,
    M_EXAMPLES_PER_S,
    M_STEP_MS,
    M_STEP_MS_P10,
    M_STEP_MS_P90,
    M_UTIL,
)
from reports.frame import summaries, trusted
from reports.layout import new_figure, task_labels
from reports.style import fit_legend


def _flag(v) -> bool:
    return isinstance(v, str) and v != ""


def throughput(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (task, optimizer): median over its trials of examples/s, step time (ms, p10/p50/p90),
    utilisation and compile time; ``examples_per_sec_lo``/``_hi`` are examples/s at the p90/p10
    step time (the spread of steady-state steps). Trials whose step time is suspect (tag
    ``perf.suspect``) are left out when the group has others (``left_out``: how many); ``suspect``
    is the reason when every trial of the group is suspect (its figure is then drawn hatched), else
    ``""``; ``suspect_trials``: the suspect trials' ids, space-separated (either way)."""
    s = summaries(frame)
    s = s[s[M_EXAMPLES_PER_S].notna() | s[M_STEP_MS].notna()]
    rows = []
    for (task, opt), g in s.groupby(["task", "optimizer"], sort=True):
        ok = trusted(g)
        suspect = "" if ok.any() else str(g["perf_suspect"].iloc[0])
        flagged = g["perf_suspect"].map(_flag) if "perf_suspect" in g else pd.Series(False, index=g.index)
        bad_ids = " ".join(sorted(g.loc[flagged, "trial_id"].astype(str)))
        left_out = int((~ok).sum()) if ok.any() else 0
        g = g[ok] if ok.any() else g
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
                "suspect": suspect,
                "left_out": left_out,
                "suspect_trials": bad_ids,
            }
        )
    return pd.DataFrame(rows)


def _trial_words(s: pd.DataFrame, ids: list[str], labels: dict[str, str]) -> str:
    """``trial <id> (<task label>, <configuration>, seed <n>)`` for each of ``ids`` (the
    configuration names the optimizer)."""
    by_id = s.drop_duplicates("trial_id").set_index("trial_id")
    out = []
    for tid in ids:
        r = by_id.loc[tid]
        seed = "" if pd.isna(r["seed"]) else f", seed {r['seed']}"
        out.append(f"trial {tid} ({labels.get(r['task'], r['task'])}, {r['config']}{seed})")
    return "; ".join(out)


def suspect_caption(frame: pd.DataFrame) -> str:
    """What the throughput figure shows of suspect step times (tag ``perf.suspect``: the figure
    disagreed by more than 2x with its trials' own training clock, also when measured again beside
    its task's programs), naming every suspect trial: a red cross-hatched bar where every trial of
    an optimizer on a task is suspect; a "†" after the bar where suspect trials were left out of
    it (the bar is the others'); ``""`` when no trial is suspect, so that the caption never promises
    a mark the figure does not draw."""
    t = throughput(frame)
    if t.empty:
        return ""
    s, labels = summaries(frame), task_labels(frame)
    hatched = t[t["suspect"] != ""]
    left = t[(t["left_out"] > 0)]
    parts = []
    if len(hatched):
        ids = [i for v in hatched["suspect_trials"] for i in v.split()]
        parts.append("Red cross-hatched: every trial's step time is suspect (tag perf.suspect: it disagreed "
                     "by more than 2x with the trials' own training clock, also when measured again beside "
                     f"its task's programs): {_trial_words(s, ids, labels)}.")
    if len(left):
        ids = [i for v in left["suspect_trials"] for i in v.split()]
        parts.append("† after a bar: suspect trials (tag perf.suspect) left out of it, the bar is the other "
                     f"trials': {_trial_words(s, ids, labels)}.")
    if parts:
        parts.append("A suspect figure is marked † in the leaderboard and left out of the baseline "
                     "comparison; time to target still counts its modeled figure.")
    return " ".join(parts)


#: Tasks in the throughput figure: shades of grey and hatches, never an optimizer's colour (the
#: rows are optimizers; a task coloured like one would read as that optimizer).
TASK_GREYS = ("0.35", "0.6", "0.82", "0.48", "0.7")
TASK_HATCHES = ("", "//", "..", "\\\\", "xx", "--")


#: A suspect step time (tag ``perf.suspect``): drawn over its bar, red cross-hatched.
SUSPECT_STYLE = {"facecolor": "none", "hatch": "xxxx", "edgecolor": "tab:red", "linewidth": 0.0}


def task_styles(tasks: list[str]) -> dict[str, dict]:
    """Bar style per task: a grey and a hatch (``facecolor``, ``hatch``, ``edgecolor``)."""
    return {t: {"facecolor": TASK_GREYS[i % len(TASK_GREYS)], "hatch": TASK_HATCHES[i % len(TASK_HATCHES)],
                "edgecolor": "0.15"} for i, t in enumerate(tasks)}


def throughput_figure(frame: pd.DataFrame) -> Figure | None:
    """Three panels: examples/s (bars from the p90 to the p10 step time), utilisation (% of the
    device's measured peak FLOP/s) and compile time (s), per optimizer, one colour per task."""
    t = throughput(frame)
    if t.empty or t["examples_per_sec"].isna().all():
        return None
    tasks = sorted(t["task"].unique())
    opts = sorted(t["optimizer"].unique())
    labels = task_labels(frame)
    tcol = task_styles(tasks)
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
            _draw_bars(ax, d, col, scale, y, h, (task, tcol[task], j, k))
        ax.set_yticks(range(len(opts)), opts)
        ax.set_ylim(len(opts) - 0.5, -0.5)
        ax.xaxis.set_major_locator(MaxNLocator(5))
        if col == "examples_per_sec":
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 120k, not 120000
        ax.set_xlabel(label)
    handles = [Patch(**st, label=labels.get(tk, tk)) for tk, st in tcol.items()]
    if (t["suspect"] != "").any():
        handles.append(Patch(**SUSPECT_STYLE, label="suspect: disagrees with the training clock"))
    if (t["left_out"] > 0).any():
        handles.append(Line2D([], [], ls="", marker="$†$", ms=9, color="tab:red",
                              label="† suspect trials left out of the bar"))
    fit_legend(fig, handles, max_columns=4)
    return fig


def _draw_bars(ax, d: pd.DataFrame, col: str, scale: float, y: np.ndarray, h: float, who: tuple) -> None:
    """One task's bars of column ``col`` (``d``: its rows, one per optimizer, at heights ``y``),
    suspect ones hatched, a dagger after a bar with trials left out; ``who`` is ``(task, its
    style, panel index, task index)``."""
    task, style, j, k = who
    vals = d[col].to_numpy(float) * scale
    xerr = None
    if col == "examples_per_sec":
        lo, hi = d["examples_per_sec_lo"].to_numpy(float), d["examples_per_sec_hi"].to_numpy(float)
        xerr = np.nan_to_num(np.vstack([vals - lo, hi - vals]), nan=0.0).clip(min=0)
    ax.barh(y, np.nan_to_num(vals), height=h, xerr=xerr, capsize=2, label=task, **style)
    bad = (d["suspect"].fillna("") != "").to_numpy()
    if bad.any():  # a step time that disagreed with its trials' training clock
        ax.barh(y[bad], np.nan_to_num(vals[bad]), height=h, gid=f"suspect-{j}-{k}", **SUSPECT_STYLE)
    dagger = (d["left_out"].fillna(0) > 0).to_numpy()
    ends = np.fmax(np.nan_to_num(vals), np.nan_to_num(vals + xerr[1])) if xerr is not None else vals
    for n, (yi, v) in enumerate(zip(y[dagger], ends[dagger], strict=True)):  # trials left out
        ax.text(np.nan_to_num(v), yi, " †", va="center", fontsize=10, color="tab:red",
                gid=f"dagger-{j}-{k}-{n}")  # after the bar and its whisker
    for yi, v in zip(y, vals, strict=True):
        if not math.isfinite(v):
            ax.text(0, yi, " not measured", va="center", fontsize=8, style="italic", color="0.3")
