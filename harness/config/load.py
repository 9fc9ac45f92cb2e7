"""Sweep configs: the YAML schema (pydantic models) and its validation against the registries.

A config is loaded in four steps, all before any trial runs and before anything is written to MLflow:

0. **Reading** (:mod:`harness.yamlsafe`): at most 1 MiB of UTF-8; duplicate keys rejected (both line
   numbers); aliases bounded (1,000 uses, 100,000 values expanded: no "billion laughs"); at most 50
   levels of nesting; YAML 1.2 floats (``3e-3`` is a float, not the string PyYAML makes of it).
1. **Structure** (:func:`parse_config`): pydantic models with unknown keys forbidden, types and ranges
   checked (non-empty axes; integers are never booleans — ``eval_every: true`` is an error — and an
   integral float such as ``1e3`` counts as an integer; ranges from :mod:`harness.limits`: steps and
   ``eval_every`` <= 10^9, epochs finite and <= 10^6, ``steps_per_dispatch`` <= 10,000, seeds in
   [0, 2^32), batch sizes <= 10^7, ``jobs`` <= 1024; targets finite, accuracies within [0, 1]; the
   ``name`` <= 200 characters and 255 UTF-8 bytes without control characters, as MLflow and the
   artifact directory need; ``tracking_uri`` a scheme the harness can use). Then the **plan-size
   limit** (:func:`check_plan_size`): the number of trials computed from the axis sizes, without
   expanding anything, may not exceed ``max_trials`` (10,000; ``sweep --max-trials N``).
2. **Names** (:func:`validate_names`): every model, optimizer, schedule and dataset name is looked up in
   its registry, and every hyperparameter is checked against the builder's signature (unknown names,
   missing required ones, values of the wrong type, non-positive ``step_size``, non-finite numbers,
   values longer than MLflow's 6,000-character param limit); ``exclude`` keys ``KIND.HPARAM`` must
   name a hyperparameter that some entry sets (did-you-mean against the builders' hyperparameters).
3. **Canonical numbers** (:func:`canonicalize_numbers`): an int given where the builder takes a float
   becomes a float, so ``step_size: 1000`` and ``1000.0`` are one trial.

Every problem becomes one line ``FILE: KEY.PATH: message`` (with the valid choices and a
"did you mean" where one is close), and all lines are raised together as one :class:`ConfigError`
(at most 50 lines of at most 1,000 characters; a user's value is echoed in at most 200 characters,
:func:`harness.config.yamlsafe.short_repr`).

Schema (``experiments/quickstart.yaml`` is a complete example)::

    name: quickstart              # the sweep's name = the MLflow experiment
    description: "..."            # optional free text
    models:                       # axis; each entry a name or {name, hparams, zip}
      - mlp
      - {name: cnn, hparams: {width: [16, 32]}}     # a list is a grid axis
    optimizers:
      - {name: adam, hparams: {step_size: {log_grid: [1.0e-4, 1.0e-1, 4]}}}   # 4 log-spaced values
      - {name: sgd, hparams: {step_size: [0.1, 0.3], }, zip: [[...]]}
    schedules: [constant, cosine_decay]  # default [constant]; factories get the optimizer's step_size
    datasets: [digits]             # registry names or "tfds:NAME"
    seeds: [0, 1]                  # a list, or an int n meaning 0..n-1
    batch_size: 64                 # an int or a list (an axis)
    budget: {steps: 500}           # or {epochs: 3} (steps = ceil(epochs * n_train / batch_size))
    eval_every: 100                # steps between evaluations (default: budget / 10)
    steps_per_dispatch: 50         # K steps fused in one lax.scan dispatch
    target: {metric: valid/accuracy, value: 0.9}  # on validation; mode inferred: accuracy→max, loss→min
    targets: {mnist1d: {metric: valid/accuracy, value: 0.6}}  # per-dataset override (eval/* = valid/*)
    search: {method: quasirandom, trials: 16, seed: 0}   # samples the distributions (harness.search)
    zip: [[models, batch_size]]    # top-level axes that vary together instead of as a product
    include: [{models: [cnn], optimizers: [sgd]}]   # extra sub-grids (other axes as above)
    exclude: [{model: cnn, optimizer.step_size: [1.0]}]   # drop trials matching every key
    batching: auto                 # auto | true | false: train seed/step-size siblings under vmap
    measure_perf: true             # throughput measurement (once per perf key)
    dtype: float32
    divergence: {loss_factor: 100}  # diverged: train loss > 100 x the initial one (null: off)
    parallelism: {devices: 1, shard: batch}  # devices: N | all; shard: batch (data-parallel) | trials
    tracking_uri: null             # overridden by --tracking-uri / MLFLOW_TRACKING_URI
    executor: inprocess            # inprocess | process | (ray, once registered)
    jobs: 1
    address: null                  # for executors that connect somewhere (ray)
    checkpoint_every: 1min         # mid-trial checkpoints: N steps, "90s"/"10min"/"1h", or off
    checkpoint_dir: null           # default: beside a SQLite store (./checkpoints for a server)
    keep_final_checkpoint: false   # log each trial's final state as its checkpoint/ artifact

Hyperparameter values: a scalar is fixed; a list is a grid axis; ``{log_grid: [low, high, num]}`` is
``num`` log-spaced values (6 significant digits); ``{value: X}`` is the literal X (use it for
list-valued hyperparameters). An entry's ``zip: [[a, b]]`` makes its hyperparameter axes ``a`` and
``b`` vary together (equal lengths required).

A model, optimizer or schedule hyperparameter may also be a distribution, sampled by the sweep's
``search`` (``trials`` configurations per (model, dataset, optimizer, schedule) cell; an optimizer
entry may override ``search`` field by field)::

    search: {method: quasirandom, trials: 16, seed: 0}    # quasirandom (default) | random | grid
    optimizers:
      - {name: adam, hparams: {step_size: {log_uniform: [1.0e-4, 1.0e-1]}, b1: {uniform: [0.8, 0.99]}}}
      - {name: sgd, hparams: {step_size: {log_uniform: [1.0e-3, 1.0]}}, search: {trials: 32}}
    models: [{name: mlp, hparams: {depth: {int_uniform: [1, 3]}, activation: {choice: [relu, tanh]}}}]

Grid axes stay crossed with the sampled points; see :mod:`harness.search` for the sampling, the
value mappings and why raising ``trials`` keeps the earlier trials.
"""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from harness.config import limits
from harness.config import search as _search
from harness.core.registry import (
    INJECTED,
    REQUIRED,
    HParam,
    did_you_mean,
    hyperparameters,
    known_executors,
    lookup,
)
from harness.config.yamlsafe import YamlConfigError, load_yaml_file, short_repr

