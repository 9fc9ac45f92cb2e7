"""Tests of ``reports``: MLflow → frame → figures → HTML (opened in headless Chromium).

The MLflow data is written here with ``MlflowClient`` into a temporary SQLite store, following the
conventions of docs/architecture.md: two parent runs (a resumed sweep) sharing ``harness.sweep_id``,
2 models × 3 optimizers × 3 step sizes × 3 seeds child runs, one trial that failed, one that
diverged, one that failed once and then finished, and a baseline sweep for ``--baseline``.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import markupsafe
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex

import reports
from harness.core import names as N
from harness.core.spec import TrialSpec
from reports import figures as F
from reports import frame as RF
from reports import runs as mlruns
from reports.compare import compare
from reports.objectives import objective
from reports.selection import best_configs

EXP = "demo"
SWEEP = "sweep-cur"
BASE = "sweep-base"
MODELS = {"mlp": 0.02, "cnn": 0.012}  # convergence rate per unit of optimizer speed
STEP_MS = {"mlp": 1.0, "cnn": 3.0}
OPTS = {"sgd": 0.4, "momentum": 1.0, "adam": 2.0}  # optimizer speed factor
OPT_MS = {"sgd": 1.0, "momentum": 1.1, "adam": 1.2}
STEP_SIZES = (0.001, 0.01, 0.1)
SEEDS = (0, 1, 2)
STEPS, EVAL_EVERY, TRAIN_EVERY, BATCH = 200, 20, 10, 128
TARGET = 0.8
FAILED = ("mlp", "momentum", 0.001, 1)
DIVERGED = ("cnn", "adam", 0.1, 2)
RETRIED = ("mlp", "adam", 0.01, 0)
DIVERGED_AT = 60
T0 = 1_700_000_000_000  # ms



# ---------------------------------------------------------------------------------------------
# Synthetic sweep, logged with the MLflow client
# ---------------------------------------------------------------------------------------------
def _spec(model, opt, lr, seed):
    return TrialSpec.make(
        sweep=EXP,
        model=model,
        optimizer=opt,
        schedule="constant",
        dataset="mnist1d",
        seed=seed,
        steps=STEPS,
        batch_size=BATCH,
        eval_every=EVAL_EVERY,
        model_hparams={"width": 32},
        optimizer_hparams={"step_size": lr},
        target={"metric": "valid/accuracy", "value": TARGET, "mode": "max"},
    )


#: A finished run without ``best/valid_*`` (logged before them): the frame holds its curve's best.
BEST_OF_CURVE = {"best/valid_accuracy": ("valid/accuracy", max), "best/valid_loss": ("valid/loss", min)}


def _trial_values(model, opt, lr, seed, acc_shift=0.0, ms_scale=1.0):
    """Every metric value of one trial: {'curves': {key: [(step, value)]}, 'summary': {key: value}}."""
    k = MODELS[model] * OPTS[opt] * math.exp(-((math.log10(lr) + 2) ** 2))
    rng = np.random.default_rng(zlib.crc32(repr((model, opt, lr, seed)).encode()))
    ms = STEP_MS[model] * OPT_MS[opt] * ms_scale
    ev = np.arange(0, STEPS + 1, EVAL_EVERY)
    tr = np.arange(0, STEPS + 1, TRAIN_EVERY)
    acc = (
        0.1
        + 0.85 * (1 - np.exp(-k * ev))
        + 0.004 * (seed - 1)
        + 0.001 * rng.standard_normal(len(ev))
        + acc_shift
    )
    eval_loss = 2.3 * np.exp(-k * ev) + 0.05 + 0.002 * rng.random(len(ev))
    train_loss = 2.3 * np.exp(-1.05 * k * tr) + 0.04 + 0.002 * rng.random(len(tr))
    wall = ev * ms / 1000.0 * (1 + 0.02 * seed)
    diverged = (model, opt, lr, seed) == DIVERGED
    if diverged:
        ev_keep, tr_keep = ev < DIVERGED_AT, tr < DIVERGED_AT
        ev, acc, eval_loss, wall = ev[ev_keep], acc[ev_keep], eval_loss[ev_keep], wall[ev_keep]
        tr, train_loss = tr[tr_keep], train_loss[tr_keep]
    cur = {
        "train/loss": list(zip(tr.tolist(), train_loss.tolist(), strict=True)),
        "valid/loss": list(zip(ev.tolist(), eval_loss.tolist(), strict=True)),
        "valid/accuracy": list(zip(ev.tolist(), acc.tolist(), strict=True)),
        "time/wall_s": list(zip(ev.tolist(), wall.tolist(), strict=True)),
    }
    summ = {
        "perf/step_time_ms": ms,
        "perf/step_time_ms_p10": 0.95 * ms,
        "perf/step_time_ms_p90": 1.08 * ms,
        "perf/examples_per_sec": BATCH / ms * 1000.0,
        "perf/compile_s": 0.5 + 0.1 * OPT_MS[opt],
        "perf/flops_per_step": 1e6 * STEP_MS[model],
        "perf/utilization": 0.1 * OPT_MS[opt] / STEP_MS[model] * 2,
        # the trial's time budget
        "time/compile_s": 0.5 + 0.1 * OPT_MS[opt], "time/train_s": float(wall[-1]),
        "time/eval_s": 0.1 * STEP_MS[model], "time/throughput_s": 0.2, "time/tracking_s": 0.01,
        "time/other_s": 0.05,
    }
    if not diverged:
        summ["final/valid_accuracy"] = float(acc[-1])
        summ["final/valid_loss"] = float(eval_loss[-1])
        summ["test/accuracy"] = float(acc[-1]) - 0.02 + 0.001 * seed
        summ["test/loss"] = float(eval_loss[-1]) + 0.03
        hit = np.nonzero(acc >= TARGET)[0]
        if len(hit):
            summ["convergence/steps_to_target"] = float(ev[hit[0]])
            summ["convergence/seconds_to_target"] = float(wall[hit[0]])
    return {"curves": cur, "summary": summ, "diverged": diverged}


def _log_sweep(client, exp_id, sweep_id, t0, acc_shift=None, ms_scale=None, models=tuple(MODELS)):
    """Log one sweep; returns {trial_id: expected values} (``None`` values for a failed trial)."""
    from mlflow.entities import Metric, Param

    acc_shift, ms_scale = acc_shift or {}, ms_scale or {}
    env = {
        "jax_version": "0.10.2",
        "jaxlib_version": "0.10.2",
        "harness_version": "0.1.0",
        "device_kind": "cpu",
        "git_commit": "abc1234",
    }
    parents = []
    for i in range(2):  # a resumed sweep: two invocations
        p = client.create_run(
            exp_id,
            start_time=t0 + i * 100_000,
            run_name=f"{sweep_id}-{i}",
            tags={N.TAG_SWEEP_ID: sweep_id, N.TAG_KIND: N.KIND_PARENT, N.TAG_SWEEP: EXP, **env},
        )
        parents.append(p.info.run_id)
    expected = {}
    t = t0 + 1000
    for model in models:
        for opt in OPTS:
            for lr in STEP_SIZES:
                for seed in SEEDS:
                    key = (model, opt, lr, seed)
                    spec = _spec(model, opt, lr, seed)
                    tags = {
                        N.TAG_TRIAL_ID: spec.trial_id,
                        N.TAG_SWEEP: EXP,
                        N.TAG_SWEEP_ID: sweep_id,
                        "model": model,
                        "optimizer": opt,
                        "schedule": "constant",
                        "dataset": "mnist1d",
                        "seed": str(seed),
                        **env,
                    }
                    params = [Param(k, v) for k, v in spec.flat_params().items()]
                    attempts = [("FAILED", "failed")] if key == RETRIED else []
                    if key == FAILED:
                        attempts = [("FAILED", "failed")]
                    else:
                        vals = _trial_values(
                            model, opt, lr, seed, acc_shift.get(opt, 0.0), ms_scale.get(opt, 1.0)
                        )
                        attempts.append(("FINISHED", "diverged" if vals["diverged"] else "finished"))
                    for n, (run_status, status) in enumerate(attempts):
                        parent = parents[1] if (key == RETRIED and n == 1) else parents[0]
                        run = client.create_run(
                            exp_id,
                            start_time=t,
                            tags={
                                **tags,
                                N.TAG_PARENT_RUN: parent,
                                N.TAG_STATUS: status,
                                **({N.TAG_REASON: "RuntimeError: boom"} if run_status == "FAILED" else {}),
                            },
                        )
                        t += 1000
                        rid = run.info.run_id
                        if run_status == "FINISHED":
                            metrics = [
                                Metric(k, v, t, int(s)) for k, pts in vals["curves"].items() for s, v in pts
                            ]
                            metrics += [Metric(k, v, t, 0) for k, v in vals["summary"].items()]
                        elif key == RETRIED:  # a partial, wrong curve that the report must ignore
                            metrics = [Metric("valid/accuracy", 0.0123, t, 0),
                                       Metric("train/loss", 9.0, t, 0)]
                        else:
                            metrics = []
                        for j in range(0, len(metrics), 900):
                            client.log_batch(
                                rid, metrics=metrics[j : j + 900], params=params if j == 0 else []
                            )
                        if not metrics:
                            client.log_batch(rid, params=params)
                        client.set_terminated(rid, run_status, end_time=t + 500)
                    expected[spec.trial_id] = {
                        "key": key,
                        "values": None if key == FAILED else vals,
                        "attempts": len(attempts),
                    }
    client.log_text(parents[0], "sweep: demo\noptimizers: [sgd, momentum, adam]\n", N.ARTIFACT_CONFIG)
    for i, p in enumerate(parents):
        client.set_terminated(p, end_time=t0 + i * 100_000 + 90_000)
    return expected, parents


@pytest.fixture(scope="module")
def fast_tmp(tmp_path_factory):
    """A temporary folder on tmpfs when there is one: SQLite's commits (fsync) dominate logging time."""
    import tempfile

    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        root = Path(tempfile.mkdtemp(prefix="test_reports_", dir=shm))
        yield root
        shutil.rmtree(root, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp("mlflow")


@pytest.fixture(scope="module")
def store(fast_tmp):
    from mlflow import MlflowClient

    uri = f"sqlite:///{fast_tmp / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment(EXP, artifact_location=str(fast_tmp / "artifacts"))
    # The baseline ran first, on mlp only; in the current sweep adam's steps are 1.5× slower and
    # momentum's accuracy is 0.05 lower.
    base, _ = _log_sweep(client, exp_id, BASE, T0, models=("mlp",))
    cur, parents = _log_sweep(
        client, exp_id, SWEEP, T0 + 10_000_000, acc_shift={"momentum": -0.05}, ms_scale={"adam": 1.5}
    )
    return {
        "uri": uri,
        "client": client,
        "exp_id": exp_id,
        "expected": cur,
        "base_expected": base,
        "parents": parents,
    }


@pytest.fixture(scope="module")
def frame(store):
    return reports.load_frame(EXP, SWEEP, tracking_uri=store["uri"])


@pytest.fixture(scope="module")
def report(store, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "sub" / "demo.html"
    path = reports.make_report(EXP, None, str(out), baseline=BASE, tracking_uri=store["uri"])
    return path


# ---------------------------------------------------------------------------------------------
# Frame
# ---------------------------------------------------------------------------------------------
def test_frame_holds_exactly_what_mlflow_stored(store, frame):
    client, expected = store["client"], store["expected"]
    s = RF.summaries(frame)
    assert len(s) == len(expected) == len(MODELS) * len(OPTS) * len(STEP_SIZES) * len(SEEDS)
    assert s["trial_id"].is_unique and set(s["trial_id"]) == set(expected)
    c = RF.curves(frame)
    checked = 0
    for tid, exp in expected.items():
        vals = exp["values"]
        row = s[s["trial_id"] == tid].iloc[0]
        tc = c[c["trial_id"] == tid]
        if vals is None:
            assert tc.empty
            assert all(math.isnan(row[m]) for m in RF.SUMMARY_METRICS)
            continue
        for m in RF.SUMMARY_METRICS:
            if m in vals["summary"]:
                assert row[m] == vals["summary"][m], (tid, m)  # exact: the stored float
            elif m in BEST_OF_CURVE and not vals["diverged"]:  # logged before best/*: the curve's best
                curve, pick = BEST_OF_CURVE[m]
                assert row[m] == pick(v for _, v in vals["curves"][curve]), (tid, m)
            else:
                assert math.isnan(row[m]), (tid, m)
        for m, pts in vals["curves"].items():
            got = tc[["step", m]].dropna()
            assert got["step"].tolist() == [s_ for s_, _ in pts]
            assert got[m].tolist() == [v for _, v in pts], (tid, m)
            hist = sorted(client.get_metric_history(row["run_id"], m), key=lambda x: x.step)
            assert got[m].tolist() == [h.value for h in hist]
            checked += 1
        assert tc["step"].is_monotonic_increasing
    assert checked == 4 * (len(expected) - 1)


def test_frame_identity_columns_and_statuses(store, frame):
    s = RF.summaries(frame).set_index("trial_id")
    by_key = {v["key"]: tid for tid, v in store["expected"].items()}
    failed, diverged, retried = s.loc[by_key[FAILED]], s.loc[by_key[DIVERGED]], s.loc[by_key[RETRIED]]
    assert (failed["status"], failed["run_status"], failed["reason"]) == (
        "failed",
        "FAILED",
        "RuntimeError: boom",
    )
    assert (diverged["status"], diverged["run_status"]) == ("diverged", "FINISHED")
    assert RF.curves(frame).query("trial_id == @by_key[@DIVERGED]")["step"].max() == DIVERGED_AT - TRAIN_EVERY
    # the retried trial: two runs, the FINISHED one is used, not the earlier FAILED one
    assert (retried["attempts"], retried["run_status"], retried["status"]) == (2, "FINISHED", "finished")
    assert retried["parent_run_id"] == store["parents"][1]
    assert (s["status"] == "finished").sum() == len(s) - 2
    one = s.loc[by_key[("cnn", "sgd", 0.1, 2)]]
    assert (one["model"], one["optimizer"], one["dataset"], one["seed"]) == ("cnn", "sgd", "mnist1d", 2)
    assert (one["step_size"], one["batch_size"], one["train_steps"]) == (0.1, BATCH, STEPS)
    assert (one["target_metric"], one["target_value"], one["target_mode"]) == (
        "valid/accuracy", TARGET, "max")
    assert one["protocol"] == RF.PROTOCOL_THREE_SPLITS
    assert (one["task"], one["config"]) == ("cnn / mnist1d", "sgd (step_size=0.1)")
    assert one["params.optimizer.step_size"] == "0.1" and one["device_kind"] == "cpu"
    # seeds of a configuration share config_id; step sizes do not
    g = s[(s["task"] == "mlp / mnist1d") & (s["optimizer"] == "adam")].groupby("step_size")["config_id"]
    assert (
        g.nunique().tolist() == [1, 1, 1]
        and s.loc[g.groups[0.01], "config_id"].iloc[0] != s.loc[g.groups[0.1], "config_id"].iloc[0]
    )
    assert frame.attrs["sweep_id"] == SWEEP and frame.attrs["parent_run_ids"] == store["parents"]


def test_latest_sweep_is_default_and_errors_name_what_exists(store):
    data = RF.load_sweep(EXP, tracking_uri=store["uri"])
    assert data.sweep_id == SWEEP and len(data.parents) == 2
    assert data.config_yaml.startswith("sweep: demo")
    with pytest.raises(ValueError, match=r"no MLflow experiment named 'dmeo' \(did you mean 'demo'\?\)"):
        reports.load_frame("dmeo", tracking_uri=store["uri"])
    with pytest.raises(
        ValueError,
        match=r"no run with harness.sweep_id = 'nope'; sweep ids there: "
        r"\['sweep-base', 'sweep-cur'\]",
    ):
        reports.load_frame(EXP, "nope", tracking_uri=store["uri"])


def test_pagination_reads_every_page(store, monkeypatch):
    from mlflow import MlflowClient

    calls = []
    real = MlflowClient.search_runs

    def spy(self, *a, **kw):
        page = real(self, *a, **kw)
        calls.append((kw.get("max_results"), len(page)))
        return page

    monkeypatch.setattr(MlflowClient, "search_runs", spy)
    monkeypatch.setattr(mlruns, "PAGE_SIZE", 7)
    f = reports.load_frame(EXP, SWEEP, tracking_uri=store["uri"])
    n_runs = len(store["expected"]) + 1 + 2  # + the retried trial's FAILED run + 2 parents
    pages = [c for c in calls if c[0] == 7]
    assert len(pages) == math.ceil(n_runs / 7) and sum(n for _, n in pages) == n_runs
    assert RF.summaries(f)["trial_id"].nunique() == len(store["expected"])


@pytest.mark.slow
def test_more_than_a_thousand_runs_are_read_in_full(fast_tmp):
    from mlflow import MlflowClient

    tmp_path = fast_tmp / "big"
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}.db")
    exp = client.create_experiment("big", artifact_location=str(tmp_path))
    n = 1003
    for i in range(n):
        run = client.create_run(
            exp,
            start_time=T0 + i,
            tags={
                N.TAG_TRIAL_ID: f"t{i:04d}",
                N.TAG_SWEEP_ID: "s",
                "optimizer": "sgd",
                "model": "m",
                "dataset": "d",
                "seed": str(i),
                N.TAG_STATUS: "finished",
            },
        )
        client.set_terminated(run.info.run_id)  # a RUNNING trial run is pending: not in the frame
    f = reports.load_frame("big", "s", tracking_uri=f"sqlite:///{tmp_path}.db")
    s = RF.summaries(f)
    assert len(s) == n and set(s["seed"]) == set(range(n)) and (s["status"] == "finished").all()


# ---------------------------------------------------------------------------------------------
# Views: best configurations, leaderboard, profiles, comparison
# ---------------------------------------------------------------------------------------------
def _expected_acc(expected, model, opt, lr):
    return [
        v["values"]["summary"]["final/valid_accuracy"]
        for v in expected.values()
        if v["key"][:3] == (model, opt, lr)
        and v["values"]
        and "final/valid_accuracy" in v["values"]["summary"]
    ]


def test_leaderboard_best_configs_and_confidence_intervals(store, frame):
    best = best_configs(frame).set_index(["task", "optimizer"])
    for model in MODELS:
        task = f"{model} / mnist1d"
        assert best.loc[(task, "adam"), "rank"] == 1 and best.loc[(task, "momentum"), "rank"] == 2
        assert best.loc[(task, "sgd"), "rank"] == 3 and best.loc[(task, "sgd"), "n_reached"] == 0
        assert best.loc[(task, "adam"), "config"] == "adam (step_size=0.01)"
    lb = F.leaderboard(frame).set_index(["Task", "Optimizer"])
    accs = np.array(_expected_acc(store["expected"], "mlp", "momentum", 0.01))
    row = lb.loc[("mlp / mnist1d", "momentum")]
    assert row["_acc_mean"] == pytest.approx(accs.mean(), rel=1e-12)
    # 3 seeds (< 5): the interval is the seeds' min–max, never a t-interval, and the cell says so
    assert (row["_acc_lo"], row["_acc_hi"]) == (accs.min(), accs.max())
    # two significant digits of the narrowest width in the column (one format per column)
    d = max(1 - math.floor(math.log10(hi - lo)) for hi, lo in zip(lb["_acc_hi"], lb["_acc_lo"], strict=True))
    assert row["Validation accuracy"] == f"{accs.mean():.{d}f} [{accs.min():.{d}f}, {accs.max():.{d}f}]"
    assert row["Interval"] == "min–max of 3 seeds (< 5)"  # said once per row, not in every cell
    # the headline: the test accuracy of the validation-selected configuration (lr 0.01)
    tests = [v["values"]["summary"]["test/accuracy"] for v in store["expected"].values()
             if v["key"][:3] == ("mlp", "momentum", 0.01) and v["values"]]
    assert row["_test_mean"] == pytest.approx(np.mean(tests), rel=1e-12)
    assert "seeds" not in row["Test accuracy (selected on validation)"]
    assert lb.loc[("mlp / mnist1d", "sgd"), "Time to target (s, median)"] == "not reached (0/3)"
    assert lb.loc[("mlp / mnist1d", "adam"), "Time to target (s, median)"].endswith(" (3/3 reached)")
    # cnn adam at 0.1 diverged in one seed but 0.01 is best, so 3/3 finished
    assert lb.loc[("cnn / mnist1d", "adam"), "Seeds finished"] == "3/3"


def test_performance_profile_matches_hand_computation(store, frame):
    times = F.profile_times(frame)
    # tuned time-to-result: the fastest configuration's median over seeds of the wall time at the
    # first hit; here the fastest is step size 0.01 for every optimizer that reaches the target
    exp = {}
    for v in store["expected"].values():
        model, opt, lr, _ = v["key"]
        if lr == 0.01 and v["values"] and "convergence/seconds_to_target" in v["values"]["summary"]:
            exp.setdefault((model, opt), []).append(v["values"]["summary"]["convergence/seconds_to_target"])
    for (model, opt), secs in exp.items():
        assert times.loc[f"{model} / mnist1d", opt] == pytest.approx(float(np.median(secs)))
    assert np.isinf(times["sgd"]).all()
    taus = np.array([1.0, 1.5, 2.0, 10.0])
    p = F.performance_profile(frame, taus).pivot(index="tau", columns="optimizer", values="rho")
    ratio = {m: times.loc[f"{m} / mnist1d", "momentum"] / times.loc[f"{m} / mnist1d", "adam"] for m in MODELS}
    assert p["adam"].tolist() == [1.0, 1.0, 1.0, 1.0]
    assert p["sgd"].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert p["momentum"].tolist() == [sum(r <= t for r in ratio.values()) / 2 for t in taus]


def test_compare_flags_only_changes_beyond_spread(store, frame):
    base = reports.load_frame(EXP, BASE, tracking_uri=store["uri"])
    c = compare(frame, base)
    reg = c[c["flag"] == "regression"]
    # slower steps make adam slower to target too; lower accuracy makes momentum reach it later
    assert set(zip(reg["check"], reg["optimizer"], strict=True)) == {
        ("throughput", "adam"),
        ("time to target", "adam"),
        ("final metric", "momentum"),
        ("time to target", "momentum"),
    }
    assert set(reg["task"]) == {"mlp / mnist1d"}  # the baseline has no cnn trials
    # momentum got worse by 0.05 at every step size (the failed seed leaves 2 at step size 0.001)
    assert (reg["check"] == "final metric").sum() == len(STEP_SIZES)
    assert (c["flag"] == "improvement").sum() == 0
    only = c[c["task"] == "cnn / mnist1d"]
    assert len(only) == len(OPTS) * (1 + len(STEP_SIZES)) and set(only["flag"]) == {"n/a"}
    same = compare(frame, frame)
    assert set(same["flag"]) <= {"ok", "n/a"}
    thr = c[(c["check"] == "throughput") & (c["optimizer"] == "adam") & (c["task"] == "mlp / mnist1d")].iloc[
        0
    ]
    assert thr["change"] == "+50.0%"


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------
def _png_wh(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


def test_every_figure_exists_and_draws_data(frame):
    figs = F.make_figures(frame)
    assert set(figs) == {spec.key for spec in F.FIGURES}
    assert figs.pop("scaling") is None  # a ladder sweep's only (tests/test_scaling_report.py)
    assert figs.pop("scaling_frontier") is None
    for key, fig in figs.items():
        assert fig is not None, key
        drawn = sum(len(ax.lines) + len(ax.patches) + len(ax.collections) for ax in fig.axes)
        assert drawn > 0, key
        png = F.png_bytes(fig)
        w, h = _png_wh(png)
        assert w > 300 and h > 200 and len(png) > 10_000, key
        assert b"matplotlib.org" not in png
    conv = figs["convergence_steps"]
    assert len(conv.axes) == 3 * len(MODELS) and conv.axes[0].get_title() == "cnn · mnist1d"
    from reports.layout import layout_problems

    assert {k: layout_problems(f) for k, f in figs.items()} == {k: [] for k in figs}
    assert {ax.get_xlabel() for ax in conv.axes} >= {"optimizer step"}
    assert all(ax.get_xscale() == "log" for ax in figs["sensitivity"].axes)
    texts = [t.get_text() for ax in figs["time_to_target"].axes for t in ax.texts]
    assert sum(t.startswith("not reached") for t in texts) == len(MODELS)  # sgd, on both tasks
    assert any(" s · " in t for t in texts)
    labels = {t.get_text() for ax in figs["throughput"].axes for t in ax.get_yticklabels()}
    assert labels == set(OPTS)
    # the time budget: a bar per task, as long as its trials' seconds together
    budget = figs["time_budget"].axes[0]
    tasks = [t.get_text() for t in budget.get_yticklabels()]
    assert tasks == ["cnn · mnist1d", "mlp · mnist1d"]
    s = frame[frame["row"] == "summary"]
    totals = [sum(b.get_width() for b in budget.patches if abs(b.get_y() + b.get_height() / 2 - i) < 0.01)
              for i in range(len(tasks))]
    parts = [f"time/{p}_s" for p in ("compile", "train", "eval", "throughput", "tracking", "other")]
    assert totals == pytest.approx([s[s["model"] == t.split(" · ")[0]][parts].sum().sum() for t in tasks])


def test_curve_bands_are_median_and_quartiles(store, frame):
    b = F.curve_bands(frame, "valid/accuracy", "step")
    got = b[(b["task"] == "mlp / mnist1d") & (b["optimizer"] == "momentum") & (b["x"] == 100)].iloc[0]
    vals = [
        dict(v["values"]["curves"]["valid/accuracy"])[100]
        for v in store["expected"].values()
        if v["key"][:3] == ("mlp", "momentum", 0.01)
    ]
    assert got["median"] == pytest.approx(np.median(vals)) and got["n"] == 3
    assert got["q25"] == pytest.approx(np.quantile(vals, 0.25)) and got["q75"] == pytest.approx(
        np.quantile(vals, 0.75)
    )
    t = F.curve_bands(frame, "valid/accuracy", "seconds")
    assert len(t[(t["task"] == "mlp / mnist1d") & (t["optimizer"] == "adam")]) == F.TIME_GRID_POINTS
    assert t["x"].min() == 0.0


# ---------------------------------------------------------------------------------------------
# The HTML report
# ---------------------------------------------------------------------------------------------
def test_report_is_self_contained_with_csv_and_artifact(store, report, frame):
    text = report.read_text(encoding="utf-8")
    markup = re.sub(r"<script>.*?</script>", "", text, flags=re.S)  # the inlined Vega JS aside
    assert "default-src 'none'" in markup
    svgs = re.findall(r'<figure id="[a-z-]+-static"><svg', markup)
    assert len(svgs) == len(F.FIGURES) - 2 and "<img" not in markup  # all but a ladder's two scaling
    assert not re.search(r'\s(?:src|href)="(?!data:|#)', markup)
    for anchor in re.findall(r'href="#([^"]+)"', text):
        assert f'id="{anchor}"' in text, anchor
    for needle in (
        "Contents",
        "Leaderboard",
        "Sweep configuration",
        "sweep: demo",
        "Environment",
        "0.10.2",
        "not reached",
        "Comparison with baseline sweep-base",
        "regression",
        "RuntimeError: boom",
        "diverged",
        "95% bootstrap interval",
    ):
        assert needle in text, needle
    csv = pd.read_csv(report.with_suffix(".csv.gz"))
    # the frame's rows, then the protocol's tables (reports.protocol.csv_rows)
    assert csv["row"].isin(["curve", "summary"]).sum() == len(frame)
    assert set(csv["row"]) == {"curve", "summary", "tuning_curve", "tuned_time"}
    s = csv[csv["row"] == "summary"].set_index("trial_id")
    f = RF.summaries(frame).set_index("trial_id")
    assert np.array_equal(
        s.loc[f.index, "perf/step_time_ms"].to_numpy(), f["perf/step_time_ms"].to_numpy(), equal_nan=True
    )
    # attached to every parent run whose trials the report shows (a resumed sweep: both)
    shown = set(RF.summaries(frame)["parent_run_id"])
    assert shown == set(store["parents"])
    for parent in store["parents"]:
        arts = store["client"].list_artifacts(parent, "reports")
        assert {Path(a.path).name for a in arts} == {"demo.html"}  # the table: not a second copy


def test_sweep_with_only_failed_trials_still_reports(store, tmp_path, monkeypatch):
    client = store["client"]
    exp = client.create_experiment("broken", artifact_location=str(tmp_path / "art"))
    parent = client.create_run(exp, tags={N.TAG_SWEEP_ID: "b1", N.TAG_KIND: N.KIND_PARENT}).info.run_id
    for i in range(2):  # no status tag, no params, no metrics: what a crash at start leaves
        run = client.create_run(
            exp,
            tags={
                N.TAG_SWEEP_ID: "b1",
                N.TAG_TRIAL_ID: f"t{i}",
                N.TAG_PARENT_RUN: parent,
                "optimizer": "sgd",
            },
        )
        client.set_terminated(run.info.run_id, "FAILED")
    monkeypatch.chdir(tmp_path)
    path = reports.make_report("broken", tracking_uri=store["uri"])
    assert path == tmp_path / "report-broken-b1.html"
    text = path.read_text(encoding="utf-8")
    s = RF.summaries(pd.read_csv(path.with_suffix(".csv.gz")))
    assert s["status"].tolist() == ["failed", "failed"] and s["model"].tolist() == ["?", "?"]
    for spec in F.FIGURES:  # as Jinja's autoescape writes it (an apostrophe is &#39;)
        # an optional figure (a ladder's scaling) is left out of a page without its data
        assert (str(markupsafe.escape(spec.empty)) in text) is not spec.optional, spec.key
    assert "No trial to rank." not in text and "not logged" in text


def test_tags_written_by_harness_tracking_are_understood(store, tmp_path):
    """``harness.kind=parent``, ``status_reason``/``diverged_step`` tags, and no ``final/*`` metrics."""
    from mlflow.entities import Metric

    client = store["client"]
    exp = client.create_experiment("kinds", artifact_location=str(tmp_path / "art"))
    parent = client.create_run(exp, tags={N.TAG_SWEEP_ID: "k1", "harness.kind": "parent"}).info.run_id
    ids = []
    for i, (status, extra) in enumerate(
        [
            ("finished", {}),
            ("diverged", {"diverged_step": "7"}),
            ("finished", {"status_reason": "line 1\nsomething odd"}),
        ]
    ):
        run = client.create_run(
            exp,
            tags={
                N.TAG_SWEEP_ID: "k1",
                N.TAG_TRIAL_ID: f"t{i}",
                "harness.kind": "trial",
                N.TAG_PARENT_RUN: parent,
                "status": status,
                **extra,
            },
        )
        ids.append(run.info.run_id)
        client.log_batch(
            run.info.run_id,
            metrics=[
                Metric("eval/accuracy", 0.7 + i / 100, 0, 10),
                Metric("eval/accuracy", 0.5, 0, 0),
                Metric("eval/loss", 0.9, 0, 0),
                Metric("eval/loss", 0.4, 0, 10),
            ],
        )
        client.set_terminated(run.info.run_id)
    data = RF.load_sweep("kinds", tracking_uri=store["uri"])
    assert data.sweep_id == "k1" and [p.info.run_id for p in data.parents] == [parent]
    s = RF.summaries(data.frame).set_index("trial_id")
    # runs from before the three splits (eval/* only) are read into the valid/* columns, labelled
    assert s.loc["t0", "final/valid_accuracy"] == 0.7 and s.loc["t0", "final/valid_loss"] == 0.4
    assert s.loc["t2", "final/valid_accuracy"] == 0.72
    assert math.isnan(s.loc["t1", "final/valid_accuracy"])  # diverged: no final value is made up
    assert set(s["protocol"]) == {RF.PROTOCOL_ONE_SPLIT} and s["test/accuracy"].isna().all()
    c = RF.curves(data.frame)
    assert c[c["trial_id"] == "t0"][["step", "valid/accuracy"]].values.tolist() == [[0, 0.5], [10, 0.7]]
    assert s.loc["t1", "reason"] == "diverged at step 7" and s.loc["t2", "reason"] == "something odd"
    with pytest.raises(ValueError, match=r"sweep ids there: \['k1'\]"):
        reports.load_frame("kinds", "k2", tracking_uri=store["uri"])


def test_reports_never_imports_the_trainer():
    code = (
        "import sys, reports, reports.frame, reports.figures, reports.html, reports.compare; "
        "bad = [m for m in ('harness.trainer', 'jax') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# The page in headless chromium (inline SVG, interactive views, sortable tables, the MLflow UI
# landing): tests/test_report_layout.py.


def test_sensitivity_panels_scale_each_task_to_its_own_values(frame):
    """Found rendering the MNIST-1D report: the panels shared one y axis, so a task near 0.3
    accuracy was a flat line under a task near 0.9. Each panel now fits its own values: the drawn
    medians span at least a third of the panel's y range."""
    obj = objective(frame)
    low = frame.copy()
    tasks = sorted(low.loc[low["row"] == "summary", "task"].unique())
    low.loc[low["task"] == tasks[0], obj.final] = 0.3 + 0.05 * low.loc[low["task"] == tasks[0], obj.final]
    fig = F.sensitivity_figure(low)
    for ax in fig.axes:
        ys = np.concatenate([np.asarray(ln.get_ydata(), float) for ln in ax.lines] or [np.array([])])
        ys = ys[np.isfinite(ys)]
        if ys.size < 2:
            continue
        lo, hi = ax.get_ylim()
        assert lo <= ys.min() and ys.max() <= hi, (ax.get_title(), lo, hi)
        assert (ys.max() - ys.min()) / (hi - lo) > 1 / 3, (ax.get_title(), ys.min(), ys.max(), lo, hi)


def test_leaderboard_markup_is_parsed_as_classes_not_escaped_text(report):
    """The leaderboard's rows rendered as ``<tr class=&#34;best&#34;>`` (the attribute escaped inside
    its tag), so the best row was never highlighted and numbers never right-aligned.
    Checked on the parsed DOM."""
    from html.parser import HTMLParser

    class Rows(HTMLParser):
        def __init__(self):
            super().__init__()
            self.in_board, self.tr_classes, self.td_classes = False, [], []

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "section":
                self.in_board = a.get("id") == "leaderboard"
            elif self.in_board and tag == "tr":
                self.tr_classes.append(a.get("class"))
            elif self.in_board and tag == "td":
                self.td_classes.append(a.get("class"))

    p = Rows()
    p.feed(report.read_text(encoding="utf-8"))
    assert "best" in p.tr_classes and "num" in p.td_classes
    assert not any(c and "&" in c for c in p.tr_classes + p.td_classes)
    assert "&#34;" not in report.read_text(encoding="utf-8").split('id="leaderboard"')[1][:20000]


def _tables(html_text: str) -> dict[str, dict]:
    """Every ``<table id=...>`` of the page, parsed: ``caption`` (text), ``head`` (header cells)
    and ``rows`` (lists of cell texts)."""
    from html.parser import HTMLParser

    class Tables(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tables, self.cur, self.where, self.text = {}, None, None, None

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "table" and a.get("id"):
                self.cur = self.tables.setdefault(a["id"], {"caption": "", "head": [], "rows": []})
            elif self.cur is None:
                return
            elif tag == "caption":
                self.where = "caption"
            elif tag == "tr":
                self.row = []
            elif tag in ("td", "th"):
                self.text = []

        def handle_endtag(self, tag):
            if self.cur is None:
                return
            if tag == "table":
                self.cur = None
            elif tag == "caption":
                self.where = None
            elif tag in ("td", "th"):
                self.row.append("".join(self.text).strip())
                self.text = None
            elif tag == "tr":
                (self.cur["head"].extend if not self.cur["head"] else self.cur["rows"].append)(self.row)

        def handle_data(self, data):
            if self.cur is not None and self.where == "caption":
                self.cur["caption"] += data
            elif self.text is not None:
                self.text.append(data)

    p = Tables()
    p.feed(html_text)
    return p.tables


def test_leaderboard_says_a_shared_interval_and_beats_once_in_its_caption(report):
    """With < 5 seeds every row's "Interval" and "Beats" said the same words: the
    caption says them once and the columns are left out."""
    lb = _tables(report.read_text(encoding="utf-8"))["leaderboard-table"]
    assert lb["caption"] == ("In every row: Interval: min–max of 3 seeds (< 5); "
                             "Beats (paired bootstrap, 95%): not tested (< 5 paired seeds); "
                             "Tuned by: grid.")
    assert "Interval" not in lb["head"] and "Tuned by" not in lb["head"]
    assert not any(h.startswith("Beats") for h in lb["head"])
    assert len(lb["rows"]) == len(MODELS) * len(OPTS)
    assert not any("seeds" in cell for row in lb["rows"] for cell in row)


def test_leaderboard_columns_have_one_number_format_each(report, frame):
    """``0.02106 [0.02106, 0.02106]`` beside ``0.15 [0.08, 0.22]``: every number of
    an interval column has the same decimals, those the column's widest-needing interval asks for."""
    from reports.leaderboard import column_digits

    lb = _tables(report.read_text(encoding="utf-8"))["leaderboard-table"]
    table = F.leaderboard(frame)
    checked = 0
    for col in ("Validation accuracy", "Validation loss", "Test accuracy (selected on validation)",
                "Time to target (s, median)"):
        cells = [row[lb["head"].index(col)] for row in lb["rows"]]
        nums = [n for c in cells for n in re.findall(r"\d+\.(\d+)", c.split(" (")[0])]
        decimals = {len(n) for n in nums}
        assert len(decimals) == 1, (col, cells)
        key = {"Validation accuracy": "acc", "Validation loss": "loss"}.get(col)
        if key:  # the decimals are those column_digits picks from the column's intervals
            ivs = [(r[f"_{key}_mean"], r[f"_{key}_lo"], r[f"_{key}_hi"], r["_n"], "")
                   for r in table.to_dict("records")]
            assert decimals == {column_digits(ivs)}, col
        checked += len(nums)
    assert checked > 40
    # the median step time (.3g gave "1", "1.1" and "0.999" in one column)
    steps = [row[lb["head"].index("Step time (ms, median)")] for row in lb["rows"]]
    assert len({len(c.split(".")[1]) if re.fullmatch(r"\d+\.\d+", c) else -1 for c in steps}) == 1, steps
    assert all(re.fullmatch(r"\d+\.\d+", c) for c in steps), steps


def test_trials_table_has_the_test_loss(report, frame):
    """The trials table showed test accuracy but no test loss."""
    t = _tables(report.read_text(encoding="utf-8"))["trials-table"]
    col, tid = t["head"].index("Test loss"), t["head"].index("Trial")
    got = {row[tid]: row[col] for row in t["rows"]}
    s = RF.summaries(frame).set_index("trial_id")
    finished = s[s["status"] == "finished"]
    assert len(finished) > 40
    for trial_id, r in finished.iterrows():
        assert got[trial_id] == f"{r[N.M_TEST_LOSS]:.4f}", trial_id


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_performance_profile_legend_sits_outside_the_axes(frame):
    """The legend sat in the lower right inside the axes, over a profile at y = 0."""
    fig = F.profile_figure(frame)
    ax = fig.axes[0]
    assert ax.get_legend() is None and len(fig.legends) == 1
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    box = fig.legends[0].get_window_extent(r)
    assert not _overlap(box, ax.get_window_extent(r)), (box, ax.get_window_extent(r))
    assert [t.get_text() for t in fig.legends[0].get_texts()] == sorted(OPTS)


def test_performance_profile_of_one_task_is_a_sentence(frame):
    """One task made a degenerate single step: the report says a profile needs 2."""
    one = frame[frame["task"] == "mlp / mnist1d"]
    assert F.profile_times(one).shape[0] == 1
    assert F.profile_figure(one) == ("A performance profile needs at least 2 tasks; this sweep has 1. "
                                     "The tuned time-to-result below shows its times.")


def test_throughput_tasks_are_not_drawn_in_optimizer_colours(frame):
    """Tasks took seaborn's "muted" colours, the optimizers' hues: tasks are greys
    with a hatch each, no bar has any optimizer's colour."""
    from matplotlib.colors import to_hex

    from reports.style import palette

    fig = F.throughput_figure(frame)
    opt_hex = {to_hex(c) for c in palette(frame).values()}
    bars = [p for ax in fig.axes for p in ax.patches]
    assert len(bars) == 3 * len(MODELS) * len(OPTS)
    faces = {to_hex(p.get_facecolor()) for p in bars}
    assert not faces & opt_hex
    assert all(h[1:3] == h[3:5] == h[5:7] for h in faces)  # grey
    by_task = {(to_hex(p.get_facecolor()), p.get_hatch()) for p in bars}
    assert len(by_task) == len(MODELS)  # one distinct (grey, hatch) per task
    legend = {t.get_text() for t in fig.legends[0].get_texts()}
    assert legend == {"cnn · mnist1d", "mlp · mnist1d"}


def test_tuning_curve_bands_are_faint_fills_and_every_line_is_in_the_legend(frame):
    """Overlapping 0.15-alpha bands of several optimizers turned muddy; their thin edge
    lines were then "faint unexplained horizontal lines": with 3 optimizers, faint
    fills (at most 0.1 alpha) holding each optimizer's validation band, no edge lines; every line is
    an optimizer's validation (solid) or test (dashed) curve, as the legend's keys say."""
    from matplotlib.collections import PolyCollection

    from reports import protocol
    from reports.style import palette

    fig = F.tuning_figure(frame)
    tc = protocol.tuning_curves(frame)
    ax = fig.axes[[a.get_title() for a in fig.axes].index("mlp · mnist1d")]
    fills = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(fills) == len(OPTS) and all(c.get_alpha() <= 0.1 for c in fills)
    g = tc[(tc["task"] == "mlp / mnist1d") & (tc["optimizer"] == "adam")]
    adam = next(c for c in fills if to_hex(c.get_facecolor()[0]) == palette(frame)["adam"].lower())
    ys = adam.get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(g["valid_lo"].min()) and max(ys) == pytest.approx(g["valid_hi"].max())
    keys = {t.get_text() for t in fig.legends[0].get_texts()}
    assert keys >= {*OPTS, "validation (selects)", "test of the selected", "95% band (validation)"}
    styles = {(to_hex(ln.get_color()), ln.get_linestyle()) for ax in fig.axes for ln in ax.lines}
    colours = {c.lower() for c in palette(frame).values()}
    assert {c for c, _ in styles} <= colours and {ls for _, ls in styles} == {"-", "--"}
    assert len([ln for ax in fig.axes for ln in ax.lines]) == 2 * len(OPTS) * len(MODELS)


def test_interactive_tuning_bands_show_on_hover_without_edge_lines(frame):
    """The interactive tuning curves drew every band with thin edge lines, a muddle
    with many optimizers: one area layer, visible (0.2) only for the optimizer
    under the pointer (the selection ``band``), no edge lines; the points carry the static
    figure's markers."""
    from reports import interactive
    from reports.style import vega_shapes

    layers = []

    def walk(node):
        if isinstance(node, dict):
            if "mark" in node:
                layers.append(node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(interactive.tuning_curves_spec(frame))
    areas = [ly for ly in layers if isinstance(ly["mark"], dict) and ly["mark"].get("type") == "area"]
    assert len(areas) == 1
    assert areas[0]["encoding"]["opacity"] == {"condition": {"param": "band", "empty": False, "value": 0.2},
                                               "value": 0}
    thin = [ly for ly in layers if isinstance(ly["mark"], dict) and ly["mark"].get("type") == "line"
            and ly["encoding"]["y"]["field"] in ("lo", "hi")]
    assert not thin
    points = [ly for ly in layers if isinstance(ly["mark"], dict) and ly["mark"].get("type") == "point"]
    nearest, shown = points  # the band's selection (invisible), then the points with their tooltips
    assert nearest["params"][0]["name"] == "band" and nearest["mark"]["opacity"] == 0
    assert shown["encoding"]["shape"]["scale"]["range"] == list(vega_shapes(frame).values())
    assert "tooltip" in shown["encoding"] and "tooltip" not in nearest["encoding"]


def test_tuning_curves_draws_follow_the_report_option_and_the_caption_says_which(frame):
    """Dodge et al.'s paper and code draw k configurations with replacement; the report draws
    k-subsets: ``report --tuning-curves with-replacement`` switches, and the
    caption names the variant in use and the other."""
    from reports import protocol
    from reports.figures import FIGURES

    spec = next(s for s in FIGURES if s.key == "tuning_curves")
    default = protocol.tuning_curves(frame)
    assert "k-subsets drawn without replacement" in spec.caption(frame)
    assert "--tuning-curves with-replacement" in spec.caption(frame)
    with_repl = frame.copy()
    with_repl.attrs[protocol.TUNING_DRAWS_ATTR] = "with-replacement"
    got = protocol.tuning_curves(with_repl)
    pd.testing.assert_frame_equal(got, protocol.tuning_curves(frame, replace=True))
    # with replacement the expected best of k >= 2 draws is lower (a draw may repeat): a real change
    tuned = default[(default["k"] >= 2) & ~default["self_tuning"]]
    assert (got.loc[tuned.index, "valid"] != tuned["valid"]).any()
    assert "k draws with replacement" in spec.caption(with_repl)
    with_repl.attrs[protocol.TUNING_DRAWS_ATTR] = "bootstrap"
    with pytest.raises(ValueError, match="one of without-replacement, with-replacement; got 'bootstrap'"):
        protocol.tuning_curves(with_repl)


def test_the_report_of_a_sweep_that_is_not_over_says_so(tmp_path, write_sweep, tracking_uri, fake_trainer,
                                                        monkeypatch):
    """Found by an attack: the report of a killed 1,000-trial sweep read "407 trials, 407
    finished" and nowhere said that 593 were still to run (`status` did). Now its header says how
    many of the plan's trials have a result; once the sweep is finished, nothing."""
    from conftest import fake_result

    import harness.train.loop as trainer
    from harness.orchestrate.run import SweepInterrupted, run_sweep

    calls = []

    def run_trial(spec, **_kw):  # Ctrl-C while the third of six trials trains
        calls.append(spec.trial_id)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return fake_result(spec)

    monkeypatch.setattr(trainer, "run_trial", run_trial)
    monkeypatch.chdir(tmp_path)
    sgd = [{"name": "sgd", "hparams": {"step_size": [0.1, 0.2]}}]
    cfg = write_sweep(name="half", seeds=[0, 1, 2], optimizers=sgd)
    with pytest.raises(SweepInterrupted):
        run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)

    def note() -> str:
        out = reports.make_report("half", output=str(tmp_path / "r.html"), tracking_uri=tracking_uri)
        html = out.read_text()
        i = html.find('id="unfinished"')
        return "" if i < 0 else " ".join(re.sub(r"<[^>]+>", " ", html[i:html.index("</div>", i)]).split())

    done = len(calls) - 1
    assert note() == (f'id="unfinished"> Not over : {done} of the sweep&#39;s 6 trials have a result; '
                      f"{6 - done} are still to run (its last invocation is KILLED): run the sweep again "
                      f"to finish it (`python -m harness status` tells whether one is running).")
    monkeypatch.setattr(trainer, "run_trial", lambda spec, **_kw: fake_result(spec))
    assert run_sweep(cfg, tracking_uri=tracking_uri, quiet=True).counts()["finished"] == 6
    assert note() == ""


def test_an_adaptive_sweep_whose_last_invocation_ran_only_part_of_it_is_not_said_unfinished():
    """Found by the review: the "Not over" line was shown for an adaptive sweep whose last
    invocation FINISHED with --only (its user chose to run part of it); a plain re-run trains
    nothing and makes no new parent, so the line never went away. An adaptive sweep is "not over"
    when its last invocation did not finish; a fixed one when its plan has trials without a
    result."""
    from types import SimpleNamespace as NS

    from reports.runs import unfinished_words

    def parent(status, search, n=None, only=None):
        params = {k: v for k, v in (("n_trials", n), ("only", only)) if v is not None}
        return NS(info=NS(status=status), data=NS(tags={N.TAG_SEARCH: search}, params=params))

    assert unfinished_words([parent("FINISHED", "coordinate_descent", only="optimizer=sgd")], 4) == ""
    assert unfinished_words([parent("KILLED", "asha,quasirandom")], 4).startswith(
        "The sweep's adaptive search is not over (its last invocation is KILLED): run the sweep again")
    assert unfinished_words([parent("FINISHED", "quasirandom", n="10")], 10) == ""
    assert unfinished_words([parent("KILLED", "grid", n="10"), parent("FINISHED", "grid", n="12")], 7) \
        .startswith("7 of the sweep's 12 trials have a result; 5 are still to run (its last invocation is "
                    "FINISHED)")
    assert unfinished_words([], 3) == ""
