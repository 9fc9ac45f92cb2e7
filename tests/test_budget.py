"""A sweep's time budget: the parent run's ``time/<part>_s`` add up to the sweep's
wall-clock, each trial's run holds its share of its unit (a vmapped batch's seconds divided between
its trials, not repeated on each), no part is negative, the summary's one line, and the rules of
:mod:`harness.core.budget` (``--jobs``' scaling, the line's form)."""

from __future__ import annotations

import re
import time

import mlflow
import pytest

from harness.core import budget, names
from harness.core.outcome import TrialOutcome
from harness.orchestrate.sweep_clock import SweepClock


def _runs(uri: str, experiment: str) -> tuple[dict[str, float], list[dict[str, float]]]:
    """The parent run's metrics and each trial run's, as MLflow stored them."""
    c = mlflow.MlflowClient(uri)
    exp = c.get_experiment_by_name(experiment)
    runs = c.search_runs([exp.experiment_id])
    parents = [r.data.metrics for r in runs if r.data.tags[names.TAG_KIND] == names.KIND_PARENT]
    trials = [r.data.metrics for r in runs if r.data.tags[names.TAG_KIND] == names.KIND_TRIAL]
    assert len(parents) == 1
    return parents[0], trials


def _adds_up(uri: str, name: str, wall: float) -> tuple[dict, list[dict], dict[str, float]]:
    """The parent's metrics, the 4 trials' and the parent's parts, checked: none negative, the
    named parts within the parent's wall-clock, all of them within 2% of ``wall`` (a clock taken
    around ``run_sweep``)."""
    parent, trials = _runs(uri, name)
    assert len(trials) == 4
    parts = {p: parent[names.M_TIME[p]] for p in names.TIME_PARTS}
    assert all(v >= 0 for v in parts.values()), parts
    assert budget.named_sum(parts) <= parent[names.M_SWEEP_WALL_S], parts
    assert sum(parts.values()) == pytest.approx(wall, rel=0.02), (parts, wall)
    return parent, trials, parts


