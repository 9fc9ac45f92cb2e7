"""How many threads XLA's CPU backend computes a step on: one, unless ``HARNESS_XLA_CPU_THREADS`` says.

Why one. On a CPU the modeled clock ranks on a program's *CPU time* per step
(:mod:`harness.train.cpu_clock`), so that waiting for a core on a busy machine is not charged to the
optimizer. With XLA's default intra-op pool (one thread per core) that figure is not the step's work:
the pool's idle workers spin while they wait for the next task, and spinning is CPU time. On an idle
machine they spin a lot, beside CPU-burning processes they are preempted and spin little, and by how
much depends on the program. On one thread the figure is a function of the program, not of the load
(docs/decisions.md, "XLA's and BLAS's CPU pools on one thread"), and results are the same bits run
after run (with the pool a reduction may split over threads as their timing falls); one thread
is slower (idle wall-clock) only where a step is mostly large matrix products, which the pool
splits over cores. A user who wants the pool (throughput on a many-core CPU, at the price of a load-dependent
CPU figure) sets ``HARNESS_XLA_CPU_THREADS=all``, or a number of threads.

XLA reads the pool's size from the ``NPROC`` environment variable when its CPU client starts (the
first JAX computation of the process), so :func:`pin` runs when :mod:`harness` is imported, before
anything computes; it sets ``NPROC`` in this process's environment, which ``--jobs`` workers and
subprocesses inherit (a Ray worker imports :mod:`harness` itself). Nothing is set where an accelerator
plugin is installed and ``JAX_PLATFORMS`` does not ask for CPU: there the figure is the device's
wall-clock and the host's threads are left as XLA sizes them. Standard library only.
"""

from __future__ import annotations

import importlib.util
import os
import pkgutil
from collections.abc import Mapping, MutableMapping

__all__ = ["BLAS_ENVS", "ENV", "XLA_ENV", "mismatch", "pin", "pool_threads", "threads_setting"]

#: The harness's variable: ``1`` (unset: the default), a positive number of threads, or ``all``.
ENV = "HARNESS_XLA_CPU_THREADS"
#: The variable XLA's CPU client sizes its thread pools by.
XLA_ENV = "NPROC"
#: The variables the BLAS/LAPACK libraries size their thread pools by when they load. On a CPU
#: ``jnp.linalg.eigh`` (SOAP's and Shampoo's eigendecompositions) calls OpenBLAS's LAPACK, whose
#: pool of a thread per core waits for its workers by spinning, so its CPU time moves with the load
#: (docs/decisions.md, "XLA's and BLAS's CPU pools on one thread"). :func:`pin` sets them to the
#: same number of threads as XLA's pool unless the user set them (a value already set is kept).
BLAS_ENVS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: Top-level packages of JAX's accelerator plugins (CUDA, ROCm, TPU), and the prefixes of the
#: ``jax_plugins`` namespace entries they register.
_PLUGIN_PACKAGES = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "jax_rocm7_plugin",
                    "libtpu")
_PLUGIN_PREFIXES = ("xla_cuda", "xla_rocm", "xla_tpu", "cuda", "rocm", "tpu")


def threads_setting(environ: Mapping[str, str] | None = None) -> int | None:
    """``HARNESS_XLA_CPU_THREADS`` read: a number of threads (default 1), or ``None`` for ``all``.

    Raises:
      ValueError: the value is neither a positive integer nor ``all``; the message says so.
    """
    env = os.environ if environ is None else environ
    raw = env.get(ENV, "").strip().lower()
    if raw in ("", "1"):
        return 1
    if raw == "all":
        return None
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    raise ValueError(f"{ENV}={raw[:40]!r} is neither a positive number of threads (default 1) nor "
                     f"'all' (XLA's own pool, one thread per core)")


def _accelerator_installed() -> bool:
    for name in _PLUGIN_PACKAGES:
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):
            continue
    try:
        spec = importlib.util.find_spec("jax_plugins")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    return any(m.name.startswith(_PLUGIN_PREFIXES)
               for m in pkgutil.iter_modules(list(spec.submodule_search_locations)))


def pin(environ: MutableMapping[str, str] | None = None) -> int | None:
    """Set ``NPROC`` from ``HARNESS_XLA_CPU_THREADS`` before XLA's CPU client starts (and the BLAS
    pools' :data:`BLAS_ENVS` to the same number, where the user has not set them); returns the
    threads set, or ``None`` where nothing was set (``all``, an invalid value, which
    :func:`harness.config.environment.check_environment` refuses before a sweep starts, or an
    accelerator plugin installed while ``JAX_PLATFORMS`` does not ask for CPU). Idempotent."""
    env = os.environ if environ is None else environ
    try:
        threads = threads_setting(env)
    except ValueError:
        return None
    if threads is None:
        return None
    platforms = env.get("JAX_PLATFORMS", "").strip().lower()
    if (not platforms or not platforms.startswith("cpu")) and _accelerator_installed():
        return None
    env[XLA_ENV] = str(threads)
    for name in BLAS_ENVS:  # the LAPACK under jnp.linalg on a CPU (eigh, svd, qr): the same size
        env.setdefault(name, str(threads))
    return threads


def pool_threads() -> int | None:
    """The threads of XLA's intra-op pool in this process (named ``tf_XLAEigen`` on Linux; 0 before
    the CPU client starts, then ``NPROC`` of them); ``None`` where threads cannot be listed."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    count = 0
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                count += f.read().startswith("tf_XLAEigen")
        except OSError:
            continue
    return count


def mismatch(environ: Mapping[str, str] | None = None) -> str | None:
    """A sentence when XLA's CPU pool in this process (:func:`pool_threads`, once JAX's CPU client
    has started) is not the size ``HARNESS_XLA_CPU_THREADS`` asks for, else ``None``: the pool is
    sized when the client starts, so a program (a notebook) that ran a JAX computation before
    ``import harness`` keeps XLA's own pool, whose CPU figures move with the machine's load. Nothing
    to say for ``all``, before the client starts, or where :func:`pin` leaves the threads alone."""
    env = os.environ if environ is None else environ
    try:
        want = threads_setting(env)
    except ValueError:
        return None
    have = pool_threads()
    if want is None or not have or have == want or env.get(XLA_ENV) != str(want):
        return None
    return (f"XLA's CPU pool has {have} threads, not the {want} {ENV} asks for: JAX computed before "
            f"`import harness`, so CPU step times here move with the machine's load and the trials "
            f"record xla_cpu_threads={have}; import harness before jax (restart the kernel), or set "
            f"{ENV}=all to mean it")
