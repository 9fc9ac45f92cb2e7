"""A sweep from config to MLflow: :func:`run_sweep` validates, plans, runs and summarises a config.

Owns the pre-flight, the resume plan, the parent run of an invocation, the console output (plan
table, progress, summary) and the orchestration. May import every other subpackage of ``harness``
but the command line; never ``reports``.
"""

_LAZY = {"run_sweep": "run", "SweepInterrupted": "run", "expand": "run", "sweep_id_of": "run",
         "group_units": "run", "make_plan": "run", "preflight": "run", "best_configs": "run",
         "print_summary": "run", "SweepSummary": "run", "python_command": "run"}


def __getattr__(name: str):
    """``harness.sweep.run_sweep`` and the old flat module's other names, imported on use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"harness.sweep.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'harness.sweep' has no attribute {name!r}")
