"""The schema of a sweep config: pydantic models, unknown keys forbidden, types and ranges checked.

:class:`SweepConfig` is a whole config (the YAML schema is in :mod:`harness.config.load`'s
docstring, ``experiments/quickstart.yaml`` a complete example); :class:`Component` one entry of a
component axis, :class:`SubGrid` an ``include`` entry, :class:`WorkloadEntry` a ``workloads`` entry,
:class:`~harness.config.search_schema.SearchCfg`, :class:`TargetCfg`, :class:`Budget`,
:class:`DivergenceCfg` and :class:`ParallelismCfg` its sections. Integers are never booleans and an
integral float counts as an integer (:mod:`harness.config.fields`); ranges come from
:mod:`harness.config.limits`. A validator raises ``PydanticCustomError`` whose type names the rule;
:func:`harness.config.errors.format_pydantic` rewords them. Names are checked against the registries
later (:mod:`harness.config.validate`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from harness.config import limits
from harness.config.errors import key_text
from harness.config.fields import Float, Int, Strict, auto_dtype
from harness.config.ladder_schema import LadderCfg
from harness.config.search_schema import SearchCfg
from harness.config.sections import ClaimCfg, DivergenceCfg, ParallelismCfg, ParamGroupCfg
from harness.config.values import hparam_count, hparam_values, log_grid_args
from harness.core.builders import did_you_mean
from harness.core.cadence import parse_every
from harness.core.clock import CLOCKS, DEFAULT_CLOCK
from harness.core.echo import short_repr
from harness.core.names import SCORING_RULES, canonical_metric
from harness.core.selection_rule import DEFAULT_SELECT_BY, SELECT_BY
from harness.core.source import DEFAULT_TIMEOUT_S
from harness.core.watchdog import DEFAULT_DISPATCH_TIMEOUT_S


def batching_switch(v: Any) -> Any:
    """``batching``'s value with a boolean read as YAML writes it: ``true`` is ``on``, ``false``
    ``off`` (``auto``, ``on``, ``off`` and anything else pass through to the field's check)."""
    return {True: "on", False: "off"}[v] if isinstance(v, bool) else v


#: ``batching``: ``auto`` | ``on`` | ``off``; a boolean is ``on``/``off`` (the validator travels
#: with the type, so an override checked by the field's type reads it too)
Batching = Annotated[Literal["auto", "on", "off"], BeforeValidator(batching_switch)]

#: Top-level axes that ``zip`` and ``include`` may name.
TOP_AXES = ("models", "optimizers", "schedules", "datasets", "seeds", "batch_size")
#: Flat keys (and prefixes ``model.`` ...) that ``exclude`` rules may use.
RULE_KEYS = ("model", "optimizer", "schedule", "dataset", "seed", "batch_size")


class Component(Strict):
    """One entry of a component axis: a registry name, its hyperparameters (scalars, grids,
    distributions), optional zip groups of hyperparameter names and (optimizer entries) a ``search``
    override or ``tuning: none`` (the self-tuning track: one configuration, the optimizer's
    defaults and the values the entry fixes; checked by :mod:`harness.config.validate`). A bare
    string ``"adam"`` means ``{name: adam}``."""

    name: str
    hparams: dict[str, Any] = Field(default_factory=dict)
    zip: list[list[str]] = Field(default_factory=list)
    search: SearchCfg | None = None
    #: optimizer entries: ``"none"`` = self-tuning, run once per seed with its defaults; else ``None``
    tuning: str | None = None
    #: optimizer and model entries: where the code comes from (:mod:`harness.core.source`,
    #: :mod:`harness.config.model_sources`)
    source: str | None = None
    #: optimizer entries: an AlgoPerf ``tuning_search_space.json`` (relative to the config file)
    #: whose hyperparameters :func:`harness.config.load.load_config` merged into ``hparams``
    search_space: str | None = None
    _source_ref: Any = PrivateAttr(default=None)

    @property
    def source_ref(self) -> Any:
        """The parsed ``source`` (a :class:`harness.core.source.SourceRef`), once
        :func:`harness.config.optimizer_sources.resolve_sources` has set it; else ``None``."""
        return self._source_ref

    def set_source_ref(self, ref: Any) -> None:
        self._source_ref = ref

    @model_validator(mode="before")
    @classmethod
    def _from_str(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @field_validator("name")
    @classmethod
    def _printable(cls, v: str) -> str:
        if (msg := limits.control_problem(v)) is not None:
            raise PydanticCustomError("name", "{msg}", {"msg": msg})
        return v

    @field_validator("tuning", mode="before")
    @classmethod
    def _tuning(cls, v: Any) -> Any:
        if v is not None and v != "none":
            raise PydanticCustomError("tuning", "expected none (the optimizer runs one configuration, "
                                      "its defaults) or no tuning key, got {v}", {"v": short_repr(v)})
        return v

    @field_validator("hparams")
    @classmethod
    def _grids(cls, v: dict[str, Any]) -> dict[str, Any]:
        for k, x in v.items():
            try:
                if isinstance(x, Mapping) and set(x) == {"log_grid"}:
                    log_grid_args(x["log_grid"])  # checked and counted, never built here
                    n = hparam_count(x)
                else:
                    n = len(hparam_values(x))
            except ValueError as e:
                raise PydanticCustomError("bad_grid", "{key}: {msg}", {"key": k, "msg": str(e)}) from None
            if not n:
                raise PydanticCustomError("empty_axis", "{key}: empty axis (needs at least one value)",
                                          {"key": k})
        return v


class TargetCfg(Strict):
    """A convergence target on the validation split; ``mode`` defaults to ``max`` for accuracy and
    ``min`` for loss. ``eval/accuracy``/``eval/loss`` (the names before the three-split protocol)
    are accepted and stored as ``valid/*``."""

    metric: Literal["valid/accuracy", "valid/loss", "eval/accuracy", "eval/loss"] = "valid/accuracy"
    value: Float
    mode: Literal["max", "min"] | None = None
    claim: ClaimCfg | None = None  # the claim rules the summary and report state (loss targets)

    @field_validator("metric")
    @classmethod
    def _canonical(cls, v: str) -> str:
        return canonical_metric(v)

    @model_validator(mode="after")
    def _range(self) -> TargetCfg:
        if not math.isfinite(self.value):
            raise PydanticCustomError("target", "value: must be a finite number, got {v}",
                                      {"v": short_repr(self.value)})
        if self.metric.endswith("accuracy") and not 0.0 <= self.value <= 1.0:
            raise PydanticCustomError("target", "value: an accuracy target must be within [0, 1], "
                                      "got {v}", {"v": short_repr(self.value)})
        if self.metric.endswith("loss") and self.value < 0:
            raise PydanticCustomError("target", "value: a loss target must be >= 0 (cross-entropy and "
                                      "squared error never go below 0), got {v}",
                                      {"v": short_repr(self.value)})
        if self.claim is not None and (msg := self._claim_problem()) is not None:
            raise PydanticCustomError("target", "claim: {msg}", {"msg": msg})
        natural = "max" if self.metric.endswith("accuracy") else "min"
        if self.mode is not None and self.mode != natural:  # a worse value would count as reached
            raise PydanticCustomError(
                "target", "mode: {metric} is reached going {way}: mode {natural} (or leave mode out), "
                "got {mode}", {"metric": self.metric, "way": "up" if natural == "max" else "down",
                               "natural": natural, "mode": self.mode})
        return self

    def _claim_problem(self) -> str | None:
        if not self.metric.endswith("loss"):
            return f"the claim rules test a loss target; metric is {self.metric}"
        single = self.claim.single_run if self.claim is not None else None
        if single is not None and single > self.value:
            return f"single_run {single:g} is above the target {self.value:g} (a run must beat it)"
        return None

    def resolved_mode(self) -> str:
        return self.mode or ("max" if self.metric.endswith("accuracy") else "min")


def one_of(v: Any, valid: tuple[str, ...], kind: str) -> str:
    """``v`` when it is one of ``valid``; else a one-line error (the rule type ``kind``) naming the
    valid values and the closest one: the one wording of every enumerated config value."""
    if not isinstance(v, str) or v not in valid:
        raise PydanticCustomError(
            kind, "must be one of {valid}, got {v}{hint}",
            {"valid": ", ".join(valid), "v": short_repr(v),
             "hint": did_you_mean(v[:200], valid) if isinstance(v, str) else ""})
    return v


class SelectionCfg(Strict):
    """``selection: {by: ...}``: how each optimizer's best configuration is selected on validation
    (:mod:`harness.core.selection_rule`): ``time_to_target`` (the default), ``final`` or ``best``."""

    by: str = DEFAULT_SELECT_BY

    @field_validator("by", mode="before")
    @classmethod
    def _by(cls, v: Any) -> str:
        return one_of(v, SELECT_BY, "selection")


class Budget(Strict):
    """Training budget: exactly one of ``steps`` (optimizer steps), ``epochs`` (passes over the
    training split), ``tokens`` or ``tokens_per_param`` (:mod:`harness.config.token_budget`)."""

    steps: Int | None = Field(default=None, gt=0, le=limits.MAX_STEPS)
    epochs: Float | None = Field(default=None, gt=0, le=limits.MAX_EPOCHS)
    tokens: Int | None = Field(default=None, gt=0, le=10**18)
    tokens_per_param: Float | None = Field(default=None, gt=0, le=1e9)

    @model_validator(mode="after")
    def _one(self) -> Budget:
        given = [k for k in ("steps", "epochs", "tokens", "tokens_per_param") if getattr(self, k) is not None]
        if len(given) != 1:
            raise PydanticCustomError("budget", "give exactly one of 'steps', 'epochs', 'tokens' or "
                                      "'tokens_per_param'")
        return self


def _nonempty(v: list, what: str = "axis") -> list:
    if not v:
        raise PydanticCustomError("empty_axis", "empty axis (needs at least one value)")
    return v


def _distinct_seeds(v: list | None) -> list | None:
    """``seeds`` with no seed twice: a (configuration, seed) pair is one trial, trained once, so
    ``[0, 0]`` would silently run one trial where two are asked for."""
    seen: set[int] = set()
    for s in v or ():
        if s in seen:
            raise PydanticCustomError("seeds", "seed {s} is listed twice; a configuration trains once "
                                      "per seed: list each seed once", {"s": s})
        seen.add(s)
    return v


class SubGrid(Strict):
    """An ``include`` entry: extra trials; axes it does not set are taken from the top level."""

    models: list[Component] | None = None
    optimizers: list[Component] | None = None
    schedules: list[Component] | None = None
    datasets: list[Component] | None = None
    seeds: list[Annotated[Int, Field(ge=0, lt=limits.SEED_LIMIT)]] | None = None
    batch_size: list[Annotated[Int, Field(gt=0, le=limits.MAX_BATCH_SIZE)]] | None = None

    @field_validator("seeds", "batch_size", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("models", "optimizers", "schedules", "datasets", "seeds", "batch_size")
    @classmethod
    def _ne(cls, v: list | None) -> list | None:
        return v if v is None else _nonempty(v)

    @field_validator("seeds")
    @classmethod
    def _seeds_once(cls, v: list | None) -> list | None:
        return _distinct_seeds(v)


class WorkloadEntry(Strict):
    """One entry of ``workloads``: a :data:`harness.config.workloads.WORKLOADS` name, with optional
    overrides of its model's and dataset's hyperparameters (scalars or grids, as in ``models``).
    A bare string ``"mnist1d_cnn"`` means ``{name: mnist1d_cnn}``."""

    name: str
    model_hparams: dict[str, Any] = Field(default_factory=dict)
    dataset_hparams: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_str(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data


class WorkloadDef(Strict):
    """A ``define_workloads`` entry: a workload written in the config, every part given
    (:func:`harness.config.workloads.workload_registry`). ``loss``: the model's training loss,
    ``cross_entropy`` (classification, sequence) or ``mse`` (reconstruction), checked against it."""

    description: str = Field(default="", max_length=500)
    dataset: Component
    model: Component
    loss: Literal["cross_entropy", "mse"]
    batch_size: Int = Field(gt=0, le=limits.MAX_BATCH_SIZE)
    budget: Budget
    eval_every: Int = Field(gt=0, le=limits.MAX_STEPS)
    target: TargetCfg
    augment: dict[str, Any] = Field(default_factory=dict)


class SweepConfig(Strict):
    """A whole sweep config (see the module docstring for the YAML schema)."""

    name: str = Field(min_length=1)
    description: str = ""
    models: list[Component] | None = None
    optimizers: list[Component]
    schedules: list[Component] = Field(default_factory=lambda: [Component(name="constant")])
    datasets: list[Component] | None = None
    workloads: list[WorkloadEntry] | None = None
    #: workloads written here (or in the YAML file named), usable as built-in ones: WorkloadDef
    define_workloads: dict[str, WorkloadDef] | None = None
    #: a model-size ladder on one workload: harness.config.ladder_schema
    ladder: LadderCfg | None = None
    seeds: list[Annotated[Int, Field(ge=0, lt=limits.SEED_LIMIT)]] = Field(default_factory=lambda: [0])
    batch_size: list[Annotated[Int, Field(gt=0, le=limits.MAX_BATCH_SIZE)]] = \
        Field(default_factory=lambda: [128])
    budget: Budget | None = None
    search: SearchCfg | None = None
    eval_every: Int | None = Field(default=None, gt=0, le=limits.MAX_STEPS)
    steps_per_dispatch: Int = Field(default=50, gt=0, le=limits.MAX_STEPS_PER_DISPATCH)
    target: TargetCfg | None = None
    targets: dict[str, TargetCfg] = Field(default_factory=dict)
    zip: list[list[str]] = Field(default_factory=list)
    include: list[SubGrid] = Field(default_factory=list)
    exclude: list[dict[str, Any]] = Field(default_factory=list)
    batching: Batching = "auto"
    measure_perf: StrictBool = True
    scoring: str = SCORING_RULES[0]  # tuned time-to-result rule: reports.protocol
    time: str = DEFAULT_CLOCK  # the clock time to target is ranked on: harness.core.clock
    dtype: Literal["auto", "float32", "bfloat16", "float16", "float64"] | list[
        Literal["auto", "float32", "bfloat16", "float16", "float64"]] = "auto"
    augment: dict[str, Any] | None = None
    #: clip gradients to this global norm before every update (harness.train.recipe)
    grad_clip: Float | None = Field(default=None, gt=0, le=1e30)
    #: micro-batches per update; must divide every batch size (harness.train.recipe)
    grad_accum: Int = Field(default=1, gt=0, le=limits.MAX_BATCH_SIZE)
    #: one optimizer per parameter group (harness.train.recipe.group_optimizer)
    param_groups: list[ParamGroupCfg] = Field(default_factory=list, max_length=64)
    #: the token loss's gradient: of its mean, or of its sum over tokens and micro-batches
    #: (harness.train.recipe.token_sum)
    loss_reduction: Literal["mean", "sum"] = "mean"
    divergence: DivergenceCfg = Field(default_factory=DivergenceCfg)
    selection: SelectionCfg = Field(default_factory=SelectionCfg)
    parallelism: ParallelismCfg = Field(default_factory=ParallelismCfg)
    tracking_uri: str | None = Field(default=None, max_length=limits.MAX_TEXT_CHARS)
    executor: str = Field(default="inprocess", max_length=100)
    jobs: Int = Field(default=1, gt=0, le=limits.MAX_JOBS)
    address: str | None = Field(default=None, max_length=limits.MAX_TEXT_CHARS)
    checkpoint_every: int | str | None = None
    checkpoint_dir: str | None = Field(default=None, max_length=limits.MAX_TEXT_CHARS)
    keep_final_checkpoint: StrictBool = False
    #: Seconds each check that runs a user's code before any write may take (importing an optimizer
    #: ``source`` file, calling its factory, tracing one update): harness.core.source.bounded.
    source_timeout_s: Float = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=86_400)  # a day
    #: Seconds one dispatch (a chunk of steps, an evaluation) of a trial with a ``source:`` entry may
    #: take while it trains, a compile not counted: harness.core.watchdog (null: no limit, such trials
    #: train in the sweep's own process, unguarded).
    dispatch_timeout_s: Float | None = Field(default=DEFAULT_DISPATCH_TIMEOUT_S, gt=0, le=86_400)

    @field_validator("checkpoint_every", mode="before")
    @classmethod
    def _ckpt_every(cls, v: Any) -> Any:
        try:
            return str(parse_every(v))  # canonical: "N steps", "Xs" or "off"
        except ValueError as e:
            msg = str(e).split(": ", 1)[-1]
            raise PydanticCustomError("checkpoint_every", "{msg}", {"msg": msg}) from None

    @field_validator("scoring", mode="before")
    @classmethod
    def _scoring(cls, v: Any) -> str:
        return one_of(v, SCORING_RULES, "scoring")

    @field_validator("time", mode="before")
    @classmethod
    def _time(cls, v: Any) -> str:
        return one_of(v, CLOCKS, "time")

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            if v <= 0:
                raise PydanticCustomError("seeds", "an int seed count must be > 0, got {v}",
                                          {"v": short_repr(v)})
            cap = (info.context or {}).get("max_trials", limits.DEFAULT_MAX_TRIALS)
            if v > cap:  # checked before the list is built: seeds: 10**12 must not hang
                raise PydanticCustomError(
                    "seeds", "{v} seeds alone exceed the limit of {cap} trials; use fewer, or "
                    "raise the limit with `python -m harness sweep --max-trials N`",
                    {"v": f"{v:,}", "cap": f"{cap:,}"})
            return list(range(v))
        return v

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if (msg := limits.name_problem(v)) is not None:
            raise PydanticCustomError("name", "{msg}", {"msg": msg})
        return v

    @field_validator("description")
    @classmethod
    def _description_ok(cls, v: str) -> str:
        if (msg := limits.text_problem(v)) is not None:
            raise PydanticCustomError("description", "{msg}", {"msg": msg})
        return v

    @field_validator("tracking_uri")
    @classmethod
    def _uri_ok(cls, v: str | None) -> str | None:
        if v is not None and (msg := limits.tracking_uri_problem(v)) is not None:
            raise PydanticCustomError("tracking_uri", "{msg}", {"msg": msg})
        return v

    @field_validator("batch_size", mode="before")
    @classmethod
    def _bs(cls, v: Any) -> Any:
        return [v] if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("models", "optimizers", "schedules", "datasets", "seeds", "batch_size",
                     "workloads", "dtype")
    @classmethod
    def _ne(cls, v: list | None) -> list | None:
        return v if v is None or isinstance(v, str) else _nonempty(v)

    @field_validator("seeds")
    @classmethod
    def _seeds_once(cls, v: list | None) -> list | None:
        return _distinct_seeds(v)

    @model_validator(mode="after")
    def _grid_or_workloads(self) -> SweepConfig:
        if self.ladder is not None:
            return self._ladder_alone()
        if self.workloads is None:
            missing = [k for k in ("models", "datasets", "budget") if getattr(self, k) is None]
            if missing:
                raise PydanticCustomError(
                    "workloads", "give {missing} (or 'workloads', which name each model, dataset "
                    "and budget)", {"missing": " and ".join(repr(m) for m in missing)})
        elif (self.models is None) != (self.datasets is None):
            raise PydanticCustomError("workloads", "with 'workloads', give both 'models' and "
                                      "'datasets' (an extra grid) or neither")
        elif self.models is not None and self.budget is None:
            raise PydanticCustomError("workloads", "the 'models' x 'datasets' grid needs a 'budget'")
        return self

    def _ladder_alone(self) -> SweepConfig:
        """A ladder names its workload, models and budgets; its baseline and ``transfer`` keys name
        optimizers of the config."""
        clash = [k for k in ("workloads", "models", "datasets", "budget") if getattr(self, k) is not None]
        if clash:
            raise PydanticCustomError("ladder", "a ladder gives the models, dataset and budget of "
                                      "each rung; remove {keys}", {"keys": ", ".join(clash)})
        names = [c.name for c in self.optimizers]
        named = [("baseline", self.ladder.baseline)] + [("transfer", k) for k in self.ladder.transfer]
        for what, name in named:
            if name not in names:
                raise PydanticCustomError(
                    "ladder", "{what}: {name} is not an optimizer of this config ({valid}){hint}",
                    {"what": what, "name": short_repr(name), "valid": ", ".join(names),
                     "hint": did_you_mean(name, names)})
        return self

    def dtypes(self, platform: str | None = None) -> list[str]:
        """The ``dtype`` axis as a list, ``auto`` resolved for ``platform`` (:func:`auto_dtype`)."""
        given = [self.dtype] if isinstance(self.dtype, str) else list(self.dtype)
        return list(dict.fromkeys(auto_dtype(platform) if d == "auto" else d for d in given))

    @field_validator("zip")
    @classmethod
    def _zip_axes(cls, v: list[list[str]]) -> list[list[str]]:
        for group in v:
            for a in group:
                if a not in TOP_AXES:
                    raise PydanticCustomError(
                        "zip", "unknown axis '{a}'; valid axes: {valid}{hint}",
                        {"a": key_text(a), "valid": ", ".join(TOP_AXES), "hint": did_you_mean(a, TOP_AXES)})
        return v

    @field_validator("exclude")
    @classmethod
    def _rule_keys(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for rule in v:
            for k in rule:
                head = k.split(".", 1)[0]
                if k not in RULE_KEYS and not (head in RULE_KEYS[:4] and "." in k):
                    raise PydanticCustomError(
                        "rule", "unknown rule key '{k}'; valid: {valid}, or model.HPARAM, "
                        "optimizer.HPARAM, schedule.HPARAM, dataset.HPARAM{hint}",
                        {"k": key_text(k), "valid": ", ".join(RULE_KEYS), "hint": did_you_mean(k, RULE_KEYS)})
        return v

    def target_for(self, dataset: str) -> TargetCfg | None:
        """The target of ``dataset``: its ``targets`` entry, else the sweep's ``target`` (or None)."""
        return self.targets.get(dataset, self.target)


