"""The throughput of a trial's training step, measured once per distinct step and device.

:func:`measure_trial_perf` times the single-trial training dispatch of a
:class:`~harness.train.program.TrainingProgram` (its compiled chunk of ``K = steps_per_dispatch``
steps, batches gathered from the training split on the device, as the trainer runs it, the very
executable ``prog.get_chunk`` returns to training; per-step time = call time / K) with
:func:`harness.train.timing.measure` (state donated), once per :func:`perf_cache_key` through a
``perf_cache`` dict that the caller keeps. Its FLOPs per step come from the cost analysis of the
one-step function **lowered, not compiled** (XLA counts a scan's body once, so the chunk's own count
would not do): for the zoo's models the lowered count is 0.5–9.4% below the compiled one's (the
optimised program fuses and rewrites), well inside the factor-2 cross-check against the analytic
count, and it saves a compile (docs/decisions.md).

**Interleaved, before training** (:func:`measure_interleaved`, the sweep's in-process stage):
the sweep's distinct one-device programs are timed round by round, each round a block of calls of
every program in turn (:func:`harness.train.timing.time_rounds`), until each program's spread is at
most :data:`MAX_SPREAD` or a bound (:func:`interleave_bounds`), the median per program going into
the ``perf_cache`` that the trainer reads. A load that comes and goes during the measurement then
slows every program alike, and their ratios, which decide ranks on the modeled clock, hold.

The chunk is timed, not one step per dispatch, which would count a host dispatch per step that
training pays once per K steps. On D > 1 devices the sharded
one-step function is timed (compiled, with XLA's convolution: nothing loops in it;
:func:`one_step_executable`), when the unit trains:
``shard: batch``: one step of the B-example batch split over the mesh, state replicated
(examples/s = B / step time); ``shard: trials``: one vmapped step of D trials (one per device,
copies of this trial), state split along the trial axis (examples/s = D·B / step time). FLOPs,
peak and utilisation are for the whole mesh. FLOPs are cross-checked against
``3 × flops_per_example × batch_size``.

**Checked against the trial's own clock.** The timed block is repeated until its spread (IQR /
median) is at most :data:`MAX_SPREAD` or a bound is hit (:func:`harness.train.timing.measure`'s
``max_spread``). The trainer passes its training clock (:class:`TrainClock`: wall seconds of
training dispatches, compile and evaluation excluded; steps trained; the vmapped width ``T``; the
wall and CPU seconds per step of each dispatch). The figure the modeled clock ranks on
(``modeled_step_ms``: CPU time per step on a CPU device, :mod:`harness.train.timing` item 7) is
checked against the clock of the same kind: one step of this trial alone should take between the
fastest dispatch's per-step figure / T and the median dispatch's. A figure outside
``[fastest/T / CLOCK_FACTOR, median × CLOCK_FACTOR]`` (:func:`clock_disagreement`) is **measured
again, interleaved with its task's other programs** (:func:`remeasure_in_task`: at most
:data:`REMEASURES` times, until it agrees or two consecutive figures are within
:data:`STABLE_TOL`), its new figure put into the interleaved stage's frame through those peers. A
figure that still disagrees is flagged: ``suspect`` = the reason with both figures (the tag
``perf.suspect``; reports draw it hatched and mark the row), and the trial **still ranks on it**,
never on its wall-clock. The first trial of a program settles its figure; later ones carry the same
(``checked``), flagged when their own clock disagrees. A measurement taken under load
(:func:`clock_disagreement`'s example) is what this catches.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp

from harness.core.spec import PerfResult, TrialSpec
from harness.data.sources import load_dataset
from harness.train import parallel, timing
from harness.train.build import trial_step_size
from harness.train.program import TrainingProgram, program_for
from harness.train.rounds import bounded_rounds
from models import stax

__all__ = ["CLOCK_FACTOR", "DISPATCH_SLACK_MS", "LAST_TIMING", "MAX_SPREAD", "REMEASURES", "STABLE_TOL",
           "TrainClock", "clock_disagreement", "interleave_bounds", "measure_interleaved",
           "measure_trial_perf", "perf_cache_key", "remeasure_in_task", "task_key", "untimed_perf"]

#: The timed block is repeated until IQR / median of the timed calls is at most this (or a bound).
MAX_SPREAD = 0.1
#: A step time and the trial's training clock that differ by more than this factor disagree ...
CLOCK_FACTOR = 2.0
#: ... and by more than this many ms per dispatch: a smaller gap is the dispatch's own host work
#: (its call, the batch-order program, the losses copied back), which a tiny step cannot hide.
DISPATCH_SLACK_MS = 2.0
#: Untimed calls of each program before its timed ones.
WARMUP = 2
#: An interleaved measurement times at least this many rounds (:func:`interleave_bounds`).
MIN_ROUNDS = 10
#: At most this many re-measurements of a figure that disagrees with its training clock.
REMEASURES = 3
#: Two consecutive re-measured figures within this relative difference are stable.
STABLE_TOL = 0.1

#: task (:func:`task_key`) → {perf key: a spec of that program}: the programs the interleaved stage
#: measured together, so that a re-measure can time a program beside its task's others again.
_PEERS: dict[tuple, dict[tuple, TrialSpec]] = {}
#: The last interleaved timing (:func:`measure_interleaved`): ``rounds``, ``programs``,
#: ``seconds``, and ``bounded`` when its cost bound cut its rounds (the sweep's time line says so).
LAST_TIMING: dict = {}


def _num_devices(spec: TrialSpec) -> int:
    """The device count ``spec.devices`` resolves to here (the raw value if it cannot resolve)."""
    if spec.devices == 1:
        return 1
    try:
        return parallel.resolve_devices(spec.devices)
    except ValueError:
        return spec.devices  # type: ignore[return-value]


def perf_cache_key(spec: TrialSpec) -> tuple:
    """The key of ``spec``'s throughput in a ``perf_cache``: ``(spec.perf_key(), device kind, the
    steps per timed dispatch)``, plus the resolved device count for a multi-device trial
    (``devices: all`` depends on the process)."""
    n = _num_devices(spec)
    k = ("steps_per_dispatch", max(1, min(spec.steps_per_dispatch, spec.steps)))  # what is timed
    return (spec.perf_key(), timing.device_kind(), k) + ((n,) if n != 1 else ())


def _analytic_flops(prog: TrainingProgram) -> float | None:
    """``3 × flops_per_example × batch_size`` when the model has an analytic count, else ``None``."""
    entry = prog.entry
    fpe = None
    fpe_fn = getattr(entry.model, "flops_per_example", None)
    if fpe_fn is not None:
        try:
            fpe = fpe_fn(entry.input_shape)
        except Exception:  # an analytic count is optional
            fpe = None
    return 3.0 * float(fpe) * prog.batch_size if fpe else None


class TrainClock(NamedTuple):
    """A unit's own training clock: ``seconds`` of training dispatches (compile and evaluation
    excluded) for ``steps`` steps of ``width`` vmapped trials, and the seconds per step of each
    dispatch (``dispatch_step_s``; when given, their median is the clock's time per step, so that
    one dispatch slowed by something else on the machine does not decide, the first left out when
    there are more (it pays first-touch allocation); else seconds / steps)."""

    seconds: float
    steps: int
    width: int = 1
    dispatch_step_s: Sequence[float] = ()
    #: CPU seconds per step of each dispatch (:func:`harness.train.timing.work_cpu_s`), which a
    #: CPU figure (``modeled_step_ms`` on a CPU device) is checked against
    dispatch_cpu_s: Sequence[float] = ()


def clock_disagreement(step_time_ms: float, train_clock: TrainClock | tuple | None, *,
                       cpu: bool = False) -> str:
    """Why ``step_time_ms`` (one step of one trial) cannot be right given the unit's training clock
    (:class:`TrainClock`, module docstring), or ``""`` when it can (or the clock says nothing: no
    steps, no time). With ``cpu`` the figure is CPU time per step and is checked against the
    clock's CPU seconds per dispatch (``dispatch_cpu_s``; without them, the wall-clock ones). Too
    slow: above ``CLOCK_FACTOR`` × the clock's typical (median) dispatch per step. Too fast: below
    the clock's *fastest* dispatch per step / ``width`` / ``CLOCK_FACTOR`` (a dispatch can be slowed
    by other work in the process, e.g. the background MLflow writer, but no step runs faster than
    its cost). Either way only when the two differ by :data:`DISPATCH_SLACK_MS` or more per
    dispatch (steps / dispatches × the per-step gap): less is one dispatch's host work. Example:
    ``clock_disagreement(10.4, TrainClock(6.5, 5000))`` is ``"step time 10.4 ms measured, the
    training clock says 1.3 ms per step (6.5 s / 5000 steps): they differ by more than 2x"``."""
    if not train_clock:
        return ""
    clock = TrainClock(*train_clock)
    seconds, steps, width = clock.seconds, clock.steps, clock.width
    if steps <= 0 or seconds <= 0 or not step_time_ms > 0:
        return ""
    on_cpu = cpu and len(clock.dispatch_cpu_s) > 0
    per_dispatch = list(clock.dispatch_cpu_s if on_cpu else clock.dispatch_step_s)
    k = steps / len(per_dispatch) if per_dispatch else steps  # steps per dispatch
    per_dispatch = per_dispatch[1:] if len(per_dispatch) > 1 else per_dispatch  # warm-up
    typical_ms = statistics.median(per_dispatch) * 1e3 if per_dispatch else seconds * 1e3 / steps
    fastest_ms = min(per_dispatch) * 1e3 if per_dispatch else typical_ms
    n = len(per_dispatch)
    if step_time_ms > typical_ms * CLOCK_FACTOR:
        clock_ms, how = typical_ms, f"median of {n} dispatch{'' if n == 1 else 'es'}; " if n else ""
        gap_ms = (step_time_ms - typical_ms) * k
    elif step_time_ms < fastest_ms / max(width, 1) / CLOCK_FACTOR:
        clock_ms, how = fastest_ms, f"fastest of {n} dispatch{'' if n == 1 else 'es'}; " if n else ""
        gap_ms = (fastest_ms / max(width, 1) - step_time_ms) * k
    else:
        return ""
    if gap_ms < DISPATCH_SLACK_MS:  # within one dispatch's host work
        return ""
    of = f" of {width} vmapped trials" if width > 1 else ""
    what, says = ("step CPU time", "the training clock's CPU time says") if on_cpu else \
        ("step time", "the training clock says")
    return (f"{what} {step_time_ms:.3g} ms measured, {says} {clock_ms:.3g} ms per "
            f"step{of} ({how}{seconds:.3g} s / {steps} steps): they differ by more than "
            f"{CLOCK_FACTOR:g}x")


