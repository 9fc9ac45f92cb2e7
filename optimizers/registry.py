"""Registries by name: ``OPTIMIZERS`` and ``SCHEDULES``, filled where each entry is defined.

An optimizer or schedule registers itself with :func:`register_optimizer` /
:func:`register_schedule` on its definition (in :mod:`optimizers.core` and
:mod:`optimizers.extra`), so adding one touches one file. Every entry takes the base ``step_size``
first and its hyperparameters as keyword arguments with defaults in its own signature (the sweep
config validator reads them with ``inspect.signature``, and their annotations to check values).
``step_size`` may be a Python/numpy float, a traced scalar (vmapped learning rates) or a schedule.
A schedule argument named ``total_steps`` is filled in by the harness with the trial's step budget.

* ``OPTIMIZERS[name](step_size, **hparams) -> Optimizer``
* ``SCHEDULES[name](step_size, **hparams) -> Schedule``
* ``EVAL_PARAMS[name](opt_state) -> params``: where an optimizer evaluates at other parameters
  than it trains at (Schedule-Free's average), the rule giving them; the trainer evaluates there.
* ``HPARAMS_USED[name](**hparams) -> dict``: where an optimizer derives hyperparameters left
  ``None`` from others (Muon's ``convention``), the values it trains with; the harness logs them.

Entries are in registration order (``optimizers.core`` first, then ``optimizers.extra``). This
module imports nothing (the registering modules import it).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["EVAL_PARAMS", "HPARAMS_USED", "NOTES", "OPTIMIZERS", "SCHEDULES", "register_optimizer",
           "register_schedule"]

#: ``name -> factory`` returning an :class:`~optimizers.core.Optimizer`.
OPTIMIZERS: dict[str, Callable[..., Any]] = {}
#: ``name -> factory`` returning a :data:`~optimizers.core.Schedule`.
SCHEDULES: dict[str, Callable[..., Any]] = {}
#: A remark on how the harness uses an entry, added after its first docstring sentence where the
#: entries are listed (``python -m harness list``): ``NOTES[registry][name]``, registry
#: ``"optimizers"`` or ``"schedules"``.
NOTES: dict[str, dict[str, str]] = {"optimizers": {}, "schedules": {}}
#: ``name -> eval_params(opt_state) -> params`` of the optimizers that evaluate at other parameters
#: than their ``params_fn`` gives (registered with ``register_optimizer(..., eval_params=...)``).
EVAL_PARAMS: dict[str, Callable[[Any], Any]] = {}
#: ``name -> hparams_used(**hparams) -> {name: value}`` of the optimizers whose ``None`` defaults
#: stand for values derived from other hyperparameters (registered with
#: ``register_optimizer(..., hparams_used=...)``).
HPARAMS_USED: dict[str, Callable[..., dict[str, Any]]] = {}


def with_defaults(fn: Callable, defaults: Mapping[str, Any]) -> Callable:
    """``fn`` with the given parameter defaults added to its signature (a new function with
    ``fn``'s name, docstring and annotations; ``fn`` itself is unchanged).

    Raises:
      TypeError: a name in ``defaults`` that is not a parameter of ``fn``.
      ValueError: the defaults leave a parameter without default after one with a default.
    """
    sig = inspect.signature(fn)
    unknown = set(defaults) - set(sig.parameters)
    if unknown:
        raise TypeError(f"{fn.__name__} has no parameter(s) {sorted(unknown)}")
    sig = sig.replace(parameters=[p.replace(default=defaults[p.name]) if p.name in defaults else p
                                  for p in sig.parameters.values()])

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return fn(*bound.args, **bound.kwargs)

    wrapper.__signature__ = sig
    return wrapper


def _register(registry: str, table: dict[str, Callable], name: str, note: str | None,
              defaults: Mapping[str, Any] | None) -> Callable[[Callable], Callable]:
    def decorate(fn: Callable) -> Callable:
        if name in table:
            raise ValueError(f"{registry}: {name!r} is already registered")
        table[name] = with_defaults(fn, defaults) if defaults else fn
        if note:
            NOTES[registry][name] = note
        return fn

    return decorate


def register_optimizer(name: str, *, note: str | None = None, defaults: Mapping[str, Any] | None = None,
                       eval_params: Callable[[Any], Any] | None = None,
                       hparams_used: Callable[..., dict[str, Any]] | None = None,
                       ) -> Callable[[Callable], Callable]:
    """Decorator: register the optimizer factory it decorates as ``OPTIMIZERS[name]`` and return
    it unchanged. ``defaults`` gives parameters that have none in the factory's own signature a
    default in the registry's entry only (``momentum``'s ``mass``, which the reference leaves
    without default); ``note`` goes to :data:`NOTES`; ``eval_params(opt_state) -> params`` (the
    parameters to evaluate at, where they are not the training iterate) to :data:`EVAL_PARAMS`;
    ``hparams_used(**hparams) -> dict`` (the values of hyperparameters derived from others) to
    :data:`HPARAMS_USED`.

    Raises:
      ValueError: ``name`` is already registered.
    """
    register = _register("optimizers", OPTIMIZERS, name, note, defaults)
    if eval_params is None and hparams_used is None:
        return register

    def decorate(fn: Callable) -> Callable:
        out = register(fn)
        if eval_params is not None:
            EVAL_PARAMS[name] = eval_params
        if hparams_used is not None:
            HPARAMS_USED[name] = hparams_used
        return out

    return decorate


def register_schedule(name: str, *, note: str | None = None,
                      defaults: Mapping[str, Any] | None = None) -> Callable[[Callable], Callable]:
    """Decorator: register the schedule factory it decorates as ``SCHEDULES[name]``; as
    :func:`register_optimizer`."""
    return _register("schedules", SCHEDULES, name, note, defaults)