def test_the_time_budget_of_a_real_sweep_adds_up_to_its_wall_clock(write_sweep, tracking_uri):
    """Read back from MLflow: the parent's parts add up to the sweep's wall-clock within 2%, the
    trials' to the parent's, the summary's line and the report's figure show them."""
    # 4 trials: two step sizes x two seeds, each step size's seeds one vmapped unit of 2
    cfg = write_sweep(name="budget", optimizers=[{"name": "sgd", "hparams": {"step_size": [0.1, 0.05]}}],
                      seeds=[0, 1], batching="on", measure_perf=True)
    from harness.orchestrate.run import run_sweep

    t0 = time.perf_counter()
    summary = run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    # the parent: every part, none negative, the named ones within the wall-clock (other is the
    # rest, so an accounting that counts a second twice shows here), adding up to the sweep's
    parent, trials, parts = _adds_up(tracking_uri, "budget", time.perf_counter() - t0)
    assert sum(parts.values()) == pytest.approx(parent[names.M_SWEEP_WALL_S], rel=1e-9)
    # every part the trainer measures happened (throughput: measure_perf)
    for p in ("preflight", "compile", "train", "eval", "throughput", "tracking"):
        assert parts[p] > 0, (p, parts)

    # the trials: the trial parts only, none negative, the trainer's summing to the parent's
    for t in trials:
        assert {k for k in t if k.startswith("time/") and k != names.M_WALL_S} == \
            {names.M_TIME[p] for p in budget.TRIAL_PARTS}, t
        assert all(t[names.M_TIME[p]] >= 0 for p in budget.TRIAL_PARTS), t
    for p in ("train", "eval"):
        assert sum(t[names.M_TIME[p]] for t in trials) == pytest.approx(parts[p], rel=1e-9), p
    # compile and throughput: the trials' plus the sweep's interleaved throughput stage before
    # training (harness.orchestrate.execution: its timing is throughput, its compiles compile)
    for p in ("compile", "throughput"):
        assert sum(t[names.M_TIME[p]] for t in trials) < parts[p], p
    # a batch's seconds divided between its trials: both members of a unit hold the same share,
    # and all the trials' seconds together fit in the execution (the batch's seconds repeated on
    # each member would count the compile twice and overflow it)
    compile_s = sorted(t[names.M_TIME_COMPILE_S] for t in trials)
    assert compile_s[0] == compile_s[1] and compile_s[2] == compile_s[3], compile_s
    execution = parts["compile"] + parts["train"] + parts["eval"] + parts["throughput"] + \
        parts["tracking"] + parts["other"]
    assert sum(t[names.M_TIME[p]] for t in trials for p in budget.TRIAL_PARTS) <= execution

    # the summary's line: the parent's parts, by decreasing share, within 80 columns
    line = summary.budget_line()
    # (and the throughput timing's rounds where their cost bound cut them)
    assert re.fullmatch(r"time \d+\.\d s: [a-z]+ \d+%(, [a-z]+ \d+%)*(, \.\.\.)?"
                        r"(; timing: \d+ rounds \(20% bound\))?", line), line
    assert len(line) <= 80
    assert line.startswith(f"time {parent[names.M_SWEEP_WALL_S]:.1f} s: ")
    # the headline above it gives the same wall-clock (it gave run_sweep's, 1 s shorter from the CLI)
    assert summary.headline().endswith(f"; {parent[names.M_SWEEP_WALL_S]:.1f} s")
    shown = [(k, int(v)) for k, v in re.findall(r"([a-z]+) (\d+)%", line)]
    assert [k for k, _ in shown] == sorted(parts, key=lambda k: -parts[k])[:len(shown)]
    for k, pct in shown:
        assert pct == round(100 * parts[k] / parent[names.M_SWEEP_WALL_S]), (k, line)

    # the report's figure: the whole sweep's bar (the parent's parts, as long as its wall-clock),
    # then one stacked bar for the task, its segments the trials' summed seconds
    import reports
    from reports import layout
    from reports.fig_budget import PARTS, SWEEP_PARTS, SWEEP_ROW, budget_figure, time_budget

    frame = reports.load_frame("budget", tracking_uri=tracking_uri)
    full = time_budget(frame)
    table = full[full["task"] != SWEEP_ROW].set_index("part")
    for p in PARTS:
        assert table.loc[p, "seconds"] == pytest.approx(sum(t[names.M_TIME[p]] for t in trials), rel=1e-9)
    assert table["share"].sum() == pytest.approx(1.0)
    sweep = full[full["task"] == SWEEP_ROW].set_index("part")
    assert list(sweep.index) == list(SWEEP_PARTS)
    for p in SWEEP_PARTS:
        assert sweep.loc[p, "seconds"] == pytest.approx(parent[names.M_TIME[p]], rel=1e-9)
    assert sweep["seconds"].sum() == pytest.approx(parent[names.M_SWEEP_WALL_S], rel=1e-6)
    fig = budget_figure(frame)
    assert layout.layout_problems(fig) == []
    bars = {}  # bar index -> segment widths, in stacking order
    for b in fig.axes[0].patches:
        bars.setdefault(round(b.get_y() + b.get_height() / 2), []).append(b.get_width())
    assert bars[0] == pytest.approx([sweep.loc[p, "seconds"] for p in SWEEP_PARTS])
    assert [w for w in bars[1] if w] == pytest.approx([v for v in (table.loc[p, "seconds"] for p in
                                                                   SWEEP_PARTS if p in PARTS) if v])
    # each bar says what it sums: the invocations, the trials they trained
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [f"{SWEEP_ROW}: 1 invocation",
                                                                     f"mlp · digits: {len(trials)} trials"]