def _figure(perf: PerfResult) -> float:
    """The per-step milliseconds the modeled clock ranks ``perf``'s program on."""
    return perf.modeled_step_ms if perf.modeled_step_ms is not None else perf.step_time_ms


def _scaled(ms: float | None, scale: float) -> float | None:
    return None if ms is None else ms * scale


def _disagreement(perf: PerfResult, train_clock: TrainClock | None) -> str:
    """:func:`clock_disagreement` of ``perf``'s modeled figure, CPU against CPU on a CPU device."""
    on_cpu = perf.step_cpu_ms is not None and perf.device_kind.startswith("cpu:")
    return clock_disagreement(_figure(perf), train_clock, cpu=on_cpu)


def task_key(spec: TrialSpec) -> tuple:
    """The task a program belongs to, for a re-measure beside its peers: dataset and model with their
    hyperparameters, batch size, dtype, the device kind and count."""
    return (spec.dataset, spec.dataset_hparams, spec.model, spec.model_hparams, spec.batch_size,
            spec.dtype, timing.device_kind(), _num_devices(spec))


def untimed_perf(prog: TrainingProgram, why: str) -> PerfResult:
    """The :class:`PerfResult` of a step whose timing failed (``why``: the error's first line):
    no figure (the wall-clock fields are NaN, which MLflow never logs; ``modeled_step_ms`` ``None``),
    but the model's analytic FLOPs per step (no XLA count: the step was not compiled here) and the
    device's peak, so that its task ranks on the
    deterministic cost clock (:mod:`harness.core.clock`); ``suspect`` says why."""
    try:
        peak = timing.device_peak_flops(None, prog.entry.compute_dtype)
    except Exception:  # no peak: the cost clock cannot cover the trial either
        peak = None
    nan = float("nan")
    flops = _analytic_flops(prog)
    return PerfResult(compile_s=0.0, step_time_ms=nan, step_time_ms_p10=nan, step_time_ms_p90=nan,
                      examples_per_sec=nan, flops_per_step=flops, flops_per_step_analytic=flops,
                      peak_flops=peak, device_kind=timing.device_kind(),
                      dtype=jnp.dtype(prog.entry.compute_dtype).name,
                      suspect=f"the step could not be timed ({why}): ranked on the cost clock")


