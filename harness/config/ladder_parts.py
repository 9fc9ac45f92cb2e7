"""A config's ``ladder:`` (:mod:`harness.config.ladder_schema`) as plain parts, one per rung and
data budget.

:func:`ladder_parts` is what :func:`harness.config.workloads.config_parts` returns for a config
with a ladder: each (size, tokens-per-parameter) pair becomes the workload's part with the size's
model hyperparameters, a step budget from the ratio, ``eval_every = max(1, steps // evals)`` and
each optimizer entry's hyperparameters after its ``transfer`` rule. The parts expand to ordinary
trials (:func:`harness.plan.expansion.expand_parts`): trial ids, resume and MLflow as any sweep;
each trial's origin carries its :class:`harness.core.ladder.Rung` (run tags ``ladder.*``).

**Counts.** ``N`` is the number of parameters of the model's ``init`` (every array, embeddings
included; ``jax.eval_shape``, nothing computed), ``T`` the dataset's tokens per example (a window's
targets, ``input_shape[0]``), and ``steps = round(ratio · N / (batch · T))``, so the
tokens trained on, ``D = steps · batch · T``, are the ratio's up to rounding. A budget of zero
steps, or of more tokens than the training split holds (a second pass is not new data), is
refused, keyed on its ratio. Estimated FLOPs:
:attr:`harness.core.ladder.Rung.flops`. The dataset is loaded (memoised) to read ``T``.

**Transfer** (:class:`~harness.config.ladder_schema.TransferRule`): ``per_rung`` (the default)
keeps the entry as written, so its grid or search runs at every rung ("tuned at every scale");
``fixed`` and ``mup`` need each transferred hyperparameter to be one value (the one tuned at the
base size; a grid or a distribution would tune it again), and ``mup`` scales ``step_size`` by
``(base_width / width)^exponent``. A ``baseline_tokens_per_param`` budget's parts hold the
baseline's entries only. Transferring from the base rung's *measured* optimum within one
invocation is not done here (it needs the base rung's results before the others expand).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from harness.config.errors import ConfigError
from harness.config.ladder_schema import LadderCfg, TransferRule
from harness.config.limits import MAX_STEPS
from harness.config.schema import Budget, Component, SweepConfig, TargetCfg
from harness.config.search import is_distribution
from harness.config.values import hparam_count
from harness.core.ladder import Rung

__all__ = ["dataset_hparams", "ladder_parts", "model_counts", "rungs", "size_text", "transfer_hparams"]


def size_text(size: dict[str, Any]) -> str:
    """``{width: 32, depth: 2}`` → ``"width=32, depth=2"``."""
    return ", ".join(f"{k}={v}" for k, v in size.items())


@functools.lru_cache(maxsize=256)
def model_counts(family: str, hp_json: str, ds_name: str, ds_json: str
                  ) -> tuple[int, int, float | None, int]:
    """``(N, T, forward FLOPs per example or None, training tokens)`` of ``family`` with
    hyperparameters ``hp_json`` on the dataset (both canonical JSON)."""
    import jax
    import numpy as np

    from harness.data.sources import load_dataset
    from models.zoo import MODELS

    ds = load_dataset(ds_name, **json.loads(ds_json))
    model = MODELS[family](input_shape=ds.input_shape, num_classes=ds.num_classes, **json.loads(hp_json))
    params = jax.eval_shape(lambda k: model.init(k, (1, *ds.input_shape)), jax.random.key(0))[1]
    n = int(sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(params)))
    try:
        fwd = model.flops_per_example(ds.input_shape)
    except Exception:  # a model whose count fails: 6ND instead (Rung.flops)
        fwd = None
    t = int(ds.input_shape[0]) if ds.input_shape else 1
    return n, t, fwd, int(ds.num_train) * t


def dataset_hparams(cfg: SweepConfig, workload: Any) -> dict[str, Any]:
    """The ladder's dataset hyperparameters: the workload's, overridden by ``ladder.dataset_hparams``."""
    return {**workload.dataset_hparams, **cfg.ladder.dataset_hparams}


def rungs(cfg: SweepConfig, workload: Any) -> list[Rung]:
    """The ladder's rungs, sizes outermost then ratios, each counted (module docstring).

    ``workload``: the ladder's :class:`harness.config.workloads.Workload`.

    Raises:
      ConfigError: a size the model builder refuses, or a dataset that does not load.
    """
    lad: LadderCfg = cfg.ladder
    entry = getattr(workload, "model_entry", None)
    if entry is not None and entry.source is not None:
        raise ConfigError([f"ladder.workload: a ladder sizes a registered model (models.zoo); "
                           f"{workload.name}'s model {entry.name!r} has a source"])
    batch = cfg.batch_size[0] if "batch_size" in cfg.model_fields_set else workload.batch_size
    ds_hp = dataset_hparams(cfg, workload)
    ds_json = json.dumps(ds_hp, sort_keys=True)
    _load_or_say(workload.dataset, ds_hp)
    out, errors = [], []
    for i, size in enumerate(lad.sizes):
        hp = {**workload.model_hparams, **size}
        try:
            n, t, fwd, train_tokens = model_counts(workload.model, json.dumps(hp, sort_keys=True),
                                                    workload.dataset, ds_json)
        except Exception as e:  # the builder's or the dataset's own message
            errors.append(f"ladder.sizes[{i}]: {workload.model} ({size_text(size)}): {e}")
            continue
        transfer = tuple((name, _rule_text(lad.transfer_of(name))) for name in lad.transfer)
        for r, baseline_only in lad.ratios():
            steps = round(r * n / (batch * t))
            if steps > MAX_STEPS:  # before the budget is built: one line, not pydantic's dump
                errors.append(_too_many_steps(lad, r, baseline_only, i, size, n, steps, batch, t))
                continue
            tokens = steps * batch * t
            if steps < 1 or tokens > train_tokens:
                errors.append(_outside_data(lad, r, baseline_only, i, size, n, batch, t, train_tokens))
                continue
            flops = 3.0 * fwd * steps * batch if fwd else 6.0 * n * tokens
            width = hp.get("width")
            out.append(Rung(workload.name, workload.model, i, size_text(size),
                            int(width) if isinstance(width, int) else None, n, float(r), t, batch,
                            steps, float(flops), lad.baseline, transfer, train_tokens, baseline_only))
    if errors:
        raise ConfigError(errors)
    return out


def _load_or_say(name: str, hp: dict[str, Any]) -> None:
    """Load (memoised) the ladder's dataset, whose tokens per example every rung needs.

    Raises:
      ConfigError: ``ladder.dataset_hparams: ...`` with the loader's own reason.
    """
    from harness.data.sources import load_dataset

    try:
        load_dataset(name, **hp)
    except Exception as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError([f"ladder.dataset_hparams: dataset {name!r} ({size_text(hp) or 'defaults'}): "
                           f"{why}"]) from None


def _too_many_steps(lad: LadderCfg, ratio: float, baseline_only: bool, i: int, size: dict[str, Any],
                    n: int, steps: int, batch: int, t: int) -> str:
    """The line for a rung whose budget exceeds :data:`MAX_STEPS`, keyed on its ratio."""
    key = "baseline_tokens_per_param" if baseline_only else "tokens_per_param"
    k = getattr(lad, key).index(ratio)
    return (f"ladder.{key}[{k}]: {ratio:g} tokens per parameter on ladder.sizes[{i}] ({size_text(size)}: "
            f"{n:,} parameters) implies {steps:,} steps of {batch} x {t} tokens, more than the "
            f"{MAX_STEPS:,} a budget may have: lower the ratio or the size")


def _outside_data(lad: LadderCfg, ratio: float, baseline_only: bool, i: int, size: dict[str, Any],
                  n: int, batch: int, t: int, train_tokens: int) -> str:
    """The line for a rung whose budget is under one step, or over the training split's tokens
    (a ladder counts tokens seen once: a second pass is not more data)."""
    key = "baseline_tokens_per_param" if baseline_only else "tokens_per_param"
    k = getattr(lad, key).index(ratio)
    head = (f"ladder.{key}[{k}]: {ratio:g} tokens per parameter on ladder.sizes[{i}] ({size_text(size)}: "
            f"{n:,} parameters) is {ratio * n:,.0f} tokens")
    if round(ratio * n / (batch * t)) < 1:  # rounds to zero steps
        return f"{head}, under one step of {batch} x {t} = {batch * t:,} tokens: raise the ratio or the size"
    return (f"{head}, more than the {train_tokens:,} training tokens the dataset holds: lower the ratio "
            f"or the size, or give more data")


def _rule_text(rule: TransferRule | str) -> str:
    if isinstance(rule, str):
        return rule
    return f"mup from width {rule.base_width} (exponent {rule.exponent:g})"


def transfer_hparams(comp: Component, rule: TransferRule | str, width: int | None, path: str) -> Component:
    """``comp`` at a rung of ``width`` under ``rule`` (module docstring).

    Raises:
      ConfigError: ``fixed``/``mup`` on a hyperparameter with several values or a distribution;
        ``mup`` without a ``step_size`` number, or on a size without a ``width``.
    """
    if rule == "per_rung":
        return comp
    for k, v in comp.hparams.items():
        if is_distribution(v) or hparam_count(v) > 1:
            raise ConfigError([f"{path}.hparams.{k}: transfer {_rule_text(rule)} carries one value "
                               f"across rungs (the one tuned at the base size); a grid or a "
                               f"distribution would tune it at every rung: give one value, or "
                               f"drop the optimizer's transfer entry"])
    if rule == "fixed":
        return comp
    lr = comp.hparams.get("step_size")
    if not isinstance(lr, int | float) or isinstance(lr, bool):
        raise ConfigError([f"{path}.hparams.step_size: transfer mup scales a step_size number, got "
                           f"{lr!r}"])
    if width is None:
        raise ConfigError(["ladder.sizes: transfer mup scales with width; give each size a width"])
    scaled = float(lr) * (rule.base_width / width) ** rule.exponent
    return comp.model_copy(update={"hparams": {**comp.hparams, "step_size": float(f"{scaled:.6g}")}})


def ladder_parts(cfg: SweepConfig, workload: Any) -> list[tuple[str, dict[str, Any], SweepConfig]]:
    """``cfg``'s ladder as :func:`harness.config.workloads.config_parts` parts: ``[(label,
    overrides, part)]``, label ``ladder.sizes[i]``, overrides the workload's name and augmentation
    and ``ladder``: the part's :class:`~harness.core.ladder.Rung` (one part per rung, ratio and
    ``dtype``).

    Raises:
      ConfigError: :func:`rungs`' and :func:`transfer_hparams`' problems.
    """
    lad: LadderCfg = cfg.ladder
    set_ = cfg.model_fields_set
    target = cfg.target if "target" in set_ and cfg.target is not None else \
        TargetCfg(metric=workload.metric, value=workload.target, mode=workload.target_mode)
    aug = cfg.augment if cfg.augment is not None else workload.augment
    parts = []
    for dt in cfg.dtypes():
        for rung in rungs(cfg, workload):
            opts = [transfer_hparams(c, lad.transfer_of(c.name), rung.width, f"optimizers[{j}]")
                    for j, c in enumerate(cfg.optimizers)
                    if not rung.baseline_only or c.name == lad.baseline]
            upd = {
                "dtype": dt, "workloads": None, "augment": None, "ladder": None, "optimizers": opts,
                "models": [Component(name=workload.model,
                                     hparams={**workload.model_hparams, **lad.sizes[rung.index]})],
                "datasets": [Component(name=workload.dataset, hparams=dataset_hparams(cfg, workload))],
                "batch_size": [rung.batch_size], "budget": Budget(steps=rung.steps),
                "eval_every": max(1, rung.steps // lad.evals), "target": target, "targets": {},
                "include": [],
                "zip": [g for g in cfg.zip if not {"models", "datasets", "batch_size"} & set(g)],
            }
            parts.append((f"ladder.sizes[{rung.index}]",
                          {"workload": workload.name, "augment": dict(aug), "ladder": rung},
                          cfg.model_copy(update=upd)))
    return parts
