"""A sweep from config to MLflow: :func:`run_sweep` validates, plans, runs and summarises a config.

Owns the pre-flight (``preflight``), the resume plan and de-duplication (``resume``), the parent
run of an invocation (``parent_run``), running the units on the executor (``execution``), the
console output (``progress``: plan table and progress bar; ``summary``: the end table;
``target_claims``: its target-claim lines), part of a
config (``only``), the orchestration (``run``), the Python entry point (``api``) and one stored
trial trained again (``reproduce``). May import every other subpackage of ``harness`` but the
command line; never ``reports``.

**This module is callable**: ``harness.sweep(config, tracking_uri=..., only=...)`` is
:func:`harness.sweep.api.sweep` (the command line's ``sweep`` from Python; it returns a
:class:`~harness.sweep.api.SweepRun`). The module's class is a subclass of ``ModuleType`` with a
``__call__``, so the package stays a package: ``harness.sweep.run_sweep``, ``import
harness.sweep.run`` and ``from harness.sweep import run_sweep`` keep working.
"""

import sys as _sys
import types as _types

_LAZY = {"run_sweep": "run", "SweepInterrupted": "run", "expand": "run", "sweep_id_of": "run",
         "group_units": "run", "make_plan": "run", "preflight": "run", "best_configs": "run",
         "print_summary": "run", "SweepSummary": "run", "python_command": "run",
         "SweepOptions": "run", "SweepRun": "api"}


def __getattr__(name: str):
    """``harness.sweep.run_sweep`` and the old flat module's other names, imported on use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"harness.sweep.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'harness.sweep' has no attribute {name!r}")


class _CallableModule(_types.ModuleType):
    """This package's module class: calling it calls :func:`harness.sweep.api.sweep`."""

    def __call__(self, config, **options):
        """``harness.sweep(config, **options)``: :func:`harness.sweep.api.sweep`."""
        from harness.sweep.api import sweep

        return sweep(config, **options)


_sys.modules[__name__].__class__ = _CallableModule
