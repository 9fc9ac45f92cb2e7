"""The joint optimizer scaling law (reports.scaling_law) on data drawn from a known law.

The law: E = 1.8747 (the markov_lm_transformer windows' exact floor), A = 6, alpha = 0.35, B = 12,
beta = 0.30; adamw the baseline, muon (rho_N 1.4, rho_D 1.6) and lion (0.7, 0.8); 4 sizes spanning
16x in parameters, 3 data budgets (5, 20, 80 tokens per parameter), 2 seeds. Tolerances, from 15
noise draws of 0.1% (a seed's spread on the Markov LM, ~0.002 nats) with a margin: E known,
|d alpha| <= 0.02, |d beta| <= 0.01; E fitted, |d alpha| <= 0.05, |d beta| <= 0.01, |d E| <= 0.02;
every factor within 10% (|log ratio| <= 0.1) either way. Worst over the 15 draws: alpha 0.011
(known) / 0.034 (fitted), beta 0.007, E 0.014, factors 0.069.
"""

import math

import numpy as np
import pytest

import harness  # noqa: F401  (XLA's pool pinned as in every test process)
from reports.scaling_law import LawPoints, bootstrap_law, factors_table, fit_law, law_speedup

E, A, ALPHA, B, BETA = 1.8747, 6.0, 0.35, 12.0, 0.30
RHO_N = {"adamw": 1.0, "muon": 1.4, "lion": 0.7}
RHO_D = {"adamw": 1.0, "muon": 1.6, "lion": 0.8}
SIZES = (1e4, 2.5e4, 6.4e4, 1.6e5)
RATIOS = (5, 20, 80)


def law(opt, n, d, rho_n=RHO_N, rho_d=RHO_D):
    return E + A * (rho_n[opt] * n) ** -ALPHA + B * (rho_d[opt] * d) ** -BETA


def points(sigma=0.0, seed=0, seeds=2, rho_n=RHO_N, rho_d=RHO_D):
    rng = np.random.default_rng(seed)
    o, N, D, L = [], [], [], []
    for opt in rho_n:
        for n in SIZES:
            for r in RATIOS:
                for _ in range(seeds):
                    o.append(opt)
                    N.append(n)
                    D.append(r * n)
                    L.append(law(opt, n, r * n, rho_n, rho_d) * math.exp(rng.normal(0, sigma)))
    return LawPoints.make(o, N, D, L)


def factor_errors(fit):
    return [abs(math.log(fit.rho_n[o] / RHO_N[o])) for o in RHO_N] + \
        [abs(math.log(fit.rho_d[o] / RHO_D[o])) for o in RHO_D]


@pytest.mark.parametrize("known", [True, False])
def test_exact_law_is_recovered_exactly(known):
    fit = fit_law(points(seeds=1), "adamw", E=E if known else None)
    assert fit.E_fitted is not known
    for got, want in ((fit.E, E), (fit.A, A), (fit.alpha, ALPHA), (fit.B, B), (fit.beta, BETA)):
        assert got == pytest.approx(want, rel=1e-6)
    assert max(factor_errors(fit)) < 1e-6
    assert fit.rho_n["adamw"] == fit.rho_d["adamw"] == 1.0
    assert np.abs(fit.residuals).max() < 1e-9 and fit.objective < 1e-15


def test_noisy_law_within_stated_tolerances_and_known_floor_conditions_better():
    pts = points(sigma=1e-3, seed=0)
    known = fit_law(pts, "adamw", E=E)
    free = fit_law(pts, "adamw")
    assert known.E == E
    assert abs(known.alpha - ALPHA) <= 0.02 and abs(known.beta - BETA) <= 0.01
    assert abs(free.alpha - ALPHA) <= 0.05 and abs(free.beta - BETA) <= 0.01
    assert abs(free.E - E) <= 0.02
    assert max(factor_errors(known)) <= 0.1 and max(factor_errors(free)) <= 0.1
    # the residuals are the noise: ~0.1% in log-loss
    assert 5e-4 < np.std(known.residuals) < 2e-3
    # fitting E adds a column to the Jacobian: a worse-conditioned fit (measured: ~100 vs ~400)
    assert free.condition > 2 * known.condition
    assert free.names[:5] == ("a", "b", "alpha", "beta", "e") and "e" not in known.names
    assert 0 < known.max_correlation <= 1 and 0 < free.max_correlation <= 1


def test_bootstrap_intervals_cover_the_truth():
    pts = points(sigma=1e-3, seed=0)
    fit = fit_law(pts, "adamw", E=E)
    iv = bootstrap_law(pts, fit, n_resamples=40)
    assert set(iv) == {"alpha", "beta", "rho_N[lion]", "rho_N[muon]", "rho_D[lion]", "rho_D[muon]"}
    truth = {"alpha": ALPHA, "beta": BETA, "rho_N[lion]": 0.7, "rho_N[muon]": 1.4,
             "rho_D[lion]": 0.8, "rho_D[muon]": 1.6}
    for k, (lo, hi) in iv.items():
        assert lo < hi
        assert lo - 0.05 * abs(truth[k]) <= truth[k] <= hi + 0.05 * abs(truth[k]), (k, lo, hi)
    rows = factors_table(fit, iv)
    assert [r["optimizer"] for r in rows] == ["adamw", "lion", "muon"]
    assert rows[0]["rho_N_interval"] is None and rows[2]["rho_D_interval"] == iv["rho_D[muon]"]


def test_law_speedup():
    fit = fit_law(points(seeds=1), "adamw", E=E)
    n = np.array([1e4, 1e6, 1e8])
    # muon's loss at (N, 20N) and the data the baseline needs for it at N, solved by hand
    lm = law("muon", n, 20 * n)
    d_b = ((lm - E - A * n ** -ALPHA) / B) ** (-1 / BETA)
    assert law_speedup(fit, "muon", n, 20) == pytest.approx(d_b / (20 * n), rel=1e-6)
    assert law_speedup(fit, "adamw", n, 20) == pytest.approx(1.0)
    # with rho_N = 1, only data efficiency: the speed-up is rho_D at every size
    only_d = {"adamw": 1.0, "muon": 1.0, "lion": 1.0}
    fit_d = fit_law(points(seeds=1, rho_n=only_d), "adamw", E=E, rescale=("D",))
    assert fit_d.rho_n == only_d and fit_d.rho_d["muon"] == pytest.approx(1.6, rel=1e-6)
    assert law_speedup(fit_d, "muon", n, 20) == pytest.approx(1.6, rel=1e-6)
    # lion is less efficient in both N and D: the baseline needs fewer tokens, a speed-up < 1
    assert np.all(law_speedup(fit, "lion", n, 20) < 1)


def test_refusals():
    pts = points(seeds=1)
    with pytest.raises(ValueError, match="baseline 'sgd' has no point"):
        fit_law(pts, "sgd")
    with pytest.raises(ValueError, match="below every observed loss"):
        fit_law(pts, "adamw", E=3.0)
    with pytest.raises(ValueError, match="rescale"):
        fit_law(pts, "adamw", rescale=("X",))
    with pytest.raises(ValueError, match="finite and > 0"):
        LawPoints.make(["a", "a"], [1, 2], [1, 2], [1.0, -1.0])
