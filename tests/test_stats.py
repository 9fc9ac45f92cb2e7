"""reports.stats: probability of improvement and interquartile means across tasks, with stratified
bootstrap intervals, against ``rliable`` 1.2.0's own numbers.

``rliable`` does not run beside the pinned stack (``rliable`` 1.2.0 needs ``arch<8``; arch 7.2.0
fails to import under pandas 3.1: ``deprecate_kwarg() missing 1 required positional argument``),
so its numbers below were computed in a separate environment (rliable 1.2.0, arch 7.2.0, pandas
2.3.3, numpy 2.4.6, scipy 1.17.1) by::

    from rliable import library as rly, metrics
    metrics.aggregate_iqm(X), metrics.probability_of_improvement(X, Y)
    for seed in (0, 1, 2):
        np.random.seed(seed)  # rliable's StratifiedBootstrap draws from numpy's global generator
        rly.get_interval_estimates({"X": X, "Y": Y}, lambda x: np.array([metrics.aggregate_iqm(x)]),
                                   reps=50000)
        np.random.seed(seed)
        rly.get_interval_estimates({"X,Y": [X, Y]}, lambda x, y: np.array(
            [metrics.probability_of_improvement(x, y)]), reps=20000)

on the table ``X``, ``Y`` (runs × tasks) below. The test runs the same against ``rliable`` itself
when it imports.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.core import names as N
from reports import frame as RF
from reports import stats as S

# runs × tasks: 5 runs of 3 tasks, with a 0 (a run that did not reach the target) in each
X = np.array([[1.30, 0.00, 1.10],
              [0.95, 1.40, 1.25],
              [1.60, 0.90, 0.80],
              [1.20, 1.15, 1.00],
              [0.70, 1.05, 1.35]])
Y = np.array([[1.00, 1.00, 0.90],
              [1.10, 0.80, 1.00],
              [0.90, 1.20, 1.05],
              [1.00, 0.00, 1.10],
              [1.05, 0.95, 1.00]])
# rliable 1.2.0 (module docstring): point estimates, and the intervals of seeds 0, 1, 2
RLIABLE_IQM = {"X": 1.1, "Y": 0.9944444444444446}
RLIABLE_POI = 0.64  # X over Y; Y over X: 0.36
RLIABLE_IQM_CI = {"X": [(0.9388888888888888, 1.238888888888889)] * 3,
                  "Y": [(0.9444444444444444, 1.0444444444444445), (0.938888888888889, 1.0444444444444445),
                        (0.9388888888888888, 1.0444444444444445)]}
RLIABLE_POI_CI = [(0.41333333333333333, 0.8533333333333332), (0.41333333333333333, 0.8533333333333334),
                  (0.41333333333333333, 0.8466666666666667)]
#: The bootstrap distributions are discrete (5 runs per task): interval ends move by a step of a
#: few thousandths between generators; rliable's own three seeds differ by up to 0.0056.
TOL = 0.015


def _tasks(m: np.ndarray) -> list[np.ndarray]:
    return [m[:, j] for j in range(m.shape[1])]


def test_point_estimates_equal_rliables_and_a_hand_count():
    assert S.iqm(_tasks(X)) == pytest.approx(RLIABLE_IQM["X"], abs=1e-12)
    assert S.iqm(_tasks(Y)) == pytest.approx(RLIABLE_IQM["Y"], abs=1e-12)
    # by hand: 15 pooled scores, trim 25% (3) at each end, the mean of the middle 9
    pooled = np.sort(X.ravel())
    assert S.iqm(_tasks(X)) == pytest.approx(pooled[3:12].mean(), abs=1e-12)
    assert S.probability_of_improvement(_tasks(X), _tasks(Y)) == pytest.approx(RLIABLE_POI, abs=1e-12)
    assert S.probability_of_improvement(_tasks(Y), _tasks(X)) == pytest.approx(1 - RLIABLE_POI, abs=1e-12)
    # by hand, task 0: X [1.3, .95, 1.6, 1.2, .7] against Y [1, 1.1, .9, 1, 1.05]: 1.3, 1.6 and 1.2
    # beat all 5, .95 beats .9 only, .7 none: 16 of 25 pairs
    per_task = [sum((a > b) + 0.5 * (a == b) for a in X[:, j] for b in Y[:, j]) / 25 for j in range(3)]
    assert per_task[0] == 16 / 25
    assert S.probability_of_improvement(_tasks(X), _tasks(Y)) == pytest.approx(np.mean(per_task), abs=1e-12)


def test_intervals_match_rliables_within_bootstrap_tolerance():
    for seed in (0, 1, 2):
        for name, m in (("X", X), ("Y", Y)):
            point, lo, hi = S.iqm_interval(_tasks(m), n_boot=50_000, seed=seed)
            assert point == pytest.approx(RLIABLE_IQM[name], abs=1e-12)
            assert (lo, hi) == pytest.approx(RLIABLE_IQM_CI[name][seed], abs=TOL)
        point, lo, hi = S.poi_interval(_tasks(X), _tasks(Y), n_boot=20_000, seed=seed)
        assert point == pytest.approx(RLIABLE_POI, abs=1e-12)
        assert (lo, hi) == pytest.approx(RLIABLE_POI_CI[seed], abs=TOL)


def test_the_stratified_bootstrap_resamples_runs_within_tasks_only():
    """An independent loop: resample each task's runs apart (never the tasks), the percentile
    interval of the statistic; scipy's multi-sample bootstrap must agree."""
    rng = np.random.default_rng(11)
    iqms, pois = [], []
    for _ in range(20_000):
        xs = [col[rng.integers(0, 5, 5)] for col in _tasks(X)]
        ys = [col[rng.integers(0, 5, 5)] for col in _tasks(Y)]
        iqms.append(S.iqm(xs))
        pois.append(S.probability_of_improvement(xs, ys))
    _, lo, hi = S.iqm_interval(_tasks(X), n_boot=20_000)
    assert (lo, hi) == pytest.approx(tuple(np.quantile(iqms, [0.025, 0.975])), abs=TOL)
    _, lo, hi = S.poi_interval(_tasks(X), _tasks(Y), n_boot=20_000)
    assert (lo, hi) == pytest.approx(tuple(np.quantile(pois, [0.025, 0.975])), abs=TOL)


