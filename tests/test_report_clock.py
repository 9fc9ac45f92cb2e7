"""Loose ends in the report: the time-to-target figure's axis follows the report's clock,
the header names the objective that selected, a report that ranks on a target the sweep lacks says
so, and the config's ``time:`` is recorded, read and overridden; the sweep's summary keeps one clock
per task."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from harness.core import names as N
from harness.core.clock import modeled_seconds
from reports.frame import PROTOCOL_THREE_SPLITS, SELECT_BY_ATTR


def _frame(select_by: str | None = None) -> pd.DataFrame:
    """One task: adam reaches the target at step 100 (modeled 0.1 s, its wall-clock 2.0 s under
    load), sgd never does (200 steps trained, 1 ms a step: a modeled budget of 0.2 s, a measured
    one of 30 s). Curve rows carry each trial's wall-clock."""
    rows = []
    for opt, steps, secs, wall in (("adam", 100, 2.0, 5.0), ("sgd", None, None, 30.0)):
        tid = f"{opt}-0"
        rows.append({
            "row": "summary", "task": "mlp / digits", "model": "mlp", "dataset": "digits",
            "optimizer": opt, "config_id": opt, "config": f"{opt} lr=0.1", "status": "finished", "seed": 0,
            "trial_id": tid, "train_steps": 200, N.M_STEP_MS: 1.0, N.M_SECONDS_TO_TARGET: secs,
            N.M_STEPS_TO_TARGET: steps, N.M_MODELED_SECONDS_TO_TARGET: modeled_seconds(steps, 1.0),
            N.M_FINAL_ACC: 0.9, N.M_FINAL_LOSS: 0.1, N.M_BEST_ACC: 0.95, N.M_BEST_LOSS: 0.05,
            N.M_TEST_ACC: 0.9, N.M_TEST_LOSS: 0.1, "protocol": PROTOCOL_THREE_SPLITS, "perf_suspect": None,
            "target_metric": "valid/accuracy", "target_mode": "max", "target_value": 0.9})
        rows.append({"row": "curve", "trial_id": tid, "task": "mlp / digits", "optimizer": opt,
                     N.M_WALL_S: wall})
    f = pd.DataFrame(rows)
    if select_by:
        f.attrs[SELECT_BY_ATTR] = select_by
    return f


@pytest.mark.parametrize("clock, budget, xmax, label", [
    ("modeled", 0.2, 0.2 * 1.08, "seconds to target (modeled)"),
    # 2 s beside a 30 s budget: more than a decade, a log axis
    ("measured", 30.0, 30.0 * 1.6, "seconds to target (measured), log scale"),
])
def test_the_time_figure_axis_and_budget_follow_the_clock(clock, budget, xmax, label):
    """Before: the budget (sgd's ▷) and the axis were the measured 30 s also when the times beside
    them were modeled (adam's 0.1 s drawn at the far left of a 32 s axis)."""
    from reports.fig_time import time_to_target, time_to_target_figure
    from reports.report_clock import use_clock

    f = use_clock(_frame(), clock)
    t = time_to_target(f).set_index("optimizer")
    assert t.loc["sgd", "budget_seconds"] == pytest.approx(budget)
    assert t.loc["adam", "seconds_median"] == pytest.approx(0.1 if clock == "modeled" else 2.0)
    ax = time_to_target_figure(f).axes[0]
    assert ax.get_xlim()[1] == pytest.approx(xmax)
    assert ax.get_xlabel() == label


@pytest.mark.parametrize("by, words", [
    ("time_to_target", "time to valid/accuracy ≥ 0.9 (ties: final validation accuracy)"),
    ("final", "final validation accuracy (target valid/accuracy ≥ 0.9)"),
    ("best", "best validation accuracy during training (target valid/accuracy ≥ 0.9)"),
])
def test_the_header_names_the_objective_that_selected(by, words):
    """Before: "objective: final validation accuracy" under every objective, also --select-by best
    and time_to_target."""
    from reports.selection import objective_words

    assert objective_words(_frame(by)) == words
    no_target = _frame(by).assign(target_metric=None)
    assert objective_words(no_target) == {
        "time_to_target": "final validation accuracy (no target: time to target cannot decide)",
        "final": "final validation accuracy", "best": "best validation accuracy during training"}[by]


