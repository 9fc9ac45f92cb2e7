"""Sweep configs: from a YAML file to a validated :class:`SweepConfig`, before any work or write.

Owns, low to high: what a number is (``numbers``), the bounded YAML reader (``yamlsafe``), the
strict number fields (``fields``), search distributions and their sampling (``search``),
hyperparameter grid values (``values``), the limits (``limits``), config errors and the rewording of
pydantic's (``errors``), the pydantic schema (``schema``), the registries a config is checked
against (``registries``), one entry against its builder (``hparams``), the workload registry and its
split of a config into parts (``workloads``), the update step's recipe keys (``recipe_keys``), a
budget as steps (``token_budget``), the validation of a whole config (``validate``) and loading
(``load``: ``load_config``, ``parse_config``). May import :mod:`harness.core`, :mod:`harness.data`,
``models`` and ``optimizers``; never the trainer, the planner, the tracking store, the executors or
the sweep.
"""

_LAZY = {"load_config": "load", "parse_config": "load", "ConfigError": "errors", "SweepConfig": "schema"}


def __getattr__(name: str):
    """``from harness.config import load_config`` (the old flat module's names), imported on use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"harness.config.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'harness.config' has no attribute {name!r}")
