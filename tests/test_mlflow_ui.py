"""Where ``harness ui`` lands in MLflow 3.17's UI (issue 24 §15): model training, not GenAI; the
validation curves first, grouped by optimizer; single-valued metrics as bars and table columns,
never a line against the step. The page itself is checked in Chromium by
``tests/test_report_layout.py::test_mlflow_ui_lands_on_training_runs_grouped_by_optimizer``."""

from __future__ import annotations

import json

from harness.core import names
from harness.tracking import mlflow_ui

#: What a quickstart sweep logs (trial runs and the parent's ``sweep/*``), as seen in its store.
QUICKSTART_METRICS = [
    *names.CURVE_METRICS, *names.SUMMARY_METRICS, "valid/nats_above_entropy", "dataset/loss_floor",
    "sweep/n_finished", "sweep/wall_s",
]


def _by_uuid(state):
    return {s["uuid"]: s["name"] for s in state["compareRunSections"]}


def test_sections_open_on_the_validation_curves_and_single_values_are_bars():
    state = mlflow_ui.view_state(QUICKSTART_METRICS)
    sections = state["compareRunSections"]
    # MLflow orders sections by name: "convergence" (steps_to_target, drawn against the step) came first
    assert [s["name"] for s in sections] == ["valid", "train", "time", "final", "test", "convergence",
                                             "best", "compile", "dataset", "perf", "sweep"]
    assert state["isAccordionReordered"] is True  # MLflow keeps this order instead of sorting
    assert [s["name"] for s in sections if s["display"]] == ["valid", "train", "time", "final", "test",
                                                              "convergence"]
    assert sections[0]["columns"] == 2
    charts = {c["metricKey"]: c for c in state["compareRunCharts"]}
    section = _by_uuid(state)
    # every single-valued metric is a bar chart in its prefix's section; no curve is pre-set (MLflow
    # adds their line charts)
    single = [k for k in QUICKSTART_METRICS if not names.is_curve_metric(k)]
    assert sorted(charts) == sorted(single)
    assert {c["type"] for c in charts.values()} == {"BAR"}
    assert section[charts[names.M_STEPS_TO_TARGET]["metricSectionId"]] == "convergence"
    assert charts[names.M_STEPS_TO_TARGET]["isGenerated"] is False  # MLflow leaves it a bar
    assert state["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "optimizer"}]
    assert state["searchFilter"] == "tags.`harness.kind` = 'trial'"
    # the runs table: the trial's identity, then the final, test and convergence values
    assert state["selectedColumns"] == [
        "tags.`model`", "tags.`optimizer`", "tags.`schedule`", "tags.`dataset`", "tags.`seed`",
        "metrics.`final/valid_accuracy`", "metrics.`final/valid_loss`",
        "metrics.`final/valid_nats_above_entropy`", "metrics.`test/accuracy`", "metrics.`test/loss`",
        "metrics.`convergence/cost_seconds_to_target`", "metrics.`convergence/modeled_seconds_to_target`",
        "metrics.`convergence/seconds_to_target`", "metrics.`convergence/steps_to_target`"]


def test_a_model_metric_is_a_curve_in_valid_and_a_bar_in_test():
    state = mlflow_ui.view_state(["valid/perplexity", "test/perplexity", "train/loss", "nolabel"])
    assert [s["name"] for s in state["compareRunSections"]] == ["valid", "train", "test"]
    assert [c["metricKey"] for c in state["compareRunCharts"]] == ["test/perplexity"]


def test_ui_tags_the_experiment_and_its_url_selects_model_training(tracking_uri):
    from harness.tracking.client import get_or_create_experiment, prepare_store

    client = prepare_store(tracking_uri)
    exp_id = get_or_create_experiment(client, "ui_view", tracking_uri)
    run = client.create_run(exp_id, tags={names.TAG_KIND: names.KIND_TRIAL, names.TAG_OPTIMIZER: "adam"})
    for step, acc in ((0, 0.1), (50, 0.8)):
        client.log_metric(run.info.run_id, names.M_VALID_ACC, acc, step=step)
    client.log_metric(run.info.run_id, names.M_STEPS_TO_TARGET, 50, step=50)
    client.set_terminated(run.info.run_id)

    key = mlflow_ui.prepare(client, exp_id)
    assert mlflow_ui.prepare(client, exp_id) == key  # idempotent: one tag per state
    tags = client.get_experiment(exp_id).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    stored = json.loads(tags[f"mlflow.sharedViewState.{key}"])
    assert [s["name"] for s in stored["compareRunSections"]] == ["valid", "convergence"]
    assert [(c["metricKey"], c["type"]) for c in stored["compareRunCharts"]] == [
        ("convergence/steps_to_target", "BAR")]
    assert mlflow_ui.runs_view_url("http://127.0.0.1:5000/", exp_id, key) == (
        f"http://127.0.0.1:5000/#/experiments/{exp_id}/runs?workflowType=machine_learning"
        f"&compareRunsMode=CHART&viewStateShareKey={key}")


def test_a_state_too_long_for_an_experiment_tag_leaves_the_bars_to_mlflow(tracking_uri):
    from harness.tracking.client import get_or_create_experiment, prepare_store

    client = prepare_store(tracking_uri)
    exp_id = get_or_create_experiment(client, "ui_many", tracking_uri)
    run = client.create_run(exp_id, tags={names.TAG_KIND: names.KIND_TRIAL})
    from mlflow.entities import Metric

    client.log_batch(run.info.run_id, metrics=[Metric(f"test/metric_{i:03d}", 1.0, 0, 0) for i in range(120)])
    key = mlflow_ui.prepare(client, exp_id)
    value = client.get_experiment(exp_id).tags[f"mlflow.sharedViewState.{key}"]
    assert len(json.dumps(mlflow_ui.view_state([f"test/metric_{i:03d}" for i in range(120)]))) > 20_000
    assert len(value) <= mlflow_ui.MAX_TAG_VALUE and json.loads(value)["compareRunCharts"] == []
