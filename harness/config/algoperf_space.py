"""AlgoPerf's ``tuning_search_space.json`` in this project's ``hparams`` syntax.

AlgoPerf describes a submission's search space as ``{name: spec}`` where ``spec`` is

* ``{"feasible_points": [v, ...]}``: one of the listed values. One point becomes the fixed value
  ``v`` (a list or mapping value is wrapped as ``{value: v}``, since a bare list would be a grid
  axis here); several become ``{choice: [v, ...]}``.
* ``{"min": a, "max": b, "scaling": "log"}`` → ``{log_uniform: [a, b]}`` (needs ``0 < a``);
  ``"linear"`` → ``{uniform: [a, b]}``; ``"discrete"`` (an extension: integer bounds) →
  ``{int_uniform: [a, b]}``. ``a < b``, or ``a == b`` which is the fixed value ``a``.

:func:`search_space_from_algoperf` converts the mapping form; :func:`points_from_algoperf` the
other form AlgoPerf accepts, a list of fixed points (``[{name: value, ...}, ...]``, as AlgoPerf's
external-tuning baselines ship), one ``hparams`` mapping per point. Every error is a
``ValueError`` with a one-line message naming the hyperparameter. Pure Python.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from harness.config.numbers import is_num
from harness.core.echo import short_repr
from harness.core.finite import finite

__all__ = ["SCALINGS", "load_algoperf_space", "points_from_algoperf", "search_space_from_algoperf"]

#: ``scaling`` → this project's distribution.
SCALINGS = {"log": "log_uniform", "linear": "uniform", "discrete": "int_uniform"}
_FORMS = ('expected {"feasible_points": [...]} or {"min": a, "max": b, "scaling": "log" | "linear" '
          '| "discrete"}')


def _fixed(v: Any) -> Any:
    return {"value": v} if isinstance(v, list | tuple | Mapping) else v


def _one(name: str, spec: Any) -> Any:
    where = f"search space {name!r}"
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where}: {short_repr(spec)} is not a mapping; {_FORMS}")
    keys = set(spec)
    if "feasible_points" in keys:
        if keys != {"feasible_points"}:
            raise ValueError(f"{where}: feasible_points cannot be combined with "
                             f"{', '.join(sorted(keys - {'feasible_points'}))}")
        pts = spec["feasible_points"]
        if not isinstance(pts, list | tuple) or not pts:
            raise ValueError(f"{where}: feasible_points must be a non-empty list, got {short_repr(pts)}")
        return _fixed(pts[0]) if len(pts) == 1 else {"choice": list(pts)}
    if not {"min", "max"} <= keys:
        raise ValueError(f"{where}: {_FORMS}, got keys {sorted(map(str, keys))}")
    extra = keys - {"min", "max", "scaling"}
    if extra:
        raise ValueError(f"{where}: unknown keys {sorted(map(str, extra))}; {_FORMS}")
    lo, hi = spec["min"], spec["max"]
    if not (is_num(lo) and is_num(hi)) or not (finite(lo) and finite(hi)):
        raise ValueError(f"{where}: min and max must be finite numbers, got {short_repr(lo)} and "
                         f"{short_repr(hi)}")
    scaling = spec.get("scaling")
    if scaling not in SCALINGS:
        raise ValueError(f"{where}: scaling must be one of {', '.join(SCALINGS)}, got {short_repr(scaling)}")
    if lo > hi:
        raise ValueError(f"{where}: min {lo!r} exceeds max {hi!r}")
    if scaling == "log" and lo <= 0:
        raise ValueError(f"{where}: log scaling needs min > 0, got {lo!r}")
    if scaling == "discrete" and not (isinstance(lo, int) and isinstance(hi, int)):
        raise ValueError(f"{where}: discrete scaling needs integer min and max, got {lo!r} and {hi!r}")
    if lo == hi:
        return lo
    return {SCALINGS[scaling]: [lo, hi]}


def search_space_from_algoperf(obj: Any) -> dict[str, Any]:
    """``{name: hparams value}`` of an AlgoPerf search space in the mapping form (module
    docstring), in the file's order.

    Raises:
      ValueError: ``obj`` is not a non-empty mapping with string keys, or one entry is malformed
        (``search space 'beta2': feasible_points must be a non-empty list, got []``).
    """
    if isinstance(obj, list | tuple):
        raise ValueError("search space: a list of fixed points, not a mapping of ranges; convert it "
                         "with points_from_algoperf (one hparams mapping per point)")
    if not isinstance(obj, Mapping) or not obj:
        raise ValueError(f"search space: expected a non-empty mapping of hyperparameter names, got "
                         f"{short_repr(obj)}")
    out: dict[str, Any] = {}
    for name, spec in obj.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"search space: hyperparameter name {short_repr(name)} is not an identifier")
        out[name] = _one(name, spec)
    return out


def points_from_algoperf(obj: Any) -> list[dict[str, Any]]:
    """The fixed points of AlgoPerf's list form, ``[{name: value}, ...]``, as ``hparams`` mappings
    (list or mapping values wrapped as ``{value: v}``).

    Raises:
      ValueError: not a non-empty list of non-empty mappings with identifier keys.
    """
    if not isinstance(obj, Sequence) or isinstance(obj, str) or not obj:
        raise ValueError(f"search space points: expected a non-empty list of mappings, got {short_repr(obj)}")
    out = []
    for i, point in enumerate(obj):
        if not isinstance(point, Mapping) or not point:
            raise ValueError(f"search space point {i}: expected a non-empty mapping, got {short_repr(point)}")
        bad = [k for k in point if not isinstance(k, str) or not k.isidentifier()]
        if bad:
            raise ValueError(f"search space point {i}: hyperparameter name {short_repr(bad[0])} is not "
                             f"an identifier")
        out.append({k: _fixed(v) for k, v in point.items()})
    return out


def load_algoperf_space(path: str) -> dict[str, Any] | list[dict[str, Any]]:
    """A ``tuning_search_space.json`` file converted: the mapping form by
    :func:`search_space_from_algoperf`, the list form by :func:`points_from_algoperf`.

    Raises:
      ValueError: the file cannot be read or is not JSON, or its content is malformed.
    """
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except OSError as e:
        raise ValueError(f"search space {path}: cannot read it: {e.strerror}") from None
    except ValueError as e:
        raise ValueError(f"search space {path}: not JSON ({e})") from None
    return points_from_algoperf(obj) if isinstance(obj, list) else search_space_from_algoperf(obj)
