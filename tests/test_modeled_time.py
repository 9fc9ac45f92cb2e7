"""A time to target free of the machine's load, and a step time that is checked.

The throughput measurement repeats until its spread is small and is checked against the trial's own
training clock (a slow measurement is re-measured, then flagged ``perf.suspect`` in MLflow); every
trial with a target gets ``convergence/modeled_seconds_to_target`` (steps × the program's median
step time) and reports rank on it (``report --time measured`` switches back); optimizers that reach
the target at the same evaluation are ranked by the final validation metric, never by wall-clock.
"""

from __future__ import annotations

import itertools
import re

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from subproc import burn_cpus

from harness.core import names as N
from harness.core.clock import (
    clock_seconds,
    clock_sentence,
    cost_seconds,
    modeled_seconds,
    ranked_seconds,
    task_clock,
)
from harness.train import perf as P
from harness.train import timing

# --------------------------------------------------------------------------- the rules, exactly


def test_clock_disagreement_says_both_figures():
    """The issue's case: 10.4 ms measured while the trial's 5,000 steps took 6.5 s (1.3 ms each)."""
    assert P.clock_disagreement(10.4, (6.5, 5000, 1)) == (
        "step time 10.4 ms measured, the training clock says 1.3 ms per step (6.5 s / 5000 steps): "
        "they differ by more than 2x")
    assert P.clock_disagreement(0.6, (6.5, 5000, 1)).startswith(  # 1.3 / 2 = 0.65 > 0.6: too fast
        "step time 0.6 ms measured")
    assert P.clock_disagreement(0.7, (6.5, 5000, 1)) == ""
    assert P.clock_disagreement(2.6, (6.5, 5000, 1)) == ""
    assert P.clock_disagreement(2.7, (6.5, 5000, 1)).startswith("step time 2.7 ms measured")
    # 4 vmapped trials: one trial alone takes between clock/4 and clock per step (then the 2x)
    assert P.clock_disagreement(0.2, (1.0, 1000, 4)) == ""
    assert P.clock_disagreement(0.1, (1.0, 1000, 4)) == (
        "step time 0.1 ms measured, the training clock says 1 ms per step of 4 vmapped trials "
        "(1 s / 1000 steps): they differ by more than 2x")
    assert P.clock_disagreement(5.0, None) == "" and P.clock_disagreement(5.0, (0.0, 0, 1)) == ""
    # the median over dispatches: one dispatch slowed by the machine (0.5 s) does not decide
    # (the first dispatch, which pays first-touch allocation, left out when there are more)
    slowed = P.TrainClock(0.55, 40, 1, [0.03 / 10, 0.010 / 10, 0.011 / 10, 0.5 / 10])
    assert P.clock_disagreement(1.2, slowed) == ""
    assert P.clock_disagreement(17.3, slowed) == (
        "step time 17.3 ms measured, the training clock says 1.1 ms per step (median of 3 dispatches; "
        "0.55 s / 40 steps): they differ by more than 2x")
    assert "(median of 1 dispatch; " in P.clock_disagreement(17.3, P.TrainClock(0.04, 20, 1, [0.3, 0.001]))
    # too fast is judged on the fastest dispatch: dispatches slowed by other work in the process
    # (the background MLflow writer) do not make a true figure "impossible" (seen: 0.338 ms measured,
    # median dispatch 0.775 ms, which the median-based bound of 0.39 ms flagged)
    busy = P.TrainClock(0.0927, 120, 1, [d / 20 for d in (0.02, 0.0155, 0.0155, 0.0155, 0.008, 0.015)])
    assert P.clock_disagreement(0.338, busy) == ""
    assert P.clock_disagreement(0.19, busy) == (
        "step time 0.19 ms measured, the training clock says 0.4 ms per step (fastest of 5 dispatches; "
        "0.0927 s / 120 steps): they differ by more than 2x")


