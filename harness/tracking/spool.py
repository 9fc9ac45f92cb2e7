"""A durable local spool for trial results that could not be written to the tracking store.

When a write fails (a tracking server that is down or unreachable, a SQLite store whose folder has
become unwritable, a full disk), the trained result is not lost: :func:`put` writes it as JSON into one
file of the spool, ``$HARNESS_SPOOL_DIR`` (default ``$HARNESS_CACHE_DIR/spool``, i.e.
``~/.cache/harness/spool``) ``/<16 hex of SHA-256 of the store URI, password masked>/``, written to a
temporary name, fsynced and renamed, so a file in the spool is always complete. The spool lives
outside the store's folder on purpose: that folder may be the thing that is unwritable.

:func:`replay` writes the entries back (each through the caller's ``write`` function, which skips a
trial that has a FINISHED run meanwhile) and deletes each one once written. It runs at the start of
every invocation on the store, in the background writer as soon as the store answers again, and at
the end of a sweep; one process at a time per store (a ``filelock``, not waited for). An entry the
store rejects for a reason other than an outage is moved to ``rejected/`` with the error beside it,
so it is neither retried forever nor lost. An entry that cannot be read (written by another harness
version, or not an entry at all) is moved to ``unreadable/`` with the reason beside it.

Safety. An entry is data, never code: JSON (:func:`encode`/:func:`decode`), whose only objects are
the plain values and a fixed list of the harness's own records (:data:`RECORDS`), rebuilt field by
field. Entries of harness versions before this one were pickles (``*.pkl``); they are **never
unpickled** (unpickling runs whatever code the file names, so whoever could write the folder would
run code at the next replay): each is moved to ``unreadable/`` with one warning naming the file, and
its trial, not in the store, is trained again by the next sweep that includes it (to keep its old
result instead, replay it once with the harness version that wrote it, before upgrading). A spool
folder (the root and the store's) must belong to this user and not be writable by group or others:
otherwise :func:`replay` and :func:`put` raise :class:`UnsafeSpoolError` (one line naming the folder
and the fix, ``chmod go-w``), and :func:`entries` reads nothing from it. Folders the harness creates
are ``0700``. No entry holds a password: the store URI in it is masked
(:func:`harness.core.redact.mask_uri`) and the replaying process's own URI is used to write it.

Entry (a dict): ``kind`` (``"trial"``), ``uri`` (masked), ``ctx`` (the
:class:`harness.core.context.RunContext` fields), ``t0_ms`` (training start, ms), ``result`` (the
:class:`harness.core.spec.TrialResult`), ``stale_run_id`` (a RUNNING run of the trial left by the failed
write, ended KILLED on replay, or ``None``), ``error`` (why it was spooled), ``spooled_at`` (epoch
s), ``owner`` (``host:pid``). File: ``{"format": FORMAT, "entry": encode(entry)}``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.cache_files import cache_dir
from harness.core.redact import mask_text, mask_uri
from harness.core.spec import Curves, PerfResult, Target, TrialResult, TrialSpec
from harness.tracking.store_errors import TrackingUnavailableError, one_line

log = logging.getLogger(__name__)

#: The format tag of a spool file written by this version.
FORMAT = "harness-spool/2"
#: The records an entry may hold, rebuilt by name (nothing else is ever constructed from a file).
RECORDS = {c.__name__: c for c in (TrialResult, TrialSpec, Target, Curves, PerfResult)}
SUFFIX = ".json"
LEGACY_SUFFIX = ".pkl"


class UnsafeSpoolError(TrackingUnavailableError, PermissionError):
    """A spool folder another user could write (or that another user owns): not used."""


def spool_root() -> Path:
    """``$HARNESS_SPOOL_DIR``, else ``$HARNESS_CACHE_DIR/spool`` (not created)."""
    env = os.environ.get("HARNESS_SPOOL_DIR")
    if env:
        return Path(env)
    return cache_dir("spool")


def spool_dir(uri: str) -> Path:
    """This store's spool folder (not created); the URI's password (if any) is not part of its name."""
    return spool_root() / hashlib.sha256(mask_uri(uri).encode()).hexdigest()[:16]


def unsafe_folder(uri: str) -> str | None:
    """Why ``uri``'s spool (its root, then the store's folder, those that exist) must not be used, or
    ``None``: a folder writable by group or others, or owned by another user."""
    for d in (spool_root(), spool_dir(uri)):
        try:
            st = os.stat(d)
        except FileNotFoundError:
            continue
        except OSError as e:
            return f"cannot inspect the spool folder {d} ({e.strerror or e})"
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return (f"the spool folder {d} belongs to another user (uid {st.st_uid}): whoever owns it "
                    f"could plant results; set HARNESS_SPOOL_DIR to a folder of your own")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return (f"the spool folder {d} is writable by group or others "
                    f"(mode {stat.S_IMODE(st.st_mode):o}): whoever can write it could plant results; "
                    f"run `chmod go-w {d}` (or set HARNESS_SPOOL_DIR to a folder of your own)")
    return None


def check_safe(uri: str) -> None:
    """Raise :class:`UnsafeSpoolError` (one line) when :func:`unsafe_folder` finds a reason."""
    why = unsafe_folder(uri)
    if why:
        raise UnsafeSpoolError(why)


# --------------------------------------------------------------------------- the entry as JSON


def encode(v: Any) -> Any:
    """``v`` as JSON-able data that :func:`decode` turns back into an equal value: tuples, non-finite
    floats, dicts and the :data:`RECORDS` tagged (``{"$tuple": [...]}``, ``{"$float": "nan"}``,
    ``{"$dict": {...}}``, ``{"$record": NAME, "fields": {...}}``); a numpy scalar or array as its
    Python value (``.item()``, ``.tolist()``). Anything else is kept as its ``repr`` (a string), with
    a warning: a result is never lost for a value the format does not know."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"$float": repr(v)}
    if dataclasses.is_dataclass(v) and not isinstance(v, type) and RECORDS.get(type(v).__name__) is type(v):
        return {"$record": type(v).__name__,
                "fields": {f.name: encode(getattr(v, f.name)) for f in dataclasses.fields(v)}}
    if isinstance(v, tuple):
        return {"$tuple": [encode(x) for x in v]}
    if isinstance(v, list):
        return [encode(x) for x in v]
    if isinstance(v, dict):
        if all(isinstance(k, str) for k in v):
            return {"$dict": {k: encode(x) for k, x in v.items()}}
        return {"$items": [[encode(k), encode(x)] for k, x in v.items()]}
    if hasattr(v, "dtype") and hasattr(v, "tolist"):  # numpy (or jax) scalar or array
        return encode(v.item() if getattr(v, "shape", None) == () else v.tolist())
    log.warning("spool: a %s value kept as its repr", type(v).__name__)
    return repr(v)


