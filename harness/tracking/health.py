"""Whether this process's store is answering: the last write's outcome, and a cheap probe.

:data:`HEALTH` (a :class:`StoreHealth`) records whether this process's last write to the store
failed and how many results it spooled; the progress line shows both. :func:`store_reachable` is the
probe that decides when to replay the spool (:mod:`harness.tracking.spool`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from harness.tracking.store_errors import TrackingUnavailableError, one_line
from harness.tracking.store_state import held_fd
from harness.tracking.uris import check_server, is_server, sqlite_path


class StoreHealth:
    """Whether this process's last write to the store failed (thread-safe enough: plain attribute
    writes). ``down_since`` (epoch s) is ``None`` while writes succeed; ``spooled`` counts results
    this process put in the local spool; the progress line shows both."""

    def __init__(self) -> None:
        self.down_since: float | None = None
        self.error = ""
        self.spooled = 0
        self.last_probe = 0.0

    @property
    def down(self) -> bool:
        """Whether the last write failed."""
        return self.down_since is not None

    def failed(self, e: BaseException) -> None:
        """Record a failed write (``down_since`` keeps the first failure's time)."""
        if self.down_since is None:
            self.down_since = time.time()
        self.error = one_line(e, 160)

    def ok(self) -> None:
        """Record that the store answers again."""
        self.down_since = None
        self.error = ""


#: This process's store health (one per process: a worker process has its own).
HEALTH = StoreHealth()

#: While the store is down, a write (or a worker's read of its peers' rung values) tries it again at
#: most this often (seconds); results meanwhile go straight to the spool.
PROBE_S = 5.0


def store_should_be_tried(uri: str) -> bool:
    """False while the store is known down and was probed less than :data:`PROBE_S` s ago."""
    if not HEALTH.down:
        return True
    now = time.time()
    if now - HEALTH.last_probe < PROBE_S:
        return False
    HEALTH.last_probe = now
    return store_reachable(uri)


def store_reachable(uri: str, timeout: float = 2.0) -> bool:
    """A cheap probe: ``GET /health`` for a server; for a SQLite store, whether its file and folder
    can be written (the next write then tells for sure)."""
    if is_server(uri):
        try:
            check_server(uri, timeout)
            return True
        except TrackingUnavailableError:
            return False
    db = sqlite_path(uri)
    if db is not None:
        return os.access(db, os.W_OK) and os.access(db.parent, os.W_OK) and _not_immutable(db)
    return True


def _not_immutable(db: Path) -> bool:
    """False when the file or its folder carries the immutable attribute (``chattr +i``), which
    ``os.access`` does not see for root."""
    try:
        import fcntl
        import struct

        for p in (db, db.parent):
            if p == db:  # never closed: closing it would drop this process's SQLite locks (held_fd)
                buf = fcntl.ioctl(held_fd(db), 0x80086601, struct.pack("l", 0))  # FS_IOC_GETFLAGS
            else:
                fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    buf = fcntl.ioctl(fd, 0x80086601, struct.pack("l", 0))
                finally:
                    os.close(fd)
            if struct.unpack("l", buf)[0] & 0x10:  # FS_IMMUTABLE_FL
                return False
    except (OSError, ImportError):
        pass
    return True
