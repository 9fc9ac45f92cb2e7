"""Writing a run's data to MLflow in few calls: metrics buffered for ``log_batch``, params, tags, inputs.

Metrics are buffered (:class:`MetricBuffer`) and written with ``log_batch`` (≤ 1000 entities per
call, MLflow's limit); non-finite values are dropped. A ``log_batch`` of a trial's ~300 metric points
is slow next to a short trial, so the in-process executor writes them on a background thread
(``worker.execute_unit(background=True)``). Imports mlflow only when writing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from harness.core.finite import finite

MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100


class MetricBuffer:
    """Buffers ``(key, value, step, timestamp_ms)`` and writes them with ``log_batch``.

    Non-finite values (and ``None``) are dropped at :meth:`add`.
    """

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, int, int]] = []

    def add(self, key: str, value: Any, step: int, timestamp_ms: int | None = None) -> None:
        """Buffer one point (``timestamp_ms`` defaults to now); ``None`` and non-finite values are dropped."""
        if value is None or not finite(float(value)):
            return
        ts = int(timestamp_ms if timestamp_ms is not None else time.time() * 1000)
        self.rows.append((key, float(value), int(step), ts))

    def flush(self, client, run_id: str, params: Mapping[str, Any] | None = None,
              tags: Mapping[str, Any] | None = None) -> int:
        """Write the buffered metrics (plus ``params`` and ``tags``, ≤ 100 each) in as few
        ``log_batch`` calls as MLflow's limits allow (1000 entities a call). Returns the number of
        metrics written."""
        from mlflow.entities import Metric

        ps, ts = _entities(params or {}, tags or {})
        if len(ps) > MAX_PARAMS_PER_BATCH or len(ts) > MAX_PARAMS_PER_BATCH:
            log_params_tags(client, run_id, dict(params or {}), dict(tags or {}))
            ps, ts = [], []
        n = len(self.rows)
        room = MAX_METRICS_PER_BATCH - len(ps) - len(ts)
        chunks = [self.rows[:room]] + [self.rows[i:i + MAX_METRICS_PER_BATCH]
                                       for i in range(room, n, MAX_METRICS_PER_BATCH)]
        for j, rows in enumerate(chunks):
            ms = [Metric(k, v, t, s) for k, v, s, t in rows]
            if ms or (j == 0 and (ps or ts)):
                client.log_batch(run_id, metrics=ms, params=ps if j == 0 else [],
                                 tags=ts if j == 0 else [], synchronous=True)
        self.rows = []
        return n


def log_params_tags(client, run_id: str, params: Mapping[str, Any], tags: Mapping[str, Any]) -> None:
    """Params (≤100 a call) and tags with as few ``log_batch`` calls as possible."""
    ps, ts = _entities(params, tags)
    first = True
    for i in range(0, max(len(ps), 1), MAX_PARAMS_PER_BATCH):
        client.log_batch(run_id, params=ps[i:i + MAX_PARAMS_PER_BATCH], tags=ts if first else [],
                         synchronous=True)
        first = False


def _entities(params: Mapping[str, Any], tags: Mapping[str, Any]) -> tuple[list, list]:
    """MLflow ``Param``s (values cut at 6,000 characters, MLflow's limit) and ``RunTag``s."""
    from mlflow.entities import Param, RunTag

    return ([Param(k, str(v)[:6000]) for k, v in params.items()],
            [RunTag(k, str(v)) for k, v in tags.items()])


def log_dataset_input(client, run_id: str, dataset: Any, name: str, digest_cache: dict) -> None:
    """Log the training split as an MLflow dataset input (``mlflow.data.from_numpy``).

    The dataset entity (whose digest hashes the arrays) is built once per dataset name per process
    and cached in ``digest_cache``.
    """
    from mlflow.entities import DatasetInput, InputTag

    ent = digest_cache.get(name)
    if ent is None:
        import mlflow.data

        src = getattr(dataset, "source", "") or name
        ds = mlflow.data.from_numpy(dataset.x_train, targets=dataset.y_train, name=name,
                                    source=_source(src))
        ent = ds._to_mlflow_entity()
        digest_cache[name] = ent
    client.log_inputs(run_id, datasets=[DatasetInput(ent, tags=[InputTag("mlflow.data.context", "train")])])


def _source(src: str):
    from mlflow.data.http_dataset_source import HTTPDatasetSource

    if str(src).startswith(("http://", "https://")):
        return HTTPDatasetSource(src)
    from mlflow.data.code_dataset_source import CodeDatasetSource

    return CodeDatasetSource(tags={"source": str(src)[:500]})
