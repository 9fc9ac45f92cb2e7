"""A user's value echoed in an error message: :func:`short_repr`, bounded in length and in cost.

At most :data:`MAX_ECHO` characters, computed without building the full ``repr`` of a large or
deeply nested value (``reprlib`` limits per level), so a hostile config cannot make an error
message huge or slow. Standard library only.
"""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = ["MAX_ECHO", "short_repr"]

#: Most characters of a user's value echoed in an error message.
MAX_ECHO = 200

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxdict = 8
_REPR.maxstring = 120
_REPR.maxother = 120
_REPR.maxlong = 60


def short_repr(value: Any, limit: int = MAX_ECHO) -> str:
    """``repr(value)`` cut to at most ``limit`` characters (``...`` marks a cut; a long string also
    says how long it was). Cost is bounded by ``reprlib``'s per-level limits, not by the value's
    size."""
    try:
        text = _REPR.repr(value)
    except Exception:  # a hostile __repr__ cannot break an error message
        text = f"<{type(value).__name__}>"
    if isinstance(value, str) and len(value) > _REPR.maxstring:
        text += f" ({len(value):,} characters)"
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text
