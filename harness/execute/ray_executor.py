"""Run a sweep's work units as Ray tasks: ``python -m harness sweep CONFIG --executor ray --address ADDR``.

Each work unit (one trial, or a batch of trials trained together under ``jax.vmap``) becomes one Ray
task that calls :func:`harness.execute.worker.execute_unit` on a worker; the worker logs the unit's nested
MLflow child runs straight to the tracking server named by the sweep. The driver waits on the tasks
with ``ray.wait`` and hands each unit's outcomes to ``on_done`` as soon as that unit completes, so
the progress bar and the summary are the same as for a local sweep.

Resources: every task declares ``num_cpus=cpus_per_trial`` and ``num_gpus=gpus_per_trial``. A vmapped
batch is one compiled program and is scheduled as one trial. Devices follow the same mechanism as
``--jobs N`` (:mod:`harness.devices`): Ray sets ``CUDA_VISIBLE_DEVICES`` for each task to the GPU(s) it
assigned, before the task's worker starts JAX (Ray ends a GPU task's worker process after the task by
default, so a worker never keeps a backend bound to another task's GPU); with a fractional GPU share
(several tasks on one GPU) the tasks' JAX is told not to preallocate GPU memory
(:func:`harness.execute.devices.ray_task_env`); and each trial's run records its devices
(``harness.devices``, e.g. ``cuda:3``) like a local worker's.

Fault tolerance, in three layers:

1. A worker process (or its node) that dies mid-unit makes Ray re-run the task, up to
   ``max_retries`` times, on any worker that has the resources (``retry_exceptions=False``: an
   exception raised by the unit itself is not a crash and is not retried).
2. If Ray gives up (retries exhausted, node lost, object lost), the driver resubmits the unit as a
   fresh task up to ``resubmits`` times; after that the unit's trials are reported as ``failed``
   (:func:`harness.execute.executors.not_run`), which the sweep writes as FAILED runs with the
   reason, and the next invocation of the sweep re-runs them (they are not FINISHED in MLflow).
3. Re-running is safe because :func:`harness.execute.worker.execute_unit` is idempotent: it skips
   trials that already have a FINISHED run and marks stale RUNNING runs of the same trial KILLED
   before training. After the last task the driver checks that every trial of the sweep has been
   reported; then the sweep (:func:`harness.orchestrate.resume.dedupe_sweep`, as for every executor) keeps
   the earliest FINISHED run of a trial with more than one (possible only if a node was declared
   dead while its worker kept running); the later ones are set KILLED and tagged
   ``harness.duplicate_of``. So no trial ends up FINISHED twice.

Tracking stores: a SQLite (or ``file:``) store lives on the driver's disk, and a tracking server on
``localhost`` is only reachable from the driver's machine. Both are refused with
:class:`RayTrackingError` before anything runs unless the cluster is on this machine: the address is
``None``/``"local"`` or a loopback host (``127.0.0.1``, ``localhost``, ``::1``) *and*, once connected,
the cluster has exactly one alive node. (A single-machine cluster may share the SQLite file because
the sweep creates it before any worker starts; see ``docs/ray.md``.) ``"auto"`` and any other host
count as remote.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlparse

from harness.core import interrupt
from harness.core.context import RunContext
from harness.core.outcome import TrialOutcome
from harness.core.spec import TrialSpec
from harness.execute.devices import ray_task_env
from harness.execute.executors import Executor, ExecutorUnavailableError, not_run, register_executor
from harness.execute.worker import execute_unit

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "0:0:0:0:0:0:0:1", "ip6-localhost"})
#: Tracking-URI schemes whose store is a file on the driver's machine.
LOCAL_STORE_SCHEMES = frozenset({"", "sqlite", "file"})
#: The name given to every unit's task (and so the worker's process title is ``ray::harness-unit:ID``).
TASK_PREFIX = "harness-unit"


class RayTrackingError(ValueError):
    """The sweep's tracking store cannot be shared by the cluster's workers (raised before any work)."""


class RayUnavailableError(ExecutorUnavailableError):
    """Ray is not installed (``pip install -e ".[ray]"``)."""


_NO_RAY = 'the Ray executor needs Ray, which is not installed: pip install -e ".[ray]" (ray[default]==2.60.0)'


def _import_ray() -> Any:
    """``import ray``, or :class:`RayUnavailableError` with the install command."""
    try:
        import ray
    except ImportError as e:
        raise RayUnavailableError(_NO_RAY) from e
    return ray


# --------------------------------------------------------------------------------------------------
# Where things live


def _host_of_address(address: str) -> str:
    """Host part of a Ray address: ``HOST:PORT``, ``ray://HOST:PORT``, ``[::1]:PORT``, ``HOST``."""
    a = address.strip()
    if "://" in a:
        return (urlparse(a).hostname or "").lower()
    if a.startswith("["):  # [v6]:port
        return a[1:].split("]", 1)[0].lower()
    if a.count(":") == 1:
        return a.split(":", 1)[0].lower()
    return a.lower()


