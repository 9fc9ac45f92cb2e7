"""One config entry against its builder: names, hyperparameters, types, and canonical numbers.

:func:`check_component` checks one ``models``/``optimizers``/``schedules``/``datasets`` entry: the
name is in its registry (or a well-formed name of a dataset kind, :mod:`harness.data.kinds`),
every hyperparameter is one of the
builder's (:func:`harness.config.registries.builder_hparams`), every value (each grid value, each
option or bound of a distribution) fits the builder's annotation or default (:func:`type_error`),
``step_size``/``learning_rate`` are > 0, numbers are finite and fit 64 bits, a value's text fits an
MLflow param, required hyperparameters are given and ``zip`` groups name equal-length grid axes.
:func:`canonicalize_numbers` turns an int into a float where the builder takes a float, so that
``step_size: 1000`` and ``1000.0`` are one trial.
"""

from __future__ import annotations

import collections.abc
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

from harness.config import limits, search
from harness.config.dropin_ranges import check_ranges
from harness.config.errors import key_text
from harness.config.numbers import is_num, quoted_hint
from harness.config.registries import Registries, builder_hparams
from harness.config.schema import Component, SweepConfig
from harness.config.values import hparam_count, hparam_values
from harness.core.builders import REQUIRED, HParam, did_you_mean, lookup
from harness.core.echo import short_repr
from harness.core.finite import finite
from harness.data.kinds import kind_of

__all__ = ["POSITIVE_HPARAMS", "annotation_of", "canonicalize_numbers", "check_component", "entry_builder",
           "type_error"]

#: Hyperparameters that must be numbers > 0 (and are always floats).
POSITIVE_HPARAMS = ("step_size", "learning_rate")


def annotation_of(builder: Callable, hp: HParam) -> Any:
    """The type a builder's hyperparameter takes: its annotation (resolved), else the type of its
    default (``float | int`` for a float default; ``None`` when nothing checkable is known)."""
    try:
        hints = typing.get_type_hints(builder)
    except Exception:
        hints = {}
    ann = hints.get(hp.name, hp.annotation if not isinstance(hp.annotation, str) else None)
    if ann is not None and not _checkable(ann):  # e.g. Optax's jax.typing.ArrayLike: the default
        ann = None  # says more (b1=0.9: a number)
    if ann is None and hp.default is not REQUIRED and hp.default is not None:
        t = type(hp.default)
        ann = float | int if t is float else t
        if t not in (int, float, bool, str):
            ann = None
    return ann


def _checkable(ann: Any) -> bool:
    """Whether pydantic can check values against ``ann``."""
    from pydantic import TypeAdapter

    try:
        TypeAdapter(ann)
    except Exception:
        return False
    return True


def type_error(value: Any, ann: Any) -> str | None:
    """Why ``value`` does not fit annotation ``ann`` (pydantic strict mode; a list may stand for a
    tuple), or ``None`` when it fits or ``ann`` cannot be checked."""
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
        return f"expected a number, got {short_repr(value)}{quoted_hint(value)}"
    if (choices := _literal_choices(ann)) is not None:
        return f"expected one of {', '.join(choices)}, got {short_repr(value)}"
    name = getattr(ann, "__name__", None) or str(ann).replace("typing.", "")
    return f"expected {name}, got {short_repr(value)}"


def _takes_sequence(ann: Any) -> bool:
    """Whether annotation ``ann`` takes a tuple or list value (anywhere in a union)."""
    origin = typing.get_origin(ann)
    if ann in (tuple, list) or origin in (tuple, list, collections.abc.Sequence):
        return True
    return any(_takes_sequence(a) for a in typing.get_args(ann)) if origin is not None else False


def _literal_choices(ann: Any) -> list[str] | None:
    """The values of a ``Literal`` annotation (``null`` too for an optional one), else None."""
    args = typing.get_args(ann)
    if typing.get_origin(ann) is typing.Literal:
        return [str(a) for a in args]
    lits = [a for a in args if typing.get_origin(a) is typing.Literal]
    if len(lits) == 1 and all(a is type(None) or a is lits[0] for a in args):
        return [str(a) for a in typing.get_args(lits[0])] + ["null"]
    return None


