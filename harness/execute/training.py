"""Training one work unit in a worker: the vmapped batch, its trial-by-trial fallback, checkpoints.

- :func:`train_unit`: trains a unit's trials (one :class:`TrialResult` each, in order). A unit of
  several trials trains them together (``harness.train.loop.run_trials_batched``); when that batch
  raises, the reason is logged (a warning line, and the tag ``harness.batch_fallback_reason`` on
  each of its trials) and the trials train one at a time, so that only the trials that raise on
  their own are FAILED. A trial that raises gets a ``failed`` result with its traceback.
- Each result records the devices it trained on (``extra["device_tags"]``), here in the training
  process: a spooled result is written later, possibly by another process; and the conditions it
  met that become a tag and one line (``extra["flops_mismatch"]``, :mod:`harness.core.conditions`;
  a Python warning while a unit trains is one line, never a source excerpt).
- Checkpoints: the unit's handles (:func:`harness.train.checkpoint.for_unit`) are collected as
  ``(handle, trial ids)``; :func:`end_checkpoints` removes those whose trials are all in the store
  (or the spool) and unlocks the others, so the next attempt resumes them.
- Early stopping: the trainer gets the sweep's gate (:func:`harness.execute.rung_gate.gate_for`),
  which stops a trial with an ``early_stop`` rule at a rung.
- :data:`PERF_CACHE`: this process's throughput measurements (one per perf key), reused by every
  unit it trains; :func:`needs_perf_measurement` says whether a unit adds one;
  :func:`measure_throughput` fills it for a whole sweep before training, its programs measured
  interleaved (``harness.train.perf.measure_interleaved``).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

from harness.core.conditions import one_line_warnings
from harness.core.context import RunContext
from harness.core.spec import TrialResult, TrialSpec
from harness.execute import devices
from harness.execute.rung_gate import gate_for

log = logging.getLogger(__name__)

#: This process's throughput measurements, ``perf_cache_key -> PerfResult`` (a worker process
#: serves many units; ``harness.train.loop`` fills it).
PERF_CACHE: dict = {}

#: A unit's checkpoint handles: ``(harness.train.checkpoint.UnitCheckpoints, its trial ids)``.
Checkpoints = list[tuple[Any, list[str]]]


def load_dataset_of(spec: TrialSpec):
    """The trial's dataset (``harness.data.sources.load_dataset`` keeps the recent ones per process).

    Raises:
      ValueError: the data's content digest is no longer the one in the trial's identity (a shard
        rewritten while the sweep runs): the trial fails with that reason."""
    from harness.data.kinds import dataset_digest
    from harness.data.sources import load_dataset

    hp = spec.hparams("dataset")
    if spec.dataset_digest and (now := dataset_digest(spec.dataset, hp)) != spec.dataset_digest:
        raise ValueError(f"dataset {spec.dataset!r} changed while the sweep ran (digest "
                         f"{spec.dataset_digest} -> {now or 'unreadable'}); the next sweep trains its "
                         f"trials on the new data")
    return load_dataset(spec.dataset, **hp)


def failed_result(spec: TrialSpec, exc: BaseException) -> TrialResult:
    """A ``failed`` result whose ``reason`` is the exception's whole traceback."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return TrialResult(spec=spec, status="failed", reason=tb)


def _first_line(e: BaseException, limit: int = 300) -> str:
    """``"ValueError: message"``: the exception's type and the first line of its message."""
    text = "".join(traceback.format_exception_only(type(e), e)).strip()
    return (text.splitlines() or [type(e).__name__])[0][:limit]


def needs_perf_measurement(unit: list[TrialSpec]) -> bool:
    """Whether training ``unit`` measures a throughput this process has not measured yet."""
    from harness.train.perf import perf_cache_key

    return any(perf_cache_key(s) not in PERF_CACHE for s in unit)


def _to_measure(units: list[list[TrialSpec]]) -> dict:
    """One trial per perf key :data:`PERF_CACHE` lacks, alone-trained trials first; AlgoPerf
    submissions and multi-device trials left out."""
    from harness.train.perf import perf_cache_key

    chosen: dict = {}
    for s in (s for u in sorted(units, key=len) for s in u):
        if s.optimizer_api == "algoperf" or s.devices != 1:
            continue
        key = perf_cache_key(s)
        if key not in PERF_CACHE and key not in chosen:
            chosen[key] = s
    return chosen