def test_relative_spread_and_repeats_until_stable(monkeypatch):
    """A block of timed calls whose spread is large is followed by more blocks until the spread
    of all of them is small; without ``max_spread`` one block is timed. A fake clock: each call
    takes what it is told (the first 10 timed calls alternate 0 and 8 ms, every later one 4 ms)."""
    import types

    import jax
    import jax.numpy as jnp

    assert timing.relative_spread([1, 2, 3, 4, 5]) == pytest.approx(2 / 3)
    x = jnp.ones(4)
    exe = jax.jit(lambda a: a + 1).lower(x).compile()
    clock = {"t": 0.0, "calls": 0}
    import time as real
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(
        perf_counter=lambda: clock["t"], process_time=real.process_time, clock_gettime=real.clock_gettime,
        pthread_getcpuclockid=real.pthread_getcpuclockid))

    class Noisy:
        def __call__(self, *a):
            n = clock["calls"] - 2  # after 2 warm-ups
            clock["calls"] += 1
            clock["t"] += ((0.008 if n % 2 else 0.0) if n < 10 else 0.004) if n >= 0 else 0.0
            return exe(*a)

        def cost_analysis(self):
            return exe.cost_analysis()

    one = timing.measure(None, (x,), batch_size=1, warmup=2, iters=10, compiled=Noisy(), compile_s=0.0,
                         peak_flops=1e9)
    assert one.timed_steps == 10 and one.spread == pytest.approx(2.0)  # IQR 8 ms / median 4 ms
    clock["calls"] = 0
    many = timing.measure(None, (x,), batch_size=1, warmup=2, iters=10, compiled=Noisy(), compile_s=0.0,
                          peak_flops=1e9, max_spread=0.3, stable_on="wall")
    # 20 calls: quartiles 3 and 5 ms, spread 0.5; 30 calls: both 4 ms, spread 0
    assert many.timed_steps == 30 and many.spread == 0.0 and many.step_time_ms == pytest.approx(4.0)
    clock["calls"] = 0
    capped = timing.measure(None, (x,), batch_size=1, warmup=2, iters=10, compiled=Noisy(), compile_s=0.0,
                            peak_flops=1e9, max_spread=0.0, max_iters=20, stable_on="wall")
    assert capped.timed_steps == 20 and capped.spread == pytest.approx(0.5)


def test_modeled_seconds_and_which_clock():
    """A flagged figure keeps its modeled time, and a task whose trial has no modeled
    time ranks on the deterministic cost clock, not on wall-clock. Before: ``modeled_seconds(...,
    suspect)`` was ``None`` and ``task_clock`` moved the whole task to measured seconds."""
    assert modeled_seconds(150, 0.2) == pytest.approx(0.03)
    assert modeled_seconds(None, 0.2) is None and modeled_seconds(150, None) is None
    assert modeled_seconds(150, 0.0) is None and modeled_seconds(0, 0.2) == 0.0  # met at step 0
    assert cost_seconds(200, 3e6, 1.5e11) == pytest.approx(0.004)
    assert cost_seconds(200, None, 1.5e11) is None and cost_seconds(None, 3e6, 1.5e11) is None
    assert ranked_seconds(0.03, 0.004, 0.4, "modeled") == 0.03
    assert ranked_seconds(0.03, 0.004, 0.4, "cost") == 0.004
    assert ranked_seconds(0.03, 0.004, 0.4, "measured") == 0.4
    with pytest.raises(ValueError, match="the time clock must be one of modeled, measured; got 'wall'"):
        task_clock([(0.03, 0.004, 0.4)], "wall")
    # one comparison, one clock: a trial that reached the target without a modeled time (an AlgoPerf
    # submission) moves its whole task to the cost clock; one that did not reach it moves nothing
    assert task_clock([(0.03, 0.004, 0.4), (0.05, 0.006, 0.5)], "modeled") == "modeled"
    assert task_clock([(0.03, 0.004, 0.4), (None, 0.006, 0.5)], "modeled") == "cost"
    assert task_clock([(0.03, 0.004, 0.4), (None, None, 0.5)], "modeled") == "measured"  # nothing else
    assert task_clock([(0.03, 0.004, 0.4), (None, None, None)], "modeled") == "modeled"
    assert task_clock([(0.03, 0.004, 0.4)], "measured") == "measured"
    assert clock_sentence("modeled", cost_tasks=["mlp · digits"]).endswith(
        "mlp · digits ranks on cost (steps to target × the program's FLOPs per step ÷ the device's "
        "peak: XLA's count of the compiled step, update included; for an AlgoPerf submission the "
        "model's, its update uncounted): a trial there has no timed step (an AlgoPerf submission's "
        "own jit), and one comparison never mixes two clocks.")
    assert clock_sentence("modeled", list("abcd")).endswith(
        " a, b, c and 1 more rank on measured seconds: a trial there has neither a timed step nor a FLOP "
        "count.")
    assert "on measured seconds" not in clock_sentence("modeled", flagged=["sgd · mlp · digits"])
    assert clock_sentence("modeled", flagged=["sgd · mlp · digits"]).endswith(
        "Flagged (†): sgd · mlp · digits: the step time disagreed with the trial's own training clock "
        "and was measured again beside the task's programs; it ranks on that figure (tag perf.suspect "
        "says why).")


