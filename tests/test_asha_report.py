"""The early-stopping audit in the report (``audit: K``): :func:`reports.early_stop.audit_rows`
on a hand-made ``search.json`` record (Kendall's tau computed by hand) and on a real ASHA sweep's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reports.early_stop import audit_rows, kendall_tau


def _rec(**kw):
    full = [{"config": "a", "rungs": {"10": 0.5, "30": 0.7}, "final_valid_accuracy": 0.90},
            {"config": "b", "rungs": {"10": 0.6, "30": 0.8}, "final_valid_accuracy": 0.95}]
    audits = [{"config": "c", "rungs": {"10": 0.3}, "status": "finished", "final_valid_accuracy": 0.97},
              {"config": "d", "rungs": {"10": 0.2}, "status": "finished", "final_valid_accuracy": 0.50},
              {"config": "e", "rungs": {"10": 0.1}, "status": "pending", "final_valid_accuracy": None}]
    return {"method": "asha", "task": "digits · mlp", "optimizer": "sgd", "configurations": 9, "stopped": 7,
            "steps_spent": 250, "budget_steps": 240, "full_budget": full, "audits": audits,
            "objective": {"metric": "valid/accuracy", "mode": "max", "value": "final"}, **kw}


def test_audit_rows_on_hand_made_values():
    """Rung 10 vs full training over a, b, c, d: x = (.5, .6, .3, .2), y = (.90, .95, .97, .50):
    4 concordant pairs, 2 discordant (a-c, b-c): tau = 2/6. c (0.97) beats the best promoted (b, 0.95):
    a stopped trial would have won; d's stop was right: 1 of 2."""
    (row,) = audit_rows([_rec(), {"method": "coordinate_descent", "task": "x"}])
    assert row["rung"] == 10 and row["pairs"] == 4
    assert row["kendall_tau"] == pytest.approx(1 / 3)
    assert row["audited"] == 2 and row["stops_right"] == 1
    assert row["stopped_would_win"] is True and row["winner"] == "c"
    assert (row["configurations"], row["stopped"], row["steps_spent"]) == (9, 7, 250)


def test_audit_rows_with_the_loss_and_no_winner():
    rec = _rec(objective={"metric": "valid/loss", "mode": "min", "value": "final"})
    for t, v in zip(rec["full_budget"] + rec["audits"], [0.3, 0.2, 0.25, 0.9, None], strict=True):
        t["final_valid_loss"] = v
    (row,) = audit_rows([rec])
    # c's loss 0.25 is not below b's 0.2: no stopped trial would have won; both stops right
    assert row["stopped_would_win"] is False and row["stops_right"] == 2 and row["winner"] == ""
    assert kendall_tau([1.0], [2.0]) is None and kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1)


def test_audit_rows_of_a_real_asha_sweep(tmp_path, monkeypatch):
    """The search.json a real sweep wrote (tests/test_asha_sweep's config, audit: 2) reads into one row
    whose counts are the record's."""
    import mlflow
    from test_asha_sweep import _config

    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/m.db"
    run_sweep(_config(tmp_path, audit=2), tracking_uri=uri, quiet=True)
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("asha_e2e")
    parent = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'parent'")[0]
    recs = json.loads(Path(client.download_artifacts(parent.info.run_id, "search.json", str(tmp_path)))
                      .read_text())
    (row,) = audit_rows(recs)
    assert row["audited"] == 2 and row["stopped"] == recs[0]["stopped"] >= 2
    assert row["rung"] == 10 and row["pairs"] == 2 + len(recs[0]["full_budget"])
    assert row["kendall_tau"] is None or -1 <= row["kendall_tau"] <= 1
    assert row["stopped_would_win"] in (True, False)
    # the HTML report's section shows the row, and counts the stopped trials apart
    from reports import make_report

    sweep_id = parent.data.tags["harness.sweep_id"]
    html = make_report("asha_e2e", sweep_id, str(tmp_path / "r.html"), tracking_uri=uri).read_text()
    table = html[html.index('<table id="early-stopping-table">'):]
    table = table[:table.index("</table>")]
    assert f'<td class="num">{row["stopped"]}</td>' in table and "<td>asha</td>" in table
    assert ("yes: " if row["stopped_would_win"] else "<td>no</td>") in table
    assert '<th class="num">stopped</th>' in html
