"""Sweep configs: the YAML schema (pydantic models) and its validation against the registries.

A config is parsed in two passes, both before any trial runs and before anything is written to MLflow:

1. **Structure** (:func:`parse_config`): pydantic models with unknown keys forbidden, types and ranges
   checked (positive steps, batch size, eval cadence, jobs; non-empty axes).
2. **Names** (:func:`validate_names`): every model, optimizer, schedule and dataset name is looked up in
   its registry, and every hyperparameter is checked against the builder's signature (unknown names,
   missing required ones, values of the wrong type, non-positive ``step_size``).

Every problem becomes one line ``FILE: KEY.PATH: message`` (with the valid choices and a
"did you mean" where one is close), and all lines are raised together as one :class:`ConfigError`.

Schema (``experiments/quickstart.yaml`` is a complete example)::

    name: quickstart              # the sweep's name = the MLflow experiment
    description: "..."            # optional free text
    models:                       # axis; each entry a name or {name, hparams, zip}
      - mlp
      - {name: cnn, hparams: {width: [16, 32]}}     # a list is a grid axis
    optimizers:
      - {name: adam, hparams: {step_size: {log_grid: [1.0e-4, 1.0e-1, 4]}}}   # 4 log-spaced values
      - {name: sgd, hparams: {step_size: [0.1, 0.3], }, zip: [[...]]}
    schedules: [constant, cosine]  # default [constant]; factories get the optimizer's step_size
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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from harness import search as _search
from harness.registry import (
    INJECTED,
    REQUIRED,
    HParam,
    did_you_mean,
    hyperparameters,
    known_executors,
    lookup,
)

#: Top-level axes that ``zip`` and ``include`` may name.
TOP_AXES = ("models", "optimizers", "schedules", "datasets", "seeds", "batch_size")
#: Flat keys (and prefixes ``model.`` ...) that ``exclude`` rules may use.
RULE_KEYS = ("model", "optimizer", "schedule", "dataset", "seed", "batch_size")
_TFDS_RE = re.compile(r"^tfds:[a-z][a-z0-9_]*(/[A-Za-z0-9_.\-]+)?(:\d+\.\d+\.\d+)?$")
_POSITIVE_HPARAMS = ("step_size", "learning_rate")  # must be numbers > 0


class ConfigError(ValueError):
    """An invalid sweep config. ``errors`` holds one ``FILE: KEY.PATH: message`` line per problem;
    ``str(err)`` is those lines joined with newlines."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


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
                values = hparam_values(x)
            except ValueError as e:
                raise PydanticCustomError("bad_grid", "{key}: {msg}", {"key": k, "msg": str(e)}) from None
            if not values:
                raise PydanticCustomError("empty_axis", "{key}: empty axis (needs at least one value)",
                                          {"key": k})
        return v


class TargetCfg(_Strict):
    """A convergence target on the validation split; ``mode`` defaults to ``max`` for accuracy and
    ``min`` for loss. ``eval/accuracy``/``eval/loss`` (the names before the three-split protocol)
    are accepted and stored as ``valid/*``."""

    metric: Literal["valid/accuracy", "valid/loss", "eval/accuracy", "eval/loss"] = "valid/accuracy"
    value: float
    mode: Literal["max", "min"] | None = None

    @field_validator("metric")
    @classmethod
    def _canonical(cls, v: str) -> str:
        return "valid/" + v[len("eval/"):] if v.startswith("eval/") else v

    def resolved_mode(self) -> str:
        return self.mode or ("max" if self.metric.endswith("accuracy") else "min")


