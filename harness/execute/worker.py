"""One work unit (a trial, or trials trained together under ``jax.vmap``) → nested MLflow runs.

This module is what every executor ships to its workers (in-process, local processes, Ray). It is
the only place where a trial's child run is created, filled and ended:

- :class:`RunContext`: the small picklable record a worker needs (store URI, experiment, parent run,
  sweep id and name, provenance).
- :func:`execute_unit`: runs one unit and returns one :class:`TrialOutcome` per spec. It is
  idempotent: a trial whose ``harness.trial_id`` already has a FINISHED run is skipped (its outcome
  is read back from that run), and RUNNING runs of the trial left by a dead invocation are marked
  KILLED before the trial is trained again, so a retried unit never makes a second FINISHED run.
  With ``background=True`` (the in-process executor) the unit trains first and every MLflow call
  of its trials (the FINISHED check, run creation, metrics, artifacts, end status) happens on one
  background thread while the next unit trains; :func:`flush_logging` waits for it (and runs
  before any unit whose throughput is still to be measured, so timing never overlaps a write). Measured on
  the quickstart sweep (2 CPU cores): tracking on the critical path 0.25% of the trials' wall-clock,
  against ~5% when written synchronously.
  A trial that raises ends FAILED (tag ``status=failed``, ``traceback.txt`` artifact) and
  :func:`execute_unit` itself never raises for a trial's own failure. A diverged trial ends FINISHED
  with tags ``status=diverged`` and ``diverged_step``.

Each child run gets: tags ``harness.trial_id``, ``harness.sweep``, ``harness.sweep_id``,
``harness.kind=trial``, ``model``, ``optimizer``, ``schedule``, ``dataset``, ``seed``, ``status``,
versions, ``device_kind``, ``git_commit``, ``mlflow.parentRunId``;
metrics ``train/loss``; on the validation split at the eval steps ``valid/loss``,
``valid/accuracy`` and ``valid/<name>`` for the model's other metrics, with ``time/wall_s``; on the
test split once, at the last step, ``test/loss``, ``test/accuracy``, ``test/<name>`` (absent for a
diverged trial); all with ``step=`` the training step and timestamps = training start + curve
wall-clock (``train/loss`` at ≤ :data:`MAX_TRAIN_POINTS` evenly spaced steps including the first
and last, so that tracking stays a small fraction of a trial), ``final/valid_loss`` and
``final/valid_accuracy`` (last step), ``perf/*`` (``step=0``; with ``perf/num_devices`` and
``perf/examples_per_sec_per_device``, the tag ``perf.mesh`` for a step timed on a mesh) and
``convergence/*``
(``step=steps_to_target``, the target being on validation); params
``TrialSpec.flat_params()`` plus ``target.mode``; tags ``harness.devices`` (the device(s) the trial
trained on, e.g. ``cpu:2`` or ``cuda:0,1`` with host-level ids), ``harness.device_env`` (the device and
memory variables of the training process, e.g. ``HARNESS_DEVICE_IDS=2``) and, under ``--jobs N``,
``harness.device_env_set`` (``before-jax-import``; see :mod:`harness.devices`); for a trial trained on
several devices ``harness.mesh`` (``"batch=4"``); ``harness.batching`` (how its unit trained and why,
:mod:`harness.batching`; set by the sweep through ``RunContext.trial_tags``); ``harness.reason`` (last
line of the traceback, or why it diverged) and ``status_reason``; artifacts ``trial.json`` (the
resolved spec), ``curves.csv``
(``split,step,wall_s,loss,accuracy`` with ``split`` one of ``train`` (every step), ``valid``,
``test``) and, for a failed trial, ``traceback.txt``; the training split as a dataset input.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import csv
import inspect
import json
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.execute import devices
from harness.core.names import (
    TAG_KILLED_REASON,
    TAG_KIND,
    TAG_OWNER,
    TAG_PARENT_RUN,
    TAG_SWEEP,
    TAG_SWEEP_ID,
    TAG_TRIAL_ID,
)
from harness.tracking.client import client_for, runs_of_trial
from harness.tracking.errors import TrackingUnavailableError, is_outage, one_line
from harness.tracking.health import HEALTH, store_reachable
from harness.tracking.liveness import kill_stale, owner_tags
from harness.tracking.provenance import environment_tags
from harness.tracking.run_data import MetricBuffer, finite, log_dataset_input
from harness.core.spec import TrialResult, TrialSpec

#: Tag of a trial trained on several devices: its mesh shape, ``"batch=4"`` / ``"trials=4"``
#: (:mod:`harness.parallel`); absent for one-device trials.
MESH_TAG = "harness.mesh"


@dataclass(frozen=True)
class RunContext:
    """What a worker needs to log a unit; picklable (plain strings and bools).

    Attributes:
      tracking_uri: MLflow store URI (``sqlite:///…`` already created, or ``http://…`` checked).
      experiment_id: the sweep's experiment.
      parent_run_id: the invocation's parent run (children get ``mlflow.parentRunId``).
      sweep_id: stable id of the sweep (hash of its trial ids), tag ``harness.sweep_id``.
      sweep: the sweep's name (tag ``harness.sweep``; also the experiment's name).
      git_commit: commit of the working tree that launched the sweep.
      measure_perf: whether the trainer measures throughput.
      log_dataset: log the training split as an MLflow dataset input.
      claim_wait_s: on a SQLite store, how long a unit waits for a trial's claim held by another
        invocation on this machine (0: it does not wait; the trial's outcome is ``deferred``).
      trial_tags: ``trial_id`` -> extra tags of that trial's run (e.g. ``harness.search``, the
        search method that sampled it, and ``harness.search_index``, its index in the sequence).
      checkpoint_every: mid-trial checkpoint cadence (:func:`harness.train.checkpoint.parse_every`:
        steps, ``"10min"``, ``"off"``; ``"default"`` = one minute, spaced by the save's cost). Never
        part of a trial's id.
      checkpoint_dir: checkpoint root (``""``: :func:`harness.train.checkpoint.root_for` the store).
      keep_final_checkpoint: log each trial's final training state as its ``checkpoint/`` artifact.
    """

    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    sweep_id: str
    sweep: str
    git_commit: str = "unknown"
    measure_perf: bool = True
    log_dataset: bool = True
    claim_wait_s: float = 0.0
    trial_tags: dict[str, dict[str, str]] = field(default_factory=dict)
    checkpoint_every: str = "default"
    checkpoint_dir: str = ""
    keep_final_checkpoint: bool = False


@dataclass
class TrialOutcome:
    """Picklable summary of one trial for the progress bar, the summary table and ``status``.

    ``status`` is ``finished``, ``diverged`` or ``failed``; ``skipped`` is true when a FINISHED run
    already existed (nothing was trained). Metrics are ``None`` where absent or non-finite:
    ``final_valid_*`` the last validation evaluation (what selection reads), ``test_*`` the test
    split at the end (what the summary reports for the selected configuration). A run logged
    before the three-split protocol has only ``eval/*``: read back as ``final_valid_*``, with
    ``test_*`` ``None``.
    ``seconds_to_target`` in s, ``examples_per_sec`` in examples/s, ``train_seconds``,
    ``tracking_seconds`` and ``wall_seconds`` in s (training dispatches as the trainer counts them,
    MLflow calls for this trial, and the trial's share of its unit's whole wall-clock).
    """

    trial_id: str
    status: str
    run_id: str | None = None
    run_name: str = ""
    model: str = ""
    optimizer: str = ""
    schedule: str = ""
    dataset: str = ""
    seed: int | None = None
    config: str = ""
    final_valid_accuracy: float | None = None
    final_valid_loss: float | None = None
    test_accuracy: float | None = None
    test_loss: float | None = None
    steps_to_target: int | None = None
    seconds_to_target: float | None = None
    examples_per_sec: float | None = None
    train_seconds: float = 0.0
    tracking_seconds: float = 0.0
    wall_seconds: float = 0.0
    reason: str = ""
    skipped: bool = False
    target_metric: str = "valid/accuracy"
    extra: dict[str, Any] = field(default_factory=dict)
    #: Another invocation on this machine holds the trial's claim (it is training or writing it):
    #: nothing was trained here; the sweep comes back to it once the claim is free.
    deferred: bool = False
    #: The result could not be written to the store and is in the local spool (``harness.tracking.spool``).
    spooled: bool = False


#: At most this many ``train/loss`` points are logged per trial (``curves.csv`` has every step).
MAX_TRAIN_POINTS = 250

# Per-process caches (a worker process serves many units).
_PERF_CACHE: dict = {}
_DIGESTS: dict = {}
_ENV_TAGS: dict[str, str] = {}


def run_name(spec: TrialSpec) -> str:
    """Readable run name, e.g. ``mlp-adam-cosine-lr0.001-s0``."""
    parts = [spec.model, spec.optimizer, spec.schedule]
    lr = spec.hparams("optimizer").get("step_size")
    if lr is not None:
        parts.append(f"lr{lr:g}" if isinstance(lr, int | float) else f"lr{lr}")
    parts.append(f"s{spec.seed}")
    return "-".join(str(p) for p in parts)


def config_label(spec: TrialSpec) -> str:
    """The trial's configuration without its seed, e.g. ``cosine step_size=0.1 width=64 bs=64``."""
    bits = [spec.schedule]
    for which in ("optimizer", "schedule", "model"):
        for k, v in spec.hparams(which).items():  # type: ignore[arg-type]
            bits.append(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}")
    bits.append(f"bs={spec.batch_size}")
    return " ".join(bits)


def _base_outcome(spec: TrialSpec, status: str) -> TrialOutcome:
    return TrialOutcome(
        trial_id=spec.trial_id, status=status, run_name=run_name(spec), model=spec.model,
        optimizer=spec.optimizer, schedule=spec.schedule, dataset=spec.dataset, seed=spec.seed,
        config=config_label(spec), target_metric=spec.target.metric if spec.target else "valid/accuracy")


def outcome_from_run(spec: TrialSpec, run) -> TrialOutcome:
    """Outcome of an existing FINISHED/FAILED run (latest metric values, ``status`` tag)."""
    m, tags = run.data.metrics, run.data.tags
    status = tags.get("status") or ("finished" if run.info.status == "FINISHED" else "failed")
    o = _base_outcome(spec, status)
    o.run_id = run.info.run_id
    o.final_valid_accuracy = m.get("valid/accuracy", m.get("eval/accuracy"))
    o.final_valid_loss = m.get("valid/loss", m.get("eval/loss"))
    o.test_accuracy = m.get("test/accuracy")
    o.test_loss = m.get("test/loss")
    o.steps_to_target = int(m["convergence/steps_to_target"]) if "convergence/steps_to_target" in m else None
    o.seconds_to_target = m.get("convergence/seconds_to_target")
    o.examples_per_sec = m.get("perf/examples_per_sec")
    return o


def _tags(spec: TrialSpec, ctx: RunContext) -> dict[str, str]:
    if not _ENV_TAGS:
        _ENV_TAGS.update(environment_tags())
    return {
        TAG_TRIAL_ID: spec.trial_id, TAG_SWEEP: ctx.sweep,
        TAG_SWEEP_ID: ctx.sweep_id, TAG_KIND: "trial",
        TAG_PARENT_RUN: ctx.parent_run_id, "model": spec.model, "optimizer": spec.optimizer,
        "schedule": spec.schedule, "dataset": spec.dataset, "seed": str(spec.seed),
        "git_commit": ctx.git_commit, **_ENV_TAGS, **ctx.trial_tags.get(spec.trial_id, {}),
        **owner_tags(),
        **({"workload": spec.workload} if spec.workload else {}),
    }


def _dataset(spec: TrialSpec):
    """The trial's dataset (``harness.data.sources.load_dataset`` keeps the recent ones per process)."""
    from harness.data.sources import load_dataset

    return load_dataset(spec.dataset, **spec.hparams("dataset"))


def _failed(spec: TrialSpec, exc: BaseException) -> TrialResult:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return TrialResult(spec=spec, status="failed", reason=tb)


def _checkpoints(specs: list[TrialSpec], ctx: RunContext, batched: int | None):
    """The unit's :class:`harness.train.checkpoint.UnitCheckpoints` (``None`` when off)."""
    from harness.train import checkpoint

    root = ctx.checkpoint_dir or checkpoint.root_for(ctx.tracking_uri)
    return checkpoint.for_unit(root, ctx.experiment_id, [s.trial_id for s in specs], batched,
                               ctx.checkpoint_every, keep_final=ctx.keep_final_checkpoint)


def _train(specs: list[TrialSpec], ctx: RunContext, cks: list | None = None) -> list[TrialResult]:
    """Train a unit; a raising batch falls back to one trial at a time so that only the trials
    that raise on their own are FAILED. The unit's checkpoint handles are appended to ``cks`` as
    ``(handle, trial ids)`` (the caller removes them once the results are in the store)."""
    from harness.train import loop as trainer

    devices.use_assigned_device()  # HARNESS_DEVICE_IDS: the worker's first device is JAX's default
    cks = [] if cks is None else cks
    if len(specs) > 1:
        ck = _checkpoints(specs, ctx, len(specs))
        try:
            ds = _dataset(specs[0])
            res = trainer.run_trials_batched(specs, dataset=ds, perf_cache=_PERF_CACHE,
                                             measure_perf=ctx.measure_perf, checkpoints=ck)
            if len(res) == len(specs):
                if ck is not None:
                    cks.append((ck, [s.trial_id for s in specs]))
                return _with_device_tags(list(res))
        except Exception:
            pass
        if ck is not None:
            ck.release()
    out = []
    for s in specs:
        ck = _checkpoints([s], ctx, None)
        try:
            out.append(trainer.run_trial(s, dataset=_dataset(s), perf_cache=_PERF_CACHE,
                                         measure_perf=ctx.measure_perf, checkpoints=ck))
        except Exception as e:
            out.append(_failed(s, e))
        if ck is not None:
            cks.append((ck, [s.trial_id]))
    return _with_device_tags(out)


def _with_device_tags(results: list[TrialResult]) -> list[TrialResult]:
    """Record in each result the devices it trained on, here in the training process (a spooled
    result is written later, possibly by another process): ``extra["device_tags"]``."""
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


def _end_checkpoints(cks: list, results: list[TrialResult], logged: set[str]) -> None:
    """Remove the checkpoints of units whose trials all trained to an end and are in the store
    (``logged``); keep (unlock) the others, so that the next attempt resumes them."""
    ok = {r.spec.trial_id for r in results if r.status != "failed"} & logged
    for ck, ids in cks:
        if all(t in ok for t in ids):
            ck.cleanup()
        else:
            ck.release()


def _final_checkpoint(cks: list, trial_id: str) -> str | None:
    for ck, ids in cks:
        if trial_id in ids:
            return ck.final_step_dir()
    return None


def _write_curves(res: TrialResult, path: Path) -> None:
    c = res.curves
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["split", "step", "wall_s", "loss", "accuracy"])
        for s, t, loss in zip(c.train_step, c.train_wall_s, c.train_loss, strict=False):
            w.writerow(["train", s, f"{t:.6f}", loss, ""])
        for s, t, loss, acc in zip(c.eval_step, c.eval_wall_s, c.eval_loss, c.eval_accuracy, strict=False):
            w.writerow(["valid", s, f"{t:.6f}", loss, acc])
        if res.test_loss is not None and c.eval_step:
            acc = "" if res.test_accuracy is None else res.test_accuracy
            w.writerow(["test", c.eval_step[-1], f"{c.eval_wall_s[-1]:.6f}", res.test_loss, acc])


def train_rows_to_log(n: int, max_points: int = MAX_TRAIN_POINTS) -> list[int]:
    """Indices of the train curve rows logged as ``train/loss`` metrics: all of them when
    ``n <= max_points``, else ``max_points`` evenly spaced ones including the first and the last."""
    if n <= max_points:
        return list(range(n))
    return sorted({round(i * (n - 1) / (max_points - 1)) for i in range(max_points)})


def resolved_defaults(spec: TrialSpec) -> dict[str, str]:
    """The hyperparameters a trial used without naming them, as MLflow params: each builder's
    defaults (``optimizer.b1``, ``model.depth``, ...) and the ``schedule.total_steps`` the trainer
    fills in (the trial's step budget). The config's own values are :meth:`TrialSpec.flat_params`.
    """
    from harness.config.registries import builder_hparams, default_registries

    reg = default_registries()
    out: dict[str, str] = {}
    for kind, registry in (("model", reg.models), ("optimizer", reg.optimizers),
                           ("schedule", reg.schedules), ("dataset", reg.datasets)):
        builder = registry.get(getattr(spec, kind))
        if builder is None:  # e.g. a tfds: dataset, or the bare "constant" schedule
            continue
        out.update({f"{kind}.{h.name}": str(h.default)
                    for h in builder_hparams(kind, builder).values() if not h.required})
        if kind == "schedule" and "total_steps" in inspect.signature(builder).parameters:
            out["schedule.total_steps"] = str(spec.steps)
    return out


def _log_floor_gap(buf: MetricBuffer, res: TrialResult, t0_ms: int) -> None:
    """For datasets with a known loss floor (``markov_lm``): ``valid/nats_above_entropy`` = validation
    loss − floor at every evaluation, ``final/valid_nats_above_entropy`` at the last one, and the
    floor and entropy rate themselves (``dataset/loss_floor``, ``dataset/entropy_rate``, step 0)."""
    floor = res.extra.get("loss_floor")
    if floor is None:
        return
    c = res.curves
    for s, t, lv in zip(c.eval_step, c.eval_wall_s, c.eval_loss, strict=False):
        buf.add("valid/nats_above_entropy", lv - floor, s, t0_ms + int(t * 1000))
    if res.final_valid_loss is not None and c.eval_step:
        buf.add("final/valid_nats_above_entropy", res.final_valid_loss - floor, c.eval_step[-1])
    buf.add("dataset/loss_floor", floor, 0)
    if res.extra.get("entropy_rate") is not None:
        buf.add("dataset/entropy_rate", res.extra["entropy_rate"], 0)


def _log_result(client, run_id: str, res: TrialResult, t0_ms: int, ctx: RunContext) -> None:
    buf = MetricBuffer()
    c = res.curves
    for i in train_rows_to_log(len(c.train_step)):
        buf.add("train/loss", c.train_loss[i], c.train_step[i], t0_ms + int(c.train_wall_s[i] * 1000))
    for j, (s, t, lv, av) in enumerate(zip(c.eval_step, c.eval_wall_s, c.eval_loss, c.eval_accuracy,
                                           strict=False)):
        ts = t0_ms + int(t * 1000)
        buf.add("valid/loss", lv, s, ts)
        buf.add("valid/accuracy", av, s, ts)
        for name, vals in c.eval_metrics.items():
            buf.add(f"valid/{name}", vals[j] if j < len(vals) else None, s, ts)
        buf.add("time/wall_s", t, s, ts)
    last = c.eval_step[-1] if c.eval_step else (c.train_step[-1] if c.train_step else 0)
    t_last = t0_ms + int((c.eval_wall_s[-1] if c.eval_wall_s else 0.0) * 1000)
    buf.add("final/valid_loss", res.final_valid_loss, last)
    buf.add("final/valid_accuracy", res.final_valid_accuracy, last)
    buf.add("test/loss", res.test_loss, last, t_last)
    buf.add("test/accuracy", res.test_accuracy, last, t_last)
    for name, v in res.test_metrics.items():
        buf.add(f"test/{name}", v, last, t_last)
    _log_floor_gap(buf, res, t0_ms)
    p = res.perf
    if p is not None:
        for key in ("step_time_ms", "step_time_ms_p10", "step_time_ms_p90", "examples_per_sec",
                    "compile_s", "flops_per_step", "utilization", "peak_flops",
                    "examples_per_sec_per_device", "num_devices"):
            buf.add(f"perf/{key}", getattr(p, key), 0)
    if res.steps_to_target is not None:
        buf.add("convergence/steps_to_target", res.steps_to_target, res.steps_to_target)
        buf.add("convergence/seconds_to_target", res.seconds_to_target, res.steps_to_target)
    tags = {"status": res.status, **(res.extra.get("device_tags") or {})}
    ck = res.extra.get("checkpoint") or {}
    if ck.get("resumed_from_step"):
        tags["harness.resumed_from_step"] = str(ck["resumed_from_step"])
    if p is not None:
        tags["perf.dtype"] = p.dtype  # utilisation counts FLOPs against this dtype's peak
        if p.mesh:
            tags["perf.mesh"] = p.mesh  # the mesh the timed step ran on
    if res.extra.get("mesh"):
        tags[MESH_TAG] = res.extra["mesh"]  # the mesh the trial trained on, "batch=4"
    if res.diverged_step is not None:
        tags["diverged_step"] = str(res.diverged_step)
    if res.reason:
        tags["harness.reason"] = (res.reason.strip().splitlines() or [""])[-1][:500]
        if res.status != "failed":
            tags["status_reason"] = res.reason[:5000]
    params = {**resolved_defaults(res.spec), **res.spec.flat_params()}
    if res.spec.target is not None:
        params["target.mode"] = res.spec.target.mode
    buf.flush(client, run_id, params=params, tags=tags)
    with tempfile.TemporaryDirectory(prefix="harness-") as d:
        dp = Path(d)
        (dp / "trial.json").write_text(json.dumps({"trial_id": res.spec.trial_id, **res.spec.to_dict()},
                                                  indent=2, sort_keys=True, default=str))
        _write_curves(res, dp / "curves.csv")
        if res.status == "failed":
            (dp / "traceback.txt").write_text(res.reason)
        client.log_artifacts(run_id, d)


def _outcome(res: TrialResult, run_id: str | None, tracking_s: float) -> TrialOutcome:
    o = _base_outcome(res.spec, res.status)
    o.run_id = run_id
    fin = finite
    o.final_valid_accuracy = res.final_valid_accuracy if fin(res.final_valid_accuracy) else None
    o.final_valid_loss = res.final_valid_loss if fin(res.final_valid_loss) else None
    o.test_accuracy = res.test_accuracy if fin(res.test_accuracy) else None
    o.test_loss = res.test_loss if fin(res.test_loss) else None
    o.steps_to_target = res.steps_to_target
    o.seconds_to_target = res.seconds_to_target
    o.examples_per_sec = res.perf.examples_per_sec if res.perf and fin(res.perf.examples_per_sec) else None
    o.train_seconds = res.train_seconds
    o.tracking_seconds = tracking_s
    if res.status == "failed":
        o.reason = (res.reason.strip().splitlines() or [""])[-1][:300]
    elif res.diverged_step is not None:
        o.reason = f"diverged at step {res.diverged_step}"
    return o


def _finish_run(client, rid: str, res: TrialResult, t0_ms: int, ctx: RunContext,
                final_checkpoint: str | None = None) -> None:
    """Log one trained trial and end its run (FINISHED, or FAILED for a trial that raised);
    ``final_checkpoint`` (a step directory) becomes its ``checkpoint/`` artifact.

    A write that fails leaves the run RUNNING (never FINISHED with part of its data): the caller
    spools the result, and the spool's replay ends that run KILLED and writes a complete one.
    """
    _log_result(client, rid, res, t0_ms, ctx)
    if final_checkpoint and ctx.keep_final_checkpoint and res.status != "failed":
        client.log_artifacts(rid, final_checkpoint, "checkpoint")
    if ctx.log_dataset and res.status != "failed":
        # provenance only: never fail a trial for it
        with contextlib.suppress(Exception):
            log_dataset_input(client, rid, _dataset(res.spec), res.spec.dataset, _DIGESTS)
    client.set_terminated(rid, status="FAILED" if res.status == "failed" else "FINISHED")


def _claim(client, unit: list[TrialSpec], ctx: RunContext,
           outcomes: dict[str, TrialOutcome]) -> list[TrialSpec]:
    """The specs of ``unit`` still to train: a trial with a FINISHED run gets a ``skipped`` outcome
    in ``outcomes``; RUNNING runs whose owner is gone are marked KILLED (never a live owner's)."""
    todo = []
    for spec in unit:
        runs = runs_of_trial(client, ctx.experiment_id, spec.trial_id)
        done = [r for r in runs if r.info.status == "FINISHED"]
        if done:
            o = outcome_from_run(spec, done[0])
            o.skipped = True
            outcomes[spec.trial_id] = o
            continue
        kill_stale(client, runs)
        todo.append(spec)
    return todo


# --------------------------------------------------------------------------- claims (SQLite)


#: How long a deferred trial waits for the claim of another invocation (that is training it).
CLAIM_WAIT_S = 24 * 3600.0


def _claims_db(ctx: RunContext) -> Path | None:
    """The SQLite file whose side directory holds the trial claims, or ``None`` (a server, or
    ``HARNESS_CLAIMS=0``): claims only coordinate processes of one machine."""
    import os

    uri = ctx.tracking_uri
    if not uri.startswith("sqlite:///") or os.environ.get("HARNESS_CLAIMS", "1") == "0":
        return None
    return Path(uri[len("sqlite:///"):])


def _spooled_outcome(spec: TrialSpec, ctx: RunContext) -> TrialOutcome | None:
    from harness.tracking import spool

    e = spool.pending_trials(ctx.tracking_uri).get(spec.trial_id)
    if e is None:
        return None
    o = _outcome(e["result"], None, 0.0)
    o.skipped = o.spooled = True
    return o


def _done_elsewhere(spec: TrialSpec, ctx: RunContext) -> TrialOutcome | None:
    """A trial whose claim marker says a run was written: its FINISHED run's outcome (or its
    spooled result's), else ``None`` (train it)."""
    o = _spooled_outcome(spec, ctx)
    if o is not None:
        return o
    try:
        client = client_for(ctx.tracking_uri)
        done = [r for r in runs_of_trial(client, ctx.experiment_id, spec.trial_id)
                if r.info.status == "FINISHED"]
    except Exception as e:
        HEALTH.failed(e)
        return None
    if not done:
        return None
    o = outcome_from_run(spec, done[0])
    o.skipped = True
    return o


def _take_claims(unit: list[TrialSpec], ctx: RunContext, wait_s: float):
    """Claim the trials of ``unit`` (sorted by trial id: deadlock-free when waiting).

    Returns ``(todo, claims, outcomes)``: the specs to train, ``{trial_id: Claim}`` held for them,
    and outcomes for the others (``deferred``: another process holds the claim; ``skipped``: done
    meanwhile, by another invocation).
    """
    from harness.tracking.claims import NO_CLAIMS, Claim

    db = _claims_db(ctx)
    if db is None:
        return list(unit), {}, {}
    claims: dict = {}
    outcomes: dict[str, TrialOutcome] = {}
    for spec in sorted(unit, key=lambda s: s.trial_id):
        c = Claim.try_take(db, spec.trial_id, wait_s=wait_s)
        if c is NO_CLAIMS:  # e.g. a side directory that cannot be written: proceed unclaimed
            continue
        if c is None:
            o = _base_outcome(spec, "deferred")
            o.deferred = True
            outcomes[spec.trial_id] = o
            continue
        if c.marker():  # a run of this trial was written (or spooled) since the claims exist
            done = _done_elsewhere(spec, ctx)
            if done is not None:
                c.release()
                outcomes[spec.trial_id] = done
                continue
        claims[spec.trial_id] = c
    todo = [s for s in unit if s.trial_id not in outcomes]
    return todo, claims, outcomes


def _release(claim, marker: str | None = None) -> None:
    if claim is not None:
        if marker:
            claim.mark(marker)
        claim.release()


# --------------------------------------------------------------------------- spool


#: While the store is down, a background write tries it again at most this often (seconds);
#: results meanwhile go straight to the spool.
PROBE_S = 5.0


def _spool_entry(res: TrialResult, t0_ms: int, ctx: RunContext, stale_run_id: str | None,
                 error: BaseException) -> dict[str, Any]:
    import dataclasses

    ctx_d = dataclasses.asdict(ctx)
    tid = res.spec.trial_id
    ctx_d["trial_tags"] = {tid: ctx.trial_tags[tid]} if tid in ctx.trial_tags else {}  # not the sweep's
    return {"kind": "trial", "uri": ctx.tracking_uri, "ctx": ctx_d, "t0_ms": t0_ms,
            "result": res, "stale_run_id": stale_run_id, "error": one_line(error),
            "spooled_at": time.time(), "owner": owner_tags()[TAG_OWNER]}


def _spool(res: TrialResult, t0_ms: int, ctx: RunContext, stale_run_id: str | None,
           error: BaseException) -> dict[str, Any]:
    """Put a result that could not be written into the local spool (durably); returns the entry.

    Raises:
      OSError: the spool cannot be written either (the result is then lost: reported loudly).
    """
    from harness.tracking import spool

    if is_outage(error):
        HEALTH.failed(error)
    else:
        import logging

        logging.getLogger(__name__).warning("the store refused trial %s (%s); result spooled",
                                            res.spec.trial_id, one_line(error))
    entry = _spool_entry(res, t0_ms, ctx, stale_run_id, error)
    entry["path"] = str(spool.put(ctx.tracking_uri, entry))
    HEALTH.spooled += 1
    return entry


def write_spooled(entry: dict[str, Any]) -> bool:
    """Write one spooled trial result to its store (:func:`harness.tracking.spool.replay` calls this).

    Returns ``False`` when the trial already has a FINISHED run (nothing written). The RUNNING run
    that the failed write left behind (``stale_run_id``) is ended KILLED either way.
    """
    ctx = RunContext(**entry["ctx"])
    res: TrialResult = entry["result"]
    client = client_for(ctx.tracking_uri)
    wrote = False
    if _claim(client, [res.spec], ctx, {}):
        run = client.create_run(ctx.experiment_id, start_time=entry["t0_ms"],
                                tags={**_tags(res.spec, ctx), "harness.spooled": "1"},
                                run_name=run_name(res.spec))
        _finish_run(client, run.info.run_id, res, entry["t0_ms"], ctx)
        wrote = True
    stale = entry.get("stale_run_id")
    if stale:
        with contextlib.suppress(Exception):
            if client.get_run(stale).info.status == "RUNNING":
                client.set_tag(stale, TAG_KILLED_REASON, "its write failed; the spooled result "
                                                         "was written as another run")
                client.set_terminated(stale, status="KILLED")
    return wrote


def replay_spool(uri: str):
    """Write everything spooled for ``uri`` (see :func:`harness.tracking.spool.replay`); returns its report."""
    from harness.tracking import spool

    rep = spool.replay(uri, write_spooled, is_outage)
    if rep.error:
        HEALTH.failed(RuntimeError(rep.error))
    elif rep.written or rep.already:
        HEALTH.ok()
    return rep


def _store_should_be_tried(uri: str) -> bool:
    """False while the store is known down and was probed less than :data:`PROBE_S` s ago."""
    h = HEALTH
    if not h.down:
        return True
    now = time.time()
    if now - h.last_probe < PROBE_S:
        return False
    h.last_probe = now
    return store_reachable(uri)


# --------------------------------------------------------------------------- writing a unit


_POOL: list[cf.ThreadPoolExecutor] = []
_PENDING: list[cf.Future] = []


def _background_pool() -> cf.ThreadPoolExecutor:
    if not _POOL:
        _POOL.append(cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-mlflow"))
    return _POOL[0]


def flush_logging() -> float:
    """Wait until every result handed to the background logger (``execute_unit(...,
    background=True)``) is in the store or the spool; return the seconds waited.

    Raises:
      Exception: the first error met by a background write that could not even be spooled.
    """
    t0 = time.perf_counter()
    first: BaseException | None = None
    while _PENDING:
        fut = _PENDING.pop(0)
        err = fut.exception()
        first = first or err
    if first is not None:
        raise first
    return time.perf_counter() - t0


def _record(client, res: TrialResult, t0_ms: int, ctx: RunContext, claim, rid: str | None = None,
            final_checkpoint: str | None = None) -> tuple[str | None, dict[str, Any] | None]:
    """Write one trained result (a run ``rid`` made before training, or a new one), or spool it.

    Returns ``(run id or None, spool entry or None)``. Never raises for the store's errors.
    """
    uri = ctx.tracking_uri
    if claim is not None:
        claim.mark(f"writing {owner_tags()[TAG_OWNER]}")
    try:
        if not _store_should_be_tried(uri):
            raise TrackingUnavailableError(f"the store is unreachable ({HEALTH.error})")
        client = client or client_for(uri)
        if rid is None:
            if not _claim(client, [res.spec], ctx, {}):  # a FINISHED run appeared meanwhile: it wins
                _release(claim, "done")
                return None, None
            rid = client.create_run(ctx.experiment_id, start_time=t0_ms, tags=_tags(res.spec, ctx),
                                    run_name=run_name(res.spec)).info.run_id
        _finish_run(client, rid, res, t0_ms, ctx, final_checkpoint)
    except Exception as e:
        try:
            entry = _spool(res, t0_ms, ctx, rid, e)
        except BaseException:
            _release(claim, "failed")
            raise
        _release(claim, "spooled")
        return rid, entry
    _release(claim, f"done {rid}")
    if HEALTH.down or HEALTH.spooled:
        HEALTH.ok()
        replay_spool(uri)  # the store answers again: write what was spooled meanwhile
    return rid, None


def _record_in_background(res: TrialResult, t0_ms: int, ctx: RunContext, claim=None,
                          final_checkpoint: str | None = None) -> None:
    """Background-thread body: claim the trial in the store (a FINISHED run that appeared
    meanwhile wins and this result is dropped), then create, fill and end its run; spool it if the
    store fails."""
    _record(None, res, t0_ms, ctx, claim, final_checkpoint=final_checkpoint)


def _end_checkpoints_after(futs: list[cf.Future], cks: list, results: list[TrialResult]) -> None:
    """Background-thread body, queued after a unit's writes: remove its checkpoints if its results
    are in the store or the spool (the single writer thread runs in order, so they are done)."""
    logged = {r.spec.trial_id for r, f in zip(results, futs, strict=True)
              if f.done() and f.exception() is None}
    _end_checkpoints(cks, results, logged)


def _needs_perf_measurement(unit: list[TrialSpec]) -> bool:
    from harness.train.perf import perf_cache_key

    return any(perf_cache_key(s) not in _PERF_CACHE for s in unit)


def _execute_unit_background(unit: list[TrialSpec], ctx: RunContext, wait_s: float) -> list[TrialOutcome]:
    """``execute_unit(..., background=True)``: claim, train now, do every MLflow call of the unit on
    the background thread (the sweep's plan has just checked which trials are done; the background
    writer checks again before creating a run)."""
    todo, claims, outcomes = _take_claims(unit, ctx, wait_s)
    if todo:
        if ctx.measure_perf and _needs_perf_measurement(todo):
            flush_logging()  # throughput is timed on a quiet process: no MLflow writes alongside
        t0_ms = int(time.time() * 1000)
        t_train = time.perf_counter()
        cks: list = []
        try:
            results = _train(list(todo), ctx, cks)
        except BaseException:
            for c in claims.values():
                _release(c)
            for ck, _ in cks:
                ck.release()
            raise
        train_s = time.perf_counter() - t_train
        futs = []
        for res in results:
            t1 = time.perf_counter()
            claim = claims.pop(res.spec.trial_id, None)
            futs.append(_background_pool().submit(_record_in_background, res, t0_ms, ctx, claim,
                                                  _final_checkpoint(cks, res.spec.trial_id)))
            _PENDING.append(futs[-1])
            o = _outcome(res, None, time.perf_counter() - t1)
            o.wall_seconds = o.tracking_seconds + train_s / len(results)
            o.spooled = HEALTH.down
            outcomes[res.spec.trial_id] = o
        if cks:
            _PENDING.append(_background_pool().submit(_end_checkpoints_after, futs, cks, results))
    for c in claims.values():  # claimed, but not trained (cannot happen; be safe)
        _release(c)
    return [outcomes[s.trial_id] for s in unit]


def execute_unit(unit: list[TrialSpec], ctx: RunContext, *, background: bool = False,
                 wait_claims_s: float = 0.0) -> list[TrialOutcome]:
    """Train one work unit and log each trial as a nested child run of ``ctx.parent_run_id``.

    Args:
      unit: one trial, or trials with equal :meth:`TrialSpec.batch_key` (trained together with
        ``harness.train.loop.run_trials_batched``).
      ctx: where to log.
      background: write each trial's results (metrics, artifacts, dataset input, end status) on a
        background thread of this process, so that the next unit trains meanwhile; the caller must
        call :func:`flush_logging` before it relies on the store (the in-process executor does, at
        the end of the sweep). A process killed before that leaves the trial's run RUNNING, so the
        next invocation re-runs it: nothing FINISHED is lost, nothing runs twice.
      wait_claims_s: on a SQLite store, how long to wait for a trial's claim held by another
        invocation (0: do not wait; the trial's outcome is then ``deferred``).

    Returns:
      One :class:`TrialOutcome` per spec of ``unit``, in order (``skipped=True`` for trials that
      already had a FINISHED run; ``deferred=True`` for trials another invocation holds;
      ``spooled=True`` for results kept in the local spool because the store failed).

    Idempotent and safe to retry: see the module docstring. The store's errors never propagate: a
    result that cannot be written is spooled (its outcome carries ``extra["spool_entry"]``, so a
    driver on another machine can spool it too).
    """
    wait_s = wait_claims_s or ctx.claim_wait_s
    if background:
        return _execute_unit_background(unit, ctx, wait_s)
    specs, claims, outcomes = _take_claims(unit, ctx, wait_s)
    t_track = time.perf_counter()
    client = None
    run_ids: dict[str, str] = {}
    todo = specs
    if specs and _store_should_be_tried(ctx.tracking_uri):
        try:
            client = client_for(ctx.tracking_uri)
            todo = _claim(client, specs, ctx, outcomes)
            for spec in todo:
                run = client.create_run(ctx.experiment_id, tags=_tags(spec, ctx), run_name=run_name(spec))
                run_ids[spec.trial_id] = run.info.run_id
        except Exception as e:  # the store is down: train anyway, spool the results
            HEALTH.failed(e)
            client = None
    for tid in [t for t in claims if t in outcomes]:  # done meanwhile (found by _claim)
        _release(claims.pop(tid))
    pre_s = time.perf_counter() - t_track
    if todo:
        t0_ms = int(time.time() * 1000)
        t_train = time.perf_counter()
        cks: list = []
        try:
            results = _train(todo, ctx, cks)
        except BaseException as e:  # KeyboardInterrupt etc.: leave nothing RUNNING
            for rid in run_ids.values():
                with contextlib.suppress(Exception):
                    client.set_terminated(rid, status="KILLED")
            for c in claims.values():
                _release(c)
            for ck, _ in cks:
                ck.release()
            raise e
        train_s = time.perf_counter() - t_train
        logged: set[str] = set()
        for res in results:
            t1 = time.perf_counter()
            tid = res.spec.trial_id
            rid = run_ids.get(tid)
            try:
                rid_out, entry = _record(client, res, t0_ms, ctx, claims.pop(tid, None), rid,
                                         _final_checkpoint(cks, tid))
            except BaseException:
                _end_checkpoints(cks, results, logged)
                raise
            logged.add(tid)
            spent = time.perf_counter() - t1 + pre_s / len(todo)
            o = _outcome(res, None if entry else rid_out, spent)
            o.wall_seconds = spent + train_s / len(todo)
            if entry is not None:
                o.spooled = True
                o.extra["spool_entry"] = entry
            outcomes[tid] = o
        _end_checkpoints(cks, results, logged)  # in the store or the spool: no longer needed
    for c in claims.values():
        _release(c)
    return [outcomes[s.trial_id] for s in unit]
