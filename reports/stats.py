"""Across tasks, the statistics expected of few-run comparisons (Agarwal et al. 2021, "Deep
Reinforcement Learning at the Edge of the Statistical Precipice", NeurIPS; their library
``rliable``): each optimizer's **probability of improvement** over a baseline optimizer and the
**interquartile mean** (IQM) of its normalised scores, each with a **stratified bootstrap** 95%
interval.

**Runs and scores.** A run is one seed of an optimizer's selected configuration on a task
(:func:`reports.selection.best_configs`, selected on validation): every seed it ran, a seed that
diverged or failed included. Each task is scored by what ranks it on the leaderboard:

* a task ranked by time to target (the default objective, the task has a target): the run's
  **speed-up over the baseline**, ``T_base / t``: ``t`` its seconds to the validation target on the
  report's clock (:mod:`reports.report_clock`), ``T_base`` the baseline's median over its seeds (a seed that
  did not reach the target counts as infinite). 1 = as fast as the baseline, 2 = twice as fast; a
  run that did not reach the target scores 0.
* a task ranked by its metric (``selection: {by: final | best}``, or no target): the run's
  **test metric relative to the baseline's mean** (accuracy: ``acc / mean(acc_base)``; a loss:
  ``mean(loss_base) / loss``), so that higher is better and 1 = the baseline; a run that did not
  finish scores 0.

Normalising by the baseline (as Agarwal et al. normalise Atari scores by reference algorithms)
gives a score that reads "how much better than the baseline" on every task. A task where the
baseline has no finite reference (it did not reach the target on half its seeds or more; it did
not run there) has no normalised score: the IQM leaves it out and says so. The probability of
improvement compares raw runs within a task (any positive scale gives the same answer), so it
keeps such a task as long as the baseline ran there.

**Probability of improvement** of X over the baseline Y (``rliable.metrics.
probability_of_improvement``): per task, the Mann–Whitney probability ``P(x > y) + ½ P(x = y)`` over
all pairs of an X run and a Y run (unpaired, like ``rliable``), averaged over tasks: the probability
that X beats Y on a random task and a random seed of each. **IQM** (``rliable.metrics.
aggregate_iqm``): the 25%-trimmed mean of all runs' normalised scores pooled over tasks
(``scipy.stats.trim_mean``).

**Stratified bootstrap** (``rliable.library.get_interval_estimates``): each resample redraws, with
replacement, the runs within each task (and, for the probability of improvement, X's and Y's runs
independently), never the tasks; the interval is the percentile interval of :data:`N_BOOT`
resamples at 95% (``scipy.stats.bootstrap``, ``method="percentile"``, ``default_rng(0)``: every
task's runs of an optimizer are one sample, resampled independently of the others, which is exactly
the stratification). ``rliable`` itself does not run beside the pinned stack (its ``arch<8`` needs
pandas < 3), so this module computes the same estimators with scipy; ``tests/test_stats.py`` checks
its point estimates exactly and its intervals within bootstrap tolerance against ``rliable`` 1.2.0's
own numbers on a table built for it.

**The baseline optimizer** (:func:`baseline_optimizer`): ``frame.attrs[BASELINE_ATTR]`` when set,
else the first of :data:`DEFAULT_BASELINES` that ran, else the first optimizer by name. (Not
``report --baseline``, which names a baseline *sweep* to compare with, :mod:`reports.compare`.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.core.names import M_SECONDS_TO_TARGET
from harness.core.selection_rule import BASELINES
from reports.frame import summaries, tuning_rows
from reports.objectives import objective
from reports.selection import best_configs, select_by

__all__ = ["BASELINE_ATTR", "DEFAULT_BASELINES", "across_tasks", "baseline_optimizer", "iqm",
           "iqm_interval", "poi_interval", "probability_of_improvement", "run_scores", "stats_note"]

#: The optimizer the scores and the probability of improvement are relative to, when the frame
#: names none (the first of these that ran; one home with the summary's equal-token lines).
DEFAULT_BASELINES = BASELINES
#: ``frame.attrs`` key naming the baseline optimizer (:func:`baseline_optimizer`).
BASELINE_ATTR = "stats_baseline"
#: Bootstrap resamples and level of the intervals.
N_BOOT = 10_000
LEVEL = 0.95
#: Score kinds of a task (module docstring).
SPEEDUP = "speed-up over the baseline (its median time to target / the run's)"
RELATIVE = "test metric relative to the baseline's mean"


def baseline_optimizer(frame: pd.DataFrame) -> str | None:
    """The baseline optimizer (module docstring); ``None`` without any optimizer.

    Raises:
      ValueError: ``frame.attrs[BASELINE_ATTR]`` names an optimizer the sweep did not run.
    """
    s = summaries(frame)
    names = sorted(s["optimizer"].dropna().unique()) if "optimizer" in s else []
    chosen = frame.attrs.get(BASELINE_ATTR)
    if chosen is not None:
        if chosen not in names:
            raise ValueError(f"the baseline optimizer must be one the sweep ran ({', '.join(names)}); "
                             f"got {chosen!r}")
        return chosen
    return next((b for b in DEFAULT_BASELINES if b in names), names[0] if names else None)


@dataclass(frozen=True)
class Scores:
    """Each optimizer's runs per task (:func:`run_scores`): ``runs[opt][task]`` a 1-D array of its
    scores (one per seed, in seed order); ``kinds[task]`` how the task is scored (:data:`SPEEDUP`
    or :data:`RELATIVE`); ``normalised[task]`` whether the baseline gives it a finite reference;
    ``baseline`` the baseline's name."""

    runs: dict[str, dict[str, np.ndarray]]
    kinds: dict[str, str]
    normalised: dict[str, bool]
    baseline: str