# --------------------------------------------------------------------------- ties and the clock


def _tie_frame():
    """The issue's case: adam and momentum both reach the target at step 150 on both seeds;
    momentum has the better final validation accuracy (0.690 vs 0.631) but its seeds' wall-clock
    took 0.402 and 0.182 s; momentum's modeled time is also the longer (1.2 ms vs 1.0 ms a step).
    sgd reaches it at step 100 (fewer steps, so faster on either clock, whatever its metric)."""
    rows = []
    for opt, ms, acc, secs, steps in (("adam", 1.0, 0.631, (0.10, 0.11), 150),
                                      ("momentum", 1.2, 0.690, (0.402, 0.182), 150),
                                      ("sgd", 1.0, 0.600, (0.09, 0.095), 100)):
        for seed, s in enumerate(secs):
            rows.append({
                "row": "summary", "task": "mlp / digits", "optimizer": opt, "config_id": opt,
                "config": f"{opt} lr=0.1", "status": "finished", "seed": seed, "trial_id": f"{opt}-{seed}",
                N.M_SECONDS_TO_TARGET: s, N.M_STEPS_TO_TARGET: steps, N.M_STEP_MS: ms,
                N.M_MODELED_SECONDS_TO_TARGET: modeled_seconds(steps, ms),
                N.M_FINAL_ACC: acc, N.M_FINAL_LOSS: 1 - acc, "perf_suspect": None,
                "target_metric": "valid/accuracy", "target_mode": "max", "target_value": 0.6})
    return pd.DataFrame(rows)


def _ranks(frame) -> list[str]:
    from reports.selection import best_configs

    return list(best_configs(frame).sort_values("rank")["optimizer"])


def test_the_cost_clock_charges_each_program_its_own_flops():
    """The cost clock charged every optimizer the model's analytic FLOPs, so muon's
    Newton–Schulz products cost it nothing there. It charges the program's XLA count (update
    included) where there is one, the analytic count only where there is not."""
    from harness.core.spec import PerfResult

    def perf(xla, analytic):
        return PerfResult(compile_s=0.0, step_time_ms=1.0, step_time_ms_p10=1.0, step_time_ms_p90=1.0,
                          examples_per_sec=1.0, flops_per_step=xla, flops_per_step_analytic=analytic,
                          peak_flops=1e11, modeled_step_ms=0.5)

    assert clock_seconds(200, perf(4e7, 1e7)) == (pytest.approx(0.1), pytest.approx(200 * 4e7 / 1e11))
    assert clock_seconds(200, perf(None, 1e7))[1] == pytest.approx(200 * 1e7 / 1e11)
    assert clock_seconds(200, perf(None, None))[1] is None
    assert clock_seconds(200, None) == (None, None)


@pytest.mark.parametrize("clock", ["modeled", "measured"])
def test_a_tie_in_steps_is_ranked_by_the_final_metric_on_either_clock(clock):
    """Before: adam ranked above momentum (seconds came first among optimizers). sgd needed fewer
    steps: first on either clock."""
    from reports.report_clock import use_clock

    f = use_clock(_tie_frame(), clock)
    assert _ranks(f) == ["sgd", "momentum", "adam"]


