"""Benchmark harness for training algorithms in JAX.

The runner (``python -m harness``): sweep configs are validated, expanded into trials, trained with
:mod:`harness.trainer`, timed with :mod:`harness.timing` and logged to MLflow by :mod:`harness.tracking`.
This package imports nothing heavy at import time so that ``python -m harness --help`` stays fast.
"""

import time as _time

__version__ = "0.1.0"

#: ``time.perf_counter()`` when this package was first imported: the earliest clock of a ``python -m
#: harness`` process, the start of a sweep's ``time/startup_s`` (:mod:`harness.core.budget`). It misses
#: the interpreter's own start-up before the first ``import harness``.
PROCESS_START = _time.perf_counter()

#: The Python API, imported on first use (``python -m harness --help`` imports none of it):
#: ``harness.sweep`` (:func:`harness.orchestrate.api.sweep`), ``harness.results`` and ``harness.reproduce``.
_LAZY = {"sweep": ("harness.orchestrate.api", "sweep"), "results": ("harness.results_api", "results"),
         "Results": ("reports.results", "Results"),
         "reproduce": ("harness.orchestrate.reproduce", "reproduce"),
         "ConfigError": ("harness.config.errors", "ConfigError"),
         "UsageError": ("harness.config.errors", "UsageError")}


def __getattr__(name: str):
    """``harness.sweep``, ``harness.results``, ``harness.reproduce``, ``harness.ConfigError``,
    ``harness.UsageError``:
    imported when first used (see ``docs/python-api.md``)."""
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


from harness.core.xla_threads import pin as _pin_xla_cpu_threads  # noqa: E402

#: XLA's CPU pool size, set before any JAX computation (see :mod:`harness.core.xla_threads`).
XLA_CPU_THREADS = _pin_xla_cpu_threads()
