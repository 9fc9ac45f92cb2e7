"""Scoring across tasks: the performance profile of the tuned times-to-result and AlgoPerf's score.

The tuned times come from :func:`reports.protocol.tuned_time_to_result` under the frame's rule
(:func:`reports.protocol.scoring`). Then, per rule:

* ``harness``: the profile (Dolan & Moré 2002) of the times as they are: ρ_o(τ) = the fraction of
  tasks on which optimizer ``o``'s time is at most τ × the fastest optimizer's; τ from 1 to
  ``max(4, 1.1 ×`` the largest finite ratio``)``. No cap, no score.
* ``algoperf`` (AlgoPerf's ``scoring/performance_profile.py`` and ``score_submissions.py``): a
  time more than :data:`ALGOPERF_MAX_TAU` × the task's fastest counts as not solved (``inf``; a
  time of exactly 4× stays); the profile is taken on :data:`ALGOPERF_TAU_POINTS` evenly spaced τ
  in ``[1, 4]``; the **score** of an optimizer is the trapezoidal integral of its profile over
  those τ divided by the interval's length (3), so 1.0 = fastest on every task, 0 = solved none.

Both: the denominator of ρ is the number of tasks; a task that no optimizer solved counts as
unsolved for all of them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports import protocol
from reports.objectives import objective

__all__ = ["ALGOPERF_MAX_TAU", "ALGOPERF_TAU_POINTS", "algoperf_scores", "performance_profile",
           "profile_times", "score_note", "shows_score"]

#: Why a sweep of one task shows no AlgoPerf score (:func:`score_note`).
ONE_TASK_NOTE = ("AlgoPerf score left out: the sweep has one task, and over one task the score is only "
                 "(4 − r)/3 of each optimizer's time ratio r to the fastest (0 above 4×), not a "
                 "summary across tasks; the tuned time-to-result figure shows the times themselves. "
                 "A sweep of two tasks or more shows it.")

#: AlgoPerf: times above this multiple of the task's fastest are unsolved; τ's upper end.
ALGOPERF_MAX_TAU = 4.0
#: AlgoPerf: how many evenly spaced τ in ``[1, ALGOPERF_MAX_TAU]`` the score integrates over.
ALGOPERF_TAU_POINTS = 100


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
    times = profile_times(frame, rule)
    if times.empty:
        return pd.DataFrame(columns=["optimizer", "tau", "rho"])
    best = times.min(axis=1)
    ratios = times.div(best.where(np.isfinite(best)), axis=0)  # nan row where nobody solved
    taus = _taus(rule, ratios.to_numpy()) if taus is None else np.asarray(taus, float)
    n_tasks = len(times)
    rows = []
    for opt in times.columns:
        r = ratios[opt].to_numpy()
        solved = np.isfinite(r)
        for tau in taus:
            rows.append({"optimizer": opt, "tau": float(tau),
                         "rho": float(np.sum(solved & (r <= tau)) / n_tasks)})
    return pd.DataFrame(rows, columns=["optimizer", "tau", "rho"])


def algoperf_scores(frame: pd.DataFrame) -> pd.Series:
    """AlgoPerf's score per optimizer (module docstring), always by the ``algoperf`` rule; empty
    when the sweep has no target."""
    p = performance_profile(frame, rule="algoperf")
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
