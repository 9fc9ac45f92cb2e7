"""Where ``harness ui`` lands in MLflow 3.17's UI: model training, not GenAI; the
validation curves first, grouped by task and optimizer; single-valued metrics as bars and table columns,
never a line against the step; trials only, never their parents, two versions of a user's optimizer
in groups apart, the URL said once the server answers. The page itself is checked in
Chromium here and by
``tests/test_report_layout.py::test_mlflow_ui_lands_on_training_runs_grouped_by_optimizer``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

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


def test_the_view_is_never_sorted_by_start_time_and_groups_source_versions_apart():
    """MLflow 3.17's runs page loads the parent of every nested run it shows when the view is sorted
    by start time (or has neither sort nor filter): the sweep's parents came back as "Additional
    runs" and as an "Unassigned" group in every chart. Two source versions of one
    optimizer are grouped apart, the hash a column of the table."""
    state = mlflow_ui.view_state(QUICKSTART_METRICS)
    assert state["orderByKey"] == "tags.`mlflow.runName`" and state["searchFilter"]
    assert state["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "optimizer"}]
    both = mlflow_ui.view_state(QUICKSTART_METRICS, versions=True)
    assert both["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "optimizer"},
                                              {"mode": "tag", "groupByData": "optimizer.source_hash"}]
    assert "tags.`optimizer.source_hash`" in both["selectedColumns"]


def _view_query_plan(client, exp_id: str, db: Path) -> list[str]:
    """SQLite's plan for the query MLflow's runs page sends for the view (its filter, sorted by
    :data:`mlflow_ui.ORDER_BY`), as MLflow's own ``search_runs`` writes it."""
    import sqlite3

    from sqlalchemy import event

    engine = client._tracking_client.store.engine
    seen: list = []

    def grab(conn, cursor, statement, parameters, context, executemany):
        if "FROM runs" in statement and "ORDER BY" in statement:
            seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", grab)
    try:
        client.search_runs([exp_id], mlflow_ui.BASE_VIEW["searchFilter"],
                           order_by=[f"{mlflow_ui.ORDER_BY} ASC"], max_results=100)
    finally:
        event.remove(engine, "before_cursor_execute", grab)
    statement, parameters = seen[-1]
    with sqlite3.connect(db) as con:
        return [row[-1] for row in con.execute(f"EXPLAIN QUERY PLAN {statement}", parameters)]


def test_a_sweep_leaves_its_store_with_statistics_so_the_runs_page_joins_by_index(
        tmp_path, write_sweep, tracking_uri, fake_trainer):
    """Without SQLite's statistics, the UI's runs page (sorted by run name, a tag) joined MLflow's
    tag subquery by scanning it once per run: 4.9 s of CPU for the first 100 of 10,000 trials, and
    as long again for each "Load more" (measured in Chromium: rows after 10-24 s).
    A sweep now ends with ``ANALYZE`` (``harness.tracking.client.analyze_store``, also run by
    ``harness ui``): the join uses an index (0.09 s at 10,000). 40 trials are enough for SQLite's
    planner to choose it; without the statistics it scans at any size."""
    from harness.orchestrate.run import run_sweep
    from harness.tracking.client import client_for

    s = run_sweep(write_sweep(name="plans", optimizers=[{"name": "sgd", "hparams": {
        "step_size": [round(0.01 * (i + 1), 3) for i in range(20)]}}], seeds=2),
        tracking_uri=tracking_uri, quiet=True)
    assert s.counts()["finished"] == 40
    client = client_for(tracking_uri)
    exp_id = client.get_experiment_by_name("plans").experiment_id
    plan = _view_query_plan(client, exp_id, tmp_path / "mlflow.db")
    joins = [p for p in plan if "LEFT-JOIN" in p]
    assert joins and all(p.startswith("SEARCH") and "INDEX" in p for p in joins), plan
    assert not any(p.startswith("SCAN anon") for p in plan), plan


# ---------------------------------------------------------------------------------------------
# The real UI, in chromium
# ---------------------------------------------------------------------------------------------
VERSIONS = {"a1b2c3d4e5f60718": 2, "99aa88bb77cc66dd": 2}


@pytest.fixture
def chromium():
    from test_report_figures import chromium_binary

    if chromium_binary() is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium); .ci/run installs it")


def _ui_store(uri: str) -> tuple[str, int]:
    """An experiment as two invocations leave it: 2 parent runs; adam (2 trials on an MLP, 2 on a
    CNN) and a user's optimizer ``my_opt`` in two source versions (2 trials each, on the MLP), each
    trial with a validation curve, a time part and a final value; nested under its parent. Returns
    (experiment id, trials)."""
    from mlflow.entities import Metric

    from harness.tracking.client import get_or_create_experiment, prepare_store

    client = prepare_store(uri)
    exp_id = get_or_create_experiment(client, "ui_versions", uri)
    parents = []
    for k in range(2):
        p = client.create_run(exp_id, run_name=f"sweep-{k}", tags={names.TAG_KIND: names.KIND_PARENT,
                                                                 names.TAG_SWEEP_ID: f"s{k}"})
        client.log_batch(p.info.run_id, metrics=[Metric("time/compile_s", 40.0 + k, 0, 0),
                                                 Metric("sweep/wall_s", 90.0, 0, 0)])
        client.set_terminated(p.info.run_id)
        parents.append(p.info.run_id)
    trials = [(model, "adam", None, seed) for model in ("mlp", "cnn") for seed in (0, 1)]
    trials += [("mlp", "my_opt", h, s) for h, n in VERSIONS.items() for s in range(n)]
    for i, (model, opt, digest, seed) in enumerate(trials):
        tags = {names.TAG_KIND: names.KIND_TRIAL, names.TAG_OPTIMIZER: opt, names.TAG_SEED: str(seed),
                names.TAG_MODEL: model,
                names.TAG_PARENT_RUN: parents[0 if digest != "99aa88bb77cc66dd" else 1],
                **({names.TAG_OPTIMIZER_SOURCE_HASH: digest} if digest else {})}
        run = client.create_run(exp_id, run_name=f"{model}-{opt}-{seed}", tags=tags)
        client.log_batch(run.info.run_id, metrics=[
            *[Metric(names.M_VALID_ACC, 0.1 + 0.1 * s + 0.01 * i, 0, 50 * s) for s in range(5)],
            Metric("time/compile_s", 0.3 + 0.01 * i, 0, 0), Metric(names.M_FINAL_ACC, 0.5 + 0.01 * i, 0, 0)])
        client.set_terminated(run.info.run_id)
    return exp_id, len(trials)


