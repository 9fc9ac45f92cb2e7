"""Issue 32 §1: the rank clock's pieces, exactly.

CPU time that other Python threads of the process spend is not the step's; figures within the clock's
resolution form one cost class; a figure that disagrees with its training clock is re-measured beside
its task's programs and put into the interleaved stage's frame; a later trial of a program carries
the figure the first one settled.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from harness.core.clock import RESOLUTION, classed_seconds, cost_classes
from harness.core.spec import PerfResult
from harness.train import cpu_clock
from harness.train import perf as P
from tests.conftest import make_spec


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_work_cpu_s_leaves_out_the_other_python_threads():
    """A background thread (the MLflow writer's place) spins for 0.3 s of CPU while the calling thread
    sleeps: the process's CPU grew by about that much, the step's work (:func:`work_cpu_s`) by about
    nothing; the calling thread's own spin counts in full."""
    d0 = cpu_clock.cpu_snapshot()
    _spin(0.2)
    assert cpu_clock.work_cpu_s(d0, cpu_clock.cpu_snapshot()) == pytest.approx(0.2, abs=0.05)
    release = threading.Event()
    t = threading.Thread(target=lambda: (_spin(0.3), release.wait(10)))
    t.start()
    time.sleep(0.01)
    s0 = cpu_clock.cpu_snapshot()  # the thread is alive at both snapshots
    while time.process_time() - s0.process_s < 0.25:
        time.sleep(0.01)
    s1 = cpu_clock.cpu_snapshot()
    release.set()
    t.join(timeout=10)
    assert s1.process_s - s0.process_s > 0.2  # the process burned it ...
    assert cpu_clock.work_cpu_s(s0, s1) < 0.05  # ... the step's work did not
    assert cpu_clock.work_cpu_s(s1, s1) == 0.0


def test_cost_classes_chain_figures_within_the_resolution():
    """Sorted figures join the class below when within ``RESOLUTION`` (1.25x) of its largest
    member; the common figure is the median of the class's distinct figures."""
    assert RESOLUTION == 1.25
    got = cost_classes([0.0565, 0.056, 0.061, 0.068, 0.24, None, 0.0, float("nan")])
    assert got == {0.056: pytest.approx(0.05875), 0.0565: pytest.approx(0.05875),
                   0.061: pytest.approx(0.05875), 0.068: pytest.approx(0.05875), 0.24: 0.24}
    # a chain: 1.0 -> 1.2 (1.2x) -> 1.45 (1.21x) -> 2.0 (1.38x: a new class)
    assert cost_classes([1.0, 1.2, 1.45, 2.0]) == {1.0: 1.2, 1.2: 1.2, 1.45: 1.2, 2.0: 2.0}
    assert cost_classes([1.0, 1.25]) == {1.0: 1.125, 1.25: 1.125}  # exactly 1.25x joins
    # the seconds each trial ranks on: steps × its class's figure; a trial without a figure keeps
    # the logged seconds; one that did not reach the target has none
    assert classed_seconds([(50, 1.0, 0.05), (60, 1.2, 0.072), (10, 2.0, 0.02), (None, 1.45, None),
                            (30, None, 0.5)]) == [pytest.approx(0.06), pytest.approx(0.072),
                                                  pytest.approx(0.02), None, 0.5]


def _perf(ms: float, **kw) -> PerfResult:
    return PerfResult(compile_s=0.0, step_time_ms=ms, step_time_ms_p10=ms, step_time_ms_p90=ms,
                      examples_per_sec=1.0, device_kind="cpu:cpu", step_cpu_ms=ms, modeled_step_ms=ms,
                      spread=0.05, **kw)


def test_a_remeasure_is_put_into_the_stage_frame_through_the_task_peers(monkeypatch):
    """The stage measured a (1 ms) and b (2 ms) together. a's training clock says 3 ms a step, so a is
    re-measured beside b: now a reads 3.2 ms and b 4 ms (the machine got twice as busy for b). a's
    figure in the stage's frame is 3.2 × 2/4 = 1.6 ms: within 2x of the clock, so accepted,
    ``remeasured`` and not flagged; the cache keeps it, ``checked``."""
    a = make_spec(optimizer="sgd", optimizer_hparams={"step_size": 0.1})
    b = make_spec(optimizer="adam", optimizer_hparams={"step_size": 0.01})
    ka, kb = P.perf_cache_key(a), P.perf_cache_key(b)
    cache = {ka: _perf(1.0), kb: _perf(2.0)}
    monkeypatch.setitem(P._PEERS, P.task_key(a), {ka: a, kb: b})
    monkeypatch.setattr(P, "program_for", lambda spec, ds: f"prog-{spec.optimizer}")
    monkeypatch.setattr(P, "load_dataset", lambda *a, **k: None)
    timed: list[list[str]] = []

    def together(programs):
        timed.append([p for p, _ in programs])
        return [_perf(3.2), _perf(4.0)]

    monkeypatch.setattr(P, "_time_together", together)
    clock = P.TrainClock(0.3, 100, 1, [0.003] * 4, [0.003] * 4)
    got = P.measure_trial_perf("prog-sgd", a, cache, clock)
    assert timed == [["prog-sgd", "prog-adam"]]  # the program beside its task's other one
    assert got.modeled_step_ms == pytest.approx(1.6) and got.remeasured and got.suspect == ""
    assert cache[ka].checked and cache[ka].modeled_step_ms == pytest.approx(1.6)
    # a later trial of the same program carries the settled figure, flagged by its own clock
    fast = P.TrainClock(0.1, 100, 1, [0.001] * 4, [0.0005] * 4)
    later = P.measure_trial_perf("prog-sgd", a, cache, fast)
    assert timed == [["prog-sgd", "prog-adam"]]  # not measured again
    assert later.modeled_step_ms == pytest.approx(1.6)
    assert later.suspect.startswith("step CPU time 1.6 ms measured, the training clock's CPU time says "
                                    "0.5 ms per step (median of 3 dispatches;")


def test_a_figure_that_stays_apart_from_its_clock_is_ranked_on_its_stable_value(monkeypatch):
    """Every re-measure reads 3 ms (alone: no peers) while the clock says 1 ms: the second figure
    agrees with the first within 10%, so it is stable: returned with ``suspect`` saying so, and its
    modeled figure is 3 ms (it still ranks). Three figures that never agree: the one of least
    spread, flagged as never stable."""
    a = make_spec(optimizer="sgd", optimizer_hparams={"step_size": 0.1}, seed=7)
    clock = P.TrainClock(0.1, 100, 1, [0.001] * 3, [0.001] * 3)
    figures = iter([3.0, 3.1])
    monkeypatch.setattr(P, "_measure", lambda prog, spec: _perf(next(figures)))
    got = P.remeasure_in_task(None, a, _perf(3.0), {}, clock)
    assert got.modeled_step_ms == 3.1 and got.remeasured
    assert got.suspect.endswith("; re-measured 2 times alone, stable at 3.1 ms: ranked on it")
    spreads = iter([(3.0, 0.3), (5.0, 0.1), (9.0, 0.2)])

    def measure(prog, spec):
        ms, spread = next(spreads)
        return dataclasses.replace(_perf(ms), spread=spread)

    monkeypatch.setattr(P, "_measure", measure)
    got = P.remeasure_in_task(None, a, _perf(3.0), {}, clock)
    assert got.modeled_step_ms == 5.0
    assert got.suspect.endswith(f"; re-measured {P.REMEASURES} times, never stable within 10%: ranked on "
                                "the figure of least spread, 5 ms")


def test_a_task_with_an_algoperf_submission_ranks_on_cost_not_on_wall_clock(tmp_path):
    """A real sweep: an AlgoPerf submission (its own per-step jit, which the interleaved stage does
    not time) beside sgd and adam on one task. Before: the task ranked on measured seconds; now on
    the cost clock (steps × the program's FLOPs per step ÷ peak: XLA's count of sgd's and adam's
    compiled steps, the model's analytic count for the submission), in the summary and in the
    report's frame alike."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    from harness.core import names as N
    from reports.clock import clock_note, clock_of, use_clock
    from reports.frame import load_frame, summaries

    sub = Path(__file__).resolve().parents[1] / "experiments" / "submissions" / "nadamw.py"
    cfg = {"name": "apclock", "models": [{"name": "mlp", "hparams": {"width": 32, "depth": 1}}],
           "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}},
                          {"name": "adam", "hparams": {"step_size": 0.003}},
                          {"name": "nadamw_sub", "source": f"algoperf:{sub}",
                           "hparams": {"learning_rate": 0.003, "one_minus_beta1": 0.1, "beta2": 0.999,
                                       "weight_decay": 0.01, "warmup_factor": 0.05}}],
           "schedules": ["constant"], "datasets": ["digits"], "seeds": 1, "batch_size": 64,
           "budget": {"steps": 100}, "eval_every": 50, "steps_per_dispatch": 50,
           "target": {"metric": "valid/accuracy", "value": 0.3}, "measure_perf": True}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", "c.yaml", "--tracking-uri", uri],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    said = " ".join(r.stdout.split())
    assert "mlp · digits ranks on cost (steps to target × the program's FLOPs per step" in said, said
    assert "on measured seconds" not in said
    frame = use_clock(load_frame("apclock", tracking_uri=uri))
    (task,) = set(summaries(frame)["task"])
    assert clock_of(frame, task) == "cost" and "ranks on cost" in clock_note(frame)
    s = summaries(frame).set_index("optimizer")
    assert s[N.M_COST_SECONDS_TO_TARGET].notna().all()
    assert pd_isna(s.loc["nadamw_sub", N.M_MODELED_SECONDS_TO_TARGET])  # no timed step of its own
    per_step = s[N.M_COST_SECONDS_TO_TARGET] / s[N.M_STEPS_TO_TARGET]
    per_flop = per_step / s[N.M_FLOPS]  # each program's own count (issue 32, D4), one peak for all
    assert per_flop.max() == pytest.approx(per_flop.min(), rel=1e-9)
    assert per_step["adam"] > per_step["sgd"]  # adam's update costs more FLOPs than sgd's


def pd_isna(x) -> bool:
    import pandas as pd

    return bool(pd.isna(x))


def test_a_step_whose_timing_fails_ranks_its_task_on_cost(tmp_path, write_sweep, tracking_uri, monkeypatch):
    """The throughput measurement raises (both the interleaved stage and the unit's own): the trial
    still trains and is FINISHED, with no modeled time but a cost time (the model's analytic FLOPs
    per step ÷ peak) and ``perf.suspect`` saying why. Before: the error failed the trial."""
    from mlflow.tracking import MlflowClient

    from harness.core import names as N
    from harness.sweep.run import run_sweep

    def broken(*a, **k):
        raise RuntimeError("timer exploded")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(P, "_measure", broken)
    monkeypatch.setattr(P, "_time_together", broken)
    monkeypatch.setattr("harness.execute.training.PERF_CACHE", {})
    cfg = write_sweep(name="untimed", seeds=[0], measure_perf=True)
    run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name("untimed").experiment_id
    (run,) = c.search_runs([exp], "tags.`harness.kind` = 'trial'")
    assert run.info.status == "FINISHED" and run.data.tags[N.TAG_STATUS] == "finished"
    assert run.data.tags[N.TAG_PERF_SUSPECT] == (
        "the step could not be timed (RuntimeError: timer exploded): ranked on the cost clock")
    m = run.data.metrics
    assert N.M_MODELED_SECONDS_TO_TARGET not in m and N.M_STEP_MS not in m
    assert m[N.M_COST_SECONDS_TO_TARGET] == pytest.approx(
        m[N.M_STEPS_TO_TARGET] * m[N.M_FLOPS] / m[N.M_PEAK_FLOPS], rel=1e-9)


def test_equal_steps_in_different_cost_classes_are_not_a_tie_on_time():
    """Issue 32 §1 with §2: muon (a 4x figure, its own cost class) and adam reach the target at the
    same evaluation: before, "the same steps is a tie on time whatever the clock says" put muon "1="
    beside adam (decided by the final metric), while its time read 4x adam's. Now the same steps
    in different classes are compared on time (muon second), while sgd and adam, one class, still
    tie on time and are ordered by the final metric."""
    from harness.core import ties

    def standing(name, steps, ms, value):
        return ties.Standing(name=name, reached=2, finished=2, median_steps=steps,
                             seconds={0: steps * ms / 1e3, 1: steps * ms / 1e3}, values={0: value, 1: value},
                             cost_class=ms)

    common = cost_classes([0.055, 0.059, 0.217])
    adam = standing("adam", 50, common[0.059], 0.97)
    sgd = standing("sgd", 50, common[0.055], 0.96)
    muon = standing("muon", 50, common[0.217], 0.99)
    order = ties.strict_order([muon, sgd, adam])
    assert [s.name for s in order] == ["adam", "sgd", "muon"]  # adam/sgd: one class, by the metric
    assert [lab for _, lab in ties.tie_labels(ties.share_ranks(order)).values()] == ["1", "2", "3"]
    assert ties.compared(adam, muon).what == ties.TIME and ties.compared(adam, sgd).what == ties.VALUE
    # on the measured clock (no classes) the same steps stay a tie on time, as before
    wall = [dataclasses.replace(s, cost_class=None) for s in (muon, sgd, adam)]
    assert [s.name for s in ties.strict_order(wall)] == ["muon", "adam", "sgd"]


def test_a_gap_smaller_than_a_dispatchs_host_work_is_no_disagreement():
    """The case seen: a 32-wide MNIST-1D MLP measured 0.0229 ms of CPU a step while its 50-step
    dispatches took 0.0463 ms a step: 1.2 ms apart per dispatch, the dispatch's own host work; it
    was flagged † on every trial. Under ``DISPATCH_SLACK_MS`` (2 ms) per dispatch it is not a
    disagreement; the same ratio on a 20x larger step still is."""
    assert P.DISPATCH_SLACK_MS == 2.0
    tiny = P.TrainClock(0.0148, 200, 1, [0.0463e-3] * 4, [0.0463e-3] * 4)
    assert P.clock_disagreement(0.0229, tiny, cpu=True) == ""
    big = P.TrainClock(0.296, 200, 1, [0.926e-3] * 4, [0.926e-3] * 4)
    assert P.clock_disagreement(0.458, big, cpu=True).startswith(
        "step CPU time 0.458 ms measured, the training clock's CPU time says 0.926 ms per step (fastest "
        "of 3 dispatches;")


def test_on_a_cpu_figures_are_charged_in_powers_of_two_of_the_cheapest_class():
    """``cost_classes(grid=2)``: each class (chained at RESOLUTION) is charged the cheapest class's
    figure × 2^k, k the nearest whole number to log2 of its ratio (a midpoint rounds up); on an
    accelerator (device time) figures are charged as measured."""
    from harness.core.clock import CPU_GRID, cost_grid

    assert CPU_GRID == 2.0
    assert cost_grid("cpu:cpu") == 2.0 and cost_grid("") == 2.0 and cost_grid(None) == 2.0
    assert cost_grid("gpu:NVIDIA H100 80GB HBM3") is None
    got = cost_classes([0.1, 0.102, 0.1755, 0.345, 0.7], grid=2.0)
    # classes: {0.1, 0.102} (common 0.101), 0.1755 (1.74x: 2^1), 0.345 (3.42x: 2^2), 0.7 (6.9x: 2^3)
    assert got == {0.1: 0.101, 0.102: 0.101, 0.1755: 0.202, 0.345: 0.404, 0.7: 0.808}
    # 1.41x rounds down, 1.42x up (the midpoint is sqrt(2) = 1.4142); both classes of 1.0x
    assert cost_classes([1.0, 1.41], grid=2.0) == {1.0: 1.0, 1.41: 1.0}
    assert cost_classes([1.0, 1.42], grid=2.0) == {1.0: 1.0, 1.42: 2.0}


def test_a_busy_machines_drift_of_a_cpu_figure_moves_no_rank():
    """The figures and steps of the MNIST-1D race of tests/test_verdict_busy.py as two real runs
    stored them, quiet and at load 16 (4 burners beside other work): the same steps to the bit,
    each figure 20-60% higher under load, muon's ratio to the elementwise optimizers' class 3.45x
    then 3.73x. Ranked on the figures as measured (chained classes) the quiet run read momentum
    "2=" and muon "2=", the busy one "2" and "3"; charged in powers of 2 both read the same."""
    from harness.core.outcome import TrialOutcome
    from harness.sweep.summary import ranked_rows

    steps = {"adafactor": (650, 750), "adam": (200, 200), "lion": (750, 850), "momentum": (250, 350),
             "muon": (100, 150), "sgd": (650, 700)}
    quiet = {"adafactor": 0.173767, "adam": 0.100299, "lion": 0.102124, "momentum": 0.090408,
             "muon": 0.344825, "sgd": 0.099885}
    busy = {"adafactor": 0.235518, "adam": 0.133893, "lion": 0.131236, "momentum": 0.144868,
            "muon": 0.494392, "sgd": 0.124532}

    def labels(figures: dict[str, float], kind: str) -> list[tuple[str, str]]:
        outcomes = []
        for opt, ms in figures.items():
            for seed, n in enumerate(steps[opt]):
                outcomes.append(TrialOutcome(
                    trial_id=f"{opt}{seed}", status="finished", model="mlp", optimizer=opt,
                    dataset="mnist1d", seed=seed, config=opt, final_valid_accuracy=0.6,
                    steps_to_target=n, seconds_to_target=n * ms / 1e3, modeled_step_ms=ms,
                    modeled_seconds_to_target=n * ms / 1e3,
                    device_kind=kind))
        return [(r["optimizer"], r["label"]) for r in ranked_rows(outcomes)]

    want = [("adam", "1"), ("momentum", "2"), ("muon", "3"), ("sgd", "4"), ("lion", "5"),
            ("adafactor", "6")]
    assert labels(quiet, "cpu:cpu") == labels(busy, "cpu:cpu") == want
    # as measured (an accelerator's rule), the drift moved ranks: what the grid is for
    assert labels(quiet, "gpu:x")[1:3] == [("momentum", "2="), ("muon", "2=")]
    assert labels(busy, "gpu:x")[1:3] == [("momentum", "2"), ("muon", "3")]
