"""Whether trials that share a batch key train faster as one vmapped program: decided by measuring.

:func:`decide` answers for a group of trials (equal :meth:`~harness.core.spec.TrialSpec.batch_key`,
that is differing only in seed and/or ``optimizer.step_size``); ``harness.train.loop.should_batch``
returns its ``batch``. The method:

1. **Overrides and trivial cases.** ``HARNESS_BATCH=on`` (or ``always``/``1``/``true``/``yes``)
   batches, ``HARNESS_BATCH=off`` (``never``/``0``/``false``/``no``) does not, without measuring.
   Fewer than 2 trials, or specs that cannot share a batch, are sequential.
2. **Cache.** The decision is keyed by ``(program signature, T, device kind)``: the signature is a
   hash of what sets a step's cost (``spec.perf_key()``: model and its hparams, optimizer and its
   non-float hparams, dataset, batch size, dtype, augmentation; plus the chunk length
   ``n = min(steps_per_dispatch, eval_every, steps)``), ``T`` the number of trials and the
   device kind :func:`harness.train.timing.device_kind`. Not the schedule: it adds a few scalar
   operations per step to a step that costs thousands, so the groups of a sweep that differ only in
   their schedule (the quickstart's constant and cosine_decay) share one measurement, made on the
   first of them.
   Looked up in this process, then in ``$HARNESS_CACHE_DIR/batching.json`` (default
   ``~/.cache/harness``, beside ``peak.json``); a cached key is never measured again. The file is
   rewritten whole under a :class:`filelock.FileLock` (read, merge, temp file, ``os.replace``), so
   concurrent processes keep each other's entries and a reader never sees a partial file.
3. **Device memory** (:mod:`harness.train.capacity`). The single-trial chunk is compiled (the one
   training uses) and XLA's memory analysis gives one trial's footprint; how many trials fit the
   device's memory beside the data it holds caps the group: none beyond one, sequential; fewer
   than ``T``, programs of that many trials (:attr:`Decision.size`). On a GPU/TPU that is the
   decision (vmap as many as fit, unmeasured: one trial rarely fills an accelerator); on a CPU the
   rest of this method decides on the capped group.
   **Skip.** A group whose ``T`` single-trial chunks take more than :data:`MAX_REP_S` (timed once, before
   the vmapped program is compiled) is not measured: sequential, since such a model keeps the CPU busy
   alone and measuring it would cost seconds. Nor one where batching cannot pay for its measurement: the
   most vmap could save is the training of ``T - 1`` of the trials (``(T - 1) * ceil(steps / n)`` chunks at
   the single chunk's time, timed before the vmapped program is compiled), and measuring costs a compile of
   the vmapped program, which takes at least as long as the single one's (its compile seconds in this
   process, whichever stage compiled it; nothing when the vmapped one is compiled already). When the first
   is smaller, sequential (docs/decisions.md). Skips are cached like measurements; a cost skip keeps its
   chunk and compile seconds, so a sweep with another budget on the same signature re-applies the rule to
   its own steps without compiling anything.
4. **Measurement** (:func:`measure_speedup`): the trainer's own compiled chunk of ``n`` steps, the
   vmapped ``T``-trial one and the single-trial one (the executables training then reuses in this
   process: the chunk length is the trial's first), compiled first and not timed, on one trial's
   state (the first's; the vmapped state is ``T`` copies of it: a chunk's time depends on the shapes,
   not the values, and a decision initialises one state and gets at most two chunk programs whatever
   ``T``, :func:`measure_counts`). Then
   interleaved repetitions, one untimed warm-up each: ``T`` single-trial chunks in sequence against
   one vmapped chunk, each call ended by fetching its losses to the host as the trainer does. The
   number of repetitions is :data:`MIN_REPS`..:data:`MAX_REPS`, fewer when one repetition is slow,
   so that the timed part stays near :data:`BUDGET_S`. ``speedup`` = median over repetitions of
   (sequential seconds / vmapped seconds).
5. **Rule.** Batch when ``speedup >= MIN_SPEEDUP`` (1.05: below it the difference is within this
   VM's noise, and separate units keep ``--jobs`` parallelism and per-trial failure isolation).
   A measurement that raises (e.g. out of memory for the vmapped program) gives sequential, kept in
   this process only.

Every decision has a ``label`` that the sweep logs as the trial runs' tag ``harness.batching``:
``"vmap(8): measured 1.21x"``, ``"sequential: measured 0.80x"``, ``"sequential: HARNESS_BATCH=never"``,
``"vmap(8): fits device memory (3.1 MiB per trial, at most 2,410 ...)"``,
``"sequential: 1 trial fits device memory (...)"``, ``"sequential: single trial"``.

The decision is made where the work units are formed (the sweep's own process), on that process's
default device: with ``--jobs`` the workers see the same kind of device; a Ray cluster whose
workers have another kind of device than the head decides for the head's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from harness.core.cache_files import cache_dir, write_json_atomic
from harness.core.spec import TrialSpec
from harness.data.sources import load_dataset
from harness.train import capacity, device_data, timing
from harness.train.build import trial_step_size
from harness.train.program import TrainingProgram, program_for

__all__ = ["BUDGET_S", "MAX_REP_S", "MIN_SPEEDUP", "Decision", "batch_mismatch", "cache_path",
           "compile_seconds", "decide", "describe", "group_size", "known", "measure_counts",
           "measure_speedup", "signature"]

#: Batch when the measured speed-up (sequential / vmapped) is at least this.
MIN_SPEEDUP = 1.05
#: Target seconds of timed repetitions in one measurement.
BUDGET_S = 0.5
#: A group whose T single-trial chunks take longer than this (s) is not measured (sequential).
MAX_REP_S = 0.5
MIN_REPS, MAX_REPS = 3, 7

_ALWAYS = ("always", "on", "1", "true", "yes")
_NEVER = ("never", "off", "0", "false", "no")


class _TooSlowError(Exception):
    """T single-trial chunks take ``args[0]`` seconds: not worth measuring."""


class _NotWorthError(Exception):
    """Batching could save at most ``save_s`` of training, less than the ``compile_s`` that
    measuring it would cost (``chunk_s``: one single-trial chunk)."""

    def __init__(self, save_s: float, compile_s: float, chunk_s: float):
        super().__init__(save_s, compile_s, chunk_s)
        self.save_s, self.compile_s, self.chunk_s = save_s, compile_s, chunk_s


def _max_saving(specs: Sequence[TrialSpec], chunk_s: float) -> float:
    """The most seconds of training that vmapping ``specs`` could save: ``T - 1`` of them trained
    for free (``ceil(steps / n)`` chunks each, at ``chunk_s`` seconds per single-trial chunk)."""
    return (len(specs) - 1) * -(-specs[0].steps // _chunk_len(specs[0])) * chunk_s


def _not_worth(T: int, save_s: float, compile_s: float, source: str) -> Decision:
    return Decision(False, _label(False, T, f"not measured (vmap could save at most {save_s:.2f} s of "
                                            f"training; measuring costs a ~{compile_s:.1f} s compile)"),
                    None, source)


@dataclasses.dataclass(frozen=True)
class Decision:
    """``batch``: train the group vmapped; ``label``: the ``harness.batching`` tag; ``speedup``:
    measured sequential/vmapped time (``None`` when not measured); ``source``: ``override``,
    ``trivial``, ``skipped``, ``measured``, ``memory``, ``cached`` or ``failed``; ``size``: trials per
    vmapped program when device memory holds fewer than the group (``None``: all of them)."""

    batch: bool
    label: str
    speedup: float | None = None
    source: str = "measured"
    size: int | None = None


_MEM: dict[str, Decision] = {}
#: Seconds the measurements of this process spent compiling (or loading) programs: parameter init and
#: the chunks, which training then reuses (the time budget counts them as ``compile``).
_COMPILE_S = [0.0]


def compile_seconds() -> float:
    """The seconds this process's batching measurements have spent compiling or loading programs
    (parameter init, the single and vmapped chunks; training reuses them, so the sweep's time budget
    counts them as ``compile``, not ``batching``)."""
    return _COMPILE_S[0]


#: What this process's measurements did, counted (:func:`measure_counts`).
_COUNTS = {"decisions": 0, "inits": 0, "programs": 0}


def _count(what: str) -> None:
    _COUNTS[what] += 1


def measure_counts() -> dict[str, int]:
    """What this process's measurements (:func:`measure_speedup`) did so far: ``decisions``
    measured (not found in a cache, not trivial, not overridden), trial states ``inits`` (one per
    decision, whatever its number of trials ``T``) and chunk ``programs`` got (the single-trial chunk,
    then the vmapped one when the measurement gets that far). A copy; each count only grows."""
    return dict(_COUNTS)


def cache_path() -> Path:
    """``$HARNESS_CACHE_DIR/batching.json`` (default ``~/.cache/harness/batching.json``)."""
    return cache_dir("batching.json")


def _chunk_len(spec: TrialSpec) -> int:
    return max(1, min(spec.steps_per_dispatch, spec.eval_every, spec.steps))


def signature(spec: TrialSpec) -> str:
    """Hash (16 hex digits) of what sets the cost of ``spec``'s training chunk (module docstring)."""
    text = repr((spec.perf_key(), _chunk_len(spec)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _key(specs: Sequence[TrialSpec]) -> str:
    return f"{timing.device_kind()}|T={len(specs)}|{signature(specs[0])}"


def _label(batch: bool, T: int, why: str) -> str:
    return f"{f'vmap({T})' if batch else 'sequential'}: {why}"


def _from_ratio(T: int, ratio: float, source: str, size: int | None = None) -> Decision:
    batch = ratio >= MIN_SPEEDUP
    why = f"measured {ratio:.2f}x" + (f" for {size} trials (device memory)" if size else "")
    return Decision(batch, _label(batch, size or T, why), ratio, source, size if batch else None)


def batch_mismatch(specs: Sequence[TrialSpec]) -> TrialSpec | None:
    """The first of ``specs`` whose :meth:`~harness.core.spec.TrialSpec.batch_key` differs from the
    first's (it cannot share their vmapped program), or ``None`` when they all can."""
    k0 = specs[0].batch_key()
    return next((s for s in specs[1:] if s.batch_key() != k0), None)


def _trivial(specs: Sequence[TrialSpec]) -> Decision | None:
    if len(specs) < 2:
        return Decision(False, "sequential: single trial", None, "trivial")
    if any(s.optimizer_api == "algoperf" for s in specs):
        return Decision(False, "sequential: AlgoPerf submission (its own per-step loop)", None, "trivial")
    if batch_mismatch(specs) is not None:
        return Decision(False, "sequential: trials differ in more than seed and step size", None, "trivial")
    override = os.environ.get("HARNESS_BATCH", "").strip().lower()
    if override in _ALWAYS:
        return Decision(True, _label(True, len(specs), f"HARNESS_BATCH={override}"), None, "override")
    if override in _NEVER:
        return Decision(False, _label(False, len(specs), f"HARNESS_BATCH={override}"), None, "override")
    return None


def _read_disk() -> dict[str, Any]:
    try:
        d = json.loads(cache_path().read_text())
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_disk(key: str, entry: dict[str, Any]) -> None:
    """Merge ``{key: entry}`` into the cache file under its lock; atomic replace; never raises."""
    from filelock import FileLock

    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock", timeout=30):
            disk = _read_disk()
            disk[key] = entry
            write_json_atomic(path, disk)
    except Exception:  # a cache we cannot write only means measuring again next time
        pass


def decide(specs: Sequence[TrialSpec], *, measure: Callable[[Sequence[TrialSpec]], tuple[float, int]]
           | None = None, device_bytes: int | None = None, platform: str | None = None) -> Decision:
    """The batching decision for ``specs`` (see the module docstring).

    Args:
      specs: trials meant to be trained together.
      measure: ``measure(specs) -> (speedup, reps)`` (default :func:`measure_speedup`); tests pass
        a stand-in (and no device memory rule applies unless ``device_bytes`` is given).
      device_bytes: the device's memory (default :func:`harness.train.capacity.device_memory`).
      platform: ``cpu`` measures, any other applies the memory rule alone (default: the device's).
    """
    dec = known(specs)
    if dec is not None:
        if dec.source == "cached":  # read from the machine's file: kept in this process too
            _MEM[_key(specs)] = dec
        return dec
    key = _key(specs)
    T = len(specs)
    t0 = time.perf_counter()
    ratio = reps = None
    cost: dict[str, Any] = {}
    try:
        size, why = _fit(specs, device_bytes) if measure is None or device_bytes is not None else (None, "")
        platform = platform or jax.devices()[0].platform
        if size is not None and (size < 2 or platform != "cpu"):
            dec = _MEM[key] = _by_memory(T, size, why)  # not cached on disk: free memory changes
            return dec
        ratio, reps = (measure or measure_speedup)(specs[:size] if size and size < T else specs)
        dec = _from_ratio(T, ratio, "measured", size if size and size < T else None)
    except _NotWorthError as e:
        dec = _not_worth(T, e.save_s, e.compile_s, "skipped")
        cost = {"rule": "cost", "chunk_s": round(e.chunk_s, 6), "compile_s": round(e.compile_s, 3)}
    except _TooSlowError as e:
        dec = Decision(False, _label(False, T, f"not measured ({T} chunks take ~{e.args[0]:.1f} s)"),
                       None, "skipped")
    except Exception as e:  # e.g. the vmapped program does not fit: sequential, this process only
        dec = Decision(False, _label(False, T, f"measurement failed ({type(e).__name__})"), None, "failed")
        _MEM[key] = dec
        return dec
    _MEM[key] = dec
    s = specs[0]
    _write_disk(key, {"speedup": None if ratio is None else round(float(ratio), 4), "batch": dec.batch,
                      "label": dec.label, "reps": reps, "measure_s": round(time.perf_counter() - t0, 3),
                      "model": s.model, "dataset": s.dataset, "batch_size": s.batch_size,
                      "dtype": s.dtype, "optimizer": s.optimizer, "chunk_steps": _chunk_len(s),
                      "size": dec.size,
                      "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **cost})
    return dec


def _by_memory(T: int, size: int, why: str) -> Decision:
    if size < 2:
        return Decision(False, f"sequential: {size} trial{'s' * (size != 1)} fit{'s' * (size == 1)} "
                               f"device memory ({why})", None, "memory")
    if size >= T:
        return Decision(True, _label(True, T, f"fits device memory ({why})"), None, "memory")
    n = -(-T // size)
    return Decision(True, _label(True, size, f"{n} programs for {T} trials, as many as fit device memory "
                                             f"({why})"), None, "memory", size)


def _fit(specs: Sequence[TrialSpec], device_bytes: int | None) -> tuple[int | None, str]:
    """``(trials of specs that fit one program, why)`` by device memory (module docstring, step 3);
    ``(None, "")`` where the footprint or the device's memory is unknown. Compiles the single-trial
    chunk that training (and the measurement) then reuse."""
    dev = device_bytes if device_bytes is not None else capacity.device_memory()
    if dev is None:
        return None, ""
    prog = _program(specs[0])
    e = prog.entry
    try:
        state = jax.eval_shape(lambda s: prog._init_optimizer(*e.init_from_seed(s), jnp.float32(0)),
                               np.uint32(0))
    except Exception:  # an optimizer whose init does not trace: no footprint, measured as before
        return None, ""
    exe, dt = prog.get_chunk(None, _chunk_len(specs[0]), state, jnp.int32(0), e.x_train, e.y_train)
    _COMPILE_S[0] += dt
    fp = capacity.footprint(getattr(exe, "steps_exe", exe), e.x_train.nbytes + e.y_train.nbytes)
    held = device_data.resident_bytes()
    size = capacity.capacity(fp, dev, held)
    why = (f"{capacity.mib(fp.per_trial)} per trial, {capacity.mib(max(held, fp.shared))} of data, at most "
           f"{size:,} in {capacity.MEMORY_FRACTION:.0%} of {capacity.mib(dev)}")
    return size, why


def known(specs: Sequence[TrialSpec]) -> Decision | None:
    """The decision for ``specs`` without deciding: trivial, overridden, or cached (this process or
    the machine's file); ``None`` when :func:`decide` would compile or measure."""
    trivial = _trivial(specs)
    if trivial is not None:
        return trivial
    key = _key(specs)
    if key in _MEM:
        return _MEM[key]
    entry = _read_disk().get(key)
    return _from_entry(specs, entry) if isinstance(entry, dict) else None


def _from_entry(specs: Sequence[TrialSpec], entry: dict[str, Any]) -> Decision | None:
    """The decision a disk cache ``entry`` gives ``specs``; ``None`` when it must be measured again
    (a cost skip whose rule, re-applied to these specs' steps, no longer skips)."""
    if isinstance(entry.get("speedup"), int | float):
        size = entry.get("size") if isinstance(entry.get("size"), int) else None
        return _from_ratio(len(specs), float(entry["speedup"]), "cached", size)
    if entry.get("rule") == "cost":
        save_s, compile_s = _max_saving(specs, float(entry["chunk_s"])), float(entry["compile_s"])
        return _not_worth(len(specs), save_s, compile_s, "cached") if save_s < compile_s else None
    if entry.get("batch") is False and isinstance(entry.get("label"), str):
        return Decision(False, entry["label"], None, "cached")
    return None


def group_size(specs: Sequence[TrialSpec]) -> int:
    """Trials per vmapped program for a group this process decided to batch: the decision's
    :attr:`Decision.size` (device memory), else all of ``specs``."""
    dec = _MEM.get(_key(specs)) if len(specs) > 1 else None
    return dec.size if dec is not None and dec.batch and dec.size else len(specs)


def describe(specs: Sequence[TrialSpec], batched: bool) -> str:
    """The ``harness.batching`` label of a group that ``group_units`` did (``batched``) or did not
    batch: the decision :func:`decide` made for it in this process when there is one, else a plain
    ``"vmap(T)"`` / ``"sequential"``."""
    trivial = _trivial(specs)
    if trivial is not None and (trivial.source == "trivial" or trivial.batch == batched):
        return trivial.label
    dec = _MEM.get(_key(specs))
    if dec is not None and dec.batch == batched:
        return dec.label
    return f"vmap({len(specs)})" if batched else "sequential"


# --------------------------------------------------------------------------------------------------
# the measurement


def _program(spec: TrialSpec) -> TrainingProgram:
    return program_for(spec, load_dataset(spec.dataset, **spec.hparams("dataset")))


def measure_speedup(specs: Sequence[TrialSpec]) -> tuple[float, int]:
    """``(median sequential/vmapped seconds, repetitions)`` for ``specs`` (module docstring, step 4)."""
    spec0, T = specs[0], len(specs)
    _count("decisions")
    prog = _program(spec0)
    e = prog.entry
    n = _chunk_len(spec0)
    # one trial's state, whatever T: a chunk's time depends on the state's shapes, not its values, so
    # the vmapped state is T copies of it (T eager optimizer inits cost O(T) before anything is decided)
    one, dt = prog.init_seeded(spec0.seed, trial_step_size(spec0, prog.opt_builder))
    _COMPILE_S[0] += dt
    _count("inits")
    # its values on the host (before the single chunk donates ``one``): the T copies are made there
    # only if the measurement gets that far (on the device each leaf's copy would be a compiled program)
    host = jax.tree_util.tree_map(np.asarray, one)
    start = jnp.int32(0)
    exe_1, dt = prog.get_chunk(None, n, one, start, e.x_train, e.y_train)
    _COMPILE_S[0] += dt
    _count("programs")
    # what measuring costs: compiling the vmapped chunk, which takes at least as long as the single
    # one did (whichever stage compiled that); nothing when it is compiled already
    cost_s = 0.0 if prog.chunk_compile_s(T, n) is not None else prog.chunk_compile_s(None, n) or 0.0
    box = {"1": one}

    def vmapped() -> float:
        t0 = time.perf_counter()
        box["v"], losses = exe_v(box["v"], start, e.x_train, e.y_train)
        np.asarray(losses)
        return time.perf_counter() - t0

    def sequential() -> float:
        t0 = time.perf_counter()
        for _ in range(T):  # T chunks, as T trials in sequence run them (one state carried)
            box["1"], losses = exe_1(box["1"], start, e.x_train, e.y_train)
            np.asarray(losses)
        return time.perf_counter() - t0

    for _ in range(2):  # warm-up, then one timed chunk: are T of them too slow to be worth measuring?
        t0 = time.perf_counter()
        box["1"], losses = exe_1(box["1"], start, e.x_train, e.y_train)
        np.asarray(losses)
    chunk_s = time.perf_counter() - t0
    t_seq = T * chunk_s
    if t_seq > MAX_REP_S:
        raise _TooSlowError(t_seq)
    save_s = _max_saving(specs, chunk_s)
    if save_s < cost_s:
        raise _NotWorthError(save_s, cost_s, chunk_s)
    stacked = jax.tree_util.tree_map(lambda a: jnp.asarray(np.repeat(a[None], T, axis=0)), host)
    del host
    exe_v, dt = prog.get_chunk(T, n, stacked, start, e.x_train, e.y_train)
    _COMPILE_S[0] += dt
    _count("programs")
    box["v"] = stacked
    pair = vmapped() + t_seq  # warm-up, also the cost of one repetition
    reps = int(min(MAX_REPS, max(MIN_REPS, BUDGET_S // max(pair, 1e-9))))
    ratios = []
    for r in range(reps):
        if r % 2:  # alternate which goes first
            tv = vmapped()
            ts = sequential()
        else:
            ts = sequential()
            tv = vmapped()
        ratios.append(ts / tv)
    return float(statistics.median(ratios)), reps
