"""Which devices this process may use, and how ``--jobs N`` gives each worker its own.

``HARNESS_DEVICE_IDS`` (a comma-separated list of indices into ``jax.devices()``, e.g. ``"2,3"``) is how
a launcher gives a worker its share of a host's devices when the platform cannot hide the others
before JAX starts (CPU with ``XLA_FLAGS=--xla_force_host_platform_device_count=N``). On GPUs the
launcher also sets ``CUDA_VISIBLE_DEVICES`` before JAX starts, so ``jax.devices()`` already lists only
the worker's own devices and ``HARNESS_DEVICE_IDS`` is unset.

Device assignment for ``--jobs N`` (the ``process`` executor), in three steps:

1. :func:`parent_off_devices` (around the sweep parent's preflight and device count): the parent
   trains nothing, so on a GPU it must not preallocate 75 % of every device (its preflight does
   initialise a backend). Its backend starts with ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless
   the user set that; the variable is restored afterwards, so the workers inherit the user's
   environment.
2. :func:`host_devices` counts the host's devices in the parent with ``jax.devices()`` (the backend is
   already up, so this costs nothing more), and :func:`plan_devices` (pure, no jax) splits them: one
   environment per worker (:class:`DevicePlan`). The rule (also in ``docs/usage.md``, "Several devices"):

   - each worker gets ``devices_per_trial`` devices of its own while ``jobs × devices_per_trial``
     fits the host; devices left over stay unused (a note says so);
   - one device per trial and more workers than devices: workers share devices round-robin
     (worker ``i`` gets device ``i mod D``); on a GPU, workers on a shared device allocate on demand
     (``XLA_PYTHON_CLIENT_PREALLOCATE=false``) instead of 75 % each;
   - several devices per trial that do not fit ``jobs`` times: an error before anything is written
     (data-parallel trials that share devices slow each other down and compete for memory), saying
     which ``--jobs`` or ``parallelism.devices`` would fit.

   The variable that hides devices is ``CUDA_VISIBLE_DEVICES`` on CUDA GPUs, ``HIP_VISIBLE_DEVICES``
   on ROCm, ``HARNESS_DEVICE_IDS`` on CPU. A value the user already set is the list that is split
   (``CUDA_VISIBLE_DEVICES=4,5,6,7 --jobs 2`` gives ``4,5`` and ``6,7``). On TPU a chip belongs to one
   process, and splitting a TPU host between processes (``TPU_VISIBLE_CHIPS`` with its process-bounds
   variables) is not done by the harness: ``--jobs N > 1`` on a TPU is refused (train data-parallel
   over the chips instead).
3. :func:`apply_worker_env` (each worker, first thing, before JAX is imported there) puts its
   environment in place; :func:`use_assigned_device` makes the first assigned device JAX's default,
   and :func:`device_tags` is what the trial's MLflow run records (``harness.devices``, e.g.
   ``cpu:2`` or ``cuda:0,1``; ``harness.device_env``; ``harness.device_env_set``).

The Ray executor maps ``gpus_per_trial`` onto the same mechanism (:func:`ray_task_env`): Ray sets
``CUDA_VISIBLE_DEVICES`` for a task with ``num_gpus``, and a fraction (several tasks on one GPU)
turns preallocation off in those tasks.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.core.names import TAG_DEVICE_ENV, TAG_DEVICE_ENV_SET, TAG_DEVICES, TAG_TRAINED_BY
from harness.train.parallel import DEVICE_IDS_ENV, visible_devices

PREALLOCATE_ENV = "XLA_PYTHON_CLIENT_PREALLOCATE"
#: JAX's GPU memory settings (https://docs.jax.dev/en/latest/gpu_memory_allocation.html): a value the
#: user set is never overridden by a worker's plan.
MEMORY_ENV = (PREALLOCATE_ENV, "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION",
              "XLA_PYTHON_CLIENT_ALLOCATOR")
#: platform → the variable that hides the other devices of the host from a process.
VISIBILITY_ENV = {"cpu": DEVICE_IDS_ENV, "cuda": "CUDA_VISIBLE_DEVICES", "rocm": "HIP_VISIBLE_DEVICES"}

__all__ = ["DEVICE_IDS_ENV", "DevicePlan", "DevicePlanError", "apply_worker_env", "device_tags",
           "host_devices", "parent_off_devices", "plan_devices", "ray_task_env",
           "use_assigned_device", "visible_devices", "worker_env"]


# --------------------------------------------------------------------------- the plan (pure)


class DevicePlanError(ValueError):
    """``--jobs`` and the devices each trial wants do not fit the host (raised before any write)."""


@dataclass(frozen=True)
class DevicePlan:
    """How ``jobs`` worker processes split a host's devices (see :func:`plan_devices`).

    Attributes:
      platform: ``cpu``, ``cuda``, ``rocm`` or ``tpu``.
      workers: per worker, the ids of its devices as its visibility variable names them.
      envs: per worker, the environment it gets before JAX starts.
      shared: whether some device serves more than one worker.
      notes: one sentence per thing worth telling (sharing, unused devices).
      n_devices: the host's devices that were split.
    """

    platform: str
    workers: tuple[tuple[str, ...], ...]
    envs: tuple[dict[str, str], ...]
    shared: bool = False
    notes: tuple[str, ...] = ()
    n_devices: int = 0

    def describe(self) -> str:
        """One line, e.g. ``worker 0 cuda:0, worker 1 cuda:1. cuda:2,3 unused (...).``"""
        per = ", ".join(f"worker {i} {self.platform}:{','.join(d)}" for i, d in enumerate(self.workers))
        return f"{per}" + (f". {' '.join(self.notes)}" if self.notes else "")


def _fix_for_jobs(jobs: int, per_trial: int, n: int) -> str:
    fits = n // per_trial
    alt = [f"--jobs {fits}"] if fits >= 1 else []
    if n // jobs >= 1:
        alt.append(f"parallelism: {{devices: {n // jobs}}}")
    return " or ".join(alt)


def plan_devices(n_devices: int, platform: str, jobs: int, devices_per_trial: int | str = 1,
                 visible: str | None = None) -> DevicePlan:
    """Split ``n_devices`` of ``platform`` between ``jobs`` workers of ``devices_per_trial`` each.

    Args:
      n_devices: the devices the parent process sees (``len(jax.devices())``, or of
        :func:`visible_devices` when ``HARNESS_DEVICE_IDS`` is set).
      platform: ``cpu``, ``cuda`` (``gpu`` is taken as ``cuda``), ``rocm`` or ``tpu``.
      jobs: worker processes.
      devices_per_trial: devices one trial trains on (``parallelism.devices``; ``"all"`` = every device).
      visible: the user's value of the platform's visibility variable (``CUDA_VISIBLE_DEVICES``, ...):
        its entries are the device ids that are split; ``None``/empty: ``0..n_devices-1``.

    Returns:
      a :class:`DevicePlan`; the rule is in the module docstring.

    Raises:
      DevicePlanError: a trial wants more devices than the host has; several devices per trial do
        not fit ``jobs`` times; ``jobs > 1`` on a TPU. The message says what to change.
    """
    platform = {"gpu": "cuda"}.get(platform, platform)
    per = _per_trial(n_devices, platform, jobs, devices_per_trial)
    if platform == "tpu":
        return _tpu_plan(n_devices, jobs, per)
    entries = [t.strip() for t in (visible or "").split(",") if t.strip()]
    ids = entries[:n_devices] if len(entries) >= n_devices else [str(i) for i in range(n_devices)]
    var = VISIBILITY_ENV.get(platform)
    if var is None:
        raise DevicePlanError(f"unknown device platform {platform!r}; known: cpu, cuda, rocm, tpu")
    label = f"{n_devices} {platform} device{'s' if n_devices > 1 else ''}"
    if jobs * per <= n_devices:
        workers = [tuple(ids[i * per:(i + 1) * per]) for i in range(jobs)]
        notes = []
        unused = ids[jobs * per:]
        if unused:
            notes.append(f"{platform}:{','.join(unused)} unused ({jobs} worker{'s' if jobs > 1 else ''} × "
                         f"{per} device{'s' if per > 1 else ''} per trial on {label}).")
        envs = tuple({var: ",".join(w)} for w in workers)
        return DevicePlan(platform, tuple(workers), envs, False, tuple(notes), n_devices)
    if per > 1:
        raise DevicePlanError(
            f"--jobs {jobs} with {per} devices per trial (parallelism.devices) needs {jobs * per} "
            f"devices, but this host has {label}; data-parallel trials do not share devices (they "
            f"would slow each other down and compete for memory): use "
            f"{_fix_for_jobs(jobs, per, n_devices)}")
    return _shared_plan(platform, var, ids, jobs, label, n_devices)


def _per_trial(n_devices: int, platform: str, jobs: int, devices_per_trial: int | str) -> int:
    """The devices one trial trains on (``"all"``: ``n_devices``), checked against the host.

    Raises:
      DevicePlanError: ``jobs < 1``, no device, not a positive integer, more than the host has.
    """
    if jobs < 1:
        raise DevicePlanError(f"--jobs must be >= 1, got {jobs}")
    if n_devices < 1:
        raise DevicePlanError(f"this host has no {platform} device")
    per = n_devices if devices_per_trial == "all" else devices_per_trial
    if not isinstance(per, int) or isinstance(per, bool) or per < 1:
        raise DevicePlanError(f"devices per trial must be a positive integer or 'all', "
                              f"got {devices_per_trial!r}")
    if per > n_devices:
        hint = (" (on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N makes N host devices)"
                if platform == "cpu" else "")
        raise DevicePlanError(f"a trial wants {per} devices (parallelism.devices) but this host has "
                              f"{n_devices} {platform} device(s): use parallelism: {{devices: {n_devices}}} "
                              f"or fewer{hint}")
    return per


def _tpu_plan(n_devices: int, jobs: int, per: int) -> DevicePlan:
    """One process on the TPU host, a trial on its first ``per`` chips.

    Raises:
      DevicePlanError: ``jobs > 1`` (a TPU chip can be opened by one process only).
    """
    if jobs > 1:
        raise DevicePlanError(
            f"--jobs {jobs} on a TPU host: a TPU chip can be opened by one process only, and the "
            "harness does not split a TPU host between processes; use --jobs 1 and train each "
            "trial data-parallel over the chips (parallelism: {devices: all})")
    return DevicePlan("tpu", (tuple(str(i) for i in range(per)),), ({},), n_devices=n_devices)


def _shared_plan(platform: str, var: str, ids: list[str], jobs: int, label: str, n_devices: int
                 ) -> DevicePlan:
    """More one-device workers than devices: worker ``i`` on ``ids[i % n]``, those on a shared GPU
    without memory preallocation."""
    gpu = platform in ("cuda", "rocm")
    workers = [(ids[i % n_devices],) for i in range(jobs)]
    by_dev = {d: [i for i, w in enumerate(workers) if w[0] == d] for d in ids}
    groups = "; ".join(f"{platform}:{d}: workers {', '.join(map(str, ws))}" for d, ws in by_dev.items()
                       if len(ws) > 1)
    mem = (f"; workers on a shared GPU allocate memory on demand ({PREALLOCATE_ENV}=false) instead "
           "of preallocating 75 % each" if gpu else "")
    notes = (f"--jobs {jobs} > {label}: workers share devices ({groups}){mem}.",)
    envs = []
    for w in workers:
        env = {var: w[0]}
        if gpu and len(by_dev[w[0]]) > 1:
            env[PREALLOCATE_ENV] = "false"
        envs.append(env)
    return DevicePlan(platform, tuple(workers), tuple(envs), True, notes, n_devices)


def ray_task_env(gpus_per_trial: float, parent_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a Ray task that declares ``num_gpus=gpus_per_trial``.

    Ray itself sets ``CUDA_VISIBLE_DEVICES`` to the GPU(s) it assigns (the visibility half of
    :func:`plan_devices`); this adds the memory half: a fraction ``0 < g < 1`` shares a GPU between
    tasks, so they do not preallocate, unless the user set ``XLA_PYTHON_CLIENT_PREALLOCATE``
    themselves (``parent_env``, default ``os.environ``).

    Raises:
      DevicePlanError: ``gpus_per_trial`` above 1 that is not a whole number (Ray refuses those).
    """
    g = float(gpus_per_trial)
    if g > 1 and not g.is_integer():
        raise DevicePlanError(f"--gpus-per-trial {gpus_per_trial:g}: above 1 it must be a whole number of "
                              f"GPUs (Ray shares a GPU only by fractions below 1); use "
                              f"{int(g)} or {int(g) + 1}")
    env = os.environ if parent_env is None else parent_env
    return {PREALLOCATE_ENV: "false"} if 0 < g < 1 and PREALLOCATE_ENV not in env else {}


