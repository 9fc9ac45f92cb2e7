"""The public API's docstrings are in the Args/Returns form (Optax's ``_src/alias.py`` style).

The public API is what these modules export in ``__all__`` (the libraries ``optimizers`` and
``models``, the trainer, the report and results API) and ``harness``'s Python API
(``harness.sweep``, ``harness.results``, ``harness.reproduce``): each function has a docstring;
one with parameters has an ``Args:`` section naming every one; one that returns a value has a
``Returns:`` (or ``Yields:``) section. A class needs a docstring. Internal functions keep a short
prose contract (docs/decisions.md, "Code layout").
"""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

PUBLIC_MODULES = ("optimizers", "optimizers.extra", "models", "models.stax", "models.zoo", "models.gpt",
                  "models.custom", "models.flops", "harness.trainer", "harness.results_api", "reports",
                  "reports.results")
HARNESS_API = ("sweep", "results", "reproduce")
#: Re-exported names of other packages (``jax.nn.initializers.zeros``) are theirs to document.
OWN_PACKAGES = ("optimizers", "models", "harness", "reports")


def public_callables() -> dict[str, object]:
    """``{qualified name: object}`` of every function and class the public API exports."""
    out = {}
    for name in PUBLIC_MODULES:
        mod = importlib.import_module(name)
        for attr in getattr(mod, "__all__", ()):
            obj = getattr(mod, attr)
            own = getattr(obj, "__module__", "").split(".")[0] in OWN_PACKAGES
            if own and (inspect.isfunction(obj) or inspect.isclass(obj)):
                out[f"{obj.__module__}.{obj.__qualname__}"] = obj
    harness = importlib.import_module("harness")
    for attr in HARNESS_API:
        obj = getattr(harness, attr)
        out[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return out


def docstring_problems(obj) -> list[str]:
    """What ``obj``'s docstring lacks of the Args/Returns form (empty: nothing)."""
    doc = inspect.getdoc(obj) or ""
    if not doc.strip():
        return ["no docstring"]
    if inspect.isclass(obj):
        return []
    sig = inspect.signature(obj)
    params = [p for p in sig.parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in ("self", "cls")]
    problems = []
    if params:
        args = re.search(r"^Args:\n(.*?)(?=^\S|\Z)", doc, re.MULTILINE | re.DOTALL)
        if args is None:
            problems.append("no Args: section")
        else:
            heads = re.findall(r"^\s+([*\w][\w, *]*?):", args.group(1), re.MULTILINE)
            named = {n.strip(" *") for head in heads for n in head.split(",")}
            missing = [p.name for p in params if p.name not in named]
            if missing:
                problems.append(f"Args: does not name {missing}")
    returns_none = sig.return_annotation in (None, "None")
    if not returns_none and not re.search(r"^(Returns|Yields):", doc, re.MULTILINE):
        problems.append("no Returns: section")
    return problems


def test_every_public_function_has_args_and_returns():
    bad = {name: p for name, obj in sorted(public_callables().items()) if (p := docstring_problems(obj))}
    assert not bad, f"{len(bad)} public docstrings not in the Args/Returns form: {bad}"


def _f_documented(step_size: float, mass: float = 0.9) -> float:
    """Momentum.

    Args:
      step_size: the step size.
      mass: the momentum coefficient.

    Returns:
      The step.
    """


def _f_prose(step_size: float) -> float:
    """The step for ``step_size``."""


def _f_pair(b1: float, b2: float) -> None:
    """Two rates.

    Args:
      b1, b2: decay rates.
    """


def _f_half(step_size: float, mass: float) -> None:
    """Momentum.

    Args:
      step_size: the step size.
    """


@pytest.mark.parametrize("fn, expected", [
    (_f_documented, []),
    (_f_prose, ["no Args: section", "no Returns: section"]),
    (_f_half, ["Args: does not name ['mass']"]),
    (_f_pair, []),
])
def test_the_check_reads_the_form(fn, expected):
    assert docstring_problems(fn) == expected
