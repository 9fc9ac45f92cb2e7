"""Frozen (hashable, canonical) hyperparameter mappings.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def freeze(mapping: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """A mapping as a hashable, canonical value: sorted ``(str(key), value)`` pairs, lists and tuples
    as tuples and nested mappings frozen the same way, all the way down.

    The one rule behind :class:`harness.core.spec.TrialSpec`'s hyperparameter fields (hence its
    ``trial_id``) and the dataset memo's key. Example: ``freeze({"b": [1, 2], "a": {"y": 0}}) ==
    (("a", (("y", 0),)), ("b", (1, 2)))``; ``freeze(None) == ()``.
    """
    def norm(v: Any) -> Any:
        if isinstance(v, list | tuple):
            return tuple(norm(x) for x in v)
        if isinstance(v, Mapping):
            return tuple(sorted((str(k), norm(x)) for k, x in v.items()))
        return v

    return tuple(sorted((str(k), norm(v)) for k, v in (mapping or {}).items()))
