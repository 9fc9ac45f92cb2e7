"""Executors: how a sweep's work units reach :func:`harness.execute.worker.execute_unit`.

The protocol is the base class :class:`Executor`::

    validate(tracking_uri) -> None          # refuse before anything is written (default: accept)
    run(units: list[list[TrialSpec]], ctx: RunContext,
        on_done: Callable[[list[TrialOutcome]], None]) -> None
    device_plan: DevicePlan | None          # the workers' devices, once validated (default None)
    flush_wait_s: float                     # s waited for background writes at the end (default 0)

``run`` returns when every unit has been executed; ``on_done`` is called in the calling thread once
per finished unit, in completion order. Executors are looked up by name with :func:`get_executor`:

- ``inprocess`` (:class:`InProcessExecutor`): units one after another in this process.
- ``process`` (:class:`ProcessExecutor`, ``--jobs N``): ``N`` local worker processes (``spawn``
  start method, so no forked JAX runtime). Each worker gets its own device(s) of the host
  (:func:`harness.execute.devices.plan_devices`: ``CUDA_VISIBLE_DEVICES`` on GPUs, ``HARNESS_DEVICE_IDS`` on
  CPU), set in the worker before JAX is imported there; workers that share a GPU do not preallocate
  its memory. A worker exits by itself within ~0.5 s once the process that started it is gone
  (e.g. SIGKILLed).
- other names: :func:`register_executor` adds one (its factory returns an :class:`Executor`); an
  unknown name ``X`` is looked for as module ``harness.execute.X_executor`` (e.g.
  ``harness/execute/ray_executor.py`` registers ``"ray"`` when imported).

The name table itself is :data:`harness.core.registry.EXECUTORS` (with
:func:`~harness.core.registry.known_executors`), so that :mod:`harness.config` validates
``executor:`` without importing this module or the worker.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import importlib.util
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable

from harness.core.context import RunContext
from harness.core.outcome import TrialOutcome, failed_unit
from harness.core.registry import EXECUTORS, did_you_mean, known_executors
from harness.core.spec import TrialSpec
from harness.execute import background, devices
from harness.execute.devices import DevicePlan
from harness.execute.worker import execute_unit


class ExecutorUnavailableError(RuntimeError):
    """An executor's optional dependency is missing (the message says what to install)."""


class Executor:
    """Runs work units (see the module docstring); subclasses implement :meth:`run`."""

    #: How the workers split the host's devices (:class:`harness.execute.devices.DevicePlan`), set by
    #: :meth:`validate` for executors that plan devices; ``None`` for the others.
    device_plan: DevicePlan | None = None
    #: Seconds :meth:`run` waited at its end for background MLflow writes (the sweep's tracking cost).
    flush_wait_s: float = 0.0

    def validate(self, tracking_uri: str | None = None) -> None:
        """Refuse what cannot run, before anything is written (the sweep calls this, dry runs too).
        The default accepts everything."""

    def run(self, units: list[list[TrialSpec]], ctx: RunContext,
            on_done: Callable[[list[TrialOutcome]], None]) -> None:
        """Execute every unit, calling ``on_done(outcomes)`` in the calling thread as each ends."""
        raise NotImplementedError


class InProcessExecutor(Executor):
    """Units one after another in the calling process (the default; ``jobs`` must be 1)."""

    def __init__(self, jobs: int = 1, **_: object) -> None:
        self.jobs = 1
        self.flush_wait_s = 0.0  # seconds spent waiting for background MLflow writes at the end

    def validate(self, tracking_uri: str | None = None) -> None:
        """A ``HARNESS_DEVICE_IDS`` set for this process must name its devices (checked before any
        write; raises ``ValueError`` with the valid indices)."""
        devices.visible_devices()

    def run(self, units: list[list[TrialSpec]], ctx: RunContext,
            on_done: Callable[[list[TrialOutcome]], None]) -> None:
        # Results are written to MLflow on a background thread while the next unit trains, so
        # tracking stays off the critical path; everything is flushed before returning.
        try:
            for unit in units:
                on_done(execute_unit(unit, ctx, background=True))
        finally:
            self.flush_wait_s = background.flush_logging()


PARENT_POLL_S = 0.5  # how often a worker checks that the process that started it is alive


def _watch_parent(parent_pid: int, poll_s: float) -> None:
    """Daemon-thread body: end this worker (``os._exit(1)``) once its parent is gone (re-parented)."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(1)
        time.sleep(poll_s)


def _init_worker(slots=None) -> None:
    """Pool initializer (runs in the spawned worker before any task, so before JAX is imported
    there: nothing this module imports at the top imports JAX). ``slots`` is a queue of the
    workers' environments (:func:`harness.execute.devices.worker_env`); each worker takes one."""
    if slots is not None:
        devices.apply_worker_env(slots.get(timeout=60))
    # A SIGKILLed sweep cannot shut its pool down: its workers would be re-parented and live on
    # (holding host and device memory). Each worker polls its parent pid and exits when it changes.
    # The expected pid comes from multiprocessing, so a parent that died before this ran counts too.
    # (prctl(PR_SET_PDEATHSIG) is not used: it fires when the *thread* that spawned the worker
    # exits, which is not the parent process's death.)
    parent = mp.parent_process()
    parent_pid = parent.pid if parent is not None and parent.pid is not None else os.getppid()
    threading.Thread(target=_watch_parent, args=(parent_pid, PARENT_POLL_S), daemon=True,
                     name="harness-parent-watch").start()


class ProcessExecutor(Executor):
    """``jobs`` local worker processes (``spawn``), each running whole units.

    A worker that dies (e.g. killed by the OS) fails its unit's outcomes with reason
    ``worker process died`` without writing to MLflow: those trials stay pending (their RUNNING
    runs are marked KILLED by the next invocation) and the remaining units are resubmitted to a
    fresh pool.
    """

    def __init__(self, jobs: int = 2, devices_per_trial: int | str = 1, **_: object) -> None:
        if jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {jobs}")
        self.jobs = jobs
        self.devices_per_trial = devices_per_trial
        #: The device assignment (:class:`harness.execute.devices.DevicePlan`), made by :meth:`validate`.
        self.device_plan = None

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
        pending = list(range(len(units)))
        spawn = mp.get_context("spawn")
        while pending:
            n_workers = min(self.jobs, len(pending))
            slots = spawn.Queue()  # one device environment per worker (harness.execute.devices.plan_devices)
            for env in self.device_plan.envs[:n_workers]:
                slots.put(devices.worker_env(env))
            with cf.ProcessPoolExecutor(max_workers=n_workers, mp_context=spawn,
                                        initializer=_init_worker, initargs=(slots,)) as pool:
                futs = {pool.submit(execute_unit, units[i], ctx): i for i in pending}
                broken: list[int] = []
                try:
                    for f in cf.as_completed(futs):
                        i = futs[f]
                        try:
                            on_done(f.result())
                        except cf.process.BrokenProcessPool:
                            broken.append(i)
                except BaseException:
                    for f in futs:
                        f.cancel()
                    raise
            slots.close()  # the slots are in the pipe (tiny): nothing left to feed
            slots.join_thread()
            if broken and len(broken) == len(pending):
                # Nothing progressed: report them lost instead of looping.
                for i in broken:
                    on_done(failed_unit(units[i], "worker process died"))
                return
            pending = broken


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
