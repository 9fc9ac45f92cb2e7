"""The MLflow layout of one trial: what its child run holds once trained, and how its runs read back.

Each child run gets: tags ``harness.trial_id``, ``harness.sweep``, ``harness.sweep_id``,
``harness.kind=trial``, ``model``, ``optimizer``, ``schedule``, ``dataset``, ``seed``, ``status``,
versions, ``device_kind``, ``harness_commit``, ``config_commit``, ``mlflow.parentRunId``;
metrics ``train/loss``; on the validation split at the eval steps ``valid/loss``,
``valid/accuracy`` and ``valid/<name>`` for the model's other metrics, with ``time/wall_s``; on the
test split once, at the last step, ``test/loss``, ``test/accuracy``, ``test/<name>`` (absent for a
diverged trial); all with ``step=`` the training step and timestamps = training start + curve
wall-clock (``train/loss`` at ≤ :data:`MAX_TRAIN_POINTS` evenly spaced steps including the first
and last, so that tracking stays a small fraction of a trial), ``final/valid_loss`` and
``final/valid_accuracy`` (last step), ``perf/*`` (``step=0``; with ``perf/num_devices`` and
``perf/examples_per_sec_per_device``, the tag ``perf.mesh`` for a step timed on a mesh) and
``convergence/*``
(``step=steps_to_target``, the target being on validation; ``convergence/modeled_seconds_to_target`` =
steps to target × ``perf/modeled_step_ms`` and ``convergence/cost_seconds_to_target`` = steps × FLOPs
per step ÷ peak, :mod:`harness.core.clock`; the tag ``perf.suspect`` says why a figure is
flagged); params
``TrialSpec.flat_params()``, the builders' defaults the trial used (``defaults``) plus
``target.mode``; tags ``harness.devices`` (the device(s) the trial
trained on, e.g. ``cpu:2`` or ``cuda:0,1`` with host-level ids), ``harness.device_env`` (the device and
memory variables of the training process, e.g. ``HARNESS_DEVICE_IDS=2``) and, under ``--jobs N``,
``harness.device_env_set`` (``before-jax-import``; see :mod:`harness.execute.devices`);
``harness.trained_by`` (``host:pid`` of the process that trained it; ``harness.owner`` is the one
that wrote the run, the sweep's own under ``--jobs N``); for a trial
trained on several devices ``harness.mesh`` (``"batch=4"``); ``harness.batching`` (how its unit
trained and why, :mod:`harness.train.batching`; set by the sweep through ``RunContext.trial_tags``);
``harness.batch_fallback_reason`` (the exception of a vmapped batch retried one trial at a time);
``harness.reason`` (last line of the traceback, or why it diverged) and ``status_reason``; a trial
with an early-stopping rule ``harness.rungs`` (JSON ``{"step": value}`` of the rungs
it reached) and, when stopped (status ``stopped``, run FINISHED), ``harness.stopped_at_step`` and
``harness.stop_reason``, plus its search tags from the rung board (``harness.search``,
``harness.search_index``, ``harness.bracket``, ``harness.rung_group``, ``harness.audit_of``);
artifacts ``trial.json`` (the resolved spec), ``curves.csv``
(``split,step,wall_s,loss,accuracy`` with ``split`` one of ``train`` (every step), ``valid``,
``test``) and, for a failed trial, ``traceback.txt``. The training split is a dataset input of the
sweep's parent run (once per dataset, not per trial: :func:`log_dataset_once`).
A trial of a user's optimizer (``source:``) also gets the tags ``optimizer.source``,
``optimizer.source_hash`` and ``optimizer.api``, ``optimizer.eval_params`` when it was evaluated
at its optimizer's ``eval_params``, and its file as the artifact ``source/<file name>``; an
AlgoPerf submission's run also ``algoperf.batch_size``, ``algoperf.batch_size_source``
(``submission`` or ``workload``) and ``algoperf.workload_name``.
Every name is :mod:`harness.core.names`'s.

:func:`trial_state` is the one rule for what a trial's runs say: done (its first FINISHED run),
failed before, or still to run.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.core import names
from harness.core.clock import clock_seconds
from harness.core.context import RunContext
from harness.core.outcome import reason_line
from harness.core.selection_rule import best_of
from harness.core.source import source_of
from harness.core.spec import TrialResult, TrialSpec
from harness.tracking.liveness import owner_tags
from harness.tracking.provenance import environment_tags
from harness.tracking.run_data import MetricBuffer, log_dataset_input

#: At most this many ``train/loss`` points are logged per trial (``curves.csv`` has every step).
MAX_TRAIN_POINTS = 250

# Per-process caches (a worker process writes many trials).
_ENV_TAGS: dict[str, str] = {}
_DIGESTS: dict = {}
#: ``(store, parent run, dataset)`` whose dataset input this process has logged.
_INPUTS_LOGGED: set[tuple[str, str, str]] = set()


# --------------------------------------------------------------------------- reading a trial's runs


def trial_state(runs: Iterable[Any]) -> tuple[str, Any]:
    """What the MLflow runs of one trial say, as ``(state, run)``.

    ``("finished", run)`` / ``("diverged", run)`` / ``("stopped", run)``: the trial is done;
    ``run`` is its first FINISHED run (in ``runs``' order) and the state its ``status`` tag.
    ``("failed", None)``: no FINISHED run and at least one FAILED (it ran and raised; it runs
    again). ``("pending", None)``: neither (no run, or RUNNING/KILLED ones).
    """
    runs = list(runs)
    done = [r for r in runs if r.info.status == "FINISHED"]
    if done:
        tag = done[0].data.tags.get(names.TAG_STATUS)
        return (tag if tag in ("diverged", "stopped") else "finished"), done[0]
    if any(r.info.status == "FAILED" for r in runs):
        return "failed", None
    return "pending", None


# --------------------------------------------------------------------------- the run's layout


def trial_tags(spec: TrialSpec, ctx: RunContext) -> dict[str, str]:
    """The tags a trial's run is created with (its identity, sweep, provenance and owner)."""
    if not _ENV_TAGS:
        _ENV_TAGS.update(environment_tags())
    return {
        names.TAG_TRIAL_ID: spec.trial_id, names.TAG_SWEEP: ctx.sweep,
        names.TAG_SWEEP_ID: ctx.sweep_id, names.TAG_KIND: names.KIND_TRIAL,
        names.TAG_PARENT_RUN: ctx.parent_run_id, names.TAG_MODEL: spec.model,
        names.TAG_OPTIMIZER: spec.optimizer, names.TAG_SCHEDULE: spec.schedule,
        names.TAG_DATASET: spec.dataset, names.TAG_SEED: str(spec.seed),
        names.TAG_HARNESS_COMMIT: ctx.harness_commit, names.TAG_CONFIG_COMMIT: ctx.config_commit,
        **({names.TAG_GIT_COMMIT: ctx.git_commit} if ctx.git_commit != "unknown" else {}),
        **_ENV_TAGS, **ctx.tags_of(spec.trial_id),
        **owner_tags(),
        **({names.TAG_WORKLOAD: spec.workload} if spec.workload else {}),
        **source_tags(spec),
    }


def source_tags(spec: TrialSpec) -> dict[str, str]:
    """``optimizer.source``, ``optimizer.source_hash`` (the digest in the trial id),
    ``optimizer.source_file_hash`` (the whole file's, for a file) and ``optimizer.api`` of a trial
    whose optimizer has a ``source`` (none for a registered optimizer); ``model.source``,
    ``model.source_hash`` and ``model.source_file_hash`` likewise for a model's."""
    out = {}
    if spec.model_source:
        ref = source_of(spec, "model") if spec.model_source_ref else None
        out = {names.TAG_MODEL_SOURCE: spec.model_source, names.TAG_MODEL_SOURCE_HASH: spec.model_source_hash,
               **({names.TAG_MODEL_SOURCE_FILE_HASH: ref.file_digest} if ref and ref.file_digest else {})}
    if not spec.optimizer_source:
        return out
    api = "algoperf" if spec.optimizer_api == "algoperf" else "factory"
    ref = source_of(spec) if spec.optimizer_source_ref else None
    file_hash = {names.TAG_OPTIMIZER_SOURCE_FILE_HASH: ref.file_digest} if ref and ref.file_digest else {}
    return {**out, names.TAG_OPTIMIZER_SOURCE: spec.optimizer_source,
            names.TAG_OPTIMIZER_SOURCE_HASH: spec.optimizer_source_hash, **file_hash,
            names.TAG_OPTIMIZER_API: api}


def train_rows_to_log(n: int, max_points: int = MAX_TRAIN_POINTS) -> list[int]:
    """Indices of the train curve rows logged as ``train/loss`` metrics: all of them when
    ``n <= max_points``, else ``max_points`` evenly spaced ones including the first and the last."""
    if n <= max_points:
        return list(range(n))
    return sorted({round(i * (n - 1) / (max_points - 1)) for i in range(max_points)})


def write_curves(res: TrialResult, path: Path) -> None:
    """``curves.csv``: ``split,step,wall_s,loss,accuracy``, every train step, every validation
    evaluation and the test evaluation (at the last validation step)."""
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


def _add_floor_gap(buf: MetricBuffer, res: TrialResult, t0_ms: int) -> None:
    """For datasets with a known loss floor (``markov_lm``): ``valid/nats_above_entropy`` = validation
    loss − floor at every evaluation, ``final/valid_nats_above_entropy`` at the last one, and the
    floor and entropy rate themselves (``dataset/loss_floor``, ``dataset/entropy_rate``, step 0)."""
    floor = res.extra.get("loss_floor")
    if floor is None:
        return
    c = res.curves
    for s, t, lv in zip(c.eval_step, c.eval_wall_s, c.eval_loss, strict=False):
        buf.add(names.M_VALID_GAP, lv - floor, s, t0_ms + int(t * 1000))
    if res.final_valid_loss is not None and c.eval_step:
        buf.add(names.M_FINAL_GAP, res.final_valid_loss - floor, c.eval_step[-1])
    buf.add(names.M_LOSS_FLOOR, floor, 0)
    if res.extra.get("entropy_rate") is not None:
        buf.add(names.M_ENTROPY_RATE, res.extra["entropy_rate"], 0)


def _add_lm(buf: MetricBuffer, res: TrialResult, t0_ms: int) -> None:
    """For a language model on text (``extra["lm"]``): ``valid/perplexity`` = exp(loss per token) at
    every evaluation and ``test/perplexity``; where the tokenizer's bytes per token are known,
    ``valid/bits_per_byte`` = loss / ln 2 / bytes per token and ``test/bits_per_byte``; the data's
    token counts (``dataset/train_tokens``, ...) at step 0."""
    lm = res.extra.get("lm")
    if not lm:
        return
    bpt = lm.get("bytes_per_token")
    c = res.curves
    last = c.eval_step[-1] if c.eval_step else 0
    rows = [(s, t0_ms + int(t * 1000), lv, names.PREFIX_VALID) for s, t, lv in
            zip(c.eval_step, c.eval_wall_s, c.eval_loss, strict=False)]
    if res.test_loss is not None:
        rows.append((last, None, res.test_loss, names.PREFIX_TEST))
    for s, ts, loss, prefix in rows:
        if loss is None or not math.isfinite(loss):
            continue
        buf.add(prefix + names.PERPLEXITY, math.exp(min(loss, 700.0)), s, ts)
        if bpt:
            buf.add(prefix + names.BITS_PER_BYTE, loss / math.log(2) / bpt, s, ts)
    for split, n in lm.get("tokens", {}).items():
        buf.add(f"dataset/{split}_tokens", n, 0)


#: ``PerfResult`` attribute → its ``perf/*`` metric.
_PERF_METRICS = {"step_time_ms": names.M_STEP_MS, "step_time_ms_p10": names.M_STEP_MS_P10,
                 "step_time_ms_p90": names.M_STEP_MS_P90, "examples_per_sec": names.M_EXAMPLES_PER_S,
                 "compile_s": names.M_COMPILE_S, "flops_per_step": names.M_FLOPS,
                 "utilization": names.M_UTIL, "peak_flops": names.M_PEAK_FLOPS,
                 "examples_per_sec_per_device": names.M_EXAMPLES_PER_S_PER_DEVICE,
                 "num_devices": names.M_NUM_DEVICES, "spread": names.M_STEP_SPREAD,
                 "step_cpu_ms": names.M_STEP_CPU_MS, "modeled_step_ms": names.M_MODELED_STEP_MS,
                 "modeled_step_ms_lo": names.M_MODELED_STEP_MS_LO,
                 "modeled_step_ms_hi": names.M_MODELED_STEP_MS_HI}


def model_flops_utilization(perf) -> float | None:
    """``perf/mfu``: analytic FLOPs per step / (median step seconds × peak FLOP/s); ``None`` when
    one of them is unknown."""
    flops, ms, peak = perf.flops_per_step_analytic, perf.step_time_ms, perf.peak_flops
    if not flops or not ms or not peak or ms <= 0:
        return None
    return flops / (ms / 1e3) / peak


def result_metrics(res: TrialResult, t0_ms: int) -> MetricBuffer:
    """Every metric of a trained trial, buffered (non-finite values dropped); ``t0_ms`` is the
    training start (epoch ms) that the curves' wall-clock is added to."""
    buf = MetricBuffer()
    c = res.curves
    for i in train_rows_to_log(len(c.train_step)):
        buf.add(names.M_TRAIN_LOSS, c.train_loss[i], c.train_step[i], t0_ms + int(c.train_wall_s[i] * 1000))
    for j, (s, t, lv, av) in enumerate(zip(c.eval_step, c.eval_wall_s, c.eval_loss, c.eval_accuracy,
                                           strict=False)):
        ts = t0_ms + int(t * 1000)
        buf.add(names.M_VALID_LOSS, lv, s, ts)
        buf.add(names.M_VALID_ACC, av, s, ts)
        for name, vals in c.eval_metrics.items():
            buf.add(names.PREFIX_VALID + name, vals[j] if j < len(vals) else None, s, ts)
        buf.add(names.M_WALL_S, t, s, ts)
    last = c.eval_step[-1] if c.eval_step else (c.train_step[-1] if c.train_step else 0)
    t_last = t0_ms + int((c.eval_wall_s[-1] if c.eval_wall_s else 0.0) * 1000)
    buf.add(names.M_FINAL_LOSS, res.final_valid_loss, last)
    buf.add(names.M_FINAL_ACC, res.final_valid_accuracy, last)
    buf.add(names.M_BEST_LOSS, best_of(c.eval_loss, False), last)
    buf.add(names.M_BEST_ACC, best_of(c.eval_accuracy, True), last)
    buf.add(names.M_TEST_LOSS, res.test_loss, last, t_last)
    buf.add(names.M_TEST_ACC, res.test_accuracy, last, t_last)
    for name, v in res.test_metrics.items():
        buf.add(names.PREFIX_TEST + name, v, last, t_last)
    _add_floor_gap(buf, res, t0_ms)
    _add_lm(buf, res, t0_ms)
    buf.add(names.M_CLIPPED_FRACTION, res.extra.get("clipped_fraction"), last)
    if res.perf is not None:
        for attr, metric in _PERF_METRICS.items():
            buf.add(metric, getattr(res.perf, attr), 0)
        buf.add(names.M_MFU, model_flops_utilization(res.perf), 0)
    budget = res.extra.get("time") or {"compile": res.compile_seconds}
    for part, seconds in budget.items():  # the trial's time budget (harness.core.budget)
        buf.add(names.M_TIME[part], seconds, 0)
    cache = res.extra.get("compile_cache")
    if cache:
        buf.add(names.M_CACHE_HITS, cache["hits"], 0)
        buf.add(names.M_CACHE_MISSES, cache["misses"], 0)
    if res.steps_to_target is not None:
        buf.add(names.M_STEPS_TO_TARGET, res.steps_to_target, res.steps_to_target)
        buf.add(names.M_SECONDS_TO_TARGET, res.seconds_to_target, res.steps_to_target)
        modeled, cost = clock_seconds(res.steps_to_target, res.perf)
        buf.add(names.M_MODELED_SECONDS_TO_TARGET, modeled, res.steps_to_target)  # None: not logged
        buf.add(names.M_COST_SECONDS_TO_TARGET, cost, res.steps_to_target)
    return buf


def result_tags(res: TrialResult) -> dict[str, str]:
    """The tags a trained trial's run gets at its end: ``status``, its devices, mesh, resumption,
    divergence, batch fallback and reason."""
    p = res.perf
    tags = {names.TAG_STATUS: res.status, **(res.extra.get("device_tags") or {})}
    ck = res.extra.get("checkpoint") or {}
    if ck.get("resumed_from_step"):
        tags[names.TAG_RESUMED_FROM_STEP] = str(ck["resumed_from_step"])
    if p is not None:
        tags[names.TAG_PERF_DTYPE] = p.dtype  # utilisation counts FLOPs against this dtype's peak
        if p.mesh:
            tags[names.TAG_PERF_MESH] = p.mesh  # the mesh the timed step ran on
        if p.suspect:
            tags[names.TAG_PERF_SUSPECT] = p.suspect[:500]  # disagreed with the training clock twice
    if res.extra.get("flops_mismatch"):  # XLA's and the analytic FLOPs/step > 2x apart
        tags[names.TAG_PERF_FLOPS_MISMATCH] = str(res.extra["flops_mismatch"])[:500]
    if res.extra.get("target_at_init"):
        tags[names.TAG_TARGET_AT_INIT] = "true"  # met before training: the summary warns
    if res.extra.get("mesh"):
        tags[names.TAG_MESH] = res.extra["mesh"]  # the mesh the trial trained on, "batch=4"
    if res.extra.get("batch_fallback_reason"):
        tags[names.TAG_BATCH_FALLBACK_REASON] = res.extra["batch_fallback_reason"]
    if res.extra.get("eval_params"):
        tags[names.TAG_EVAL_PARAMS] = "true"  # evaluated at the optimizer's eval_params
    if res.extra.get("batch_size_source"):  # an AlgoPerf submission: who chose its batch size
        tags[names.TAG_ALGOPERF_BATCH_SIZE] = str(res.extra.get("batch_size"))
        tags[names.TAG_ALGOPERF_BATCH_SIZE_SOURCE] = str(res.extra["batch_size_source"])
        tags[names.TAG_ALGOPERF_WORKLOAD] = str(res.extra.get("workload_name", ""))
    if res.diverged_step is not None:
        tags[names.TAG_DIVERGED_STEP] = str(res.diverged_step)
    if res.stopped_step is not None:  # an early-stopping rule ended it at this rung
        tags[names.TAG_STOPPED_STEP] = str(res.stopped_step)
        tags[names.TAG_STOP_REASON] = res.reason[:500]
    if res.rungs:
        tags[names.TAG_RUNGS] = json.dumps({str(k): v for k, v in sorted(res.rungs.items())})
    if res.reason:
        tags[names.TAG_REASON] = reason_line(res.reason, 500)
        if res.status != "failed":
            tags[names.TAG_STATUS_REASON] = res.reason[:5000]
    return tags


def result_params(res: TrialResult, defaults: Mapping[str, str]) -> dict[str, str]:
    """The run's params: the builders' ``defaults`` the trial used, overridden by
    :meth:`TrialSpec.flat_params`, plus ``target.mode``."""
    params = {**defaults, **res.spec.flat_params()}
    if res.spec.target is not None:
        params[names.PARAM_TARGET_MODE] = res.spec.target.mode
    return params


def log_result(client, run_id: str, res: TrialResult, t0_ms: int, defaults: Mapping[str, str], *,
               end_tags: bool = True, artifact_uri: str | None = None) -> None:
    """Write a trained trial's metrics, params, end tags (``end_tags=False``: the run was created
    with them) and artifacts (``trial.json``, ``curves.csv``, ``traceback.txt`` for a failed trial)
    to its run ``run_id``: one ``log_batch`` (more only past MLflow's 1,000 entities a call) and one
    upload of the artifact folder. ``artifact_uri`` (the run's, from ``create_run``) writes the
    artifacts straight to its repository, without ``log_artifacts``' ``get_run``."""
    result_metrics(res, t0_ms).flush(client, run_id, params=result_params(res, defaults),
                                     tags=result_tags(res) if end_tags else None)
    from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

    repo = artifact_repository(artifact_uri, client.tracking_uri) if artifact_uri else None
    local = repo.artifact_dir if isinstance(repo, LocalArtifactRepository) else None
    if local:  # a local artifact store: the files written in place (what log_artifacts' copy would
        # leave there), not into a temporary folder copied over and removed (~0.45 ms per trial)
        dp = Path(local)
        dp.mkdir(parents=True, exist_ok=True)
        _write_artifacts(res, dp)
        return
    with tempfile.TemporaryDirectory(prefix="harness-") as d:
        _write_artifacts(res, Path(d))
        if repo is not None:
            repo.log_artifacts(d)
        else:
            client.log_artifacts(run_id, d)


def _write_artifacts(res: TrialResult, dp: Path) -> None:
    """A trial's artifact files in the folder ``dp`` (:func:`log_result`)."""
    (dp / names.ARTIFACT_TRIAL).write_text(json.dumps(
        {"trial_id": res.spec.trial_id, **res.spec.to_dict()}, indent=2, sort_keys=True, default=str))
    write_curves(res, dp / names.ARTIFACT_CURVES)
    if res.status == "failed":
        (dp / names.ARTIFACT_TRACEBACK).write_text(res.reason)
    for ref, sub in ((res.spec.optimizer_source_ref, ""), (res.spec.model_source_ref, "model")):
        if ref and ref[4]:  # the user's file, exactly the bytes that were hashed and run
            folder = dp / names.ARTIFACT_SOURCE_DIR / sub  # a model's file in source/model/
            folder.mkdir(parents=True, exist_ok=True)
            (folder / Path(ref[1]).name).write_text(ref[4])


def artifact_repository(artifact_uri: str, tracking_uri: str):
    """MLflow's artifact repository of ``artifact_uri`` (a run's), one per URI (``log_artifacts``
    finds it with a ``get_run`` per call)."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    return get_artifact_repository(artifact_uri, tracking_uri=tracking_uri)


def log_dataset_once(client, ctx: RunContext, spec: TrialSpec, dataset: Callable[[], Any]) -> None:
    """The training split of ``spec``'s dataset as an MLflow dataset input of the sweep's parent run,
    once per parent run and dataset in this process (MLflow ignores the same input logged again by
    another worker); provenance only: a failure here never fails a trial."""
    key = (ctx.tracking_uri, ctx.parent_run_id, spec.dataset)
    if not ctx.parent_run_id or key in _INPUTS_LOGGED:
        return
    with contextlib.suppress(Exception):
        log_dataset_input(client, ctx.parent_run_id, dataset(), spec.dataset, _DIGESTS)
        _INPUTS_LOGGED.add(key)


def finish_run(client, rid: str, res: TrialResult, t0_ms: int, ctx: RunContext, *,
               defaults: Mapping[str, str], dataset: Callable[[], Any] | None = None,
               final_checkpoint: str | None = None, end_tags: bool = True,
               artifact_uri: str | None = None) -> None:
    """Log one trained trial (:func:`log_result`) and end its run (FINISHED, or FAILED for a trial
    that raised); ``final_checkpoint`` (a step directory) becomes its ``checkpoint/`` artifact when
    ``ctx.keep_final_checkpoint``; ``dataset()`` (the trial's training data) the parent run's dataset
    input when ``ctx.log_dataset`` (:func:`log_dataset_once`).

    A write that fails leaves the run RUNNING (never FINISHED with part of its data): the caller
    spools the result, and the spool's replay ends that run KILLED and writes a complete one.
    """
    log_result(client, rid, res, t0_ms, defaults, end_tags=end_tags, artifact_uri=artifact_uri)
    if final_checkpoint and ctx.keep_final_checkpoint and res.status != "failed":
        client.log_artifacts(rid, final_checkpoint, "checkpoint")
    if ctx.log_dataset and res.status != "failed" and dataset is not None:
        log_dataset_once(client, ctx, res.spec, dataset)
    client.set_terminated(rid, status="FAILED" if res.status == "failed" else "FINISHED")
