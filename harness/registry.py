"""Name → builder registries and the helpers the config validator uses on them.

A registry is a plain ``dict[str, Callable]``; a builder's keyword arguments are its
hyperparameters. Arguments the harness itself supplies (``INJECTED``) are not hyperparameters.
The executor names live here too (:data:`EXECUTORS`, :func:`known_executors`), so that the config
validator can check them without importing the executors (and through them the worker).
This module does not import jax.
"""

from __future__ import annotations

import difflib
import importlib.util
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: Builder arguments that the harness fills in from the trial (never set in a config).
INJECTED = frozenset({"input_shape", "num_classes", "total_steps", "step_size_schedule", "dtype"})

_EMPTY = inspect.Parameter.empty


@dataclass(frozen=True)
class HParam:
    """One hyperparameter of a builder: its name, default (``REQUIRED`` if none) and annotation."""

    name: str
    default: Any
    annotation: Any

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()


def hyperparameters(builder: Callable, skip: frozenset[str] = INJECTED) -> dict[str, HParam]:
    """The keyword hyperparameters of ``builder`` read from its signature, in order.

    ``*args``/``**kwargs`` and the names in ``skip`` are left out.
    """
    out: dict[str, HParam] = {}
    for p in inspect.signature(builder).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in skip:
            continue
        default = REQUIRED if p.default is _EMPTY else p.default
        annotation = None if p.annotation is _EMPTY else p.annotation
        out[p.name] = HParam(p.name, default, annotation)
    return out


def did_you_mean(name: str, choices: list[str] | tuple[str, ...] | Mapping[str, Any]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def lookup(registry: Mapping[str, Callable], name: str, kind: str) -> Callable:
    """``registry[name]``, or a ``KeyError`` naming the valid choices and the closest one.

    Raises:
      KeyError: ``unknown {kind} 'name'; valid choices: a, b, c (did you mean 'x'?)``.
    """
    try:
        return registry[name]
    except KeyError:
        choices = ", ".join(sorted(registry))
        raise KeyError(
            f"unknown {kind} {name!r}; valid choices: {choices}{did_you_mean(name, list(registry))}"
        ) from None


#: Executors by name: a factory ``(**opts) -> Executor``, or for the built-ins the
#: ``"module:attribute"`` of one, imported only when an executor is built
#: (:func:`harness.executors.get_executor`). :func:`harness.executors.register_executor` adds entries.
EXECUTORS: dict[str, Any] = {
    "inprocess": "harness.executors:InProcessExecutor",
    "process": "harness.executors:ProcessExecutor",
}
#: Executors provided by an optional module ``harness/<name>_executor.py`` that registers itself.
_EXECUTOR_MODULES = ("ray",)


def known_executors() -> list[str]:
    """Registered executor names plus those provided by a ``harness/<name>_executor.py`` module,
    sorted."""
    names = set(EXECUTORS)
    for cand in _EXECUTOR_MODULES:
        if importlib.util.find_spec(f"harness.{cand}_executor") is not None:
            names.add(cand)
    return sorted(names)
