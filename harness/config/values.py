"""Hyperparameter values of a config entry: the grid values one ``hparams`` value stands for.

A value is a scalar (fixed), a list (a grid axis), ``{log_grid: [low, high, num]}`` (``num``
log-spaced values, 6 significant digits), ``{value: X}`` (the literal ``X``, e.g. a list) or a
distribution (:mod:`harness.config.search`, one placeholder the search fills in).
:func:`hparam_values` builds the values; :func:`hparam_count` counts them without building a
``log_grid`` (for the plan-size limit, :mod:`harness.config.limits`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.config import search
from harness.config.numbers import is_num
from harness.core.echo import short_repr
from harness.core.finite import finite

__all__ = ["hparam_count", "hparam_values", "log_grid_args"]


def hparam_values(x: Any) -> list[Any]:
    """The grid values one hyperparameter takes: ``[x]`` for a scalar, the list for a list,
    log-spaced values for ``{log_grid: [low, high, num]}``, ``[X]`` for ``{value: X}``, and
    ``[Distribution]`` (one placeholder, filled in by the search) for a distribution
    (:mod:`harness.config.search`).

    Raises:
      ValueError: a malformed ``log_grid`` (needs ``0 < low``, ``low <= high``, integer ``num >= 1``),
        a malformed distribution (:func:`harness.config.search.parse_distribution`) or an unknown ``{...}``
        form.
    """
    if isinstance(x, list):
        return list(x)
    if search.is_distribution(x):
        return [search.parse_distribution(x)]
    if isinstance(x, Mapping):
        if set(x) == {"value"}:
            return [x["value"]]
        if set(x) == {"log_grid"}:
            lo, hi, n = log_grid_args(x["log_grid"])
            if n == 1:
                return [float(f"{lo:.6g}")]
            return [float(f"{lo * (hi / lo) ** (i / (n - 1)):.6g}") for i in range(n)]
        raise ValueError(f"a mapping value must be {{log_grid: [low, high, num]}}, {{value: X}} or a "
                         f"distribution ({{log_uniform: [lo, hi]}}, {{uniform: [lo, hi]}}, "
                         f"{{int_uniform: [lo, hi]}}, {{choice: [...]}}), got {short_repr(dict(x))}")
    return [x]


def log_grid_args(g: Any) -> tuple[float, float, int]:
    """``(low, high, num)`` of a ``log_grid``, checked (finite ``0 < low <= high``, integer
    ``num >= 1``) without building it.

    Raises:
      ValueError: malformed.
    """
    if not (isinstance(g, list) and len(g) == 3 and all(is_num(a) for a in g)
            and all(finite(a) for a in g) and float(g[2]).is_integer()):
        raise ValueError(f"log_grid must be [low, high, num] (finite numbers, integer num), "
                         f"got {short_repr(g)}")
    lo, hi, n = float(g[0]), float(g[1]), int(g[2])
    if lo <= 0 or hi < lo or n < 1:
        raise ValueError(f"log_grid needs 0 < low <= high and num >= 1, got {short_repr(g)}")
    return lo, hi, n


def hparam_count(x: Any) -> int:
    """How many values one hyperparameter form takes, without materialising a ``log_grid``:
    a list → its length; ``{value: X}`` → 1; ``{log_grid: [low, high, num]}`` → ``num`` (when
    well-formed; else 1, the form's own validator reports it); a scalar → 1; any other mapping →
    ``len(hparam_values(x))``, or 1 when that raises."""
    if isinstance(x, list):
        return len(x)
    if isinstance(x, Mapping):
        if set(x) == {"value"}:
            return 1
        if set(x) == {"log_grid"}:
            g = x["log_grid"]
            if isinstance(g, list) and len(g) == 3 and is_num(g[2]) and finite(g[2]) \
                    and g[2] >= 1:
                return int(g[2])
            return 1
        try:
            return len(hparam_values(x))
        except Exception:
            return 1
    return 1