def test_a_suspect_figure_keeps_its_task_on_the_modeled_clock():
    """Before: adam-1's flagged figure (perf.suspect) moved its whole task to measured
    seconds (0.10, 0.11, 0.402, 0.182: the noisiest clock there is). Now the task stays on the
    modeled clock and the report names the flagged program; a task where a trial has no modeled
    time at all ranks on the cost clock; ``--time measured`` still gives the wall-clock."""
    from reports.report_clock import clock_note, clock_of, use_clock

    one = _tie_frame().assign(model="mlp", dataset="digits")
    other = _tie_frame().assign(task="cnn / digits", model="cnn", dataset="digits",
                                trial_id=lambda f: "cnn-" + f["trial_id"])
    other[N.M_COST_SECONDS_TO_TARGET] = other[N.M_STEPS_TO_TARGET] * 1e-3
    raw = pd.concat([one, other], ignore_index=True)
    raw.loc[raw["trial_id"] == "adam-1", "perf_suspect"] = "step CPU time 9 ms measured, ..."
    raw.loc[raw["trial_id"] == "cnn-momentum-1", N.M_MODELED_SECONDS_TO_TARGET] = None  # no timed step
    m = use_clock(raw, "modeled")
    secs = dict(zip(m["trial_id"], m[N.M_SECONDS_TO_TARGET], strict=True))
    assert [secs[f"{o}-{s}"] for o in ("adam", "momentum") for s in (0, 1)] == pytest.approx(
        [0.15, 0.15, 0.18, 0.18])  # modeled, the flagged adam-1 included
    assert secs["cnn-adam-0"] == pytest.approx(0.15) and secs["cnn-sgd-0"] == pytest.approx(0.10)  # cost
    assert clock_of(m, "mlp / digits") == "modeled" and clock_of(m, "cnn / digits") == "cost"
    note = clock_note(m)
    assert "on measured seconds" not in note and "cnn · digits ranks on cost" in note
    assert "Flagged (†): adam · mlp · digits:" in note

    w = use_clock(raw, "measured")
    assert list(w[N.M_SECONDS_TO_TARGET]) == list(raw[N.M_SECONDS_TO_TARGET])
    assert clock_note(w).startswith("Time to target: measured") and clock_of(w, "cnn / digits") == "measured"
    assert list(raw[N.M_SECONDS_TO_TARGET])[:2] == [0.10, 0.11]  # the loaded frame is left alone
    with pytest.raises(ValueError, match="--time must be one of modeled, measured; got 'wall'"):
        use_clock(raw, "wall")


# --------------------------------------------------------------------------- a tiny real sweep


def _slow_measure(monkeypatch, times: int | None):
    """Make the first ``times`` throughput measurements (every one: ``None``) cost 3 ms of CPU a
    step more than the step does: the timed executable spins before each call (a figure inflated
    by other work; spinning, not sleeping, since the figure on a CPU is CPU time, which a sleep does
    not move), while training is untouched. The sweep's interleaved measurement before training and
    a unit's own re-measurement both time what ``perf._chunk_job`` hands them. Returns the list of
    measured figures (``modeled_step_ms``)."""
    real_job, real_result = P._chunk_job, timing.perf_result
    jobs, seen = [0], []

    def chunk_job(prog, spec, state=None):
        job, kw = real_job(prog, spec, state)
        jobs[0] += 1
        if times is None or jobs[0] <= times:
            exe, k = job.compiled, kw["steps_per_call"]

            class Slow:
                def __call__(self, *a):
                    import time

                    end = time.thread_time() + 0.003 * k
                    while time.thread_time() < end:
                        pass
                    return exe(*a)

                def cost_analysis(self):
                    return exe.cost_analysis()

            job = job._replace(compiled=Slow())
        return job, kw

    def perf_result(*a, **kw):
        out = real_result(*a, **kw)
        seen.append(out.modeled_step_ms)
        return out

    monkeypatch.setattr(P, "_chunk_job", chunk_job)
    monkeypatch.setattr(P.timing, "perf_result", perf_result)
    monkeypatch.setattr("harness.execute.training.PERF_CACHE", {})  # this process's measurements
    return seen


def _trial_run(tracking_uri, name):
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name(name)
    (run,) = c.search_runs([exp.experiment_id], "tags.`harness.kind` = 'trial'")
    return run


#: 256 wide: a step of tenths of a ms, so that the training clock's per-dispatch host work (tenths of a
#: ms per 20-step dispatch) does not make a true figure read "too fast" (a 16-wide MLP's 0.027 ms
#: step against a 0.06 ms training clock did, and was re-measured a second time)
SWEEP = {"seeds": [0], "measure_perf": True, "budget": {"steps": 40}, "eval_every": 20,
         "models": [{"name": "mlp", "hparams": {"width": 256, "depth": 2}}]}


