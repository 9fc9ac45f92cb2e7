"""The rank clock's pieces, exactly.

CPU time that other Python threads of the process spend is not the step's; a figure carries its
interval from its rounds, and the rank rule carries it; a figure that disagrees with its training
clock is re-measured beside its task's programs and put into the interleaved stage's frame; a later
trial of a program carries the figure the first one settled.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest

from harness.core.clock import cost_class_of, cost_range
from harness.core.spec import PerfResult
from harness.train import cpu_clock, rounds
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


def test_a_figure_and_its_interval_come_from_its_rounds():
    """Order statistics give the median's 95% interval (30 values: the 10th and 21st, 96% coverage;
    under 6 values, the range); several programs timed in the same rounds are divided by each round's
    load (the geometric mean), so a load that doubles a whole round moves no figure, and a program
    whose share scatters from round to round gets a wider interval."""
    assert rounds.median_interval(list(range(30))) == (9.0, 20.0)
    assert rounds.median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)
    assert rounds.median_interval(list(range(6))) == (0.0, 5.0)  # k = 1: 1 - 2/64 = 96.9%
    assert rounds.median_interval(list(range(8))) == (0.0, 7.0)  # k = 2 would be 93.0%
    assert rounds.median_interval(list(range(9))) == (1.0, 7.0)  # k = 2: 96.1%
    with pytest.raises(ValueError, match="no values"):
        rounds.median_interval([])
    # round 2 twice as loaded for both: no scatter, exact figures 1 and 2 (median load sqrt 2)
    got = rounds.round_figures([[1.0, 2.0, 1.0, 1.0, 1.0, 1.0], [2.0, 4.0, 2.0, 2.0, 2.0, 2.0]])
    assert [tuple(round(x, 12) for x in f) for f in got] == [(1.0, 1.0, 1.0), (2.0, 2.0, 2.0)]
    # b's ratio to a scatters 0.8x-1.2x around 2 (6 rounds: the interval is the range): each
    # program carries half of it (the load includes both), and the ratio's interval that the rank
    # rule forms from the two, [lo_b / hi_a, hi_b / lo_a], is the whole scatter
    a = [1.0] * 6
    b = [2.0, 2.4, 1.6, 2.2, 1.8, 2.0]
    (fa, la, ha), (fb, lb, hb) = rounds.round_figures([a, b])
    assert fb / fa == pytest.approx(2.0)
    assert (lb / fb, hb / fb) == pytest.approx((0.8 ** 0.5, 1.2 ** 0.5))
    assert (lb / fb) / (ha / fa) == pytest.approx(0.8) and (hb / fb) / (la / fa) == pytest.approx(1.2)
    assert rounds.round_figures([[3.0, 1.0, 2.0]]) == [(2.0, 1.0, 3.0)]  # one program: as timed


def test_the_cost_a_trial_ranks_at_and_its_interval():
    """The modeled clock ranks at the figure as measured (no classes, no powers of 2) with its
    interval relative to it; the cost clock per step, exact; the measured clock, none."""
    assert cost_class_of("modeled", 0.1755, None, 50) == 0.1755
    assert cost_class_of("cost", None, 0.004, 200) == 0.02 and cost_class_of("measured", 0.2, 1.0, 5) is None
    assert cost_range("modeled", 2.0, 1.9, 2.2) == pytest.approx((0.95, 1.1))
    assert cost_range("modeled", 2.0, None, 2.2) is None and cost_range("cost", 2.0, 1.9, 2.2) is None


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
    from reports.frame import load_frame, summaries
    from reports.report_clock import clock_note, clock_of, use_clock

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
    per_flop = per_step / s[N.M_FLOPS]  # each program's own count, one peak for all
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
    from harness.orchestrate.run import run_sweep

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


def test_a_tie_of_the_seeds_is_not_called_a_tie_of_the_step_cost():
    """momentum and sgd at the same per-step cost interval, their per-seed times of mixed signs: the
    seeds tie them as measured, and at the interval's worst end the mean difference turns; the words
    say no seed count separates, without calling it the step cost's tie."""
    from harness.core import ties

    def standing(name, steps, ms):
        return ties.Standing(name=name, reached=6, finished=6, median_steps=float(np.median(steps)),
                             seconds={i: s * ms / 1e3 for i, s in enumerate(steps)},
                             values=dict.fromkeys(range(6), 0.9), cost_class=ms, cost_range=(0.9, 1.1))

    momentum = standing("momentum", [60, 60, 70, 60, 80, 80], 0.0240)
    sgd = standing("sgd", [60, 80, 70, 60, 100, 110], 0.0200)
    assert ties.tie_cause(momentum, sgd) == "seeds"
    sep = ties.separation(momentum, sgd)
    assert sep.cause == "seeds" and sep.seeds is None
    assert sep.words == "no seed count separates (the step times' 95% intervals cover the difference)"


