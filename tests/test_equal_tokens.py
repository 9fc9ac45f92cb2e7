"""Equal tokens beside time to target: each optimizer's selected configuration's final validation loss
at the task's budget, its interval across seeds and its paired difference to the baseline, in the
summary, the report's table and harness.results; a language model's leaderboard gives perplexity,
bits per byte and the steps and tokens seen to the target. Values checked by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from conftest import make_spec
from rich.console import Console

from harness.core import names as N
from harness.core.outcome import TrialOutcome
from harness.orchestrate.summary import SweepSummary, print_summary
from reports import frame as RF
from reports.equal_tokens import equal_token_rows, equal_token_table
from reports.leaderboard import STEPS_COL, TOKENS_COL, leaderboard, leaderboard_numbers

#: per optimizer, per seed: (final validation loss, steps to the target, bits per byte)
LM = {"adam": [(3.0, 40, 1.5), (3.2, 60, 1.6)], "muon": [(2.8, 20, 1.4), (2.9, 30, 1.45)]}


def _lm_frame() -> pd.DataFrame:
    rows = []
    for opt, seeds in LM.items():
        for seed, (loss, steps, bpb) in enumerate(seeds):
            rows.append({
                "row": "summary", "task": "gpt / tokens", "model": "gpt", "dataset": "tokens",
                "schedule": "constant", "optimizer": opt, "config_id": f"{opt}-0",
                "config": opt, "seed": seed, "status": "finished", "trial_id": f"{opt}{seed}",
                "language_model": True, "tokens_per_step": 4 * 64.0, "params.train.steps": "100",
                "params.train.batch_size": "4", "params.dataset.seq_len": "64",
                N.M_SECONDS_TO_TARGET: steps / 100, N.M_STEPS_TO_TARGET: steps, N.M_FINAL_ACC: math.nan,
                N.M_FINAL_LOSS: loss, N.M_TEST_ACC: math.nan, N.M_TEST_LOSS: loss, N.M_STEP_MS: 1.0,
                RF.FINAL_BPB: bpb, "protocol": RF.PROTOCOL_THREE_SPLITS, "target_metric": "valid/loss",
                "target_mode": "min", "target_value": 3.5})
    return pd.DataFrame(rows)


def test_the_equal_token_table_by_hand():
    t = equal_token_table(_lm_frame()).set_index("optimizer")
    assert t.loc["muon", "steps"] == 100 and t.loc["muon", "tokens"] == 100 * 4 * 64
    assert t.loc["muon", ["valid_loss_mean", "valid_loss_lo", "valid_loss_hi"]].tolist() == \
        pytest.approx([2.85, 2.8, 2.9])
    assert t.loc["muon", "valid_perplexity_mean"] == pytest.approx((math.exp(2.8) + math.exp(2.9)) / 2)
    assert t.loc["muon", "valid_bits_per_byte_mean"] == pytest.approx(1.425)
    # paired to adam (the baseline), seed by seed: 2.8 - 3.0 = -0.2, 2.9 - 3.2 = -0.3
    assert t.loc["muon", "baseline"] == "adam" and t.loc["muon", "n_pairs"] == 2
    assert t.loc["muon", ["diff_mean", "diff_lo", "diff_hi"]].tolist() == pytest.approx([-0.25, -0.3, -0.2])
    assert math.isnan(t.loc["adam", "diff_mean"]) and t.loc["adam", "n_pairs"] == 0
    rows = {r["optimizer"]: r for r in equal_token_rows(_lm_frame())}
    assert rows["adam"]["diff"] == "baseline" and rows["muon"]["diff"] == "-0.25 [-0.30, -0.20] vs adam"
    assert rows["muon"]["tokens"] == "25.6k" and rows["muon"]["loss"] == "2.85 [2.80, 2.90]"
    # one number of decimals per column (adam's read "1.55 [1.50, 1.60]" under muon's 1.425)
    assert (rows["adam"]["bits_per_byte"], rows["muon"]["bits_per_byte"]) == (
        "1.550 [1.500, 1.600]", "1.425 [1.400, 1.450]")


def test_a_language_models_leaderboard_gives_perplexity_and_steps_and_tokens_to_target():
    f = _lm_frame()
    lb = leaderboard(f).set_index("Optimizer")
    assert lb.loc["muon", STEPS_COL] == "25" and lb.loc["muon", TOKENS_COL] == "6400"  # 25 x 256
    assert lb.loc["adam", STEPS_COL] == "50" and lb.loc["adam", TOKENS_COL] == "12.8k"  # 50 x 256
    assert lb.loc["muon", "Validation perplexity"].startswith("17.")  # mean of e^2.8, e^2.9: 17.3
    assert lb.loc["muon", "Validation bits per byte"] == "1.425 [1.400, 1.450]"
    nums = leaderboard_numbers(f).set_index("optimizer")
    assert nums.loc["muon", ["steps_to_target_median", "tokens_to_target_median"]].tolist() == [25.0, 6400.0]
    assert nums.loc["adam", "valid_bits_per_byte_mean"] == pytest.approx(1.55)
    assert nums.loc["adam", "valid_perplexity_mean"] == pytest.approx((math.exp(3.0) + math.exp(3.2)) / 2)


def test_a_classifiers_leaderboard_has_no_language_model_columns():
    f = _lm_frame().assign(language_model=False, tokens_per_step=math.nan)
    lb = leaderboard(f)
    assert STEPS_COL not in lb and "Validation perplexity" not in lb
    assert math.isnan(equal_token_table(f)["tokens"].iloc[0])


def test_the_summary_states_the_loss_at_equal_tokens():
    out = []
    for opt, seeds in LM.items():
        for seed, (loss, _steps, _bpb) in enumerate(seeds):
            o = TrialOutcome.of_spec(make_spec(optimizer=opt, seed=seed, steps=100), "finished")
            o.final_valid_loss = loss
            out.append(o)
    console = Console(record=True, width=400)
    print_summary(console, SweepSummary("eq", "sid", "1", None, "sqlite:///x.db", out, 1.0))
    lines = [ln for ln in console.export_text().splitlines() if ln.startswith("equal tokens")]
    assert len(lines) == 1, console.export_text()
    assert "(100 steps): final valid loss" in lines[0]
    # one number of decimals per line for the losses, one for the differences (it read "adam 3.1
    # [3, 3.2]": decimals changed from cell to cell, and within one)
    assert "adam 3.100 [3.000, 3.200] (baseline)" in lines[0]
    assert "muon 2.850 [2.800, 2.900], -0.2500 [-0.3000, -0.2000] vs adam" in lines[0]


def test_res_trials_give_a_language_models_tokens_to_target():
    from reports.tidy import trials_table

    f = _lm_frame()
    for c in RF.ID_COLUMNS:  # the identity columns a loaded frame has, unset
        if c not in f:
            f[c] = pd.Timestamp("2026-01-01", tz="UTC") if c.endswith("_time") else None
    t = trials_table(f, f, "measured").set_index(["optimizer", "seed"])
    assert t.loc[("muon", 0), "tokens_per_step"] == 256.0
    assert t.loc[("muon", 0), "tokens_to_target"] == 20 * 256.0
    assert t.loc[("adam", 1), "tokens_to_target"] == 60 * 256.0


def test_the_markdown_leaderboards_perplexity_has_one_number_of_decimals():
    """``report --format md``'s perplexity cells each took their own decimals ("23.56 [23.44,
    23.67]" above "12.120 [12.071, 12.169]"); the column now shares one, as the test column does."""
    from reports.tidy import leaderboard_table

    f = _lm_frame()
    f.loc[f["optimizer"] == "muon", N.M_FINAL_LOSS] = [2.495, 2.503]  # a narrow interval: 3 decimals
    table = leaderboard_table(f, has_target=True).table().set_index("Optimizer")
    ppl = table["Validation perplexity"]
    decimals = {len(cell.split(" ")[0].split(".")[1]) for cell in ppl}
    assert decimals == {3}, ppl.tolist()
