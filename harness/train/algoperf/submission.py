"""Loading an AlgoPerf submission file: the ``algoperf`` modules it imports, then the file itself.

:func:`algoperf_modules` makes ``from algoperf import spec, jax_sharding_utils`` work: when the real
``algoperf`` package is importable (``importlib.util.find_spec("algoperf")``) it is used; otherwise
the harness's stand-ins (:mod:`harness.train.algoperf.spec`,
:mod:`harness.train.algoperf.jax_sharding_utils`) are registered as ``sys.modules["algoperf"]`` (a
package object whose attributes are the two modules), ``["algoperf.spec"]`` and
``["algoperf.jax_sharding_utils"]``. They stay registered for the process (a submission's functions
refer to them after loading).

:func:`load_submission` then executes the file's shipped text (:func:`harness.core.source.load_module`)
and checks it defines the functions AlgoPerf's runner calls.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
import types
from typing import Any

from harness.core.source import SourceError, SourceRef, load_module
from harness.train.algoperf import jax_sharding_utils as standin_sharding
from harness.train.algoperf import spec as standin_spec

__all__ = ["OPTIONAL", "REQUIRED", "algoperf_modules", "load_submission", "optional_fn", "submission_name"]

#: The functions every submission defines, in the order AlgoPerf's runner first calls them.
REQUIRED = ("get_batch_size", "init_optimizer_state", "data_selection", "update_params")
#: Optional functions (v0.6): absent ``prepare_for_eval`` means evaluation at the current state.
OPTIONAL = ("prepare_for_eval",)

_LOCK = threading.Lock()


def algoperf_modules() -> tuple[types.ModuleType, types.ModuleType]:
    """``(spec, jax_sharding_utils)`` as a submission will import them: the real package's when it
    is installed, else the stand-ins, registered in ``sys.modules`` (once; idempotent)."""
    with _LOCK:
        if "algoperf.spec" not in sys.modules and importlib.util.find_spec("algoperf") is not None:
            real_spec = importlib.import_module("algoperf.spec")
            real_sharding = importlib.import_module("algoperf.jax_sharding_utils")
            return real_spec, real_sharding
        if "algoperf.spec" in sys.modules:
            return sys.modules["algoperf.spec"], sys.modules["algoperf.jax_sharding_utils"]
        pkg = types.ModuleType("algoperf", "Stand-in for AlgoPerf's package (harness.train.algoperf).")
        pkg.__path__ = []  # a package: `import algoperf.spec` resolves through sys.modules
        pkg.spec = standin_spec
        pkg.jax_sharding_utils = standin_sharding
        sys.modules["algoperf"] = pkg
        sys.modules["algoperf.spec"] = standin_spec
        sys.modules["algoperf.jax_sharding_utils"] = standin_sharding
        return standin_spec, standin_sharding


def load_submission(ref: SourceRef) -> types.ModuleType:
    """The submission module of ``ref`` (an ``algoperf:PATH.py`` source), its ``algoperf`` imports
    satisfied by :func:`algoperf_modules`.

    Raises:
      SourceError: running the file raised (from :func:`~harness.core.source.load_module`); it is
        not a module; or it lacks a required function:
        ``AlgoPerf submission nadamw.py defines no update_params (a submission defines
        get_batch_size, init_optimizer_state, data_selection, update_params)``.
    """
    algoperf_modules()
    module = load_module(ref)
    name = os.path.basename(ref.target) if ref.is_file else ref.target
    if not isinstance(module, types.ModuleType):
        raise SourceError(f"AlgoPerf submission {name} is not a module (got {type(module).__name__})")
    missing = [f for f in REQUIRED if not callable(getattr(module, f, None))]
    if missing:
        what = ", ".join(missing)
        raise SourceError(f"AlgoPerf submission {name} defines no {what} (a submission defines "
                          f"{', '.join(REQUIRED)})")
    return module


def submission_name(ref: SourceRef) -> str:
    """The file's base name (``nadamw.py``)."""
    return os.path.basename(ref.target) if ref.is_file else ref.target


def optional_fn(module: Any, name: str) -> Any:
    """``module.name`` when it is callable, else ``None``."""
    fn = getattr(module, name, None)
    return fn if callable(fn) else None
