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
from types import SimpleNamespace
from typing import Any

from harness.config.source_entries import resolve_entries
from harness.core.source import SourceError, SourceRef, bounded, parse_source, source_of
from harness.core.source_builders import model_source_builder as core_model_source_builder

__all__ = ["model_source_builder", "resolve_model_sources", "sourced_model_params"]


def model_source_builder(ref: SourceRef, name: str, limit_s: float | None = None) -> Callable:
    """:func:`harness.core.source_builders.model_source_builder` with ``models.custom.as_model``."""
    from models.custom import as_model

    return core_model_source_builder(ref, name, as_model, limit_s)


def _outputs_wanted(task: str, input_shape: tuple, num_classes: int | None) -> tuple:
    """The outputs' shape a model of ``task`` returns for a batch of 2 (``ModelDef``'s contract)."""
    if task == "classification":
        return (2, num_classes)
    if task == "sequence":
        return (2, *input_shape, num_classes)
    return (2, *input_shape)


def sourced_model_params(builder: Callable, hparams: dict, ds: Any, spec: Any, limit_s: float | None):
    """The parameter shapes of trial ``spec``'s sourced model on dataset ``ds``: built, initialised
    and applied once in training mode on a batch of 2 (``jax.eval_shape``, no compute), all within
    ``limit_s`` seconds.

    Raises:
      SourceError: the factory, ``init`` or ``apply`` ran past ``limit_s`` (an accident of
        :func:`harness.core.source.bounded`).
      ValueError: outputs of another shape than the model's task gives: ``(2, num_classes)``,
        ``(2, T, vocab)`` or the inputs' shape. Anything the factory, ``init`` or ``apply`` raised.
    """
    import jax
    import jax.numpy as jnp

    shape, ref = tuple(ds.input_shape), source_of(spec, "model")
    with bounded(f"source {ref.text!r}: building, initialising and applying {ref.function!r} once", limit_s,
                 ref.target if ref.is_file else ""):
        model = builder(input_shape=shape, num_classes=ds.num_classes, **hparams)

        def once(k, x):
            _, params, state = model.init(k, x.shape)
            return params, model.apply(params, state, x, rng=k, train=True)[0]

        x = jax.ShapeDtypeStruct((2, *shape), jnp.dtype(model.input_dtype))
        params, out = jax.eval_shape(once, jax.ShapeDtypeStruct((2,), jnp.uint32), x)
    want = _outputs_wanted(model.task, shape, ds.num_classes)
    got = tuple(getattr(out, "shape", ()))
    if got != want:
        raise ValueError(f"its apply returned outputs of shape {got or type(out).__name__} for inputs "
                         f"{(2, *shape)}; a {model.task} model on this dataset returns {want}")
    return params


def resolve_model_sources(cfg: Any, file: str, base_dir: str) -> tuple[dict[str, Callable], list[str]]:
    """Parse and load the ``source`` of every model entry of ``cfg`` (top level and ``include``),
    storing each :class:`SourceRef` on its entry. Returns ``({model name: builder}, error lines)``,
    a line ``FILE: models[i].source: message``; a ``define_workloads`` entry's model too
    (``define_workloads.NAME.model.source``). A sourced name may not be a zoo model's, and
    entries that share a name share the source; ``optax:``/``algoperf:`` are optimizers only."""
    from models.zoo import MODELS

    def parse(text: Any) -> SourceRef:
        ref = parse_source(text, base_dir)
        if ref.kind not in ("path", "module"):
            raise SourceError(f"source {ref.text!r}: a model's source is PATH.py:FUNCTION or "
                              f"package.module:FUNCTION")
        return ref

    limit_s = getattr(cfg, "source_timeout_s", None)
    build = lambda ref, comp, grid: model_source_builder(ref, comp.name, limit_s)  # noqa: E731
    builders, errors = resolve_entries(cfg, file, "models", MODELS, "a zoo model", parse, build)
    for name, d in (getattr(cfg, "define_workloads", None) or {}).items():  # a defined workload's model
        if d.model.source is None:
            continue
        one = SimpleNamespace(models=[d.model], include=[])
        got, bad = resolve_entries(one, file, "models", MODELS, "a zoo model", parse, build)
        builders.update(got)
        errors += [e.replace(f"{file}: models[0].source", f"{file}: define_workloads.{name}.model.source", 1)
                   for e in bad]
    return builders, errors