# --------------------------------------------------------------------------- the parent


def _backends_initialised() -> bool:
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except Exception:  # a JAX without the function: the guard below cannot tell, so it does not refuse
        return False


@contextlib.contextmanager
def parent_off_devices():
    """Around the start of a sweep's parent that trains nothing (``--jobs N``, Ray driver).

    The parent's preflight initialises a JAX backend; on a GPU host with JAX's default it would hold
    75 % of every GPU for the whole sweep while the workers train. Inside the block
    ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` is set (unless the user set it, or a backend is already
    up and it is too late); the block ends by starting the backend (``jax.devices()``, a no-op when
    the preflight did) and restoring the variable, so that the workers, which inherit this
    environment, see only what the user set. JAX reads the variable once, when the backend starts.
    """
    if PREALLOCATE_ENV in os.environ or _backends_initialised():
        yield
        return
    os.environ[PREALLOCATE_ENV] = "false"
    try:
        yield
        import jax

        jax.devices()
    finally:
        os.environ.pop(PREALLOCATE_ENV, None)


def host_devices() -> tuple[int, str, str | None]:
    """``(count, platform, visible)`` of the devices this process sees, for :func:`plan_devices`.

    Counted with JAX in the calling (parent) process: its preflight has initialised the backend
    already (inside :func:`parent_off_devices`, so without preallocating), so this adds no device
    memory; spawned workers are fresh processes that the parent's backend does not affect (a forked
    CUDA context would be). ``visible`` is the user's value of the platform's visibility variable
    (the list to split).
    """
    devs = visible_devices()
    platform = _platform(devs[0])
    var = VISIBILITY_ENV.get(platform)
    visible = os.environ.get(var) if var else None
    return len(devs), platform, visible