def test_a_slow_measurement_is_measured_again(tmp_path, write_sweep, tracking_uri, monkeypatch):
    """The first measurement costs 3 ms of CPU a step more than training's: it is measured again,
    and the second measurement is what MLflow holds (and what the modeled time multiplies)."""
    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    seen = _slow_measure(monkeypatch, times=1)
    run_sweep(write_sweep(name="slow_once", **SWEEP), tracking_uri=tracking_uri, quiet=True)
    assert len(seen) == 2 and seen[0] > 3.0 and seen[1] < 1.5, seen
    run = _trial_run(tracking_uri, "slow_once")
    m = run.data.metrics
    assert m[N.M_MODELED_STEP_MS] == pytest.approx(seen[1]) and N.TAG_PERF_SUSPECT not in run.data.tags
    assert m[N.M_MODELED_SECONDS_TO_TARGET] == pytest.approx(m[N.M_STEPS_TO_TARGET] * seen[1] / 1e3)


def test_a_slow_measurement_that_persists_is_flagged_and_still_ranks(tmp_path, write_sweep, tracking_uri,
                                                                     monkeypatch):
    """Every measurement costs 3 ms of CPU a step more than training's: re-measured until two
    figures agree within 10%, the run gets the tag ``perf.suspect`` with both figures and the rule,
    and it **keeps its modeled time** on that figure. Before: no modeled time, so its task ranked
    on wall-clock."""
    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    seen = _slow_measure(monkeypatch, times=None)
    run_sweep(write_sweep(name="slow_always", **SWEEP), tracking_uri=tracking_uri, quiet=True)
    assert 3 <= len(seen) <= 1 + P.REMEASURES and min(seen) > 3.0, seen
    run = _trial_run(tracking_uri, "slow_always")
    why = run.data.tags[N.TAG_PERF_SUSPECT]
    m = re.fullmatch(r"step CPU time ([\d.]+) ms measured, the training clock's CPU time says ([\d.]+) ms "
                     r"per step \(median of 1 dispatch; ([\d.]+) s / 40 steps\): they differ by more than "
                     r"2x; re-measured (\d) times alone, "
                     r"(stable at ([\d.]+) ms: ranked on it|never stable.*)", why)
    assert m, why
    assert float(m[1]) == pytest.approx(seen[-1], rel=1e-2) and float(m[2]) < float(m[1]) / 2
    metrics = run.data.metrics
    assert metrics[N.M_MODELED_STEP_MS] == pytest.approx(seen[-1]) or m[5].startswith("never")
    assert metrics[N.M_MODELED_SECONDS_TO_TARGET] == pytest.approx(
        metrics[N.M_STEPS_TO_TARGET] * metrics[N.M_MODELED_STEP_MS] / 1e3)


def test_the_modeled_time_is_steps_times_the_step_time(tmp_path, write_sweep, tracking_uri, monkeypatch):
    """Read back from MLflow: modeled seconds = steps to target × perf/modeled_step_ms / 1000, the
    CPU time per step on this CPU (the clock check is switched off: on a busy test machine a true
    measurement may disagree)."""
    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(P, "CLOCK_FACTOR", float("inf"))
    monkeypatch.setattr("harness.execute.training.PERF_CACHE", {})
    run_sweep(write_sweep(name="modeled", **SWEEP), tracking_uri=tracking_uri, quiet=True)
    m = _trial_run(tracking_uri, "modeled").data.metrics
    assert m[N.M_STEPS_TO_TARGET] in (0, 20, 40) and m[N.M_STEP_MS] > 0 and m[N.M_STEP_SPREAD] >= 0
    assert m[N.M_MODELED_STEP_MS] == m[N.M_STEP_CPU_MS] > 0  # on a CPU device: CPU time
    assert m[N.M_MODELED_SECONDS_TO_TARGET] == pytest.approx(
        m[N.M_STEPS_TO_TARGET] * m[N.M_MODELED_STEP_MS] / 1e3, rel=1e-9)


# --------------------------------------------------------------------------- the done-when

LOADED = {"models": [{"name": "mlp", "hparams": {"width": 256, "depth": 2}}], "datasets": ["digits"],
          "schedules": ["constant"], "batch_size": 64,
          "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.05}},
                         {"name": "momentum", "hparams": {"step_size": 0.03, "mass": 0.9}},
                         {"name": "adam", "hparams": {"step_size": 0.003}}],
          "seeds": [0], "measure_perf": True, "budget": {"steps": 120}, "eval_every": 20,
          "steps_per_dispatch": 20, "batching": "off", "target": {"metric": "valid/accuracy", "value": 0.85}}