def measure_throughput(units: list[list[TrialSpec]],
                       on_stage: Callable[[str, str], None] | None = None) -> float:
    """Measure, interleaved, the step of every distinct perf key of ``units`` that :data:`PERF_CACHE`
    lacks (``harness.train.perf.measure_interleaved``), before any of them trains, and store the
    figures in :data:`PERF_CACHE`, where the trainer finds them (it then only checks them against
    its unit's clock). Each program comes from ``harness.train.program.program_for``, preferring a
    trial that trains alone (not vmapped), whose compiled chunk training then reuses. Left out:
    AlgoPerf submissions (their runner times their own calls) and multi-device trials (measured
    when their unit trains). Never raises for a trial: one whose program cannot be built is left to
    its unit (which records the error); a measurement that fails is logged and each unit measures
    its own. Returns the seconds of it spent compiling (the chunks training reuses, and lowering
the one-step programs for their FLOPs: the time budget's ``compile``, not ``throughput``).
    ``on_stage(name, text)``, when given, hears the count: ``"building program 2 of 7 for the
    throughput measurement"``, then ``"timing 7 programs, interleaved"`` and, after each round,
    ``"...: round 3 of at most 10, ETA 4 s"``. The rounds cost at most a share of the training the
    units will do (:func:`harness.train.rounds.bounded_rounds`)."""
    from harness.train.perf import measure_interleaved, perf_cache_key
    from harness.train.program import program_for

    devices.use_assigned_device()
    chosen = _to_measure(units)
    say = on_stage or (lambda name, text: None)
    progs = []
    for i, s in enumerate(chosen.values(), 1):
        say("throughput", f"building program {i} of {len(chosen)} for the throughput measurement "
                          f"(compiled once; training reuses it)")
        try:
            progs.append((program_for(s, load_dataset_of(s)), s))
        except Exception:  # its unit trains it and records why
            continue
    what = f"timing {len(progs)} program{'s' * (len(progs) != 1)}, interleaved"
    if progs:
        say("throughput", f"{what} (one step time per program, under the same load)")

    def on_round(done: int, planned: int, left_s: float) -> None:  # a line per round on a pipe
        say(f"throughput round {done}", f"{what}: round {done} of at most {planned}, ETA {left_s:.0f} s")

    steps: dict = {}
    for s in (s for u in units for s in u):  # what each program will train: the timing's bound
        steps[perf_cache_key(s)] = steps.get(perf_cache_key(s), 0) + s.steps
    try:
        return sum(p.compile_s for p in measure_interleaved(progs, PERF_CACHE, steps, on_round).values())
    except Exception as e:
        log.warning("the interleaved throughput measurement failed (%s); each unit measures its own",
                    _first_line(e))
        return 0.0


def timing_note() -> str:
    """The time line's words on the last interleaved timing when its cost bound cut its rounds:
    ``"timing: 6 rounds (20% bound)"``; ``""`` when it did not."""
    from harness.train.perf import LAST_TIMING
    from harness.train.rounds import TIMING_SHARE

    if not LAST_TIMING.get("bounded"):
        return ""
    return f"timing: {LAST_TIMING['rounds']} rounds ({TIMING_SHARE:.0%} bound)"


def _gate(ctx: RunContext) -> dict:
    """``{"gate": ...}`` for the trainer when the sweep stops trials early, else ``{}`` (a trainer
    replaced by a test keeps its signature)."""
    g = gate_for(ctx)
    return {} if g is None else {"gate": g}


def _unit_checkpoints(specs: list[TrialSpec], ctx: RunContext, batched: int | None):
    """The unit's :class:`harness.train.checkpoint.UnitCheckpoints` (``None`` when off)."""
    from harness.train import checkpoint

    root = ctx.checkpoint_dir or checkpoint.root_for(ctx.tracking_uri)
    return checkpoint.for_unit(root, ctx.experiment_id, [s.trial_id for s in specs], batched,
                               ctx.checkpoint_every, keep_final=ctx.keep_final_checkpoint)


def _train_batch(specs: list[TrialSpec], ctx: RunContext, cks: Checkpoints) -> tuple[list | None, str]:
    """Train ``specs`` together: ``(results, "")``, or ``(None, why)`` when the batch raised or
    returned the wrong number of results (its checkpoint handle is then released)."""
    from harness.train import loop as trainer

    ck = _unit_checkpoints(specs, ctx, len(specs))
    try:
        res = trainer.run_trials_batched(specs, dataset=load_dataset_of(specs[0]), perf_cache=PERF_CACHE,
                                         measure_perf=ctx.measure_perf, checkpoints=ck, **_gate(ctx))
        if len(res) == len(specs):
            if ck is not None:
                cks.append((ck, [s.trial_id for s in specs]))
            return list(res), ""
        why = f"the batch returned {len(res)} results for {len(specs)} trials"
    except Exception as e:
        why = _first_line(e)
    if ck is not None:
        ck.release()
    return None, why


