"""Getting a trained result into the store, or into the local spool when the store fails, and back.

- :func:`write_result`: create (or reuse) the trial's run, fill it and end it
  (:func:`harness.tracking.trial_run.finish_run`); a FINISHED run that appeared meanwhile wins and
  the result is dropped. A write that fails puts the result into the spool
  (:mod:`harness.tracking.spool`) and never raises for the store's errors.
- :func:`write_spooled` writes one spooled result later; :func:`replay_spool` writes everything
  spooled for a store (at the start and end of a sweep, and as soon as the store answers again).
- While the store is known down, a write tries it again at most every :data:`PROBE_S` seconds;
  results meanwhile go straight to the spool.
- :func:`resolved_defaults`: the hyperparameters a trial used without naming them (its run's params).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import time
from typing import Any

from harness.core.context import RunContext
from harness.core.names import TAG_KILLED_REASON, TAG_OWNER, TAG_SPOOLED
from harness.core.outcome import run_name
from harness.core.spec import TrialResult, TrialSpec
from harness.execute import claims
from harness.execute.claims import release
from harness.execute.training import load_dataset_of
from harness.tracking import spool
from harness.tracking.client import client_for
from harness.tracking.health import HEALTH, PROBE_S, store_should_be_tried  # noqa: F401 (re-exported)
from harness.tracking.liveness import owner_tags
from harness.tracking.store_errors import TrackingUnavailableError, is_outage, one_line
from harness.tracking.trial_run import finish_run, result_tags, trial_tags

log = logging.getLogger(__name__)

#: :func:`resolved_defaults` per ``(model, optimizer, schedule, dataset, optimizer source hash,
#: steps)``: a sweep's trials share a few (the builders' signatures are read once, not per trial).
_DEFAULTS: dict[tuple, dict[str, str]] = {}


def resolved_defaults(spec: TrialSpec) -> dict[str, str]:
    """The hyperparameters a trial used without naming them, as MLflow params: each builder's
    defaults (``optimizer.b1``, ``model.depth``, ...) and the ``schedule.total_steps`` the trainer
    fills in (the trial's step budget). The config's own values are :meth:`TrialSpec.flat_params`.
    A fresh dict each call.
    """
    key = (spec.model, spec.optimizer, spec.schedule, spec.dataset, spec.optimizer_source_hash,
           spec.model_source_hash, spec.steps)
    if key not in _DEFAULTS:
        if len(_DEFAULTS) > 256:
            _DEFAULTS.clear()
        _DEFAULTS[key] = _resolved_defaults(spec)
    return {**_DEFAULTS[key], **_derived(spec)}


def _derived(spec: TrialSpec) -> dict[str, str]:
    """The optimizer hyperparameters the trial left to its builder to derive from the others, as
    trained (:func:`harness.config.registries.derived_hparams`)."""
    from harness.config.optimizer_sources import trial_registries
    from harness.config.registries import derived_hparams

    builder = trial_registries(spec).optimizers.get(spec.optimizer)
    got = derived_hparams(spec.optimizer, builder, spec.hparams("optimizer"))
    return {f"optimizer.{k}": str(v) for k, v in got.items()}


def _resolved_defaults(spec: TrialSpec) -> dict[str, str]:
    from harness.config.optimizer_sources import trial_registries
    from harness.config.registries import builder_hparams

    reg = trial_registries(spec)
    out: dict[str, str] = {}
    for kind, registry in (("model", reg.models), ("optimizer", reg.optimizers),
                           ("schedule", reg.schedules), ("dataset", reg.datasets)):
        builder = registry.get(getattr(spec, kind))
        if builder is None:  # e.g. a tfds: dataset, or the bare "constant" schedule
            continue
        out.update({f"{kind}.{h.name}": str(h.default)
                    for h in builder_hparams(kind, builder).values() if not h.required})
        if kind == "schedule" and "total_steps" in inspect.signature(builder).parameters:
            out["schedule.total_steps"] = str(spec.schedule_steps)
    return out


def write_run(client, rid: str, res: TrialResult, t0_ms: int, ctx: RunContext,
              final_checkpoint: str | None = None, *, end_tags: bool = True,
              artifact_uri: str | None = None) -> None:
    """Fill and end the run ``rid`` of a trained result (:func:`harness.tracking.trial_run.finish_run`
    with the trial's :func:`resolved_defaults` and its dataset)."""
    finish_run(client, rid, res, t0_ms, ctx, defaults=resolved_defaults(res.spec),
               dataset=lambda: load_dataset_of(res.spec), final_checkpoint=final_checkpoint,
               end_tags=end_tags, artifact_uri=artifact_uri)


def create_result_run(client, res: TrialResult, t0_ms: int, ctx: RunContext, extra_tags=None):
    """The run of a trained result, created with every tag it ends with (its identity's and its
    result's: :func:`~harness.tracking.trial_run.trial_tags`,
    :func:`~harness.tracking.trial_run.result_tags`), so that its ``log_batch`` carries no tag."""
    return client.create_run(ctx.experiment_id, start_time=t0_ms,
                             tags={**trial_tags(res.spec, ctx), **result_tags(res), **(extra_tags or {})},
                             run_name=run_name(res.spec))


def skipped_write_error() -> TrackingUnavailableError:
    """The error of a write not even tried (the store was down moments ago): the store's own last
    error, unwrapped, so that recording it again does not nest it ("store unreachable (the store is
    unreachable (the store is ..." on the progress line)."""
    return TrackingUnavailableError(HEALTH.error or "the store is unreachable")


def write_result(client, res: TrialResult, t0_ms: int, ctx: RunContext, claim, rid: str | None = None,
                 final_checkpoint: str | None = None, artifact_uri: str | None = None
                 ) -> tuple[str | None, dict[str, Any] | None]:
    """Write one trained result (a run ``rid`` made before training, whose ``artifact_uri`` it was
    created with, or a new one), or spool it.

    ``claim`` (the trial's, or ``None``) is marked and released. Returns ``(run id or None, spool
    entry or None)``. Never raises for the store's errors.
    """
    uri = ctx.tracking_uri
    if claim is not None:
        claim.mark(f"writing {owner_tags()[TAG_OWNER]}")
    try:
        if not store_should_be_tried(uri):
            raise skipped_write_error()
        client = client or client_for(uri)
        if rid is None:
            # Held, the trial's claim already answered whether a FINISHED run appeared meanwhile
            # (claims.take_claims read its marker before training); unclaimed (a server, or no
            # claims), the store is asked.
            if claim is None and not claims.take_unfinished(client, [res.spec], ctx, {}):
                return None, None  # a FINISHED run appeared: it wins
            run = create_result_run(client, res, t0_ms, ctx)
            rid = run.info.run_id
            write_run(client, rid, res, t0_ms, ctx, final_checkpoint, end_tags=False,
                      artifact_uri=run.info.artifact_uri)
        else:
            write_run(client, rid, res, t0_ms, ctx, final_checkpoint, artifact_uri=artifact_uri)
    except Exception as e:
        try:
            entry = spool_result(res, t0_ms, ctx, rid, e)
        except BaseException:
            release(claim, "failed")
            raise
        release(claim, "spooled")
        return rid, entry
    release(claim, f"done {rid}")
    if HEALTH.down or HEALTH.spooled:
        HEALTH.ok()
        replay_spool(uri)  # the store answers again: write what was spooled meanwhile
    return rid, None


def _spool_entry(res: TrialResult, t0_ms: int, ctx: RunContext, stale_run_id: str | None,
                 error: BaseException) -> dict[str, Any]:
    ctx_d = dataclasses.asdict(dataclasses.replace(ctx, rung_board=None))  # the board: not spooled
    tid = res.spec.trial_id
    tags = ctx.tags_of(tid)  # its own, not the sweep's; the board's too (the board is not spooled)
    ctx_d["trial_tags"] = {tid: tags} if tags else {}
    return {"kind": "trial", "uri": ctx.tracking_uri, "ctx": ctx_d, "t0_ms": t0_ms,
            "result": res, "stale_run_id": stale_run_id, "error": one_line(error),
            "spooled_at": time.time(), "owner": owner_tags()[TAG_OWNER]}


def spool_result(res: TrialResult, t0_ms: int, ctx: RunContext, stale_run_id: str | None,
                 error: BaseException) -> dict[str, Any]:
    """Put a result that could not be written into the local spool (durably); returns the entry.

    Raises:
      OSError: the spool cannot be written either (the result is then lost: reported loudly).
    """
    if is_outage(error):
        HEALTH.failed(error)
    else:
        log.warning("the store refused trial %s (%s); result spooled", res.spec.trial_id, one_line(error))
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
    if claims.take_unfinished(client, [res.spec], ctx, {}):
        run = create_result_run(client, res, entry["t0_ms"], ctx, {TAG_SPOOLED: "1"})
        write_run(client, run.info.run_id, res, entry["t0_ms"], ctx, end_tags=False,
                  artifact_uri=run.info.artifact_uri)
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
    """Write everything spooled for ``uri`` (:func:`harness.tracking.spool.replay`); returns its report."""
    rep = spool.replay(uri, write_spooled, is_outage)
    if rep.error:
        HEALTH.failed(RuntimeError(rep.error))
    elif rep.written or rep.already:
        HEALTH.ok()
    return rep
