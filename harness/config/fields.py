"""Strict number fields of the schema: integers are never booleans, an integral float is an integer.

:data:`Int` and :data:`Float` are the pydantic field types of every number in
:mod:`harness.config.schema` (``eval_every: true`` is an error, ``steps: 1e3`` is 1000, a quoted
``"0.1"`` is an error that says so). :func:`auto_dtype` is what ``dtype: auto`` trains in.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError

from harness.config.numbers import quoted_hint

__all__ = ["Float", "Int", "Strict", "auto_dtype", "strict_float", "strict_int"]


class Strict(BaseModel):
    """Base of every config section: unknown keys are errors (reworded by
    :func:`harness.config.errors.format_pydantic` to name the valid keys); frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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
    """A number field: an int or a float (as float); never a bool, a string or NaN.

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
    if v != v:
        raise PydanticCustomError("strict_float", "must be a finite number, not .nan (YAML's not-a-number)")
    return v


#: A pydantic integer field checked by :func:`strict_int`.
Int = Annotated[int, BeforeValidator(strict_int)]
#: A pydantic number field checked by :func:`strict_float` (always a ``float``).
Float = Annotated[float, BeforeValidator(strict_float)]


def auto_dtype(platform: str | None = None) -> str:
    """What ``dtype: auto`` (the default) trains in on ``platform`` (default: JAX's default backend):
    ``float32`` on ``cpu``; ``bfloat16`` compute with float32 parameters, optimizer state and inputs
    (mixed precision) on an accelerator (``gpu``, ``cuda``, ``rocm``, ``tpu``, ...)."""
    if platform is None:
        import jax

        platform = jax.default_backend()
    return "float32" if platform == "cpu" else "bfloat16"
