"""Throughput protocol: how the harness times one compiled training step.

The method (what :func:`measure` does, in order):

1. **Compile apart.** ``jax.jit(fn, donate_argnums=...).lower(*args).compile()`` is timed with
   ``time.perf_counter`` and reported as ``compile_s``; nothing after it compiles.
2. **Warm-up.** ``warmup`` calls of the compiled executable, the last one ended with
   ``jax.block_until_ready`` (first-touch allocation, caches, clock ramp-up).
3. **Timed steps.** ``iters`` calls, each ended with ``jax.block_until_ready`` on its outputs and timed
   individually with ``time.perf_counter``. A call runs ``steps_per_call`` optimizer steps (1 for
   the single-step function the trainer hands over); per-step times are call time / steps_per_call.
   Reported: median (``step_time_ms``), 10th and 90th percentiles (``numpy.percentile``, linear), and
   ``examples_per_sec = batch_size / median step time``. Each timed call includes one host dispatch
   (~10–250 µs on CPU depending on the argument pytree), which is part of the step time a user sees.
   The state output of call *i* is the state input of call *i+1*, so donated buffers are reused as in
   training.
3b. **Repeats until stable** (``max_spread``; the trainer's measurement passes
   :data:`harness.train.perf.MAX_SPREAD`): while the spread of all timed calls, IQR / median
   (:func:`relative_spread`, reported as ``spread``), is above ``max_spread``, another block of
   ``iters`` calls is timed, up to ``max_iters`` calls or ``max_seconds`` of timing; the median and
   percentiles are over every timed call. A busy machine thus gets more samples, and the median of
   many is what it reports.
3c. **Several programs, interleaved** (:func:`time_rounds`; a round is a block of timed calls of
   every program in turn) until every spread is small (after ``min_rounds``) or a bound is hit,
   load falling on all alike (:func:`harness.train.perf.measure_interleaved`, before training).
4. **FLOPs per step** from the compiled executable's ``cost_analysis()`` (``flops``; the result may be a
   dict or a list of dicts; ``None``, a missing key or a negative value such as ``-1`` mean *unknown*),
   divided by ``steps_per_call``. For a ``lax.scan`` XLA counts the loop body once, so scanned
   programs must be timed with ``steps_per_call=1`` semantics in mind (see :func:`cost_flops`).
   It is cross-checked against an analytic count (``analytic_flops``, e.g. 3 × forward FLOPs × batch
   for a dense network: forward + two backward matmuls); :func:`flops_agree` is the check, and a
   disagreement beyond a factor of 2 is reported with a :class:`FlopsMismatchWarning`.
5. **Utilisation** = (FLOPs per step / median step seconds) / peak, where the peak is
   :func:`device_peak_flops` of the step's compute dtype (``measure(dtype=...)``; a bfloat16
   mixed-precision step counts against the bfloat16 peak): a square ``n × n`` matmul of the dtype
   (n = 2048 on CPU, 8192 on accelerators), compiled apart, 2 warm-ups, best of 5 timed calls,
   ``2 n³`` FLOPs per call. It is measured once per process and cached on disk in
   ``$HARNESS_CACHE_DIR/peak.json`` (default ``~/.cache/harness``) keyed by device
   kind and dtype, so later processes reuse it. A peak timed on a busy device reads low: when a
   step then runs faster than it, the matmul is timed again (once per process and key) and the
   cache keeps the higher. A utilisation above 1 is reported as measured, never clipped.
6. **Several devices** (``measure(num_devices=D, mesh="batch=D")``, the trainer's sharded step on a
   1-D mesh, :mod:`harness.train.parallel`): the timed call is the SPMD program over all D devices, so
   ``examples_per_sec`` is the mesh's total and ``examples_per_sec_per_device`` = total / D. XLA's
   ``cost_analysis()`` of an SPMD-partitioned executable counts **one device's** program (checked on
   4 forced CPU devices: a batch-sharded MLP gradient reports 1/4 of the one-device count), so
   the XLA count is multiplied by D to give FLOPs per step for the whole mesh (replicated work, e.g.
   the optimizer update on replicated parameters, is counted on every device: it is executed D
   times). The peak is the one-device measured peak × D, so utilisation is against the mesh.

7. **CPU time and the modeled clock's figure.** Around each timed block the process's CPU seconds
   are read (:func:`harness.train.cpu_clock.cpu_snapshot`), less those of its other Python threads
   (a background MLflow writer is not the step's work: :func:`harness.train.cpu_clock.work_cpu_s`).
   ``step_cpu_ms`` is the median over blocks of CPU seconds per call / ``steps_per_call``: the work
   of one step, summed over the threads that do it. Waiting for a core is not CPU time, so other
   processes move it less than the wall-clock (docs/decisions.md, "CPU time ranks on a CPU"). XLA's
   CPU pool must be one thread, as the harness sets it (:mod:`harness.core.xla_threads`): with a pool
   per core the idle workers spin, spinning is CPU time, and load moves how much they spin. Load still
   moves the step's own work (caches, memory bandwidth shared with other processes), each program by
   its own amount, which each figure's interval from its rounds carries
   (:func:`harness.train.rounds.round_figures`). On a CPU device this is the figure the modeled
   clock ranks on (``modeled_step_ms``) and the one a measurement repeats until stable
   (:func:`stable_figure`); on an accelerator the wall-clock median is (device time).

Units: seconds for compile, milliseconds for step times, FLOP/s for peaks; utilisation is a fraction.
"""

