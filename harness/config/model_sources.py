"""A user's model as a builder: the ``source`` of a model entry, resolved (config step 1).

A model entry may name a factory outside the zoo, as an optimizer entry does::

    models:
      - {name: my_net, source: "my_nets.py:my_net", hparams: {width: 64}}   # a file
      - {name: net2, source: "mypkg.nets:make"}                             # an importable module

The factory is called as ``factory(*, input_shape, num_classes, **hparams)`` (keyword arguments it
does not declare are not passed; its other parameters are the entry's hyperparameters, checked
against its signature as a zoo builder's) and returns a stax ``(init_fun, apply_fun)`` pair, a
``flax.linen.Module`` (both: a classification model) or a :class:`models.zoo.ModelDef`
(:func:`models.custom.custom_model` makes one for a sequence or reconstruction model). The
pre-flight builds it on every dataset before any write, like a zoo model; its digest
(:func:`harness.core.source.code_digest` of what the factory reaches) joins the trial id
(``TrialSpec.model_source_hash``) and the file's text travels with the trial.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.core.source import SourceError, SourceRef, parse_source
from harness.core.source_builders import model_source_builder as core_model_source_builder

__all__ = ["model_source_builder", "resolve_model_sources"]

def model_source_builder(ref: SourceRef, name: str, limit_s: float | None = None) -> Callable:
    """:func:`harness.core.source_builders.model_source_builder` with ``models.custom.as_model``."""
    from models.custom import as_model

    return core_model_source_builder(ref, name, as_model, limit_s)


def resolve_model_sources(cfg: Any, file: str, base_dir: str) -> tuple[dict[str, Callable], list[str]]:
    """Parse and load the ``source`` of every model entry of ``cfg`` (top level and ``include``),
    storing each :class:`SourceRef` on its entry. Returns ``({model name: builder}, error lines)``,
    a line ``FILE: models[i].source: message``. A sourced name may not be a zoo model's, and
    entries that share a name share the source; ``optax:``/``algoperf:`` are optimizers only."""
    from models.zoo import MODELS

    builders: dict[str, Callable] = {}
    refs: dict[str, SourceRef] = {}
    errors: list[str] = []
    limit_s = getattr(cfg, "source_timeout_s", None)
    grids = [("", cfg)] + [(f"include[{i}].", g) for i, g in enumerate(cfg.include)]
    for prefix, grid in grids:
        for j, comp in enumerate(grid.models or []):
            if comp.source is None:
                continue
            where = f"{file}: {prefix}models[{j}].source"
            if comp.name in MODELS:
                errors.append(f"{where}: {comp.name!r} is a zoo model; give your source entry a name "
                              f"of its own (e.g. 'my_{comp.name}')")
                continue
            try:
                ref = parse_source(comp.source, base_dir)
                if ref.kind not in ("path", "module"):
                    raise SourceError(f"source {ref.text!r}: a model's source is PATH.py:FUNCTION or "
                                      f"package.module:FUNCTION")
                old = refs.get(comp.name)
                if old is not None and (old.text, old.digest) != (ref.text, ref.digest):
                    errors.append(f"{where}: entries named {comp.name!r} have different sources "
                                  f"({old.text!r}, {ref.text!r}); name them apart")
                    continue
                builders[comp.name] = model_source_builder(ref, comp.name, limit_s)
            except SourceError as e:
                errors.append(f"{where}: {e}")
                continue
            comp.set_source_ref(ref)
            refs[comp.name] = ref
    return builders, errors