#: Why a dataset other than token shards has no ``order``.
_ORDER_HINT = ("; order (random | sequential) is a tokens: dataset's: the sequential order reads token "
               "shards in name order")


def entry_builder(kind: str, registry: Mapping[str, Callable], name: str) -> Callable:
    """The builder whose signature holds the entry's hyperparameters: a dataset kind's loader
    (:mod:`harness.data.kinds`) for a prefixed dataset name, else the registry's entry.

    Raises:
      KeyError: an unknown name, or a malformed prefixed one (the message says why)."""
    if kind == "dataset" and (found := kind_of(name)) is not None:
        dkind, rest = found
        if (why := dkind.name_problem(rest)) is not None:
            raise KeyError(why)
        return dkind.hparams_builder(rest)
    return lookup(registry, name, kind)


def check_component(kind: str, registry: Mapping[str, Callable], comp: Component, path: str,
                    file: str, errors: list[str]) -> None:
    """Append to ``errors`` one ``FILE: PATH...: message`` line per problem of entry ``comp`` of
    ``kind`` (model, optimizer, schedule, dataset) at key path ``path`` (see the module docstring)."""
    start = len(errors)
    if len(comp.name) > 200:
        errors.append(f"{file}: {path}.name: not a {kind} name ({len(comp.name):,} characters: "
                      f"{short_repr(comp.name, 60)}); `python -m harness list` shows the names")
        return
    try:
        builder = entry_builder(kind, registry, comp.name)
    except KeyError as e:
        errors.append(f"{file}: {path}.name: {e.args[0]}")
        return
    hps = builder_hparams(kind, builder)
    for k, raw in comp.hparams.items():
        if k not in hps:
            valid = ", ".join(hps) or "(none)"
            errors.append(f"{file}: {path}.hparams.{key_text(k)}: unknown hyperparameter of {kind} "
                          f"{comp.name!r}; valid: {valid}{did_you_mean(k[:200], list(hps))}"
                          + (_ORDER_HINT if kind == "dataset" and k == "order" else ""))
        elif (msg := _hparam_error(kind, k, raw, annotation_of(builder, hps[k]))) is not None:
            windows = kind == "dataset" and k == "order" and raw in ("random", "sequential")
            hint = _ORDER_HINT if windows else ""
            errors.append(f"{file}: {path}.hparams.{k}: {msg}{hint}")
    if kind == "optimizer" and len(errors) > start:  # the builder's own checks see the other keys
        refused = {k for k in comp.hparams
                   if any(f"{path}.hparams.{key_text(k)}:" in e for e in errors[start:])}
        errors.extend(builder_problems(builder, comp.hparams, refused, path, file))
    for name, hp in hps.items():
        if hp.required and name not in comp.hparams and kind == "optimizer" and comp.tuning == "none":
            errors.append(f"{file}: {path}.hparams: tuning: none runs {comp.name!r} with its "
                          f"defaults, but it has no default {name}; fix one here (hparams: "
                          f"{{{name}: ...}})")
        elif hp.required and name not in comp.hparams:
            errors.append(f"{file}: {path}.hparams: missing required hyperparameter {name!r} of "
                          f"{kind} {comp.name!r}")
    _check_zip(comp, path, file, errors)