def train_unit(specs: list[TrialSpec], ctx: RunContext, cks: Checkpoints | None = None) -> list[TrialResult]:
    """Train a unit (see the module docstring); one result per spec, in order.

    The unit's checkpoint handles are appended to ``cks`` (the caller ends them with
    :func:`end_checkpoints` once the results are in the store). Raises only what is not an
    ``Exception`` (``KeyboardInterrupt``...): a trial's own error is its ``failed`` result.
    """
    devices.use_assigned_device()  # HARNESS_DEVICE_IDS: the worker's first device is JAX's default
    with one_line_warnings():  # a condition is a tag and one line, never a Python warning
        return _with_conditions(_with_device_tags(_train_unit(specs, ctx, [] if cks is None else cks)))


def _train_unit(specs: list[TrialSpec], ctx: RunContext, cks: Checkpoints) -> list[TrialResult]:
    """:func:`train_unit`'s training: the batch, else one trial at a time."""
    from harness.train import loop as trainer

    fallback = ""
    if len(specs) > 1:
        results, fallback = _train_batch(specs, ctx, cks)
        if results is not None:
            return results
        log.warning("a vmapped batch of %d trials (%s, ...) failed: %s; training them one at a time",
                    len(specs), specs[0].trial_id, fallback)
    out = []
    for s in specs:
        ck = _unit_checkpoints([s], ctx, None)
        try:
            out.append(trainer.run_trial(s, dataset=load_dataset_of(s), perf_cache=PERF_CACHE,
                                         measure_perf=ctx.measure_perf, checkpoints=ck, **_gate(ctx)))
        except Exception as e:
            out.append(failed_result(s, e))
        if ck is not None:
            cks.append((ck, [s.trial_id]))
        if fallback:
            out[-1].extra["batch_fallback_reason"] = fallback
    return out


def _with_conditions(results: list[TrialResult]) -> list[TrialResult]:
    """Record in each result what the trial met that the sweep says in one line and its run keeps
    as a tag (:mod:`harness.core.conditions`): ``extra["flops_mismatch"]`` when XLA's FLOP count of
    its step and the analytic one disagree (``harness.train.timing.flops_agree``)."""
    from harness.train.timing import flops_agree

    for r in results:
        p = r.perf
        if p is not None and flops_agree(p.flops_per_step, p.flops_per_step_analytic) is False:
            r.extra["flops_mismatch"] = (f"XLA's cost analysis counts {p.flops_per_step:.3g} FLOPs/step, "
                                         f"the analytic count {p.flops_per_step_analytic:.3g}")
    return results


def _with_device_tags(results: list[TrialResult]) -> list[TrialResult]:
    """Record in each result the devices it trained on: ``extra["device_tags"]``."""
    by_n: dict = {}
    for r in results:  # the spec's parallelism.devices (1, N or "all") of the mesh it trained on
        n = getattr(r.spec, "devices", 1)
        try:
            if n not in by_n:
                by_n[n] = devices.device_tags(n)
        except Exception:  # never fail a trial for its provenance
            continue
        r.extra.setdefault("device_tags", by_n[n])
    return results


def end_checkpoints(cks: Checkpoints, results: list[TrialResult], logged: set[str]) -> None:
    """Remove the checkpoints of units whose trials all trained to an end and are in the store
    (``logged``); keep (unlock) the others, so that the next attempt resumes them."""
    ok = {r.spec.trial_id for r in results if r.status != "failed"} & logged
    for ck, ids in cks:
        if all(t in ok for t in ids):
            ck.cleanup()
        else:
            ck.release()


def release_checkpoints(cks: Checkpoints) -> None:
    """Unlock every handle of ``cks`` and keep its files (training was interrupted)."""
    for ck, _ in cks:
        ck.release()


def final_checkpoint(cks: Checkpoints, trial_id: str) -> str | None:
    """The final-step checkpoint directory of ``trial_id`` (``None``: none kept)."""
    for ck, ids in cks:
        if trial_id in ids:
            return ck.final_step_dir()
    return None
