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


def edit_distance(a: str, b: str) -> int:
    """Optimal-string-alignment distance: insertions, deletions, substitutions and transpositions
    of two adjacent characters each cost 1 (``edit_distance("adma", "adam") == 1``, where plain
    Levenshtein counts 2)."""
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


def did_you_mean(name: str, choices: list[str] | tuple[str, ...] | Mapping[str, Any]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice by :func:`edit_distance` (case-insensitive;
    at most one edit per three characters, at least one allowed; ties go to the choice
    :mod:`difflib` finds most similar), or an empty string."""
    name = str(name)
    cands = [str(c) for c in choices]
    if not cands:
        return ""
    limit = max(1, len(name) // 3)
    scored = [(edit_distance(name.lower(), c.lower()), -difflib.SequenceMatcher(None, name, c).ratio(), c)
              for c in cands]
    dist, _, best = min(scored)
    return f" (did you mean {best!r}?)" if dist <= limit else ""


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


@dataclass
class Registries:
    """The four name → builder registries (models, optimizers, schedules, datasets) that configs are
    checked against and trials are built from."""

    models: Mapping[str, Callable]
    optimizers: Mapping[str, Callable]
    schedules: Mapping[str, Callable]
    datasets: Mapping[str, Callable]


#: Executors by name: a factory ``(**opts) -> Executor``, or for the built-ins the
#: ``"module:attribute"`` of one, imported only when an executor is built
#: (:func:`harness.execute.executors.get_executor`);
#: :func:`harness.execute.executors.register_executor` adds entries.
EXECUTORS: dict[str, Any] = {
    "inprocess": "harness.execute.executors:InProcessExecutor",
    "process": "harness.execute.executors:ProcessExecutor",
}
#: Executors provided by an optional module ``harness/<name>_executor.py`` that registers itself.
_EXECUTOR_MODULES = ("ray",)


def known_executors() -> list[str]:
    """Registered executor names plus those provided by a ``harness/<name>_executor.py`` module,
    sorted."""
    names = set(EXECUTORS)
    for cand in _EXECUTOR_MODULES:
        if importlib.util.find_spec(f"harness.execute.{cand}_executor") is not None:
            names.add(cand)
    return sorted(names)
