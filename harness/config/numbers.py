"""Numbers in a sweep config: a boolean is never a number.

:func:`is_num` is the one test of "a number" (an int or a float, never a ``bool``) that the schema
(:mod:`harness.config.fields`), the grid values and the search distributions share;
:func:`quoted_hint` says when a string was meant as a number; finiteness is
:func:`harness.core.finite.finite`. Standard library only.
"""

from __future__ import annotations

from typing import Any

__all__ = ["is_num", "quoted_hint"]


def is_num(a: Any) -> bool:
    """Whether ``a`` is an ``int`` or a ``float`` and not a ``bool`` (``True`` is not 1 here)."""
    return isinstance(a, int | float) and not isinstance(a, bool)


def quoted_hint(v: Any) -> str:
    """`` (a quoted string; write the number without quotes)`` when ``v`` is a string that reads as
    a number, else ``""`` (appended to "expected a number" messages)."""
    if isinstance(v, str):
        try:
            float(v)
        except ValueError:
            return ""
        return " (a quoted string; write the number without quotes)"
    return ""