def test_against_rliable_itself_when_it_imports():
    try:
        from rliable import library as rly
        from rliable import metrics
    except Exception as e:  # not installed, or arch 7 under pandas 3 (module docstring)
        pytest.skip(f"rliable does not import here: {type(e).__name__}")
    np.random.seed(0)
    pe, ie = rly.get_interval_estimates({"X": X}, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=5000)
    point, lo, hi = S.iqm_interval(_tasks(X), n_boot=5000)
    assert point == pytest.approx(float(pe["X"][0]), abs=1e-12)
    assert (lo, hi) == pytest.approx((float(ie["X"][0, 0]), float(ie["X"][1, 0])), abs=TOL)


def _frame(seconds: dict[str, dict[str, list]], target: bool = True, baseline: str | None = None
           ) -> pd.DataFrame:
    """Per task and optimizer one configuration; its seeds' seconds to target (``None``: not
    reached). Without a target, the value is the test accuracy."""
    rows = []
    for task, per in seconds.items():
        for opt, values in per.items():
            for seed, v in enumerate(values):
                rows.append({
                    "row": "summary", "task": task, "optimizer": opt, "config_id": f"{opt}-0",
                    "config": f"{opt} lr=0.1", "seed": seed, "status": "finished",
                    N.M_SECONDS_TO_TARGET: v if target else None,
                    N.M_STEPS_TO_TARGET: (100 * v if v is not None else None) if target else None,
                    N.M_FINAL_ACC: 0.9, N.M_FINAL_LOSS: 0.1, N.M_TEST_ACC: 0.9 if target else v,
                    N.M_TEST_LOSS: 0.1, N.M_STEP_MS: 1.0, "protocol": RF.PROTOCOL_THREE_SPLITS,
                    "target_metric": "valid/accuracy", "target_mode": "max",
                    "target_value": 0.9 if target else 0.999})
    f = pd.DataFrame(rows)
    if baseline:
        f.attrs[S.BASELINE_ATTR] = baseline
    return f