@pytest.mark.browser
def test_ui_lands_on_trials_only_with_source_versions_apart_and_says_its_url_once_it_answers(
        chromium, tmp_path):
    """On the real page: ``harness ui`` printed its URL ~30 s before the server
    answered, and the page said "57 matching runs" for 54 trials (the parents as "Additional runs"
    and an "Unassigned" series in every time/* chart), with two versions of one source averaged in
    one group, and an optimizer's runs on two models averaged in one group. Now: the URL line comes
    once the server answers (one request, no retry, succeeds); chromium on that URL counts "8
    matching runs" for 8 trials, no "Additional runs", no "Unassigned"; my_opt's two versions are
    two groups (2 runs each), adam one per model (old code: one adam group of 4)."""
    import html
    import re
    import signal
    import socket
    import subprocess
    import sys
    import urllib.request

    from test_report_figures import CHROMIUM_FLAGS, chromium_binary

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _exp_id, n_trials = _ui_store(uri)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "harness", "ui", "-e", "ui_versions", "--port", str(port),
                             "--tracking-uri", uri], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("MLflow UI: http://127.0.0.1:"), line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:  # no retry
            assert r.status == 200
        url = line.split("MLflow UI: ", 1)[1].strip()
        shot = Path(os.environ.get("REPORT_SCREENSHOTS") or tmp_path) / "mlflow-ui-versions.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        flags = [chromium_binary(), *CHROMIUM_FLAGS, "--window-size=1600,1400", "--virtual-time-budget=30000"]
        subprocess.run([*flags, f"--user-data-dir={tmp_path / 'p1'}", f"--screenshot={shot}", url],
                       capture_output=True, timeout=180, check=True)
        dom = subprocess.run([*flags, f"--user-data-dir={tmp_path / 'p2'}", "--dump-dom", url],
                             capture_output=True, text=True, timeout=180, check=True).stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom)))
    assert f"{n_trials} matching runs" in text, text[:3000]
    assert "Additional runs" not in text and "Unassigned" not in text, text[:3000]
    groups = re.findall(r"Group: (model: \S+, optimizer: \S+, optimizer\.source_hash: [^ ]+) (\d+)", text)
    assert sorted(groups) == sorted([(f"model: {m}, optimizer: adam, optimizer.source_hash: (none)", "2")
                                     for m in ("cnn", "mlp")]
                                    + [(f"model: mlp, optimizer: my_opt, optimizer.source_hash: {h}", str(n))
                                       for h, n in VERSIONS.items()]), groups


def test_the_statistics_wait_briefly_for_another_writer_and_give_up(tmp_path, tracking_uri):
    """``analyze_store`` waited 30 s in silence when another process held a write transaction (at
    every sweep's end and at ``harness ui``'s start; found by an attack): it is an
    optimisation, and now gives up after ``ANALYZE_WAIT_S``."""
    import sqlite3
    import time

    from harness.tracking.client import ANALYZE_WAIT_S, analyze_store, client_for

    client_for(tracking_uri).create_experiment("busy")  # the store exists
    other = sqlite3.connect(tmp_path / "mlflow.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another writer's transaction, held
        t0 = time.monotonic()
        assert analyze_store(tracking_uri) is False
        waited = time.monotonic() - t0
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert ANALYZE_WAIT_S <= 2.0 and waited < 15, waited
    assert analyze_store(tracking_uri) is True


def test_the_view_groups_by_task_and_optimizer_never_averaging_two_models(tmp_path, tracking_uri,
                                                                         fake_trainer):
    """A real sweep of an MLP at two widths and logistic regression, with sgd and adam: the view's
    groups are model, then the width (it tells two MLP tasks apart), then optimizer (before: the
    optimizer alone, one band per optimizer averaging every model); one task: the optimizer alone."""
    from conftest import TINY_SWEEP

    import harness
    from harness.tracking.client import prepare_store

    cfg = {**TINY_SWEEP, "name": "ui_tasks", "seeds": [0],
           "models": [{"name": "mlp", "hparams": {"width": [8, 16], "depth": 1}}, "logreg"],
           "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}},
                          {"name": "adam", "hparams": {"step_size": 0.01}}]}
    assert harness.sweep(cfg, tracking_uri=tracking_uri, quiet=True).counts["finished"] == 6
    client = prepare_store(tracking_uri)
    exp_id = client.get_experiment_by_name("ui_tasks").experiment_id
    key = mlflow_ui.prepare(client, exp_id)
    stored = json.loads(client.get_experiment(exp_id).tags[f"mlflow.sharedViewState.{key}"])
    assert stored["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "model"},
                                                {"mode": "param", "groupByData": "model.width"},
                                                {"mode": "tag", "groupByData": "optimizer"}]
    one = mlflow_ui.trial_runs(client, exp_id)
    assert mlflow_ui.task_groups([r for r in one if r.data.params.get("model.width") == "8"]) == []