def test_the_batching_measurements_compiles_are_compile_not_batching(write_sweep, tracking_uri, tmp_path,
                                                                   monkeypatch):
    """``batching: auto`` measures a group on a new machine: the parameter init and the chunk it
    compiles are the programs training then reuses, so the parent's ``time/compile_s`` holds them
    and ``time/batching_s`` does not (before: all of it was ``batching``, 43% of a cold quickstart)."""
    from harness.orchestrate.run import run_sweep
    from harness.train import batching

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "fresh-cache"))  # no cached decision
    monkeypatch.delenv("HARNESS_BATCH", raising=False)
    # a width no other test compiles, so this process has neither its init nor its chunk
    cfg = write_sweep(name="budgetbatch", models=[{"name": "mlp", "hparams": {"width": 23, "depth": 1}}],
                      optimizers=[{"name": "sgd", "hparams": {"step_size": [0.1, 0.05]}}], batching="auto")
    before = batching.compile_seconds()
    t0 = time.perf_counter()
    run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    moved = batching.compile_seconds() - before
    _, trials, parts = _adds_up(tracking_uri, "budgetbatch", time.perf_counter() - t0)
    assert moved > 0  # the init and the single chunk, at least
    # the trials compiled nothing new (training reused the measurement's programs): the parent's
    # compile is theirs plus the measurement's
    assert parts["compile"] == pytest.approx(sum(t[names.M_TIME_COMPILE_S] for t in trials) + moved, rel=1e-6)
    assert 0 <= parts["batching"] < parts["compile"]


def _outcome(wall: float, tracking: float, **parts: float) -> TrialOutcome:
    o = TrialOutcome(trial_id=f"t{wall}{parts}", status="finished", wall_seconds=wall,
                     tracking_seconds=tracking)
    o.time_parts = dict(parts, tracking=tracking, other=0.0)
    return o


def test_workers_in_parallel_are_scaled_to_the_execution_wall_clock():
    """``--jobs 2``: two workers' 8 s each ran in a 10 s execution: the parent's parts are their
    fractions of the 16 summed seconds, times 10 s (not 16 s of parts in a 10 s sweep)."""
    clock = SweepClock(t_start=time.perf_counter())
    outs = [_outcome(8.0, 1.0, compile=4.0, train=2.0, eval=0.5, throughput=0.5),
            _outcome(8.0, 1.0, compile=2.0, train=4.0, eval=0.5, throughput=0.5)]
    skipped = _outcome(100.0, 5.0, compile=50.0)
    skipped.skipped = True  # an earlier invocation's: nothing of it is in this sweep's seconds
    clock.execution([*outs, skipped], wall_s=10.0, flush_wait_s=0.25)
    assert clock.parts == pytest.approx({"compile": 6.0 * 10 / 16, "train": 6.0 * 10 / 16,
                                         "eval": 1.0 * 10 / 16, "throughput": 1.0 * 10 / 16,
                                         "tracking": 2.0 * 10 / 16 + 0.25})
    # one worker (or workers that idled): their seconds are wall-clock already, not stretched
    clock = SweepClock(t_start=time.perf_counter())
    clock.execution(outs[:1], wall_s=10.0)
    assert clock.parts == pytest.approx({"compile": 4.0, "train": 2.0, "eval": 0.5, "throughput": 0.5,
                                         "tracking": 1.0})


def test_the_clock_starts_at_the_process_start_when_given():
    t = time.perf_counter()
    clock = SweepClock(t_start=t, process_start=t - 2.0)
    clock.startup_ends()
    assert clock.parts["startup"] >= 2.0
    parts = clock.finish()
    assert clock.wall_s >= 2.0 and sum(parts.values()) == pytest.approx(clock.wall_s)
    # a clock "from the future" (a process start taken after the call) is ignored
    assert SweepClock(t_start=t, process_start=t + 5).start == t


def test_other_is_the_rest_and_never_negative():
    assert budget.complete(10.0, {"compile": 3.0, "train": 2.0}) == {
        "startup": 0.0, "preflight": 0.0, "compile": 3.0, "train": 2.0, "eval": 0.0, "throughput": 0.0,
        "batching": 0.0, "tracking": 0.0, "other": 5.0}
    assert budget.complete(1.0, {"compile": 3.0})["other"] == 0.0
    assert budget.trial_parts({"compile": 1.0, "train": 0.5, "eval": 0.25, "throughput": 0.0}, 2.0, 0.5) == {
        "compile": 1.0, "train": 0.5, "eval": 0.25, "throughput": 0.0, "tracking": 0.5, "other": 0.25}


