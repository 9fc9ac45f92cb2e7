"""Executors: how a sweep's work units reach :func:`harness.execute.worker.execute_unit`.

The protocol is the base class :class:`Executor`::

    validate(tracking_uri) -> None          # refuse before anything is written (default: accept)
    run(units: list[list[TrialSpec]], ctx: RunContext,
        on_done: Callable[[list[TrialOutcome]], None]) -> None
    session() -> context manager            # what run() may keep from one call to the next
    prestart(specs) -> None                 # in a session: start workers early (default: nothing)
    device_plan: DevicePlan | None          # the workers' devices, once validated (default None)
    flush_wait_s: float                     # s waited for background writes at the end (default 0)

``run`` returns when every unit has been executed; ``on_done`` is called in the calling thread once
per finished unit, in completion order. Inside ``with executor.session():`` an executor may keep what
one ``run`` started for the next (an adaptive sweep calls ``run`` once per round; the sweep opens one
session around all of them): the process executor keeps its worker processes, so each pays its
start-up (interpreter, JAX, data, compiles) once per sweep, not once per round. Everything kept is
released when the session ends, however it ends; outside a session ``run`` keeps nothing. The sweep
calls ``prestart`` in its session right after the pre-flight, so the process executor's workers
start while the sweep opens its store and plans.

Executors are looked up by name with :func:`get_executor`:

- ``inprocess`` (:class:`InProcessExecutor`): units one after another in this process.
- ``process`` (:class:`ProcessExecutor`, ``--jobs N``): ``N`` local worker processes (``spawn``
  start method, so no forked JAX runtime). Each worker gets its own device(s) of the host
  (:func:`harness.execute.devices.plan_devices`: ``CUDA_VISIBLE_DEVICES`` on GPUs, ``HARNESS_DEVICE_IDS`` on
  CPU), set in the worker before JAX is imported there; workers that share a GPU do not preallocate
  its memory. A worker exits by itself within ~0.5 s once the process that started it is gone
  (e.g. SIGKILLed). A worker that dies costs only the unit it held: it is replaced, the others go
  on, the unit is tried once more on a fresh worker and, if that worker dies too, reported
  :func:`not_run` (the sweep writes it FAILED: ``worker process died (signal 9) twice``).
- other names: :func:`register_executor` adds one (its factory returns an :class:`Executor`); an
  unknown name ``X`` is looked for as module ``harness.execute.X_executor`` (e.g.
  ``harness/execute/ray_executor.py`` registers ``"ray"`` when imported).

The name table itself is :data:`harness.core.builders.EXECUTORS` (with
:func:`~harness.core.builders.known_executors`), so that :mod:`harness.config` validates
``executor:`` without importing this module or the worker.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import multiprocessing as mp
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

from harness.core import interrupt
from harness.core.builders import EXECUTORS, did_you_mean, known_executors
from harness.core.context import RunContext
from harness.core.outcome import TrialOutcome, failed_unit
from harness.core.spec import TrialResult, TrialSpec
from harness.execute import background, claims, devices, isolation, writing
from harness.execute.devices import DevicePlan
from harness.execute.handoff import Handoff
from harness.execute.isolation import death_reason, death_where, gave_up_reason, hang, hang_reason
from harness.execute.process_worker import Worker, stop_all
from harness.execute.worker import execute_unit
from harness.tracking.client import client_for

log = logging.getLogger(__name__)


class ExecutorUnavailableError(RuntimeError):
    """An executor cannot run here: its optional dependency is missing, or its workers cannot start
    (the message says what to do)."""


class WorkerStartError(ExecutorUnavailableError):
    """``--jobs`` worker processes died before they were set up, :data:`UNIT_DEATHS` in a row."""


#: What a script that starts ``--jobs`` workers needs (``spawn`` re-imports the main module).
MAIN_GUARD_HINT = ("a script that runs a sweep with jobs > 1 must make that call under "
                   "`if __name__ == \"__main__\":` (each worker process re-imports the script)")


class Executor:
    """Runs work units (see the module docstring); subclasses implement :meth:`run`."""

    #: How the workers split the host's devices (:class:`harness.execute.devices.DevicePlan`), set by
    #: :meth:`validate` for executors that plan devices; ``None`` for the others.
    device_plan: DevicePlan | None = None
    #: Seconds :meth:`run` waited at its end for background MLflow writes (the sweep's tracking cost).
    flush_wait_s: float = 0.0
    #: Where the executor says what the user should know mid-run (a worker died, a unit is tried
    #: again); the sweep sets it to its progress display's ``note``. ``None``: the log only.
    note: Callable[[str], None] | None = None

    def validate(self, tracking_uri: str | None = None) -> None:
        """Refuse what cannot run, before anything is written (the sweep calls this, dry runs too).
        The default accepts everything."""

    def run(self, units: list[list[TrialSpec]], ctx: RunContext,
            on_done: Callable[[list[TrialOutcome]], None]) -> None:
        """Execute every unit, calling ``on_done(outcomes)`` in the calling thread as each ends."""
        raise NotImplementedError

    @contextlib.contextmanager
    def session(self):
        """A scope in which :meth:`run` may keep what it started for its next call (the module
        docstring); released on exit. The default keeps nothing."""
        yield self

    def prestart(self, specs: list[TrialSpec]) -> None:
        """Inside :meth:`session`: start now what :meth:`run` will need for ``specs`` (the trials
        likely to train), so that it starts while the sweep opens its store and plans. The default
        starts nothing."""


class InProcessExecutor(Executor):
    """Units one after another in the calling process (the default; ``jobs`` must be 1)."""

    def __init__(self, jobs: int = 1, **_: object) -> None:
        self.jobs = 1
        self.flush_wait_s = 0.0  # seconds spent waiting for background MLflow writes at the end
        self.isolated = isolated_executor()  # units with user code (harness.execute.isolation)

    def validate(self, tracking_uri: str | None = None) -> None:
        """A ``HARNESS_DEVICE_IDS`` set for this process must name its devices (checked before any
        write; raises ``ValueError`` with the valid indices)."""
        devices.visible_devices()

    def run(self, units: list[list[TrialSpec]], ctx: RunContext,
            on_done: Callable[[list[TrialOutcome]], None]) -> None:
        # Results are written to MLflow on a background thread while the next unit trains, so
        # tracking stays off the critical path; everything is flushed before returning.
        plain, sourced = isolation.split(units) if ctx.dispatch_timeout_s else (range(len(units)), [])
        try:
            for i in plain:
                interrupt.check()  # a Ctrl-C lost in a garbage-collection callback
                on_done(execute_unit(units[i], ctx, background=True))
        finally:
            self.flush_wait_s = background.flush_logging()
        if sourced:  # user code: in a worker process whose dispatches are watched
            self.isolated.note = self.note
            self.isolated.run([units[i] for i in sourced], ctx, on_done)
            self.flush_wait_s += self.isolated.flush_wait_s

    @contextlib.contextmanager
    def session(self):
        """Keep the worker for units with user code from one :meth:`run` to the next."""
        with self.isolated.session():
            yield self

    def prestart(self, specs: list[TrialSpec]) -> None:
        """Start the worker for the trials with user code among ``specs`` now, if there are any."""
        self.isolated.prestart([s for s in specs if isolation.isolated(s)])


#: How many times a unit may lose its worker process: a unit whose worker dies this many times is
#: recorded FAILED (``worker process died (signal 9) twice``) instead of being tried again.
UNIT_DEATHS = 2
#: Seconds the workers get to leave by themselves at the end (or after Ctrl-C) before SIGTERM.
JOIN_S = 10.0


#: ``TrialOutcome.extra`` key of a trial that could not run at all (its worker process died each
#: time, Ray gave up): the sweep writes its FAILED run (:func:`write_not_run`) before showing it.
NOT_RUN = "not_run"


def not_run(unit: list[TrialSpec], reason: str) -> list[TrialOutcome]:
    """The outcomes of a unit that could not run (``failed`` with ``reason``, marked :data:`NOT_RUN`):
    what an executor reports; the sweep then writes the FAILED runs."""
    outcomes = failed_unit(unit, reason)
    for o in outcomes:
        o.extra[NOT_RUN] = True
    return outcomes


def write_not_run(spec: TrialSpec, ctx: RunContext, reason: str) -> TrialOutcome:
    """Record a trial that could not run as a FAILED run with ``reason`` (tags ``status=failed``,
    ``harness.reason``), written from the sweep's process by
    :func:`harness.execute.writing.write_result` (spooled if the store fails; the outcome says so).
    A trial that got a FINISHED run before its worker died keeps it: its outcome is read back."""
    done: dict[str, TrialOutcome] = {}
    try:
        todo = claims.take_unfinished(client_for(ctx.tracking_uri), [spec], ctx, done)
    except Exception:  # the store is down: write_result spools the result
        todo = [spec]
    if not todo:
        return done[spec.trial_id]
    rid, entry = writing.write_result(None, TrialResult(spec=spec, status="failed", reason=reason),
                                      int(time.time() * 1000), ctx, None)
    o = TrialOutcome.failed(spec, reason)
    o.run_id = rid if entry is None else None
    if entry is not None:
        o.spooled = True
        o.extra["spool_entry"] = entry
    return o


#: The most bytes of dataset arrays a ``--jobs`` worker is handed at its start (:func:`shared_datasets`).
SHARED_DATASET_BYTES = 64 << 20


def shared_datasets(units: list[list[TrialSpec]]) -> list:
    """The datasets of ``units`` this process already loaded (its pre-flight did), up to
    :data:`SHARED_DATASET_BYTES` in all, for each new worker to start with
    (:func:`harness.data.sources.memoised`): a worker then loads only the larger ones itself
    (a small dataset's loader, such as scikit-learn's import, is much of a worker's start-up)."""
    from harness.data.sources import memoised

    return memoised(((s.dataset, s.hparams("dataset")) for u in units for s in u), SHARED_DATASET_BYTES)


class ProcessExecutor(Executor):
    """``jobs`` local worker processes (``spawn``), each running whole units, one at a time.

    The workers write nothing to the store: this process takes each unit's claims before handing it out
    and writes every result that comes back on its background writer (:class:`Handoff`), so it is
    the store's only writer, as in-process; with ``keep_final_checkpoint`` (a checkpoint on the
    worker's disk to log) each worker writes its own runs, created before it trains.

    A worker process that dies (SIGKILLed, killed by the OS for memory, ``os._exit`` in user code)
    costs only the unit it held: a fresh worker takes its place, the other workers go on, and the
    unit is tried again on a fresh worker (checkpoints let it resume; a worker that wrote its own
    runs left them RUNNING, and the retry marks them KILLED, their owner being gone). A unit whose
    worker dies :data:`UNIT_DEATHS` times is given up:
    its outcomes are :func:`not_run` (``worker process died (signal 9) twice``), which the sweep
    writes as FAILED runs, so the store holds a run for every trial the sweep reports.
    """

    def __init__(self, jobs: int = 2, devices_per_trial: int | str = 1, **_: object) -> None:
        if jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {jobs}")
        self.jobs = jobs
        self.devices_per_trial = devices_per_trial
        #: The device assignment (:class:`harness.execute.devices.DevicePlan`), made by :meth:`validate`.
        self.device_plan = None
        #: ``unit index -> [how its worker ended, ...]`` of the last :meth:`run` (worker deaths).
        self.deaths: dict[int, list[str]] = {}
        #: Inside :meth:`session`: the idle worker processes the last :meth:`run` left for the next.
        self._kept: list[Worker] | None = None
        #: Worker processes started so far (a kept worker counts once; a replacement counts).
        self.started = 0
        self._datasets: list = []  # what a worker starts with (shared_datasets of the run's units)
        #: Whether a worker skips importing the parent's main script (the in-process executor's own).
        self.own_main = False
        #: Seconds one dispatch of a unit with user code may take (``RunContext.dispatch_timeout_s``).
        self.limit_s: float | None = None

    def validate(self, tracking_uri: str | None = None) -> None:
        """Plan the workers' devices (before anything is written; the sweep calls this).

        Raises:
          harness.execute.devices.DevicePlanError: ``jobs`` × devices per trial does not fit the host.
        """
        n, platform, visible = devices.host_devices()
        self.device_plan = devices.plan_devices(n, platform, self.jobs, self.devices_per_trial, visible)

    def run(self, units: list[list[TrialSpec]], ctx: RunContext,
            on_done: Callable[[list[TrialOutcome]], None]) -> None:
        if self.device_plan is None:
            self.validate()
        if not units:
            return
        spawn = mp.get_context("spawn")
        queue = deque(range(len(units)))
        self.limit_s = ctx.dispatch_timeout_s
        self.deaths = {}
        self._start_deaths: list[str] = []
        # The parent is the store's only writer (module docstring); with a final checkpoint to log
        # as an artifact (kept on the worker's disk until written), each worker writes its own.
        handoff = not ctx.keep_final_checkpoint
        book = Handoff(units, ctx) if handoff else None
        envs = [devices.worker_env(e) for e in self.device_plan.envs[:min(self.jobs, len(units))]]
        kept, self._kept = self._kept, (None if self._kept is None else [])
        self._datasets = shared_datasets(units)
        workers = [self._take(kept, env) or self._spawn(spawn, env) for env in envs]
        leave = kept or []  # kept workers this run has no use for (a round of fewer units)
        wait_s = JOIN_S
        try:
            while queue or any(w.unit is not None for w in workers):
                interrupt.check()  # a Ctrl-C lost in a garbage-collection callback
                for k in range(len(workers)):
                    self._hand_out(workers, k, queue, units, book, ctx, spawn, on_done)
                if not any(w.unit is not None for w in workers):
                    continue
                busy = [w for w in workers if w.unit is not None]
                wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=0.5)
                for k, w in enumerate(workers):
                    if w.unit is not None:
                        workers[k] = self._collect(spawn, w, units, book, queue, on_done)
        except BaseException:
            wait_s = 5.0  # Ctrl-C reached the workers too: a moment to end their runs KILLED
            leave = leave + workers
            raise
        else:
            if self._kept is None:
                leave = leave + workers
            else:  # in a session: idle and alive, they wait for the next run
                self._kept = leave + [w for w in workers if w.proc.is_alive()]
                leave = [w for w in workers if not w.proc.is_alive()]
        finally:
            stop_all(leave, wait_s)
            if book is not None:
                book.release_all()
                self.flush_wait_s = background.flush_logging()

    def _hand_out(self, workers: list[Worker], k: int, queue: deque, units: list[list[TrialSpec]],
                  book: Handoff | None, ctx: RunContext, spawn: Any,
                  on_done: Callable[[list[TrialOutcome]], None]) -> None:
        """Give idle worker ``k`` the next unit of ``queue`` (with ``book``, the parent's handoff:
        its claims first; a unit with nothing to train is done at once); a worker gone while idle
        is replaced."""
        while workers[k].unit is None and queue:
            if book is not None and ctx.claim_wait_s and any(w.unit is not None for w in workers):
                break  # claims waited for (deferred trials): one unit at a time, so this
                # process never holds an in-flight unit's claims while it waits for another's
            i = queue[0]
            if book is not None and not book.claim(i):  # nothing of it to train
                queue.popleft()
                on_done(book.outcomes(i, []))
            elif workers[k].proc.is_alive() and workers[k].give(
                    i, book.todo[i] if book is not None else units[i], ctx, book is not None):
                queue.popleft()
            else:  # gone while idle: nothing to charge to a unit
                self._died_at_start(workers[k])
                workers[k] = self._replace(spawn, workers[k])

    @contextlib.contextmanager
    def session(self):
        """Keep the worker processes from one :meth:`run` to the next (an adaptive sweep's rounds);
        they are asked to leave when the session ends (then SIGTERM, then SIGKILL, as after a run).
        Sessions nest (the sweep opens one for :meth:`prestart`'s workers and one around its
        executions): leaving any of them stops the workers kept so far, so that their shutdown
        falls inside the part of the sweep that is timed."""
        outer = self._kept is None
        if outer:
            self._kept = []
        try:
            yield self
        finally:
            kept, self._kept = self._kept or [], None if outer else []
            stop_all(kept, JOIN_S)

    def prestart(self, specs: list[TrialSpec]) -> None:
        """Inside :meth:`session`, with no worker yet: start ``min(jobs, len(specs))`` workers with
        ``specs``' datasets; each imports the trainer (JAX) while the sweep opens the store and
        plans (so a worker's start-up is off the sweep's critical path), and
        the first :meth:`run` takes them. Left idle, they are stopped when the session ends."""
        if self._kept is None or self._kept or not specs:
            return
        if self.device_plan is None:
            self.validate()
        spawn = mp.get_context("spawn")
        self._datasets = shared_datasets([specs])
        for env in self.device_plan.envs[:min(self.jobs, len(specs))]:
            self._kept.append(self._spawn(spawn, devices.worker_env(env)))

    @staticmethod
    def _take(kept: list[Worker] | None, env: dict[str, str] | None) -> Worker | None:
        """A live kept worker of the device environment ``env`` (removed from ``kept``), or ``None``."""
        for w in kept or []:
            if w.env == env and w.proc.is_alive():
                kept.remove(w)
                return w
        return None

    def _spawn(self, spawn, env: dict[str, str] | None) -> Worker:
        self.started += 1
        return Worker(spawn, env, self._datasets, own_main=self.own_main)

    def _replace(self, spawn, w: Worker) -> Worker:
        w.stop(0.0)
        return self._spawn(spawn, w.env)

    def _collect(self, spawn, w: Worker, units: list[list[TrialSpec]], book: Handoff | None,
                 queue: deque, on_done: Callable[[list[TrialOutcome]], None]) -> Worker:
        """Take what the busy worker ``w`` has to say (nothing yet, its unit's outcomes, or its death);
        returns the worker that holds its place afterwards."""
        i = w.unit
        hung = hang(w.board, units[i], self.limit_s)  # user code past its dispatch limit
        try:
            if hung is not None:
                w.proc.kill()
                w.proc.join(5.0)
                raise EOFError
            if not w.seen_ready() or not w.conn.poll():
                if w.proc.is_alive():
                    return w
                raise EOFError
            _, ok, payload = w.conn.recv()
        except (EOFError, OSError):
            if hung is None and self._died_at_start(w):  # the unit never ran: nothing to charge to it
                w.unit = None
                queue.appendleft(i)
                return self._replace(spawn, w)
            why = death_reason(w.proc.exitcode)
            deaths = self.deaths.setdefault(i, [])
            deaths.append(why)
            w.unit = None
            label = f"{len(units[i])} trial(s) from {units[i][0].trial_id}"
            if hung is None and len(deaths) < UNIT_DEATHS:
                self._note(f"worker process {w.proc.pid} died ({why}) while running {label}: "
                           f"trying it again on a fresh worker")
                queue.appendleft(i)
            else:
                reason = (hang_reason(units[i], hung) if hung is not None
                          else gave_up_reason(deaths) + death_where(w.board))
                self._note(f"worker process {w.proc.pid} {'hung' if hung else f'died ({why})'} while "
                           f"running {label}{' again' if len(deaths) > 1 else ''}: recording it FAILED "
                           f"({reason})")
                if book is None:
                    on_done(not_run(units[i], reason))
                else:
                    on_done(book.outcomes(i, not_run(book.todo[i], reason)))
            return self._replace(spawn, w) if queue else w
        w.unit = None
        self._start_deaths = []  # a worker was set up: the deaths before it were not the start's
        if not ok:
            raise payload
        on_done(payload if book is None else book.outcomes(i, payload))
        return w

    def _died_at_start(self, w: Worker) -> bool:
        """Whether the gone worker ``w`` died before it was set up (before
        :data:`~harness.execute.process_worker.READY`); such deaths are counted, and
        :data:`UNIT_DEATHS` of them in a row (none set up in between) end the run.

        Raises:
          WorkerStartError: what the workers died of, with :data:`MAIN_GUARD_HINT`.
        """
        w.proc.join(5.0)
        if w.seen_ready():
            return False
        self._start_deaths.append(death_reason(w.proc.exitcode))
        if len(self._start_deaths) >= UNIT_DEATHS:
            raise WorkerStartError(
                f"--jobs worker processes died before they were set up "
                f"({'; '.join(sorted(set(self._start_deaths)))}), {len(self._start_deaths)} in a row; "
                f"their error is printed above. Nothing was trained. Note: {MAIN_GUARD_HINT}")
        return True

    def _note(self, line: str) -> None:
        if self.note is not None:
            self.note(line)
        else:
            log.warning("%s", line)


