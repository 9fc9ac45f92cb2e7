"""``harness.results``: :func:`reports.results.results` on a store opened as ``report`` and ``status``
open it, so that a store that cannot be read is one line, never a database driver's exception."""

from __future__ import annotations

import sqlite3
import warnings
from typing import Any

__all__ = ["SnapshotWarning", "results"]


class SnapshotWarning(UserWarning):
    """The store is read as an immutable snapshot: SQLite cannot open it where it is."""


def results(experiment: str, *, tracking_uri: str | None = None, immutable: bool = False, **options: Any):
    """The results of one sweep of ``experiment``, read from the store (:func:`reports.results.results`).

    A local SQLite store SQLite cannot open where it is (its folder not writable) is read as an
    immutable snapshot, with one :class:`SnapshotWarning` (as ``report`` and ``status`` do).

    Args:
      experiment: the MLflow experiment (the config's ``name``).
      tracking_uri: the store (``None``: ``MLFLOW_TRACKING_URI``, else ``sqlite:///<cwd>/mlflow.db``).
      immutable: read a SQLite store as an immutable snapshot without trying to open it first.
      options: :func:`reports.results.results`' keyword arguments: ``sweep``, ``versions``,
        ``clock``, ``select_by``, ``scoring``, ``tuning_draws``, ``target`` (``"valid/loss=1.9"``:
        steps and times to it read off the stored curves, nothing trained).

    Returns:
      a :class:`reports.results.Results` (its tables as DataFrames, and the report's figures).

    Raises:
      harness.tracking.store_errors.TrackingUnavailableError: the store cannot be opened or read (a file
        that is not an MLflow store, a server that does not answer): one line.
      ValueError, TypeError: as :func:`reports.results.results` (no store at a local path, an
        unknown experiment, sweep id or option value).
      harness.config.errors.UsageError: ``tracking_uri`` is neither a string nor ``None``.
    """
    from harness.orchestrate.api import check_option_types
    from harness.tracking.client import prepare_store, ready_sqlite_store
    from harness.tracking.store_errors import SnapshotOnlyError, TrackingUnavailableError, one_line
    from harness.tracking.store_state import snapshot_warning
    from harness.tracking.uris import is_server, resolve_tracking_uri, sqlite_path
    from reports.results import results as read

    check_option_types(tracking_uri=tracking_uri)  # tracking_uri=5 would fail deep inside
    uri = resolve_tracking_uri(tracking_uri)
    db = sqlite_path(uri)
    if db is not None and db.exists() and not immutable:
        try:
            ready_sqlite_store(uri, create=False)
        except SnapshotOnlyError as e:
            warnings.warn(snapshot_warning(e.db), SnapshotWarning, stacklevel=2)
            immutable = True
    elif is_server(uri):
        prepare_store(uri, create=False)  # a server that does not answer: said at once
    try:
        return read(experiment, tracking_uri=uri, immutable=immutable, **options)
    except sqlite3.Error as e:
        raise TrackingUnavailableError(f"cannot read the MLflow store {uri}: {one_line(e)}") from None
    except Exception as e:
        if type(e).__module__.startswith(("sqlalchemy", "mlflow")):
            raise TrackingUnavailableError(f"cannot read the MLflow store {uri}: {one_line(e)}") from None
        raise
