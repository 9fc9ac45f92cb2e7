"""The track's claim rules (``target.claim``): the √n rule and the single-run rule on hand-computed
values (modded-nanogpt's README examples), stated in the sweep summary, carried as run params
outside the trial id, and a bad ``claim`` refused before any work."""

from __future__ import annotations

import math

import pytest
from conftest import make_spec
from rich.console import Console
from typer.testing import CliRunner

from harness.cli import app
from harness.core.claim_rules import ClaimRules, claim_rule_lines, rules_of_params
from harness.core.outcome import TrialOutcome
from harness.orchestrate.summary import SweepSummary, print_summary

TRACK = ClaimRules(0.004, 3.276)


def test_the_track_examples():
    # result #36: mean 3.2787 over 10 runs, (3.28 - 3.2787)·√10 = 0.0013 · 3.1623 = 0.00411 >= 0.004
    sqrt_n, single = claim_rule_lines([(s, 3.2787) for s in range(10)], 3.28, TRACK)
    assert sqrt_n == "√n rule: mean 3.2787 over 10 runs: (3.28 − mean)·√10 = 0.0041 ≥ 0.004: PASSES"
    assert single == ("single-run rule: the first run (seed 0) 3.2787 > 3.276: does not pass (0 of 10 runs "
                      "are at or below it; picking one is cherry-picking)")
    # the README: "for n=4 runs, any average below 3.278 suffices": (0.002)·2 = 0.004, on the boundary
    assert claim_rule_lines([(0, 3.277), (1, 3.279), (2, 3.278), (3, 3.278)], 3.28, TRACK)[0].endswith(
        "= 0.0040 ≥ 0.004: PASSES")
    # mean 3.279 over 4: 0.001·2 = 0.002 < 0.004; (0.004/0.001)² = 16 runs would
    assert claim_rule_lines([(s, 3.279) for s in range(4)], 3.28, ClaimRules(0.004))[0] == (
        "√n rule: mean 3.2790 over 4 runs: (3.28 − mean)·√4 = 0.0020 < 0.004: does not pass "
        "(about 16 runs would, at this mean)")
    # one run: the single-run rule is the √n rule at n = 1; 3.276 passes both, 3.2761 neither
    assert claim_rule_lines([(7, 3.276)], 3.28, TRACK) == [
        "√n rule: mean 3.2760 over 1 run: (3.28 − mean)·√1 = 0.0040 ≥ 0.004: PASSES",
        "single-run rule: the first run (seed 7) 3.2760 ≤ 3.276: PASSES"]
    worse = claim_rule_lines([(0, 3.2761)], 3.28, TRACK)
    assert worse == ["√n rule: mean 3.2761 over 1 run: (3.28 − mean)·√1 = 0.0039 < 0.004: does not pass "
                     "(about 2 runs would, at this mean)",
                     "single-run rule: the first run (seed 0) 3.2761 > 3.276: does not pass"]
    # the first run is the lowest seed, not the best: seed 2's 3.270 does not stand for the claim
    lines = claim_rule_lines([(2, 3.270), (1, 3.285)], 3.28, TRACK)
    assert lines[1].startswith("single-run rule: the first run (seed 1) 3.2850 > 3.276: does not pass "
                               "(1 of 2")
    with pytest.raises(ValueError, match="finite losses"):
        claim_rule_lines([(0, math.nan)], 3.28, TRACK)


def test_rules_round_trip_through_params():
    assert rules_of_params(TRACK.params()) == TRACK
    assert TRACK.params() == {"claim.margin": "0.004", "claim.single_run": "3.276"}
    assert rules_of_params({"claim.margin": "0.004"}) == ClaimRules(0.004, None)
    assert rules_of_params({}) is None and rules_of_params({"claim.margin": "nan"}) is None


