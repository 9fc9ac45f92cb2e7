"""A sweep from config to MLflow: :func:`run_sweep` validates, plans, runs and summarises a config.

Owns the pre-flight (``preflight``), the resume plan and de-duplication (``resume``), the parent
run of an invocation (``parent_run``), running the units on the executor (``execution``), the
console output (``progress``: plan table and progress bar; ``summary``: the end table;
``target_claims``: its target-claim lines), part of a
config (``only``), the orchestration (``run``), the Python entry point (``api``: the function
``harness.sweep``) and one stored trial trained again (``reproduce``). May import every other
subpackage of ``harness`` but the command line; never ``reports``.
"""

_LAZY = {"run_sweep": "run", "SweepInterrupted": "run", "expand": "run", "sweep_id_of": "run",
         "group_units": "run", "make_plan": "run", "preflight": "run", "best_configs": "run",
         "print_summary": "run", "SweepSummary": "run", "python_command": "run",
         "SweepOptions": "run", "SweepRun": "api"}


def __getattr__(name: str):
    """``harness.orchestrate.run_sweep`` and the run module's other names, imported on use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"harness.orchestrate.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'harness.orchestrate' has no attribute {name!r}")