def measure_trial_perf(prog: TrainingProgram, spec: TrialSpec, perf_cache: dict | None,
                       train_clock: TrainClock | None = None) -> PerfResult:
    """Throughput of ``spec``'s step (module docstring), from ``perf_cache`` when it has it (and
    stored there when measured), checked against the unit's ``train_clock`` when given.

    **One figure per program.** The first trial that carries a program's figure checks it: when
    it disagrees with that trial's clock it is measured again (:func:`remeasure_in_task`), and the
    cache keeps the result, flagged (``checked``) so that every later trial of the program carries
    the same figure: a later trial whose clock disagrees gets ``suspect`` (the reason) and keeps
    it. The trial ranks on ``modeled_step_ms`` either way (:mod:`harness.core.clock`)."""
    pkey = perf_cache_key(spec)
    perf = perf_cache.get(pkey) if perf_cache is not None else None
    if perf is None:
        try:
            perf = _measure(prog, spec)
        except Exception as e:  # the trial trained: it ranks on the cost clock, and says why
            first = str(e).splitlines()[0] if str(e) else ""
            return untimed_perf(prog, f"{type(e).__name__}: {first}"[:200])
    why = _disagreement(perf, train_clock)
    if why and not perf.checked:
        perf = remeasure_in_task(prog, spec, perf, perf_cache, train_clock)
        why = perf.suspect
    if not perf.checked or perf.suspect:  # settled once: later trials carry the very same figure
        perf = dataclasses.replace(perf, checked=True, suspect="")
    if perf_cache is not None:
        perf_cache[pkey] = perf
    return dataclasses.replace(perf, suspect=why) if why else perf