def test_equal_steps_at_different_costs_are_compared_on_time_over_the_cost_interval():
    """muon (a 4x figure) and adam reach the target at the same evaluation: compared on time, muon
    second. sgd's and adam's figures (0.055 and 0.059 ms) are 7% apart, but their intervals (±5%)
    overlap: at the ends of the cost ratio's interval the order reverses, so they tie, by the cost.
    Without intervals (a run from before them) the 7% separate them."""
    from harness.core import ties

    def standing(name, steps, ms, value, rng=(0.95, 1.05)):
        return ties.Standing(name=name, reached=2, finished=2, median_steps=steps,
                             seconds={0: steps * ms / 1e3, 1: steps * ms / 1e3}, values={0: value, 1: value},
                             cost_class=ms, cost_range=rng)

    adam = standing("adam", 50, 0.059, 0.97)
    sgd = standing("sgd", 50, 0.055, 0.96)
    muon = standing("muon", 50, 0.217, 0.99)
    order = ties.strict_order([muon, sgd, adam])
    assert [s.name for s in order] == ["sgd", "adam", "muon"]
    assert [lab for _, lab in ties.tie_labels(ties.share_ranks(order)).values()] == ["1=", "1=", "3"]
    assert ties.compared(adam, muon).what == ties.TIME and ties.tie_cause(sgd, adam) == "cost"
    sep = ties.separation(sgd, adam)
    assert sep.cause == "cost" and sep.seeds is None and sep.words == (
        "tied by the step cost: no seed count separates (the step times' 95% intervals cover the difference)")
    exact = [dataclasses.replace(s, cost_range=None) for s in order]
    assert [lab for _, lab in ties.tie_labels(ties.share_ranks(exact)).values()] == ["1", "2", "3"]
    # on the measured clock (no per-step cost) the same steps stay a tie on time, by the metric
    wall = [dataclasses.replace(s, cost_class=None, cost_range=None) for s in (muon, sgd, adam)]
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


def test_the_reviews_race_is_not_separated_where_the_cost_interval_covers_it():
    """The review's case rebuilt: sgd, adafactor, soap and muon at the review's measured per-step cost
    ratios to sgd (1.27x, 8.3x, 10.3x), six seeds whose steps to the target put the time
    differences where the review found them (adafactor - sgd a few hundredths of a second, muon
    beside sgd). Charged as the old grid did (adafactor 1x, soap and muon 8x) the rule separated
    every pair and put adafactor and muon ahead of sgd. Charged as measured, each figure within
    ±3% (two measurements of the review agreed within 2-5%): adafactor/sgd, adafactor/soap and
    muon/sgd are not separated, and adafactor is never strictly ahead of sgd."""
    from harness.core import ties

    steps = {"sgd": [650, 700, 600, 750, 650, 700], "adafactor": [450, 700, 500, 800, 550, 600],
             "soap": [100, 100, 80, 110, 90, 100], "muon": [60, 70, 60, 80, 60, 70]}

    def race(charge: dict[str, float], rng) -> dict[str, ties.Standing]:
        out = {}
        for name, n in steps.items():
            ms = 0.4 * charge[name]
            mid = sorted(n)[2:4]
            out[name] = ties.Standing(name=name, reached=6, finished=6, median_steps=(mid[0] + mid[1]) / 2,
                                      seconds={i: k * ms / 1e3 for i, k in enumerate(n)},
                                      values=dict.fromkeys(range(6), 0.6), cost_class=ms, cost_range=rng)
        return out

    def labels(st: dict[str, ties.Standing]) -> list[tuple[str, str]]:
        order = ties.strict_order(list(st.values()))
        lab = ties.tie_labels(ties.share_ranks(order), order)
        return [(order[i].name, lab[i][1]) for i in range(len(order))]

    grid = race({"sgd": 1.0, "adafactor": 1.0, "soap": 8.0, "muon": 8.0}, None)
    assert labels(grid) == [("muon", "1"), ("adafactor", "2"), ("sgd", "3"), ("soap", "4")]
    assert not ties.tied(grid["adafactor"], grid["sgd"]) and not ties.tied(grid["muon"], grid["sgd"])
    now = race({"sgd": 1.0, "adafactor": 1.27, "soap": 8.3, "muon": 10.3}, (0.97, 1.03))
    for a, b in (("adafactor", "sgd"), ("adafactor", "soap"), ("muon", "sgd")):
        assert ties.tied(now[a], now[b]), (a, b)
    assert ties.tie_cause(now["adafactor"], now["sgd"]) == "cost"  # told apart as measured, not over ±3%
    order = [n for n, _ in labels(now)]
    assert order.index("sgd") < order.index("adafactor")
    assert [lab for _, lab in labels(now)] == ["1=", "1=", "1=", "1="]
    sep = ties.separation(now["sgd"], now["adafactor"])
    assert sep.cause == "cost" and sep.words.startswith("tied by the step cost: ")


def test_report_help_states_the_clock_as_it_is():
    """``report --help`` said the modeled clock charged figures "in powers of 2 of the task's cheapest
    program" after that rounding was removed: it states the measured median and its interval."""
    from harness.cli import report_cmd

    text = " ".join(report_cmd.TIME.help.split())
    assert "powers of 2" not in text
    assert "median of at least 10 interleaved rounds with its 95% interval" in text