def _hparam_error(kind: str, k: str, raw: Any, ann: Any) -> str | None:
    """The first problem of hyperparameter ``k``'s config value ``raw`` (one value, a grid or a
    distribution) for a builder argument annotated ``ann``, without its key path; else ``None``."""
    if ann is None and k in POSITIVE_HPARAMS:
        ann = float | int
    values = hparam_values(raw)
    of = ""
    if isinstance(values[0], search.Distribution):
        dist = values[0]
        of = f" ({'an option' if dist.kind == 'choice' else 'a bound'} of {dist})"
        if (msg := _distribution_error(kind, k, dist, ann)) is not None:
            return msg
        values = dist.values_to_check()
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**63:  # before the type:
            return f"{short_repr(v)} does not fit in 64 bits"  # 10**400 for a float is no float
        if ann is not None and (msg := type_error(v, ann)):
            if isinstance(raw, list) and (type_error(raw, ann) is None or _takes_sequence(ann)):
                msg += (f" (a list is a grid axis, so {short_repr(v, 40)} was read as one value of it; "
                        f"one list value is written {{value: [...]}})")
            return f"{msg}{of}"
        if k in POSITIVE_HPARAMS and is_num(v) and not v > 0:
            return f"must be > 0, got {short_repr(v)}{of}"
        if is_num(v) and not finite(v):
            return f"must be finite, got {short_repr(v)}{of}"
        if len(text := str(v)) > limits.MAX_PARAM_VALUE_CHARS:
            return (f"the value is {len(text):,} characters as text; MLflow keeps at most "
                    f"{limits.MAX_PARAM_VALUE_CHARS:,} in a param ({short_repr(v, 80)})")
    return None


def _check_zip(comp: Component, path: str, file: str, errors: list[str]) -> None:
    """Append one line per problem of entry ``comp``'s ``zip`` groups: a name not among its
    hparams, in two groups or a distribution; axes of unequal lengths."""
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
            elif search.is_distribution(comp.hparams[a]):
                errors.append(f"{file}: {path}.zip[{i}]: {a!r} is a distribution; only grid axes "
                              f"(lists, log_grid) can be zipped")
            else:
                lengths.add(hparam_count(comp.hparams[a]))
            seen.add(a)
        if len(lengths) > 1:
            errors.append(f"{file}: {path}.zip[{i}]: zipped axes must have equal lengths, got "
                          f"{sorted(lengths)}")


def _distribution_error(kind: str, name: str, dist: search.Distribution, ann: Any) -> str | None:
    """Why ``dist`` cannot be the value of hyperparameter ``name`` (annotation ``ann``) of a ``kind``
    builder, or None: datasets are never sampled; a discrete hyperparameter (one that takes no
    non-integer number) takes ``choice`` or, when it takes ints, ``int_uniform``."""
    if kind == "dataset":
        return (f"a dataset's hyperparameters cannot be sampled (distributions are for models, "
                f"optimizers and schedules); use a value or a list, got {dist}")
    if ann is None or dist.kind == "choice":
        return None
    takes_float = type_error(0.5, ann) is None
    takes_int = type_error(1, ann) is None
    if dist.produces_floats and not takes_float:
        if takes_int:
            return (f"{name} is discrete (an int): use {{int_uniform: [lo, hi]}} or {{choice: [...]}}, "
                    f"not {dist.kind}")
        return f"{name} is discrete: use {{choice: [...]}}, not {dist.kind}"
    if dist.kind == "int_uniform" and not takes_int:
        return f"{name} takes no integers: use {{choice: [...]}}, not int_uniform"
    return None


def canonicalize_numbers(cfg: SweepConfig, registries: Registries) -> SweepConfig:
    """``cfg`` with every int hyperparameter value turned into a float where the builder takes a
    float (its annotation, or its float default, accepts the float; ``step_size`` and
    ``learning_rate`` always), so that ``step_size: 1000`` and ``step_size: 1000.0`` give one
    trial id. Float values, ints of int-typed hyperparameters and ``{...}`` forms other than
    ``{value: N}`` are left as they are, so existing float-valued trial ids do not change."""
    kinds = (("models", "model", registries.models), ("optimizers", "optimizer", registries.optimizers),
             ("schedules", "schedule", registries.schedules), ("datasets", "dataset", registries.datasets))

    def takes_float(kind: str, reg: Mapping[str, Callable], comp: Component, k: str) -> bool:
        if k in POSITIVE_HPARAMS:
            return True
        builder = reg.get(comp.name)
        if builder is None:
            return False
        hp = builder_hparams(kind, builder).get(k)
        ann = annotation_of(builder, hp) if hp is not None else None
        return ann is not None and type_error(1.5, ann) is None

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



