"""Target claims: modded-nanogpt's track rule by hand, the t-test against scipy, seeds needed."""

import math

import pytest
from scipy import stats

from harness.core.significance import TRACK_SIGMA, claim_words, t_sf, target_claim


@pytest.mark.parametrize("t, df", [(0.5, 1), (2.0, 3), (-1.3, 5), (3.7, 29), (0.01, 100), (12.0, 2)])
def test_t_sf_equals_scipy(t, df):
    assert t_sf(t, df) == pytest.approx(stats.t.sf(t, df), rel=1e-10, abs=1e-15)


def test_track_rule_by_hand():
    # mean 3.2785 over 16 seeds: (3.28 - 3.2785) * 4 = 0.006 >= 0.004; over 4 seeds: 0.003 < 0.004
    sixteen = target_claim([3.2775, 3.2795] * 8, 3.28)
    assert sixteen.mean == pytest.approx(3.2785, abs=1e-12)
    assert sixteen.track_statistic == pytest.approx(0.006, abs=1e-12) and sixteen.track_passes
    four = target_claim([3.2775, 3.2795] * 2, 3.28)
    assert four.track_statistic == pytest.approx(0.003, abs=1e-12) and not four.track_passes
    # (0.004 / 0.0015)^2 = 7.11: 8 seeds at this mean
    assert four.track_seeds == 8 and not four.passes
    # the margin is a z-test at p = 0.01 with the sigma it implies
    assert abs(TRACK_SIGMA - 0.004 / 2.3263478740408408) < 1e-15
    edge = target_claim([3.276], 3.28)  # (0.004) * 1 = 0.004: passes, p = 0.01
    assert edge.track_passes and edge.track_p == pytest.approx(0.01, rel=1e-9)


def test_t_test_p_value_and_seeds_needed_against_scipy():
    losses = [3.2700, 3.2795, 3.2810]
    c = target_claim(losses, 3.28)
    res = stats.ttest_1samp(losses, 3.28, alternative="less")
    assert c.p_value == pytest.approx(res.pvalue, rel=1e-9)
    assert c.t == pytest.approx(-res.statistic, rel=1e-12)
    gap, sd = 3.28 - c.mean, c.sd

    def passes(n):
        return gap * math.sqrt(n) / sd >= stats.t.ppf(0.99, n - 1)

    assert passes(c.seeds_needed) and not passes(c.seeds_needed - 1)
    assert not c.passes
    words = claim_words(c)
    assert words.endswith(f"does not pass; about {c.seeds_needed} seeds would, at this mean and spread")


def test_mean_above_target_never_passes_and_bad_losses_refused():
    c = target_claim([3.30, 3.31], 3.28)
    assert not c.passes and c.seeds_needed is None and c.track_seeds is None and c.p_value > 0.5
    assert claim_words(c).endswith("more seeds would not help at this mean")
    with pytest.raises(ValueError, match=r"target_claim needs finite losses, got \[nan\]"):
        target_claim([float("nan")], 3.28)
    with pytest.raises(ValueError, match=r"got \[\]"):
        target_claim([], 3.28)