class Budget(_Strict):
    """Training budget: exactly one of ``steps`` (optimizer steps) or ``epochs`` (passes over the
    training split)."""

    steps: int | None = Field(default=None, gt=0)
    epochs: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one(self) -> Budget:
        if (self.steps is None) == (self.epochs is None):
            raise PydanticCustomError("budget", "give exactly one of 'steps' or 'epochs'")
        return self


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
    seeds: list[int] | None = None
    batch_size: list[int] | None = None

    @field_validator("seeds", "batch_size", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("models", "optimizers", "schedules", "datasets", "seeds", "batch_size")
    @classmethod
    def _ne(cls, v: list | None) -> list | None:
        return v if v is None else _nonempty(v)


class SweepConfig(_Strict):
    """A whole sweep config (see the module docstring for the YAML schema)."""

    name: str = Field(min_length=1)
    description: str = ""
    models: list[Component]
    optimizers: list[Component]
    schedules: list[Component] = Field(default_factory=lambda: [Component(name="constant")])
    datasets: list[Component]
    seeds: list[int] = Field(default_factory=lambda: [0])
    batch_size: list[int] = Field(default_factory=lambda: [128])
    budget: Budget
    search: SearchCfg | None = None
    eval_every: int | None = Field(default=None, gt=0)
    steps_per_dispatch: int = Field(default=50, gt=0)
    target: TargetCfg | None = None
    targets: dict[str, TargetCfg] = Field(default_factory=dict)
    zip: list[list[str]] = Field(default_factory=list)
    include: list[SubGrid] = Field(default_factory=list)
    exclude: list[dict[str, Any]] = Field(default_factory=list)
    batching: Literal["auto", "on", "off"] = "auto"
    measure_perf: bool = True
    dtype: Literal["float32", "bfloat16", "float16", "float64"] = "float32"
    tracking_uri: str | None = None
    executor: str = "inprocess"
    jobs: int = Field(default=1, gt=0)
    address: str | None = None
    checkpoint_every: int | str | None = None
    checkpoint_dir: str | None = None
    keep_final_checkpoint: bool = False

    @field_validator("checkpoint_every", mode="before")
    @classmethod
    def _ckpt_every(cls, v: Any) -> Any:
        from harness.checkpoint import parse_every

        try:
            return str(parse_every(v))  # canonical: "N steps", "Xs" or "off"
        except ValueError as e:
            msg = str(e).split(": ", 1)[-1]
            raise PydanticCustomError("checkpoint_every", "{msg}", {"msg": msg}) from None

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            if v <= 0:
                raise PydanticCustomError("seeds", "an int seed count must be > 0, got {v}", {"v": v})
            return list(range(v))
        return v

    @field_validator("batch_size", mode="before")
    @classmethod
    def _bs(cls, v: Any) -> Any:
        return [v] if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("batching", mode="before")
    @classmethod
    def _batching(cls, v: Any) -> Any:
        return {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v

    @field_validator("models", "optimizers", "schedules", "datasets", "seeds", "batch_size")
    @classmethod
    def _ne(cls, v: list) -> list:
        return _nonempty(v)

    @field_validator("seeds")
    @classmethod
    def _seed_range(cls, v: list[int]) -> list[int]:
        for s in v:
            if s < 0:
                raise PydanticCustomError("seeds", "seeds must be >= 0, got {s}", {"s": s})
        return v

    @field_validator("batch_size")
    @classmethod
    def _bs_pos(cls, v: list[int]) -> list[int]:
        for b in v:
            if b <= 0:
                raise PydanticCustomError("batch_size", "batch_size must be > 0, got {b}", {"b": b})
        return v

    @field_validator("zip")
    @classmethod
    def _zip_axes(cls, v: list[list[str]]) -> list[list[str]]:
        for group in v:
            for a in group:
                if a not in TOP_AXES:
                    raise PydanticCustomError(
                        "zip", "unknown axis '{a}'; valid axes: {valid}{hint}",
                        {"a": a, "valid": ", ".join(TOP_AXES), "hint": did_you_mean(a, TOP_AXES)})
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
                        {"k": k, "valid": ", ".join(RULE_KEYS), "hint": did_you_mean(k, RULE_KEYS)})
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
        a malformed distribution (:func:`harness.search.parse_distribution`) or an unknown ``{...}``
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
            g = x["log_grid"]
            if not (isinstance(g, list) and len(g) == 3 and all(_is_num(a) for a in g)
                    and float(g[2]).is_integer()):
                raise ValueError(f"log_grid must be [low, high, num], got {g!r}")
            lo, hi, n = float(g[0]), float(g[1]), int(g[2])
            if lo <= 0 or hi < lo or n < 1:
                raise ValueError(f"log_grid needs 0 < low <= high and num >= 1, got {g!r}")
            if n == 1:
                return [float(f"{lo:.6g}")]
            return [float(f"{lo * (hi / lo) ** (i / (n - 1)):.6g}") for i in range(n)]
        raise ValueError(f"a mapping value must be {{log_grid: [low, high, num]}}, {{value: X}} or a "
                         f"distribution ({{log_uniform: [lo, hi]}}, {{uniform: [lo, hi]}}, "
                         f"{{int_uniform: [lo, hi]}}, {{choice: [...]}}), got {dict(x)!r}")
    return [x]


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
    from harness.data import DATASETS
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


def _loc_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
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
            msg = f"unknown key {key!r}; valid keys: {', '.join(valid)}{did_you_mean(key, valid)}"
        elif e["type"] in ("bad_grid", "empty_axis") and "key" in (e.get("ctx") or {}):
            loc = (*loc, e["ctx"]["key"])
            msg = msg.split(": ", 1)[1]
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif loc in (("batch_size",), ("seeds",)) and e["type"] == "list_type":
            what = "an int or a list of ints" if loc == ("batch_size",) else \
                "an int (a count) or a list of ints"
            msg = f"expected {what}, got {e['input']!r}"
        elif loc == ("targets",) and e["type"] == "dict_type":
            msg = (f"expected a mapping {{DATASET: {{metric, value}}}}, e.g. targets: {{digits: "
                   f"{{metric: valid/accuracy, value: 0.9}}}} (use 'target' for one target for all "
                   f"datasets), got {e['input']!r}")
        elif e["type"] not in ("empty_axis", "budget", "rule", "zip", "seeds", "batch_size", "search"):
            msg = f"{msg} (got {e['input']!r})"
        lines.append(f"{file}: {_loc_path(loc)}: {msg}")
    return lines


def parse_config(data: Any, file: str = "<config>") -> SweepConfig:
    """Structural validation of an already-loaded YAML document.

    Raises:
      ConfigError: one line per problem, ``FILE: KEY.PATH: message``.
    """
    if not isinstance(data, Mapping):
        raise ConfigError([f"{file}: <top>: a sweep config must be a mapping, got {type(data).__name__}"])
    try:
        return SweepConfig.model_validate(dict(data))
    except ValidationError as e:
        raise ConfigError(_format_pydantic(e, file)) from None


def load_config(path: str | Path, registries: Registries | None = None) -> SweepConfig:
    """Read, parse and fully validate a sweep config file (structure, then registry names).

    ``registries=None`` uses :func:`default_registries`.

    Raises:
      ConfigError: the file is missing, not YAML, or invalid (all problems listed).
    """
    import yaml

    path = Path(path)
    file = str(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError([f"{file}: cannot read: {e.strerror}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError([f"{file}: not valid YAML: {e}"]) from None
    cfg = parse_config(data, file)
    validate_names(cfg, file, registries or default_registries())
    return cfg


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
        return f"expected a number, got {value!r}"
    name = getattr(ann, "__name__", None) or str(ann).replace("typing.", "")
    return f"expected {name}, got {value!r}"


def _check_component(kind: str, registry: Mapping[str, Callable], comp: Component, path: str,
                     file: str, errors: list[str]) -> None:
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
            errors.append(f"{file}: {path}.hparams.{k}: unknown hyperparameter of {kind} "
                          f"{comp.name!r}; valid: {valid}{did_you_mean(k, list(hps))}")
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
                errors.append(f"{file}: {path}.hparams.{k}: must be > 0, got {v!r}{of}")
                break
            if _is_num(v) and not math.isfinite(v):
                errors.append(f"{file}: {path}.hparams.{k}: must be finite, got {v!r}{of}")
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
                errors.append(f"{file}: {path}.zip[{i}]: {a!r} is not one of this entry's hparams "
                              f"({', '.join(names) or 'none'}){did_you_mean(a, list(names))}")
            elif a in seen:
                errors.append(f"{file}: {path}.zip[{i}]: {a!r} is in more than one zip group")
            elif _search.is_distribution(comp.hparams[a]):
                errors.append(f"{file}: {path}.zip[{i}]: {a!r} is a distribution; only grid axes "
                              f"(lists, log_grid) can be zipped")
            else:
                lengths.add(len(hparam_values(comp.hparams[a])))
            seen.add(a)
        if len(lengths) > 1:
            errors.append(f"{file}: {path}.zip[{i}]: zipped axes must have equal lengths, got "
                          f"{sorted(lengths)}")


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
    regs = {"model": registries.models, "optimizer": registries.optimizers,
            "schedule": registries.schedules, "dataset": registries.datasets}
    for i, rule in enumerate(cfg.exclude):
        for key, reg in regs.items():
            if key not in rule:
                continue
            for v in rule[key] if isinstance(rule[key], list) else [rule[key]]:
                if key == "dataset" and isinstance(v, str) and v.startswith("tfds:"):
                    continue
                try:
                    lookup(reg, v, key)
                except (KeyError, TypeError) as e:
                    msg = e.args[0] if isinstance(e, KeyError) else f"not a {key} name: {v!r}"
                    errors.append(f"{file}: exclude[{i}].{key}: {msg}")
    if cfg.executor not in known_executors():
        ex = known_executors()
        errors.append(f"{file}: executor: unknown executor {cfg.executor!r}; valid choices: "
                      f"{', '.join(ex)}{did_you_mean(cfg.executor, ex)}")
    for k in cfg.targets:
        names = [c.name for c in cfg.datasets] + [c.name for g in cfg.include for c in g.datasets or []]
        if k not in names:
            errors.append(f"{file}: targets.{k}: not a dataset of this sweep; datasets: "
                          f"{', '.join(names)}{did_you_mean(k, names)}")
    if errors:
        raise ConfigError(errors)
