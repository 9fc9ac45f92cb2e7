"""Sweep configs: from a YAML file to a validated :class:`SweepConfig`, before any work or write.

Owns the bounded YAML reader, the schema, hyperparameter values and search distributions, the
limits, the workload registry and the validation of every name and value against the registries.
May import :mod:`harness.core`, :mod:`harness.data`, ``models`` and ``optimizers``; never the
trainer, the tracking store, the executors or the sweep.
"""

_LAZY = {"load_config": "load", "parse_config": "load", "ConfigError": "load", "SweepConfig": "load"}


def __getattr__(name: str):
    """``from harness.config import load_config`` (the old flat module's names), imported on use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"harness.config.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'harness.config' has no attribute {name!r}")