def test_summary_states_the_rules_and_the_trial_id_ignores_them():
    target = {"metric": "valid/loss", "value": 3.28}
    claim = {"margin": 0.004, "single_run": 3.276}
    outcomes = []
    for seed, loss in enumerate([3.2755, 3.2770, 3.2790]):
        spec = make_spec(seed=seed, target=target, claim=claim)
        assert spec.trial_id == make_spec(seed=seed, target=target).trial_id
        assert spec.flat_params()["claim.single_run"] == "3.276"
        o = TrialOutcome.of_spec(spec, "finished")
        o.final_valid_loss = loss
        outcomes.append(o)
    console = Console(record=True, width=400)
    print_summary(console, SweepSummary("claims", "sid", "1", None, "sqlite:///x.db", outcomes, 1.0))
    lines = [ln for ln in console.export_text().splitlines() if ln.startswith("target claim:")]
    # mean 3.27717, (0.00283)·√3 = 0.0049 >= 0.004; seed 0's 3.2755 <= 3.276; 1 of 3 at or below
    assert lines[1].endswith("√n rule: mean 3.2772 over 3 runs: (3.28 − mean)·√3 = 0.0049 ≥ 0.004: PASSES")
    assert lines[2].endswith("single-run rule: the first run (seed 0) 3.2755 ≤ 3.276: PASSES (1 of 3 "
                             "runs are at or below it; picking one is cherry-picking)")
    assert len(lines) == 3


@pytest.mark.parametrize("claim, metric, line", [
    ({}, "valid/accuracy", "target: claim: the claim rules test a loss target; metric is valid/accuracy"),
    ({"single_run": 3.3}, "valid/loss", "target: claim: single_run 3.3 is above the target 3.28 (a run must "
                                        "beat it)"),
    ({"margin": 0}, "valid/loss", "target.claim.margin: Input should be greater than 0"),
    ({"sigma": 1}, "valid/loss", "target.claim.sigma: unknown key 'sigma'"),
])
def test_bad_claim_refused_before_any_work(tmp_path, write_sweep, monkeypatch, claim, metric, line):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    value = 0.5 if metric.endswith("accuracy") else 3.28
    cfg = write_sweep(target={"metric": metric, "value": value, "claim": claim})
    r = CliRunner().invoke(app, ["sweep", str(cfg)], env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert f"{cfg}: {line}" in r.output
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def test_a_margin_of_ones_own_is_the_one_every_claim_line_uses():
    """``claim: {margin: 0.5}``: the summary's claim line (the √n statistic and a t-test) judges by 0.5
    as the √n rule's line does; with the track's 0.004 it said PASSES beside the rule's "does not pass"
    (mean 4.1623 over 1 run, target 4.5: (4.5 − 4.1623)·√1 = 0.3377, below 0.5, above 0.004)."""
    spec = make_spec(seed=0, target={"metric": "valid/loss", "value": 4.5}, claim={"margin": 0.5})
    o = TrialOutcome.of_spec(spec, "finished")
    o.final_valid_loss = 4.1623
    console = Console(record=True, width=400)
    print_summary(console, SweepSummary("claims", "sid", "1", None, "sqlite:///x.db", [o], 1.0))
    lines = [ln for ln in console.export_text().splitlines() if ln.startswith("target claim:")]
    assert lines[0].endswith("mean 4.1623 over 1 seed vs target 4.5: (target - mean)·√n = 0.3377 (< 0.5): "
                             "does not pass; about 3 seeds would, at this mean")
    assert lines[1].endswith("(4.5 − mean)·√1 = 0.3377 < 0.5: does not pass "
                             "(about 3 runs would, at this mean)")


def test_the_boundary_passes_on_the_claim_line_as_on_the_rules_line():
    """The README's n = 4 example, mean 3.278: (3.28 − 3.278)·√4 is 0.004 less a float hair; the rule's
    line said PASSES and the claim line "(< 0.004) ... about 4 seeds would" over 4 seeds."""
    from harness.core.significance import claim_words, target_claim

    runs = [3.277, 3.279, 3.278, 3.278]
    assert claim_rule_lines(list(enumerate(runs)), 3.28, TRACK)[0].endswith("= 0.0040 ≥ 0.004: PASSES")
    c = target_claim(runs, 3.28)
    assert c.track_passes and claim_words(c) == (
        "mean 3.2780 over 4 seeds vs target 3.28: (target - mean)·√n = 0.0040 (≥ 0.004), t-test p = 0.0081: "
        "PASSES")