def _platform(d) -> str:
    p = d.platform
    if p == "gpu":
        version = str(getattr(getattr(d, "client", None), "platform_version", "")).lower()
        p = "rocm" if "rocm" in version or "hip" in version else "cuda"
    return p


def worker_env(plan_env: Mapping[str, str], parent_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a spawned worker adds to the environment it inherits: ``plan_env`` (one of
    :attr:`DevicePlan.envs`) less the memory settings the user made in ``parent_env`` (default
    ``os.environ``): theirs win (e.g. ``XLA_CLIENT_MEM_FRACTION=.3`` with preallocation on)."""
    env = os.environ if parent_env is None else parent_env
    return {k: v for k, v in plan_env.items() if not (k in MEMORY_ENV and k in env)}


# --------------------------------------------------------------------------- the worker


_APPLIED: dict[str, object] = {}


def apply_worker_env(changes: Mapping[str, str]) -> None:
    """Put a worker's device environment in place (call first thing in the worker process).

    Records whether JAX had been imported yet (tag ``harness.device_env_set``:
    ``before-jax-import``, or ``before-backend-init``: still in time, since JAX reads these variables
    when its backend starts).

    Raises:
      RuntimeError: a JAX backend is already running in this process (the assignment would be
        silently ignored).
    """
    if _backends_initialised():
        raise RuntimeError("a JAX backend was initialised in this worker before its device environment "
                           f"({', '.join(changes)}) was set: the device assignment would be ignored")
    os.environ.update(changes)
    _APPLIED.clear()
    _APPLIED.update(changes=dict(changes),
                    when="before-backend-init" if "jax" in sys.modules else "before-jax-import")


def use_assigned_device() -> None:
    """With ``HARNESS_DEVICE_IDS`` set, make its first device JAX's default device in this process,
    so that a single-device trial's arrays and programs live there (idempotent)."""
    if not os.environ.get(DEVICE_IDS_ENV, "").strip() or _APPLIED.get("pinned"):
        return
    import jax

    jax.config.update("jax_default_device", visible_devices()[0])
    _APPLIED["pinned"] = True


def _physical_id(d, platform: str) -> str:
    var = VISIBILITY_ENV.get(platform)
    entries = [t.strip() for t in os.environ.get(var, "").split(",") if t.strip()] if var else []
    local = int(getattr(d, "id", 0))
    if platform in ("cuda", "rocm") and 0 <= local < len(entries):
        return entries[local]  # the id the host knows (nvidia-smi), not the process-local index
    return str(local)


def describe_devices(devs: Sequence) -> str:
    """``"cpu:2"``, ``"cuda:0,1"``: platform and host-level ids of ``devs``."""
    if not devs:
        return ""
    p = _platform(devs[0])
    return f"{p}:{','.join(_physical_id(d, p) for d in devs)}"


def device_tags(n: int | str = 1) -> dict[str, str]:
    """The device tags of a trial trained in this process on ``n`` devices (``"all"``: every visible one).

    ``harness.devices`` (:func:`describe_devices` of the first ``n`` visible devices),
    ``harness.device_env`` (the device and memory variables set here, ``K=V`` space-separated) and,
    in a worker whose launcher called :func:`apply_worker_env`, ``harness.device_env_set``; and
    ``harness.trained_by`` (``host:pid`` of this process).
    """
    from harness.tracking.liveness import hostname

    devs = visible_devices()
    k = len(devs) if n == "all" else max(1, int(n))
    tags = {TAG_DEVICES: describe_devices(devs[:k]), TAG_TRAINED_BY: f"{hostname()}:{os.getpid()}"}
    names = sorted({*VISIBILITY_ENV.values(), *MEMORY_ENV})
    env = " ".join(f"{key}={os.environ[key]}" for key in names if key in os.environ)
    if env:
        tags[TAG_DEVICE_ENV] = env
    if "when" in _APPLIED:
        tags[TAG_DEVICE_ENV_SET] = str(_APPLIED["when"])
    return tags
