"""A read-only snapshot of one experiment in a local SQLite MLflow store, read with ``sqlite3``.

:func:`reports.results.results` reads 1,000 trials in well under a second this way; through
``MlflowClient`` the same read took a minute (one ``get_metric_history`` call per run and metric,
and seconds of importing MLflow). :class:`StoreSnapshot` answers the few client calls
:mod:`reports.runs` and :mod:`reports.frame` make (``get_experiment_by_name``,
``search_experiments``, ``search_runs`` with the filters :mod:`reports.runs` writes,
``get_metric_history``, ``download_artifacts`` of a local artifact store) from rows it reads in one
transaction, so :func:`reports.frame.load_sweep` runs on it unchanged; ``tests/test_results.py``
checks that the frame it gives equals the one ``MlflowClient`` gives, value for value.

What it reads are MLflow's own tables (``experiments``, ``runs``, ``tags``, ``params``,
``latest_metrics``, ``metrics``: the layout of every MLflow release since 1.x), opened read-only
(``mode=ro``; ``immutable=1`` for a store SQLite cannot open so where it is); it never writes.
:func:`snapshot_or_client` falls back to ``MlflowClient`` for a server (``http(s)://``), another
database, or a file without MLflow's tables.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np

from harness.core.mlflow_rows import MLFLOW_TABLES_READ, Experiment, Run, connect, read_runs, value_of

__all__ = ["StoreSnapshot", "local_sqlite_path", "snapshot_or_client"]

#: The tables a file must hold to be read as an MLflow store.
TABLES = MLFLOW_TABLES_READ


def local_sqlite_path(tracking_uri: str | None) -> str | None:
    """The file of a ``sqlite:///`` tracking URI (``None``: ``MLFLOW_TRACKING_URI``, else MLflow's
    default ``./mlflow.db``); ``None`` for any other kind of store."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):].split("?", 1)[0]
    return unquote(path) if path else None




@dataclass(frozen=True)
class _Metric:
    """One logged value, as ``mlflow.entities.Metric`` holds it."""

    key: str
    value: float
    timestamp: int
    step: int


class _Page(list):
    """A page of ``search_runs``; ``token`` is the next page's (``None``: the last page)."""

    token: str | None = None


#: The filters :mod:`reports.runs` writes: ``tags.`KEY` = 'v'`` (``"v"`` when v holds ``'``),
#: ``tags.`KEY` != ''``, ``attributes.status = 'FINISHED'``.
_FILTER = re.compile(r"^\s*(?:tags\.`(?P<tag>[^`]+)`|attributes\.(?P<attr>status))\s*(?P<op>=|!=)\s*"
                     r"(?:'(?P<value>[^']*)'|\"(?P<dq>[^\"]*)\")\s*$")
_ORDER = re.compile(r"^\s*attributes\.start_time\s+(?P<dir>ASC|DESC)\s*$", re.IGNORECASE)


