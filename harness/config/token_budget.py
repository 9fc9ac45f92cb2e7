"""A ``budget:`` as optimizer steps: ``steps``, ``epochs``, ``tokens`` or ``tokens_per_param``.

``tokens: D`` trains ``steps = round(D / (batch · T))`` (``D`` at least one step's tokens), ``T`` the
dataset's tokens per example (a sequence dataset's window); ``tokens_per_param: R`` does the same
with ``D = R · N``,
``N`` the model's parameter count, counted as the scaling ladder counts it
(:func:`harness.config.ladder_parts.model_counts`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from harness.config.errors import ConfigError
from harness.config.limits import MAX_STEPS
from harness.config.search import is_distribution

__all__ = ["budget_steps"]


def _tokens_per_example(dataset: str, dataset_hparams: Mapping[str, Any], key: str) -> int:
    from harness.data.sources import load_dataset

    ds = load_dataset(dataset, **dataset_hparams)
    if ds.task != "sequence":
        raise ConfigError([f"{key}: dataset {dataset!r} is not a sequence dataset (it has no tokens); "
                           f"give budget.steps or budget.epochs"])
    return int(ds.input_shape[0])


def _token_steps(tokens: float, batch_size: int, t: int, where: str) -> int:
    """``round(tokens / (batch_size · t))`` steps; ``ConfigError`` (``where`` prefixed) below one step."""
    if tokens < batch_size * t:
        raise ConfigError([f"{where}: {tokens:,.0f} tokens are less than one step (batch_size {batch_size} "
                           f"x {t} tokens per example = {batch_size * t:,}); give at least that"])
    return round(tokens / (batch_size * t))


def budget_steps(budget: Any, *, model: str, model_hparams: Mapping[str, Any], dataset: str,
                 dataset_hparams: Mapping[str, Any], batch_size: int, n_train: Callable[[], int],
                 file: str = "", model_path: str = "models") -> int:
    """The optimizer steps ``budget`` (a :class:`harness.config.schema.Budget`) gives one task.

    Args:
      model, model_hparams: the model (fixed hyperparameters; ``tokens_per_param`` counts its N).
      dataset, dataset_hparams: the dataset (``tokens``/``tokens_per_param``: a sequence dataset).
      batch_size: examples per update.
      n_train: the training split's size (called for ``epochs`` only).
      file: prefixes error lines; model_path: the model entry's key path, for them.

    Raises:
      ConfigError: more than ``MAX_STEPS`` steps; a token budget on a dataset without tokens or
        below one step's tokens;
        ``tokens_per_param`` with a model that does not build or whose hyperparameters are sampled.
    """
    head = f"{file}: " if file else ""
    if budget.steps is not None:
        return budget.steps
    if budget.epochs is not None:
        key, text = "budget.epochs", f"{budget.epochs:g} epochs"
        steps = max(1, math.ceil(budget.epochs * n_train() / batch_size))
    elif budget.tokens is not None:
        key, text = "budget.tokens", f"{budget.tokens:,} tokens"
        t = _tokens_per_example(dataset, dataset_hparams, head + key)
        steps = _token_steps(budget.tokens, batch_size, t, head + key)
    else:
        from harness.config.ladder_parts import model_counts

        key, text = "budget.tokens_per_param", f"{budget.tokens_per_param:g} tokens per parameter"
        if any(is_distribution(v) for v in model_hparams.values()):
            raise ConfigError([f"{head}{key}: counts each model's parameters; {model_path} samples "
                               f"its hyperparameters (give them values)"])
        _tokens_per_example(dataset, dataset_hparams, head + key)
        try:
            n, t, _, _ = model_counts(model, json.dumps(dict(model_hparams), sort_keys=True), dataset,
                                      json.dumps(dict(dataset_hparams), sort_keys=True))
        except Exception as e:  # the builder's own message
            raise ConfigError([f"{head}{key}: counting the parameters of {model!r}: {e}"]) from None
        steps = _token_steps(budget.tokens_per_param * n, batch_size, t,
                             f"{head}{key}: {budget.tokens_per_param:g} x {n:,} parameters")
    if steps > MAX_STEPS:
        raise ConfigError([f"{head}{key}: {text} of dataset {dataset!r} at batch size {batch_size} are "
                           f"{steps:,} steps; at most {MAX_STEPS:,}"])
    return steps