from __future__ import annotations

import json
import math
import random
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from harness.core.cache_files import cache_dir, write_json_atomic
from harness.core.spec import PerfResult
from harness.train.cpu_clock import cpu_snapshot, work_cpu_s
from harness.train.rounds import round_figures, rounds_left
from models.flops import cost_analysis_flops

__all__ = [
    "FlopsMismatchWarning",
    "Rounds",
    "Timed",
    "cost_flops",
    "device_kind",
    "device_peak_flops",
    "flops_agree",
    "measure",
    "perf_result",
    "relative_spread",
    "stable_figure",
    "state_carry",
    "time_rounds",
]


class FlopsMismatchWarning(UserWarning):
    """XLA's FLOP count and the analytic one disagree by more than the tolerance."""


def device_kind(device: jax.Device | None = None) -> str:
    """``"<platform>:<device_kind>"`` of ``device`` (default: the first device), e.g. ``"cpu:cpu"``."""
    d = device or jax.devices()[0]
    return f"{d.platform}:{d.device_kind}"


def cost_flops(compiled: Any) -> float | None:
    """FLOPs of a compiled executable from ``compiled.cost_analysis()``, or ``None`` if unknown.

    The parsing (a dict, a list/tuple of dicts summed, ``-1``/missing/non-finite as unknown) is
    :func:`models.flops.cost_analysis_flops`; a zero count is unknown too. Never raises.
    """
    try:
        ca = compiled.cost_analysis()
    except Exception:
        return None
    return cost_analysis_flops(ca) or None


def relative_spread(times: Sequence[float]) -> float:
    """The spread of timed calls: interquartile range / median (``numpy.percentile``, linear);
    ``inf`` for a zero median. Example: ``relative_spread([1, 2, 3, 4, 5]) == 2 / 3``."""
    q25, med, q75 = np.percentile(np.asarray(times, float), [25, 50, 75])
    return float((q75 - q25) / med) if med > 0 else math.inf


def flops_agree(xla: float | None, analytic: float | None, factor: float = 2.0) -> bool | None:
    """``True`` if the two counts are within ``factor`` of each other, ``None`` if either is unknown."""
    if not xla or not analytic:
        return None
    r = xla / analytic
    return 1.0 / factor <= r <= factor


# --------------------------------------------------------------------------------------------------
# peak

_PEAK: dict[str, float] = {}


def _peak_path() -> Path:
    return cache_dir("peak.json")


def _time_matmul(n: int, dtype: Any, device: jax.Device) -> float:
    a = jax.device_put(jnp.ones((n, n), dtype), device)
    b = jax.device_put(jnp.full((n, n), 0.5, dtype), device)
    f = jax.jit(jnp.matmul).lower(a, b).compile()
    for _ in range(2):
        jax.block_until_ready(f(a, b))
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        jax.block_until_ready(f(a, b))
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best