def address_is_local(address: str | None) -> bool:
    """Whether a Ray address can only name a cluster whose head is on this machine.

    ``None``, ``""`` and ``"local"`` start a Ray instance in-process; a loopback host
    (``127.0.0.1``, ``localhost``, ``::1``, optionally as ``ray://``) is a head on this machine.
    ``"auto"`` (whatever ``RAY_ADDRESS`` or the running cluster says) and every other host count as
    remote: they may have worker nodes elsewhere.
    """
    if address is None or address.strip() in ("", "local"):
        return True
    if address.strip() == "auto":
        return False
    host = _host_of_address(address)
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def store_is_machine_local(tracking_uri: str | None) -> str | None:
    """Why a tracking URI is reachable only from this machine, or ``None`` if workers can share it.

    ``None`` (the embedded default ``./mlflow.db``), ``sqlite:``, ``file:`` and plain paths are files
    on this machine's disk; ``http(s)://localhost`` / ``127.x`` is a server that only this machine
    can reach. SQL databases (``postgresql://``, ``mysql://``, ...) and remote servers are shared.
    """
    if not tracking_uri:
        return "the embedded SQLite store (./mlflow.db)"
    uri = tracking_uri.strip()
    if uri == "databricks" or uri.startswith(("databricks://", "databricks-uc")):
        return None  # a hosted workspace every node reaches
    scheme = urlparse(uri).scheme.lower()
    if len(scheme) == 1:  # a Windows drive letter, C:\...
        scheme = ""
    if scheme in LOCAL_STORE_SCHEMES or scheme.startswith("sqlite"):
        kind = "SQLite store" if scheme.startswith("sqlite") else "file store"
        return f"the {kind} {uri!r}"
    if scheme in ("http", "https"):
        host = (urlparse(uri).hostname or "").lower()
        if host in LOOPBACK_HOSTS or host.startswith("127.") or host == "0.0.0.0":
            return f"the tracking server {uri!r} on this machine's loopback interface"
    return None


def check_tracking_store(tracking_uri: str | None, address: str | None) -> None:
    """Refuse a store that the cluster's workers cannot share. Call before anything is logged.

    Raises:
      RayTrackingError: ``tracking_uri`` is machine-local (see :func:`store_is_machine_local`) and
        ``address`` is not a local cluster (see :func:`address_is_local`).
    """
    why = store_is_machine_local(tracking_uri)
    if why is None or address_is_local(address):
        return
    raise RayTrackingError(
        f"--executor ray --address {address!r} cannot log to {why}: Ray workers on other machines "
        "cannot reach it (and a SQLite file must not be shared over a network file system). "
        "Start an MLflow tracking server backed by a SQL database (PostgreSQL or MySQL) that every "
        "node can reach and pass --tracking-uri http://HOST:5000 (see docs/ray.md). A SQLite store "
        "is allowed only with a single-machine Ray head on 127.0.0.1."
    )


def is_this_machine(ip: str) -> bool:
    """Whether ``ip`` is an address of one of this machine's interfaces (it can be bound to)."""
    if ip in LOOPBACK_HOSTS or ip.startswith("127."):
        return True
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.bind((ip, 0))
        return True
    except OSError:
        return False


