"""Per-trial claims: an advisory lock per trial so that invocations on one machine never train it twice.

:class:`Claim` is an ``fcntl.flock`` on ``claims/<trial_id>`` in the SQLite store's side directory
(:func:`harness.tracking.store_state.side_dir`) that concurrent invocations on one machine take
before training a trial. The file's text is a marker written by the holder before it writes the
trial's run (``writing``, then ``done <run id>``, ``spooled`` or ``failed``): a process that takes a
claim whose marker is empty knows no run of that trial was written since the claim files exist, and
trains without asking the store; any other marker sends it to the store (and the spool) first.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from harness.tracking.store_state import side_dir


class Claim:
    """An exclusive claim on one trial by this process (see the module docstring).

    ``Claim.try_take(db, trial_id)`` returns a held claim; ``None`` when another process holds it
    (after waiting up to ``wait_s``); or :data:`NO_CLAIMS` when claims cannot be used here (no
    ``fcntl``, a side directory that cannot be written): the caller then proceeds unclaimed.
    :meth:`release` may be called from any thread; a dead process's claims are released by the
    kernel (``flock``).
    """

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    @classmethod
    def path_for(cls, db: Path, trial_id: str) -> Path:
        """The claim file of ``trial_id`` for the store ``db`` (``<side dir>/claims/<trial_id>``)."""
        return side_dir(db) / "claims" / trial_id

    @classmethod
    def try_take(cls, db: str | Path, trial_id: str, *, wait_s: float = 0.0):
        """A held :class:`Claim`, ``None`` (held elsewhere after ``wait_s`` s) or :data:`NO_CLAIMS`."""
        try:
            import fcntl
        except ImportError:  # not POSIX: no claims
            return NO_CLAIMS
        path = cls.path_for(Path(db), trial_id)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return NO_CLAIMS
        deadline = time.monotonic() + wait_s
        delay = 0.02
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return cls(path, fd)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
            except OSError:
                os.close(fd)
                return NO_CLAIMS

    def marker(self) -> str:
        """The marker text left by the last holder (``""``: no run of the trial was written)."""
        try:
            return os.pread(self.fd, 200, 0).decode(errors="replace").strip()
        except OSError:
            return "unknown"

    def mark(self, text: str) -> None:
        """Replace the marker with ``text`` (errors ignored: the marker is advisory)."""
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, text.encode() + b"\n", 0)

    def release(self) -> None:
        """Close the claim's file, which releases the lock; idempotent."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the only descriptor releases the flock

    @property
    def held(self) -> bool:
        """Whether this claim has not been released."""
        return self.fd >= 0


#: What :meth:`Claim.try_take` returns where claims cannot be used (the caller proceeds unclaimed).
NO_CLAIMS = "no-claims"