def device_peak_flops(device: jax.Device | None = None, dtype: Any = jnp.float32, *,
                      refresh: bool = False) -> float:
    """Measured peak FLOP/s of ``device`` for ``dtype`` (a large square matmul; see module docstring).

    Cached per process and on disk (``peak.json`` in the harness cache dir) keyed by
    ``"<device_kind>|<dtype>"``; ``refresh=True`` re-measures and overwrites the entry.
    """
    device = device or jax.devices()[0]
    key = f"{device_kind(device)}|{jnp.dtype(dtype).name}"
    if not refresh and key in _PEAK:
        return _PEAK[key]
    path = _peak_path()
    disk: dict[str, float] = {}
    try:
        disk = json.loads(path.read_text())
    except (OSError, ValueError):
        disk = {}
    if not refresh and isinstance(disk.get(key), int | float) and disk[key] > 0:
        _PEAK[key] = float(disk[key])
        return _PEAK[key]
    n = 2048 if device.platform == "cpu" else 8192
    peak = _time_matmul(n, dtype, device)
    _store_peak(key, peak)
    return peak


def _store_peak(key: str, peak: float, *, only_higher: bool = False) -> float:
    """Set the cached peak of ``key`` (``"<device_kind>|<dtype>"``) in this process and in
    ``peak.json`` (atomic replace); with ``only_higher`` an entry already higher is kept. Returns
    the peak now cached."""
    path = _peak_path()
    try:
        disk = json.loads(path.read_text())
    except (OSError, ValueError):
        disk = {}
    if only_higher:
        old = [v for v in (_PEAK.get(key), disk.get(key)) if isinstance(v, int | float) and v > 0]
        peak = max([peak, *old])
    _PEAK[key] = peak
    try:
        disk[key] = peak
        write_json_atomic(path, disk)
    except OSError:
        pass
    return peak


def _retime_peak(device: jax.Device, dtype: Any, cached: float) -> float:
    """A timed step ran faster than the cached matmul peak ``cached`` (FLOP/s per device): that peak
    was probably timed while the device was busier (a shared CPU, another worker). Time the matmul
    again, once per process for each device kind and dtype, and cache the higher of the two. Never
    the step's own rate: it rests on a FLOP count that may be wrong. Returns the peak now cached."""
    key = f"{device_kind(device)}|{jnp.dtype(dtype).name}"
    if key in _RETIMED:
        return cached
    _RETIMED.add(key)
    try:
        fresh = device_peak_flops(device, dtype, refresh=True)
    except Exception:  # keep what is known
        fresh = 0.0
    return _store_peak(key, max(fresh, cached), only_higher=True)


_RETIMED: set[str] = set()


# --------------------------------------------------------------------------------------------------


def stable_figure(platform: str | None = None) -> str:
    """Which figure a measurement repeats until stable (``time_rounds``'s ``stable_on``): ``"cpu"``
    on a CPU device (``platform``, default the default backend's), ``"wall"`` elsewhere: the figure
    :func:`perf_result`'s modeled figure ranks on."""
    return "cpu" if (platform or jax.devices()[0].platform) == "cpu" else "wall"


class Rounds(NamedTuple):
    """What :func:`time_rounds` returns, per program: the wall seconds of every timed call
    (``times``), the last outputs (``outs``), and the CPU seconds per call of each timed block
    (``cpu``: :func:`work_cpu_s` of the block / its calls)."""

    times: list[list[float]]
    outs: list[Any]
    cpu: list[list[float]]


class Timed(NamedTuple):
    """One program of a round robin (:func:`time_rounds`): its compiled executable, the arguments of
    its first call, and how one call's outputs become the next call's arguments (donated state)."""

    compiled: Any
    args: tuple
    advance: Callable[[Any, tuple], tuple]


def state_carry(carry: Callable[[Any, tuple], tuple] | None = None) -> Callable[[Any, tuple], tuple]:
    """The ``advance`` of :class:`Timed`: ``carry(outputs, args)`` when given; else, if the call
    returns a tuple whose first element has the structure of ``args[0]``, it replaces ``args[0]``
    (state in, state out); else the arguments are reused."""

    def advance(out: Any, a: tuple) -> tuple:
        if carry is not None:
            return tuple(carry(out, a))
        if isinstance(out, tuple) and out and (
            jax.tree_util.tree_structure(out[0]) == jax.tree_util.tree_structure(a[0])
        ):
            return (out[0], *a[1:])
        return a

    return advance