@pytest.fixture(scope="module")
def loaded_sweeps(tmp_path_factory):
    """The same sweep twice into one store: ``quiet`` alone, ``loaded`` with a CPU-burning process
    beside it (the issue's setting; killed when the sweep ends). The clock check stays on: a figure
    it flagged would rank its task on wall-clock, and the test asserts none was. The MLP is 256 wide
    (a step of ~1.5 ms): at 64 wide (0.4 ms, 8 ms per 20-step dispatch) the training clock's
    dispatches ran at twice the stage's figure even on the quiet run (0.427 ms measured, fastest
    dispatch 0.901 ms per step; the in-process MLflow writer works beside training), and the check
    flagged true figures."""
    d = tmp_path_factory.mktemp("loaded")
    uri = f"sqlite:///{d / 'mlflow.db'}"
    _run_twice(d, uri)
    return uri


def _run_twice(d, uri) -> None:
    import yaml

    from harness.execute import training
    from harness.orchestrate.run import run_sweep

    for name in ("quiet", "loaded"):
        cfg = d / f"{name}.yaml"
        cfg.write_text(yaml.safe_dump({**LOADED, "name": name}, sort_keys=False))
        training.PERF_CACHE.clear()  # as a new process: each run measures its own step times
        burners = burn_cpus(1) if name == "loaded" else []
        try:
            run_sweep(cfg, tracking_uri=uri, quiet=True)
        finally:
            for b in burners:
                b.kill()
                b.wait()


def test_a_loaded_machine_gives_the_same_leaderboard_order(loaded_sweeps):
    """The same sweep run twice, the second time beside a CPU-burning
    process, ranks its optimizers in the same order on the default, modeled clock. They reach the
    target at *different* steps (so the order is steps × each program's step time, not a tie), and
    two of them have modeled times within 1.5x of each other (so a step time measured alone, at
    each unit's end, under a load that came and went, could flip them); the programs are measured
    interleaved before training, under the same load, and their ratios hold."""
    from reports.frame import load_frame, summaries
    from reports.report_clock import use_clock

    frames = {n: use_clock(load_frame(n, tracking_uri=loaded_sweeps)) for n in ("quiet", "loaded")}
    table = {n: summaries(f).set_index("optimizer") for n, f in frames.items()}
    steps = {n: t[N.M_STEPS_TO_TARGET].to_dict() for n, t in table.items()}
    assert steps["quiet"] == steps["loaded"]  # the same curves: only the clock differs
    assert len(set(steps["quiet"].values())) >= 2, steps  # not all tied on steps
    for n, t in table.items():  # ranked on the modeled clock: no suspect figure fell back to wall
        assert t[N.M_MODELED_SECONDS_TO_TARGET].notna().all(), (n, t.to_dict())
    modeled = sorted(table["quiet"][N.M_MODELED_SECONDS_TO_TARGET])
    # close: two optimizers at different steps whose modeled times are within 1.5x of each other
    assert min(b / a for a, b in itertools.pairwise(modeled)) < 1.5, modeled
    assert _ranks(frames["quiet"]) == _ranks(frames["loaded"]), {
        n: t[[N.M_STEPS_TO_TARGET, N.M_STEP_MS]].to_dict() for n, t in table.items()}


def test_report_time_measured_switches_the_clock(loaded_sweeps, tmp_path):
    """``report --time measured`` ranks on the logged wall-clock and says so on the page (the
    default's sentence, and what each clock puts in the frame: the tests above)."""
    import html

    from typer.testing import CliRunner

    from harness.cli import app

    runner = CliRunner()
    out = tmp_path / "measured.html"
    r = runner.invoke(app, ["report", "-e", "loaded", "--tracking-uri", loaded_sweeps, "-o", str(out),
                            "--time", "measured"])
    assert r.exit_code == 0, r.output
    said = html.unescape(re.search(r'<p class="sub" id="time-clock">(.*?)</p>', out.read_text())[1])
    assert said == clock_sentence("measured")
    assert said.startswith("Time to target: measured (the trial's wall-clock of training, load included")
    r = runner.invoke(app, ["report", "-e", "loaded", "--tracking-uri", loaded_sweeps, "--time", "wall"])
    assert r.exit_code == 2 and "'wall' is not one of 'modeled', 'measured'" in r.output
