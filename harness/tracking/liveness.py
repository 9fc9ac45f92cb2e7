"""Who owns a run, and whether that owner is still alive: owner tags, heartbeats, ending stale runs.

Every run the harness creates names its owner (``harness.owner`` = ``host:pid``,
``harness.owner_start`` = boot id and start time, so a reused pid is not taken for the owner), and a
sweep's parent run gets a heartbeat (``harness.heartbeat``, every :data:`HEARTBEAT_S` s, from a
:class:`Heartbeat` thread). :func:`kill_stale` marks KILLED only RUNNING runs whose owner is gone;
:func:`end_leftovers` ends what an invocation itself left RUNNING.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from harness.core.names import (
    KIND_PARENT,
    KIND_TRIAL,
    TAG_HEARTBEAT,
    TAG_KILLED_REASON,
    TAG_KIND,
    TAG_OWNER,
    TAG_OWNER_START,
    TAG_PARENT_RUN,
)
from harness.core.processes import pid_alive
from harness.tracking.client import client_for, search_all
from harness.tracking.health import HEALTH
from harness.tracking.store_errors import one_line

#: How often a sweep's parent run gets a fresh heartbeat.
HEARTBEAT_S = 30.0
#: A run owned by another host is taken for dead when its heartbeat is this old.
STALE_AFTER_S = 300.0

_log = logging.getLogger(__name__)


def hostname() -> str:
    """This machine's host name, as written in ``harness.owner``."""
    import socket

    return socket.gethostname()


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return "?"


def _start_ticks(pid: int) -> str | None:
    """Field 22 of ``/proc/PID/stat`` (the process's start time since boot), or ``None``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[19]


#: ``pid -> (harness.owner, harness.owner_start)`` of this process (read once: a run per trial)
_OWN: dict[int, tuple[str, str]] = {}


def owner_tags() -> dict[str, str]:
    """Tags naming this process as a run's owner, with a first heartbeat."""
    pid = os.getpid()  # (a forked child has its own entry)
    if pid not in _OWN:
        _OWN[pid] = (f"{hostname()}:{pid}", f"{_boot_id()}:{_start_ticks(pid) or '?'}")
    owner, start = _OWN[pid]
    return {TAG_OWNER: owner, TAG_OWNER_START: start, TAG_HEARTBEAT: str(int(time.time()))}


def owner_state(tags: Mapping[str, str], now: float | None = None) -> tuple[str, str]:
    """``("alive" | "gone" | "unknown", why)`` for the owner recorded in a run's ``tags``.

    On this host the owner's pid decides (and its start time, so a reused pid is not taken for the
    owner); on another host the heartbeat does (older than :data:`STALE_AFTER_S`: gone). A run
    without an owner tag (written before owners were recorded) is ``unknown``.
    """
    owner = tags.get(TAG_OWNER)
    if not owner or ":" not in owner:
        return "unknown", "no owner recorded"
    host, _, pid_s = owner.rpartition(":")
    now = time.time() if now is None else now
    if host == hostname() and pid_s.isdigit():
        pid = int(pid_s)
        boot, _, ticks = tags.get(TAG_OWNER_START, "").partition(":")
        if boot and boot != "?" and boot != _boot_id():
            return "gone", f"process {owner} belonged to an earlier boot"
        if not pid_alive(pid):
            return "gone", f"process {owner} is gone"
        if ticks and ticks != "?" and _start_ticks(pid) not in (None, ticks):
            return "gone", f"process {owner} is gone (its pid now belongs to another process)"
        return "alive", f"process {owner} is running"
    try:
        age = now - float(tags.get(TAG_HEARTBEAT, ""))
    except ValueError:
        return "unknown", f"owner {owner} on another host, no heartbeat"
    if age > STALE_AFTER_S:
        return "gone", f"no heartbeat from {owner} for {age / 60:.0f} min"
    return "alive", f"{owner}, heartbeat {age:.0f} s ago"


