"""MLflow's runs read straight from a local SQLite store with :mod:`sqlite3`, read-only (standard library).

MLflow's ``search_runs`` builds an ORM object per tag, param and metric row, which is slow for the
thousands of runs of a sweep (docs/decisions.md, "Reads with sqlite3, not MLflow"). What is
read are MLflow's own tables (``experiments``, ``runs``, ``tags``, ``params``, ``latest_metrics``:
their layout since MLflow 1.x), opened with ``mode=ro`` in one read transaction (a consistent view;
nothing is created, migrated or written); a store SQLite cannot open so where it is (its folder not
writable) with ``immutable=1`` (:func:`immutable_uri`). The objects answer what the harness and its
reports read of ``mlflow.entities.Run``: ``info`` (``run_id``, ``experiment_id``, ``status``, ``start_time``,
``end_time``, ``lifecycle_stage``, ``artifact_uri``, ``run_name``) and ``data`` (``tags``,
``params``, ``metrics``: the latest value of each, NaN where MLflow stored one).

Used by the sweep's resume check on a SQLite store (:func:`harness.tracking.client.trial_runs`),
``status`` and :class:`reports.snapshot.StoreSnapshot` (which adds the metric histories).
"""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MLFLOW_TABLES_READ", "Experiment", "Run", "RunData", "RunInfo", "connect", "immutable_uri",
           "read_runs", "rows_of", "values_of"]

#: The tables a file must hold to be read as an MLflow store.
MLFLOW_TABLES_READ = ("experiments", "runs", "tags", "params", "latest_metrics", "metrics")


@dataclass
class Experiment:
    experiment_id: str
    name: str
    lifecycle_stage: str
    artifact_location: str


@dataclass
class RunInfo:
    run_id: str
    experiment_id: str
    status: str
    start_time: int | None
    end_time: int | None
    lifecycle_stage: str
    artifact_uri: str
    run_name: str | None = None

    @property
    def run_uuid(self) -> str:
        return self.run_id


@dataclass
class RunData:
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class Run:
    """The parts of ``mlflow.entities.Run`` the harness reads: ``info`` and ``data``."""

    info: RunInfo
    data: RunData


def value_of(v: float, is_nan: Any) -> float:
    """A metric value as MLflow returns it (its ``is_nan`` column: NaN)."""
    return math.nan if is_nan else float(v)


def immutable_uri(path: str | Path) -> str:
    """The SQLite URI that reads the file ``path`` with ``immutable=1``: SQLite's way to read a file
    on read-only media, with no ``-wal``/``-shm`` file and no lock. Right only while nobody writes
    the file: another process's commits meanwhile may be missed (or, mid-write, read torn)."""
    return f"{Path(path).resolve().as_uri()}?immutable=1"  # percent-encoded: "a?b" stays a folder


def connect(path: str, *, immutable: bool = False) -> sqlite3.Connection:
    """A read-only connection to the MLflow SQLite file ``path``; ``immutable``: opened with
    ``immutable=1`` (:func:`immutable_uri`), for a store SQLite cannot open where it is (a folder
    that is not writable: ``unopenable`` in :mod:`harness.tracking.store_state`).

    Raises:
      FileNotFoundError: no such file. ValueError: not an MLflow store (a table missing).
      sqlite3.Error: not an SQLite database.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(path)
    uri = immutable_uri(path) if immutable else f"file:{path}?mode=ro"
    con = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=30)
    have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if missing := [t for t in MLFLOW_TABLES_READ if t not in have]:
        con.close()
        raise ValueError(f"{path} is not an MLflow store (no table {missing[0]!r})")
    return con


def read_runs(con: sqlite3.Connection, experiments: Sequence[str] | None = None, *,
              experiment_ids: Sequence[str] | None = None, tag_keys: Sequence[str] | None = None,
              param_keys: Sequence[str] | None = None, metrics: bool = True,
              ) -> tuple[list[Experiment], dict[str, Run], str, list[int]]:
    """Every experiment, and the active runs of the experiments named ``experiments`` (or with the
    ids ``experiment_ids``; both ``None``: of all), in the caller's transaction.

    ``tag_keys``/``param_keys`` read only those tags/params (``None``: all), ``metrics=False`` no
    latest metrics. Returns ``(experiments in MLflow's search_experiments order (newest first),
    {run_id: Run}, the SQL selecting those runs' ids, its parameters)``; the last two let a caller
    read more of the same runs (:class:`reports.snapshot.StoreSnapshot`'s histories).
    """
    exps = [Experiment(str(i), n, s, a) for i, n, s, a in con.execute(
        "SELECT experiment_id, name, lifecycle_stage, artifact_location FROM experiments "
        "ORDER BY creation_time DESC, experiment_id ASC")]
    wanted = [e for e in exps if (experiments is None or e.name in experiments)
              and (experiment_ids is None or e.experiment_id in {str(i) for i in experiment_ids})]
    ids = [int(e.experiment_id) for e in wanted]
    runs: dict[str, Run] = {}
    if not ids:
        return exps, runs, "", ids
    marks = ",".join("?" * len(ids))
    sel = f"SELECT run_uuid FROM runs WHERE experiment_id IN ({marks}) AND lifecycle_stage = 'active'"
    for rid, eid, status, start, end, stage, art, name in con.execute(
            "SELECT run_uuid, experiment_id, status, start_time, end_time, lifecycle_stage, "
            f"artifact_uri, name FROM runs WHERE run_uuid IN ({sel})", ids):
        runs[rid] = Run(RunInfo(rid, str(eid), status, start, end, stage, art, name), RunData())
    for table, attr, keys in (("tags", "tags", tag_keys), ("params", "params", param_keys)):
        only = "" if keys is None else f" AND key IN ({','.join('?' * len(keys))})"
        for key, value, rid in con.execute(
                f"SELECT key, value, run_uuid FROM {table} WHERE run_uuid IN ({sel}){only}",
                [*ids, *(keys or ())]):
            getattr(runs[rid].data, attr)[key] = value
    if metrics:
        for key, value, is_nan, rid in con.execute(
                f"SELECT key, value, is_nan, run_uuid FROM latest_metrics WHERE run_uuid IN ({sel})", ids):
            runs[rid].data.metrics[key] = value_of(value, is_nan)
    return exps, runs, sel, ids


def rows_of(path: Any, sql: str, params: Sequence[Any]) -> list[tuple]:
    """The rows of one query on the MLflow SQLite file ``path``, opened read-only (``mode=ro``:
    nothing created or migrated).

    Raises:
      sqlite3.Error: not an SQLite database, or not an MLflow store's tables.
    """
    uri = Path(path).resolve().as_uri()  # percent-encoded: a folder named "a?b" stays a folder
    con = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def values_of(path: Any, sql: str, params: Sequence[Any]) -> set[str]:
    """The non-empty values of the first column of one query (:func:`rows_of`).

    Raises:
      sqlite3.Error: not an SQLite database, or not an MLflow store's tables.
    """
    return {v for (v, *_) in rows_of(path, sql, params) if v}
