"""What :mod:`harness.orchestrate.reproduce` checks before it trains: a scratch folder that is no sweep's
store, a stored record that is whole, and the rung a stopped trial must stop at again."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.core import names
from harness.core.spec import TrialSpec

__all__ = ["ReproduceError", "check_data", "check_scratch", "replayed_stop", "stopped_at", "stored_spec"]


class ReproduceError(LookupError):
    """The trial cannot be reproduced from the store: no FINISHED run of it, a damaged record, its
    recorded spec or source no longer hashing to its id, or a scratch folder that is a store's. One
    line saying which."""


#: The run tag whose presence makes a SQLite file a sweep's store (the scratch store has none).
_PARENTS_SQL = ("SELECT r.run_uuid FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
                "WHERE t.key = ? AND t.value = ? LIMIT 1")


def check_data(spec: TrialSpec) -> None:
    """The trial's data (a dataset kind with a content digest, ``tokens:PATH``) is readable here and
    is the data it trained on.

    Raises:
      ReproduceError: the data cannot be read (the kind's reason), or its digest differs.
    """
    from harness.data.kinds import kind_of

    found = kind_of(spec.dataset)
    if not spec.dataset_digest or found is None:
        return
    try:
        now = found[0].digest(found[1], spec.hparams("dataset"))
    except (OSError, ValueError) as e:
        raise ReproduceError(f"dataset {spec.dataset!r} of trial {spec.trial_id} cannot be read here: "
                             f"{e}") from None
    if now != spec.dataset_digest:
        raise ReproduceError(f"dataset {spec.dataset!r} is not the data trial {spec.trial_id} trained on "
                             f"(content digest {spec.dataset_digest}, now {now}); restore that data to "
                             f"reproduce it")


def check_scratch(folder: Path, uri: str) -> None:
    """Refuse a scratch ``folder`` whose ``mlflow.db`` is the store ``uri`` (the same file) or any
    sweep's store (it holds a parent run): the retrained run would be written beside the stored ones.

    Raises:
      ReproduceError: naming the folder and the store it holds.
    """
    from harness.core.redact import mask_uri
    from harness.tracking.uris import sqlite_path

    db = folder / "mlflow.db"
    store = sqlite_path(uri)
    if store is not None and (os.path.realpath(store) == os.path.realpath(db)
                              or (db.exists() and store.exists() and os.path.samefile(store, db))):
        what = f"the store it reads, {mask_uri(uri)}"
    elif db.is_file() and _holds_parent_runs(db):
        what = f"a sweep's store ({db})"
    else:
        return
    raise ReproduceError(f"scratch folder {folder} holds {what}: the trial trained again is written "
                         f"into a scratch store, never beside stored runs; name an empty folder, or "
                         f"none (a new temporary one)")


def _holds_parent_runs(db: Path) -> bool:
    """Whether the SQLite file ``db`` holds a sweep's parent run (read-only; not a store: no)."""
    from harness.core.mlflow_rows import values_of

    try:
        return bool(values_of(db, _PARENTS_SQL, (names.TAG_KIND, names.KIND_PARENT)))
    except Exception:
        return False


def _damaged(trial_id: str, run_id: str, why: str) -> ReproduceError:
    return ReproduceError(f"the stored record of trial {trial_id} is damaged: run {run_id}'s "
                          f"{names.ARTIFACT_TRIAL} {why}")


def stored_spec(text: str, run, trial_id: str) -> TrialSpec:
    """The TrialSpec of a run's ``trial.json`` text, checked against the trial's id and the run's
    own params.

    Raises:
      ReproduceError: the text is not a JSON object of a trial's fields, or disagrees with the run's
        params (damaged), or hashes to another id with this harness (its identity rules changed).
    """
    rid = run.info.run_id
    try:
        d = json.loads(text)
    except ValueError as e:
        where = f" at line {e.lineno} column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
        raise _damaged(trial_id, rid, f"is not JSON ({getattr(e, 'msg', e)}{where})") from None
    if not isinstance(d, dict):
        raise _damaged(trial_id, rid, f"holds a JSON {type(d).__name__}, not a trial's fields") from None
    d.pop("trial_id", None)
    try:
        spec = TrialSpec.from_dict(d)
    except Exception as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise _damaged(trial_id, rid, f"does not make a trial ({why})") from None
    if trial_id not in (spec.trial_id, spec.legacy_trial_id):  # legacy: trained with the target in its id
        params = run.data.params
        off = [(k, v, params[k]) for k, v in spec.flat_params().items() if k in params and params[k] != v]
        if off:
            k, v, p = off[0]
            more = f" (and {len(off) - 1} more)" if len(off) > 1 else ""
            raise _damaged(trial_id, rid, f"says {k} = {v}, the run's params {p}{more}")
        raise ReproduceError(f"the recorded spec of trial {trial_id} hashes to {spec.trial_id} with this "
                             f"harness (its identity rules changed since it was trained)")
    return spec


def stopped_at(run) -> int | None:
    """The rung step an early-stopping rule ended the stored run at (tag ``status`` = stopped);
    ``None`` when it was not stopped."""
    tags = run.data.tags
    step = tags.get(names.TAG_STOPPED_STEP, "")
    return int(step) if tags.get(names.TAG_STATUS) == "stopped" and step.isdigit() else None


def replayed_stop(run) -> Any:
    """The trainer's gate (:data:`harness.train.loop.Gate`) that stops the trial where the stored run
    was stopped, with its recorded reason, and nowhere else; ``None`` when it was not stopped (the
    peers that decided it are not trained again: their decision is replayed)."""
    step = stopped_at(run)
    if step is None:
        return None
    why = run.data.tags.get(names.TAG_STOP_REASON) or f"stopped at step {step} as the stored run"

    def gate(spec: TrialSpec, at: int, value: float) -> str | None:
        return why if at == step else None

    return gate