def run_liveness(client, run, cache: dict | None = None, now: float | None = None) -> tuple[str, str]:
    """:func:`owner_state` of a RUNNING ``run``; a trial run owned by another host (which has no
    heartbeat of its own) takes its parent run's state (an ended parent: gone)."""
    state, why = owner_state(run.data.tags, now)
    parent_id = run.data.tags.get(TAG_PARENT_RUN)
    if state == "unknown" and run.data.tags.get(TAG_OWNER) and parent_id:
        cache = {} if cache is None else cache
        if parent_id not in cache:
            try:
                cache[parent_id] = client.get_run(parent_id)
            except Exception:
                cache[parent_id] = None
        parent = cache[parent_id]
        if parent is None or parent.info.status != "RUNNING":
            return "gone", f"its sweep's parent run {parent_id} has ended"
        return owner_state(parent.data.tags, now)
    return state, why


def kill_stale(client, runs: Iterable, *, now: float | None = None) -> int:
    """Mark KILLED the RUNNING runs whose owner is gone (:func:`run_liveness`), each re-read just
    before, with the tag ``harness.killed_reason``. A run of a live owner is never touched, and
    neither is a run that is not RUNNING (a FINISHED run is never changed). Runs without an owner
    tag (from harness versions before owners were recorded) count as gone. Returns how many."""
    n, cache = 0, {}
    for r in runs:
        if r.info.status != "RUNNING":
            continue
        state, why = run_liveness(client, r, cache, now)
        if state == "alive" or (state == "unknown" and r.data.tags.get(TAG_OWNER)):
            continue
        try:
            fresh = client.get_run(r.info.run_id)
            if fresh.info.status != "RUNNING":
                continue
            client.set_tag(r.info.run_id, TAG_KILLED_REASON, why)
            client.set_terminated(r.info.run_id, status="KILLED")
            n += 1
        except Exception as e:  # e.g. a concurrent invocation killed it first
            _log.info("could not mark run %s KILLED: %s", r.info.run_id, one_line(e))
    return n


def kill_dead_invocations(client, experiment_id: str, running: list | None = None) -> int:
    """Mark KILLED the RUNNING parent and trial runs of the experiment whose owner is gone (an
    invocation that was killed); a live invocation's runs, finished runs and runs that are not the
    harness's (no ``harness.kind``) are never touched. ``running``: the experiment's RUNNING runs,
    when the caller read them already. Returns how many."""
    if running is None:
        running = search_all(client, experiment_id, "attributes.status = 'RUNNING'")
    parents = [r for r in running if r.data.tags.get(TAG_KIND) == KIND_PARENT]
    trials = [r for r in running if r.data.tags.get(TAG_KIND) == KIND_TRIAL]
    return kill_stale(client, parents) + kill_stale(client, trials)


def end_leftovers(client, experiment_id: str, parent_run_id: str) -> int:
    """At the end of an invocation: mark KILLED its own trial runs still RUNNING (a write that failed
    half-way; every unit has returned, so nothing of this process is still writing them), and any
    RUNNING parent or trial run of the experiment whose owner is gone (:func:`kill_dead_invocations`,
    on the same read): an invocation killed while this one ran, whose runs would otherwise stay
    RUNNING beside this one's results. A live other process's run is left alone. Returns how many."""
    runs = search_all(client, experiment_id, "attributes.status = 'RUNNING'")
    me = owner_tags()[TAG_OWNER]
    n = 0
    for r in runs:
        if r.data.tags.get(TAG_OWNER) == me and r.data.tags.get(TAG_PARENT_RUN) == parent_run_id:
            client.set_tag(r.info.run_id, TAG_KILLED_REASON, "left RUNNING by its invocation")
            client.set_terminated(r.info.run_id, status="KILLED")
            n += 1
    others = [r for r in runs if r.data.tags.get(TAG_OWNER) != me]
    return n + kill_dead_invocations(client, experiment_id, others)


class Heartbeat:
    """A daemon thread that sets ``harness.heartbeat`` on ``run_id`` every ``every_s`` seconds
    (errors are recorded in :data:`harness.tracking.health.HEALTH`, never raised).
    ``start()``/``stop()``."""

    def __init__(self, uri: str, run_id: str, every_s: float = HEARTBEAT_S):
        self.uri, self.run_id, self.every_s = uri, run_id, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="harness-heartbeat")

    def start(self) -> Heartbeat:
        """Start the thread; returns ``self``."""
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                client_for(self.uri).set_tag(self.run_id, TAG_HEARTBEAT, str(int(time.time())))
            except Exception as e:
                HEALTH.failed(e)

    def stop(self) -> None:
        """Stop the thread (waits up to 1 s for it)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)
