"""The update step's recipe keys of a config (``grad_clip``, ``grad_accum``, ``param_groups``,
``loss_reduction``): a trial's ``recipe`` pairs and the one rule that refuses them where they cannot
apply."""

from __future__ import annotations

import functools
import json
from typing import Any

__all__ = ["claim_of", "recipe_fields", "recipe_problem"]


def claim_of(target: Any) -> dict[str, float]:
    """A trial's ``claim`` (``TrialSpec.claim``): a target's claim rules (``{}``: none asked)."""
    c = getattr(target, "claim", None)
    return {} if c is None else {"margin": c.margin,
                                 **({"single_run": c.single_run} if c.single_run is not None else {})}


def recipe_fields(cfg: Any) -> dict[str, Any]:
    """A trial's ``recipe`` (``TrialSpec.recipe``): the config's recipe keys not at their defaults."""
    groups = [[[g.rules] if isinstance(g.rules, str) else list(g.rules), g.step_size_scale, g.weight_decay,
               *([dict(g.hparams)] if g.hparams else [])] for g in cfg.param_groups]
    return {**({"grad_clip": cfg.grad_clip} if cfg.grad_clip is not None else {}),
            **({"grad_accum": cfg.grad_accum} if cfg.grad_accum != 1 else {}),
            **({"param_groups": groups} if groups else {}),
            **({"loss_reduction": cfg.loss_reduction} if cfg.loss_reduction != "mean" else {})}


@functools.lru_cache(maxsize=64)
def _model_task(model: str, hp_json: str, dataset: str, ds_json: str) -> str:
    from harness.data.sources import load_dataset
    from models.zoo import MODELS

    ds = load_dataset(dataset, **json.loads(ds_json))
    return MODELS[model](input_shape=ds.input_shape, num_classes=ds.num_classes, **json.loads(hp_json)).task


def _reduction_problem(spec: Any, model_path: str) -> str | None:
    """Why ``loss_reduction: sum`` cannot apply to ``spec``'s model: it has no token loss."""
    try:
        task = _model_task(spec.model, json.dumps(spec.hparams("model"), sort_keys=True), spec.dataset,
                           json.dumps(spec.hparams("dataset"), sort_keys=True))
    except (KeyError, ValueError, TypeError):  # a source's model, or values the model check refuses
        return None
    if task == "sequence":
        return None
    return (f"loss_reduction: sum needs a model with a token loss (a sequence model); {model_path} "
            f"({spec.model}) is a {task} model")


@functools.lru_cache(maxsize=64)
def _abstract_params(model: str, hp_json: str, dataset: str, ds_json: str) -> Any:
    import jax

    from harness.data.sources import load_dataset
    from models.zoo import MODELS

    ds = load_dataset(dataset, **json.loads(ds_json))
    m = MODELS[model](input_shape=ds.input_shape, num_classes=ds.num_classes, **json.loads(hp_json))
    return jax.eval_shape(lambda k: m.init(k, (1, *ds.input_shape)), jax.random.key(0))[1]


def _group_hparams_problem(hp: dict[str, Any], spec: Any, optimizer_path: str) -> str | None:
    """``KEY: reason`` for a group hyperparameter the trial's optimizer has not, or whose value its
    annotation refuses; None when all fit (a ``source:`` optimizer's: checked when its trial builds)."""
    from harness.config.hparams import annotation_of, type_error
    from harness.core.builders import did_you_mean, hyperparameters
    from optimizers import OPTIMIZERS

    builder = None if spec.optimizer_source else OPTIMIZERS.get(spec.optimizer)
    if builder is None:
        return None
    known = {k: h for k, h in hyperparameters(builder).items() if k not in ("step_size", "learning_rate")}
    for key, v in hp.items():
        if key not in known:
            return (f"{key}: not a hyperparameter of optimizer {spec.optimizer!r} ({optimizer_path}); valid: "
                    f"{', '.join(known)}{did_you_mean(key[:200], list(known))}")
        if (msg := type_error(v, annotation_of(builder, known[key]))) is not None:
            return f"{key}: {msg}"
    return None


def _groups_problem(cfg: Any, spec: Any, optimizer_path: str, wd_param: bool) -> str | None:
    from optimizers.groups import group_masks

    for k, g in enumerate(cfg.param_groups):
        if g.weight_decay is not None and not wd_param:
            return (f"param_groups[{k}].weight_decay: optimizer {spec.optimizer!r} ({optimizer_path}) "
                    f"has no weight_decay hyperparameter")
        if g.hparams and (why := _group_hparams_problem(g.hparams, spec, optimizer_path)) is not None:
            return f"param_groups[{k}].hparams.{why}"
    try:
        params = _abstract_params(spec.model, json.dumps(spec.hparams("model"), sort_keys=True), spec.dataset,
                                  json.dumps(spec.hparams("dataset"), sort_keys=True))
    except KeyError:  # a model only a source provides: checked when the trial initialises
        return None
    except (ValueError, TypeError):  # a model its values cannot build: the pre-flight's model check
        return None  # names its key path (models[i]) and the reason
    try:
        group_masks(params, {f"param_groups[{k}]": g.rules for k, g in enumerate(cfg.param_groups)})
    except ValueError as e:
        return f"param_groups: {spec.model} ({optimizer_path}): {e}"
    return None


def recipe_problem(cfg: Any, batch_size: int, optimizer_path: str, spec: Any,
                   model_path: str = "models") -> str | None:
    """Why the config's recipe cannot apply to trial ``spec`` (its optimizer entry at
    ``optimizer_path``, its model's at ``model_path``): a key path and the reason, or None.
    Parameter groups are checked on the model's parameters, built abstractly; a group's
    ``weight_decay`` against a registered optimizer's signature (a ``source:`` factory that refuses
    it fails its trial); ``loss_reduction: sum`` on the model's task (a ``source:`` model's when its
    trial builds it)."""
    import inspect

    from optimizers import OPTIMIZERS

    source = spec.optimizer_source
    builder = None if source else OPTIMIZERS.get(spec.optimizer)
    wd_param = builder is None or "weight_decay" in inspect.signature(builder).parameters
    if cfg.param_groups and (why := _groups_problem(cfg, spec, optimizer_path, wd_param)) is not None:
        return why
    if cfg.loss_reduction == "sum" and not spec.model_source and \
            (why := _reduction_problem(spec, model_path)) is not None:
        return why
    if batch_size % cfg.grad_accum:
        return (f"grad_accum: {cfg.grad_accum} micro-batches do not divide batch_size {batch_size} "
                f"(each micro-batch must have as many examples)")
    if recipe_fields(cfg) and source.startswith("algoperf:"):
        return (f"{optimizer_path}.source: an AlgoPerf submission runs its own update step; grad_clip, "
                f"grad_accum and loss_reduction do not apply to it")
    return None
