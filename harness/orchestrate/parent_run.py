"""The parent run of one sweep invocation: created before any worker starts (tags, params, the config
and trial list as artifacts) and ended with the sweep's counts and tracking cost.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from harness.config.given import given_config
from harness.config.search import SEARCH_TAG
from harness.core.clock import DEFAULT_CLOCK
from harness.core.filters import tag_is
from harness.core.names import (
    M_SWEEP_WALL_S,
    M_TIME,
    PARAM_SCORING,
    SCORING_RULES,
    TAG_KIND,
    TAG_SCORING,
    TAG_SELECT_BY,
    TAG_SWEEP,
    TAG_SWEEP_ID,
    TAG_TIME,
)
from harness.core.outcome import TrialOutcome
from harness.core.selection_rule import DEFAULT_SELECT_BY
from harness.plan.expansion import search_methods
from harness.tracking.client import search_all
from harness.tracking.liveness import kill_dead_invocations, owner_tags
from harness.tracking.provenance import commit_tags


def start_parent(client, exp_id, cfg, config_path, specs, plan, sweep_id, uri, *, only: str = "") -> str:
    """Create this invocation's parent run (tags include its owner ``harness.owner`` = ``host:pid``,
    a first heartbeat and the settings the report reads: :func:`settings_tags`),
    after marking dead invocations' leftover runs KILLED. ``config_path`` is the config's file or a
    :class:`harness.config.given.GivenConfig` (a mapping's text is logged as ``config.yaml``);
    ``specs`` every trial of the config (``trials.json``); ``only`` the part this invocation runs
    (``optimizer=adam``; param ``only``), ``""`` for all of it."""
    from mlflow.entities import Param

    given = given_config(config_path)
    # An earlier invocation that died leaves its parent (and maybe trial runs) RUNNING.
    kill_dead_invocations(client, exp_id)
    tags = {TAG_SWEEP: cfg.name, TAG_SWEEP_ID: sweep_id, TAG_KIND: "parent",
            **commit_tags(given.commit_path), SEARCH_TAG: search_methods(specs),
            **settings_tags(cfg), **owner_tags()}
    run = client.create_run(exp_id, tags=tags, run_name=f"sweep-{time.strftime('%Y%m%d-%H%M%S')}")
    rid = run.info.run_id
    params = [Param(k, str(v)) for k, v in {
        "config_file": given.label, "n_trials": len(specs), "n_todo": len(plan.todo),
        "n_skipped": len(plan.done), "executor": cfg.executor, "jobs": cfg.jobs, "batching": cfg.batching,
        PARAM_SCORING: cfg.scoring,
        "budget.steps": cfg.budget.steps if cfg.budget else None,
        "budget.epochs": cfg.budget.epochs if cfg.budget else None,
        **{f"budget.{k}": getattr(cfg.budget, k) for k in ("tokens", "tokens_per_param")
           if cfg.budget and getattr(cfg.budget, k) is not None},
        **({"workloads": ",".join(w.name for w in cfg.workloads)} if cfg.workloads else {}),
        **({"only": only} if only else {}),
        **{f"search.{k}": v for k, v in (cfg.search.model_dump() if cfg.search else {}).items()
           if v is not None}}.items()]
    client.log_batch(rid, params=params, synchronous=True)
    with tempfile.TemporaryDirectory(prefix="harness-") as d:
        dp = Path(d)
        (dp / "config.yaml").write_text(given.text)
        (dp / "resolved_config.json").write_text(json.dumps(cfg.model_dump(mode="json"), indent=2))
        (dp / "trials.json").write_text(json.dumps(
            [{"trial_id": s.trial_id, **_legacy(s), **s.to_dict()} for s in specs], indent=2,
            default=str))
        client.log_artifacts(rid, d)
    return rid


def _legacy(spec) -> dict[str, str]:
    """``{"legacy_trial_id": id}`` where the trial's id with its target differs from its id (the
    report reads a FINISHED run of a store written before the target left the id under it)."""
    return {"legacy_trial_id": spec.legacy_trial_id} if spec.legacy_trial_id != spec.trial_id else {}


def settings_tags(cfg) -> dict[str, str]:
    """The parent run's tags of how the report ranks: the selection objective, the tuned-time rule
    and the clock (``selection.by``, ``scoring``, ``time``)."""
    return {TAG_SELECT_BY: cfg.selection.by, TAG_SCORING: cfg.scoring, TAG_TIME: cfg.time}


#: Each setting's value on a parent run from before its tag.
_SETTING_DEFAULTS = {TAG_SELECT_BY: DEFAULT_SELECT_BY, TAG_SCORING: SCORING_RULES[0], TAG_TIME: DEFAULT_CLOCK}


def record_settings(client, exp_id: str, sweep_id: str, cfg) -> None:
    """A re-run that trains nothing opens no parent run (:func:`harness.orchestrate.run`): each of its
    config's settings (:func:`settings_tags`) that differs from what the sweep's latest parent run
    records (absent = the default) is set on that parent, so that the report ranks as the summary
    just printed. Nothing is written when they agree."""
    parents = search_all(client, exp_id, f"tags.`{TAG_KIND}` = 'parent' and {tag_is(TAG_SWEEP_ID, sweep_id)}")
    if not parents:
        return
    latest = max(parents, key=lambda r: (r.info.start_time or 0, r.info.run_id))
    for tag, value in settings_tags(cfg).items():
        if latest.data.tags.get(tag, _SETTING_DEFAULTS[tag]) != value:
            client.set_tag(latest.info.run_id, tag, value)


def end_parent(client, rid: str, outcomes: list[TrialOutcome], wall_s: float, status: str,
                flush_wait_s: float = 0.0, budget: dict[str, float] | None = None) -> None:
    """End the parent run with the sweep's counts and its tracking cost: ``sweep/tracking_s`` is the
    MLflow time on the critical path (per-trial calls made before/after training plus the final wait
    for background writes), ``sweep/tracking_fraction`` that over the trials' wall-clock; and its
    time ``budget`` (``part -> s``, :mod:`harness.orchestrate.sweep_clock`) as ``time/<part>_s``."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    counts = {"finished": 0, "diverged": 0, "failed": 0}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    ms = [Metric(f"sweep/n_{k}", float(v), now, 0) for k, v in counts.items()]
    ms.append(Metric("sweep/n_skipped", float(sum(o.skipped for o in outcomes)), now, 0))
    ms.append(Metric("sweep/n_spooled", float(sum(o.spooled and not o.skipped for o in outcomes)), now, 0))
    ms.append(Metric(M_SWEEP_WALL_S, float(wall_s), now, 0))
    ms.extend(Metric(M_TIME[k], float(v), now, 0) for k, v in (budget or {}).items())
    ran = [o for o in outcomes if not o.skipped and o.wall_seconds > 0]
    if ran:
        track = sum(o.tracking_seconds for o in ran) + flush_wait_s
        ms.append(Metric("sweep/tracking_s", track, now, 0))
        ms.append(Metric("sweep/tracking_fraction", track / sum(o.wall_seconds for o in ran), now, 0))
    try:
        client.log_batch(rid, metrics=ms, synchronous=True)
    finally:
        client.set_terminated(rid, status=status)
