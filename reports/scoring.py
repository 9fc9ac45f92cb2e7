"""Scoring across tasks: the performance profile of the tuned times-to-result and AlgoPerf's score.

The tuned times come from :func:`reports.protocol.tuned_time_to_result` under the frame's rule
(:func:`reports.protocol.scoring`). Then, per rule:

* ``harness``: the profile (Dolan & Moré 2002) of the times as they are: ρ_o(τ) = the fraction of
  tasks on which optimizer ``o``'s time is at most τ × the fastest optimizer's; τ from 1 to
  ``max(4, 1.1 ×`` the largest finite ratio``)``. No cap, no score.
* ``algoperf`` (AlgoPerf's ``scoring/performance_profile.py`` and ``score_submissions.py``): a
  time more than :data:`ALGOPERF_MAX_TAU` × the task's fastest counts as not solved (``inf``; a
  time of exactly 4× stays: ``compute_performance_profiles``' ``df > 4 * best_scores``); the
  profile is taken on :data:`ALGOPERF_TAU_POINTS` evenly spaced τ in ``[1, 4]`` (``rho``: ratio
  ``<= tau``); the **score** of an optimizer is the trapezoidal integral of its profile over those
  τ divided by the interval's length (3) (``compute_leaderboard_score(..., normalize=True)``), so
  1.0 = fastest on every task, 0 = solved none.

Both, as AlgoPerf's ``compute_performance_profiles`` computes them: the ratio to the task's
fastest is ``df.update(df.div(df.min(axis=0), axis=1))``, and ``DataFrame.update`` skips NaN, so a
``0 / 0`` ratio (a time of 0 where the fastest is 0) keeps the time itself, 0, and counts as solved
at every τ (``0 <= tau``), while any other time on that task is ``t / 0 = inf`` (under
``algoperf`` already ``inf`` by the cap, ``t > 4 × 0``), unsolved (:func:`ratios`); ``inf / inf``
keeps ``inf``: a task that no optimizer solved counts as unsolved for all of them. (A
target the initial parameters already meet gives no 0 in a harness sweep: :mod:`harness.train.track`
counts it at the first evaluation after training starts that meets it, as AlgoPerf's ``submission_runner``
evaluates first after an update; a 0 comes from a table written otherwise, e.g. runs logged before
that rule.)

**The denominator** of ρ is the number of tasks in the sweep (:func:`denominator_note`). AlgoPerf's
``rho`` divides by its fixed ``NUM_BASE_WORKLOADS`` (8; its table is cut to ``BASE_WORKLOADS``,
and ``NUM_VARIANT_WORKLOADS`` is 0, held-out variants only filtering their base workload), so that
a submission is charged for the workloads it was not run on; a sweep chooses its own tasks, and
dividing by 8 would only scale every optimizer's profile and score by (tasks / 8), so the harness
divides by what it ran. Within the sweep the charge stays: a task an optimizer has no time on
counts as unsolved for it (:func:`profile_times` fills it with ``inf``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports import protocol
from reports.objectives import objective

__all__ = ["ALGOPERF_MAX_TAU", "ALGOPERF_NUM_BASE_WORKLOADS", "ALGOPERF_TAU_POINTS", "algoperf_scores",
           "denominator_note", "performance_profile", "profile_of", "profile_times", "ratios",
           "score_note", "scores_of", "shows_score"]

#: Why a sweep of one task shows no AlgoPerf score (:func:`score_note`).
ONE_TASK_NOTE = ("AlgoPerf score left out: the sweep has one task, and over one task the score is only "
                 "(4 − r)/3 of each optimizer's time ratio r to the fastest (0 above 4×), not a "
                 "summary across tasks; the tuned time-to-result figure shows the times themselves. "
                 "A sweep of two tasks or more shows it.")

#: AlgoPerf: times above this multiple of the task's fastest are unsolved; τ's upper end.
ALGOPERF_MAX_TAU = 4.0
#: AlgoPerf: how many evenly spaced τ in ``[1, ALGOPERF_MAX_TAU]`` the score integrates over.
ALGOPERF_TAU_POINTS = 100
#: AlgoPerf's ``NUM_BASE_WORKLOADS``: the fixed denominator of its ρ (:func:`denominator_note`).
ALGOPERF_NUM_BASE_WORKLOADS = 8


def profile_times(frame: pd.DataFrame, rule: str | None = None) -> pd.DataFrame:
    """Task × optimizer table of tuned time-to-result by ``rule`` (default the frame's; a missing
    pair is ``inf``); under ``algoperf`` a time above 4× the task's fastest is ``inf``. Empty when
    the sweep has no target."""
    if objective(frame).target_metric is None:
        return pd.DataFrame()
    rule = protocol.scoring(frame) if rule is None else rule
    t = protocol.tuned_time_to_result(frame, rule)
    if t.empty:
        return pd.DataFrame()
    times = t.pivot(index="task", columns="optimizer", values="seconds").fillna(np.inf)
    if rule == "algoperf":
        best = times.min(axis=1)
        times = times.mask(times.gt(ALGOPERF_MAX_TAU * best, axis=0), np.inf)
    return times


def ratios(times: pd.DataFrame) -> pd.DataFrame:
    """Each time over its task's fastest, as AlgoPerf's ``df.update(df.div(best))`` gives it (the
    module docstring): a NaN ratio (``0 / 0``, ``inf / inf``) keeps the time itself, so a time of 0
    on a task whose fastest is 0 stays 0 (solved at every τ) and ``inf`` stays ``inf`` (unsolved);
    ``t / 0`` for ``t > 0`` is ``inf``. Example: times ``{x: 0, y: 2}`` on one task give ratios
    ``{x: 0, y: inf}``; ``{x: 1, y: 2}`` give ``{x: 1, y: 2}``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = times.div(times.min(axis=1), axis=0)
    return r.where(r.notna(), times)