def remeasure_in_task(prog: TrainingProgram, spec: TrialSpec, perf: PerfResult, perf_cache: dict | None,
                      train_clock: TrainClock | None) -> PerfResult:
    """Measure ``spec``'s program again after its figure ``perf`` disagreed with ``train_clock``.

    The rule: up to :data:`REMEASURES` times, the program is timed **interleaved with the other
    programs of its task** that the interleaved stage measured (:func:`task_key`; those
    ``perf_cache`` still holds), and its new figure is put into that stage's frame: × the median
    over the peers of (the peer's figure in ``perf_cache`` / its new figure), so that load present
    now and not then moves nothing. A program with no peers is timed alone. It stops at the first
    figure that agrees with the clock (returned, ``remeasured``), or when two consecutive figures are
    within :data:`STABLE_TOL` of each other (stable: returned with ``suspect`` = why it still
    disagrees). After :data:`REMEASURES` unstable figures, the one of least spread is returned with
    ``suspect``. Never raises for a peer that cannot be rebuilt (it is left out)."""
    key = perf_cache_key(spec)
    peers = []
    if perf_cache is not None and _num_devices(spec) == 1:
        for k, s in _PEERS.get(task_key(spec), {}).items():
            if k == key or k not in perf_cache:
                continue
            try:
                peers.append((k, program_for(s, load_dataset(s.dataset, **s.hparams("dataset"))), s))
            except Exception:  # a peer that cannot be rebuilt here only leaves the frame smaller
                continue
    tried: list[PerfResult] = []
    why = ""
    for _ in range(REMEASURES):
        if peers:
            got = _time_together([(prog, spec)] + [(p, s) for _, p, s in peers])
            scale = statistics.median(_figure(perf_cache[k]) / _figure(g)  # type: ignore[index]
                                      for (k, _, _), g in zip(peers, got[1:], strict=True))
            new = dataclasses.replace(got[0], modeled_step_ms=_figure(got[0]) * scale, remeasured=True,
                                      modeled_step_ms_lo=_scaled(got[0].modeled_step_ms_lo, scale),
                                      modeled_step_ms_hi=_scaled(got[0].modeled_step_ms_hi, scale))
        else:
            new = dataclasses.replace(_measure(prog, spec), remeasured=True)
        why = _disagreement(new, train_clock)
        if not why:
            return new
        last = _figure(tried[-1]) if tried else None
        if last is not None and abs(_figure(new) - last) <= STABLE_TOL * max(_figure(new), last):
            how = "beside its task's programs" if peers else "alone"
            return dataclasses.replace(new, suspect=f"{why}; re-measured {len(tried) + 1} times {how}, "
                                                     f"stable at {_figure(new):.3g} ms: ranked on it")
        tried.append(new)
    best = min(tried, key=lambda p: p.spread if p.spread is not None else float("inf"))
    return dataclasses.replace(best, suspect=f"{why}; re-measured {REMEASURES} times, never stable "
                                             f"within {STABLE_TOL:.0%}: ranked on the figure of least "
                                             f"spread, {_figure(best):.3g} ms")