class StoreSnapshot:
    """Every active run of one or all experiments of a SQLite store, read at construction in one
    read transaction (tags, params, latest metrics); metric histories are read on first use, one
    query per metric name.

    Args:
      path: the SQLite file.
      experiment: only this experiment's runs (by name); ``None``: every experiment's.
      tag_keys, param_keys: read only these tags / params (``None``: all); ``status`` reads a
        10,000-trial store in about a second this way.
      metrics: read the latest metrics (``False``: none; histories are read on first use anyway).
      immutable: read the file with ``immutable=1`` (a store SQLite cannot open where it is:
        :func:`harness.core.mlflow_rows.immutable_uri`), right only while nobody writes it.

    Raises:
      FileNotFoundError: no such file. ValueError: the file is not an MLflow store (a table missing).
    """

    #: It reads active runs only: :func:`reports.runs.search_all_runs` passes no ``ViewType``.
    active_only = True

    def __init__(self, path: str, experiment: str | None = None, *, tag_keys: Sequence[str] | None = None,
                 param_keys: Sequence[str] | None = None, metrics: bool = True, immutable: bool = False):
        self.path = path
        self.tracking_uri = f"sqlite:///{path}"
        self._lock = threading.Lock()
        self._con = connect(path, immutable=immutable)
        self._history: dict[str, dict[str, list[tuple[int, int, float]]]] = {}
        with self._lock:
            self._con.execute("BEGIN")
            try:
                self.experiments, self.runs, self._run_select, self._ids = read_runs(
                    self._con, None if experiment is None else [experiment], tag_keys=tag_keys,
                    param_keys=param_keys, metrics=metrics)
            finally:
                self._con.execute("COMMIT")

    def _metric_rows(self, key: str) -> dict[str, list[tuple[int, int, float]]]:
        """Every ``(step, timestamp, value)`` of metric ``key`` of the snapshot's runs, by run id, in
        the order :func:`reports.runs.metric_history` puts MLflow's history (step, then timestamp,
        then value); one query per metric, cached."""
        with self._lock:
            if key not in self._history:
                by_run: dict[str, list[tuple[int, int, float]]] = {}
                if self.runs:
                    for rid, step, ts, value, is_nan in self._con.execute(
                            "SELECT run_uuid, step, timestamp, value, is_nan FROM metrics WHERE key = ? "
                            f"AND run_uuid IN ({self._run_select}) ORDER BY run_uuid, step, timestamp, value",
                            [key, *self._ids]):
                        by_run.setdefault(rid, []).append((step, ts, value_of(value, is_nan)))
                self._history[key] = by_run
            return self._history[key]

    def close(self) -> None:
        """Close the database connection (histories already read stay readable)."""
        self._con.close()

    # --------------------------------------------------------------- the client calls reports make
    def get_experiment_by_name(self, name: str) -> Experiment | None:
        """The experiment called ``name`` (deleted ones too, as MLflow's), else ``None``."""
        return next((e for e in self.experiments if e.name == name), None)

    def search_experiments(self, *args: Any, **kwargs: Any) -> list[Experiment]:
        """The active experiments (MLflow's default view and order: newest first)."""
        return [e for e in self.experiments if e.lifecycle_stage == "active"]

    def search_runs(self, experiment_ids: Sequence[str], filter_string: str = "", run_view_type: Any = None,
                    max_results: int | None = None, order_by: Sequence[str] | None = None,
                    page_token: Any = None) -> _Page:
        """The active runs of ``experiment_ids`` matching ``filter_string``, ordered as MLflow orders
        them (``order_by`` ``attributes.start_time ASC|DESC``, then run id; MLflow's default: start
        time descending), ``max_results`` a page from ``page_token`` on (the previous page's
        ``token``).

        Raises:
          NotImplementedError: a filter or order other than those :mod:`reports.runs` writes.
        """
        ids = {str(e) for e in experiment_ids}
        runs = [r for r in self.runs.values() if r.info.experiment_id in ids]
        if filter_string.strip():
            m = _FILTER.match(filter_string)
            if m is None:
                raise NotImplementedError(f"StoreSnapshot.search_runs: filter {filter_string!r}")
            want = m["value"] if m["value"] is not None else m["dq"]  # as MLflow: nothing unescaped
            if m["tag"] is not None:
                key = m["tag"]
                runs = [r for r in runs if key in r.data.tags
                        and (r.data.tags[key] == want) == (m["op"] == "=")]
            else:
                runs = [r for r in runs if (r.info.status == want) == (m["op"] == "=")]
        desc = True
        for clause in order_by or []:
            if (o := _ORDER.match(clause)) is None:
                raise NotImplementedError(f"StoreSnapshot.search_runs: order_by {clause!r}")
            desc = o["dir"].upper() == "DESC"
        runs.sort(key=lambda r: r.info.run_id)
        runs.sort(key=lambda r: r.info.start_time or 0, reverse=desc)
        start = int(page_token or 0)
        end = start + max_results if max_results else len(runs)
        page = _Page(runs[start:end])
        page.token = str(end) if end < len(runs) else None
        return page

    def get_run(self, run_id: str) -> Run:
        """The run ``run_id`` as read (of the snapshot's experiments).

        Raises:
          LookupError: a run the snapshot does not hold.
        """
        if run_id not in self.runs:
            raise LookupError(f"run {run_id} is not in the snapshot of {self.path}")
        return self.runs[run_id]

    def get_metric_history(self, run_id: str, key: str) -> list[_Metric]:
        """Every logged value of metric ``key`` of run ``run_id`` (empty when none)."""
        return [_Metric(key, v, ts, step) for step, ts, v in self._metric_rows(key).get(run_id, [])]

    def metric_arrays(self, wanted: Sequence[tuple[str, str]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """:func:`reports.runs.metric_history` of every ``(run_id, key)``, in order: (steps int64,
        values float64) by ascending step, a step logged twice keeping its later value (one query
        per key)."""
        out = []
        for rid, key in wanted:
            last: dict[int, float] = {}
            for step, _ts, v in self._metric_rows(key).get(rid, ()):
                last[step] = v  # rows are by step, then timestamp: the later value wins
            out.append((np.fromiter(last.keys(), np.int64, len(last)),
                        np.fromiter(last.values(), np.float64, len(last))))
        return out

    def download_artifacts(self, run_id: str, path: str, dst_path: str | None = None) -> str:
        """The local path of artifact ``path`` of run ``run_id`` (copied into ``dst_path`` when
        given); a store whose artifacts are not local files is read through ``MlflowClient``.

        Raises:
          OSError: the artifact is not there.
        """
        root = self.runs[run_id].info.artifact_uri if run_id in self.runs else ""
        local = _local_dir(root)
        if local is None:
            from mlflow import MlflowClient

            return MlflowClient(self.tracking_uri).download_artifacts(run_id, path, dst_path)
        src = os.path.join(local, path)
        if not os.path.isfile(src):
            raise FileNotFoundError(src)
        if dst_path is None:
            return src
        return shutil.copy(src, os.path.join(dst_path, os.path.basename(path)))


def _local_dir(artifact_uri: str) -> str | None:
    """The folder of a ``file://`` or plain-path artifact URI, else ``None``."""
    if not artifact_uri:
        return None
    parsed = urlparse(artifact_uri)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return artifact_uri
    return None


def snapshot_or_client(tracking_uri: str | None, experiment: str | None = None, *, immutable: bool = False):
    """A :class:`StoreSnapshot` of a local SQLite store, else an ``MlflowClient`` of the store.
    ``immutable``: the store is one SQLite cannot open where it is (``unopenable``), read with
    ``immutable=1`` and never through MLflow.

    Raises:
      ValueError: ``immutable`` and the file cannot be read so.
    """
    path = local_sqlite_path(tracking_uri)
    if path is not None and (immutable or os.path.isfile(path)):
        try:
            return StoreSnapshot(path, experiment, immutable=immutable)
        except (ValueError, sqlite3.Error) as e:
            if immutable:  # MLflow cannot open it either
                raise ValueError(f"cannot read the MLflow store {path} as a snapshot: {e}") from None
    from reports.runs import mlflow_client

    return mlflow_client(tracking_uri)
