"""The benchmark protocol's statistics: selection on validation, reporting on test, tuning curves,
tuned time-to-result, honest intervals and paired comparisons. Pure pandas/numpy/scipy on the tidy
frame of :mod:`reports.frame`; every figure and table of the protocol is a view of these tables.

Definitions (the numbers a report shows follow from these and nothing else):

* **Configuration** (= a *trial* of a tuning budget): a trial's spec minus its seed, i.e. one
  ``config_id`` of one optimizer on one task. Its **value** on a split is the mean over its seeds of
  the final metric on that split (``final/valid_*`` for validation, ``test/*`` for test; under
  ``selection: {by: best}``, :func:`reports.selection.select_by`, the validation value is each
  seed's best evaluation during training, ``best/valid_*``). A seed
  that did not finish (diverged, failed) contributes the *worst* finite value of that metric seen
  on the task (any optimizer, any configuration), so a configuration that diverges counts as a
  bad draw of the budget rather than vanishing from it. A configuration with no finite value
  anywhere on its task is left out. Selection always reads validation; test is only reported.
* **Selection** inside a set of configurations: the best validation value (``max`` for accuracy,
  ``min`` for loss); ties are broken by ``config_id`` (ascending), so selection is deterministic.
* **Tuning curve** (Dodge et al. 2019, "Show Your Work: Improved Reporting of Experimental
  Results", EMNLP): for an optimizer with ``N`` observed configurations, the expected best
  validation value after ``k`` configurations, and the expected *test* value of the configuration
  that validation selects among those ``k``, for ``k = 1..N``; computed exactly from order
  statistics of the ``N`` observed values (:func:`selection_weights`). **Draws are without
  replacement** by default (a random ``k``-subset of the ``N`` configurations: "had I run only
  ``k`` of them"), tested against brute-force enumeration of all ``k``-subsets; Dodge et al.'s own
  formula draws *with* replacement (``k`` i.i.d. draws from the empirical distribution,
  ``F̂(v)^k``) and is available as ``replace=True``, tested against enumeration of all ``N^k``
  ordered draws. The band is a bootstrap percentile band: the ``N`` configurations resampled with
  replacement ``n_boot`` times (fixed seed), the exact curve computed on each resample.
  A **self-tuning** optimizer (a ``tuning: none`` entry, AlgoPerf's self-tuning track) has one
  configuration and no budget to spend: its "curve" is its configuration's value at every ``k``
  (drawn as a horizontal line), so a reader sees at which ``k`` a tuned optimizer overtakes it.
* **Tuned time-to-result**, by one of two rules (:data:`SCORING`; config ``scoring:``, ``report
  --scoring``; the frame says which in ``frame.attrs[SCORING_ATTR]``). ``harness`` (the default, the
  harness's own rule): per task and optimizer, the smallest configuration time, where a
  configuration's time is the median ``convergence/seconds_to_target`` over its seeds that reached
  the target, and ``inf`` ("not reached") when fewer than :data:`SOLVED_FRACTION` of its seeds
  reached it. ``algoperf`` (AlgoPerf's external-tuning rule, Dahl et al. 2023,
  ``scoring/performance_profile.py``): each seed plays one of AlgoPerf's studies, its trials being
  the optimizer's configurations run with that seed; a study's time is its fastest trial's
  ``seconds_to_target`` (``inf`` when none of them reached the target; a trial that diverged after
  reaching it counts, as in AlgoPerf), and the tuned time is the median over studies (``inf`` once
  half or more are ``inf``). Under both rules a time of 0 (a target met at the evaluation at
  initialisation, in runs logged before :mod:`harness.train.track` counted it at the first
  evaluation after training starts, or in another tool's table) is a time like any other: reached,
  and the fastest. The performance profiles, the 4× cap, how a 0 divides (as AlgoPerf's code:
  solved at every τ) and AlgoPerf's score are :mod:`reports.scoring`.
* **Intervals across seeds** (:func:`seed_interval`): with fewer than :data:`MIN_SEEDS` seeds the
  min–max range of the seeds (the table says so); with more, a 95% bootstrap percentile interval of
  the mean. Both stay inside the metric's range (no t-interval running past 1.0).
* **"A beats B"** (:func:`paired_comparison`): a **paired bootstrap** over seeds of the mean
  per-seed difference of the test metric between the validation-selected configurations of A and
  B (pairs = equal seed numbers: same initialisation and data order), 95% percentile interval;
  marked only when it excludes 0 in A's favour *and* there are at least :data:`MIN_SEEDS` pairs
  (with 2 pairs a bootstrap "supports" any pair whose two differences share a sign).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from harness.core import ties
from harness.core.names import M_SECONDS_TO_TARGET, M_STEPS_TO_TARGET, SCORING_RULES
from reports.frame import PROTOCOL_ONE_SPLIT, SCORING_ATTR, per_frame, summaries, tuning_rows
from reports.labels import SELF_TUNING, is_self_tuning, is_tuned
from reports.objectives import objective
from reports.selection import best_configs, select_by, selection_positions

__all__ = [
    "MIN_SEEDS",
    "SCORING",
    "SOLVED_FRACTION",
    "brute_force_curve",
    "config_values",
    "csv_rows",
    "expected_best",
    "headline",
    "paired_comparison",
    "pairwise_comparisons",
    "scoring",
    "seed_interval",
    "selection_weights",
    "tuned_time_to_result",
    "tuning_curve",
    "tuning_curves",
]

#: Below this many seeds intervals are min–max and no "A beats B" is marked (the rank rule's own
#: threshold, :data:`harness.core.ties.MIN_SEEDS`: one number for both).
MIN_SEEDS = ties.MIN_SEEDS
#: A configuration reaches the target when at least this fraction of its seeds reached it.
SOLVED_FRACTION = 0.5
#: Confidence level of intervals, bands and comparisons.
LEVEL = 0.95
#: Bootstrap resamples (tuning-curve bands; seed intervals; paired comparisons).
N_BOOT_BAND = 1000
N_BOOT = 10_000


# ---------------------------------------------------------------------------------------------
# Order statistics
# ---------------------------------------------------------------------------------------------
def _log_comb(n: np.ndarray | float, k: np.ndarray | float) -> np.ndarray:
    from scipy.special import gammaln

    return gammaln(np.asarray(n, float) + 1) - gammaln(np.asarray(k, float) + 1) - gammaln(
        np.asarray(n, float) - np.asarray(k, float) + 1
    )


def selection_weights(n: int, k: int, replace: bool = False) -> np.ndarray:
    """``float64 (n,)``: entry ``r`` is the probability that the ``r``-th best (0-based) of ``n``
    ranked configurations is the best of ``k`` random draws.

    Without replacement (a uniform ``k``-subset, ``1 <= k <= n``): ``C(n-1-r, k-1) / C(n, k)``.
    With replacement (``k`` i.i.d. uniform draws, any ``k >= 1``): ``((n-r)/n)^k - ((n-r-1)/n)^k``
    (Dodge et al. 2019, eq. 1, on the empirical distribution). The weights sum to 1.

    Raises:
      ValueError: ``n < 1``, ``k < 1``, or ``k > n`` without replacement.
    """
    if n < 1 or k < 1 or (not replace and k > n):
        raise ValueError(f"need 1 <= k{' <= n' if not replace else ''}, got n={n}, k={k}")
    r = np.arange(n, dtype=float)
    if replace:
        return ((n - r) / n) ** k - ((n - r - 1) / n) ** k
    w = np.zeros(n)
    ok = (n - 1 - r) >= (k - 1)
    w[ok] = np.exp(_log_comb(n - 1 - r[ok], k - 1) - _log_comb(n, k))
    return w


def _rank(valid: np.ndarray, mode: str, tiebreak: np.ndarray | None) -> np.ndarray:
    """Indices best-first by validation value; ties by ``tiebreak`` (default: position)."""
    tb = np.arange(len(valid)) if tiebreak is None else np.asarray(tiebreak)
    key = -valid if mode == "max" else valid
    return np.lexsort((tb, key))


def expected_best(valid: Sequence[float], test: Sequence[float] | None = None, mode: str = "max",
                  ks: Sequence[int] | None = None, replace: bool = False,
                  tiebreak: Sequence | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact expected best validation value of ``k`` draws from the ``N`` observed configurations,
    and the expected test value of the configuration validation selects, for each ``k`` in ``ks``
    (default ``1..N``).

    Args:
      valid: ``(N,)`` validation values (finite). test: ``(N,)`` test values (``nan`` allowed: the
        expectation is then ``nan`` wherever a ``nan`` has positive weight); ``None`` → all ``nan``.
      mode: ``"max"`` (accuracy) or ``"min"`` (loss).
      replace: draws with replacement (Dodge et al.'s formula) instead of ``k``-subsets.
      tiebreak: ``(N,)`` sort keys breaking validation ties (smaller first), e.g. ``config_id``.

    Returns:
      ``(E[best valid], E[test of the valid-best])``, each ``float64 (len(ks),)``.
    """
    v = np.asarray(valid, float)
    t = np.full(len(v), np.nan) if test is None else np.asarray(test, float)
    n = len(v)
    ks = list(range(1, n + 1)) if ks is None else list(ks)
    order = _rank(v, mode, None if tiebreak is None else np.asarray(tiebreak))
    vs, ts = v[order], t[order]
    ev, et = np.empty(len(ks)), np.empty(len(ks))
    for i, k in enumerate(ks):
        w = selection_weights(n, k, replace)
        ev[i] = float(w @ vs)
        pos = w > 0
        et[i] = float(w[pos] @ ts[pos])
    return ev, et