def _init_state(prog: TrainingProgram, spec: TrialSpec):
    """A fresh state of ``spec``'s trial (the one the timed calls start from)."""
    return prog.init_seeded(spec.seed, trial_step_size(spec, prog.opt_builder))[0]


def _chunk_job(prog: TrainingProgram, spec: TrialSpec, state=None) -> tuple[timing.Timed, dict]:
    """The single-trial K-step chunk the trainer dispatches (``prog.get_chunk``: compiled once per
    process, training reuses it), as a :class:`harness.train.timing.Timed` starting from ``state``
    (default: a fresh one), and the keywords of :func:`harness.train.timing.perf_result` for it
    (its batch, K, the analytic FLOPs and the one-step program whose cost analysis counts them:
    lowered, not compiled, see the module docstring)."""
    e = prog.entry
    state = _init_state(prog, spec) if state is None else state
    xb, yb = e.x_train[:prog.batch_size], e.y_train[:prog.batch_size]
    t0 = time.perf_counter()
    one = jax.jit(prog.one_step).lower(state, xb, yb, jnp.int32(0))  # counted, never compiled
    compile_s = time.perf_counter() - t0
    K = max(1, min(spec.steps_per_dispatch, spec.steps))
    args = (state, jnp.int32(0), jnp.asarray(e.x_train), jnp.asarray(e.y_train))
    exe, dt = prog.get_chunk(None, K, *args)
    return timing.Timed(exe, args, timing.state_carry()), {
        "batch_size": prog.batch_size, "steps_per_call": K, "analytic_flops": _analytic_flops(prog),
        "dtype": e.compute_dtype, "compile_s": compile_s + dt, "flops_of": one}