def run_scores(frame: pd.DataFrame, baseline: str | None = None) -> Scores | None:
    """The normalised score of every run (module docstring), or ``None`` when the baseline ran on no
    task."""
    baseline = baseline_optimizer(frame) if baseline is None else baseline
    best = best_configs(frame)
    if baseline is None or best.empty:
        return None
    s = tuning_rows(summaries(frame))  # an audit trial stands for its stopped twin's seed
    by = select_by(frame)
    runs: dict[str, dict[str, np.ndarray]] = {}
    kinds, normalised = {}, {}
    for task, bt in best.groupby("task", sort=True):
        if baseline not in set(bt["optimizer"]):
            continue
        obj = objective(frame, task)
        by_time = by == "time_to_target" and obj.target_metric is not None
        raw = {}
        for b in bt.itertuples():
            g = s[(s["task"] == task) & (s["optimizer"] == b.optimizer) & (s["config_id"] == b.config_id)]
            g = g.sort_values("seed", kind="stable")
            fin = (g["status"] == "finished").to_numpy()
            if by_time:  # speed: 1 / seconds, 0 when not reached (or not finished)
                secs = g[M_SECONDS_TO_TARGET].to_numpy(float)
                ok = fin & np.isfinite(secs) & (secs > 0)
                raw[b.optimizer] = np.where(ok, 1.0 / np.where(ok, secs, 1.0), 0.0)
            else:  # the test metric, oriented so that higher is better
                v = g[obj.test].to_numpy(float)
                ok = fin & np.isfinite(v)
                if obj.mode == "max":
                    raw[b.optimizer] = np.where(ok, v, 0.0)
                else:
                    ok &= v > 0
                    raw[b.optimizer] = np.where(ok, 1.0 / np.where(ok, v, 1.0), 0.0)
        base = raw[baseline]
        # the baseline's reference: its median time (inf for a seed that did not reach: speed 0), or
        # its mean metric; a reference of 0 speed or metric is none
        if by_time:
            with np.errstate(divide="ignore"):
                ref_time = float(np.median(np.where(base > 0, 1.0 / np.where(base > 0, base, 1.0), np.inf)))
            ref = 1.0 / ref_time if math.isfinite(ref_time) else 0.0
        else:
            ref = float(np.mean(base)) if len(base) else 0.0
        kinds[task] = SPEEDUP if by_time else RELATIVE
        normalised[task] = ref > 0
        for opt, x in raw.items():
            runs.setdefault(opt, {})[task] = x / ref if ref > 0 else x
    if not kinds:
        return None
    return Scores(runs, kinds, normalised, baseline)


