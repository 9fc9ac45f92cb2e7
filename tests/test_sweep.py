"""End-to-end sweeps into a real MLflow SQLite store, asserting what MLflow stored."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from subproc import run_in_pty

from harness.orchestrate.run import run_sweep
from harness.tracking.client import get_or_create_experiment, prepare_store, search_all
from harness.tracking.uris import default_tracking_uri


def _trial_runs(uri: str, name: str):
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(name)
    runs = search_all(c, exp.experiment_id)
    return c, [r for r in runs if r.data.tags.get("harness.kind") == "trial"], \
        [r for r in runs if r.data.tags.get("harness.kind") == "parent"]


def test_sweep_sqlite_real_trainer_diverge_and_resume(tmp_path, write_sweep, tracking_uri, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = write_sweep(optimizers=[{"name": "sgd", "hparams": {"step_size": [0.1, 1.0e12]}}], seeds=[0],
                      batching="off")
    summary = run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    assert summary.counts() == {"finished": 1, "diverged": 1, "failed": 0, "skipped": 0}
    c, trials, parents = _trial_runs(tracking_uri, "tiny")
    assert len(trials) == 2 and len(parents) == 1
    assert parents[0].info.status == "FINISHED"
    assert parents[0].data.tags["harness.sweep_id"] == summary.sweep_id
    by_lr = {r.data.params["optimizer.step_size"]: r for r in trials}
    ok, div = by_lr["0.1"], by_lr["1000000000000.0"]
    # tags, params, names
    for r in (ok, div):
        assert r.info.status == "FINISHED"
        assert r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert r.data.tags["harness.sweep"] == "tiny" and r.data.tags["harness.sweep_id"] == summary.sweep_id
        assert {r.data.tags[k] for k in ("model", "optimizer", "schedule", "dataset", "seed")} == {
            "mlp", "sgd", "constant", "digits", "0"}
        assert r.data.tags["jax_version"] == "0.10.2" and r.data.tags["device_kind"]
        assert r.data.tags["harness.batching"] == "sequential: batching off"  # how its unit trained
        assert r.data.params["model.width"] == "16" and r.data.params["train.steps"] == "40"
    assert ok.info.run_name == "mlp-sgd-constant-lr0.1-s0"
    assert ok.data.tags["status"] == "finished"
    assert div.data.tags["status"] == "diverged"
    # the trainer reports the step whose loss went non-finite or above 100x the initial loss (a
    # tag); a non-finite loss is never a metric, a finite diverged one is the curve's last point
    div_step = int(div.data.tags["diverged_step"])
    assert 1 <= div_step <= 40
    hist = c.get_metric_history(div.info.run_id, "train/loss")
    reason = div.data.tags["harness.reason"]
    if reason.startswith("train loss"):
        assert reason.endswith(f"at step {div_step} exceeds 100x the initial train loss "
                               f"{hist[0].value:.4g}")
        assert [m.step for m in hist] == list(range(1, div_step + 1))
    else:
        assert reason == f"non-finite train loss at step {div_step}"
        assert [m.step for m in hist] == list(range(1, div_step))
    # curves with explicit steps
    hist = c.get_metric_history(ok.info.run_id, "train/loss")
    assert [m.step for m in hist] == list(range(1, 41))
    ev = c.get_metric_history(ok.info.run_id, "valid/accuracy")
    assert [m.step for m in ev] == [0, 20, 40]
    # the test split: evaluated once, at the last step; never under the old eval/* names
    (te,) = c.get_metric_history(ok.info.run_id, "test/accuracy")
    assert te.step == 40 and [m.step for m in c.get_metric_history(ok.info.run_id, "test/loss")] == [40]
    assert not {k for k in ok.data.metrics if k.startswith("eval/") or k.startswith("final/eval")}
    assert "test/accuracy" not in div.data.metrics and "test/loss" not in div.data.metrics
    by_trial = {o.trial_id: o for o in summary.outcomes}
    o_ok = by_trial[ok.data.tags["harness.trial_id"]]
    assert ok.data.metrics["valid/accuracy"] == pytest.approx(o_ok.final_valid_accuracy)
    assert ok.data.metrics["test/accuracy"] == pytest.approx(o_ok.test_accuracy)
    assert ok.data.metrics["test/loss"] == pytest.approx(o_ok.test_loss)
    assert "convergence/steps_to_target" in ok.data.metrics
    assert [m.step for m in c.get_metric_history(ok.info.run_id, "time/wall_s")] == [0, 20, 40]
    assert ok.data.metrics["final/valid_accuracy"] == ok.data.metrics["valid/accuracy"]
    assert ok.data.params["target.metric"] == "valid/accuracy"
    assert ok.data.params["target.mode"] == "max" and ok.data.params["target.value"] == "0.3"
    assert div.data.tags["harness.reason"]
    # artifacts and dataset input
    assert {a.path for a in c.list_artifacts(ok.info.run_id)} == {"curves.csv", "trial.json"}
    csv_text = Path(c.download_artifacts(ok.info.run_id, "curves.csv", str(tmp_path))).read_text()
    assert csv_text.splitlines()[0] == "split,step,wall_s,loss,accuracy"
    assert len(csv_text.splitlines()) == 1 + 40 + 3 + 1
    assert [ln.split(",")[0] for ln in csv_text.splitlines()[-4:]] == ["valid"] * 3 + ["test"]
    # the training split: one dataset input on the sweep's parent run, none per trial
    assert not ok.inputs.dataset_inputs
    assert [d.dataset.name for d in c.get_run(parents[0].info.run_id).inputs.dataset_inputs] == ["digits"]
    assert {a.path for a in c.list_artifacts(parents[0].info.run_id)} == {
        "config.yaml", "resolved_config.json", "trials.json"}

    # re-run of a finished sweep: nothing re-run, nothing duplicated, and no new (empty) parent run
    again = run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    assert again.counts()["skipped"] == 2 and again.sweep_id == summary.sweep_id
    assert again.parent_run_id is None
    _, trials2, parents2 = _trial_runs(tracking_uri, "tiny")
    assert {r.info.run_id for r in trials2} == {r.info.run_id for r in trials}
    assert [p.info.run_id for p in parents2] == [p.info.run_id for p in parents]


def test_trial_that_raises_is_failed_and_rerun(tmp_path, write_sweep, tracking_uri, fake_trainer,
                                               monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = write_sweep(seeds=[0, 1, 2])
    fake_trainer["raise_for"] = (1,)
    s = run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    assert s.counts() == {"finished": 2, "diverged": 0, "failed": 1, "skipped": 0}
    c, trials, _ = _trial_runs(tracking_uri, "tiny")
    failed = [r for r in trials if r.info.status == "FAILED"]
    assert len(failed) == 1 and failed[0].data.tags["status"] == "failed"
    assert failed[0].data.tags["seed"] == "1"
    tb = Path(c.download_artifacts(failed[0].info.run_id, "traceback.txt", str(tmp_path))).read_text()
    assert "RuntimeError: boom " + failed[0].data.tags["harness.trial_id"] in tb
    assert "Traceback (most recent call last)" in tb
    # a re-run trains exactly the failed trial
    fake_trainer["raise_for"] = ()
    fake_trainer["calls"].clear()
    s2 = run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    assert fake_trainer["calls"] == [failed[0].data.tags["harness.trial_id"]]
    assert s2.counts() == {"finished": 3, "diverged": 0, "failed": 0, "skipped": 2}
    _, trials, _ = _trial_runs(tracking_uri, "tiny")
    fin = [r.data.tags["harness.trial_id"] for r in trials if r.info.status == "FINISHED"]
    assert len(fin) == len(set(fin)) == 3


def test_execute_unit_is_idempotent(tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    """A retried unit skips FINISHED trials and kills stale RUNNING runs of its trials."""
    from harness.config.load import load_config
    from harness.core.context import RunContext
    from harness.execute.worker import execute_unit
    from harness.orchestrate.run import expand

    monkeypatch.chdir(tmp_path)
    # The concurrent invocation takes no claims (another machine, HARNESS_CLAIMS=0): a held claim
    # answers the question itself, so the writer asks the store only for an unclaimed trial.
    monkeypatch.setenv("HARNESS_CLAIMS", "0")
    specs = expand(load_config(write_sweep(seeds=[0, 1])))
    c = prepare_store(tracking_uri)
    exp = get_or_create_experiment(c, "tiny", tracking_uri)
    parent = c.create_run(exp).info.run_id
    ctx = RunContext(tracking_uri, exp, parent, "sid", "tiny")
    stale = c.create_run(exp, tags={"harness.trial_id": specs[1].trial_id, "harness.kind": "trial"})
    first = execute_unit(specs[:1], ctx)
    assert [o.status for o in first] == ["finished"] and not first[0].skipped
    out = execute_unit(specs, ctx)
    assert [o.skipped for o in out] == [True, False]
    assert out[0].run_id == first[0].run_id
    assert c.get_run(stale.info.run_id).info.status == "KILLED"
    assert fake_trainer["calls"] == [specs[0].trial_id, specs[1].trial_id]


def test_a_failed_vmapped_batch_says_why_its_trials_were_retried_one_at_a_time(
        tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch, caplog):
    """A vmapped batch that raised was retried trial by trial with its exception swallowed
    (``except Exception: pass``): the reason is now logged (a warning) and tagged on each retried
    trial's run (``harness.batch_fallback_reason``)."""
    import logging

    from harness.config.load import load_config
    from harness.core.context import RunContext
    from harness.execute.worker import execute_unit
    from harness.orchestrate.run import expand
    from harness.train import loop as trainer

    def batch_fails(specs, **kw):
        raise ValueError("vmapped program ran out of memory\nsecond line")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(trainer, "run_trials_batched", batch_fails)
    specs = expand(load_config(write_sweep(seeds=[0, 1])))
    c = prepare_store(tracking_uri)
    exp = get_or_create_experiment(c, "tiny", tracking_uri)
    ctx = RunContext(tracking_uri, exp, c.create_run(exp).info.run_id, "sid", "tiny")
    with caplog.at_level(logging.WARNING):
        out = execute_unit(specs, ctx)
    assert [o.status for o in out] == ["finished", "finished"]  # retried one at a time: both train
    why = "ValueError: vmapped program ran out of memory"
    assert any(why in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    for o in out:
        assert c.get_run(o.run_id).data.tags["harness.batch_fallback_reason"] == why


_KILL_SCRIPT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    import harness.train.loop as trainer
    from conftest import fake_result

    def run_trial(spec, **kw):
        return fake_result(spec, sleep={sleep})

    trainer.run_trial = run_trial
    trainer.run_trials_batched = lambda specs, **kw: [run_trial(s) for s in specs]
    trainer.should_batch = lambda specs: False
    from harness.cli import main
    sys.argv = ["harness", "sweep", {cfg!r}, "--tracking-uri", {uri!r}, "-q"]
    main()
""")


def test_sigkill_midway_then_resume_completes_exactly_the_missing(tmp_path, write_sweep, tracking_uri):
    cfg = write_sweep(seeds=list(range(8)))
    script = tmp_path / "run.py"
    script.write_text(_KILL_SCRIPT.format(tests=str(Path(__file__).parent), sleep=0.7, cfg=str(cfg),
                                          uri=tracking_uri))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    db = tmp_path / "mlflow.db"
    deadline = time.monotonic() + 120
    n_done = 0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.3)
            if db.exists():
                # Read the tables with sqlite3: an MlflowClient here could race the child's schema
                # creation (concurrent first-time migrations crash).
                try:
                    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
                        n_done = con.execute(
                            "select count(*) from runs r join tags t on r.run_uuid = t.run_uuid "
                            "where r.status = 'FINISHED' and t.key = 'harness.kind' and t.value = 'trial'"
                        ).fetchone()[0]
                except sqlite3.Error:  # tables not created yet
                    continue
            if n_done >= 3:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert 3 <= n_done < 8, proc.stderr.read().decode()[-2000:]
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name("tiny")
    before = {r.data.tags["harness.trial_id"] for r in c.search_runs(
        [exp.experiment_id], "attributes.status = 'FINISHED' and tags.`harness.kind` = 'trial'")}
    running = c.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'")
    assert running  # the killed invocation left its parent (and maybe a trial) RUNNING

    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    runs = search_all(c, exp.experiment_id)
    trials = [x for x in runs if x.data.tags.get("harness.kind") == "trial"]
    fin = [x.data.tags["harness.trial_id"] for x in trials if x.info.status == "FINISHED"]
    assert len(fin) == len(set(fin)) == 8  # every trial once, no duplicate
    new_parent = max((x for x in runs if x.data.tags.get("harness.kind") == "parent"),
                     key=lambda x: x.info.start_time)
    rerun = {x.data.tags["harness.trial_id"] for x in trials
             if x.data.tags["mlflow.parentRunId"] == new_parent.info.run_id}
    assert rerun == set(fin) - before  # exactly the missing ones
    assert not [x for x in runs if x.info.status == "RUNNING"]
    assert int(new_parent.data.params["n_skipped"]) == len(before)


# A real --jobs 2 sweep (process executor, real trainer): tests/test_devices.py
# (test_jobs_2_on_4_forced_cpu_devices_gives_each_worker_its_own_device), which also checks the
# workers' device assignment.


def test_train_rows_to_log_keeps_ends_and_bounds():
    from harness.tracking.trial_run import train_rows_to_log

    assert train_rows_to_log(5, 250) == [0, 1, 2, 3, 4]
    rows = train_rows_to_log(1000, 250)
    assert len(rows) == 250 and rows[0] == 0 and rows[-1] == 999
    assert rows == sorted(set(rows))


def test_background_logging_writes_every_run_and_defers_to_a_finished_one(
        tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    """``execute_unit(..., background=True)`` makes no MLflow call on the training path; after
    ``flush_logging`` every trial has one FINISHED run with its metrics, and a FINISHED run that
    appeared meanwhile (a concurrent invocation) wins: no second FINISHED run is made."""
    from harness.config.load import load_config
    from harness.core.context import RunContext
    from harness.execute.background import flush_logging
    from harness.execute.worker import execute_unit
    from harness.orchestrate.run import expand

    monkeypatch.chdir(tmp_path)
    # The concurrent invocation takes no claims (another machine, HARNESS_CLAIMS=0): a held claim
    # answers the question itself, so the writer asks the store only for an unclaimed trial.
    monkeypatch.setenv("HARNESS_CLAIMS", "0")
    specs = expand(load_config(write_sweep(seeds=[0, 1])))
    c = prepare_store(tracking_uri)
    exp = get_or_create_experiment(c, "tiny", tracking_uri)
    ctx = RunContext(tracking_uri, exp, c.create_run(exp).info.run_id, "sid", "tiny")
    # a concurrent invocation finished trial 1 first
    other = c.create_run(exp, tags={"harness.trial_id": specs[1].trial_id, "harness.kind": "trial"})
    c.set_terminated(other.info.run_id, "FINISHED")
    out = execute_unit(specs, ctx, background=True)
    assert [o.status for o in out] == ["finished", "finished"] and all(o.run_id is None for o in out)
    assert flush_logging() >= 0.0
    _, trials, _ = _trial_runs(tracking_uri, "tiny")
    by_trial: dict = {}
    for r in trials:
        by_trial.setdefault(r.data.tags["harness.trial_id"], []).append(r)
    assert [r.info.run_id for r in by_trial[specs[1].trial_id]] == [other.info.run_id]
    (mine,) = by_trial[specs[0].trial_id]
    assert mine.info.status == "FINISHED" and mine.data.tags["status"] == "finished"
    assert mine.data.metrics["valid/accuracy"] == pytest.approx(out[0].final_valid_accuracy)
    assert mine.data.metrics["test/accuracy"] == pytest.approx(out[0].test_accuracy)


def test_flush_logging_raises_the_store_error(monkeypatch):
    """A background write that fails surfaces at ``flush_logging`` (its trial stays unfinished)."""
    import concurrent.futures as cf

    from harness.execute import background

    fut: cf.Future = cf.Future()
    fut.set_exception(ConnectionError("store went away"))
    monkeypatch.setattr(background, "PENDING", [fut])
    with pytest.raises(ConnectionError, match="store went away"):
        background.flush_logging()
    assert background.PENDING == []


def test_hint_commands_name_the_interpreter_the_user_ran(tmp_path, monkeypatch):
    import shutil

    from harness.orchestrate.run import SweepSummary, print_summary, python_command

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(shutil, "which", lambda name: sys.executable)  # an activated venv
    assert python_command() == "python"
    venv_py = tmp_path / ".venv" / "bin" / "python"  # README's install, venv not activated
    monkeypatch.setattr(sys, "executable", str(venv_py))
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/python")
    assert python_command() == ".venv/bin/python"
    monkeypatch.setattr(shutil, "which", lambda name: None)
    from rich.console import Console

    console = Console(record=True, width=200)
    print_summary(console, SweepSummary("quickstart", "abc123", None, None, default_tracking_uri(),
                                        [], 1.0))
    text = console.export_text()
    assert "Open the MLflow UI: .venv/bin/python -m harness ui --experiment quickstart\n" in text
    assert "HTML report:        .venv/bin/python -m harness report --experiment quickstart --sweep abc123\n" \
        in text
    monkeypatch.chdir(tmp_path.parent)
    monkeypatch.setattr(sys, "executable", "/opt/py/bin/python3")
    assert python_command() == "/opt/py/bin/python3"


def test_summary_best_config_ranks_like_the_report_leaderboard():
    """Time to target (in steps, within one optimizer) beats a higher final accuracy, and more seeds
    reaching the target beats both (the terminal summary used to pick by final accuracy alone,
    unlike the HTML report)."""
    from harness.core.outcome import TrialOutcome
    from harness.orchestrate.run import best_configs

    def o(config, seed, acc, secs):
        return TrialOutcome(trial_id=f"{config}{seed}", status="finished", model="mlp", optimizer="sgd",
                            dataset="digits", config=config, seed=seed, final_valid_accuracy=acc,
                            seconds_to_target=secs,
                            steps_to_target=None if secs is None else round(secs * 100))

    slow_accurate = [o("A", 0, 0.99, 0.5), o("A", 1, 0.99, 0.5)]
    fast = [o("B", 0, 0.95, 0.1), o("B", 1, 0.95, 0.1)]
    half_reached = [o("C", 0, 0.999, 0.01), o("C", 1, 0.999, None)]
    (best,) = best_configs(slow_accurate + fast + half_reached)
    assert best["config"] == "B" and best["reached"] == 2
    (best,) = best_configs(slow_accurate + half_reached)
    assert best["config"] == "A"


def test_summary_names_each_rows_metric_when_tasks_differ():
    """A workloads sweep mixes a loss target (markov_lm) with an accuracy target (mnist1d): the
    table once headed every row "valid loss", so the CNN's accuracy 0.9475 read as a loss."""
    from rich.console import Console

    from harness.core.outcome import TrialOutcome
    from harness.orchestrate.run import SweepSummary, print_summary

    def o(model, ds, metric, valid, test, seed=0):
        is_loss = metric.endswith("loss")
        kw = {"final_valid_loss": valid, "test_loss": test} if is_loss else \
            {"final_valid_accuracy": valid, "test_accuracy": test}
        return TrialOutcome(trial_id=f"{model}{seed}", status="finished", model=model, optimizer="adam",
                            dataset=ds, config="lr=0.01", seed=seed, target_metric=metric, **kw)

    def table(outcomes):
        console = Console(record=True, width=200)
        print_summary(console, SweepSummary("w", "sid", "1", None, "sqlite:///x.db", outcomes, 1.0))
        lines = console.export_text().splitlines()
        return next(ln for ln in lines if ln.split()[:2] == ["rank", "optimizer"]), lines

    def rows(lines):  # one ranked table per task, under its label: model -> its row
        out, model = {}, None
        for ln in lines:
            if " · " in ln and not ln[:1].isspace() and not ln[:1].isdigit():
                model = ln.split()[0]
            elif model and ln.split()[1:2] == ["adam"]:
                out[model] = ln.split()
        return out

    mixed = [o("transformer_lm", "markov_lm", "valid/loss", 1.9343, 1.9268),
             o("cnn1d", "mnist1d", "valid/accuracy", 0.9475, 0.9470),
             o("cnn1d", "mnist1d", "valid/accuracy", 0.9275, 0.9270, seed=1)]
    head, lines = table(mixed)
    assert head.split() == ["rank", "optimizer", "best", "config", "valid", "test", "to", "target",
                            "(median)", "ex/s", "seeds"]
    row = rows(lines)
    assert row["transformer_lm"][3:7] == ["loss", "1.9343", "loss", "1.9268"]
    assert row["cnn1d"][3:7] == ["acc", "0.9375", "acc", "0.9370"] and row["cnn1d"][-1] == "2"
    head, lines = table(mixed[1:])  # one metric: it names the columns, the values stay bare
    assert "valid acc" in head and "test acc" in head
    assert rows(lines)["cnn1d"][3:5] == ["0.9375", "0.9370"]


def test_background_writes_are_flushed_before_a_throughput_measurement(
        tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    """Throughput must not be timed while the background thread writes to MLflow (on 2 cores the
    quickstart's first CNN examples/s read 2.7x low): a unit whose perf key is not measured yet
    waits for pending writes; a unit with a cached measurement does not."""
    from harness.config.load import load_config
    from harness.core.context import RunContext
    from harness.execute import background, training
    from harness.execute.worker import execute_unit
    from harness.orchestrate.run import expand
    from harness.train import perf

    monkeypatch.chdir(tmp_path)
    # The concurrent invocation takes no claims (another machine, HARNESS_CLAIMS=0): a held claim
    # answers the question itself, so the writer asks the store only for an unclaimed trial.
    monkeypatch.setenv("HARNESS_CLAIMS", "0")
    specs = expand(load_config(write_sweep(seeds=[0, 1])))
    c = prepare_store(tracking_uri)
    exp = get_or_create_experiment(c, "tiny", tracking_uri)
    ctx = RunContext(tracking_uri, exp, c.create_run(exp).info.run_id, "sid", "tiny", measure_perf=True)
    calls = []
    real_flush = background.flush_logging
    monkeypatch.setattr(background, "flush_logging", lambda: calls.append("flush") or real_flush())
    monkeypatch.setattr(training, "PERF_CACHE", {})
    execute_unit(specs[:1], ctx, background=True)
    assert calls == ["flush"]
    training.PERF_CACHE[perf.perf_cache_key(specs[1])] = object()
    execute_unit(specs[1:], ctx, background=True)
    assert calls == ["flush"]
    real_flush()


def test_concurrent_invocations_leave_one_finished_run_per_trial(
        tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    """Two invocations racing on one trial (simulated: the other invocation's FINISHED run appears
    after this one's check) end with exactly one FINISHED run per trial; the later is KILLED and
    tagged ``harness.duplicate_of``."""
    from harness.execute import claims
    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_CLAIMS", "0")  # the racer takes no claims (see the test above)
    cfg = write_sweep(seeds=[0])
    real_claim = claims.take_unfinished
    raced = []

    def claim_then_race(client, unit, ctx, outcomes):
        todo = real_claim(client, unit, ctx, outcomes)
        for spec in todo:  # the other invocation finishes the same trial right now
            r = client.create_run(ctx.experiment_id, start_time=1,
                                  tags={"harness.trial_id": spec.trial_id, "harness.kind": "trial"})
            client.set_terminated(r.info.run_id, "FINISHED")
            raced.append(r.info.run_id)
        return todo

    monkeypatch.setattr(claims, "take_unfinished", claim_then_race)
    run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    _, trials, _ = _trial_runs(tracking_uri, "tiny")
    finished = [r for r in trials if r.info.status == "FINISHED"]
    assert len(raced) == 1 and [r.info.run_id for r in finished] == raced
    (dup,) = [r for r in trials if r.info.status == "KILLED"]
    assert dup.data.tags["harness.duplicate_of"] == raced[0]


def test_params_include_builder_defaults_and_the_filled_total_steps(
        tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    """Only the config's own values were logged: adam's b1/b2/eps and the schedule's total_steps
    (filled with the step budget by the trainer) were missing from the run's params."""
    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    cfg = write_sweep(optimizers=[{"name": "adam", "hparams": {"step_size": 0.01, "b1": 0.8}}],
                      schedules=["cosine_decay"], seeds=[0])
    run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    _, (run,), _ = _trial_runs(tracking_uri, "tiny")
    p = run.data.params
    assert p["optimizer.b1"] == "0.8"  # the config's value wins over the default
    assert (p["optimizer.b2"], p["optimizer.eps"]) == ("0.999", "1e-08")
    assert p["schedule.total_steps"] == p["train.steps"] == "40"
    assert p["schedule.alpha"] == "0.0" and p["model.width"] == "16" and p["model.depth"] == "1"
    assert p["model.activation"] == "relu" and p["model.dropout"] == "0.0"


def test_summary_says_no_target_when_the_config_has_none(tmp_path):
    """A sweep without a target was summarised as "not reached", where the report
    rightly says there is no target."""
    from conftest import make_spec
    from rich.console import Console

    from harness.core.outcome import TrialOutcome
    from harness.orchestrate.run import SweepSummary, print_summary

    def table(spec):
        o = TrialOutcome.of_spec(spec, "finished")
        o.final_valid_accuracy, o.test_accuracy = 0.9, 0.88
        console = Console(record=True, width=200)
        print_summary(console, SweepSummary("t", "sid", "1", None, "sqlite:///x.db", [o], 1.0))
        # its row (rank 1, adam)
        return next(ln for ln in console.export_text().splitlines() if ln.split()[:2] == ["1", "adam"])

    assert "no target" in table(make_spec(target=None))
    assert "not reached" in table(make_spec(target={"metric": "valid/accuracy", "value": 0.95}))


def test_a_terminal_sees_what_the_seconds_before_the_plan_are_spent_on(tmp_path, write_sweep, monkeypatch,
                                                                       capsys):
    """A grown sweep showed a blank terminal for a minute before its progress bar:
    the loading and the pre-flight now say what they do while they run: on a terminal in a
    transient line, on a pipe once per stage on stderr (stdout, what a script reads, unchanged)."""
    import io

    from rich.console import Console

    import harness.orchestrate.progress as progress

    monkeypatch.chdir(tmp_path)
    buf = io.StringIO()
    cfg = write_sweep()
    run_sweep(cfg, tracking_uri=f"sqlite:///{tmp_path / 'x.db'}", dry_run=True,
              console=Console(file=buf, force_terminal=True, width=300))
    assert f"checking {cfg}: reading it" in buf.getvalue()
    assert "pre-flight: tracing 2 builds (1 model; 1 optimizer+schedule pair on it) for 2 trials: 0 done" \
        in buf.getvalue()
    assert capsys.readouterr().err == ""
    plain = io.StringIO()  # a pipe: nothing transient in what a script reads
    monkeypatch.setattr(progress, "PIPE_AFTER_S", 60.0)
    run_sweep(cfg, tracking_uri=f"sqlite:///{tmp_path / 'x.db'}", dry_run=True,
              console=Console(file=plain, force_terminal=False, width=300))
    assert "checking" not in plain.getvalue() and "tiny" in plain.getvalue()
    assert capsys.readouterr().err == ""  # no stage lasted PIPE_AFTER_S: nothing said (an error alone)


def test_a_pipe_hears_each_slow_stage_once_on_stderr(tmp_path, write_sweep, monkeypatch, capsys):
    """On a pipe, a stage that lasts (loading a large dataset, tracing many programs) is said once
    on stderr with its latest k/N; stdout, what a script reads, is unchanged."""
    import io
    import time

    from rich.console import Console

    import harness.orchestrate.progress as progress
    import harness.orchestrate.run as run_mod

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "300")  # stderr's lines whole (at 80 a long path is shortened)
    monkeypatch.setattr(progress, "PIPE_AFTER_S", 0.05)
    real = run_mod.preflight

    def slow_preflight(cfg, file, registries=None, on_stage=None, **kw):
        def stage(name, text):
            on_stage(name, text)
            time.sleep(0.2)  # every stage and every k/N step lasts
        return real(cfg, file, registries, on_stage=stage, **kw)

    monkeypatch.setattr(run_mod, "preflight", slow_preflight)
    cfg = write_sweep()
    plain = io.StringIO()
    run_sweep(cfg, tracking_uri=f"sqlite:///{tmp_path / 'x.db'}", dry_run=True,
              console=Console(file=plain, force_terminal=False, width=300))
    assert "sweep:" not in plain.getvalue() and "tiny" in plain.getvalue()
    # one mlp, and sgd with its constant schedule: 2 traces; each slow stage said once, with
    # its k/N of then (reading the config and the store may or may not have lasted 0.05 s)
    err = capsys.readouterr().err.splitlines()
    assert [ln for ln in err if not ln.startswith((f"sweep: checking {cfg}", "sweep: reading what"))] == [
        f"sweep: loading 1 dataset of {cfg}",
        "sweep: pre-flight: tracing 2 builds (1 model; 1 optimizer+schedule pair on it) for 2 trials: 0 done "
        "(nothing is trained or written yet)"]
    assert len(err) == len(set(err)) <= 4, err


def test_a_real_sweep_in_a_pty_shows_pre_flight_k_of_n_before_its_first_trial(tmp_path, write_sweep):
    """What a user at a terminal sees: the stage line with pre-flight k/N and the
    programs being built, before the first trial's line; a real sweep, the real trainer."""
    import re

    cfg = write_sweep(optimizers=[{"name": "sgd", "hparams": {"step_size": 0.1}},
                                  {"name": "adam", "hparams": {"step_size": 0.003}}], seeds=[0])
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm"}
    rc, written = run_in_pty([sys.executable, "-m", "harness", "sweep", str(cfg), "--tracking-uri",
                              f"sqlite:///{tmp_path / 'x.db'}"], cwd=tmp_path, env=env)
    assert rc == 0
    out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", written.decode("utf-8", "replace"))
    first_trial = re.search(r"(finished|trained)\s+mlp-", out).start()
    # 1 mlp; sgd and adam, each with the constant schedule: 3 traces
    k_of_n = [m.start() for m in re.finditer(r"pre-flight: tracing 3 builds \(1 model; 2 optimizer\+schedule "
                                             r"pairs on it\) for 2 trials: [0-3] done", out)]
    assert k_of_n and k_of_n[0] < first_trial, out
    assert -1 < out.index("building 2 programs for 2 trials (batching auto") < first_trial, out


def test_a_trial_still_being_written_is_not_called_finished():
    """A fresh user's attack: a sweep SIGKILLed right after "finished mlp-sgd-... valid acc 0.9164"
    had no run of that trial in the store (its write was queued on the background writer), so the
    line said more than was true. Until its run is written the line says "trained ... (being
    written)"; a written one (a run id) says "finished"."""
    from conftest import make_spec

    from harness.core.outcome import TrialOutcome
    from harness.orchestrate.progress import outcome_line

    spec = make_spec()
    o = TrialOutcome.of_spec(spec, "finished")
    o.final_valid_accuracy, o.final_valid_loss = 0.9164, 0.3608
    queued = outcome_line(o)
    assert queued.startswith("[green]trained [/]") and "(being written)" in queued
    o.run_id = "abc"
    written = outcome_line(o)
    assert written.startswith("[green]finished[/]") and "being written" not in written
    d = TrialOutcome.of_spec(spec, "diverged")
    assert outcome_line(d).startswith("[yellow]diverged[/]") and "(being written)" in outcome_line(d)