def check_cluster(nodes: Sequence[dict[str, Any]], tracking_uri: str | None, address: str | None) -> None:
    """After connecting and before submitting: a machine-local store needs a one-machine cluster.

    ``nodes`` is ``ray.nodes()`` (dicts with ``Alive`` and ``NodeManagerAddress``).

    Raises:
      RayTrackingError: the store is machine-local and the cluster has more than one alive node, or
        its only node is not this machine.
    """
    why = store_is_machine_local(tracking_uri)
    if why is None:
        return
    alive = [n for n in nodes if n.get("Alive", True)]
    ips = {str(n.get("NodeManagerAddress", "")) for n in alive}
    if len(alive) <= 1 and all(is_this_machine(ip) for ip in ips):
        return
    raise RayTrackingError(
        f"the Ray cluster at {address!r} has {len(alive)} alive node(s) ({', '.join(sorted(ips))}); "
        f"workers on other machines cannot log to {why}. Use an MLflow tracking server backed by a "
        "SQL database (--tracking-uri http://HOST:5000; see docs/ray.md)."
    )


# --------------------------------------------------------------------------------------------------
# The task


def run_unit_task(unit: list[TrialSpec], ctx: RunContext) -> list[TrialOutcome]:
    """The body of one Ray task: :func:`harness.execute.worker.execute_unit` on a worker process."""
    return execute_unit(unit, ctx)


# --------------------------------------------------------------------------------------------------
# The executor


#: The environment variables of MLflow's client that carry a tracking server's credentials.
CREDENTIAL_VARS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")