# --------------------------------------------------------------------------------------------
# Every problem of an entry whose builder stops at its first (the pre-flight's, and the checks above
# when they found some already).


def named_hparam(hp: Mapping[str, Any], msg: str) -> str | None:
    """The one hyperparameter of ``hp`` that ``msg`` names, or ``None`` (none, or several)."""
    named = [k for k in hp if re.search(rf"\b{re.escape(k)}\b", msg)]
    return named[0] if len(named) == 1 else None


def hp_path(path: str, hp: Mapping[str, Any], msg: str) -> str:
    """``path.hparams.K`` when the message names exactly one of the entry's hyperparameters ``K``."""
    k = named_hparam(hp, msg)
    return f"{path}.hparams" if k is None else f"{path}.hparams.{k}"


def exc_text(e: BaseException) -> str:
    """An exception's message as a config error line shows it (a ``KeyError``'s without quotes)."""
    if isinstance(e, KeyError) and e.args:
        return str(e.args[0])
    return str(e) or type(e).__name__


def builder_defaults(kind: str, builder: Any) -> dict[str, Any]:
    """The defaults of a builder's hyperparameters (``{}`` when its signature cannot be read)."""
    try:
        return {k: h.default for k, h in builder_hparams(kind, builder).items() if not h.required}
    except Exception:  # a builder whose signature cannot be read: only its first problem is known
        return {}


#: Valid values of required hyperparameters, put in place of a bad one only to find the entry's next
#: problem (``step_size: -1`` hid ``b1: 2.0``); never trained with.
STAND_IN = {"step_size": 1e-3}


def every_problem(attempt, hp: Mapping[str, Any], defaults: Mapping[str, Any], first: BaseException,
                  path: str) -> list[tuple[str, str]]:
    """``(key path, message)`` of each problem of one entry, whose builder stops at its first:
    ``first`` is what ``attempt(hp)`` raised; while a message names one hyperparameter that has a
    default, that one is set to its default and ``attempt`` runs again for the next problem (at most
    once per hyperparameter; a required ``step_size`` takes :data:`STAND_IN` instead)."""
    hp, e, out, done = dict(hp), first, [], set()
    stand_in = {**STAND_IN, **defaults}
    while True:
        k = named_hparam(hp, str(e))
        out.append((hp_path(path, hp, str(e)), exc_text(e)))
        if k is None or k in done or k not in stand_in or len(done) >= len(hp):
            return out
        done.add(k)
        hp[k] = stand_in[k]
        try:
            attempt(hp)
        except Exception as again:
            e = again
            continue
        return out


def builder_problems(builder: Callable, hp: Mapping[str, Any], skip: set[str], path: str,
                     file: str) -> list[str]:
    """The problems an optimizer's builder itself finds (``b1 must be in [0, 1)``) in an entry whose
    other keys (``skip``: unknown, mistyped or out of range, reported already) the checks above
    refused: those take their default or :data:`STAND_IN`, so the builder reaches the rest. Only
    single, concrete values are tried (a grid's first value, a distribution's bounds are checked
    at pre-flight); one ``FILE: PATH.hparams.K: message`` line each."""
    defaults = builder_defaults("optimizer", builder)
    stand_in = {**STAND_IN, **defaults}
    hp = {k: stand_in[k] if k in skip else v for k, v in hp.items() if k not in skip or k in stand_in}
    if any(isinstance(v, list | dict) for v in hp.values()):
        return []

    def attempt(h):
        check_ranges(builder, h)  # a drop-in builder takes any value, as the reference
        builder(**h)

    try:
        attempt(hp)
    except Exception as e:  # the builder's own check: report it and the ones after it
        return [f"{file}: {where}: {text}" for where, text in every_problem(attempt, hp, defaults, e, path)
                if not any(where == f"{path}.hparams.{k}" for k in skip)]
    return []
