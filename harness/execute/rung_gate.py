"""The early-stopping gate a worker hands the trainer (dependency injection: the train
layer calls it, never imports this).

:func:`gate_for` builds ``gate(spec, step, value)`` from the sweep's
:class:`harness.core.rungs.RungBoard` (``RunContext.rung_board``):

- in-process (the board is the searcher's own, ``live``): the board already holds the rung values
  of every trial that ended before this one (the searcher's ``observe`` records them as each
  outcome arrives, before the background writer writes it), so the decision reads only the board.
  Trials train in proposal order, so each decision sees exactly its peers of smaller index: the
  same decisions in every invocation. A peer the board lacks was trained by another invocation
  running at the same time (its claim made this one skip it): its values are read from the store,
  as a worker does, and one still training there is not counted (asynchronous, as below).
- in a worker process (``--jobs N``, Ray: a copy of the board, as it was when the unit was sent):
  before each decision the missing peers' rung values are read from the store (the ``harness.rungs`` tag
  of their FINISHED runs) and merged into the copy. A peer of smaller index still training, or
  not yet written, is not counted: decisions then depend on timing (ASHA's asynchronous
  behaviour), and a re-run after a kill may decide otherwise for the trials it trains again.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from harness.core.context import RunContext
from harness.core.filters import tag_is
from harness.core.names import TAG_RUNG_GROUP, TAG_RUNGS, TAG_TRIAL_ID
from harness.core.rungs import RungBoard, rule_of
from harness.core.spec import TrialSpec

__all__ = ["before_decision", "gate_for", "read_peers"]



#: The FINISHED runs of one rung group (tag ``harness.rung_group``) of an experiment, as
#: ``(trial id, harness.rungs)``, read from a local SQLite store with sqlite3 (read-only).
_PEERS_SQL = ("SELECT t.value, s.value FROM runs r "
              "JOIN tags g ON g.run_uuid = r.run_uuid AND g.key = ? AND g.value = ? "
              "JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = ? "
              "LEFT JOIN tags s ON s.run_uuid = r.run_uuid AND s.key = ? "
              "WHERE r.experiment_id = ? AND r.status = 'FINISHED' AND r.lifecycle_stage = 'active'")


def read_peers(board: RungBoard, ctx: RunContext, trial_id: str) -> None:
    """Merge into ``board`` the rung values the store holds for ``trial_id``'s peers of smaller
    index (FINISHED runs' ``harness.rungs`` tags, found by their ``harness.rung_group``). A store
    that fails is ignored (the board's values stand) and noted in this process's
    :data:`~harness.tracking.health.HEALTH`: while it is known down the store is not asked again
    (:func:`harness.tracking.health.store_should_be_tried`: a probe every ``PROBE_S`` s), so a
    worker's decisions do not each wait out a server's retries (about 7 s).

    A local SQLite store is read with sqlite3, two tags per run (:data:`_PEERS_SQL`); a server
    with MLflow's ``search_runs``. Every decision whose peers train in another process reads the
    group again, which MLflow would do by building every tag, param and metric of every run of
    the group; ``--jobs`` workers decide the same way."""
    from harness.core import mlflow_rows
    from harness.tracking.client import client_for, search_all
    from harness.tracking.health import HEALTH, store_should_be_tried
    from harness.tracking.uris import sqlite_path

    missing = [t for t in board.peers(trial_id) if t not in board.values]
    if not missing or not store_should_be_tried(ctx.tracking_uri):
        return
    group = board.groups[trial_id][0]
    want = set(missing)
    try:
        db = sqlite_path(ctx.tracking_uri)
        if db is not None and db.is_file():
            found = mlflow_rows.rows_of(db, _PEERS_SQL, (TAG_RUNG_GROUP, group, TAG_TRIAL_ID, TAG_RUNGS,
                                                         int(ctx.experiment_id)))
        else:
            # one query for the group (MLflow's filter has no IN for tags); one per trial where the
            # group's name cannot be written as a literal
            try:
                filters = [tag_is(TAG_RUNG_GROUP, group)]
            except ValueError:
                filters = [tag_is(TAG_TRIAL_ID, t) for t in missing]
            client = client_for(ctx.tracking_uri)
            found = [(r.data.tags.get(TAG_TRIAL_ID), r.data.tags.get(TAG_RUNGS))
                     for f in filters for r in search_all(client, ctx.experiment_id, f)
                     if r.info.status == "FINISHED"]
        for tid, tag in found:
            if tid in want and tag:
                board.record(tid, {int(k): v for k, v in json.loads(tag).items()})
    except Exception as e:
        HEALTH.failed(e)


def before_decision(trial_id: str, step: int) -> None:
    """Called before each rung decision; a no-op the tests replace (to SIGKILL a sweep between a
    rung's result and its decision).

    Args:
      trial_id: the trial whose rung is decided.
      step: the rung's step.
    """


def gate_for(ctx: RunContext) -> Callable[[TrialSpec, int, float], str | None] | None:
    """The trainer's gate for units of ``ctx`` (``None`` when the sweep has no rung board)."""
    board = getattr(ctx, "rung_board", None)
    if board is None:
        return None

    def gate(spec: TrialSpec, step: int, value: float) -> str | None:
        before_decision(spec.trial_id, step)
        read_peers(board, ctx, spec.trial_id)  # reads only for peers the board lacks
        return board.decide(spec.trial_id, rule_of(spec.early_stop), step, value)

    return gate