def denominator_note(frame: pd.DataFrame) -> str:
    """The sentence under a leaderboard that shows AlgoPerf's score: which denominator it uses and
    why (module docstring), ``""`` when no score is shown."""
    if not shows_score(frame):
        return ""
    n = profile_times(frame, "algoperf").shape[0]
    return (f"AlgoPerf score: the performance profile's denominator is this sweep's {n} tasks. "
            f"AlgoPerf's scoring divides by its fixed {ALGOPERF_NUM_BASE_WORKLOADS} base workloads, "
            f"charging a submission for workloads it did not run; a sweep chooses its tasks, and "
            f"dividing by {ALGOPERF_NUM_BASE_WORKLOADS} would only scale every score by "
            f"{n}/{ALGOPERF_NUM_BASE_WORKLOADS}.")


def _taus(rule: str, ratios: np.ndarray) -> np.ndarray:
    if rule == "algoperf":
        return np.linspace(1.0, ALGOPERF_MAX_TAU, ALGOPERF_TAU_POINTS)
    finite = ratios[np.isfinite(ratios)]
    return np.linspace(1.0, max(4.0, 1.1 * float(finite.max()) if finite.size else 4.0), 200)


def performance_profile(frame: pd.DataFrame, taus: np.ndarray | None = None,
                        rule: str | None = None) -> pd.DataFrame:
    """ρ_o(τ) of every optimizer (module docstring) by ``rule`` (default the frame's), at ``taus``
    (default the rule's grid). Columns ``optimizer, tau, rho``."""
    rule = protocol.scoring(frame) if rule is None else rule
    return profile_of(profile_times(frame, rule), rule, taus)


def profile_of(times: pd.DataFrame, rule: str, taus: np.ndarray | None = None) -> pd.DataFrame:
    """ρ_o(τ) of a task × optimizer table of times (:func:`profile_times`' form: ``inf`` unsolved;
    under ``algoperf`` already capped at 4×) by ``rule``: the ratios of :func:`ratios`, the
    fraction of the table's tasks solved within τ. Columns ``optimizer, tau, rho``."""
    if times.empty:
        return pd.DataFrame(columns=["optimizer", "tau", "rho"])
    r = ratios(times)
    taus = _taus(rule, r.to_numpy()) if taus is None else np.asarray(taus, float)
    n_tasks = len(times)
    rows = []
    for opt in times.columns:
        x = r[opt].to_numpy()
        solved = np.isfinite(x)
        for tau in taus:
            rows.append({"optimizer": opt, "tau": float(tau),
                         "rho": float(np.sum(solved & (x <= tau)) / n_tasks)})
    return pd.DataFrame(rows, columns=["optimizer", "tau", "rho"])


def algoperf_scores(frame: pd.DataFrame) -> pd.Series:
    """AlgoPerf's score per optimizer (module docstring), always by the ``algoperf`` rule; empty
    when the sweep has no target."""
    return scores_of(performance_profile(frame, rule="algoperf"))


def scores_of(p: pd.DataFrame) -> pd.Series:
    """AlgoPerf's score of each optimizer of a profile (:func:`profile_of` under ``algoperf``): the
    trapezoidal integral of ρ over its τ grid / the grid's length (AlgoPerf's
    ``compute_leaderboard_score(..., normalize=True)``)."""
    if p.empty:
        return pd.Series(dtype=float, name="score")
    out = {}
    for opt, g in p.groupby("optimizer", sort=True):
        tau, rho = g["tau"].to_numpy(), g["rho"].to_numpy()
        area = float(np.sum((rho[1:] + rho[:-1]) * np.diff(tau)) / 2)  # the trapezoidal rule
        out[opt] = area / (tau.max() - tau.min())
    return pd.Series(out, name="score", dtype=float)


def shows_score(frame: pd.DataFrame) -> bool:
    """Whether the leaderboard shows AlgoPerf's score: the frame's rule is ``algoperf``, the sweep
    has a target and **more than one task** (over one task the profile is degenerate:
    :data:`ONE_TASK_NOTE`)."""
    return (protocol.scoring(frame) == "algoperf" and objective(frame).target_metric is not None
            and profile_times(frame, "algoperf").shape[0] > 1)


def score_note(frame: pd.DataFrame) -> str:
    """The report's sentence about a score it leaves out (:data:`ONE_TASK_NOTE` for a sweep of one
    task under ``algoperf``), else ``""``."""
    if protocol.scoring(frame) != "algoperf" or shows_score(frame):
        return ""
    return ONE_TASK_NOTE if profile_times(frame, "algoperf").shape[0] == 1 else ""