def time_rounds(programs: Sequence[Timed], *, block: int, warmup: int, max_spread: float | None,
                max_rounds: int, max_seconds: float, min_rounds: int = 1,
                on_call: Callable[[int], None] | None = None, stable_on: str = "wall",
                shuffle: bool = False, plan: Callable[[list[float]], tuple] | None = None,
                on_round: Callable[[int, int, float], None] | None = None) -> Rounds:
    """Time ``programs`` round by round (items 2, 3 and 3b of the module docstring, for one program
    or several): ``warmup`` untimed calls of each (the last one's outputs waited for), then rounds,
    each ``block`` timed calls of every program in turn (each call ended with
    ``jax.block_until_ready`` and timed alone; the block's CPU seconds taken around it,
    :func:`work_cpu_s`), at least ``min_rounds`` rounds, then until every program's spread is at
    most ``max_spread`` or ``max_seconds`` of timing passed; at most ``max_rounds`` rounds.
    The spread is :func:`relative_spread` of the figure that will be used: the wall seconds of all
    timed calls (``stable_on="wall"``) or the CPU seconds per call of the blocks (``"cpu"``). Load
    that comes and goes then falls on every program alike, and their medians keep their ratios.
    ``on_call(i)`` is called before each timed call of program ``i`` (the order is observable).
    With ``shuffle`` each round times the programs in its own order (``random.Random(round)``), so
    that no program always follows the same one. ``plan(warm seconds per call of each program)``
    may then replace ``(block, min_rounds, max_seconds)`` (a bound on the timing's cost:
    :func:`harness.train.rounds.bounded_rounds`); ``on_round(done, at most, seconds left)`` hears
    each round's end (:func:`harness.train.rounds.rounds_left`).

    Returns:
      :class:`Rounds`: per program the seconds of every timed call, its last outputs and the CPU
      seconds per call of each block.

    Raises:
      ValueError: ``block < 1``, no programs, or ``stable_on`` not ``"wall"``/``"cpu"``.
    """
    if block < 1 or not programs:
        raise ValueError(f"block must be >= 1 and programs not empty, got {block}, {len(programs)}")
    if stable_on not in ("wall", "cpu"):
        raise ValueError(f"stable_on must be 'wall' or 'cpu', got {stable_on!r}")
    args, outs, warm_s = _warm_up(programs, warmup)
    if plan is not None:
        block, min_rounds, max_seconds = plan(warm_s)[:3]
    times: list[list[float]] = [[] for _ in programs]
    cpu: list[list[float]] = [[] for _ in programs]
    start, rounds = time.perf_counter(), 0
    while True:
        _time_round(programs, args, outs, times, cpu, block, on_call, seed=rounds if shuffle else None)
        rounds += 1
        if on_round is not None:
            on_round(rounds, *rounds_left(rounds, time.perf_counter() - start, min_rounds, max_rounds,
                                          max_seconds))
        figures = times if stable_on == "wall" else cpu
        stable = max_spread is None or all(relative_spread(t) <= max_spread for t in figures)
        late = time.perf_counter() - start >= max_seconds
        if (rounds >= min_rounds and (stable or late)) or rounds >= max_rounds:
            return Rounds(times, outs, cpu)


def _warm_up(programs: Sequence[Timed], warmup: int) -> tuple[list[tuple], list[Any], list[float]]:
    """``warmup`` untimed calls of each program in turn (the last one's outputs waited for): their
    next arguments, last outputs (``None`` without calls) and warm seconds per call."""
    args = [tuple(p.args) for p in programs]
    outs: list[Any] = [None] * len(programs)
    warm_s = []
    for i, p in enumerate(programs):
        t0 = time.perf_counter()
        for _ in range(warmup):
            outs[i] = p.compiled(*args[i])
            args[i] = p.advance(outs[i], args[i])
        if outs[i] is not None:
            jax.block_until_ready(outs[i])
        warm_s.append((time.perf_counter() - t0) / max(warmup, 1))
    return args, outs, warm_s


def _time_round(programs: Sequence[Timed], args: list[tuple], outs: list[Any], times: list[list[float]],
                cpu: list[list[float]], block: int, on_call: Callable[[int], None] | None,
                seed: int | None) -> None:
    """One round: ``block`` calls of each program in turn (``seed``: in the order ``random.Random(seed)``
    shuffles), each ended with ``jax.block_until_ready`` and its seconds appended to ``times[i]``
    (``on_call(i)`` before each), the block's CPU seconds per call to ``cpu[i]``; ``args`` and
    ``outs`` advanced in place."""
    order = list(range(len(programs)))
    if seed is not None:
        random.Random(seed).shuffle(order)
    for i in order:
        p, c0 = programs[i], cpu_snapshot()
        for _ in range(block):
            if on_call is not None:
                on_call(i)
            t0 = time.perf_counter()
            outs[i] = p.compiled(*args[i])
            jax.block_until_ready(outs[i])
            times[i].append(time.perf_counter() - t0)
            args[i] = p.advance(outs[i], args[i])
        cpu[i].append(work_cpu_s(c0, cpu_snapshot()) / block)