def brute_force_curve(valid: Sequence[float], test: Sequence[float], mode: str = "max",
                      replace: bool = False, tiebreak: Sequence | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`expected_best` by enumeration (every ``k``-subset, or every ordered ``k``-tuple with
    replacement), for testing on small ``N`` only (cost ``C(N, k)`` or ``N^k``)."""
    v, t = np.asarray(valid, float), np.asarray(test, float)
    n = len(v)
    tb = np.arange(n) if tiebreak is None else np.asarray(tiebreak)
    sign = -1.0 if mode == "max" else 1.0
    ev, et = [], []
    for k in range(1, n + 1):
        draws = (itertools.product(range(n), repeat=k) if replace
                 else itertools.combinations(range(n), k))
        bv, bt, m = 0.0, 0.0, 0
        for d in draws:
            best = min(d, key=lambda i: (sign * v[i], tb[i]))
            bv, bt, m = bv + v[best], bt + t[best], m + 1
        ev.append(bv / m)
        et.append(bt / m)
    return np.array(ev), np.array(et)


#: A tuning curve has a point at every k up to this many configurations; beyond, at this many k's
#: (:func:`curve_ks`): 5,000 configurations at every k cost 48 s of CPU per curve (its bootstrap:
#: 1,000 resamples x a 5,000 x 5,000 weight matrix), for a line no figure can show finer.
MAX_CURVE_POINTS = 256


def curve_ks(n: int, most: int = MAX_CURVE_POINTS) -> list[int]:
    """The ``k`` of a tuning curve of ``n`` configurations: ``1..n`` when ``n <= most``; else every
    ``k`` up to ``most // 4``, then ``k``'s spaced evenly on a log scale up to ``n`` (``n`` included),
    at most ``most`` in all, increasing."""
    if n <= most:
        return list(range(1, n + 1))
    head = list(range(1, most // 4 + 1))
    tail = np.unique(np.round(np.geomspace(head[-1] + 1, n, most - len(head))).astype(int))
    return head + [int(k) for k in tail if k > head[-1]]


def tuning_curve(valid: Sequence[float], test: Sequence[float] | None, mode: str = "max",
                 replace: bool = False, tiebreak: Sequence | None = None, n_boot: int = N_BOOT_BAND,
                 level: float = LEVEL, seed: int = 0) -> pd.DataFrame:
    """:func:`expected_best` for ``k = 1..N`` with a bootstrap percentile band.

    Returns columns ``k, valid, valid_lo, valid_hi, test, test_lo, test_hi``, a row per ``k`` of
    :func:`curve_ks` (every ``k`` up to :data:`MAX_CURVE_POINTS` configurations). The band
    at ``level``: resample the ``N`` configurations with replacement ``n_boot`` times
    (``np.random.default_rng(seed)``), compute the exact curve on each resample, take the
    ``(1 ± level)/2`` quantiles per ``k``. ``N = 1`` gives a band of width 0.
    """
    v = np.asarray(valid, float)
    t = np.full(len(v), np.nan) if test is None else np.asarray(test, float)
    tb = np.arange(len(v)) if tiebreak is None else np.asarray(tiebreak)
    n = len(v)
    ks = curve_ks(n)
    ev, et = expected_best(v, t, mode, ks=ks, replace=replace, tiebreak=tb)
    W = np.stack([selection_weights(n, k, replace) for k in ks])  # (k, rank)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    bv, bt = np.empty((n_boot, len(ks))), np.empty((n_boot, len(ks)))
    for b in range(n_boot):
        vi, ti, tbi = v[idx[b]], t[idx[b]], tb[idx[b]]
        order = _rank(vi, mode, tbi)
        bv[b] = W @ vi[order]
        bt[b] = W @ ti[order]
    q = [(1 - level) / 2, (1 + level) / 2]
    vlo, vhi = np.quantile(bv, q, axis=0)
    if np.isnan(t).any():
        tlo = thi = np.full(len(ks), np.nan)
    else:
        tlo, thi = np.quantile(bt, q, axis=0)
    return pd.DataFrame({"k": np.asarray(ks), "valid": ev, "valid_lo": vlo, "valid_hi": vhi,
                         "test": et, "test_lo": tlo, "test_hi": thi})


# ---------------------------------------------------------------------------------------------
# Configurations of a sweep
# ---------------------------------------------------------------------------------------------
@per_frame
def config_values(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, optimizer, config_id) with its validation and test value (module
    docstring: mean over seeds, non-finished seeds imputed with the task's worst value).

    Columns: ``task, optimizer, config_id, config, n_seeds, n_finished, valid, test, seconds,
    n_reached, metric, test_metric, mode, protocol, self_tuning, tuned``; ``seconds`` is the
    configuration's time to the validation target (``inf`` when fewer than :data:`SOLVED_FRACTION`
    of its seeds reached it). ``test`` is ``nan`` for runs from before the three-split protocol.
    ``self_tuning``: a ``tuning: none`` entry yields it; ``tuned``: an entry that tunes does (both
    when the two kinds of entry yield the same trials).
    """
    s = tuning_rows(summaries(frame))  # an audit trial is not one of a configuration's seeds
    by = select_by(frame)  # valid: the final value, or the best during training (selection: best)
    cols = ["task", "optimizer", "config_id", "config", "n_seeds", "n_finished", "valid", "test",
            "seconds", "n_reached", "metric", "test_metric", "mode", "protocol", "self_tuning", "tuned"]
    if s.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for task, st in s.groupby("task", sort=True):
        rows += _task_config_values(frame, task, st, by)
    return pd.DataFrame(rows, columns=cols)


def _task_config_values(frame: pd.DataFrame, task: str, st: pd.DataFrame, by: str) -> list[dict]:
    """:func:`config_values`' rows of one task (``st``: its summary rows)."""
    obj = objective(frame, task)
    worse = min if obj.mode == "max" else max
    fin_t = st[st["status"] == "finished"]
    vcol = obj.selected(by)
    finite_v = fin_t[vcol].dropna()
    finite_t = fin_t[obj.test].dropna()
    worst_v = worse(finite_v) if len(finite_v) else math.nan
    worst_t = worse(finite_t) if len(finite_t) else math.nan
    # per row, as numpy arrays; each configuration then reads its rows' positions (a pandas
    # slice per configuration is slow at thousands of configurations). Means and medians are
    # numpy's over the same values in the same order, equal to Series.mean/median's.
    fin = (st["status"] == "finished").to_numpy()
    vals, tests = st[vcol].to_numpy(float), st[obj.test].to_numpy(float)
    v_all = np.where(fin & ~np.isnan(vals), vals, worst_v)
    t_all = np.where(fin & ~np.isnan(tests), tests, worst_t)
    secs_all = st[M_SECONDS_TO_TARGET].to_numpy(float)
    reached_all = fin & ~(np.isnan(secs_all) & st[M_STEPS_TO_TARGET].isna().to_numpy())
    one_split_all = (st["protocol"] == PROTOCOL_ONE_SPLIT).to_numpy()
    protocols, configs = st["protocol"].to_numpy(), st["config"].to_numpy()
    tuning = st["tuning"] if "tuning" in st else pd.Series([None] * len(st), dtype=object)
    self_all = tuning.map(is_self_tuning).to_numpy(bool)
    tuned_all = tuning.map(is_tuned).to_numpy(bool)
    rows = []
    for (opt, cid), idx in sorted(st.groupby(["optimizer", "config_id"], sort=True).indices.items()):
        v, t, reached = v_all[idx], t_all[idx], reached_all[idx]
        secs = secs_all[idx][reached & ~np.isnan(secs_all[idx])]
        one_split = bool(one_split_all[idx].all())
        n, n_reached = len(idx), int(reached.sum())
        solved = n_reached > 0 and n_reached >= SOLVED_FRACTION * n
        rows.append({
            "task": task, "optimizer": opt, "config_id": cid, "config": configs[idx[0]],
            "n_seeds": n, "n_finished": int(fin[idx].sum()),
            "valid": float(v.sum() / n) if not np.isnan(v).any() else math.nan,
            "test": math.nan if one_split or np.isnan(t).any() else float(t.sum() / n),
            "seconds": float(np.median(secs)) if solved and len(secs) else math.inf,
            "n_reached": n_reached, "metric": vcol, "test_metric": obj.test,
            "mode": obj.mode, "protocol": PROTOCOL_ONE_SPLIT if one_split else protocols[idx[0]],
            "self_tuning": bool(self_all[idx].any()), "tuned": bool(tuned_all[idx].any()),
        })
    return rows


#: How the tuning curves draw k of the N configurations (``report --tuning-curves``): ``k``-subsets
#: (the default) or Dodge et al.'s ``k`` draws with replacement; a frame says which in
#: ``frame.attrs[TUNING_DRAWS_ATTR]``.
TUNING_DRAWS = ("without-replacement", "with-replacement")
TUNING_DRAWS_ATTR = "tuning_draws"


def tuning_draws(frame: pd.DataFrame) -> str:
    """The frame's tuning-curve draws, one of :data:`TUNING_DRAWS` (default: without replacement).

    Raises:
      ValueError: the frame names another variant.
    """
    draws = frame.attrs.get(TUNING_DRAWS_ATTR, TUNING_DRAWS[0])
    if draws not in TUNING_DRAWS:
        raise ValueError(f"tuning-curve draws must be one of {', '.join(TUNING_DRAWS)}; got {draws!r}")
    return draws


def tuning_curves(frame: pd.DataFrame, replace: bool | None = None, n_boot: int = N_BOOT_BAND,
                  seed: int = 0) -> pd.DataFrame:
    """:func:`curves_of_tunings`, computed once per frame at the defaults (the figures, the
    interactive view, the CSV and the compute axis each ask for it)."""
    if replace is None and n_boot == N_BOOT_BAND and seed == 0:
        return _default_tuning_curves(frame)
    return curves_of_tunings(frame, replace, n_boot, seed)


@per_frame
def _default_tuning_curves(frame: pd.DataFrame) -> pd.DataFrame:
    return curves_of_tunings(frame)


def curves_of_tunings(frame: pd.DataFrame, replace: bool | None = None, n_boot: int = N_BOOT_BAND,
                      seed: int = 0) -> pd.DataFrame:
    """:func:`tuning_curve` of every (task, optimizer) over its configurations' values (those an
    entry that tunes yields), and one row per self-tuning configuration (a ``tuning: none``
    entry's: ``k = 1``, its value, a band of width 0), which a figure draws at every ``k``.

    Columns ``task, optimizer, n_configs, k, valid, valid_lo, valid_hi, test, test_lo, test_hi,
    metric, test_metric, mode, protocol, self_tuning, label``; ``label`` names the line: the
    optimizer, or ``"prodigy (self-tuning)"`` (the configuration's label when the optimizer has
    several self-tuning configurations on the task).
    """
    if replace is None:  # as the frame says (report --tuning-curves)
        replace = tuning_draws(frame) == "with-replacement"
    cv = config_values(frame)
    parts = []
    for (task, opt), g in cv.groupby(["task", "optimizer"], sort=True):
        g = g[g["valid"].notna()]
        own = g[g["self_tuning"]]
        g = g[g["tuned"]]
        lines = [(g, opt, False)] if len(g) else []
        lines += [(own.iloc[[i]], f"{opt} {SELF_TUNING}" if len(own) == 1 else own["config"].iloc[i], True)
                  for i in range(len(own))]
        for g, label, self_tuning in lines:
            c = tuning_curve(g["valid"], g["test"], g["mode"].iloc[0], replace=replace,
                             tiebreak=np.argsort(np.argsort(g["config_id"].to_numpy())), n_boot=n_boot,
                             seed=seed)
            c.insert(0, "n_configs", len(g))
            c.insert(0, "optimizer", opt)
            c.insert(0, "task", task)
            for col in ("metric", "test_metric", "mode", "protocol"):
                c[col] = g[col].iloc[0]
            c["self_tuning"] = self_tuning
            c["label"] = label
            parts.append(c)
    cols = ["task", "optimizer", "n_configs", "k", "valid", "valid_lo", "valid_hi", "test", "test_lo",
            "test_hi", "metric", "test_metric", "mode", "protocol", "self_tuning", "label"]
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


#: The rules of tuned time-to-result (module docstring): the harness's own (default) and AlgoPerf's.
SCORING = SCORING_RULES


def scoring(frame: pd.DataFrame) -> str:
    """The frame's tuned-time rule, one of :data:`SCORING` (default ``harness``).

    Raises:
      ValueError: the frame names another rule.
    """
    rule = frame.attrs.get(SCORING_ATTR) or SCORING[0]
    if rule not in SCORING:
        raise ValueError(f"scoring must be one of {', '.join(SCORING)}; got {rule!r}")
    return rule


def tuned_time_to_result(frame: pd.DataFrame, rule: str | None = None) -> pd.DataFrame:
    """Per (task, optimizer): its tuned time to the validation target by ``rule`` (module
    docstring; default :func:`scoring` of the frame).

    Columns ``task, optimizer, n_configs, seconds`` (``inf`` = not reached), ``config_id, config``:
    by the ``harness`` rule the fastest configuration (empty when none reached); by ``algoperf``
    the configuration fastest on most seeds (empty when the tuned time is ``inf``), since each seed
    picks its own. Every tie goes to the configuration first in the selection rule's order, the
    leaderboard's (:func:`reports.selection.selection_positions`).
    """
    rule = scoring(frame) if rule is None else rule
    if rule not in SCORING:
        raise ValueError(f"scoring must be one of {', '.join(SCORING)}; got {rule!r}")
    cv = config_values(frame)
    pos = selection_positions(frame).set_index(["task", "optimizer", "config_id"])["position"]
    cv["_position"] = [pos.get(k, len(pos)) for k in zip(cv["task"], cv["optimizer"], cv["config_id"],
                                                          strict=True)]
    per_seed = _study_times(frame, pos) if rule == "algoperf" else None
    rows = []
    for (task, opt), g in cv.groupby(["task", "optimizer"], sort=True):
        if per_seed is None:  # a tie in time: the selection rule's order (the leaderboard's pick)
            g = g.sort_values(["seconds", "_position"], kind="stable")
            best, secs = g.iloc[0], float(g["seconds"].iloc[0])
        else:
            studies = per_seed[(per_seed["task"] == task) & (per_seed["optimizer"] == opt)]
            secs = float(np.median(studies["seconds"])) if len(studies) else math.inf
            wins = studies.loc[studies["config_id"] != "", "config_id"].value_counts()
            order = dict(zip(g["config_id"], g["_position"], strict=True))
            top = sorted((c for c, n in wins.items() if n == wins.max()),
                         key=lambda c: order.get(c, len(order))) if len(wins) else []
            best = g[g["config_id"] == top[0]].iloc[0] if top else g.iloc[0]
        hit = math.isfinite(secs)
        rows.append({"task": task, "optimizer": opt, "n_configs": len(g), "seconds": secs,
                     "config_id": best["config_id"] if hit else "", "config": best["config"] if hit else ""})
    return pd.DataFrame(rows, columns=["task", "optimizer", "n_configs", "seconds", "config_id", "config"])


def _study_times(frame: pd.DataFrame, positions: pd.Series) -> pd.DataFrame:
    """AlgoPerf's studies: per (task, optimizer, seed) the fastest ``seconds_to_target`` of the
    optimizer's trials with that seed (``inf``, ``config_id`` empty: none reached it). As in
    AlgoPerf, whose curves keep the evaluation that reached the target, a trial that reached it and
    diverged later counts; a tie in time goes to the configuration first in the selection rule's
    order (``positions``, :func:`reports.selection.selection_positions`). Columns ``task,
    optimizer, seed, seconds, config_id``."""
    s = summaries(frame)
    rows = []
    for (task, opt, seed), g in s.groupby(["task", "optimizer", "seed"], sort=True):
        hit = g[g[M_SECONDS_TO_TARGET].notna()]
        hit = hit.assign(_position=[positions.get((task, opt, c), len(positions)) for c in hit["config_id"]])
        hit = hit.sort_values([M_SECONDS_TO_TARGET, "_position"], kind="stable")
        rows.append({"task": task, "optimizer": opt, "seed": seed,
                     "seconds": float(hit[M_SECONDS_TO_TARGET].iloc[0]) if len(hit) else math.inf,
                     "config_id": hit["config_id"].iloc[0] if len(hit) else ""})
    return pd.DataFrame(rows, columns=["task", "optimizer", "seed", "seconds", "config_id"])


# ---------------------------------------------------------------------------------------------
# Intervals and comparisons across seeds
# ---------------------------------------------------------------------------------------------
def seed_interval(values: Sequence[float], level: float = LEVEL, n_boot: int = N_BOOT, seed: int = 0
                  ) -> tuple[float, float, float, int, str]:
    """``(mean, lo, hi, n, method)`` of the finite ``values`` (one per seed).

    ``n < MIN_SEEDS``: ``lo, hi`` = min, max, method ``"min–max"``; else a bootstrap percentile
    interval of the mean at ``level`` (``n_boot`` resamples, ``default_rng(seed)``), method
    ``"bootstrap"``. Both lie inside ``[min, max]`` of the values, hence inside the metric's range.
    ``n == 0`` gives ``nan``s.
    """
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], float)
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan, 0, ""
    if n < MIN_SEEDS:
        return float(x.mean()), float(x.min()), float(x.max()), n, "min–max"
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, n, size=(n_boot, n))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(x.mean()), float(lo), float(hi), n, "bootstrap"


