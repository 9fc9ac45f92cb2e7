"""The ``search`` section of a config (top level, or an optimizer entry's override): methods, trials,
seed and the adaptive methods' options, each checked against the methods it applies to
(:data:`harness.config.search.OPTION_METHODS`); resolved per cell by
:func:`harness.config.search.resolve_search`.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator
from pydantic_core import PydanticCustomError

from harness.config import search
from harness.config.fields import Int
from harness.core.builders import did_you_mean

__all__ = ["SearchCfg"]


class SearchCfg(BaseModel):
    """``search: {method, trials, seed}`` (top level, or an optimizer entry's override of some of its
    fields); see :mod:`harness.config.search`. Unset fields inherit (top level: ``quasirandom``, seed 0)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: str | None = None
    trials: Int | None = None
    seed: Int | None = None
    #: the adaptive methods' options (harness.config.search.Search; OPTION_METHODS says whose)
    min_steps: Int | None = None
    eta: Int | None = None
    brackets: Int | None = None
    audit: Int | None = None
    passes: Int | None = None
    start: dict[str, Any] | None = None
    sampler: str | None = None
    batch: Int | None = None

    @field_validator("min_steps", "brackets", "passes", "batch")
    @classmethod
    def _positive(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise PydanticCustomError("search", "must be >= 1, got {v}", {"v": v})
        return v

    @field_validator("eta")
    @classmethod
    def _eta(cls, v: int | None) -> int | None:
        if v is not None and v < 2:
            raise PydanticCustomError("search", "must be an integer >= 2 (the reduction factor: 1 in "
                                      "eta trials goes on at each rung), got {v}", {"v": v})
        return v

    @field_validator("audit")
    @classmethod
    def _audit(cls, v: int | None) -> int | None:
        if v is not None and v < 0:
            raise PydanticCustomError("search", "must be >= 0, got {v}", {"v": v})
        return v

    @field_validator("sampler")
    @classmethod
    def _sampler(cls, v: str | None) -> str | None:
        valid = (*search.OPTUNA_SAMPLERS, *search.SEQUENCE_SAMPLERS)
        if v is not None and v not in valid:
            raise PydanticCustomError(
                "search", "unknown sampler '{v}'; valid: {valid}{hint}",
                {"v": v, "valid": ", ".join(dict.fromkeys(valid)), "hint": did_you_mean(v, valid)})
        if v == "gp" and importlib.util.find_spec("torch") is None:  # at load, with its key path
            raise PydanticCustomError("search", search.GP_NEEDS_TORCH_REASON)
        return v

    @model_validator(mode="after")
    def _options_fit_method(self) -> SearchCfg:
        """An option given beside a ``method`` it does not apply to is an error (``eta`` with
        ``coordinate_descent``); so is a sampler its method does not take."""
        if self.method is None:
            return self
        errors = search.option_errors(self, self.method)
        if errors:
            raise PydanticCustomError("search", "{msg}", {"msg": errors[0]})
        return self
        for k, methods in search.OPTION_METHODS.items():
            if getattr(self, k) is not None and self.method not in methods:
                raise PydanticCustomError(
                    "search", "{k} applies to method {methods}, not {m}",
                    {"k": k, "methods": " or ".join(methods), "m": self.method})
        if self.sampler is not None:
            valid = search.OPTUNA_SAMPLERS if self.method == "optuna" else search.SEQUENCE_SAMPLERS
            if self.sampler not in valid:
                raise PydanticCustomError(
                    "search", "sampler {s} does not apply to method {m}; valid: {valid}",
                    {"s": self.sampler, "m": self.method, "valid": ", ".join(valid)})
        return self

    @field_validator("method")
    @classmethod
    def _method(cls, v: str | None) -> str | None:
        if v is not None and v not in search.METHODS:
            raise PydanticCustomError(
                "search", "unknown method '{v}'; valid: {valid}{hint}",
                {"v": v, "valid": ", ".join(search.METHODS), "hint": did_you_mean(v, search.METHODS)})
        return v

    @field_validator("trials")
    @classmethod
    def _trials(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise PydanticCustomError("search", "must be >= 1, got {v}", {"v": v})
        return v

    @field_validator("seed")
    @classmethod
    def _seed(cls, v: int | None) -> int | None:
        if v is not None and v < 0:
            raise PydanticCustomError("search", "must be >= 0, got {v}", {"v": v})
        return v