def measure(
    fn: Callable[..., Any], args: Sequence[Any], *, batch_size: int, steps_per_call: int = 1,
    warmup: int = 3, iters: int = 20, donate_argnums: int | tuple[int, ...] = (),
    carry: Callable[[Any, tuple], tuple] | None = None, analytic_flops: float | None = None,
    peak_flops: float | None = None, compiled: Any = None, compile_s: float | None = None,
    dtype: Any = jnp.float32, num_devices: int = 1, mesh: str = "", max_spread: float | None = None,
    max_iters: int = 400, max_seconds: float = 2.0, flops_of: Any = None, stable_on: str | None = None,
) -> PerfResult:
    """Time ``fn(*args)`` per the module's protocol and return a :class:`~harness.core.spec.PerfResult`.

    Args:
      fn: a jit-able function running ``steps_per_call`` training steps on one batch of
        ``batch_size`` examples.
      args: its arguments (device arrays / pytrees); ``args`` are not reused after donation.
      batch_size: examples per step (for examples/s).
      warmup, iters: untimed and timed calls (``iters >= 1``).
      donate_argnums: passed to ``jax.jit``; donated inputs must be fed from outputs by ``carry``.
      carry: ``carry(outputs, args) -> next args``; default: if ``fn`` returns a tuple whose first
        element has the structure of ``args[0]``, it replaces ``args[0]`` (state in, state out).
      analytic_flops: an analytic FLOPs-per-step count to cross-check and fall back on.
      peak_flops: FLOP/s to compute utilisation against (default :func:`device_peak_flops`).
      compiled, compile_s: an already compiled executable of ``fn`` and its compile time, to skip
        compiling again.
      dtype: the step's compute dtype: recorded in the result, and the default peak is the
        measured matmul peak of this dtype (``bfloat16`` steps are counted against the bf16 peak).
      num_devices: devices the (SPMD) step runs on; ``batch_size`` is the whole mesh's examples per
        step. The XLA FLOP count (per device) is multiplied by it, and so is the default peak
        (item 6 of the module docstring); ``analytic_flops`` and ``peak_flops`` when given are
        taken as whole-mesh figures.
      mesh: the mesh shape, ``"batch=4"`` (recorded in the result).
      max_spread: repeat the block of ``iters`` timed calls until the spread of all timed calls
        (:func:`relative_spread`, IQR / median) is at most this, or ``max_iters`` calls were
        timed, or ``max_seconds`` of timing passed (item 3b of the module docstring); ``None``
        (the default): one block.
      stable_on: the figure ``max_spread`` applies to, ``"wall"`` or ``"cpu"`` (default
        :func:`stable_figure`: the one the modeled clock ranks on, CPU time on a CPU device).
      flops_of: a compiled executable of **one** step whose ``cost_analysis()`` gives the FLOPs
        per step (not divided by ``steps_per_call``): for a ``lax.scan`` of ``steps_per_call``
        steps, whose own count holds the loop body once.

    Returns:
      ``PerfResult`` with ``compile_s`` (s), ``step_time_ms`` (median) and p10/p90 (ms),
      ``examples_per_sec``, ``flops_per_step`` (XLA count, else the analytic one, else ``None``),
      ``flops_per_step_analytic``, ``peak_flops``, ``utilization`` (fraction), ``device_kind``.

    Raises:
      ValueError: ``iters < 1`` or ``steps_per_call < 1``.
    """
    if iters < 1 or steps_per_call < 1:
        raise ValueError(f"iters and steps_per_call must be >= 1, got {iters}, {steps_per_call}")
    if num_devices < 1:
        raise ValueError(f"num_devices must be >= 1, got {num_devices}")
    args = tuple(args)
    if compiled is None:
        t0 = time.perf_counter()
        compiled = jax.jit(fn, donate_argnums=donate_argnums).lower(*args).compile()
        compile_s = time.perf_counter() - t0
    (times,), (out,), (cpu,) = time_rounds([Timed(compiled, args, state_carry(carry))], block=iters,
                                           warmup=warmup, max_spread=max_spread,
                                           max_rounds=1 if max_spread is None else -(-max_iters // iters),
                                           max_seconds=max_seconds,
                                           stable_on=stable_on or stable_figure())
    return perf_result(times, out, compiled=compiled, compile_s=compile_s, batch_size=batch_size, cpu=cpu,
                       steps_per_call=steps_per_call, warmup=warmup, analytic_flops=analytic_flops,
                       peak_flops=peak_flops, dtype=dtype, num_devices=num_devices, mesh=mesh,
                       flops_of=flops_of)


def perf_result(times: Sequence[float], out: Any, *, compiled: Any, compile_s: float | None,
                batch_size: int, steps_per_call: int = 1, warmup: int = 0,
                analytic_flops: float | None = None, peak_flops: float | None = None,
                dtype: Any = jnp.float32, num_devices: int = 1, mesh: str = "",
                flops_of: Any = None, cpu: Sequence[float] | None = None,
                figure: tuple[float, float, float] | None = None) -> PerfResult:
    """The :class:`~harness.core.spec.PerfResult` of timed calls ``times`` (seconds each, of
    ``steps_per_call`` steps) of ``compiled`` whose last outputs are ``out`` (items 3 to 7 of the
    module docstring; the arguments are :func:`measure`'s; ``cpu``: the CPU seconds per call of each
    timed block, :attr:`Rounds.cpu`; ``figure``: the modeled clock's ``(ms, lo, hi)`` per step when
    timed beside other programs, :func:`round_figures`; else from this program's own blocks)."""
    compile_s = float(compile_s or 0.0)
    spread = relative_spread(times)
    per_step_ms = np.asarray(times) * 1e3 / steps_per_call
    median = float(np.median(per_step_ms))
    p10, p90 = (float(v) for v in np.percentile(per_step_ms, [10, 90]))

    xla = cost_flops(compiled if flops_of is None else flops_of)
    xla = xla * num_devices / (steps_per_call if flops_of is None else 1) if xla else None
    agree = flops_agree(xla, analytic_flops)
    if agree is False:
        warnings.warn(
            f"XLA cost analysis counts {xla:.4g} FLOPs/step, the analytic count is {analytic_flops:.4g}",
            FlopsMismatchWarning, stacklevel=2)
    flops = xla or analytic_flops
    leaves = jax.tree_util.tree_leaves(out)
    dev = next(iter(leaves[0].devices())) if leaves and hasattr(leaves[0], "devices") else None
    if peak_flops is None:
        peak_flops = _default_peak(dev, dtype, num_devices, flops, median)
    util = flops / (median / 1e3) / peak_flops if flops and peak_flops and median > 0 else None
    eps = batch_size / (median / 1e3) if median > 0 else math.inf
    cpu_ms = float(np.median(cpu)) * 1e3 / steps_per_call if cpu else None
    platform = dev.platform if dev is not None else jax.devices()[0].platform
    if figure is None:
        series = cpu if platform == "cpu" and cpu else times
        figure = tuple(x * 1e3 / steps_per_call for x in round_figures([series])[0])  # type: ignore[assignment]
    return PerfResult(
        compile_s=compile_s, step_time_ms=median, step_time_ms_p10=p10, step_time_ms_p90=p90,
        examples_per_sec=eps, flops_per_step=flops, flops_per_step_analytic=analytic_flops,
        peak_flops=peak_flops, utilization=util, timed_steps=len(times) * steps_per_call, spread=spread,
        warmup_steps=warmup * steps_per_call, device_kind=device_kind(dev), dtype=jnp.dtype(dtype).name,
        num_devices=num_devices, examples_per_sec_per_device=eps / num_devices, mesh=mesh,
        step_cpu_ms=cpu_ms, modeled_step_ms=figure[0], modeled_step_ms_lo=figure[1],
        modeled_step_ms_hi=figure[2],
    )


def _default_peak(dev: Any, dtype: Any, num_devices: int, flops: float | None, median: float
                  ) -> float | None:
    """The whole mesh's peak FLOP/s: the device's measured matmul peak of ``dtype``
    (:func:`device_peak_flops`), timed again when the step (``flops`` in ``median`` ms) beat it
    (it was timed under load); ``None`` when it cannot be measured."""
    try:
        peak_flops = device_peak_flops(dev, dtype) * num_devices
        rate = flops / (median / 1e3) / num_devices if flops and median > 0 else 0.0
        if dev is not None and rate > peak_flops / num_devices:  # the peak was timed under load
            peak_flops = _retime_peak(dev, dtype, peak_flops / num_devices) * num_devices
    except Exception:  # a peak we cannot measure leaves utilisation unknown
        return None
    return peak_flops