def test_a_flagged_figure_marks_its_leaderboard_row():
    """A trial whose figure is flagged (tag perf.suspect) still ranks on it, and its row's
    time to target carries ``†`` (the clock sentence names it and says why); others do not."""
    from reports.leaderboard import leaderboard
    from reports.report_clock import clock_note, use_clock

    raw = _frame()
    why = "step CPU time 9 ms measured, ..."
    raw["perf_suspect"] = [why if t == "adam-0" else None for t in raw["trial_id"]]
    f = use_clock(raw, "modeled")
    lb = leaderboard(f).set_index("Optimizer")
    assert lb.loc["adam", "Time to target (s, median)"].endswith(" †")
    assert lb.loc["sgd", "Time to target (s, median)"].startswith("not reached")
    assert "Flagged (†): adam · mlp · digits" in clock_note(f)
    assert not leaderboard(use_clock(_frame(), "modeled")).set_index("Optimizer").loc[
        "adam", "Time to target (s, median)"].endswith(" †")


def test_the_summary_keeps_one_clock_per_task_and_follows_the_config_clock():
    """Before: a suspect trial's measured seconds sat beside the others' modeled ones in one
    summary row set; the caption counted trials, and the clock was always the modeled one."""
    from rich.console import Console

    from harness.core.outcome import TrialOutcome
    from harness.orchestrate.summary import SweepSummary, best_configs, print_summary

    def outcome(opt, ds, measured, modeled, suspect=""):
        return TrialOutcome(trial_id=f"{opt}{ds}", status="finished", dataset=ds, model="mlp",
                            optimizer=opt, config=f"mlp {opt} lr=0.1", seconds_to_target=measured,
                            modeled_seconds_to_target=modeled,
                            cost_seconds_to_target=0.01 * (opt == "sgd") + 0.02,
                            steps_to_target=100, final_valid_accuracy=0.9, perf_suspect=suspect,
                            target_metric="valid/accuracy", has_target=True)

    outs = [outcome("adam", "digits", 2.0, 0.1), outcome("sgd", "digits", 3.0, None),  # sgd: untimed
            outcome("adam", "mnist1d", 2.0, 0.1), outcome("sgd", "mnist1d", 3.0, 0.3, "slow")]
    secs = {(r["dataset"], r["optimizer"]): r["seconds_to_target"] for r in best_configs(outs)}
    assert secs == {("digits", "adam"): 0.02, ("digits", "sgd"): 0.03,  # cost: one clock, deterministic
                    ("mnist1d", "adam"): 0.1, ("mnist1d", "sgd"): 0.3}  # the flagged sgd stays modeled
    measured = {(r["dataset"], r["optimizer"]): r["seconds_to_target"]
                for r in best_configs(outs, clock="measured")}
    assert measured[("mnist1d", "sgd")] == 3.0
    for clock, said in (("modeled", "mlp · digits ranks on cost (steps to target × the program's FLOPs"),
                        ("modeled", "Flagged (†): sgd · mnist1d · mlp: the step time disagreed"),
                        ("measured", "Time to target: measured (the trial's wall-clock")):
        buf = io.StringIO()
        print_summary(Console(file=buf, width=400), SweepSummary(
            "s", "sid", None, None, "sqlite:///x.db", outs, 1.0, time_clock=clock))
        text = " ".join(buf.getvalue().split())
        assert said in text
        assert (" 0.3 s " in text) is (clock == "modeled")
        assert (" 0.3 s † " in text) is (clock == "modeled")  # the flagged figure is marked on its row


