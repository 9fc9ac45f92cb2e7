"""A config's optimizer sources resolved and checked, before anything is written.

:func:`resolve_sources` parses and loads every ``source`` of an optimizer entry into a builder
(:mod:`harness.core.source_builders`: the builder forms, AlgoPerf submissions read from their
syntax tree); errors are config errors, one line with file and key path. :func:`probe_sources` calls
each factory once with concrete values; :func:`trial_registries` gives the registries a trial's
sources add (with the project's as base); :func:`optax_optimizers` lists Optax's optimizers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from harness.config.registries import Registries, default_registries
from harness.config.source_entries import config_grids, resolve_entries
from harness.core.source import (
    DEFAULT_TIMEOUT_S,
    SourceError,
    SourceRef,
    bounded,
    parse_source,
)
from harness.core.source_builders import (
    ALGOPERF_REQUIRED,
    OPTIMIZER_FORMS,
    as_step_size,
    optimizer_form,
    source_builder,
    with_sources,
)
from harness.core.source_builders import registries_for as core_registries_for

__all__ = ["ALGOPERF_REQUIRED", "optax_optimizers", "optimizer_form", "probe_sources", "resolve_sources",
           "source_builder", "trial_registries", "with_sources"]


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
        raise SourceError(f"source {ref.text!r}: {ref.function} returned {_form_text(obj)}; "
                          f"expected {OPTIMIZER_FORMS}")


def _form_text(obj: Any) -> str:
    """What a factory returned, for a message: ``a 2-tuple``, ``a list of 3``, ``int``."""
    if isinstance(obj, (tuple, list)):
        return f"a {len(obj)}-tuple" if isinstance(obj, tuple) else f"a list of {len(obj)}"
    return type(obj).__name__


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


def trial_registries(spec: Any, base: Registries | None = None) -> Registries:
    """The registries a worker trains ``spec`` with: ``base`` (default: the project's) plus the
    builders of its sources (:func:`harness.core.source_builders.registries_for`)."""
    from models.custom import as_model

    return core_registries_for(spec, base or default_registries(), as_model)


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
                out[f"{modname}:{n}"] = as_step_size(fn, "learning_rate")
    return out