def test_normalised_scores_and_the_table_on_a_hand_built_sweep():
    f = _frame({"t1": {"adam": [1.0, 2.0, 3.0], "sgd": [2.0, 4.0, None]},
                "t2": {"adam": [4.0, 4.0, 4.0], "sgd": [2.0, 8.0, 4.0]}})
    assert S.baseline_optimizer(f) == "adam"  # the default baseline, when it ran
    sc = S.run_scores(f)
    # t1: adam's median 2.0 s; scores 2/t, 0 for the seed that did not reach the target
    assert sc.runs["adam"]["t1"].tolist() == [2.0, 1.0, pytest.approx(2 / 3)]
    assert sc.runs["sgd"]["t1"].tolist() == [1.0, 0.5, 0.0]
    assert sc.runs["sgd"]["t2"].tolist() == [2.0, 0.5, 1.0]
    t = S.across_tasks(f, n_boot=2000).set_index("optimizer")
    # sgd's IQM: pooled [1, .5, 0, 2, .5, 1] sorted [0, .5, .5, 1, 1, 2], trim 1.5 each end
    # (scipy's trim_mean cuts int(0.25·6) = 1): the mean of [.5, .5, 1, 1] = 0.75
    assert t.loc["sgd", "iqm"] == pytest.approx(0.75)
    # P(sgd beats adam): t1 adam [2, 1, .667] vs sgd [1, .5, 0]: sgd's 1 beats .667 and ties 1,
    # 1.5 of 9 pairs = 1/6; t2 adam [1, 1, 1] vs sgd [2, .5, 1]: 3 wins, 3 ties, 4.5 of 9 = 1/2;
    # their mean 1/3
    assert t.loc["sgd", "poi"] == pytest.approx(1 / 3)
    assert t.loc["adam", "poi"] == 0.5 and t.loc["adam", "iqm"] == pytest.approx(1.0, abs=0.2)
    assert t.loc["sgd", "poi_lo"] <= t.loc["sgd", "poi"] <= t.loc["sgd", "poi_hi"]
    assert (t["n_tasks"] == 2).all() and (t["n_runs"] == 6).all()
    # the baseline named: scores relative to sgd; a task where it reached on too few seeds gives
    # no reference and the IQM leaves it out, saying so
    f = _frame({"t1": {"adam": [1.0, 2.0, 3.0], "sgd": [2.0, None, None]},
                "t2": {"adam": [4.0, 4.0, 4.0], "sgd": [2.0, 8.0, 4.0]}}, baseline="sgd")
    t = S.across_tasks(f, n_boot=500).set_index("optimizer")
    assert t.loc["adam", "n_tasks"] == 1 and t.loc["adam", "poi_tasks"] == 2
    assert "Left out of the IQM: t1 (sgd did not reach the target" in S.stats_note(f)
    f.attrs[S.BASELINE_ATTR] = "lion"
    with pytest.raises(ValueError, match="baseline optimizer must be one the sweep ran"):
        S.baseline_optimizer(f)


def test_without_a_target_the_test_metric_relative_to_the_baselines():
    f = _frame({"t1": {"adam": [0.90, 0.80], "sgd": [0.85, 0.95]}}, target=False)
    f.attrs[RF.SELECT_BY_ATTR] = "final"
    sc = S.run_scores(f)
    assert sc.kinds == {"t1": S.RELATIVE}
    assert sc.runs["sgd"]["t1"].tolist() == pytest.approx([0.85 / 0.85, 0.95 / 0.85])
    assert S.across_tasks(f, n_boot=200).set_index("optimizer").loc["sgd", "poi"] == pytest.approx(0.75)


def test_the_report_shows_the_table_near_the_leaderboard():
    from reports.html import across_rows

    f = _frame({"t1": {"adam": [1.0, 2.0, 3.0], "sgd": [2.0, 4.0, None]},
                "t2": {"adam": [4.0, 4.0, 4.0], "sgd": [2.0, 8.0, 4.0]}})
    rows, note = across_rows(f, {"t1": "mlp · digits", "t2": "cnn · digits"})
    assert [r["optimizer"] for r in rows] == ["adam", "sgd"]  # best IQM first
    assert rows[0]["poi"] == "— (the baseline)" and rows[1]["poi"].startswith("0.33 [")
    assert note.startswith("Baseline optimizer: adam.") and "stratified bootstrap" in note


def test_a_task_with_one_run_is_held_fixed_not_refused():
    """A task where an optimizer has one finished seed beside tasks with several (the scaling
    study's partial store: scipy's bootstrap raised "each sample in `data` must contain two or
    more observations" and the whole report failed): that task's one run is held fixed."""
    from reports.stats import iqm_interval, poi_interval

    runs = [np.array([1.0, 2.0, 3.0, 4.0]), np.array([10.0])]
    point, lo, hi = iqm_interval(runs, n_boot=500)
    assert lo <= point <= hi and np.isfinite([lo, hi]).all() and lo < hi
    p, plo, phi = poi_interval([np.array([1.0, 3.0]), np.array([5.0])],
                               [np.array([2.0, 2.5]), np.array([4.0])], n_boot=500)
    assert plo <= p <= phi and np.isfinite([plo, phi]).all() and phi <= 1.0
    assert np.isnan(iqm_interval([np.array([1.0]), np.array([2.0])], n_boot=100)[1:]).all()
