"""harness.core.ties: the tie rule's pieces and the seeds that would separate two tied neighbours,
against scipy's noncentral t, textbook power tables, a Monte Carlo of the t
statistic and a brute-force simulation of the rank rule's bootstrap itself."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from harness.core import power as PW
from harness.core import ties as T


def _scipy_tail(c: float, lam: float, nu: int) -> float:
    if not lam:
        return float(2 * stats.t.sf(c, nu))
    return float(stats.nct.sf(c, nu, lam) + stats.nct.cdf(-c, nu, lam))


@pytest.mark.parametrize("nu", [1, 2, 4, 9, 30, 99])
def test_the_tail_of_the_noncentral_t_matches_scipy(nu):
    for lam in (0.0, 0.7, 2.0, 4.5):
        for c in (0.5, 1.8, 2.8):
            assert PW._tail(c, lam, nu) == pytest.approx(_scipy_tail(c, lam, nu), abs=1e-7)


def test_critical_values():
    # the rule's: z_0.975 · √((n-1)/n), by hand for n = 5: 1.959964 · √0.8 = 1.753045
    assert T.rule_critical(5) == pytest.approx(1.959964 * math.sqrt(0.8), abs=1e-6)
    assert T.rule_critical(5) == pytest.approx(1.753045, abs=1e-6)
    # the t-test's: the t quantile (tables: t_{4, .975} = 2.776, t_{9, .975} = 2.262)
    assert T.t_critical(5) == pytest.approx(2.776445, abs=1e-5)
    assert T.t_critical(10) == pytest.approx(2.262157, abs=1e-5)
    for n in (3, 7, 20, 60):
        assert T.t_critical(n) == pytest.approx(stats.t.ppf(0.975, n - 1), abs=1e-6)


def test_power_by_a_monte_carlo_of_the_t_statistic():
    """An independent route: draw T = (Z + δ√n) / √(χ²_ν/ν) directly."""
    rng = np.random.default_rng(7)
    for effect, n in ((1.0, 8), (0.6, 12), (1.5, 5)):
        z = rng.standard_normal(400_000)
        s = np.sqrt(rng.chisquare(n - 1, 400_000) / (n - 1))
        t = (z + effect * math.sqrt(n)) / s
        c = T.rule_critical(n)
        assert T.power(effect, n) == pytest.approx(float(np.mean(np.abs(t) > c)), abs=0.004)


def _rule_n(effect: float, start: int = 5) -> int:
    """The fewest n >= start at which scipy's noncentral t gives the rule power 0.8."""
    return next(n for n in range(start, 200)
                if _scipy_tail(T.rule_critical(n), effect * math.sqrt(n), n - 1) >= 0.8)


def test_textbook_paired_t_test_sample_sizes():
    """G*Power's paired t-test (two-sided, α = 0.05, power 0.8): dz = 1 needs 10 pairs (power
    0.803), 0.8 needs 15, 0.5 needs 34."""
    assert T.seeds_to_separate(1.0, start=2, test="t") == 10
    assert T.power(1.0, 10, T.t_critical(10)) == pytest.approx(0.8031, abs=5e-4)
    assert T.seeds_to_separate(0.8, start=2, test="t") == 15
    assert T.seeds_to_separate(0.5, start=2, test="t") == 34
    # against a brute search on scipy's noncentral t
    for effect in (0.7, 1.3, 2.1):
        n = next(n for n in range(2, 200) if _scipy_tail(stats.t.ppf(0.975, n - 1), effect * math.sqrt(n),
                                                          n - 1) >= 0.8)
        assert T.seeds_to_separate(effect, start=2, test="t") == n


def test_the_rules_seeds_against_scipy_and_the_rules_own_bootstrap():
    """The estimate (the rule: |t| > z·√((n-1)/n)) against scipy, then a brute-force simulation of
    the bootstrap rule itself (normal differences, the 95% percentile interval of the mean excluding
    0): at the estimate's n it separates about 80% of the time, one seed fewer less often."""
    for effect in (0.7, 1.3, 2.1):
        assert T.seeds_to_separate(effect) == _rule_n(effect)
    rng = np.random.default_rng(3)
    effect = 1.0
    n_star = T.seeds_to_separate(effect)
    assert n_star == 8  # power(1.0, 7) = 0.788, power(1.0, 8) = 0.830
    for n in (n_star - 1, n_star):
        d = rng.normal(effect, 1.0, size=(3000, n))
        idx = rng.integers(0, n, size=(3000, 1000, n))
        means = np.take_along_axis(np.broadcast_to(d[:, None, :], idx.shape), idx, axis=2).mean(axis=2)
        lo, hi = np.quantile(means, [0.025, 0.975], axis=1)
        simulated = float(np.mean((lo > 0) | (hi < 0)))
        assert simulated == pytest.approx(T.power(effect, n), abs=0.03)
    # the simulation's rule is the module's: a few of those draws through ties.distinguishable
    for row in d[:20]:
        a = {s: float(x) for s, x in enumerate(row)}
        lo, hi = T.mean_interval(list(a.values()))
        assert T.distinguishable(a, {s: 0.0 for s in a}) is (not lo <= 0 <= hi)


def test_the_rule_at_few_seeds_is_liberal_and_says_so():
    # equal means: the rule separates ~15% of the time at 5 pairs, the t-test 5%
    assert T.power(0.0, 5) == pytest.approx(0.154, abs=0.002)
    assert T.power(0.0, 5, T.t_critical(5)) == pytest.approx(0.05, abs=1e-6)
    assert "15%" in T.power_words() and "α = 0.05" in T.power_words() and "0.8" in T.power_words()


