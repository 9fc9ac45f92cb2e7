"""The throughput of a trial's training step, measured once per distinct step and device.

:func:`measure_trial_perf` times the single-trial training dispatch of a
:class:`~harness.train.program.TrainingProgram` (its compiled chunk of ``K = steps_per_dispatch``
steps, batches gathered from the training split on the device, as the trainer runs it, the very
executable ``prog.get_chunk`` returns to training; per-step time = call time / K) with
:func:`harness.train.timing.measure` (state donated), once per :func:`perf_cache_key` through a
``perf_cache`` dict that the caller keeps. Its FLOPs per step come from the cost analysis of the
one-step function **lowered, not compiled** (XLA counts a scan's body once, so the chunk's own count
would not do): for the zoo's models the lowered count is 0.5–9.4% below the compiled one's
(logreg 0.9%, MLP 0.5%, CNN 3.0%, CNN-1D 3.4%, autoencoder 6.6%, ResNet 9.4%, ViT 1.4%, transformer
LM 0.9%, ResNet-18 1.7%: the optimised program fuses and rewrites), well inside the factor-2
cross-check against the analytic count, and it saves a compile that took 2–33 s on a shared CPU.

**Interleaved, before training** (:func:`measure_interleaved`, the sweep's in-process stage):
the sweep's distinct one-device programs are timed round by round, each round a block of calls of
every program in turn (:func:`harness.train.timing.time_rounds`), until each program's spread is at
most :data:`MAX_SPREAD` or a bound (:func:`interleave_bounds`), the median per program going into
the ``perf_cache`` that the trainer reads. A load that comes and goes during the measurement then
slows every program alike, and their ratios, which decide ranks on the modeled clock, hold (timed
one after another, at each unit's end, two identical programs read 0.18 and 0.35 ms).

Timing one step per dispatch instead counted a host dispatch per step that training pays once per K
steps (a digits MLP: 0.56 ms against the 0.14 ms its training took). On D > 1 devices the sharded
one-step function is timed (compiled: it is what is timed), when the unit trains:
``shard: batch``: one step of the B-example batch split over the mesh, state replicated
(examples/s = B / step time); ``shard: trials``: one vmapped step of D trials (one per device,
copies of this trial), state split along the trial axis (examples/s = D·B / step time). FLOPs,
peak and utilisation are for the whole mesh. FLOPs are cross-checked against
``3 × flops_per_example × batch_size``.

**Checked against the trial's own clock.** The timed block is repeated until its spread (IQR /
median) is at most :data:`MAX_SPREAD` or a bound is hit (:func:`harness.train.timing.measure`'s
``max_spread``). The trainer passes its training clock (:class:`TrainClock`: wall seconds of
training dispatches, compile and evaluation excluded; steps trained; the vmapped width ``T``; the
seconds per step of each dispatch): one step of this trial alone should take between the
fastest dispatch's seconds per step / T and the median dispatch's. A step time outside
``[fastest/T / CLOCK_FACTOR, median × CLOCK_FACTOR]`` (:func:`clock_disagreement`) is measured once
more (the cache then holds the new one); if that one disagrees too, the trial's ``PerfResult`` gets
``suspect`` = the reason with both figures (logged as the tag ``perf.suspect``; reports draw it
hatched and rank that trial on its measured seconds). A figure from the interleaved stage is
checked the same way when its unit trains (and re-measured alone if it disagrees). A measurement
taken under load (10.4 ms where
the trial's 5,000 steps took 6.5 s, 1.3 ms each) is what this catches.
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
from harness.train import parallel, timing
from harness.train.build import trial_step_size
from harness.train.program import TrainingProgram

__all__ = ["CLOCK_FACTOR", "MAX_SPREAD", "TrainClock", "clock_disagreement", "interleave_bounds",
           "measure_interleaved", "measure_trial_perf", "perf_cache_key"]

#: The timed block is repeated until IQR / median of the timed calls is at most this (or a bound).
MAX_SPREAD = 0.1
#: A step time and the trial's training clock that differ by more than this factor disagree.
CLOCK_FACTOR = 2.0
#: Untimed calls of each program before its timed ones.
WARMUP = 2


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


def clock_disagreement(step_time_ms: float, train_clock: TrainClock | tuple | None) -> str:
    """Why ``step_time_ms`` (one step of one trial) cannot be right given the unit's training clock
    (:class:`TrainClock`, module docstring), or ``""`` when it can (or the clock says nothing: no
    steps, no time). Too slow: above ``CLOCK_FACTOR`` × the clock's typical (median) dispatch per
    step. Too fast: below the clock's *fastest* dispatch per step / ``width`` / ``CLOCK_FACTOR`` (a
    dispatch can be slowed by other work in the process, e.g. the background MLflow writer, but no
    step runs faster than its cost: a fast bound on the median flagged true figures on a busy
    machine, 0.338 ms measured against a 0.775 ms median). Example:
    ``clock_disagreement(10.4, TrainClock(6.5, 5000))`` is ``"step time 10.4 ms measured, the
    training clock says 1.3 ms per step (6.5 s / 5000 steps): they differ by more than 2x"``."""
    if not train_clock:
        return ""
    seconds, steps, width, per_dispatch = TrainClock(*train_clock)
    if steps <= 0 or seconds <= 0 or not step_time_ms > 0:
        return ""
    per_dispatch = list(per_dispatch)[1:] if len(per_dispatch) > 1 else list(per_dispatch)  # warm-up
    typical_ms = statistics.median(per_dispatch) * 1e3 if per_dispatch else seconds * 1e3 / steps
    fastest_ms = min(per_dispatch) * 1e3 if per_dispatch else typical_ms
    n = len(per_dispatch)
    if step_time_ms > typical_ms * CLOCK_FACTOR:
        clock_ms, how = typical_ms, f"median of {n} dispatch{'' if n == 1 else 'es'}; " if n else ""
    elif step_time_ms < fastest_ms / max(width, 1) / CLOCK_FACTOR:
        clock_ms, how = fastest_ms, f"fastest of {n} dispatch{'' if n == 1 else 'es'}; " if n else ""
    else:
        return ""
    of = f" of {width} vmapped trials" if width > 1 else ""
    return (f"step time {step_time_ms:.3g} ms measured, the training clock says {clock_ms:.3g} ms per "
            f"step{of} ({how}{seconds:.3g} s / {steps} steps): they differ by more than "
            f"{CLOCK_FACTOR:g}x")


