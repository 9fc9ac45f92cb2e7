"""A language model with no target ranks by validation loss (lower is better), not next-token
accuracy: in the end-of-sweep summary and in the report, by one rule
(:func:`harness.core.selection_rule.ranking_metric`)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

import harness
from harness.core import names
from harness.core.selection_rule import LM_MARKER, ranking_metric
from harness.data.tokenize import tokenize_files
from harness.orchestrate.summary import ranked_rows
from reports.frame import load_sweep, summaries
from reports.objectives import objective

ROOT = Path(__file__).resolve().parents[1]


def test_ranking_metric_rule():
    assert ranking_metric(None, True) == names.M_VALID_LOSS
    assert ranking_metric(None, False) == names.M_VALID_ACC
    assert ranking_metric("valid/accuracy", True) == "valid/accuracy"  # a target decides
    assert LM_MARKER == names.PREFIX_VALID + names.PERPLEXITY


@pytest.fixture(scope="module")
def lm_sweep(tmp_path_factory):
    base = tmp_path_factory.mktemp("lmrank")
    tokenize_files([ROOT / "docs" / "architecture.md"], base / "shards", "bytes", "gpt2")
    store = f"sqlite:///{base / 'mlflow.db'}"
    config = {
        "name": "lmrank", "models": [{"name": "transformer_lm", "hparams": {"width": 8, "depth": 1,
                                                                             "num_heads": 2}}],
        "optimizers": [{"name": "adam", "hparams": {"step_size": [3e-2, 1e-4]}},
                       {"name": "sgd", "hparams": {"step_size": 1e-3}}],
        "schedules": ["constant"], "seeds": [0], "batch_size": 4, "budget": {"steps": 6},
        "eval_every": 6, "measure_perf": False,
        "datasets": [{"name": f"tokens:{base / 'shards'}", "hparams": {"seq_len": 16, "valid_tokens": 256}}],
    }
    run = harness.sweep(config, tracking_uri=store, quiet=True)
    again = harness.sweep(config, tracking_uri=store, quiet=True)  # every trial read back from the store
    return run, store, again


def test_summary_ranks_a_language_model_without_target_by_validation_loss(lm_sweep):
    run, _, again = lm_sweep
    outs = run.summary.outcomes
    assert len(outs) == 3 and all(o.status == "finished" and o.language_model for o in outs)
    rows = ranked_rows(outs, "time_to_target")
    assert [r["metric"] for r in rows] == ["valid/loss"] * 2
    loss = {(o.optimizer, o.config): o.final_valid_loss for o in outs}
    adam = [v for (opt, _), v in loss.items() if opt == "adam"]
    by_opt = {r["optimizer"]: r for r in rows}
    assert by_opt["adam"]["value"] == pytest.approx(min(adam))  # the lower loss is selected
    assert rows[0]["value"] <= rows[1]["value"]  # ranked lower-is-better
    assert [r["value"] for r in rows] == sorted(r["value"] for r in rows)
    skipped = again.summary.outcomes
    assert all(o.skipped and o.language_model for o in skipped)
    assert [(r["optimizer"], r["metric"], r["value"]) for r in ranked_rows(skipped)] == [
        (r["optimizer"], r["metric"], r["value"]) for r in rows]


def test_report_objective_of_a_language_model_without_target_is_final_loss(lm_sweep):
    run, store, _ = lm_sweep
    frame = load_sweep("lmrank", tracking_uri=store).frame
    s = summaries(frame)
    assert s["language_model"].all()
    obj = objective(frame)
    assert (obj.final, obj.mode) == (names.M_FINAL_LOSS, "min")
    board = run.results().leaderboard
    vals = board.reset_index().set_index("optimizer")
    col = next(c for c in vals.columns if "loss" in str(c) and "test" not in str(c))
    adam = s[s["optimizer"] == "adam"][names.M_FINAL_LOSS]
    assert vals.loc["adam", col] == pytest.approx(statistics.fmean([min(adam)]))
