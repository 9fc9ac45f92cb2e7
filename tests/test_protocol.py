"""reports.protocol: the order-statistics estimator (hand values, brute force), bootstrap bands,
tuned time-to-result, honest intervals, paired comparisons; and a constructed sweep through the
real worker → SQLite MLflow → summary table and HTML report whose validation-best and test-best
configurations differ."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from harness.core import names as N
from reports import protocol as P
from reports import selection as RS
from reports.objectives import objective, objectives_differ

# ---------------------------------------------------------------------------------------------
# The estimator
# ---------------------------------------------------------------------------------------------
V3, T3 = [0.9, 0.8, 0.7], [0.7, 0.85, 0.6]


def test_selection_weights_by_hand():
    # without replacement, n=3, k=2: the best is in 2 of the 3 pairs, the second in 1, the third in 0
    np.testing.assert_allclose(P.selection_weights(3, 2), [2 / 3, 1 / 3, 0.0], rtol=1e-12)
    np.testing.assert_allclose(P.selection_weights(3, 1), [1 / 3] * 3, rtol=1e-12)
    np.testing.assert_allclose(P.selection_weights(3, 3), [1.0, 0.0, 0.0], atol=1e-12)
    # with replacement (Dodge et al.): 1-(2/3)^2, (2/3)^2-(1/3)^2, (1/3)^2
    np.testing.assert_allclose(P.selection_weights(3, 2, replace=True), [5 / 9, 3 / 9, 1 / 9], rtol=1e-12)
    for n in (1, 7, 40):
        for k in (1, n // 2 + 1, n):
            assert P.selection_weights(n, k).sum() == pytest.approx(1.0, abs=1e-12)
            assert P.selection_weights(n, k + 3, replace=True).sum() == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError, match="need 1 <= k <= n, got n=3, k=4"):
        P.selection_weights(3, 4)


def test_expected_best_hand_computed():
    ev, et = P.expected_best(V3, T3)
    # k=1: means; k=2: pairs {0.9,0.8},{0.9,0.7},{0.8,0.7} → best valid 0.9,0.9,0.8, its test .7,.7,.85
    np.testing.assert_allclose(ev, [0.8, 2.6 / 3, 0.9], rtol=1e-12)
    np.testing.assert_allclose(et, [2.15 / 3, 2.25 / 3, 0.7], rtol=1e-12)
    ev, et = P.expected_best(V3, T3, replace=True, ks=[2])
    np.testing.assert_allclose(ev, [7.6 / 9], rtol=1e-12)
    np.testing.assert_allclose(et, [6.65 / 9], rtol=1e-12)
    # a loss (smaller is better): the order flips
    ev, et = P.expected_best([0.3, 0.1, 0.2], [1.0, 2.0, 3.0], mode="min", ks=[2])
    np.testing.assert_allclose(ev, [(0.1 + 0.1 + 0.2) / 3], rtol=1e-12)
    np.testing.assert_allclose(et, [(2.0 + 2.0 + 3.0) / 3], rtol=1e-12)


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("mode", ["max", "min"])
def test_expected_best_equals_brute_force(replace, mode):
    rng = np.random.default_rng(3)
    for n in range(1, 7 if replace else 9):
        v = np.round(rng.random(n), 1)  # rounded: ties happen, the tie-break must agree
        t = rng.random(n)
        tb = rng.permutation(n)
        ev, et = P.expected_best(v, t, mode, replace=replace, tiebreak=tb)
        bv, bt = P.brute_force_curve(v, t, mode, replace=replace, tiebreak=tb)
        np.testing.assert_allclose(ev, bv, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(et, bt, rtol=1e-12, atol=1e-12)


def test_a_curve_of_many_configurations_has_its_exact_values_at_fewer_ks():
    """Above MAX_CURVE_POINTS configurations the curve is evaluated at MAX_CURVE_POINTS k's (every k
    up to 64, then log-spaced to N, N included), each the exact expected best of all k's curve:
    5,000 configurations cost 48 s of CPU per curve at every k (a 10,000-trial report: 349 s)."""
    assert P.curve_ks(3) == [1, 2, 3] and P.curve_ks(256) == list(range(1, 257))
    ks = P.curve_ks(5000)
    assert len(ks) <= 256 and ks[:64] == list(range(1, 65)) and ks[-1] == 5000
    assert np.all(np.diff(ks) > 0)
    rng = np.random.default_rng(3)
    v, t = rng.random(600), rng.random(600)
    c = P.tuning_curve(v, t, n_boot=20)
    assert c["k"].tolist() == P.curve_ks(600)
    ev, et = P.expected_best(v, t)  # every k
    np.testing.assert_allclose(c["valid"], ev[c["k"] - 1], rtol=0, atol=0)
    np.testing.assert_allclose(c["test"], et[c["k"] - 1], rtol=0, atol=0)


def test_tuning_curve_band():
    c = P.tuning_curve(V3, T3, n_boot=500, seed=1)
    assert c["k"].tolist() == [1, 2, 3]
    np.testing.assert_allclose(c["valid"], [0.8, 2.6 / 3, 0.9], rtol=1e-12)
    assert (c["valid_lo"] <= c["valid_hi"]).all() and (c["test_lo"] <= c["test_hi"]).all()
    # every resample's curve is a weighted mean of observed values: the band stays within them
    assert c["valid_lo"].min() >= 0.7 - 1e-12 and c["valid_hi"].max() <= 0.9 + 1e-12
    assert c.equals(P.tuning_curve(V3, T3, n_boot=500, seed=1))  # fixed seed: reproducible
    one = P.tuning_curve([0.5], [0.4])
    assert one[["valid", "valid_lo", "valid_hi", "test", "test_lo", "test_hi"]].iloc[0].tolist() == [
        0.5, 0.5, 0.5, 0.4, 0.4, 0.4]


# ---------------------------------------------------------------------------------------------
# Intervals and comparisons
# ---------------------------------------------------------------------------------------------
def test_seed_interval_stays_inside_the_range():
    from scipy import stats

    x = [0.99, 1.0]
    t_half = stats.t.ppf(0.975, 1) * np.std(x, ddof=1) / math.sqrt(2)
    assert np.mean(x) + t_half > 1.0  # what the t-interval would claim
    assert P.seed_interval(x) == (0.995, 0.99, 1.0, 2, "min–max")
    m, lo, hi, n, how = P.seed_interval([0.9, 0.92, 0.95, 0.97, 1.0, 1.0])
    assert how == "bootstrap" and n == 6 and 0.9 <= lo <= m <= hi <= 1.0
    assert m == pytest.approx(np.mean([0.9, 0.92, 0.95, 0.97, 1.0, 1.0]))
    assert P.seed_interval([math.nan, None])[3] == 0


def test_paired_comparison_needs_five_pairs_and_pairs_by_seed():
    a = pd.Series([0.9, 0.91], index=[0, 1])
    b = pd.Series([0.8, 0.81], index=[0, 1])
    r = P.paired_comparison(a, b)
    assert r["n"] == 2 and r["diff"] == pytest.approx(0.1) and r["lo"] > 0 and not r["a_better"]
    seeds = range(6)
    a = pd.Series([0.90, 0.85, 0.93, 0.88, 0.91, 0.86], index=seeds)
    b = a - pd.Series([0.02, 0.03, 0.01, 0.02, 0.04, 0.02], index=seeds)
    assert P.paired_comparison(a, b)["a_better"] and not P.paired_comparison(b, a)["a_better"]
    # loss: smaller is better
    assert P.paired_comparison(b, a, mode="min")["a_better"]
    # unpaired differences that swing both ways: no claim
    noisy = a + pd.Series([0.05, -0.05, 0.04, -0.06, 0.05, -0.04], index=seeds)
    assert not P.paired_comparison(noisy, a)["a_better"]
    # only seeds both have are paired
    assert P.paired_comparison(a, b.drop(index=[4, 5]))["n"] == 4


# ---------------------------------------------------------------------------------------------
# A constructed sweep: validation-best ≠ test-best, through worker → SQLite MLflow → summary/report
# ---------------------------------------------------------------------------------------------
#: (optimizer, step size) → (validation accuracy, test accuracy, seconds to the 0.8 target or None)
DESIGN = {
    ("adam", 0.01): (0.90, 0.80, 1.0),  # validation-best configuration of adam
    ("adam", 0.1): (0.85, 0.88, 2.0),  # test-best configuration of adam: must never be the headline
    ("sgd", 0.1): (0.70, 0.72, None),
    ("sgd", 0.3): (0.75, 0.70, None),
}
SEED_OFFSET = {0: -0.005, 1: 0.005}


def _designed_result(spec):
    from harness.core.spec import Curves, TrialResult

    v, t, secs = DESIGN[(spec.optimizer, spec.hparams("optimizer")["step_size"])]
    off = SEED_OFFSET[spec.seed]
    c = Curves()
    for s in range(1, spec.steps + 1):
        c.train_step.append(s)
        c.train_wall_s.append(s * 0.05)
        c.train_loss.append(1.0 / s)
    for s, acc in ((0, 0.1), (spec.steps // 2, v - 0.05), (spec.steps, v + off)):
        c.eval_step.append(s)
        c.eval_wall_s.append(s * 0.05)
        c.eval_accuracy.append(acc)
        c.eval_loss.append(1.0 - acc)
    return TrialResult(spec=spec, status="finished", curves=c, final_valid_accuracy=v + off,
                       final_valid_loss=1.0 - (v + off), test_accuracy=t + off, test_loss=1.0 - (t + off),
                       steps_to_target=None if secs is None else spec.steps // 2,
                       seconds_to_target=secs, train_seconds=spec.steps * 0.05)


@pytest.fixture
def designed_sweep(tmp_path, write_sweep, tracking_uri, monkeypatch):
    import harness.train.loop as trainer
    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(trainer, "run_trial", lambda spec, **kw: _designed_result(spec))
    monkeypatch.setattr(trainer, "run_trials_batched",
                        lambda specs, **kw: [_designed_result(s) for s in specs])
    monkeypatch.setattr(trainer, "should_batch", lambda specs: False)
    cfg = write_sweep(name="designed", optimizers=[
        {"name": "adam", "hparams": {"step_size": [0.01, 0.1]}},
        {"name": "sgd", "hparams": {"step_size": [0.1, 0.3]}}],
        target={"metric": "valid/accuracy", "value": 0.8})
    summary = run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    return summary, tracking_uri, tmp_path


def test_constructed_sweep_reports_the_validation_best_test_number(designed_sweep):
    from mlflow import MlflowClient
    from rich.console import Console

    import reports
    from harness.orchestrate.run import best_configs, print_summary
    from reports import figures as F
    from reports import frame as RF

    summary, uri, tmp = designed_sweep
    assert summary.counts()["finished"] == 8
    # what MLflow stored: test/* once at the last step, valid/* curves, no eval/*
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name("designed")
    runs = c.search_runs([exp.experiment_id], "tags.`harness.kind` = 'trial'")
    stored = {}
    for r in runs:
        tags = r.data.tags
        key = (tags["optimizer"], float(r.data.params["optimizer.step_size"]), int(tags["seed"]))
        stored[key] = (r.data.metrics["final/valid_accuracy"], r.data.metrics["test/accuracy"])
        assert [m.step for m in c.get_metric_history(r.info.run_id, "test/accuracy")] == [40]
        assert [m.step for m in c.get_metric_history(r.info.run_id, "valid/accuracy")] == [0, 20, 40]
        assert not [k for k in r.data.metrics if k.startswith("eval/")]
    assert stored[("adam", 0.01, 0)] == pytest.approx((0.895, 0.795), abs=1e-12)
    assert stored[("adam", 0.1, 1)] == pytest.approx((0.855, 0.885), abs=1e-12)

    # the end-of-sweep summary: adam's row is lr=0.01 (validation) and shows ITS test number
    rows = {r["optimizer"]: r for r in best_configs(summary.outcomes)}
    assert "step_size=0.01" in rows["adam"]["config"]
    assert rows["adam"]["value"] == pytest.approx(0.90) and rows["adam"]["test_value"] == pytest.approx(0.80)
    assert "step_size=0.3" in rows["sgd"]["config"] and rows["sgd"]["test_value"] == pytest.approx(0.70)
    console = Console(record=True, width=200)
    print_summary(console, summary)
    adam_line = next(ln for ln in console.export_text().splitlines() if " adam " in ln)
    assert "0.9000" in adam_line and "0.8000" in adam_line and "0.8800" not in adam_line  # valid, test

    # the report: selection on validation, headline = test of the validation-selected config
    frame = RF.load_frame("designed", tracking_uri=uri)
    assert set(RF.summaries(frame)["protocol"]) == {RF.PROTOCOL_THREE_SPLITS}
    lb = F.leaderboard(frame).set_index("Optimizer")
    assert lb.loc["adam", "_test_mean"] == pytest.approx(0.80)
    assert lb.loc["adam", "Test accuracy (selected on validation)"] == "0.800 [0.795, 0.805]"
    assert lb.loc["adam", "Interval"] == "min–max of 2 seeds (< 5)"  # said once per row
    assert lb.loc["adam", "Beats (paired bootstrap, 95%)"] == "not tested (< 5 paired seeds)"
    assert lb.loc["adam", "Rank"] == "1"
    out = reports.make_report("designed", tracking_uri=uri, output=str(tmp / "r.html"))
    html = out.read_text()
    assert "0.800 [0.795, 0.805]" in html and "0.88" not in re.sub(r"<img[^>]*>", "", html).split(
        'id="leaderboard"')[1].split("</table>")[0]

    # tuning curves (adam: N=2, valid [0.90, 0.85], test [0.80, 0.88]) and tuned time, in the CSV
    from reports import protocol

    tc = protocol.tuning_curves(frame).set_index(["optimizer", "k"])
    assert tc.loc[("adam", 1), ["valid", "test"]].tolist() == pytest.approx([0.875, 0.84])
    assert tc.loc[("adam", 2), ["valid", "test"]].tolist() == pytest.approx([0.90, 0.80])
    tt = protocol.tuned_time_to_result(frame).set_index("optimizer")
    assert tt.loc["adam", "seconds"] == 1.0 and "step_size=0.01" in tt.loc["adam", "config"]
    assert tt.loc["sgd", "seconds"] == math.inf
    csv = pd.read_csv(out.with_suffix(".csv.gz"))
    curve_rows = csv[(csv["row"] == "tuning_curve") & (csv["optimizer"] == "adam")]
    assert curve_rows["tuning.k"].tolist() == [1, 2]
    assert curve_rows["tuning.test"].tolist() == pytest.approx([0.84, 0.80])
    tt_rows = csv[csv["row"] == "tuned_time"].set_index("optimizer")
    assert tt_rows.loc["adam", "tuning.seconds"] == 1.0 and tt_rows.loc["sgd", "tuning.seconds"] == math.inf
    # the performance profile reads the tuned times: adam solves the task at τ = 1, sgd never
    prof = F.performance_profile(frame)
    assert prof.groupby("optimizer")["rho"].max().to_dict() == {"adam": 1.0, "sgd": 0.0}


def test_runs_from_before_the_protocol_are_labelled_one_split(tmp_path, tracking_uri):
    """Runs with only eval/* still report, labelled "selected and reported on one split"."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    from reports import figures as F
    from reports import frame as RF
    from reports.html import render

    c = MlflowClient(tracking_uri)
    exp = c.create_experiment("old", artifact_location=str(tmp_path / "art"))
    parent = c.create_run(exp, tags={"harness.kind": "parent", N.TAG_SWEEP_ID: "s0"}).info.run_id
    for opt, acc in (("adam", 0.9), ("sgd", 0.8)):
        for seed in (0, 1):
            r = c.create_run(exp, tags={N.TAG_TRIAL_ID: f"{opt}{seed}", N.TAG_SWEEP_ID: "s0",
                                        N.TAG_PARENT_RUN: parent, "harness.kind": "trial",
                                        "model": "mlp", "optimizer": opt, "schedule": "constant",
                                        "dataset": "digits", "seed": str(seed), "status": "finished"})
            c.log_batch(r.info.run_id, metrics=[Metric("eval/accuracy", acc + seed / 100, 0, 40),
                                                Metric("final/eval_accuracy", acc + seed / 100, 0, 40),
                                                Metric("eval/loss", 1 - acc, 0, 40)],
                        params=[Param("target.metric", "eval/accuracy"), Param("target.value", "0.5"),
                                Param("optimizer.step_size", "0.1")])
            c.set_terminated(r.info.run_id)
    c.set_terminated(parent)
    frame = RF.load_frame("old", tracking_uri=tracking_uri)
    lb = F.leaderboard(frame).set_index("Optimizer")
    assert lb.loc["adam", "Test accuracy (selected on validation)"] == \
        "— (selected and reported on one split)"
    assert lb.loc["adam", "Validation accuracy"].startswith("0.905 [0.900, 0.910]")
    # the page itself (figures left out: drawing them is the other test's business)
    html = render(RF.load_sweep("old", tracking_uri=tracking_uri), {}, F.leaderboard(frame))
    assert "— (selected and reported on one split)" in html


def _tie_outcomes(jitter: dict[str, float]):
    """Two configurations of one optimizer whose seeds reach the target at the same steps;
    'cosine' has the better validation accuracy; ``jitter`` adds wall-clock seconds per config."""
    from harness.core.outcome import TrialOutcome

    out = []
    for conf, acc in (("constant", 0.95), ("cosine", 0.97)):
        for seed, steps in ((0, 150), (1, 100)):
            out.append(TrialOutcome(
                trial_id=f"{conf}-{seed}", status="finished", model="cnn", optimizer="adam",
                schedule=conf, dataset="digits", seed=seed, config=f"adam {conf} lr=0.003",
                final_valid_accuracy=acc, final_valid_loss=0.1, test_accuracy=acc - 0.01,
                test_loss=0.1, steps_to_target=steps,
                seconds_to_target=steps * 1e-3 + jitter.get(conf, 0.0)))
    return out


def test_selection_ignores_wall_clock_noise_when_steps_tie():
    """Found by a new user: identical per-trial results selected different configurations in
    two runs because seconds to target (wall-clock noise) decided a tie in steps. Steps, then
    the validation metric, decide now; seconds only break a tie in both."""
    from harness.orchestrate.summary import best_configs

    for jitter in ({"constant": 0.0, "cosine": 0.05}, {"constant": 0.05, "cosine": 0.0}):
        outcomes = _tie_outcomes(jitter)
        (row,) = best_configs(outcomes)
        assert row["config"] == "adam cosine lr=0.003" and row["value"] == pytest.approx(0.97)
        summary = pd.DataFrame([{
            "row": "summary", "task": "cnn / digits", "optimizer": o.optimizer,
            "config_id": o.schedule, "config": o.config, "status": o.status, "seed": o.seed,
            N.M_SECONDS_TO_TARGET: o.seconds_to_target, N.M_STEPS_TO_TARGET: o.steps_to_target,
            N.M_FINAL_ACC: o.final_valid_accuracy, N.M_FINAL_LOSS: o.final_valid_loss,
            "target_metric": "valid/accuracy", "target_mode": "max", "target_value": 0.9}
            for o in outcomes])
        best = RS.best_configs(summary)
        assert list(best["config"]) == ["adam cosine lr=0.003"], jitter


def test_selection_key_orders_by_reached_steps_finished_value_seconds_name():
    """Hand-ordered configurations: each neighbour pair differs in exactly one field, and the
    earlier field wins over all later ones; ``None`` sorts last; loss targets prefer lower."""
    from harness.core.selection_rule import selection_key as key

    ranked = [
        key(3, 100, 3, 0.80, True, 9.0, "z"),   # most seeds reached
        key(2, 50, 3, 0.99, True, 0.1, "a"),    # fewer reached, despite fewer steps and better value
        key(2, 60, 3, 0.99, True, 0.1, "a"),    # more steps
        key(2, 60, 2, 0.99, True, 0.1, "a"),    # fewer finished
        key(2, 60, 2, 0.90, True, 0.1, "a"),    # worse validation accuracy
        key(2, 60, 2, 0.90, True, 0.2, "a"),    # slower in seconds
        key(2, 60, 2, 0.90, True, 0.2, "b"),    # the name breaks the last tie
        key(2, None, 2, None, True, None, "a"),  # nothing known sorts after every known value
    ]
    assert sorted(ranked) == ranked and len(set(ranked)) == len(ranked)
    assert key(0, None, 1, 0.1, False, None, "a") < key(0, None, 1, 0.2, False, None, "a")  # loss


def _mixed_objective_outcomes():
    """A workloads-style sweep: a language model with a loss target beside a CNN with an accuracy
    target (three CNN configurations, so accuracy is the sweep's most common target metric).
    lm's config "lowloss" has the lower validation loss but the lower accuracy; no lm trial
    reaches its target, so the validation metric decides its selection."""
    from harness.core.outcome import TrialOutcome

    out = []
    lm = {"lowloss": (1.90, 0.30, 1.91, 0.29), "highacc": (1.99, 0.33, 2.00, 0.34)}
    for conf, (vl, va, tl, ta) in lm.items():
        out.append(TrialOutcome(
            trial_id=f"lm-{conf}", status="finished", model="transformer_lm", optimizer="adam",
            dataset="markov_lm", seed=0, config=conf, target_metric="valid/loss",
            final_valid_loss=vl, final_valid_accuracy=va, test_loss=tl, test_accuracy=ta))
    for conf, acc in (("c1", 0.90), ("c2", 0.95), ("c3", 0.93)):
        out.append(TrialOutcome(
            trial_id=f"cnn-{conf}", status="finished", model="cnn1d", optimizer="adam",
            dataset="mnist1d", seed=0, config=conf, target_metric="valid/accuracy",
            final_valid_loss=1 - acc, final_valid_accuracy=acc, test_loss=1.01 - acc,
            test_accuracy=acc - 0.01))
    return out


def _summary_frame(outcomes):
    from reports import frame as RF

    def step_size(o):
        return {"lowloss": 1e-3, "highacc": 1e-2, "c1": 1e-3, "c2": 3e-3, "c3": 1e-2}[o.config]

    return pd.DataFrame([{
        "row": "summary", "task": f"{o.model} / {o.dataset}", "model": o.model, "dataset": o.dataset,
        "optimizer": o.optimizer,
        "config_id": o.config, "config": o.config, "status": o.status, "seed": o.seed,
        "step_size": step_size(o), N.M_SECONDS_TO_TARGET: None, N.M_STEPS_TO_TARGET: None,
        N.M_FINAL_ACC: o.final_valid_accuracy, N.M_FINAL_LOSS: o.final_valid_loss,
        N.M_TEST_ACC: o.test_accuracy, N.M_TEST_LOSS: o.test_loss, N.M_STEP_MS: 1.0,
        "protocol": RF.PROTOCOL_THREE_SPLITS, "target_metric": o.target_metric,
        "target_mode": "min" if o.target_metric.endswith("loss") else "max",
        "target_value": 1.8 if o.target_metric.endswith("loss") else 0.99} for o in outcomes])


def test_each_task_is_selected_and_reported_on_its_own_metric():
    """Found in the workloads report: one sweep-wide objective (the most common target metric,
    accuracy) selected and headlined the Transformer's configurations by accuracy, though its
    target is a loss; the terminal summary (per trial's target) picked by loss. Now every task
    uses its own objective, in the summary, the selection, the headline, the leaderboard and the
    step-size figures alike."""
    from harness.orchestrate.summary import best_configs as summary_best
    from reports import figures as F
    from reports import interactive as I
    from reports import protocol as P

    outcomes = _mixed_objective_outcomes()
    rows = {r["model"]: r for r in summary_best(outcomes)}
    assert rows["transformer_lm"]["config"] == "lowloss" and rows["cnn1d"]["config"] == "c2"
    frame = _summary_frame(outcomes)
    assert objective(frame).final == N.M_FINAL_ACC  # the sweep-wide one: accuracy (3 of 5)
    assert objective(frame, "transformer_lm / markov_lm").final == N.M_FINAL_LOSS
    assert objectives_differ(frame)
    best = RS.best_configs(frame).set_index("task")
    assert best.loc["transformer_lm / markov_lm", "config"] == "lowloss"
    assert best.loc["cnn1d / mnist1d", "config"] == "c2"
    head = P.headline(frame).set_index("task")
    assert head.loc["transformer_lm / markov_lm", "test_metric"] == N.M_TEST_LOSS
    assert head.loc["transformer_lm / markov_lm", "test"] == pytest.approx(1.91)
    assert head.loc["cnn1d / mnist1d", "test"] == pytest.approx(0.94)
    lb = F.leaderboard(frame).set_index("Task")
    col = "Test metric (selected on validation)"
    assert lb.loc["transformer_lm / markov_lm", col].startswith("loss 1.91")
    assert lb.loc["cnn1d / mnist1d", col].startswith("accuracy 0.94")
    cv = P.config_values(frame).set_index(["task", "config_id"])
    assert cv.loc[("transformer_lm / markov_lm", "highacc"), "valid"] == pytest.approx(1.99)
    assert cv.loc[("transformer_lm / markov_lm", "highacc"), "metric"] == N.M_FINAL_LOSS
    tl = I.tuning_long(frame)
    assert sorted(tl["value"]) == pytest.approx([0.90, 0.93, 0.95, 1.90, 1.99])
    fig = F.sensitivity_figure(frame)
    assert {ax.get_ylabel() for ax in fig.axes if ax.get_visible() and ax.get_ylabel()} == {
        "final validation loss", "final validation accuracy"}
    fig = F.tuning_figure(frame)
    assert {ax.get_ylabel() for ax in fig.axes if ax.get_visible() and ax.get_ylabel()} == {
        "expected loss\nof the validation-best", "expected accuracy\nof the validation-best"}
    spec = I.tuning_curves_spec(frame)  # one y title for all facets: it must not say "accuracy"
    line = next(ly for ly in spec["spec"]["layer"]  # the curves' line layer (the points are a layer apart)
                if isinstance(ly["mark"], dict) and ly["mark"].get("type") == "line")["encoding"]
    assert line["y"]["axis"]["title"] == "expected value (each task's metric) of the validation-best"
    tcl = I.tuning_curves_long(frame)
    assert set(tcl.loc[tcl["task"].str.startswith("transformer"), "metric"]) == {N.M_FINAL_LOSS,
                                                                                 N.M_TEST_LOSS}
    one = frame[frame["task"] == "cnn1d / mnist1d"]  # one metric: the column keeps its name
    assert "Test accuracy (selected on validation)" in F.leaderboard(one).columns


def test_two_entries_that_differ_only_by_a_default_are_one_configuration_of_two_seeds(
        tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    """``momentum`` and ``momentum`` with ``mass: 0.9`` (its default) are different trials that log
    the same params, hence one configuration in the report: its headline counted their 4 trials as
    4 seeds of a 2-seed sweep, and with a second optimizer the paired comparison crashed the report
    (``ValueError: cannot reindex on an axis with duplicate labels``; found by an
    attack). Both now read one row per configuration and seed."""
    import reports.frame as RF
    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    s = run_sweep(write_sweep(name="dflt", optimizers=[
        {"name": "sgd", "hparams": {"step_size": 0.1}},
        {"name": "momentum", "hparams": {"step_size": 0.03}},
        {"name": "momentum", "hparams": {"step_size": 0.03, "mass": 0.9}}], seeds=2),
        tracking_uri=tracking_uri, quiet=True)
    assert s.counts()["finished"] == 6
    frame = RF.load_frame("dflt", tracking_uri=tracking_uri)
    head = P.headline(frame).set_index("optimizer")
    assert head.loc["momentum", "test_n"] == 2 and head.loc["sgd", "test_n"] == 2
    pairs = P.pairwise_comparisons(frame)
    assert sorted(pairs["n"]) == [2, 2]