def _time_together(programs: Sequence[tuple[TrainingProgram, TrialSpec]],
                   train_steps: Sequence[float] | None = None, on_round=None) -> list[PerfResult]:
    """One interleaved measurement of one-device ``programs`` (:func:`measure_interleaved`'s
    method), uncached: their :class:`PerfResult` s in order. ``train_steps``: the steps each
    program will train, which bound the timing's cost (:func:`harness.train.rounds.bounded_rounds`)."""
    jobs = [_chunk_job(prog, spec) for prog, spec in programs]
    block, min_rounds, max_rounds, max_s = interleave_bounds([kw["steps_per_call"] for _, kw in jobs])
    on = timing.stable_figure()
    plan = None
    if train_steps is not None:
        calls = [n / kw["steps_per_call"] for n, (_, kw) in zip(train_steps, jobs, strict=True)]

        def plan(call_s: list[float]) -> tuple:
            got = bounded_rounds(call_s, calls, block, min_rounds, max_s)
            LAST_TIMING.update(bounded=got[3], block=got[0])
            return got

    LAST_TIMING.clear()
    t0 = time.perf_counter()
    times, outs, cpu = timing.time_rounds([j for j, _ in jobs], block=block, warmup=WARMUP,
                                          max_spread=MAX_SPREAD, min_rounds=min_rounds,
                                          max_rounds=max_rounds, max_seconds=max_s,
                                          stable_on=on, shuffle=True, plan=plan, on_round=on_round)
    block = LAST_TIMING.get("block", block)
    LAST_TIMING.update(rounds=len(cpu[0]), seconds=time.perf_counter() - t0, programs=len(jobs))
    series = cpu if on == "cpu" else [[statistics.fmean(t[i:i + block]) for i in range(0, len(t), block)]
                                      for t in times]
    figures = timing.round_figures(series)
    return [timing.perf_result(t, o, compiled=job.compiled, warmup=WARMUP, cpu=c,
                               figure=tuple(x * 1e3 / kw["steps_per_call"] for x in f), **kw)
            for (job, kw), t, o, c, f in zip(jobs, times, outs, cpu, figures, strict=True)]


def measure_interleaved(programs: Sequence[tuple[TrainingProgram, TrialSpec]],
                        perf_cache: dict, train_steps: dict | None = None, on_round=None) -> dict:
    """Measure the step of each ``(program, spec)`` whose :func:`perf_cache_key` ``perf_cache``
    lacks, **interleaved**: round by round, each round a block of timed calls of every program in
    turn (:func:`harness.train.timing.time_rounds`), until every program's spread (of the figure the
    modeled clock ranks on, :func:`harness.train.timing.stable_figure`) is at most
    :data:`MAX_SPREAD` or a bound (:func:`interleave_bounds`) is hit; each program's figure is the
    median of its timed calls (CPU: of its blocks), so load that comes and goes during the
    measurement slows all of them alike. Only one-device trials (a mesh's step is measured when its
    unit trains). Stores each figure in ``perf_cache``, remembers the programs of each task for a
    later re-measure (:func:`remeasure_in_task`) and returns ``{key: PerfResult}`` of what it
    measured. ``train_steps`` (``{key: steps its trials will train}``) bounds the timing's cost
    (:data:`harness.train.rounds.TIMING_SHARE`; what happened: :data:`LAST_TIMING`);
    ``on_round(done, at most, seconds left)`` hears each round."""
    todo: dict = {}
    for prog, spec in programs:
        key = perf_cache_key(spec)
        if key not in perf_cache and key not in todo and _num_devices(spec) == 1:
            todo[key] = (prog, spec)
    if not todo:
        return {}
    steps = None if train_steps is None else [float(train_steps.get(k, 0)) for k in todo]
    out = dict(zip(todo, _time_together(list(todo.values()), steps, on_round), strict=True))
    perf_cache.update(out)
    for key, (_, spec) in todo.items():
        _PEERS.setdefault(task_key(spec), {})[key] = spec
    return out