def test_the_config_clock_is_recorded_read_by_the_report_and_overridden(tmp_path, write_sweep, tracking_uri,
                                                                       fake_trainer, monkeypatch):
    """``time: measured`` lands on the parent run as ``harness.time``; the report ranks on it unless
    ``--time`` says otherwise; a re-run that trains nothing records a changed ``time:``. Before: no
    such key (``report --time`` only)."""
    from mlflow import MlflowClient
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    run_sweep(write_sweep(name="clocked", time="measured", seeds=[0]), tracking_uri=tracking_uri, quiet=True)
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name("clocked")
    (parent,) = c.search_runs([exp.experiment_id], "tags.`harness.kind` = 'parent'")
    assert {k: parent.data.tags[k] for k in (N.TAG_TIME, N.TAG_SCORING, N.TAG_SELECT_BY)} == {
        N.TAG_TIME: "measured", N.TAG_SCORING: "harness", N.TAG_SELECT_BY: "time_to_target"}
    runner = CliRunner()
    for extra, said in (([], "Time to target: measured"), (["--time", "modeled"], "Time to target: modeled")):
        out = tmp_path / f"r{len(extra)}.html"
        res = runner.invoke(app, ["report", "-e", "clocked", "--tracking-uri", tracking_uri, "-o", str(out),
                                  *extra])
        assert res.exit_code == 0, res.output
        assert f'<p class="sub" id="time-clock">{said}' in out.read_text()
    run_sweep(write_sweep(name="clocked", time="modeled", seeds=[0]), tracking_uri=tracking_uri, quiet=True)
    assert c.get_run(parent.info.run_id).data.tags[N.TAG_TIME] == "modeled"


def test_a_report_that_ranks_on_a_target_the_sweep_lacks_is_one_line(tmp_path, write_sweep, tracking_uri,
                                                                      fake_trainer, monkeypatch):
    """Before: ``report --scoring algoperf`` on a sweep without a target wrote a report with an
    empty profile and no score, and ``--select-by time_to_target`` one that selected on nothing."""
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    summary = run_sweep(write_sweep(name="untargeted", target=None, seeds=[0]), tracking_uri=tracking_uri,
                        quiet=True)
    runner = CliRunner()
    for flag, need, instead in (("--scoring", "algoperf", "--scoring harness"),
                                ("--select-by", "time_to_target", "--select-by final or best")):
        res = runner.invoke(app, ["report", "-e", "untargeted", "--tracking-uri", tracking_uri, flag, need])
        assert res.exit_code == 2
        assert res.output.splitlines() == [
            f"error: {flag} {need} ranks on time to the validation target and sweep {summary.sweep_id} has "
            f"no target; use {instead}"]
    assert not list(tmp_path.glob("report-*.html"))


def test_report_stats_baseline_chooses_the_across_task_baseline(tmp_path, write_sweep, tracking_uri,
                                                                fake_trainer, monkeypatch):
    """``report --stats-baseline NAME`` names the optimizer the across-task statistics compare with;
    an optimizer the sweep did not run is one line and exit 2 before anything is drawn."""
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    cfg = write_sweep(name="based", seeds=[0, 1], optimizers=[
        {"name": "sgd", "hparams": {"step_size": 0.1}}, {"name": "adam", "hparams": {"step_size": 0.01}}])
    run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    runner = CliRunner()
    out = tmp_path / "b.html"
    r = runner.invoke(app, ["report", "-e", "based", "--tracking-uri", tracking_uri, "-o", str(out),
                            "--stats-baseline", "sgd"])
    assert r.exit_code == 0, r.output
    assert "Baseline optimizer: sgd." in out.read_text()
    r = runner.invoke(app, ["report", "-e", "based", "--tracking-uri", tracking_uri, "-o", str(out),
                            "--stats-baseline", "nope"])
    assert r.exit_code == 2
    assert "the baseline optimizer must be one the sweep ran (adam, sgd); got 'nope'" in r.output