def iqm(scores: list[np.ndarray], axis: int = -1) -> np.ndarray:
    """The interquartile mean of all runs of all tasks (``scores``: one array of runs per task,
    runs along ``axis``): the 25%-trimmed mean of the pooled runs, ``rliable.metrics.aggregate_iqm``
    (``scipy.stats.trim_mean(..., 0.25)``)."""
    from scipy.stats import trim_mean

    return trim_mean(np.concatenate(scores, axis=axis), 0.25, axis=axis)


def probability_of_improvement(x: list[np.ndarray], y: list[np.ndarray]) -> np.ndarray:
    """The probability that X beats Y on a random task and a random run of each
    (``rliable.metrics.probability_of_improvement``): per task (``x[m]``, ``y[m]``: runs along the
    last axis, any leading batch axes) the mean over all pairs of ``[x > y] + ½ [x = y]``, averaged
    over tasks."""
    per_task = []
    for a, b in zip(x, y, strict=True):
        a, b = np.asarray(a)[..., :, None], np.asarray(b)[..., None, :]
        per_task.append(((a > b) + 0.5 * (a == b)).mean(axis=(-2, -1)))
    return np.mean(per_task, axis=0)


def _interval(samples: list[np.ndarray], statistic, n_boot: int, seed: int) -> tuple[float, float]:
    """The stratified bootstrap percentile interval: every sample (a task's runs of one optimizer)
    resampled independently (``scipy.stats.bootstrap``); ``nan`` when every sample has one run. A
    sample of one run (a task where the optimizer's other seeds did not finish) is held fixed, as
    resampling it would (scipy refuses a one-observation sample); the others are resampled."""
    from scipy.stats import bootstrap

    many = [i for i, x in enumerate(samples) if len(x) >= 2]
    if not many:
        return math.nan, math.nan
    stat = statistic
    if len(many) < len(samples):
        def stat(*xs, axis=-1):  # the one-run samples broadcast beside the resampled ones
            got = dict(zip(many, xs, strict=True))
            batch = xs[0].shape[:-1]
            full = [got[i] if i in got else np.broadcast_to(np.asarray(x, float), (*batch, len(x)))
                    for i, x in enumerate(samples)]
            return statistic(*full, axis=axis)
    res = bootstrap(tuple(samples[i] for i in many), stat, n_resamples=n_boot, vectorized=True,
                    paired=False, confidence_level=LEVEL, method="percentile",
                    rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def iqm_interval(runs: list[np.ndarray], n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float, float]:
    """``(IQM, lo, hi)`` of ``runs`` (one array of runs per task): :func:`iqm` and its stratified
    bootstrap percentile interval at :data:`LEVEL` (each task's runs resampled apart), what
    ``rliable.library.get_interval_estimates(..., aggregate_iqm)`` gives."""
    runs = [np.asarray(x, float) for x in runs]
    lo, hi = _interval(runs, lambda *xs, axis=-1: iqm(list(xs), axis=axis), n_boot, seed)
    return float(iqm(runs)), lo, hi


def poi_interval(x: list[np.ndarray], y: list[np.ndarray], n_boot: int = N_BOOT, seed: int = 0
                 ) -> tuple[float, float, float]:
    """``(P(X > Y), lo, hi)`` over the tasks of ``x`` and ``y`` (one array of runs per task each):
    :func:`probability_of_improvement` and its stratified bootstrap percentile interval (X's and
    Y's runs of each task resampled independently, as ``rliable``'s
    ``StratifiedIndependentBootstrap``)."""
    x = [np.asarray(a, float) for a in x]
    y = [np.asarray(b, float) for b in y]
    k = len(x)
    lo, hi = _interval(x + y, lambda *zs, axis=-1: probability_of_improvement(list(zs[:k]), list(zs[k:])),
                       n_boot, seed)
    return float(probability_of_improvement(x, y)), lo, hi


def across_tasks(frame: pd.DataFrame, baseline: str | None = None, n_boot: int = N_BOOT, seed: int = 0
                 ) -> pd.DataFrame:
    """Per optimizer: ``iqm``, ``iqm_lo``, ``iqm_hi`` (its normalised scores over the tasks the
    baseline normalises), ``poi``, ``poi_lo``, ``poi_hi`` (its probability of improvement over the
    baseline, over the tasks both ran; the baseline's own row holds 0.5 exactly and no interval),
    ``n_tasks`` and ``n_runs`` (of the IQM), ``poi_tasks`` and ``baseline`` (module docstring). Empty
    without a baseline that ran."""
    cols = ["optimizer", "baseline", "iqm", "iqm_lo", "iqm_hi", "n_tasks", "n_runs", "poi", "poi_lo",
            "poi_hi", "poi_tasks"]
    sc = run_scores(frame, baseline)
    if sc is None:
        return pd.DataFrame(columns=cols)
    base = sc.runs[sc.baseline]
    rows = []
    for opt in sorted(sc.runs):
        mine = sc.runs[opt]
        norm = [mine[t] for t in sorted(mine) if sc.normalised[t] and len(mine[t])]
        if norm:
            point, lo, hi = iqm_interval(norm, n_boot, seed)
        else:
            point, lo, hi = math.nan, math.nan, math.nan
        shared = [t for t in sorted(mine) if len(mine[t]) and len(base.get(t, ()))]
        if opt == sc.baseline:
            poi, plo, phi = 0.5, math.nan, math.nan
        elif shared:
            poi, plo, phi = poi_interval([mine[t] for t in shared], [base[t] for t in shared], n_boot, seed)
        else:
            poi, plo, phi = math.nan, math.nan, math.nan
        rows.append({"optimizer": opt, "baseline": sc.baseline, "iqm": point, "iqm_lo": lo, "iqm_hi": hi,
                     "n_tasks": len(norm), "n_runs": int(sum(len(x) for x in norm)), "poi": poi,
                     "poi_lo": plo, "poi_hi": phi, "poi_tasks": len(shared)})
    return pd.DataFrame(rows, columns=cols)


def stats_note(frame: pd.DataFrame, baseline: str | None = None) -> str:
    """The report's sentence under the across-task table: the baseline, how each task is scored, the
    tasks the IQM leaves out, and the method ("" when there is no table)."""
    sc = run_scores(frame, baseline)
    if sc is None:
        return ""
    kinds = sorted(set(sc.kinds.values()))
    scored = kinds[0] if len(kinds) == 1 else "each task by what ranks it: " + "; ".join(
        f"{t}: {k}" for t, k in sorted(sc.kinds.items()))
    left = [t for t, ok in sorted(sc.normalised.items()) if not ok]
    out = (f"Baseline optimizer: {sc.baseline}. A run is one seed of an optimizer's selected "
           f"configuration on a task; its normalised score is its {scored} (1 = the baseline; a run "
           f"that did not reach the target or finish scores 0). IQM: the 25%-trimmed mean of all runs "
           f"pooled over tasks; P(beats {sc.baseline}): the probability that the optimizer beats "
           f"{sc.baseline} on a random task and a random seed of each (Mann–Whitney, ties ½). "
           f"Intervals: 95% stratified bootstrap ({N_BOOT:,} resamples of the runs within each task, "
           f"percentile), as in Agarwal et al. 2021 (rliable).")
    if left:
        out += (f" Left out of the IQM: {', '.join(left)} ({sc.baseline} did not reach the target on "
                f"half its seeds or more there, so it gives no reference).")
    return out