#: Top-level axes that ``zip`` and ``include`` may name.
TOP_AXES = ("models", "optimizers", "schedules", "datasets", "seeds", "batch_size")
#: Flat keys (and prefixes ``model.`` ...) that ``exclude`` rules may use.
RULE_KEYS = ("model", "optimizer", "schedule", "dataset", "seed", "batch_size")
_TFDS_RE = re.compile(r"^tfds:[a-z][a-z0-9_]*(/[A-Za-z0-9_.\-]+)?(:\d+\.\d+\.\d+)?$")
_POSITIVE_HPARAMS = ("step_size", "learning_rate")  # must be numbers > 0


class ConfigError(ValueError):
    """An invalid sweep config. ``errors`` holds one ``FILE: KEY.PATH: message`` line per problem;
    ``str(err)`` is those lines joined with newlines."""

    #: At most this many lines are kept (a last line says how many more there were) ...
    MAX_LINES = 50
    #: ... each cut to this many characters.
    MAX_LINE_CHARS = 1000

    def __init__(self, errors: list[str]):
        lines = [e if len(e) <= self.MAX_LINE_CHARS else e[: self.MAX_LINE_CHARS - 3] + "..."
                 for e in errors[: self.MAX_LINES]]
        if len(errors) > self.MAX_LINES:
            head = errors[0].split(": ", 1)[0] + ": " if ": " in errors[0] else ""
            lines.append(f"{head}... and {len(errors) - self.MAX_LINES:,} more problems")
        self.errors = lines
        super().__init__("\n".join(self.errors))


# --------------------------------------------------------------------------- strict numbers


def _strict_int(v: Any) -> Any:
    """An integer field: an int, or a float with an integral value (``1e3`` → 1000); never a bool
    (``true`` is not 1) or a string."""
    if isinstance(v, bool):
        raise PydanticCustomError("strict_int", "expected an integer, not a boolean")
    if isinstance(v, float):
        if math.isfinite(v) and v.is_integer():
            return int(v)
        raise PydanticCustomError("strict_int", "expected an integer")
    if not isinstance(v, int):
        raise PydanticCustomError("strict_int", "expected an integer" + _quoted_hint(v))
    return v


def _strict_float(v: Any) -> Any:
    """A number field: an int or a float (as float); never a bool or a string."""
    if isinstance(v, bool):
        raise PydanticCustomError("strict_float", "expected a number, not a boolean")
    if isinstance(v, int):
        try:
            return float(v)
        except OverflowError:
            raise PydanticCustomError("strict_float", "number too large") from None
    if not isinstance(v, float):
        raise PydanticCustomError("strict_float", "expected a number" + _quoted_hint(v))
    return v


def _quoted_hint(v: Any) -> str:
    if isinstance(v, str):
        try:
            float(v)
        except ValueError:
            return ""
        return " (a quoted string; write the number without quotes)"
    return ""


Int = Annotated[int, BeforeValidator(_strict_int)]
Float = Annotated[float, BeforeValidator(_strict_float)]


