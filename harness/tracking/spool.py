"""A durable local spool for trial results that could not be written to the tracking store.

When a write fails (a tracking server that is down or unreachable, a SQLite store whose folder has
become unwritable, a full disk), the trained result is not lost: :func:`put` pickles it into one
file of the spool, ``$HARNESS_SPOOL_DIR`` (default ``$HARNESS_CACHE_DIR/spool``, i.e.
``~/.cache/harness/spool``) ``/<16 hex of SHA-256 of the store URI>/``, written to a temporary name,
fsynced and renamed, so a file in the spool is always complete. The spool lives outside the store's
folder on purpose: that folder may be the thing that is unwritable.

:func:`replay` writes the entries back (each through the caller's ``write`` function, which skips a
trial that has a FINISHED run meanwhile) and deletes each one once written. It runs at the start of
every invocation on the store, in the background writer as soon as the store answers again, and at
the end of a sweep; one process at a time per store (a ``filelock``, not waited for). An entry the
store rejects for a reason other than an outage is moved to ``rejected/`` with the error beside it,
so it is neither retried forever nor lost. An entry that cannot be unpickled (written by another
harness version) is moved to ``unreadable/``.

Entry (a dict, pickled): ``kind`` (``"trial"``), ``uri``, ``ctx`` (the
:class:`harness.core.context.RunContext` fields), ``t0_ms`` (training start, ms), ``result`` (the
:class:`harness.core.spec.TrialResult`), ``stale_run_id`` (a RUNNING run of the trial left by the failed
write, ended KILLED on replay, or ``None``), ``error`` (why it was spooled), ``spooled_at`` (epoch
s), ``owner`` (``host:pid``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.util import cache_dir
from harness.tracking.errors import one_line


def spool_root() -> Path:
    """``$HARNESS_SPOOL_DIR``, else ``$HARNESS_CACHE_DIR/spool`` (not created)."""
    env = os.environ.get("HARNESS_SPOOL_DIR")
    if env:
        return Path(env)
    return cache_dir("spool")


def spool_dir(uri: str) -> Path:
    """This store's spool folder (not created)."""
    return spool_root() / hashlib.sha256(uri.encode()).hexdigest()[:16]


def put(uri: str, entry: dict[str, Any]) -> Path:
    """Write ``entry`` durably into ``uri``'s spool; returns its path.

    Raises:
      OSError: the spool itself cannot be written (the caller then has nowhere to keep the result).
    """
    d = spool_dir(uri)
    d.mkdir(parents=True, exist_ok=True)
    marker = d / "uri.txt"
    if not marker.exists():
        marker.write_text(uri + "\n")
    tid = entry["result"].spec.trial_id if "result" in entry else "x"
    name = f"{tid}-{os.getpid()}-{time.time_ns()}.pkl"
    tmp = d / f".{name}.tmp"
    with tmp.open("wb") as f:
        pickle.dump(entry, f, protocol=pickle.HIGHEST_PROTOCOL)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, d / name)
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return d / name


def entries(uri: str) -> list[Path]:
    """The spooled entries of ``uri``, oldest first (by name: pid and time)."""
    d = spool_dir(uri)
    try:
        return sorted((p for p in d.glob("*.pkl")), key=lambda p: p.name.split("-", 2)[-1])
    except OSError:
        return []


def load(path: Path) -> dict[str, Any] | None:
    """One entry, or ``None`` (moved to ``unreadable/``) if it cannot be unpickled."""
    try:
        with path.open("rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        return None
    except Exception:
        _move(path, "unreadable", "cannot be unpickled (written by another harness version?)")
        return None


def pending_trials(uri: str) -> dict[str, dict[str, Any]]:
    """``{trial_id: entry}`` of everything spooled for ``uri`` (these trials are trained: a plan
    counts them as done)."""
    out = {}
    for p in entries(uri):
        e = load(p)
        if e is not None and "result" in e:
            out.setdefault(e["result"].spec.trial_id, e)
    return out


def _move(path: Path, sub: str, why: str) -> None:
    with contextlib.suppress(OSError):
        (path.parent / sub).mkdir(exist_ok=True)
        os.replace(path, path.parent / sub / path.name)
        (path.parent / sub / (path.name + ".why.txt")).write_text(why + "\n")


@dataclass
class ReplayReport:
    """What :func:`replay` did: entries ``written`` to the store, ``already`` there (a FINISHED run
    existed), ``rejected`` (moved aside), ``left`` (still spooled: the store failed again), and
    ``error`` (the last outage error, one line)."""

    written: int = 0
    already: int = 0
    rejected: int = 0
    left: int = 0
    error: str = ""
    trial_ids: list[str] = field(default_factory=list)


def replay(uri: str, write: Callable[[dict[str, Any]], bool],
           is_outage: Callable[[BaseException], bool]) -> ReplayReport:
    """Write every entry of ``uri``'s spool with ``write(entry)`` (``True``: written, ``False``: a
    FINISHED run of the trial was already there); delete each once done. Stops at the first outage
    (``is_outage(exc)``), leaving the rest. Another process replaying the same spool: returns at once
    with ``left`` set."""
    from filelock import FileLock, Timeout

    rep = ReplayReport()
    paths = entries(uri)
    if not paths:
        return rep
    lock = FileLock(str(spool_dir(uri) / ".replay.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        rep.left = len(paths)
        return rep
    try:
        paths = entries(uri)
        for i, p in enumerate(paths):
            e = load(p)
            if e is None:
                continue
            try:
                wrote = write(e)
            except Exception as exc:
                if is_outage(exc):
                    rep.error = one_line(exc, 160)
                    rep.left = len(paths) - i
                    return rep
                _move(p, "rejected", one_line(exc, 2000))
                rep.rejected += 1
                continue
            if wrote:
                rep.written += 1
            else:
                rep.already += 1
            rep.trial_ids.append(e["result"].spec.trial_id)
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    finally:
        lock.release()
    return rep
