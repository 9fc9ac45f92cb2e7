"""A user's source as a builder: an optimizer or model entry's ``source`` turned into a registry
builder, and the registries a trial trains with (:func:`registries_for`).

The config validator (:mod:`harness.config.optimizer_sources`, :mod:`harness.config.model_sources`)
checks every source with these builders before any write; the trainer builds the same ones from the
source a :class:`~harness.core.spec.TrialSpec` carries. An optimizer factory taking ``step_size`` is
the builder; one taking ``learning_rate`` (Optax) gets the step size under that name; an AlgoPerf
submission (``algoperf:PATH.py``) is checked from its syntax tree (:data:`ALGOPERF_REQUIRED`; no code
runs) and its stand-in builder carries the entry's hyperparameter names. Standard library only.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from harness.core.builders import Registries, did_you_mean
from harness.core.source import SourceError, SourceRef, load_module, source_of

__all__ = ["ALGOPERF_REQUIRED", "MODEL_INJECTED", "OPTIMIZER_FORMS", "as_step_size", "model_source_builder",
           "optimizer_form", "registries_for", "source_builder", "with_sources"]

#: The functions an AlgoPerf submission module must define (``prepare_for_eval`` is optional:
#: submissions written before AlgoPerf v0.6 lack it, and evaluate at the training parameters); the
#: one list of them (:mod:`harness.train.algoperf.submission` checks the loaded module against it).
ALGOPERF_REQUIRED = ("get_batch_size", "init_optimizer_state", "update_params", "data_selection")

#: What an optimizer factory may return, in words (error messages).
OPTIMIZER_FORMS = ("an (init_fun, update_fun, get_params) triple, a 4-tuple (init_fun, update_fun, "
          "get_params, eval_params) or an optax GradientTransformation")


def optimizer_form(obj: Any) -> str | None:
    """``"triple"``, ``"eval4"`` (a triple plus ``eval_params``) or ``"optax"`` (callable ``init``
    and ``update``) for what an optimizer factory returned; ``None`` for anything else."""
    if isinstance(obj, tuple) and len(obj) in (3, 4) and all(callable(f) for f in obj):
        return "triple" if len(obj) == 3 else "eval4"
    if callable(getattr(obj, "init", None)) and callable(getattr(obj, "update", None)):
        return "optax"
    return None


def _callables(mod: Any) -> list[str]:
    return sorted(n for n, v in vars(mod).items() if callable(v) and not n.startswith("_"))


def _factory(ref: SourceRef) -> Callable:
    mod = load_module(ref)
    fn = getattr(mod, ref.function, None)
    where = ref.filename if ref.is_file else f"module {ref.target!r}"
    if fn is None:
        raise SourceError(f"source {ref.text!r}: {where} has no {ref.function!r}"
                          f"{did_you_mean(ref.function, _callables(mod))}")
    if not callable(fn) or inspect.isclass(fn):
        what = "a class" if inspect.isclass(fn) else _a(type(fn).__name__)
        raise SourceError(f"source {ref.text!r}: {ref.function!r} in {where} is {what}, not a "
                          f"function returning an optimizer")
    return fn


def _a(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def as_step_size(fn: Callable, arg: str) -> Callable:
    """``builder(step_size, **hp) = fn(**{arg: step_size}, **hp)`` with ``fn``'s signature, ``arg``
    renamed ``step_size`` and moved first."""
    sig = inspect.signature(fn)
    first = sig.parameters[arg].replace(name="step_size", kind=inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if first.default is None:  # Optax's "no learning rate" (e.g. adafactor's own schedule): the
        first = first.replace(default=inspect.Parameter.empty)  # harness always passes one
    rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p.kind != p.VAR_KEYWORD else p
            for n, p in sig.parameters.items() if n != arg and p.kind != p.VAR_POSITIONAL]

    @functools.wraps(fn)
    def builder(step_size, **hp):
        return fn(**{arg: step_size}, **hp)

    builder.__signature__ = sig.replace(parameters=[first, *rest])  # type: ignore[attr-defined]
    return builder


def _check_submission(ref: SourceRef) -> None:
    """The AlgoPerf functions are defined at the top of the file (read from its syntax tree)."""
    try:
        tree = ast.parse(ref.code, ref.target)
    except SyntaxError as e:
        raise SourceError(f"source {ref.text!r}: {ref.filename} line {e.lineno}: syntax error: "
                          f"{e.msg}") from None
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Name)}
    defined |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    missing = [f for f in ALGOPERF_REQUIRED if f not in defined]
    if missing:
        raise SourceError(f"source {ref.text!r}: {ref.filename} is not an AlgoPerf submission: it "
                          f"defines no {', '.join(missing)} (AlgoPerf's JAX API needs "
                          f"{', '.join(ALGOPERF_REQUIRED)})")


def _algoperf_builder(ref: SourceRef, names: tuple[str, ...]) -> Callable:
    """A stand-in builder whose keyword hyperparameters are ``names`` (never called to train:
    the trainer runs the submission itself)."""

    def submission(**hp):
        raise TypeError(f"{ref.text} is an AlgoPerf submission; the trainer runs it with its own loop")

    params = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None) for n in names]
    submission.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    submission.__doc__ = f"AlgoPerf submission {ref.text}"
    return submission


@functools.lru_cache(maxsize=64)
def _cached_builder(ref: SourceRef, names: tuple[str, ...]) -> Callable:
    if ref.kind == "algoperf":
        _check_submission(ref)
        return _algoperf_builder(ref, names)
    fn = _factory(ref)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        raise SourceError(f"source {ref.text!r}: {ref.function!r} has no readable signature") from None
    if "step_size" in params:
        first = next(iter(params))
        return fn if first == "step_size" else as_step_size(fn, "step_size")
    if "learning_rate" in params:
        return as_step_size(fn, "learning_rate")
    raise SourceError(f"source {ref.text!r}: {ref.function}({', '.join(params)}) takes no step_size "
                      f"(or learning_rate): the harness passes each trial's step size (or its "
                      f"schedule) as that argument")


def source_builder(ref: SourceRef, hparam_names: tuple[str, ...] = (),
                   limit_s: float | None = None) -> Callable:
    """The builder of ``ref`` (cached per source and digest). ``hparam_names`` are the
    hyperparameters of an AlgoPerf submission (its config entry's); ignored otherwise. Importing
    the file runs under :func:`harness.core.source.bounded` with ``limit_s`` seconds (the config's
    ``source_timeout_s``; ``None`` in a worker: the pre-flight saw it return).

    Raises:
      SourceError: the module cannot be imported or its file raised; the function is missing (with
        did-you-mean over the module's callables) or not callable; it takes neither ``step_size``
        nor ``learning_rate``; an AlgoPerf file lacks a function of the API; an accident of the
        import (past the limit, ``os._exit``, a ``KeyboardInterrupt``, a change of directory).
    """
    if limit_s is not None and ref.kind != "algoperf":  # imported here, bounded; then cached
        load_module(ref, limit_s)
    return _cached_builder(ref, tuple(hparam_names) if ref.kind == "algoperf" else ())


#: What the harness passes a model factory (never a hyperparameter).
MODEL_INJECTED = ("input_shape", "num_classes")


def _model_factory(ref: SourceRef) -> Callable:
    mod = load_module(ref)
    fn = getattr(mod, ref.function, None)
    where = ref.filename if ref.is_file else f"module {ref.target!r}"
    if fn is None:
        names = sorted(n for n, v in vars(mod).items() if callable(v) and not n.startswith("_"))
        raise SourceError(f"source {ref.text!r}: {where} has no {ref.function!r}"
                          f"{did_you_mean(ref.function, names)}")
    if not callable(fn) or inspect.isclass(fn):
        raise SourceError(f"source {ref.text!r}: {ref.function!r} in {where} is not a function "
                          f"returning a model")
    return fn


@functools.lru_cache(maxsize=64)
def _cached_model(ref: SourceRef, name: str, as_model: Callable) -> Callable:
    fn = _model_factory(ref)
    sig = inspect.signature(fn)
    takes = {k for k in MODEL_INJECTED if k in sig.parameters}
    takes_any = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
    hps = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for k, p in sig.parameters.items()
           if k not in MODEL_INJECTED and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def builder(*, input_shape, num_classes=None, **hp):
        given = {"input_shape": tuple(input_shape), "num_classes": num_classes}
        kw = {k: v for k, v in given.items() if k in takes or takes_any}
        obj = fn(**kw, **hp)
        try:
            return as_model(obj, name=name, input_shape=tuple(input_shape), hparams=dict(hp))
        except ValueError as e:
            raise ValueError(f"{ref.function} (source {ref.text!r}): {e}") from None

    injected = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=None) for k in MODEL_INJECTED]
    builder.__signature__ = inspect.Signature(injected + hps)  # type: ignore[attr-defined]
    builder.__doc__ = fn.__doc__
    builder.__name__ = name
    return builder


def model_source_builder(ref: SourceRef, name: str, as_model: Callable,
                         limit_s: float | None = None) -> Callable:
    """The zoo-style builder ``builder(*, input_shape, num_classes, **hparams) -> ModelDef`` of
    ``ref`` (cached per source and digest).

    Args:
      ref: the model entry's source. name: the model's name.
      as_model: ``models.custom.as_model`` (what the factory returned, as a ``ModelDef``).
      limit_s: seconds the import may take (bounded as an optimizer's source; ``None`` in a worker).

    Raises:
      SourceError: the module cannot be imported; the function is missing or not a function.
    """
    if limit_s is not None:
        load_module(ref, limit_s)
    return _cached_model(ref, name, as_model)


def with_sources(reg: Registries, builders: Mapping[str, Callable],
                 models: Mapping[str, Callable] | None = None) -> Registries:
    """``reg`` with ``builders`` added to its optimizers and ``models`` to its models (``reg``
    itself when there are none)."""
    if not builders and not models:
        return reg
    return Registries({**reg.models, **(models or {})}, {**reg.optimizers, **builders}, reg.schedules,
                      reg.datasets)


_FOR_SPEC: dict[tuple, Registries] = {}


def registries_for(spec: Any, base: Registries, as_model: Callable) -> Registries:
    """The registries ``spec`` trains with: ``base`` plus the builders of the sources ``spec``
    carries (optimizer, model), if any. The same object for the same sources, so that compiled
    programs cached by registry identity are reused.

    Args:
      spec: a :class:`~harness.core.spec.TrialSpec`. base: the project's registries.
      as_model: ``models.custom.as_model`` (for a model source).
    """
    reg = base
    ref, mref = source_of(spec), source_of(spec, "model")
    if ref is None and mref is None:
        return reg
    names = tuple(k for k, _ in spec.optimizer_hparams)
    key = (id(reg.optimizers), spec.optimizer, ref and (ref.target, ref.file_digest or ref.digest), names,
           spec.model, mref and (mref.target, mref.file_digest or mref.digest))
    out = _FOR_SPEC.get(key)
    if out is None:
        opt = {spec.optimizer: source_builder(ref, names)} if ref is not None else {}
        model = {spec.model: model_source_builder(mref, spec.model, as_model)} if mref is not None else {}
        out = _FOR_SPEC[key] = with_sources(reg, opt, model)
    return out