def test_the_budget_line():
    parts = {"compile": 15.4, "train": 4.8, "eval": 3.8, "tracking": 0.1, "other": 17.7, "batching": 0.0}
    assert budget.budget_line(41.8, parts) == "41.8 s: other 42%, compile 37%, train 11%, eval 9%"
    # tracking (0.24%) and batching (0%) are below 0.5%: left out; a narrow line says it has more
    assert budget.budget_line(41.8, parts, width=35) == "41.8 s: other 42%, compile 37%, ..."
    assert budget.budget_line(41.8, parts, width=34) == "41.8 s: other 42%, ..."
    assert budget.budget_line(41.8, parts, width=12) == "41.8 s: ..."
    assert budget.budget_line(0.0, {}) == "0.0 s"


def test_the_command_line_starts_the_clock_at_the_process_start(write_sweep, tmp_path):
    """``python -m harness sweep``: the budget starts at :data:`harness.PROCESS_START` (``startup``
    holds the imports and the command line), still adds up, and the summary prints its line."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    cfg = write_sweep(name="budgetcli", seeds=[0], budget={"steps": 10}, eval_every=10, steps_per_dispatch=10)
    uri = f"sqlite:///{tmp_path / 'cli.db'}"
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "80"}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", str(cfg), "--tracking-uri", uri],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    process_wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    parent, _ = _runs(uri, "budgetcli")
    parts = {p: parent[names.M_TIME[p]] for p in names.TIME_PARTS}
    assert parts["startup"] > 0 and budget.named_sum(parts) <= parent[names.M_SWEEP_WALL_S]
    assert sum(parts.values()) == pytest.approx(parent[names.M_SWEEP_WALL_S], rel=1e-9)
    assert parent[names.M_SWEEP_WALL_S] < process_wall  # the interpreter's own start-up is missed
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("time ")]
    assert lines and lines[0].startswith(f"time {parent[names.M_SWEEP_WALL_S]:.1f} s: "), r.stdout


def test_a_jobs_sweep_reports_one_wall_clock_not_the_workers_sum(write_sweep, tracking_uri):
    """``--jobs 2``: two worker processes train in parallel; the parent's parts still add up to its
    one wall-clock (the trials' seconds scaled to the execution), none negative, and the trials'
    trainer seconds fit in it once scaled: never the two workers' seconds stacked end to end."""
    from harness.orchestrate.run import run_sweep

    cfg = write_sweep(name="budgetjobs", optimizers=[{"name": "sgd", "hparams": {"step_size": [0.1, 0.05]}}],
                      seeds=[0, 1], batching="off", budget={"steps": 20}, eval_every=20)
    t0 = time.perf_counter()
    run_sweep(cfg, tracking_uri=tracking_uri, quiet=True, jobs=2)
    _, trials, parts = _adds_up(tracking_uri, "budgetjobs", time.perf_counter() - t0)
    for p in budget.TRAINER_PARTS:  # scaled by wall / summed (<= 1): at most the trials' own sum
        assert parts[p] <= sum(t[names.M_TIME[p]] for t in trials) * (1 + 1e-9), p
    assert parts["compile"] > 0 and parts["train"] > 0


def test_eval_note_says_what_evaluation_cost_and_what_cuts_it():
    assert budget.eval_note(275.0, {"eval": 100.0, "train": 175.0}) == ""  # 36%: no note
    note = budget.eval_note(275.0, {"eval": 217.0, "train": 58.0})
    assert note == ("evaluation took 79% of the time: it reads the whole validation split at every "
                    "evaluation; fewer validation examples (a tokens: dataset's valid_tokens, e.g. 65536 "
                    "on a CPU proxy) or a larger eval_every cut it")
    assert budget.eval_note(0.0, {"eval": 1.0}) == ""
