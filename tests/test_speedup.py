"""Wen et al.'s data-efficiency speed-up (reports.speedup) on hand-made curves with known answers."""

import math

import numpy as np
import pytest

import harness  # noqa: F401  (XLA's pool pinned as in every test process)
from reports.speedup import baseline_tokens_to_reach, speedup, speedup_interval

# baseline: loss 3 at 1e3 tokens, 2 at 1e4, 1 at 1e5 (linear in log10 tokens: L = 6 - log10 D)
D = [1e3, 1e4, 1e5]
L = [3.0, 2.0, 1.0]


def test_interpolation_is_linear_in_log_tokens():
    # 1.5 lies halfway between 2 (1e4) and 1 (1e5) in loss, so at 10**4.5 tokens
    d, bound = baseline_tokens_to_reach(D, L, 1.5)
    assert bound == "=" and d == pytest.approx(10**4.5, rel=1e-12)
    # X reached 1.5 with 1e4 tokens: the baseline needs 10**4.5, a speed-up of 10**0.5
    s = speedup(D, L, 1e4, 1.5)
    assert s.value == pytest.approx(math.sqrt(10), rel=1e-12) and s.bound == "="
    assert s.text() == "3.16×"
    # a point of the curve exactly
    assert baseline_tokens_to_reach(D, L, 2.0) == (pytest.approx(1e4), "=")
    # X at 2.5 with 1e4 tokens: the baseline needs 10**3.5 tokens: X is slower, 0.316x
    assert speedup(D, L, 1e4, 2.5).value == pytest.approx(10**-0.5, rel=1e-12)


def test_beating_the_baseline_everywhere_is_a_lower_bound_not_an_extrapolation():
    s = speedup(D, L, 1e4, 0.9)  # below the baseline's best (1.0 at 1e5)
    assert s.bound == ">" and s.value == pytest.approx(10.0) and s.text() == "> 10.00×"
    s = speedup(D, L, 1e4, 3.5)  # above the baseline's first point: it was there at once
    assert s.bound == "<" and s.value == pytest.approx(0.1) and s.text() == "< 0.10×"


def test_first_crossing_of_a_non_monotone_curve():
    # the curve reaches 1.5 between 1e4 and 1e5, rises, and reaches it again later: the first counts
    d, bound = baseline_tokens_to_reach([1e3, 1e4, 1e5, 1e6, 1e7], [3.0, 2.0, 1.0, 2.0, 1.0], 1.5)
    assert bound == "=" and d == pytest.approx(10**4.5)


@pytest.mark.parametrize("tokens, losses", [([1e3, 1e3], [2, 1]), ([0, 1e3], [2, 1]),
                                            ([1e3, 1e4], [2, np.nan]), ([1e3], [2, 1])])
def test_bad_curves_are_refused(tokens, losses):
    with pytest.raises(ValueError):
        baseline_tokens_to_reach(tokens, losses, 1.5)


def test_interval_over_seeds():
    # two baseline seeds 0.2 apart in loss (mean: the curve L), X's two seeds at 1.4 and 1.6
    base = np.array([[3.1, 2.1, 1.1], [2.9, 1.9, 0.9]])
    iv = speedup_interval(D, base, 1e4, [1.4, 1.6], n_resamples=999)
    assert iv.estimate.value == pytest.approx(math.sqrt(10), rel=1e-12)  # of the seed means
    # the extreme resamples: X's best seed (1.4) against the baseline's worse seed (its curve
    # 3.1/2.1/1.1: reaches 1.4 at 10**(4 + 0.7) tokens) gives 10**0.7; the other corner 10**0.3
    lo, hi = 10**0.3, 10**0.7
    assert lo - 1e-9 <= iv.low < iv.estimate.value < iv.high <= hi + 1e-9
    assert iv.censored == 0.0 and (iv.n_seeds, iv.n_base_seeds) == (2, 2)
    # identical seeds: no spread, the interval is the point
    same = speedup_interval(D, np.array([L, L]), 1e4, [1.5, 1.5], n_resamples=99)
    assert same.low == pytest.approx(same.estimate.value) == pytest.approx(same.high)


def test_interval_reports_censored_resamples():
    # X's seeds 0.95 and 1.05: the mean (1.0) is the baseline's best point exactly, but a resample of
    # two 0.95s is below the whole curve: a bound (> 10x), counted as censored
    iv = speedup_interval(D, np.array([L, L]), 1e4, [0.95, 1.05], n_resamples=999)
    assert iv.estimate.bound == "=" and iv.estimate.value == pytest.approx(10.0)
    assert 0.1 < iv.censored < 0.4  # P(both resampled seeds are 0.95) = 1/4
    assert "of resamples censored" in iv.text()


def test_one_seed_on_one_side_resamples_the_other():
    """A rung with one finished seed of X (or of the baseline) beside two of the other: scipy's
    bootstrap refuses a one-observation sample, so that side is held fixed (the CPU study's
    partial store raised ValueError here)."""
    base = np.array([[3.1, 2.1, 1.1], [2.9, 1.9, 0.9]])
    iv = speedup_interval(D, base, 1e4, [1.5], n_resamples=999)
    # X at 1.5 against the baseline's seeds: 10**0.6 (the 3.1 curve), 10**0.4 (the 2.9 curve)
    assert 10**0.4 - 1e-9 <= iv.low < iv.estimate.value < iv.high <= 10**0.6 + 1e-9
    assert (iv.n_seeds, iv.n_base_seeds) == (1, 2)
    iv = speedup_interval(D, base[:1], 1e4, [1.4, 1.6], n_resamples=999)
    assert (iv.n_seeds, iv.n_base_seeds) == (2, 1) and iv.low < iv.high
    assert iv.low >= 10**(0.7 - 0.2) - 1e-9 and iv.high <= 10**(0.7 + 0.2) + 1e-9
