"""Boundary warnings: a selected configuration whose sampled hyperparameter lies at the edge of its
search range, or whose grid value is the grid's smallest or largest of three or more (Google's Deep
Learning Tuning Playbook, "check the search space boundaries": the best value may lie outside the
range, so widen it).

A sampled trial's run carries its search ranges in the tag ``harness.search_space``
(:func:`space_tag`: JSON ``{"optimizer.step_size": ["log_uniform", 1e-05, 0.001], ...}``, range
distributions only: ``uniform``, ``log_uniform``, ``int_uniform``). Both the sweep's summary and the
report read them with :func:`parse_space` and warn with :func:`edge_warning`. Standard library only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["EDGE_FRACTION", "GRID_MIN_VALUES", "RANGE_KINDS", "SearchRange", "edge", "edge_warning",
           "grid_edge", "grid_warning", "parse_space", "space_tag"]

#: The outer fraction of a range (each side; on the log scale for ``log_uniform``) that warns.
EDGE_FRACTION = 0.1
RANGE_KINDS = ("uniform", "log_uniform", "int_uniform")
#: A grid warns from this many distinct values on (with two, every choice is an edge).
GRID_MIN_VALUES = 3


@dataclass(frozen=True)
class SearchRange:
    """One sampled dimension's range: flat key (``optimizer.step_size``), kind, bounds."""

    key: str
    kind: str
    lo: float
    hi: float

    @property
    def name(self) -> str:
        """The key as a user reads it: ``step_size`` for an optimizer's, else the flat key."""
        return self.key.removeprefix("optimizer.")


def space_tag(ranges: list[SearchRange]) -> str:
    """The ``harness.search_space`` tag of ``ranges`` (JSON, keys sorted)."""
    return json.dumps({r.key: [r.kind, r.lo, r.hi] for r in sorted(ranges, key=lambda r: r.key)},
                      separators=(",", ":"))


def parse_space(text: str | None) -> list[SearchRange]:
    """The ranges of a ``harness.search_space`` tag (``[]`` for none, or for text that is not one)."""
    if not text:
        return []
    try:
        raw = json.loads(text)
    except ValueError:
        return []
    out = []
    if isinstance(raw, dict):
        for key, v in raw.items():
            if (isinstance(v, list) and len(v) == 3 and v[0] in RANGE_KINDS
                    and all(isinstance(x, int | float) for x in v[1:]) and v[1] < v[2]):
                out.append(SearchRange(str(key), v[0], v[1], v[2]))
    return out


def edge(value: Any, r: SearchRange, fraction: float = EDGE_FRACTION) -> str | None:
    """``"top"`` or ``"bottom"`` when ``value`` lies in the outer ``fraction`` of ``r`` (measured on
    the log scale for ``log_uniform``), else ``None`` (also for a value that is not a number)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(v):
        return None
    if r.kind == "log_uniform":
        if v <= 0 or r.lo <= 0:
            return None
        pos = (math.log(v) - math.log(r.lo)) / (math.log(r.hi) - math.log(r.lo))
    else:
        pos = (v - r.lo) / (r.hi - r.lo)
    if pos >= 1 - fraction:
        return "top"
    if pos <= fraction:
        return "bottom"
    return None


def edge_warning(optimizer: str, r: SearchRange, value: Any, side: str, task: str = "") -> str:
    """``"lion: best step_size 0.00082 is at the top of [1e-05, 0.001]: widen the range"`` (the
    task appended in parentheses when given)."""
    where = f" ({task})" if task else ""
    return (f"{optimizer}: best {r.name} {float(value):.3g} is at the {side} of [{r.lo:.3g}, {r.hi:.3g}]"
            f"{where}: widen the range")


def _number(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and not isinstance(value, bool) else None


def grid_edge(value: Any, values: list[Any]) -> str | None:
    """``"top"`` / ``"bottom"`` when ``value`` is the largest / smallest of ``values`` (a grid axis:
    the values the optimizer's configurations on a task took) and they are at least
    :data:`GRID_MIN_VALUES` distinct numbers; else ``None`` (also for a non-number)."""
    v = _number(value)
    nums = {x for x in map(_number, values) if x is not None}
    if v is None or len(nums) < GRID_MIN_VALUES:
        return None
    return "top" if v >= max(nums) else "bottom" if v <= min(nums) else None


def grid_warning(optimizer: str, key: str, value: Any, values: list[Any], side: str, task: str = "") -> str:
    """``"sgd: best step_size 0.3 is the largest of its grid [0.01, 0.1, 0.3]: extend the grid"``
    (``key`` flat, ``optimizer.`` dropped; the task appended in parentheses when given)."""
    grid = ", ".join(f"{x:.3g}" for x in sorted({x for x in map(_number, values) if x is not None}))
    where = f" ({task})" if task else ""
    most = "largest" if side == "top" else "smallest"
    return (f"{optimizer}: best {key.removeprefix('optimizer.')} {float(value):.3g} is the {most} of its "
            f"grid [{grid}]{where}: extend the grid")
