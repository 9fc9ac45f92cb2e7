"""Loading an AlgoPerf submission file: the ``algoperf`` modules it imports, then the file itself.

:func:`algoperf_modules` makes ``from algoperf import spec, jax_sharding_utils`` work: when the real
``algoperf`` package is found (``importlib.util.find_spec("algoperf")``) and imports, it is used
(AlgoPerf's ``algoperf.spec`` imports torch: a checkout on ``PYTHONPATH`` without torch is warned
about and left out); otherwise
the harness's stand-ins (:mod:`harness.train.algoperf.standin_spec`,
:mod:`harness.train.algoperf.jax_sharding_utils`) are registered as ``sys.modules["algoperf"]`` (a
package object whose attributes are the two modules), ``["algoperf.spec"]`` and
``["algoperf.jax_sharding_utils"]``. They stay registered for the process (a submission's functions
refer to them after loading).

:func:`load_submission` then executes the file's shipped text (:func:`harness.core.source.load_module`,
whose bounds are every user file's: exceptions and ``SystemExit`` become one line naming the file and
line) and checks its API (:func:`api_problem`): the functions AlgoPerf's runner calls are defined
and callable, and each accepts the arguments that runner passes it (:data:`CALLS`). The pre-flight
(:mod:`harness.orchestrate.preflight`) calls it before anything is written, and the trainer again in each
worker (the module is cached per file and digest, so a process runs the file once).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import threading
import types
import warnings
from typing import Any

from harness.core.source import SourceError, SourceRef, load_module
from harness.core.source_builders import ALGOPERF_REQUIRED
from harness.train.algoperf import jax_sharding_utils as standin_sharding
from harness.train.algoperf import standin_spec

__all__ = ["CALLS", "OPTIONAL", "REQUIRED", "algoperf_modules", "api_problem", "load_submission",
           "optional_fn", "submission_name"]

#: The functions every submission defines (the list the config's syntax-tree check reads too).
REQUIRED = ALGOPERF_REQUIRED
#: Optional functions (v0.6): absent ``prepare_for_eval`` means evaluation at the current state.
OPTIONAL = ("prepare_for_eval",)
#: How AlgoPerf's ``submission_runner`` (and :mod:`harness.train.algoperf.runner`) calls each
#: function: ``(positional arguments, keyword arguments)``. ``update_params`` also gets
#: ``train_state=`` when its signature names it.
CALLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "get_batch_size": (("workload_name",), ()),
    "init_optimizer_state": (("workload", "model_params", "model_state", "hyperparameters", "rng"), ()),
    "data_selection": (("workload", "input_queue", "optimizer_state", "current_param_container",
                        "model_state", "hyperparameters", "global_step", "rng"), ()),
    "update_params": ((), ("workload", "current_param_container", "current_params_types", "model_state",
                           "hyperparameters", "batch", "loss_type", "optimizer_state", "eval_results",
                           "global_step", "rng")),
    "prepare_for_eval": ((), ("workload", "current_param_container", "current_params_types",
                              "model_state", "hyperparameters", "loss_type", "optimizer_state",
                              "eval_results", "global_step", "rng")),
}

_LOCK = threading.Lock()


def _real_package() -> tuple[types.ModuleType, types.ModuleType] | None:
    """AlgoPerf's own ``(algoperf.spec, algoperf.jax_sharding_utils)`` when the package is found and
    imports; ``None`` when it is not found, or (with a warning saying why) when importing it fails,
    e.g. an AlgoPerf checkout on ``PYTHONPATH`` whose ``algoperf.spec`` imports torch, which the
    harness does not install. What a failed import left in ``sys.modules`` is removed."""
    try:
        found = importlib.util.find_spec("algoperf")
    except (ImportError, ValueError):
        found = None
    if found is None:
        return None
    try:
        return (importlib.import_module("algoperf.spec"),
                importlib.import_module("algoperf.jax_sharding_utils"))
    except (Exception, SystemExit) as e:
        for k in [k for k in sys.modules if k == "algoperf" or k.startswith("algoperf.")]:
            del sys.modules[k]
        where = next(iter(found.submodule_search_locations or []), found.origin)
        first = (str(e).splitlines() or [""])[0]
        warnings.warn(f"the algoperf package at {where} cannot be imported ({type(e).__name__}: "
                      f"{first}); AlgoPerf submissions run with the harness's stand-ins "
                      f"(harness/train/algoperf)", stacklevel=3)
        return None


_MODULES: list[tuple[types.ModuleType, types.ModuleType]] = []


def algoperf_modules() -> tuple[types.ModuleType, types.ModuleType]:
    """``(spec, jax_sharding_utils)`` as a submission will import them: the real package's when it
    is installed and imports, else the stand-ins, registered in ``sys.modules`` (once per process;
    idempotent)."""
    with _LOCK:
        if _MODULES:
            return _MODULES[0]
        mods = _real_package()
        if mods is None:
            pkg = types.ModuleType("algoperf", "Stand-in for AlgoPerf's package (harness.train.algoperf).")
            pkg.__path__ = []  # a package: `import algoperf.spec` resolves through sys.modules
            pkg.spec = standin_spec
            pkg.jax_sharding_utils = standin_sharding
            sys.modules["algoperf"] = pkg
            sys.modules["algoperf.spec"] = standin_spec
            sys.modules["algoperf.jax_sharding_utils"] = standin_sharding
            mods = (standin_spec, standin_sharding)
        _MODULES.append(mods)
        return mods


def load_submission(ref: SourceRef, limit_s: float | None = None) -> types.ModuleType:
    """The submission module of ``ref`` (an ``algoperf:PATH.py`` source), its ``algoperf`` imports
    satisfied by :func:`algoperf_modules`, its API checked (:func:`api_problem`). The file runs under
    :func:`harness.core.source.bounded` (``limit_s`` seconds: the pre-flight passes the config's
    ``source_timeout_s``; a worker ``None``, the pre-flight having seen it return).

    Raises:
      SourceError: running the file raised (from :func:`~harness.core.source.load_module`: a
        missing module, a syntax error, any exception or ``SystemExit``, with its line, or an
        accident: past ``limit_s``, ``os._exit``, ``KeyboardInterrupt``, a change of directory); or its API
        is not AlgoPerf's: ``source 'algoperf:nadamw.py': AlgoPerf submission nadamw.py defines no
        update_params (a submission defines get_batch_size, init_optimizer_state, update_params,
        data_selection)``.
    """
    algoperf_modules()
    module = load_module(ref, limit_s)
    problem = api_problem(module, submission_name(ref))
    if problem is not None:
        raise SourceError(f"source {ref.text!r}: {problem}")
    return module


def _call_text(fn: str) -> str:
    pos, kw = CALLS[fn]
    return f"{fn}({', '.join([*pos, *(f'{k}=' for k in kw)])})"


def api_problem(module: Any, name: str) -> str | None:
    """Why ``module`` (the file ``name``) is not an AlgoPerf submission, or ``None``: a required
    function is missing or not callable; or a function (``prepare_for_eval`` too, when defined)
    cannot be called with the arguments AlgoPerf's runner passes (:data:`CALLS`; a signature that
    cannot be read is not judged)."""
    if not isinstance(module, types.ModuleType):
        return f"AlgoPerf submission {name} is not a module (got {type(module).__name__})"
    missing = [f for f in REQUIRED if not callable(getattr(module, f, None))]
    if missing:
        return (f"AlgoPerf submission {name} defines no {', '.join(missing)} (a submission defines "
                f"{', '.join(REQUIRED)})")
    for fn in (*REQUIRED, *OPTIONAL):
        f = getattr(module, fn, None)
        if not callable(f):
            continue
        try:
            sig = inspect.signature(f)
        except (TypeError, ValueError):
            continue
        pos, kw = CALLS[fn]
        if fn == "update_params" and "train_state" in sig.parameters:
            kw = (*kw, "train_state")
        try:
            sig.bind(*pos, **dict.fromkeys(kw))
        except TypeError as e:
            return (f"AlgoPerf submission {name}: {fn}({', '.join(sig.parameters)}) cannot take the "
                    f"arguments AlgoPerf's runner passes, {_call_text(fn)}: {e}")
    return None


def submission_name(ref: SourceRef) -> str:
    """The file's base name (``nadamw.py``)."""
    return os.path.basename(ref.target) if ref.is_file else ref.target


def optional_fn(module: Any, name: str) -> Any:
    """``module.name`` when it is callable, else ``None``."""
    fn = getattr(module, name, None)
    return fn if callable(fn) else None
