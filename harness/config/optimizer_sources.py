"""A user's optimizer as a builder: the ``source`` of an optimizer entry, resolved and checked.

An optimizer entry with a ``source`` (:mod:`harness.core.source` parses it) names a *factory*; this
module turns it into a **builder** like the registered ones, ``builder(step_size, **hparams)``,
whose keyword hyperparameters are read from the factory's signature exactly as for built-ins
(validation, did-you-mean, distributions, ``--dry-run``, ``list``):

* a factory taking ``step_size`` is the builder (called with the step size by keyword when it is
  not the first argument);
* a factory taking ``learning_rate`` (Optax's name: every ``optax:NAME`` and
  ``optax.contrib:NAME``) gets it under the harness's name: the builder's first argument is
  ``step_size`` (a float, a traced scalar, or a schedule callable, which Optax accepts), passed on
  as ``learning_rate``;
* a factory with neither is an error.

What the factory returns decides the form (:func:`optimizer_form`): an ``(init_fun, update_fun,
get_params)`` triple (this project's ``optimizers.optimizer``, ``jax.example_libraries``' own, or
any three callables of that contract), a 4-tuple whose fourth member is ``eval_params(opt_state)``
(the evaluation hook), or an Optax ``GradientTransformation``.

An AlgoPerf submission (``algoperf:PATH.py``) is a module, not a factory: it is checked here by
reading its syntax tree (a syntax error; the functions AlgoPerf's API requires, :data:`ALGOPERF_REQUIRED`;
no code of it runs at load, which must not import the trainer's ``algoperf`` stand-ins), and its
hyperparameters are the names its config entry gives (AlgoPerf passes them as a namedtuple). The
pre-flight then runs the file as a worker will, with the bounds of every user file, and checks its
API (:func:`harness.orchestrate.preflight.submission_problem`): a module it imports that is not
installed is refused there, before anything is written.

:func:`resolve_sources` resolves every sourced entry of a config (errors are config errors: one
line with file and key path, before anything is written); :func:`with_sources` overlays the
resulting builders on the registries; :func:`registries_for` does the same in a worker from the
source a :class:`~harness.core.spec.TrialSpec` carries.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from harness.config.registries import Registries, default_registries
from harness.config.source_entries import config_grids, resolve_entries
from harness.core.builders import did_you_mean
from harness.core.source import (
    DEFAULT_TIMEOUT_S,
    SourceError,
    SourceRef,
    bounded,
    load_module,
    parse_source,
    source_of,
)

__all__ = ["ALGOPERF_REQUIRED", "optax_optimizers", "optimizer_form", "probe_sources", "registries_for",
           "resolve_sources", "source_builder", "with_sources"]

#: The functions an AlgoPerf submission module must define (``prepare_for_eval`` is optional:
#: submissions written before AlgoPerf v0.6 lack it, and evaluate at the training parameters); the
#: one list of them (:mod:`harness.train.algoperf.submission` checks the loaded module against it).
ALGOPERF_REQUIRED = ("get_batch_size", "init_optimizer_state", "update_params", "data_selection")

_FORMS = ("an (init_fun, update_fun, get_params) triple, a 4-tuple (init_fun, update_fun, "
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


def _renamed(fn: Callable, arg: str) -> Callable:
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
        return fn if first == "step_size" else _renamed(fn, "step_size")
    if "learning_rate" in params:
        return _renamed(fn, "learning_rate")
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


def _probe(ref: SourceRef, builder: Callable, hparams: Mapping[str, Any],
           limit_s: float | None = DEFAULT_TIMEOUT_S) -> None:
    """Call the builder once with concrete values (``hparams``: one value per hyperparameter the
    entry sets), bounded (:func:`harness.core.source.bounded`, ``limit_s``), and check what it
    returns."""
    from harness.config.search import Distribution
    from harness.config.values import hparam_values

    def first(raw: Any) -> Any:
        v = hparam_values(raw)[0]
        return v.values_to_check()[0] if isinstance(v, Distribution) else v

    hp = {k: first(v) for k, v in hparams.items()}
    lr = hp.pop("step_size", None)
    if lr is None:
        first_param = next(iter(inspect.signature(builder).parameters.values()))
        lr = first_param.default if first_param.default is not inspect.Parameter.empty else 1e-3
    call = f"{ref.function}(step_size={lr!r}{''.join(f', {k}={v!r}' for k, v in hp.items())})"
    try:
        with bounded(f"source {ref.text!r}: {call}", limit_s, ref.target if ref.is_file else ""):
            obj = builder(lr, **hp)
    except SourceError:
        raise
    except (Exception, SystemExit) as e:
        raise SourceError(f"source {ref.text!r}: {call} raised {type(e).__name__}: {e}") from None
    if optimizer_form(obj) is None:
        raise SourceError(f"source {ref.text!r}: {ref.function} returned {type(obj).__name__}; "
                          f"expected {_FORMS}")


def resolve_sources(cfg: Any, file: str, base_dir: str) -> tuple[dict[str, Callable], list[str]]:
    """Parse, load and check the ``source`` of every optimizer entry of ``cfg`` (top level and
    ``include``); each entry's :class:`SourceRef` is stored on it (``comp.source_ref``).

    Returns ``({optimizer name: builder}, error lines)``; an error line is
    ``FILE: optimizers[i].source: message``. Entries that share a name must share the source, and
    a sourced name may not be a registered optimizer's.
    """
    from optimizers import OPTIMIZERS

    limit_s = getattr(cfg, "source_timeout_s", DEFAULT_TIMEOUT_S)

    def build(ref: SourceRef, comp: Any, grid: Any) -> Callable:
        builder = source_builder(ref, tuple(comp.hparams), limit_s)
        scheds = [c.name for c in (grid.schedules or cfg.schedules or [])]
        if ref.kind == "algoperf" and any(n not in ("constant", "none") for n in scheds):
            raise SourceError(f"an AlgoPerf submission schedules its own step size; this grid also has "
                              f"schedules {', '.join(scheds)}: give the submission an include: entry of "
                              f"its own with schedules: [constant]")
        return builder

    return resolve_entries(cfg, file, "optimizers", OPTIMIZERS, "a built-in optimizer",
                           lambda text: parse_source(text, base_dir), build)


def probe_sources(cfg: Any, file: str) -> list[str]:
    """Call each resolved factory of ``cfg`` once with concrete values (the first value of each
    hyperparameter its entry sets; run after the hyperparameters were validated) and check that it
    returns an optimizer (:func:`optimizer_form`). Returns one ``FILE: KEY.PATH: message`` line per
    factory that raises or returns something else."""
    errors: list[str] = []
    limit_s = getattr(cfg, "source_timeout_s", DEFAULT_TIMEOUT_S)
    for prefix, grid in config_grids(cfg):
        for j, comp in enumerate(grid.optimizers or []):
            ref = comp.source_ref
            if ref is None or ref.kind == "algoperf":
                continue
            try:
                _probe(ref, source_builder(ref, (), limit_s), comp.hparams, limit_s)
            except SourceError as e:
                errors.append(f"{file}: {prefix}optimizers[{j}].source: {e}")
    return errors


def with_sources(reg: Registries, builders: Mapping[str, Callable],
                 models: Mapping[str, Callable] | None = None) -> Registries:
    """``reg`` with ``builders`` added to its optimizers and ``models`` to its models (``reg``
    itself when there are none)."""
    if not builders and not models:
        return reg
    return Registries({**reg.models, **(models or {})}, {**reg.optimizers, **builders}, reg.schedules,
                      reg.datasets)


_FOR_SPEC: dict[tuple, Registries] = {}


def registries_for(spec: Any, base: Registries | None = None) -> Registries:
    """The registries a worker trains ``spec`` with: ``base`` (the default registries) plus the
    builder of the source ``spec`` carries, if any. The same object for the same source, so that
    compiled programs cached by registry identity are reused."""
    from harness.config.model_sources import model_source_builder

    reg = base or default_registries()
    ref, mref = source_of(spec), source_of(spec, "model")
    if ref is None and mref is None:
        return reg
    names = tuple(k for k, _ in spec.optimizer_hparams)
    key = (id(reg.optimizers), spec.optimizer, ref and (ref.target, ref.file_digest or ref.digest), names,
           spec.model, mref and (mref.target, mref.file_digest or mref.digest))
    out = _FOR_SPEC.get(key)
    if out is None:
        opt = {spec.optimizer: source_builder(ref, names)} if ref is not None else {}
        model = {spec.model: model_source_builder(mref, spec.model)} if mref is not None else {}
        out = _FOR_SPEC[key] = with_sources(reg, opt, model)
    return out


def optax_optimizers() -> dict[str, Callable]:
    """Every public function of ``optax`` and ``optax.contrib`` that takes a ``learning_rate``, as
    ``{"optax:adam": builder, "optax.contrib:muon": builder, ...}`` (sorted; the builders as a
    ``source:`` of that text gets them, ``learning_rate`` renamed ``step_size``).

    Raises:
      ImportError: optax is not installed (the message says what to install).
    """
    try:
        import optax
        import optax.contrib
    except ImportError as e:
        raise ImportError("listing Optax's optimizers needs optax: pip install 'optax==0.2.8'") from e
    out: dict[str, Callable] = {}
    for modname, mod in (("optax", optax), ("optax.contrib", optax.contrib)):
        for n in sorted(dir(mod)):
            fn = getattr(mod, n, None)
            if n.startswith("_") or not inspect.isfunction(fn):
                continue
            try:
                params = inspect.signature(fn).parameters
            except (TypeError, ValueError):
                continue
            if "learning_rate" in params:
                out[f"{modname}:{n}"] = _renamed(fn, "learning_rate")
    return out