def median_interval(values: Sequence[float], level: float = LEVEL, n_boot: int = N_BOOT, seed: int = 0
                    ) -> tuple[float, float, float, int, str]:
    """``(median, lo, hi, n, method)`` of the finite ``values`` (one per seed): time to target's
    one statistic, the same median the summary prints and the tuned times rank (:data:`TTT_STAT`).

    ``n < MIN_SEEDS``: ``lo, hi`` = min, max, method ``"min–max"``; else a bootstrap percentile
    interval of the median at ``level`` (``n_boot`` resamples, ``default_rng(seed)``), method
    ``"bootstrap"``. ``n == 0`` gives ``nan``s.
    """
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], float)
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan, 0, ""
    if n < MIN_SEEDS:
        return float(np.median(x)), float(x.min()), float(x.max()), n, "min–max"
    rng = np.random.default_rng(seed)
    medians = np.median(x[rng.integers(0, n, size=(n_boot, n))], axis=1)
    lo, hi = np.quantile(medians, [(1 - level) / 2, (1 + level) / 2])
    return float(np.median(x)), float(lo), float(hi), n, "bootstrap"


#: Time to target's statistic over an optimizer's seeds that reached the target, everywhere: the
#: summary's "to target", the report's and ``res.leaderboard``'s column, the tuned times.
TTT_STAT = "median"