class RayExecutor(Executor):
    """Executor that runs each work unit as a Ray task (see the module docstring).

    Args:
      address: the Ray cluster (``HOST:PORT`` of the head's GCS, ``ray://HOST:10001`` for Ray
        Client, ``"auto"``); ``None`` starts a local Ray instance in-process.
      cpus_per_trial, gpus_per_trial: resources each task declares (``num_cpus``/``num_gpus``);
        fractions share a device. A vmapped batch of trials is one task.
      max_retries: Ray's retries of a task whose worker died (system failures only).
      resubmits: fresh submissions of a unit after Ray gave up on it.
      runtime_env: Ray runtime environment for the job (e.g. ``{"working_dir": "."}``); by default
        the workers must already have this project installed.
      log_to_driver: stream the workers' stdout/stderr into the driver's terminal.
      poll_s: how long one ``ray.wait`` blocks (bounds the delay of Ctrl-C).
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        cpus_per_trial: float = 1.0,
        gpus_per_trial: float = 0.0,
        max_retries: int = 3,
        resubmits: int = 2,
        runtime_env: dict[str, Any] | None = None,
        log_to_driver: bool = False,
        poll_s: float = 1.0,
        **_ignored: Any,
    ) -> None:
        if cpus_per_trial < 0 or gpus_per_trial < 0:
            raise ValueError(
                f"cpus_per_trial and gpus_per_trial must be >= 0, got {cpus_per_trial}, {gpus_per_trial}"
            )
        if cpus_per_trial == 0 and gpus_per_trial == 0:
            raise ValueError("a trial must declare some resource: cpus_per_trial or gpus_per_trial > 0")
        if max_retries < 0 or resubmits < 0:
            raise ValueError(f"max_retries and resubmits must be >= 0, got {max_retries}, {resubmits}")
        ray_task_env(gpus_per_trial)  # DevicePlanError (a ValueError) for e.g. 1.5 GPUs, before any write
        self.address = address
        self.cpus_per_trial = float(cpus_per_trial)
        self.gpus_per_trial = float(gpus_per_trial)
        self.max_retries = int(max_retries)
        self.resubmits = int(resubmits)
        self.runtime_env = runtime_env
        self.log_to_driver = log_to_driver
        self.poll_s = poll_s
        #: Filled by :meth:`run`: unit index → number of submissions it took (1 = no resubmission).
        self.submissions: dict[int, int] = {}

    # -- checks that run before anything ---------------------------------------------------------

    def validate(self, tracking_uri: str | None = None) -> None:
        """Refuse a missing Ray or an unshareable tracking store (call before the parent run is created).

        Raises:
          RayUnavailableError: Ray is not installed. RayTrackingError: see :func:`check_tracking_store`.
        """
        _import_ray()
        check_tracking_store(tracking_uri, self.address)

    def _task_env(self) -> dict[str, str]:
        """The tasks' environment (:func:`harness.execute.devices.ray_task_env`): Ray sets
        ``CUDA_VISIBLE_DEVICES`` for ``num_gpus``; a fraction turns preallocation off. The tracking
        server's credentials (:data:`CREDENTIAL_VARS`, where the harness moved a server URI's
        user-info: :func:`harness.tracking.uris.resolve_tracking_uri`) go with them, so that a task
        on another machine authenticates as the driver does; the URI the tasks carry has none."""
        env = ray_task_env(self.gpus_per_trial)
        env.update({k: os.environ[k] for k in CREDENTIAL_VARS if os.environ.get(k)})
        return env

    def _connect(self, ray: Any) -> bool:
        """Connect (or start a local instance); True if this call did it and must shut it down."""
        if ray.is_initialized():
            return False
        kw: dict[str, Any] = {
            "ignore_reinit_error": True,
            "log_to_driver": self.log_to_driver,
            "logging_level": logging.WARNING,
            "namespace": "harness",
        }
        if self.runtime_env:
            kw["runtime_env"] = self.runtime_env
        if self.address in (None, "", "local"):
            kw["include_dashboard"] = False
            with warnings.catch_warnings():
                # Ray starts its local processes with fork+exec; JAX's warning about fork in a
                # multithreaded process does not apply to a child that execs at once.
                warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
                ray.init(**kw)
        else:
            ray.init(address=self.address, **kw)
        interrupt.retake()  # ray.init made SIGTERM sys.exit(15): the sweep stops on it as on Ctrl-C
        return True

    def _warn_if_unschedulable(self, ray: Any) -> None:
        fits = False
        for n in ray.nodes():
            if not n.get("Alive", True):
                continue
            res = n.get("Resources", {})
            if res.get("CPU", 0.0) >= self.cpus_per_trial and res.get("GPU", 0.0) >= self.gpus_per_trial:
                fits = True
        if not fits:
            log.warning(
                "no alive Ray node has %s CPU and %s GPU free in total: tasks wait until the cluster "
                "(or its autoscaler) provides such a node", self.cpus_per_trial, self.gpus_per_trial,
            )

    # -- the sweep -------------------------------------------------------------------------------

    def run(
        self,
        units: list[list[TrialSpec]],
        ctx: RunContext,
        on_done: Callable[[list[TrialOutcome]], None],
    ) -> None:
        """Run every unit as a Ray task; call ``on_done(outcomes)`` in the driver as each completes.

        Raises:
          RayTrackingError: the tracking store cannot be shared by the cluster (nothing has run).
          RayUnavailableError: Ray is not installed.
          RuntimeError: a trial was never reported (a bug; the sweep's resume re-runs it).
        """
        self.validate(ctx.tracking_uri)
        if not units:
            return
        ray = _import_ray()

        owns = self._connect(ray)
        try:
            check_cluster(ray.nodes(), ctx.tracking_uri, self.address)
            self._warn_if_unschedulable(ray)
            reported = self._drive(ray, units, ctx, on_done)
        finally:
            if owns:
                ray.shutdown()
                interrupt.retake()  # ray.shutdown reset SIGTERM's action: the end's writes stop cleanly
        expected = {spec.trial_id for unit in units for spec in unit}
        missing = expected - reported
        if missing:
            raise RuntimeError(f"{len(missing)} trial(s) were never reported: {sorted(missing)[:5]}")
        # A retried task may have raced its first attempt: the sweep keeps one FINISHED run per
        # trial once its executor returns (harness.orchestrate.resume.dedupe_sweep), for every executor.

    def _drive(
        self,
        ray: Any,
        units: list[list[TrialSpec]],
        ctx: RunContext,
        on_done: Callable[[list[TrialOutcome]], None],
    ) -> set[str]:
        if self.gpus_per_trial > 0:
            # One task per worker process: Ray sets CUDA_VISIBLE_DEVICES per task, but a reused
            # worker's JAX backend stays bound to the GPU of its first task. (Ray makes this the
            # default only for functions decorated with num_gpus; ours get it through .options().)
            remote = ray.remote(max_calls=1)(run_unit_task)
        else:
            remote = ray.remote(run_unit_task)
        env = self._task_env()
        ctx_ref = ray.put(ctx)
        pending: dict[Any, int] = {}
        self.submissions = {}
        submit = functools.partial(self._submit, remote, units, ctx_ref, env, pending)
        for i in range(len(units)):
            submit(i)

        # On Ctrl-C (or an error in on_done) the pending tasks are not cancelled: ray.cancel, with
        # or without force, races with a task's reply arriving and aborts the driver inside Ray
        # ("Check failed: ... Tried to complete task that was not pending": exit 1, the parent run
        # left RUNNING; the race of ray-project/ray#54798, still in 2.60). They end with this
        # driver: ray.shutdown() for a local instance it started, the job's end (the process's
        # exit) on a cluster. Trials left RUNNING in MLflow are marked KILLED and re-run by the
        # next invocation; one that finished meanwhile is FINISHED and skipped.
        reported: set[str] = set()
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=self.poll_s)
            interrupt.check()  # a Ctrl-C that Ray's wait (or a gc callback) swallowed
            for ref in done:
                i = pending.pop(ref)
                outcomes = self._collect(ray, ref, i, units[i], submit)
                if outcomes is None:  # resubmitted
                    continue
                reported.update(str(o.trial_id) for o in outcomes)
                on_done(outcomes)
        return reported

    def _submit(self, remote: Any, units: list[list[TrialSpec]], ctx_ref: Any, env: dict[str, str],
                pending: dict[Any, int], i: int) -> None:
        """Submit unit ``i`` as a Ray task of ``remote`` (its ref into ``pending``), counted in
        :attr:`submissions`."""
        self.submissions[i] = self.submissions.get(i, 0) + 1
        opts: dict[str, Any] = {
            "name": f"{TASK_PREFIX}:{units[i][0].trial_id}",
            "num_cpus": self.cpus_per_trial,
            "num_gpus": self.gpus_per_trial,
            "max_retries": self.max_retries,
            "retry_exceptions": False,
        }
        if env:
            opts["runtime_env"] = {"env_vars": env}
        pending[remote.options(**opts).remote(units[i], ctx_ref)] = i

    def _collect(
        self, ray: Any, ref: Any, i: int, unit: list[TrialSpec], submit: Callable[[int], None]
    ) -> list[TrialOutcome] | None:
        """The unit's outcomes, or ``None`` after resubmitting it."""
        exc = ray.exceptions
        try:
            return list(ray.get(ref))
        except exc.RayTaskError as e:
            # The unit itself raised (execute_unit records a trial's own failure and never raises,
            # so this is the environment: import error, tracking server gone...). Not retried.
            cause = e.as_instanceof_cause() if hasattr(e, "as_instanceof_cause") else e
            reason = "".join(traceback.format_exception_only(type(cause), cause)).strip()
            log.error("unit %s raised on its Ray worker: %s", unit[0].trial_id, reason)
            return not_run(unit, f"Ray task raised: {e}")
        except exc.TaskCancelledError:
            return not_run(unit, "Ray task was cancelled")
        except exc.RayError as e:  # worker/node died after Ray's own retries, object lost, OOM kill
            n = self.submissions.get(i, 1)
            if n <= self.resubmits:
                log.warning(
                    "unit %s: Ray gave up after a system failure (%s); resubmitting (%d/%d)",
                    unit[0].trial_id, type(e).__name__, n, self.resubmits,
                )
                submit(i)
                return None
            return not_run(
                unit,
                f"Ray could not complete the task after {n} submission(s) with {self.max_retries} "
                f"retries each: {type(e).__name__}: {e}",
            )


register_executor("ray", RayExecutor)