def interleave_bounds(steps_per_call: Sequence[int]) -> tuple[int, int, int, float]:
    """``(block, min_rounds, max_rounds, max_seconds)`` of an interleaved measurement of programs
    running ``steps_per_call`` steps per call: a block of ceil(8 / K) calls (at least 2), at least
    :data:`MIN_ROUNDS` rounds whatever they take (each program timed in that many separate
    stretches, in shuffled order: its figure's 95% interval is then between the 2nd and 9th of
    them, not one round's value), then until stable or 2 s + 1 s per program of timing; at most
    40 rounds."""
    block = max(2, -(-8 // max(1, min(steps_per_call, default=1))))
    return block, MIN_ROUNDS, 40, 2.0 + 1.0 * len(steps_per_call)


def one_step_executable(fn, args: tuple, shardings: dict):
    """``fn`` (a one-step function, or its vmap) jitted with ``shardings`` and the state donated,
    compiled with XLA's convolution: nothing loops in it, so ``impl='auto'`` convolutions trace as
    ``'xla'`` (``models.stax.conv_outside_loops``), not as the im2col patches a ``lax.scan`` on a
    CPU wants (ResNet-18's one step took 1.4x flax's with the patches)."""
    with stax.conv_outside_loops():
        return jax.jit(fn, donate_argnums=(0,), **shardings).lower(*args).compile()


def _measure(prog: TrainingProgram, spec: TrialSpec) -> PerfResult:
    """One measurement of ``spec``'s step (the module docstring's method), uncached."""
    e = prog.entry
    B = prog.batch_size
    state = _init_state(prog, spec)
    xb, yb = e.x_train[:B], e.y_train[:B]
    layout = None
    if spec.devices != 1:
        D = parallel.resolve_devices(spec.devices)
        layout = parallel.layout_for(spec.devices, spec.shard, batch_size=spec.batch_size,
                                     num_trials=D if spec.shard == "trials" else None)
    analytic = _analytic_flops(prog)
    if layout is None:  # the trainer's own K-step dispatch, FLOPs from the one-step program
        job, kw = _chunk_job(prog, spec, state)
        return timing.measure(None, job.args, warmup=WARMUP, iters=max(5, -(-20 // kw["steps_per_call"])),
                              compiled=job.compiled, max_spread=MAX_SPREAD, **kw)
    r, sp, D = layout.replicated, layout.split, layout.num_devices
    if layout.axis == "batch":
        fn, examples = prog.one_step, B
        args = (jax.device_put(state, r), jax.device_put(xb, sp), jax.device_put(yb, sp),
                jax.device_put(jnp.int32(0), r))
        shardings = {"in_shardings": (r, sp, sp, r), "out_shardings": (r, r)}
    else:
        fn, examples = jax.vmap(prog.one_step, in_axes=(0, None, None, None)), B * D
        stacked = jax.tree_util.tree_map(lambda a: jnp.stack([a] * D), state)
        args = (jax.device_put(stacked, sp), jax.device_put(xb, r), jax.device_put(yb, r),
                jax.device_put(jnp.int32(0), r))
        shardings = {"in_shardings": (sp, r, r, r), "out_shardings": (sp, sp)}
        analytic = analytic * D if analytic else None
    del state
    t0 = time.perf_counter()
    exe = one_step_executable(fn, args, shardings)
    compile_s = time.perf_counter() - t0
    return timing.measure(fn, args, batch_size=examples, donate_argnums=(0,), analytic_flops=analytic,
                          dtype=e.compute_dtype, compiled=exe, compile_s=compile_s,
                          num_devices=D, mesh=layout.label, max_spread=MAX_SPREAD)