def paired_comparison(a: pd.Series, b: pd.Series, mode: str = "max", level: float = LEVEL,
                      n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """Paired bootstrap of A − B over the seeds both have (``a``, ``b``: values indexed by seed).

    Returns ``{"n", "diff", "lo", "hi", "a_better"}``: the mean of the per-seed differences
    ``a[s] - b[s]`` (in "better" units: negated for ``mode="min"``), its percentile interval at
    ``level`` from ``n_boot`` resamples of the seed pairs, and whether A is better at that level
    (``lo > 0`` with at least :data:`MIN_SEEDS` pairs).
    """
    both = pd.concat([a.rename("a"), b.rename("b")], axis=1, join="inner").dropna()
    n = len(both)
    sign = 1.0 if mode == "max" else -1.0
    d = sign * (both["a"].to_numpy(float) - both["b"].to_numpy(float))
    if n == 0:
        return {"n": 0, "diff": math.nan, "lo": math.nan, "hi": math.nan, "a_better": False}
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, n, size=(n_boot, n))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return {"n": n, "diff": float(d.mean()), "lo": float(lo), "hi": float(hi),
            "a_better": bool(n >= MIN_SEEDS and lo > 0)}


def headline(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (task, optimizer): the configuration selected on validation (:func:`reports.selection.
    best_configs`) and its **test** metric across seeds with :func:`seed_interval`.

    Columns ``task, optimizer, rank, config_id, config, n_seeds, test_metric, test, test_lo,
    test_hi, test_n, interval, valid_metric, valid, protocol``.
    """
    best = best_configs(frame)
    # one row per configuration and seed, no audit trial: two entries that differ only by a value
    # stated at its default are one configuration (its trials are its seeds, not twice as many)
    s = tuning_rows(summaries(frame))
    rows = []
    for b in best.itertuples():
        obj = objective(frame, b.task)
        g = s[(s["task"] == b.task) & (s["optimizer"] == b.optimizer) & (s["config_id"] == b.config_id)]
        fin = g[g["status"] == "finished"]
        one_split = (g["protocol"] == PROTOCOL_ONE_SPLIT).all()
        mean, lo, hi, n, how = seed_interval(fin[obj.test]) if not one_split else (
            math.nan, math.nan, math.nan, 0, "")
        rows.append({
            "task": b.task, "optimizer": b.optimizer, "rank": b.rank, "config_id": b.config_id,
            "config": b.config, "n_seeds": b.n_seeds, "test_metric": obj.test, "test": mean,
            "test_lo": lo, "test_hi": hi, "test_n": n, "interval": how, "valid_metric": obj.final,
            "valid": float(fin[obj.final].mean()) if fin[obj.final].notna().any() else math.nan,
            "protocol": PROTOCOL_ONE_SPLIT if one_split else g["protocol"].iloc[0],
        })
    return pd.DataFrame(rows)


def pairwise_comparisons(frame: pd.DataFrame) -> pd.DataFrame:
    """Every ordered pair (A, B) of optimizers on a task: :func:`paired_comparison` of the test
    metric of their validation-selected configurations, paired by seed.

    Columns ``task, a, b, n, diff, lo, hi, a_better``.
    """
    h = headline(frame)
    s = tuning_rows(summaries(frame))  # one per seed: a seed twice crashed the pairing (reindex)
    rows = []
    for task, ht in h.groupby("task", sort=True):
        obj = objective(frame, task)
        per = {}
        for r in ht.itertuples():
            g = s[(s["task"] == task) & (s["optimizer"] == r.optimizer) & (s["config_id"] == r.config_id)
                  & (s["status"] == "finished")]
            per[r.optimizer] = g.set_index("seed")[obj.test]
        for a, b in itertools.permutations(sorted(per), 2):
            rows.append({"task": task, "a": a, "b": b, **paired_comparison(per[a], per[b], obj.mode)})
    return pd.DataFrame(rows, columns=["task", "a", "b", "n", "diff", "lo", "hi", "a_better"])


def csv_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The protocol's tables as extra rows of the report's tidy CSV: ``row == "tuning_curve"`` (one
    per task, optimizer and k: columns ``tuning.k``, ``tuning.n_configs``, ``tuning.valid``,
    ``tuning.valid_lo``, ``tuning.valid_hi``, ``tuning.test``, ``tuning.test_lo``,
    ``tuning.test_hi``, ``tuning.metric``, ``tuning.test_metric``, ``tuning.self_tuning``: the row is
    a ``tuning: none`` configuration's value, the same at every k) and ``row == "tuned_time"``
    (one per task and optimizer: ``tuning.seconds`` (``inf`` = not reached), ``tuning.n_configs``,
    ``tuning.rule`` (:func:`scoring`), ``config_id``, ``config``). ``task``, ``optimizer`` and
    ``protocol`` are the frame's columns."""
    tc = tuning_curves(frame)
    a = pd.DataFrame({"row": "tuning_curve", "task": tc["task"], "optimizer": tc["optimizer"],
                      "protocol": tc["protocol"]})
    for col in ("k", "n_configs", "valid", "valid_lo", "valid_hi", "test", "test_lo", "test_hi", "metric",
                "test_metric", "self_tuning"):
        a[f"tuning.{col}"] = tc[col].to_numpy()
    tt = tuned_time_to_result(frame)
    b = pd.DataFrame({"row": "tuned_time", "task": tt["task"], "optimizer": tt["optimizer"],
                      "config_id": tt["config_id"], "config": tt["config"],
                      "tuning.seconds": tt["seconds"], "tuning.n_configs": tt["n_configs"],
                      "tuning.rule": scoring(frame)})
    return pd.concat([a, b], ignore_index=True)