def isolated_executor() -> ProcessExecutor:
    """The in-process executor's worker for units with user code (:mod:`harness.execute.isolation`):
    one process on the sweep's devices, that does not import the caller's main script."""
    ex = ProcessExecutor(jobs=1)
    ex.own_main = True
    ex.device_plan = devices.DevicePlan("host", (("all",),), (isolation.isolated_env(),))
    return ex


def register_executor(name: str, factory: Callable[..., Executor]) -> None:
    """Make ``get_executor(name, **opts)`` return ``factory(**opts)``."""
    EXECUTORS[name] = factory


def get_executor(name: str, **opts: object) -> Executor:
    """The executor ``name`` built with ``opts`` (``jobs``, ``address``, ...).

    Raises:
      ValueError: ``unknown executor 'x'; valid choices: ...`` (with a did-you-mean).
    """
    if name not in EXECUTORS and importlib.util.find_spec(f"harness.execute.{name}_executor") is not None:
        importlib.import_module(f"harness.execute.{name}_executor")
    if name not in EXECUTORS:
        valid = known_executors()
        raise ValueError(f"unknown executor {name!r}; valid choices: {', '.join(valid)}"
                         f"{did_you_mean(name, valid)}")
    factory = EXECUTORS[name]
    if isinstance(factory, str):  # "module:attribute" of a built-in
        mod, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(mod), attr)
    return factory(**opts)
