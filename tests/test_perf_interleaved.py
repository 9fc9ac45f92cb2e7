"""One step time per (program, device), measured interleaved before the sweep trains.

The sweep's programs are timed round by round (each round a block of calls of every program in turn,
on the real compiled chunks the trainer dispatches), their figures fill the perf cache, and a unit
then finds its figure instead of timing its program again.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from mlflow.tracking import MlflowClient

from harness.core import names as N
from harness.train import perf as P
from harness.train import timing
from tests.conftest import make_spec


def test_time_rounds_times_programs_round_by_round():
    """Three real compiled executables: two warm-up calls each (untimed, not in the order), then
    rounds of ``block`` calls of each program in turn, at least ``min_rounds`` rounds; every call's
    seconds kept per program; the state output feeds the next call."""
    x = jnp.ones(8)
    exes = [jax.jit(lambda a, c=c: a * 1.0 + c).lower(x).compile() for c in (1.0, 2.0, 3.0)]
    order: list[int] = []
    times, outs, cpu = timing.time_rounds([timing.Timed(e, (x,), lambda out, a: (out,)) for e in exes],
                                          block=2, warmup=2, max_spread=None, min_rounds=3, max_rounds=3,
                                          max_seconds=60.0, on_call=order.append)
    assert order == [0, 0, 1, 1, 2, 2] * 3
    assert [len(t) for t in times] == [6, 6, 6] and all(s > 0 for t in times for s in t)
    assert [len(c) for c in cpu] == [3, 3, 3] and all(c >= 0 for b in cpu for c in b)  # one per block
    # 2 warm-ups + 6 timed calls, each adding its constant to the previous output
    assert [float(o[0]) for o in outs] == [1.0 + 8 * 1.0, 1.0 + 8 * 2.0, 1.0 + 8 * 3.0]
    with pytest.raises(ValueError, match="block must be >= 1 and programs not empty, got 0, 3"):
        timing.time_rounds([timing.Timed(e, (x,), lambda o, a: a) for e in exes], block=0, warmup=0,
                           max_spread=None, max_rounds=1, max_seconds=1.0)


def test_time_rounds_stops_at_its_bound():
    """A spread that can never be small enough (``max_spread=-1``) stops at ``max_rounds``, or at
    ``min_rounds`` once ``max_seconds`` passed."""
    x = jnp.ones(4)
    exe = jax.jit(lambda a: a + 1).lower(x).compile()
    order: list[int] = []
    times, _, _ = timing.time_rounds([timing.Timed(exe, (x,), lambda o, a: a)] * 2, block=1, warmup=0,
                                     max_spread=-1.0, max_rounds=5, max_seconds=60.0, on_call=order.append)
    assert order == [0, 1] * 5 and [len(t) for t in times] == [5, 5]
    # the time bound never cuts the rounds short of min_rounds (slow programs had one round, so
    # their figure's interval was a single value, as if exact)
    times, _, _ = timing.time_rounds([timing.Timed(exe, (x,), lambda o, a: a)] * 2, block=1, warmup=0,
                                     max_spread=-1.0, min_rounds=3, max_rounds=5, max_seconds=0.0)
    assert [len(t) for t in times] == [3, 3]


def test_measure_interleaved_times_the_trainers_chunks_in_turn(monkeypatch):
    """Two real programs (sgd, adam on the digits MLP; adam twice under two step sizes, one perf
    key): their compiled K-step chunks are timed in turn, block by block, each round in its own
    shuffled order, for at least 10 rounds; the
    perf cache holds one figure per key; the chunk timed is the one the trainer's ``get_chunk``
    returns (compiled once, cached in the program)."""
    from harness.data.sources import load_dataset
    from harness.train.program import program_for

    specs = [make_spec(optimizer="sgd", optimizer_hparams={"step_size": 0.1}),
             make_spec(optimizer="adam", optimizer_hparams={"step_size": 0.01}),
             make_spec(optimizer="adam", optimizer_hparams={"step_size": 0.001})]
    ds = load_dataset("digits")
    progs = [(program_for(s, ds), s) for s in specs]
    order: list[int] = []
    real = timing.time_rounds
    seen = {}

    def spy(programs, **kw):
        seen.update(kw, compiled=[p.compiled for p in programs])
        return real(programs, **kw, on_call=order.append)

    monkeypatch.setattr(timing, "time_rounds", spy)
    cache: dict = {}
    out = P.measure_interleaved(progs, cache)
    assert set(out) == set(cache) == {P.perf_cache_key(specs[0]), P.perf_cache_key(specs[1])}
    assert P.perf_cache_key(specs[1]) == P.perf_cache_key(specs[2])
    block, rounds = seen["block"], len(order) // (2 * seen["block"])
    assert block == 2 and rounds >= P.MIN_ROUNDS == 10 and len(order) == 4 * rounds  # K = 10: ceil(8 / 10)
    each = [order[4 * r:4 * r + 4] for r in range(rounds)]  # every round a block of each, in its own order
    assert {tuple(o) for o in each} == {(0, 0, 1, 1), (1, 1, 0, 0)}
    assert seen["shuffle"] is True
    for (prog, s), exe in zip(progs[:2], seen["compiled"], strict=True):
        assert prog.compiled[(None, 10, None)] is exe  # what training dispatches
        r = cache[P.perf_cache_key(s)]
        assert r.step_time_ms > 0 and r.timed_steps == 10 * block * rounds and r.warmup_steps == 20
        assert 0 < r.modeled_step_ms_lo <= r.modeled_step_ms <= r.modeled_step_ms_hi  # from its rounds
        assert r.flops_per_step and r.flops_per_step > 0
    assert P.measure_interleaved(progs, cache) == {}  # measured already: nothing again


def test_the_sweep_measures_first_and_its_units_do_not_time_again(tmp_path, write_sweep, tracking_uri,
                                                                   monkeypatch):
    """A real two-optimizer sweep: one interleaved measurement of both programs happens before the
    first unit trains, no unit times its program alone (the clock check is switched off, so a
    figure disagreeing with a busy machine's training clock is not re-measured), every trial's
    logged step time is the stage's figure, and the parent's time budget holds the stage (its
    timing as ``throughput``, its compiles as ``compile``)."""
    from harness.execute import training
    from harness.orchestrate.run import run_sweep
    from harness.train import loop

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(P, "CLOCK_FACTOR", float("inf"))
    monkeypatch.setattr(training, "PERF_CACHE", {})
    events: list[str] = []
    measured: dict = {}
    real_inter, real_train, real_alone = P.measure_interleaved, loop._train, P._measure

    def inter(programs, cache, *a, **kw):  # (the training steps that bound it, its progress)
        events.append(f"interleaved {len(programs)}")
        out = real_inter(programs, cache, *a, **kw)
        measured.update(out)
        return out

    def train(specs, *a, **kw):
        events.append("train")
        return real_train(specs, *a, **kw)

    def alone(prog, spec):
        events.append("alone")
        return real_alone(prog, spec)

    monkeypatch.setattr(P, "measure_interleaved", inter)
    monkeypatch.setattr(loop, "_train", train)
    monkeypatch.setattr(P, "_measure", alone)
    opts = [{"name": "sgd", "hparams": {"step_size": 0.1}}, {"name": "adam", "hparams": {"step_size": 0.01}}]
    run_sweep(write_sweep(name="first", optimizers=opts, seeds=[0], measure_perf=True, batching="off"),
              tracking_uri=tracking_uri, quiet=True)
    assert events == ["interleaved 2", "train", "train"]
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name("first")
    trials = c.search_runs([exp.experiment_id], "tags.`harness.kind` = 'trial'")
    by_opt = {r.data.params["optimizer"]: r.data.metrics[N.M_STEP_MS] for r in trials}
    assert sorted(by_opt.values()) == sorted(p.step_time_ms for p in measured.values())
    stored = sorted((r.data.metrics[N.M_MODELED_STEP_MS_LO], r.data.metrics[N.M_MODELED_STEP_MS],
                     r.data.metrics[N.M_MODELED_STEP_MS_HI]) for r in trials)  # the interval, stored
    assert stored == sorted((p.modeled_step_ms_lo, p.modeled_step_ms, p.modeled_step_ms_hi)
                            for p in measured.values())
    (parent,) = c.search_runs([exp.experiment_id], "tags.`harness.kind` = 'parent'")
    # the stage's timing is throughput; its compiles (the chunks training reuses) are compile
    stage_compile = sum(p.compile_s for p in measured.values())
    assert parent.data.metrics[N.M_TIME_THROUGHPUT_S] > 0 and stage_compile > 0
    assert parent.data.metrics[N.M_TIME_COMPILE_S] >= stage_compile


def test_the_flop_count_needs_no_second_compile(monkeypatch):
    """FLOPs without a second compile: once the trainer's chunk is compiled, timing
    the step compiles nothing; its FLOPs come from the lowered one-step program, within the
    factor-2 cross-check of the analytic count and within 1% of what the compiled one-step program
    counts for the digits MLP (0.5% below it)."""
    from harness.data.sources import load_dataset
    from harness.train.program import program_for

    spec = make_spec(optimizer="sgd", optimizer_hparams={"step_size": 0.1})
    prog = program_for(spec, load_dataset("digits"))
    P._chunk_job(prog, spec)  # the chunk compiled, as training leaves it
    compiles: list[object] = []
    real = jax.stages.Lowered.compile

    def counting(self, *a, **kw):
        compiles.append(self)
        return real(self, *a, **kw)

    monkeypatch.setattr(jax.stages.Lowered, "compile", counting)
    r = P._measure(prog, spec)
    assert compiles == []
    state = P._init_state(prog, spec)
    e = prog.entry
    compiled = real(jax.jit(prog.one_step).lower(state, e.x_train[:32], e.y_train[:32], jnp.int32(0)))
    assert r.flops_per_step == pytest.approx(timing.cost_flops(compiled), rel=0.01)
    assert timing.flops_agree(r.flops_per_step, r.flops_per_step_analytic)



def test_the_timings_cost_is_bounded_by_a_share_of_the_training_it_serves():
    """Rounds that would cost more than ``TIMING_SHARE`` of the programs' training are cut to one
    call per round, at least ``FLOOR_ROUNDS`` (hand-computed: 6 programs of 0.1 s per call, 32
    training calls each: 10 rounds of 2 calls cost 12 s, the bound is 0.2 × 19.2 s = 3.84 s, 6
    rounds of 1 call cost 3.6 s); a timing within its bound keeps its rounds, its extra time capped
    by what is left of the bound. ``time_rounds`` takes the plan after its warm-up calls and says
    each round's end with the rounds it may still take and their seconds."""
    from harness.train.rounds import FLOOR_ROUNDS, TIMING_SHARE, bounded_rounds, rounds_left

    assert (TIMING_SHARE, FLOOR_ROUNDS) == (0.2, 6)
    assert bounded_rounds([0.1] * 6, [32] * 6, 2, 10, 8.0) == (1, 6, 0.0, True)
    assert bounded_rounds([0.1] * 6, [64] * 6, 2, 10, 8.0) == (1, 10, 0.0, True)  # 7.68 s: 12 rounds of 1 fit
    assert bounded_rounds([0.1] * 6, [32] * 6, 2, 10, 8.0, share=1.0) == pytest.approx((2, 10, 7.2, False))
    assert rounds_left(3, 1.5, 10, 40, 8.0) == (16, 6.5)  # 0.5 s a round: 8 s allow 16
    assert rounds_left(12, 6.0, 10, 40, 0.0) == (12, 0.0)

    x = jnp.ones(8)
    exes = [jax.jit(lambda a, c=c: a + c).lower(x).compile() for c in (1.0, 2.0)]
    warm, seen = [], []

    def plan(call_s):
        warm.append(call_s)
        return 1, 3, 0.0, True

    times, _, cpu = timing.time_rounds([timing.Timed(e, (x,), lambda out, a: (out,)) for e in exes],
                                       block=4, warmup=2, max_spread=None, min_rounds=10, max_rounds=40,
                                       max_seconds=60.0, plan=plan, on_round=lambda *a: seen.append(a))
    assert len(warm) == 1 and len(warm[0]) == 2 and all(c > 0 for c in warm[0])
    assert [len(t) for t in times] == [3, 3] and [len(c) for c in cpu] == [3, 3]  # 3 rounds of 1 call
    assert [(d, n) for d, n, _ in seen] == [(1, 3), (2, 3), (3, 3)] and seen[-1][2] == 0.0


def test_a_bounded_timing_is_stated_in_the_summarys_time_line(monkeypatch):
    from harness.execute.training import timing_note
    from harness.orchestrate.summary import SweepSummary

    monkeypatch.setattr(P, "LAST_TIMING", {"bounded": True, "rounds": 6, "programs": 6, "seconds": 3.1})
    assert timing_note() == "timing: 6 rounds (20% bound)"
    s = SweepSummary("q", "id", "1", "p", "sqlite:///x.db", [], 10.0,
                     budget={"train": 6.0, "throughput": 4.0}, budget_wall_s=10.0, timing=timing_note())
    assert s.budget_line() == "time 10.0 s: train 60%, throughput 40%; timing: 6 rounds (20% bound)"
    monkeypatch.setattr(P, "LAST_TIMING", {"bounded": False, "rounds": 10})
    assert timing_note() == ""
