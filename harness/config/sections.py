"""Small sections of a sweep config: ``param_groups`` entries, ``divergence``, ``parallelism``,
a target's ``claim`` (pydantic, unknown keys forbidden; re-exported by :mod:`harness.config.schema`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field
from pydantic_core import PydanticCustomError

from harness.config.fields import Float, Strict, strict_int
from harness.core.echo import short_repr

__all__ = ["ClaimCfg", "DivergenceCfg", "ParallelismCfg", "ParamGroupCfg"]


def _rules(v: Any) -> Any:
    """``rules``: one rule or a non-empty list of rules (an empty list would group nothing)."""
    if (isinstance(v, str) and v) or (isinstance(v, list) and v and all(isinstance(r, str) and r for r in v)):
        return v
    raise PydanticCustomError("rules", "expected a rule or a non-empty list of rules (e.g. [embeddings, "
                              "head] or glob:PATTERN), got {v}", {"v": short_repr(v)})


class ParamGroupCfg(Strict):
    """One parameter group (optimizers.groups rules): its step size as a multiple of the trial's, its
    weight decay (None: the optimizer's own) and other hyperparameters of the optimizer for this group
    alone (``hparams: {b1: 0.8}``, one value each; as torch's per-group ``betas``)."""

    rules: Annotated[list[str] | str, BeforeValidator(_rules)]
    step_size_scale: Float = Field(default=1.0, gt=0, le=1e6)
    weight_decay: Float | None = Field(default=None, ge=0, le=1e6)
    hparams: dict[str, float | int | bool | str | None] = Field(default_factory=dict, max_length=64)


class ClaimCfg(Strict):
    """A loss target's claim rules (:mod:`harness.core.claim_rules`), stated in the sweep's summary
    and its report: a mean over n runs passes when ``(target - mean)·√n >= margin``; one run when
    at or below ``single_run`` (None: that rule not stated). modded-nanogpt's optimization track:
    ``margin: 0.004``, ``single_run: 3.276`` with target 3.28."""

    margin: Float = Field(default=0.004, gt=0, le=1e6)
    single_run: Float | None = Field(default=None, ge=0, le=1e30)


class DivergenceCfg(Strict):
    """When a trial counts as diverged (besides a non-finite train loss, always): a train loss
    above ``loss_factor`` × the trial's initial train loss (the first step's). ``null`` turns the
    factor rule off."""

    loss_factor: Float | None = Field(default=100.0, gt=1, le=1e30)


def _devices(v: Any) -> Any:
    """``devices``: a positive integer or the string ``"all"``."""
    if isinstance(v, str):
        if v.strip().lower() == "all":
            return "all"
        raise PydanticCustomError("devices", "expected a positive integer or 'all', got {v}",
                                  {"v": short_repr(v)})
    v = strict_int(v)
    if v < 1:
        raise PydanticCustomError("devices", "must be >= 1 (or 'all'), got {v}", {"v": v})
    return v


class ParallelismCfg(Strict):
    """``parallelism: {devices, shard}``: how many of the process's visible devices
    (:func:`harness.execute.devices.visible_devices`) each trial uses (an int >= 1 or ``all``; default 1 =
    one device, no mesh) and what is sharded over them: ``batch`` (data-parallel, each
    step's batch split over a 1-D mesh, state replicated) or ``trials`` (the vmapped batch of
    seed/step-size siblings split along its trial axis). Checked against the visible devices and
    the batch sizes by the pre-flight (:mod:`harness.orchestrate.preflight`), before any MLflow write."""

    devices: Annotated[int | str, BeforeValidator(_devices)] = 1
    shard: Literal["batch", "trials"] = "batch"