def measure_trial_perf(prog: TrainingProgram, spec: TrialSpec, perf_cache: dict | None,
                       train_clock: TrainClock | None = None) -> PerfResult:
    """Throughput of ``spec``'s step (module docstring), from ``perf_cache`` when it has it (and
    stored there when measured), checked against the unit's ``train_clock`` when given: measured
    again once when they disagree, ``suspect`` if it still does."""
    pkey = perf_cache_key(spec)
    perf = perf_cache.get(pkey) if perf_cache is not None else None
    if perf is None:
        perf = _measure(prog, spec)
    why = clock_disagreement(perf.step_time_ms, train_clock)
    if why and not perf.remeasured:
        perf = dataclasses.replace(_measure(prog, spec), remeasured=True)
        why = clock_disagreement(perf.step_time_ms, train_clock)
    if perf_cache is not None:
        perf_cache[pkey] = perf
    return dataclasses.replace(perf, suspect=why) if why else perf


def _init_state(prog: TrainingProgram, spec: TrialSpec):
    """A fresh state of ``spec``'s trial (the one the timed calls start from)."""
    return prog.init(jax.random.PRNGKey(spec.seed), trial_step_size(spec, prog.opt_builder))[0]


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


def measure_interleaved(programs: Sequence[tuple[TrainingProgram, TrialSpec]],
                        perf_cache: dict) -> dict:
    """Measure the step of each ``(program, spec)`` whose :func:`perf_cache_key` ``perf_cache``
    lacks, **interleaved**: round by round, each round a block of timed calls of every program in
    turn (:func:`harness.train.timing.time_rounds`), until every program's spread is at most
    :data:`MAX_SPREAD` or a bound (:func:`interleave_bounds`) is hit; each program's figure is the
    median of its timed calls, so load that comes and goes during the measurement slows all of them
    alike. Only one-device trials (a mesh's step is measured when its unit trains). Stores each
    figure in ``perf_cache`` and returns ``{key: PerfResult}`` of what it measured."""
    todo: dict = {}
    for prog, spec in programs:
        key = perf_cache_key(spec)
        if key not in perf_cache and key not in todo and _num_devices(spec) == 1:
            todo[key] = (prog, spec)
    if not todo:
        return {}
    jobs = [_chunk_job(prog, spec) for prog, spec in todo.values()]
    block, min_rounds, max_rounds, max_s = interleave_bounds([kw["steps_per_call"] for _, kw in jobs])
    times, outs = timing.time_rounds([j for j, _ in jobs], block=block, warmup=WARMUP,
                                     max_spread=MAX_SPREAD, min_rounds=min_rounds,
                                     max_rounds=max_rounds, max_seconds=max_s)
    out = {key: timing.perf_result(t, o, compiled=job.compiled, warmup=WARMUP, **kw)
           for key, (job, kw), t, o in zip(todo, jobs, times, outs, strict=True)}
    perf_cache.update(out)
    return out


def interleave_bounds(steps_per_call: Sequence[int]) -> tuple[int, int, int, float]:
    """``(block, min_rounds, max_rounds, max_seconds)`` of an interleaved measurement of programs
    running ``steps_per_call`` steps per call: a block of ceil(8 / K) calls (at least 2), at least
    3 rounds (so each program is timed in three separate stretches, ≥ 6 calls: about the ≥ 5 calls
    a program timed alone gets), at most 40 rounds, and at most 1 s + 0.5 s per program of timing
    (a program timed alone may take up to 2 s)."""
    block = max(2, -(-8 // max(1, min(steps_per_call, default=1))))
    return block, 3, 40, 1.0 + 0.5 * len(steps_per_call)


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
    exe = jax.jit(fn, donate_argnums=(0,), **shardings).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    return timing.measure(fn, args, batch_size=examples, donate_argnums=(0,), analytic_flops=analytic,
                          dtype=e.compute_dtype, compiled=exe, compile_s=compile_s,
                          num_devices=D, mesh=layout.label, max_spread=MAX_SPREAD)
