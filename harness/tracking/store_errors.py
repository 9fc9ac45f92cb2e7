"""What a tracking store's errors mean and how they are shown: the one-line form, outage or refusal.

:class:`TrackingUnavailableError` is the harness's own "the store cannot be reached" (raised before
training; the CLI exits 3 on it). :func:`one_line` is how every store error is printed;
:func:`is_outage` decides whether a failed write goes to the spool (:mod:`harness.tracking.spool`)
to be retried, or is a refusal that retrying would not change. A password in a store's message
(a database URI quoted by its driver) is masked (:func:`harness.core.redact.mask_text`). Standard
library only.
"""

from __future__ import annotations

from harness.core.redact import mask_text


class TrackingUnavailableError(RuntimeError):
    """The tracking store cannot be reached (server down, bad URI). Raised before training."""


class SnapshotOnlyError(TrackingUnavailableError):
    """The SQLite store ``db`` is sound, but SQLite cannot open it where it is (``unopenable`` in
    :mod:`harness.tracking.store_state`: e.g. its folder is not writable). ``status`` and ``report``,
    which only read, read it as an immutable snapshot instead; every other command stops on it as
    on any :class:`TrackingUnavailableError`."""

    def __init__(self, message: str, db):
        super().__init__(message)
        self.db = db


def one_line(e: BaseException, limit: int = 300) -> str:
    """What a one-line error shows of a store's exception: the first non-empty line of the message
    of its root cause (``sqlite3.OperationalError: unable to open database file`` rather than
    SQLAlchemy's wrapper note), any password in it masked, at most ``limit`` characters."""
    root, seen = e, 0
    while root.__cause__ is not None and seen < 10:
        root, seen = root.__cause__, seen + 1
    lines = [ln.strip() for ln in str(root).splitlines() if ln.strip()]
    if root is not e and lines:
        text = f"{type(root).__name__}: {lines[0]}"
    else:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        text = lines[0] if lines else type(e).__name__
    text = mask_text(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_OUTAGE_TEXT = ("max retries exceeded", "connection refused", "connection aborted", "connection reset",
                "connectionerror", "timed out", "timeout", "remotedisconnected", "name or service not known",
                "temporarily unavailable", "service unavailable", "bad gateway", "readonly database",
                "read-only file system", "unable to open database", "disk i/o error", "database is locked",
                "database or disk is full", "no space left", "permission denied", "operation not permitted",
                "store is unreachable")


def is_outage(e: BaseException) -> bool:
    """Whether a store error means "try again later" (server down or unreachable, store folder not
    writable, disk full, database locked, HTTP 5xx) rather than "the store refuses this write"."""
    import sqlite3

    seen = 0
    while e is not None and seen < 5:
        if isinstance(e, OSError | TrackingUnavailableError | ConnectionError | TimeoutError |
                      sqlite3.OperationalError):
            return True
        if getattr(e, "error_code", "") in ("INTERNAL_ERROR", "TEMPORARILY_UNAVAILABLE"):
            return True
        text = str(e).lower()
        if any(t in text for t in _OUTAGE_TEXT):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False
