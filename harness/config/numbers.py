"""Strict numbers of a sweep config: a boolean is never a number, an integral float is an integer.

:func:`is_num` is the one test of "a number" (an int or a float, never a ``bool``) that the schema,
the grid values and the search distributions share; :data:`Int` and :data:`Float` are the pydantic
field types built on it (``eval_every: true`` is an error, ``steps: 1e3`` is 1000). Imports pydantic's
core error type only.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

__all__ = ["Float", "Int", "is_num", "quoted_hint", "strict_float", "strict_int"]


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


def strict_int(v: Any) -> Any:
    """An integer field: an int, or a float with an integral value (``1e3`` → 1000); never a bool
    (``true`` is not 1) or a string.

    Raises:
      PydanticCustomError: type ``strict_int``.
    """
    if isinstance(v, bool):
        raise PydanticCustomError("strict_int", "expected an integer, not a boolean")
    if isinstance(v, float):
        if math.isfinite(v) and v.is_integer():
            return int(v)
        raise PydanticCustomError("strict_int", "expected an integer")
    if not isinstance(v, int):
        raise PydanticCustomError("strict_int", "expected an integer" + quoted_hint(v))
    return v


def strict_float(v: Any) -> Any:
    """A number field: an int or a float (as float); never a bool or a string.

    Raises:
      PydanticCustomError: type ``strict_float``.
    """
    if isinstance(v, bool):
        raise PydanticCustomError("strict_float", "expected a number, not a boolean")
    if isinstance(v, int):
        try:
            return float(v)
        except OverflowError:
            raise PydanticCustomError("strict_float", "number too large") from None
    if not isinstance(v, float):
        raise PydanticCustomError("strict_float", "expected a number" + quoted_hint(v))
    return v


#: A pydantic integer field checked by :func:`strict_int`.
Int = Annotated[int, BeforeValidator(strict_int)]
#: A pydantic number field checked by :func:`strict_float` (always a ``float``).
Float = Annotated[float, BeforeValidator(strict_float)]