def decode(v: Any) -> Any:
    """The value :func:`encode` encoded. Raises ``ValueError`` on anything it would not write."""
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, list):
        return [decode(x) for x in v]
    if not isinstance(v, dict) or len(v) not in (1, 2):
        raise ValueError(f"not a spool value: {type(v).__name__}")
    if "$tuple" in v:
        return tuple(decode(x) for x in v["$tuple"])
    if "$float" in v:
        if v["$float"] not in ("nan", "inf", "-inf"):
            raise ValueError(f"not a non-finite float: {v['$float']!r}")
        return float(v["$float"])
    if "$dict" in v:
        return {str(k): decode(x) for k, x in v["$dict"].items()}
    if "$items" in v:
        return {decode(k): decode(x) for k, x in v["$items"]}
    if "$record" in v:
        cls = RECORDS.get(v["$record"])
        if cls is None:
            raise ValueError(f"not a spool record: {v['$record']!r}")
        return cls(**{str(k): decode(x) for k, x in v["fields"].items()})
    raise ValueError(f"not a spool value: keys {sorted(v)}")


def _public(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` as it is written: no password in its URIs, no ``path`` (where it lies)."""
    out = {k: v for k, v in entry.items() if k != "path"}
    if "uri" in out:
        out["uri"] = mask_uri(out["uri"])
    if isinstance(out.get("ctx"), dict):
        out["ctx"] = {**out["ctx"], "tracking_uri": mask_uri(out["ctx"].get("tracking_uri", ""))}
    if isinstance(out.get("error"), str):
        out["error"] = mask_text(out["error"])
    return out


# --------------------------------------------------------------------------- the folder


def _make_dir(uri: str) -> Path:
    root, d = spool_root(), spool_dir(uri)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    d.mkdir(mode=0o700, exist_ok=True)
    check_safe(uri)
    return d


def put(uri: str, entry: dict[str, Any]) -> Path:
    """Write ``entry`` durably into ``uri``'s spool; returns its path.

    Raises:
      UnsafeSpoolError: the spool folder is writable by others (:func:`unsafe_folder`).
      OSError: the spool itself cannot be written (the caller then has nowhere to keep the result).
    """
    d = _make_dir(uri)
    marker = d / "uri.txt"
    if not marker.exists():
        marker.write_text(mask_uri(uri) + "\n")
    tid = entry["result"].spec.trial_id if "result" in entry else "x"
    name = f"{tid}-{os.getpid()}-{time.time_ns()}{SUFFIX}"
    tmp = d / f".{name}.tmp"
    data = json.dumps({"format": FORMAT, "entry": encode(_public(entry))}, allow_nan=False)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(data)
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


_WARNED: set[str] = set()


def _warn_once(key: str, msg: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning(msg)


def entries(uri: str) -> list[Path]:
    """The spooled entries of ``uri``, oldest first (by name: pid and time); none from an unsafe
    folder (one warning). An old pickle entry is set aside, never read (:func:`_set_aside_legacy`)."""
    d = spool_dir(uri)
    why = unsafe_folder(uri)
    if why:
        _warn_once(why, f"spool not read: {why}")
        return []
    try:
        for p in d.glob(f"*{LEGACY_SUFFIX}"):
            _set_aside_legacy(p)
        return sorted((p for p in d.glob(f"*{SUFFIX}")), key=lambda p: p.name.split("-", 2)[-1])
    except OSError:
        return []


def _set_aside_legacy(path: Path) -> None:
    why = ("an old pickle spool entry, never loaded (unpickling runs code); its trial is trained "
           "again by the next sweep that includes it (to keep this result, replay it with the "
           "harness version that wrote it); delete it when done")
    _move(path, "unreadable", why)
    log.warning("spool: %s is %s; moved to %s", path, why, path.parent / "unreadable")


def load(path: Path, uri: str | None = None) -> dict[str, Any] | None:
    """One entry (its URIs replaced by ``uri``, the store's own, when given), or ``None`` (moved to
    ``unreadable/``) if it is not a spool entry of this format."""
    try:
        with path.open("rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw.decode("utf-8"))
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        entry = decode(doc["entry"])
        if not isinstance(entry, dict) or not isinstance(entry.get("result"), TrialResult):
            raise ValueError("no trial result in it")
    except Exception as e:
        _move(path, "unreadable", f"cannot be read as a spool entry ({one_line(e, 200)})")
        log.warning("spool: %s cannot be read (%s); moved to unreadable/", path, one_line(e, 200))
        return None
    if uri is not None:
        entry["uri"] = uri
        if isinstance(entry.get("ctx"), dict):
            entry["ctx"]["tracking_uri"] = uri
    return entry


def pending_trials(uri: str) -> dict[str, dict[str, Any]]:
    """``{trial_id: entry}`` of everything spooled for ``uri`` (these trials are trained: a plan
    counts them as done)."""
    out = {}
    for p in entries(uri):
        e = load(p, uri)
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
    with ``left`` set.

    Raises:
      UnsafeSpoolError: the spool folder is writable by others (:func:`unsafe_folder`)."""
    from filelock import FileLock, Timeout

    rep = ReplayReport()
    check_safe(uri)
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
            e = load(p, uri)
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