class _Strict(BaseModel):
    """Base: unknown keys are errors (reworded by :func:`_format_pydantic` to name the valid keys)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SearchCfg(_Strict):
    """``search: {method, trials, seed}`` (top level, or an optimizer entry's override of some of its
    fields); see :mod:`harness.search`. Unset fields inherit (top level: ``quasirandom``, seed 0)."""

    method: str | None = None
    trials: int | None = None
    seed: int | None = None

    @field_validator("method")
    @classmethod
    def _method(cls, v: str | None) -> str | None:
        if v is not None and v not in _search.METHODS:
            raise PydanticCustomError(
                "search", "unknown method '{v}'; valid: {valid}{hint}",
                {"v": v, "valid": ", ".join(_search.METHODS), "hint": did_you_mean(v, _search.METHODS)})
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


class Component(_Strict):
    """One entry of a component axis: a registry name, its hyperparameters (scalars, grids,
    distributions), optional zip groups of hyperparameter names and (optimizer entries) a ``search``
    override. A bare string ``"adam"`` means ``{name: adam}``."""

    name: str
    hparams: dict[str, Any] = Field(default_factory=dict)
    zip: list[list[str]] = Field(default_factory=list)
    search: SearchCfg | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_str(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @field_validator("hparams")
    @classmethod
    def _grids(cls, v: dict[str, Any]) -> dict[str, Any]:
        for k, x in v.items():
            try:
                if isinstance(x, Mapping) and set(x) == {"log_grid"}:
                    _log_grid_args(x["log_grid"])  # checked and counted, never built here
                    n = limits.hparam_count(x)
                else:
                    n = len(hparam_values(x))
            except ValueError as e:
                raise PydanticCustomError("bad_grid", "{key}: {msg}", {"key": k, "msg": str(e)}) from None
            if not n:
                raise PydanticCustomError("empty_axis", "{key}: empty axis (needs at least one value)",
                                          {"key": k})
        return v


class TargetCfg(_Strict):
    """A convergence target on the validation split; ``mode`` defaults to ``max`` for accuracy and
    ``min`` for loss. ``eval/accuracy``/``eval/loss`` (the names before the three-split protocol)
    are accepted and stored as ``valid/*``."""

    metric: Literal["valid/accuracy", "valid/loss", "eval/accuracy", "eval/loss"] = "valid/accuracy"
    value: Float
    mode: Literal["max", "min"] | None = None

    @field_validator("metric")
    @classmethod
    def _canonical(cls, v: str) -> str:
        return "valid/" + v[len("eval/"):] if v.startswith("eval/") else v

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
                                      "squared error never go below 0), got {v}", {"v": short_repr(self.value)})
        natural = "max" if self.metric.endswith("accuracy") else "min"
        if self.mode is not None and self.mode != natural:  # a worse value would count as reached
            raise PydanticCustomError(
                "target", "mode: {metric} is reached going {way}: mode {natural} (or leave mode out), "
                "got {mode}", {"metric": self.metric, "way": "up" if natural == "max" else "down",
                               "natural": natural, "mode": self.mode})
        return self

    def resolved_mode(self) -> str:
        return self.mode or ("max" if self.metric.endswith("accuracy") else "min")


class Budget(_Strict):
    """Training budget: exactly one of ``steps`` (optimizer steps) or ``epochs`` (passes over the
    training split)."""

    steps: Int | None = Field(default=None, gt=0, le=limits.MAX_STEPS)
    epochs: Float | None = Field(default=None, gt=0, le=limits.MAX_EPOCHS)

    @model_validator(mode="after")
    def _one(self) -> Budget:
        if (self.steps is None) == (self.epochs is None):
            raise PydanticCustomError("budget", "give exactly one of 'steps' or 'epochs'")
        return self


class DivergenceCfg(_Strict):
    """When a trial counts as diverged (besides a non-finite train loss, always): a train loss
    above ``loss_factor`` × the trial's initial train loss (the first step's). ``null`` turns the
    factor rule off."""

    loss_factor: Float | None = Field(default=100.0, gt=1, le=1e30)


def _devices(v: Any) -> Any:
    """``devices``: a positive integer or the string ``"all"``."""
    if isinstance(v, str):
        if v.strip().lower() == "all":
            return "all"
        raise PydanticCustomError("devices", "expected a positive integer or 'all', got {v}",
                                  {"v": short_repr(v)})
    v = _strict_int(v)
    if v < 1:
        raise PydanticCustomError("devices", "must be >= 1 (or 'all'), got {v}", {"v": v})
    return v


class ParallelismCfg(_Strict):
    """``parallelism: {devices, shard}``: how many of the process's visible devices
    (:func:`harness.execute.devices.visible_devices`) each trial uses (an int >= 1 or ``all``; default 1 =
    one device, unchanged behaviour) and what is sharded over them: ``batch`` (data-parallel, each
    step's batch split over a 1-D mesh, state replicated) or ``trials`` (the vmapped batch of
    seed/step-size siblings split along its trial axis). Checked against the visible devices and
    the batch sizes by the pre-flight (:mod:`harness.preflight`), before any MLflow write."""

    devices: Annotated[int | str, BeforeValidator(_devices)] = 1
    shard: Literal["batch", "trials"] = "batch"


def _nonempty(v: list, what: str = "axis") -> list:
    if not v:
        raise PydanticCustomError("empty_axis", "empty axis (needs at least one value)")
    return v


class SubGrid(_Strict):
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


class WorkloadEntry(_Strict):
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


_DTYPES = ("float32", "bfloat16", "float16", "float64")


class SweepConfig(_Strict):
    """A whole sweep config (see the module docstring for the YAML schema)."""

    name: str = Field(min_length=1)
    description: str = ""
    models: list[Component] | None = None
    optimizers: list[Component]
    schedules: list[Component] = Field(default_factory=lambda: [Component(name="constant")])
    datasets: list[Component] | None = None
    workloads: list[WorkloadEntry] | None = None
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
    batching: Literal["auto", "on", "off"] = "auto"
    measure_perf: StrictBool = True
    dtype: Literal["float32", "bfloat16", "float16", "float64"] | list[
        Literal["float32", "bfloat16", "float16", "float64"]] = "float32"
    augment: dict[str, Any] | None = None
    divergence: DivergenceCfg = Field(default_factory=DivergenceCfg)
    parallelism: ParallelismCfg = Field(default_factory=ParallelismCfg)
    tracking_uri: str | None = Field(default=None, max_length=limits.MAX_TEXT_CHARS)
    executor: str = Field(default="inprocess", max_length=100)
    jobs: Int = Field(default=1, gt=0, le=limits.MAX_JOBS)
    address: str | None = Field(default=None, max_length=limits.MAX_TEXT_CHARS)
    checkpoint_every: int | str | None = None
    checkpoint_dir: str | None = Field(default=None, max_length=limits.MAX_TEXT_CHARS)
    keep_final_checkpoint: StrictBool = False

    @field_validator("checkpoint_every", mode="before")
    @classmethod
    def _ckpt_every(cls, v: Any) -> Any:
        from harness.train.checkpoint import parse_every

        try:
            return str(parse_every(v))  # canonical: "N steps", "Xs" or "off"
        except ValueError as e:
            msg = str(e).split(": ", 1)[-1]
            raise PydanticCustomError("checkpoint_every", "{msg}", {"msg": msg}) from None

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
            raise PydanticCustomError("name", "{msg}", {"msg": msg})
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

    @field_validator("batching", mode="before")
    @classmethod
    def _batching(cls, v: Any) -> Any:
        return {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v

    @field_validator("models", "optimizers", "schedules", "datasets", "seeds", "batch_size",
                     "workloads", "dtype")
    @classmethod
    def _ne(cls, v: list | None) -> list | None:
        return v if v is None or isinstance(v, str) else _nonempty(v)

    @model_validator(mode="after")
    def _grid_or_workloads(self) -> SweepConfig:
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

    def dtypes(self) -> list[str]:
        """The ``dtype`` axis as a list."""
        return [self.dtype] if isinstance(self.dtype, str) else list(self.dtype)


    @field_validator("zip")
    @classmethod
    def _zip_axes(cls, v: list[list[str]]) -> list[list[str]]:
        for group in v:
            for a in group:
                if a not in TOP_AXES:
                    raise PydanticCustomError(
                        "zip", "unknown axis '{a}'; valid axes: {valid}{hint}",
                        {"a": _key(a), "valid": ", ".join(TOP_AXES), "hint": did_you_mean(a, TOP_AXES)})
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
                        {"k": _key(k), "valid": ", ".join(RULE_KEYS), "hint": did_you_mean(k, RULE_KEYS)})
        return v

    def target_for(self, dataset: str) -> TargetCfg | None:
        return self.targets.get(dataset, self.target)


# --------------------------------------------------------------------------- hyperparameter values


def hparam_values(x: Any) -> list[Any]:
    """The grid values one hyperparameter takes: ``[x]`` for a scalar, the list for a list,
    log-spaced values for ``{log_grid: [low, high, num]}``, ``[X]`` for ``{value: X}``, and
    ``[Distribution]`` (one placeholder, filled in by the search) for a distribution
    (:mod:`harness.search`).

    Raises:
      ValueError: a malformed ``log_grid`` (needs ``0 < low``, ``low <= high``, integer ``num >= 1``),
        a malformed distribution (:func:`harness.config.search.parse_distribution`) or an unknown ``{...}``
        form.
    """
    if isinstance(x, list):
        return list(x)
    if _search.is_distribution(x):
        return [_search.parse_distribution(x)]
    if isinstance(x, Mapping):
        if set(x) == {"value"}:
            return [x["value"]]
        if set(x) == {"log_grid"}:
            lo, hi, n = _log_grid_args(x["log_grid"])
            if n == 1:
                return [float(f"{lo:.6g}")]
            return [float(f"{lo * (hi / lo) ** (i / (n - 1)):.6g}") for i in range(n)]
        raise ValueError(f"a mapping value must be {{log_grid: [low, high, num]}}, {{value: X}} or a "
                         f"distribution ({{log_uniform: [lo, hi]}}, {{uniform: [lo, hi]}}, "
                         f"{{int_uniform: [lo, hi]}}, {{choice: [...]}}), got {short_repr(dict(x))}")
    return [x]


def _log_grid_args(g: Any) -> tuple[float, float, int]:
    """``(low, high, num)`` of a ``log_grid``, checked (finite ``0 < low <= high``, integer
    ``num >= 1``) without building it.

    Raises:
      ValueError: malformed.
    """
    if not (isinstance(g, list) and len(g) == 3 and all(_is_num(a) for a in g)
            and all(math.isfinite(a) for a in g) and float(g[2]).is_integer()):
        raise ValueError(f"log_grid must be [low, high, num] (finite numbers, integer num), "
                         f"got {short_repr(g)}")
    lo, hi, n = float(g[0]), float(g[1]), int(g[2])
    if lo <= 0 or hi < lo or n < 1:
        raise ValueError(f"log_grid needs 0 < low <= high and num >= 1, got {short_repr(g)}")
    return lo, hi, n


def _is_num(a: Any) -> bool:
    return isinstance(a, int | float) and not isinstance(a, bool)


# --------------------------------------------------------------------------- registries


@dataclass
class Registries:
    """The four name → builder registries the validator checks against (injectable in tests)."""

    models: Mapping[str, Callable]
    optimizers: Mapping[str, Callable]
    schedules: Mapping[str, Callable]
    datasets: Mapping[str, Callable]


def default_registries() -> Registries:
    """The project's registries (imports ``models.zoo``, ``optimizers`` and ``harness.data``,
    hence jax)."""
    from harness.data.sources import DATASETS
    from models.zoo import MODELS
    from optimizers import OPTIMIZERS, SCHEDULES

    return Registries(MODELS, OPTIMIZERS, SCHEDULES, DATASETS)


def builder_hparams(kind: str, builder: Callable) -> dict[str, HParam]:
    """Hyperparameters of a builder of ``kind`` (schedules: ``step_size`` is injected too)."""
    if kind == "schedule":
        skip = INJECTED | {"step_size"}
    elif kind == "dataset":  # a dataset's input_shape/num_classes (synthetic) are its own choices
        skip = frozenset()
    else:
        skip = INJECTED
    return hyperparameters(builder, skip=frozenset(skip))


# --------------------------------------------------------------------------- loading


def _key(k: Any, limit: int = 60) -> str:
    """A user's mapping key for a message or key path, cut to ``limit`` characters."""
    k = str(k) if not isinstance(k, str) else k
    return k if len(k) <= limit else k[: limit - 3] + "..."


def _loc_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + _key(part)
    return out or "<top>"


def _model_at(loc: tuple) -> type[BaseModel]:
    """The pydantic model class that holds the mapping at ``loc`` (for unknown-key messages)."""
    cls: type[BaseModel] = SweepConfig
    for part in loc:
        if isinstance(part, int) or part not in cls.model_fields:
            continue
        ann = cls.model_fields[part].annotation
        stack = [ann]
        while stack:
            a = stack.pop()
            if isinstance(a, type) and issubclass(a, BaseModel):
                cls = a
                break
            stack.extend(typing.get_args(a))
    return cls


def _format_pydantic(err: ValidationError, file: str) -> list[str]:
    lines = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if p not in ("function-after", "function-before"))
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            valid = list(_model_at(loc[:-1]).model_fields)
            key = str(loc[-1])
            msg = (f"unknown key {short_repr(key, 80)}; valid keys: {', '.join(valid)}"
                   f"{did_you_mean(key[:200], valid)}")
        elif e["type"] in ("bad_grid", "empty_axis") and "key" in (e.get("ctx") or {}):
            loc = (*loc, e["ctx"]["key"])
            msg = msg.split(": ", 1)[1]
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif e["type"] == "model_type":  # a section that must be a mapping: say so, and its keys
            keys = ", ".join(_model_at(loc).model_fields)
            msg = f"expected a mapping with keys {keys}, got {short_repr(e['input'])}"
        elif loc in (("batch_size",), ("seeds",)) and e["type"] == "list_type":
            what = "an int or a list of ints" if loc == ("batch_size",) else \
                "an int (a count) or a list of ints"
            msg = f"expected {what}, got {short_repr(e['input'])}"
        elif loc == ("targets",) and e["type"] == "dict_type":
            msg = (f"expected a mapping {{DATASET: {{metric, value}}}}, e.g. targets: {{digits: "
                   f"{{metric: valid/accuracy, value: 0.9}}}} (use 'target' for one target for all "
                   f"datasets), got {short_repr(e['input'])}")
        elif e["type"] == "target" and msg.split(": ", 1)[0] in ("value", "mode"):
            key, msg = msg.split(": ", 1)
            loc = (*loc, key)
        elif e["type"] not in ("empty_axis", "budget", "rule", "zip", "seeds", "batch_size", "name",
                               "tracking_uri", "target", "search", "workloads") \
                and f"got {short_repr(e['input'])}" not in msg:  # a message that names it already
            msg = f"{msg} (got {short_repr(e['input'])})"
        lines.append(f"{file}: {_loc_path(loc)}: {msg}")
    return lines


def parse_config(data: Any, file: str = "<config>",
                 max_trials: int = limits.DEFAULT_MAX_TRIALS) -> SweepConfig:
    """Structural validation of an already-loaded YAML document, then the plan-size limit
    (:func:`check_plan_size`), both before anything is expanded.

    Raises:
      ConfigError: one line per problem, ``FILE: KEY.PATH: message``.
    """
    if not isinstance(data, Mapping):
        raise ConfigError([f"{file}: <top>: a sweep config must be a mapping, got {type(data).__name__}"])
    try:
        cfg = SweepConfig.model_validate(dict(data), context={"max_trials": max_trials})
    except ValidationError as e:
        raise ConfigError(_format_pydantic(e, file)) from None
    check_plan_size(cfg, file, max_trials)
    return cfg


def check_plan_size(cfg: SweepConfig, file: str, max_trials: int = limits.DEFAULT_MAX_TRIALS) -> None:
    """Reject a config whose grid has more than ``max_trials`` trials, computed from axis sizes
    (:func:`harness.config.limits.plan_size`) without expanding anything.

    Raises:
      ConfigError: ``FILE: KEY.PATH: the sweep would expand to N trials, more than the limit ...``
        naming the axis or hyperparameter with the most values.
    """
    problem = limits.plan_size_problem(cfg, max_trials, hparam_values)
    if problem is not None:
        raise ConfigError([f"{file}: {problem[0]}: {problem[1]}"])


def load_config(path: str | Path, registries: Registries | None = None,
                max_trials: int = limits.DEFAULT_MAX_TRIALS) -> SweepConfig:
    """Read, parse and fully validate a sweep config file: the bounded YAML loader
    (:mod:`harness.yamlsafe`: duplicate keys, alias bombs, nesting, size, UTF-8), structure and
    ranges, the plan-size limit (``max_trials``), then registry names and hyperparameters.
    Numbers are canonicalised (:func:`canonicalize_numbers`: an int where a builder takes a float
    becomes a float, so ``step_size: 1000`` and ``1000.0`` are one trial).

    ``registries=None`` uses :func:`default_registries`.

    Raises:
      ConfigError: the file is missing, unreadable, not UTF-8, not safe YAML, or invalid (all
        problems listed, one ``FILE: KEY.PATH: message`` line each).
    """
    file = str(path)
    try:
        data = load_yaml_file(path)
    except YamlConfigError as e:
        raise ConfigError(e.lines) from None
    cfg = parse_config(data, file, max_trials)
    regs = registries or default_registries()
    validate_names(cfg, file, regs)
    return canonicalize_numbers(cfg, regs)


# --------------------------------------------------------------------------- names and hparams


def _annotation(builder: Callable, hp: HParam) -> Any:
    try:
        hints = typing.get_type_hints(builder)
    except Exception:
        hints = {}
    ann = hints.get(hp.name, hp.annotation if not isinstance(hp.annotation, str) else None)
    if ann is None and hp.default is not REQUIRED and hp.default is not None:
        t = type(hp.default)
        ann = float | int if t is float else t
        if t not in (int, float, bool, str):
            ann = None
    return ann


def _type_error(value: Any, ann: Any) -> str | None:
    from pydantic import TypeAdapter

    try:
        adapter = TypeAdapter(ann)
    except Exception:
        return None  # not a checkable annotation (e.g. a bare Callable protocol)

    def tup(v: Any) -> Any:
        return tuple(tup(x) for x in v) if isinstance(v, list) else v

    for candidate in (value, tup(value)):
        try:
            adapter.validate_python(candidate, strict=True)
            return None
        except Exception:
            continue
    if ann in (float, float | int, int | float):
        return f"expected a number, got {short_repr(value)}{_quoted_hint(value)}"
    name = getattr(ann, "__name__", None) or str(ann).replace("typing.", "")
    return f"expected {name}, got {short_repr(value)}"


def _check_component(kind: str, registry: Mapping[str, Callable], comp: Component, path: str,
                     file: str, errors: list[str]) -> None:
    if len(comp.name) > 200:
        errors.append(f"{file}: {path}.name: not a {kind} name ({len(comp.name):,} characters: "
                      f"{short_repr(comp.name, 60)}); `python -m harness list` shows the names")
        return
    if kind == "dataset" and comp.name.startswith("tfds:"):
        if not _TFDS_RE.match(comp.name):
            errors.append(f"{file}: {path}.name: malformed TFDS dataset {comp.name!r}; expected "
                          f"'tfds:NAME', 'tfds:NAME/CONFIG' or 'tfds:NAME:1.2.3'")
        return
    try:
        builder = lookup(registry, comp.name, kind)
    except KeyError as e:
        errors.append(f"{file}: {path}.name: {e.args[0]}")
        return
    hps = builder_hparams(kind, builder)
    for k, raw in comp.hparams.items():
        if k not in hps:
            valid = ", ".join(hps) or "(none)"
            errors.append(f"{file}: {path}.hparams.{_key(k)}: unknown hyperparameter of {kind} "
                          f"{comp.name!r}; valid: {valid}{did_you_mean(k[:200], list(hps))}")
            continue
        ann = _annotation(builder, hps[k])
        if ann is None and k in _POSITIVE_HPARAMS:
            ann = float | int
        values = hparam_values(raw)
        of = ""
        if isinstance(values[0], _search.Distribution):
            dist = values[0]
            of = f" ({'an option' if dist.kind == 'choice' else 'a bound'} of {dist})"
            if (msg := _distribution_error(kind, k, dist, ann)) is not None:
                errors.append(f"{file}: {path}.hparams.{k}: {msg}")
                continue
            values = dist.values_to_check()
        for v in values:
            if ann is not None and (msg := _type_error(v, ann)):
                if isinstance(raw, list) and _type_error(raw, ann) is None:
                    msg += " (a list is a grid axis; write {value: [...]} for one list value)"
                errors.append(f"{file}: {path}.hparams.{k}: {msg}{of}")
                break
            if k in _POSITIVE_HPARAMS and _is_num(v) and not v > 0:
                errors.append(f"{file}: {path}.hparams.{k}: must be > 0, got {short_repr(v)}{of}")
                break
            if _is_num(v) and not math.isfinite(v):
                errors.append(f"{file}: {path}.hparams.{k}: must be finite, got {short_repr(v)}{of}")
                break
            if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**63:
                errors.append(f"{file}: {path}.hparams.{k}: {short_repr(v)} does not fit in 64 bits")
                break
            if len(text := str(v)) > limits.MAX_PARAM_VALUE_CHARS:
                errors.append(f"{file}: {path}.hparams.{k}: the value is {len(text):,} characters "
                              f"as text; MLflow keeps at most {limits.MAX_PARAM_VALUE_CHARS:,} in a "
                              f"param ({short_repr(v, 80)})")
                break
    for name, hp in hps.items():
        if hp.required and name not in comp.hparams:
            errors.append(f"{file}: {path}.hparams: missing required hyperparameter {name!r} of "
                          f"{kind} {comp.name!r}")
    names = set(comp.hparams)
    seen: set[str] = set()
    for i, group in enumerate(comp.zip):
        lengths = set()
        for a in group:
            if a not in names:
                errors.append(f"{file}: {path}.zip[{i}]: {short_repr(a, 60)} is not one of this "
                              f"entry's hparams ({', '.join(names) or 'none'})"
                              f"{did_you_mean(str(a)[:200], list(names))}")
            elif a in seen:
                errors.append(f"{file}: {path}.zip[{i}]: {a!r} is in more than one zip group")
            elif _search.is_distribution(comp.hparams[a]):
                errors.append(f"{file}: {path}.zip[{i}]: {a!r} is a distribution; only grid axes "
                              f"(lists, log_grid) can be zipped")
            else:
                lengths.add(limits.hparam_count(comp.hparams[a], hparam_values))
            seen.add(a)
        if len(lengths) > 1:
            errors.append(f"{file}: {path}.zip[{i}]: zipped axes must have equal lengths, got "
                          f"{sorted(lengths)}")


def _check_workload(w: WorkloadEntry, path: str, file: str, registries: Registries,
                    errors: list[str]) -> None:
    """The workload exists, and its model and dataset (with the overrides) pass the same checks as
    a ``models``/``datasets`` entry."""
    from harness.config.workloads import WORKLOADS

    try:
        wl = lookup(WORKLOADS, w.name, "workload")
    except KeyError as e:
        errors.append(f"{file}: {path}.name: {e.args[0]}")
        return
    for kind, reg, name, base, over in (
            ("model", registries.models, wl.model, wl.model_hparams, w.model_hparams),
            ("dataset", registries.datasets, wl.dataset, wl.dataset_hparams, w.dataset_hparams)):
        comp = Component(name=name, hparams={**base, **over})
        sub: list[str] = []
        _check_component(kind, reg, comp, f"{path}.{kind}_hparams", file, sub)
        # "workloads[0].model_hparams.name: unknown model ..." reads as the workload's own model
        errors.extend(m.replace(f"{path}.{kind}_hparams.name:", f"{path}.name: workload "
                                f"{w.name!r} needs {kind} {name!r}, but:").replace(
                                f"{path}.{kind}_hparams.hparams", f"{path}.{kind}_hparams")
                      for m in sub)


def _distribution_error(kind: str, name: str, dist: _search.Distribution, ann: Any) -> str | None:
    """Why ``dist`` cannot be the value of hyperparameter ``name`` (annotation ``ann``) of a ``kind``
    builder, or None: datasets are never sampled; a discrete hyperparameter (one that takes no
    non-integer number) takes ``choice`` or, when it takes ints, ``int_uniform``."""
    if kind == "dataset":
        return (f"a dataset's hyperparameters cannot be sampled (distributions are for models, "
                f"optimizers and schedules); use a value or a list, got {dist}")
    if ann is None or dist.kind == "choice":
        return None
    takes_float = _type_error(0.5, ann) is None
    takes_int = _type_error(1, ann) is None
    if dist.produces_floats and not takes_float:
        if takes_int:
            return (f"{name} is discrete (an int): use {{int_uniform: [lo, hi]}} or {{choice: [...]}}, "
                    f"not {dist.kind}")
        return f"{name} is discrete: use {{choice: [...]}}, not {dist.kind}"
    if dist.kind == "int_uniform" and not takes_int:
        return f"{name} takes no integers: use {{choice: [...]}}, not int_uniform"
    return None


def _dist_keys(comp: Component) -> list[str]:
    return [k for k, v in comp.hparams.items() if _search.is_distribution(v)]


def _check_search(cfg: SweepConfig, file: str, errors: list[str]) -> None:
    """The search settings against the distributions they must sample: ``search`` only on optimizer
    entries; no distribution in a cell whose method is ``grid``; a sampling method with distributions
    needs ``trials``; ``grid`` takes no ``trials``."""
    if cfg.search is not None and cfg.search.method == "grid" and cfg.search.trials is not None:
        errors.append(f"{file}: search.trials: method grid has no trials (its grid points are the "
                      f"budget); remove trials, or use method quasirandom or random")
    grids: list[tuple[str, Any]] = [("", cfg)] + [(f"include[{i}].", g) for i, g in enumerate(cfg.include)]
    hint = ("add search: {method: quasirandom, trials: N} at the top level (or on the optimizer "
            "entry)")
    for prefix, grid in grids:
        opt_prefix = prefix if grid.optimizers is not None else ""
        opts = list(enumerate(grid.optimizers if grid.optimizers is not None else cfg.optimizers))
        searches = [(f"{opt_prefix}optimizers[{j}]", c, _search.resolve_search(cfg.search, c.search))
                    for j, c in opts]
        for axis in ("models", "schedules", "datasets"):
            for j, comp in enumerate(getattr(grid, axis) or []):
                if comp.search is not None:
                    errors.append(f"{file}: {prefix}{axis}[{j}].search: only optimizer entries may "
                                  f"override search (each optimizer's budget is set there)")
        for j, comp in opts if grid.optimizers is not None or not prefix else []:
            path, _, srch = searches[j]
            if comp.search is not None and comp.search.trials is not None and srch.method == "grid":
                errors.append(f"{file}: {path}.search.trials: method grid has no trials (its grid "
                              f"points are the budget); remove trials, or use method quasirandom or "
                              f"random")
        for axis in ("models", "optimizers", "schedules"):
            if getattr(grid, axis) is None:
                continue
            for j, comp in enumerate(getattr(grid, axis)):
                for k in _dist_keys(comp):
                    where = f"{file}: {prefix}{axis}[{j}].hparams.{k}"
                    dist = comp.hparams[k]
                    mine = [searches[j]] if axis == "optimizers" else searches
                    grid_opt = next((p for p, _, sr in mine if sr.method == "grid"), None)
                    no_trials = next((p for p, _, sr in mine if sr.method != "grid" and sr.trials is None),
                                     None)
                    text = str(_search.parse_distribution(dist))
                    with_opt = "" if axis == "optimizers" else f" (with {grid_opt or no_trials})"
                    if grid_opt is not None:
                        errors.append(f"{where}: {text} is a distribution, but search.method is grid"
                                      f"{with_opt}: pick a sampling method (search: {{method: "
                                      f"quasirandom, trials: N}}), or write a grid (a list or "
                                      f"{{log_grid: [lo, hi, num]}})")
                    elif no_trials is not None:
                        errors.append(f"{where}: a distribution needs search.trials{with_opt}: {hint}")


def validate_names(cfg: SweepConfig, file: str, registries: Registries) -> None:
    """Check every registry name and hyperparameter of ``cfg`` (top level and ``include``).

    Raises:
      ConfigError: one line per problem (nothing has been run or logged).
    """
    errors: list[str] = []
    axes = [("models", "model", registries.models), ("optimizers", "optimizer", registries.optimizers),
            ("schedules", "schedule", registries.schedules), ("datasets", "dataset", registries.datasets)]
    grids: list[tuple[str, Any]] = [("", cfg)] + [(f"include[{i}].", g) for i, g in enumerate(cfg.include)]
    for prefix, grid in grids:
        for axis, kind, reg in axes:
            for j, comp in enumerate(getattr(grid, axis) or []):
                _check_component(kind, reg, comp, f"{prefix}{axis}[{j}]", file, errors)
    _check_search(cfg, file, errors)
    _check_rules(cfg, file, registries, errors)
    if cfg.executor not in known_executors():
        ex = known_executors()
        errors.append(f"{file}: executor: unknown executor {cfg.executor!r}; valid choices: "
                      f"{', '.join(ex)}{did_you_mean(cfg.executor, ex)}")
    for i, w in enumerate(cfg.workloads or []):
        _check_workload(w, f"workloads[{i}]", file, registries, errors)
    if cfg.augment is not None:
        from harness.train.augment import validate_augment

        try:
            validate_augment(cfg.augment)
        except ValueError as e:
            errors.append(f"{file}: augment: {e}")
    for k in cfg.targets:
        names = [c.name for c in cfg.datasets or []] + [c.name for g in cfg.include
                                                         for c in g.datasets or []]
        names += [w.name for w in cfg.workloads or []]
        if k not in names:
            errors.append(f"{file}: targets.{_key(k)}: not a dataset of this sweep; datasets: "
                          f"{', '.join(names)}{did_you_mean(k[:200], names)}")
    if errors:
        raise ConfigError(errors)


def _check_rules(cfg: SweepConfig, file: str, registries: Registries, errors: list[str]) -> None:
    """``exclude`` rules: names are registry names; a ``KIND.HPARAM`` key names a hyperparameter
    that some ``KIND`` entry of this sweep sets (did-you-mean against the builders' hyperparameters:
    a misspelt key would silently match no trial); values are scalars or lists of scalars."""
    regs = {"model": registries.models, "optimizer": registries.optimizers,
            "schedule": registries.schedules, "dataset": registries.datasets}
    axis_of = {"model": "models", "optimizer": "optimizers", "schedule": "schedules",
               "dataset": "datasets"}
    grids: list[Any] = [cfg, *cfg.include]
    for i, rule in enumerate(cfg.exclude):
        for key, want in rule.items():
            where = f"{file}: exclude[{i}].{_key(key)}"
            wants = want if isinstance(want, list) else [want]
            if any(isinstance(w, Mapping | list) for w in wants):
                errors.append(f"{where}: a rule value is a scalar or a list of scalars, got "
                              f"{short_repr(want)}")
                continue
            if key in regs:
                for v in wants:
                    if key == "dataset" and isinstance(v, str) and v.startswith("tfds:"):
                        continue
                    try:
                        lookup(regs[key], v, key)
                    except (KeyError, TypeError) as e:
                        msg = e.args[0] if isinstance(e, KeyError) else f"not a {key} name: {short_repr(v)}"
                        errors.append(f"{where}: {msg}")
                continue
            kind, _, hp = key.partition(".")
            if kind not in regs or not hp:
                continue  # seed, batch_size (the structural check rejected anything else)
            names = rule.get(kind)
            names = set(names if isinstance(names, list) else [names]) if names is not None else None
            comps = [c for g in grids for c in (getattr(g, axis_of[kind]) or [])
                     if names is None or c.name in names]
            sets = {k for c in comps for k in c.hparams}
            if hp in sets:
                continue
            valid: list[str] = []
            for c in comps:
                if c.name in regs[kind] and not c.name.startswith("tfds:"):
                    valid += [h for h in builder_hparams(kind, regs[kind][c.name]) if h not in valid]
            if hp in valid:
                errors.append(f"{where}: no {kind} entry of this sweep sets {hp!r}, so the rule "
                              f"matches no trial; rules match hyperparameters the config sets "
                              f"({', '.join(sorted(sets)) or 'none'})")
            else:
                errors.append(f"{where}: {short_repr(hp, 60)} is not a hyperparameter of the "
                              f"{kind}s of this sweep ({', '.join(valid) or 'none'})"
                              f"{did_you_mean(hp[:200], valid)}")


def canonicalize_numbers(cfg: SweepConfig, registries: Registries) -> SweepConfig:
    """``cfg`` with every int hyperparameter value turned into a float where the builder takes a
    float (its annotation, or its float default, accepts the float; ``step_size`` and
    ``learning_rate`` always), so that ``step_size: 1000`` and ``step_size: 1000.0`` give one
    trial id. Float values, ints of int-typed hyperparameters and ``{...}`` forms other than
    ``{value: N}`` are left as they are, so existing float-valued trial ids do not change."""
    kinds = (("models", "model", registries.models), ("optimizers", "optimizer", registries.optimizers),
             ("schedules", "schedule", registries.schedules), ("datasets", "dataset", registries.datasets))

    def takes_float(kind: str, reg: Mapping[str, Callable], comp: Component, k: str) -> bool:
        if k in _POSITIVE_HPARAMS:
            return True
        builder = reg.get(comp.name)
        if builder is None:
            return False
        hp = builder_hparams(kind, builder).get(k)
        ann = _annotation(builder, hp) if hp is not None else None
        return ann is not None and _type_error(1.5, ann) is None

    def fix(v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return float(v)
        if isinstance(v, list):
            return [fix(x) if isinstance(x, int) and not isinstance(x, bool) else x for x in v]
        if isinstance(v, Mapping) and set(v) == {"value"}:
            x = v["value"]
            return {"value": float(x)} if isinstance(x, int) and not isinstance(x, bool) else v
        return v

    def fix_comps(comps: list[Component] | None, kind: str, reg: Mapping[str, Callable]):
        if comps is None:
            return None
        out = []
        for c in comps:
            new = {k: fix(v) if takes_float(kind, reg, c, k) else v for k, v in c.hparams.items()}
            out.append(c if new == c.hparams and all(type(new[k]) is type(c.hparams[k]) for k in new)
                       else c.model_copy(update={"hparams": new}))
        return out

    update = {axis: fix_comps(getattr(cfg, axis), kind, reg) for axis, kind, reg in kinds}
    update["include"] = [g.model_copy(update={axis: fix_comps(getattr(g, axis), kind, reg)
                                              for axis, kind, reg in kinds}) for g in cfg.include]
    return cfg.model_copy(update=update)
