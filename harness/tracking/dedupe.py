"""At most one FINISHED run per trial: the rule that demotes duplicates a race between machines left.

On a SQLite store the per-trial claims (:class:`harness.tracking.claim_locks.Claim`) keep concurrent
invocations on one machine from training a trial twice. Against a server, invocations on several
machines (or a Ray task retried while its first attempt was still writing) can each finish a trial;
:func:`dedupe_finished_runs` keeps the earliest and demotes the others.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from harness.core.mlflow_rows import values_of
from harness.core.names import KIND_TRIAL, TAG_DUPLICATE_OF, TAG_KIND, TAG_TRIAL_ID
from harness.tracking.client import by_trial, client_for, runs_of_trial, trial_runs
from harness.tracking.health import HEALTH
from harness.tracking.store_errors import one_line
from harness.tracking.uris import sqlite_path

_log = logging.getLogger(__name__)


def dedupe_finished_runs(uri: str, experiment_id: str, trial_ids: set[str]) -> dict[str, list[str]]:
    """Leave at most one FINISHED child run per trial of ``trial_ids`` in the experiment.

    On a SQLite store the per-trial claims (:class:`harness.tracking.claim_locks.Claim`) keep concurrent
    invocations on one machine from training a trial twice, so this finds nothing there. Against a
    server, invocations on several machines (or a Ray task retried while its first attempt was still
    writing) can each finish a trial: the earliest FINISHED run (by start time, then run id: every
    invocation picks the same one) is kept and later ones are set KILLED with the tag
    ``harness.duplicate_of=<kept run id>``. Idempotent and safe under races: a run another
    invocation is demoting at the same moment (MLflow's ``UNIQUE constraint failed: tags.key,
    tags.run_uuid``) is re-read, not an error; a failure is logged, never raised. Returns
    ``{trial_id: [run ids demoted by this call]}``, empty for a clean sweep.
    """
    if not trial_ids:
        return {}
    client = client_for(uri)
    demoted: dict[str, list[str]] = {}
    try:
        db = sqlite_path(uri)
        if db is not None and db.exists():  # the trials with two FINISHED runs, in one query
            twice = duplicated_in_sqlite(db, experiment_id) & trial_ids
            groups = {tid: by_trial(runs_of_trial(client, experiment_id, tid)).get(tid, [])
                      for tid in sorted(twice)}
        else:
            groups = trial_runs(client, experiment_id)
    except Exception as e:
        HEALTH.failed(e)
        return {}
    for tid, runs in groups.items():
        done = sorted((r for r in runs if r.info.status == "FINISHED"),
                      key=lambda r: (r.info.start_time or 0, r.info.run_id))
        if tid not in trial_ids or len(done) < 2:
            continue
        keep = done[0].info.run_id
        for r in done[1:]:
            if _demote(client, r.info.run_id, keep):
                demoted.setdefault(tid, []).append(r.info.run_id)
        _log.warning("trial %s had %d FINISHED runs; kept %s", tid, len(done), keep)
    return demoted


def duplicated_in_sqlite(db: Path, experiment_id: str) -> set[str]:
    """The ``harness.trial_id`` of every trial with two or more active FINISHED trial runs in the
    experiment, read from the MLflow SQLite file ``db`` with :mod:`sqlite3` read-only, in one
    grouped query: what the sweep's closing check needs, without reading every run of the
    experiment back through MLflow. Raises
    :class:`sqlite3.Error` for a file that is not such a store."""
    return values_of(
        db, "SELECT t.value FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = ? "
            "JOIN tags k ON k.run_uuid = r.run_uuid AND k.key = ? AND k.value = ? "
            "WHERE r.experiment_id = ? AND r.lifecycle_stage = 'active' AND r.status = 'FINISHED' "
            "GROUP BY t.value HAVING COUNT(*) > 1",
        (TAG_TRIAL_ID, TAG_KIND, KIND_TRIAL, int(experiment_id)))


def _demote(client, run_id: str, keep: str) -> bool:
    """Tag ``run_id`` a duplicate of ``keep`` and end it KILLED; ``False`` where a concurrent
    invocation did it first (or the store refused: logged)."""
    for attempt in range(3):
        try:
            client.set_tag(run_id, TAG_DUPLICATE_OF, keep)
            client.set_terminated(run_id, status="KILLED")
            return True
        except Exception as e:
            try:
                r = client.get_run(run_id)
            except Exception:
                r = None
            if r is not None and r.info.status == "KILLED" and r.data.tags.get(TAG_DUPLICATE_OF):
                return False
            if attempt == 2:
                _log.warning("could not mark duplicate run %s: %s", run_id, one_line(e))
            time.sleep(0.05 * (attempt + 1))
    return False