def _standing(name, values, reached=0, steps=None, seconds=None):
    return T.Standing(name, reached, len(values), steps, seconds or {}, dict(enumerate(values)))


def test_separation_words():
    a = _standing("a", [0.95, 0.97])
    # differences 0.01 and 0.03: mean 0.02, SD 0.01414, effect 1.414 -> the rule's n
    b = _standing("b", [0.94, 0.94])
    sep = T.separation(a, b, "final")
    assert sep.effect == pytest.approx(0.02 / math.sqrt(2e-4))
    n = _rule_n(sep.effect)
    assert (sep.seeds, sep.words, sep.what) == (n, f"{n} seeds would separate", T.VALUE) and n == 5
    # equal results: no finite number
    equal = T.separation(a, _standing("c", [0.95, 0.97]), "final")
    assert equal.words == "no seed count separates equal results"
    # opposite differences with mean 0: the same
    assert T.separation(a, _standing("d", [0.96, 0.96]), "final").seeds is None
    # a tiny effect: capped
    assert T.separation(_standing("e", [1.0, 2.0, 3.0]), _standing("f", [1.1, 1.9, 3.01]),
                        "final").words == "> 100 seeds would separate"
    # constant differences (SD 0): no power to estimate, only the rule's floor, said as a floor
    # (before: "5 seeds would separate", as if 2 seeds without spread had measured the power)
    const = T.separation(a, _standing("g", [0.94, 0.96]), "final")
    assert (const.seeds, const.words) == (T.MIN_SEEDS,
                                          "≥ 5 seeds would separate (no spread in 2 paired seeds)")
    # one paired seed: nothing to estimate
    assert T.separation(_standing("h", [0.9]), _standing("i", [0.8]), "final").words == \
        "1 paired seed: too few to estimate"
    # tied with 6 paired seeds already: the estimate starts above them
    six = T.separation(_standing("j", [1, 2, 3, 4, 5, 6]), _standing("k", [1.5, 1.7, 3.6, 3.8, 5.6, 5.7]),
                       "final")
    assert six.seeds is None or six.seeds >= 7


def test_on_time_the_seconds_are_compared():
    a = T.Standing("a", 2, 2, 100.0, {0: 1.0, 1: 1.2}, {0: 0.9, 1: 0.9})
    b = T.Standing("b", 2, 2, 150.0, {0: 1.1, 1: 1.4}, {0: 0.9, 1: 0.9})
    assert T.compared(a, b).what == T.TIME and T.tied(a, b)
    assert T.separation(a, b).what == T.TIME
    same_steps = T.Standing("c", 2, 2, 100.0, {0: 3.0, 1: 3.2}, {0: 0.8, 1: 0.85})
    assert T.compared(a, same_steps).what == T.VALUE  # the same evaluation: the values decide
    assert T.compared(a, T.Standing("d", 1, 2, 100.0, {0: 1.0}, {0: 0.9, 1: 0.9})) is None


def test_mean_interval_is_the_percentile_bootstrap():
    assert T.mean_interval([2.0] * 5) == (2.0, 2.0)
    d = [0.3, -0.1, 0.25, 0.4, 0.05, 0.2]
    lo, hi = T.mean_interval(d)
    # numpy's bootstrap of the same data: the same interval within resampling noise
    rng = np.random.default_rng(0)
    x = np.asarray(d)
    means = x[rng.integers(0, len(x), size=(200_000, len(x)))].mean(axis=1)
    ref = np.quantile(means, [0.025, 0.975])
    assert (lo, hi) == pytest.approx(tuple(ref), abs=0.01)
    assert T.mean_interval(d) == (lo, hi)  # deterministic


def test_order_within_a_tie_follows_the_shown_numbers():
    assert T.order_within([0.80, 0.54, None], best_low=True) == [1, 0, 2]
    assert T.order_within([0.95, 0.97, 0.97], best_low=False) == [1, 2, 0]  # equal: the strict order


def test_the_ties_line_explains_seed_counts_only_where_it_gives_one():
    """The rank rule's power sentence ("seeds (in all) at which ...") defines a seed count: after
    "1 paired seed: too few to estimate" alone it read as that phrase's definition."""
    from harness.orchestrate.legend import tie_line

    def row(name, words, seeds, effect=math.nan):
        sep = T.Separation(seeds, 1, effect, T.VALUE, words)
        return {"optimizer": name, "separation": sep, "tie_on": T.VALUE, "task_title": "mlp · digits",
                "label": "1="}

    few = [row("adam", "", None), row("sgd", "1 paired seed: too few to estimate", None)]
    assert tie_line(few) == "Ties: adam and sgd (mlp · digits, 1=): 1 paired seed: too few to estimate."
    some = [row("adam", "", None), row("sgd", "7 seeds would separate", 7, 1.3)]
    assert tie_line(some) == (f"Ties: adam and sgd (mlp · digits, 1=): 7 seeds would separate — "
                              f"{T.power_words()}.")


def test_the_legend_says_to_target_is_the_median_over_seeds():
    """The terminal's "to target" is the seeds' median, as the report's and res.leaderboard's."""
    import types

    from harness.orchestrate.legend import legend

    summary = types.SimpleNamespace(outcomes=[], time_clock="modeled", select_by="final")
    short = legend(summary, [], [], {}, explain=False)
    assert "test = its mean test metric, to target its median." in short and len(short) < 250
    assert "to target = its median over the seeds that reached it (the HTML report's and " \
           "res.leaderboard's too)" in legend(
        summary, [], [], {}, explain=True)
