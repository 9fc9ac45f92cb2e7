"""The end-of-sweep summary states each selected configuration's target claim (loss targets)."""

from __future__ import annotations

import pytest
from conftest import make_spec
from rich.console import Console

from harness.core.outcome import TrialOutcome
from harness.orchestrate.summary import SweepSummary, print_summary

TARGET = {"metric": "valid/loss", "value": 0.5, "mode": "min"}


def _outcomes(losses_by_opt):
    out = []
    for opt, losses in losses_by_opt.items():
        for seed, loss in enumerate(losses):
            o = TrialOutcome.of_spec(make_spec(optimizer=opt, seed=seed, target=TARGET), "finished")
            o.final_valid_loss = loss
            o.steps_to_target, o.seconds_to_target = 10, 1.0
            out.append(o)
    return out


def test_summary_says_which_target_claims_pass():
    # adam: mean 0.490 over 3 seeds, (0.5 - 0.49) * sqrt(3) = 0.0173 >= 0.004, sd 0.001, t = 17.3,
    # p = 0.0017 < 0.01: passes. sgd: mean 0.4990, (0.001) * sqrt(3) = 0.0017 < 0.004: does not.
    outcomes = _outcomes({"adam": [0.489, 0.490, 0.491], "sgd": [0.4985, 0.4990, 0.4995]})
    assert outcomes[0].target_value == 0.5
    console = Console(record=True, width=300)
    print_summary(console, SweepSummary("claims", "sid", "1", None, "sqlite:///x.db", outcomes, 1.0))
    lines = [ln for ln in console.export_text().splitlines() if ln.startswith("target claim:")]
    assert len(lines) == 2, lines
    adam = next(ln for ln in lines if "· adam:" in ln)
    sgd = next(ln for ln in lines if "· sgd:" in ln)
    assert "mean 0.4900 over 3 seeds vs target 0.5: (target - mean)·√n = 0.0173 (≥ 0.004), " \
           "t-test p = 0.0017: PASSES" in adam
    assert "mean 0.4990 over 3 seeds vs target 0.5: (target - mean)·√n = 0.0017 (< 0.004), " \
           "t-test p = 0.0" in sgd
    assert "does not pass; about" in sgd


def test_accuracy_targets_make_no_claim():
    o = TrialOutcome.of_spec(make_spec(target={"metric": "valid/accuracy", "value": 0.5}), "finished")
    o.final_valid_accuracy = 0.9
    console = Console(record=True, width=300)
    print_summary(console, SweepSummary("acc", "sid", "1", None, "sqlite:///x.db", [o], 1.0))
    assert "target claim" not in console.export_text()


def test_a_real_sweep_states_its_claims_in_summary_and_report(tmp_path, write_sweep, monkeypatch):
    """Two seeds of sgd on digits with a loss target of 5.0 (the losses are far below): the summary
    line and the report's table say PASSES from the final/valid_loss values MLflow stored."""
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.core.significance import target_claim
    from reports import load_frame, make_report
    from reports.claim_table import claim_rows

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = write_sweep(budget={"steps": 20}, target={"metric": "valid/loss", "value": 5.0})
    r = CliRunner().invoke(app, ["sweep", str(cfg)], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    frame = load_frame("tiny", tracking_uri=uri)
    stored = frame[frame["row"] == "summary"]["final/valid_loss"].tolist()
    want = target_claim(stored, 5.0)
    (row,) = claim_rows(frame, {})
    assert row["n"] == 2 and row["mean"] == pytest.approx(want.mean) and row["passes"]
    assert row["p_value"] == pytest.approx(want.p_value)
    line = next(ln for ln in r.output.splitlines() if ln.startswith("target claim:"))
    assert f"mean {want.mean:.4f} over 2 seeds vs target 5: " in line and line.endswith("PASSES")
    import reports.html

    monkeypatch.setattr(reports.html, "figure_items", lambda frame, stem: [])  # the table, not the figures
    html = make_report("tiny", tracking_uri=uri, output=str(tmp_path / "r.html")).read_text()
    assert 'id="target-claims-table"' in html and f"{want.mean:.4f}" in html
