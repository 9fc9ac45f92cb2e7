"""The ``ladder:`` section of a sweep config: one workload's model family at several sizes, each
trained on a data budget given in tokens per parameter (the expansion is
:mod:`harness.config.ladder_parts`)::

    ladder:
      workload: markov_lm_transformer      # its dataset, model family, batch size and target
      dataset_hparams: {num_train: 65536}  # optional overrides of the workload's dataset
      sizes:                               # the family's hyperparameters per rung
        - {width: 16, depth: 2, num_heads: 2}
        - {width: 64, depth: 2, num_heads: 4}
      tokens_per_param: [5, 20]            # data budget(s) per rung: steps = round(r·N / (batch·T))
      baseline_tokens_per_param: [40]      # more budgets for the baseline alone: its loss-vs-tokens
                                           # curve then reaches past the others' budgets, so a
                                           # speed-up up to 40/20 = 2x is measured, not bounded
      baseline: adamw                      # the optimizer speed-ups are measured against
      evals: 10                            # evaluations per trial (eval_every = steps // evals)
      transfer:                            # optimizer name -> how its hyperparameters cross rungs
        lion: {rule: mup, base_width: 16}  #   step_size × (base_width / width)^exponent
        muon: fixed                        #   the entry's values at every rung
                                           # absent (or per_rung): the entry as written at every
                                           # rung: its grid or search tunes it there

:class:`LadderCfg` is checked here for structure only; :class:`harness.config.schema.SweepConfig`
checks it against the rest of the config (``baseline`` and ``transfer`` name optimizers of the
config; no ``workloads``, ``models``, ``datasets`` or ``budget`` beside it), and
:mod:`harness.config.validate` checks the workload and each size against the model's builder.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from harness.config.fields import Float, Int

__all__ = ["TRANSFER_MODES", "LadderCfg", "TransferRule"]

#: The string forms of a ``transfer`` value (a mapping is a :class:`TransferRule`).
TRANSFER_MODES = ("per_rung", "fixed")
MAX_RUNGS = 64


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TransferRule(_Strict):
    """``{rule: mup, base_width: W, exponent: p}``: the entry's ``step_size`` (one number, the value
    tuned at width ``W``) becomes ``step_size · (W / width)^p`` at a rung of width ``width``
    (μP's rule for Adam-type hidden-layer step sizes, Yang et al. 2022, "Tensor Programs V",
    applied to the one global step size the harness's optimizers take; depth does not enter)."""

    rule: Literal["mup"]
    base_width: Int = Field(gt=0)
    exponent: Float = Field(default=1.0, gt=0, le=4)


class LadderCfg(_Strict):
    """The ``ladder`` section (module docstring)."""

    workload: str = Field(min_length=1, max_length=200)
    dataset_hparams: dict[str, Any] = Field(default_factory=dict)
    sizes: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_RUNGS)
    tokens_per_param: list[Float] = Field(min_length=1, max_length=16)
    baseline_tokens_per_param: list[Float] = Field(default_factory=list, max_length=16)
    baseline: str = Field(min_length=1, max_length=200)
    evals: Int = Field(default=10, ge=1, le=1000)
    transfer: dict[str, TransferRule | str] = Field(default_factory=dict)

    @field_validator("tokens_per_param", "baseline_tokens_per_param", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, int | float) and not isinstance(v, bool) else v

    @field_validator("tokens_per_param", "baseline_tokens_per_param")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        for r in v:
            if not 0 < r <= 1e9:
                raise PydanticCustomError("ladder", "a tokens-per-parameter ratio must be > 0 and "
                                          "<= 1e9, got {v}", {"v": r})
        if len(set(v)) != len(v):
            raise PydanticCustomError("ladder", "ratios repeat: {v}", {"v": v})
        return v

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen = []
        for i, s in enumerate(v):
            if not s:
                raise PydanticCustomError("ladder", "sizes[{i}] is empty: give the model "
                                          "hyperparameters of the rung (e.g. width, depth)", {"i": i})
            if s in seen:
                raise PydanticCustomError("ladder", "sizes[{i}] repeats sizes[{j}]",
                                          {"i": i, "j": seen.index(s)})
            seen.append(s)
        return v

    @field_validator("transfer", mode="before")
    @classmethod
    def _modes(cls, v: Any) -> Any:
        if isinstance(v, dict):
            for k, x in v.items():
                if isinstance(x, str) and x not in TRANSFER_MODES:
                    raise PydanticCustomError(
                        "ladder", "transfer.{k}: must be one of {valid} or {{rule: mup, base_width: "
                        "W}}, got {x}", {"k": k, "valid": ", ".join(TRANSFER_MODES), "x": x[:100]})
        return v

    def ratios(self) -> list[tuple[float, bool]]:
        """Every budget, ``(ratio, baseline_only)``: ``tokens_per_param``, then the baseline's own
        ``baseline_tokens_per_param`` that are not among them."""
        extra = [r for r in self.baseline_tokens_per_param if r not in self.tokens_per_param]
        return [(r, False) for r in self.tokens_per_param] + [(r, True) for r in extra]

    def transfer_of(self, optimizer: str) -> TransferRule | str:
        """How ``optimizer``'s hyperparameters cross rungs: ``"per_rung"`` (absent), ``"fixed"``
        or a :class:`TransferRule`."""
        return self.transfer.get(optimizer, "per_rung")
