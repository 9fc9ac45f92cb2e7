"""A user's network as a :class:`models.zoo.ModelDef`: from a stax pair, a Flax module or as is.

A model entry's ``source`` (``harness.config.model_sources``) names a factory
``f(*, input_shape, num_classes, **hparams)``; :func:`as_model` turns what it returns into the
``ModelDef`` the trainer takes. Imports only jax and :mod:`models.zoo` (a Flax module is used
through its ``init``/``apply`` methods; flax itself is never imported here).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from models.zoo import ModelDef, make_model_def

__all__ = ["FORMS", "as_model", "custom_model", "flax_layer"]

#: What a model factory may return, for messages.
FORMS = ("a stax (init_fun, apply_fun) pair, a flax.linen Module (called as module.apply({'params': "
         "p}, x)) or a models.zoo.ModelDef (models.custom.custom_model builds one)")
TASKS = ("classification", "sequence", "reconstruction")


def flax_layer(module: Any, input_dtype: str = "float32"):
    """A ``flax.linen`` module as a stax ``(init_fun, apply_fun)`` pair.

    ``init_fun(rng, (N, ...))`` runs ``module.init`` on zeros of that shape (``N = -1`` as 1) and
    returns its ``"params"`` collection; ``apply_fun(params, x)`` is
    ``module.apply({"params": params}, x)``.

    Args:
      module: a ``flax.linen.Module`` (used through its ``init``/``apply``) whose only variable
        collection is ``"params"``.
      input_dtype: dtype name of the zeros ``init_fun`` runs the module on (``"int32"`` for tokens).

    Returns:
      ``(init_fun, apply_fun)``; ``init_fun`` gives ``((N, *out_shape[1:]), params)``.

    Raises:
      ValueError: (from ``init_fun``) the module has variable collections besides ``"params"``
        (batch statistics); the message names them.
    """
    dtype = jnp.dtype(input_dtype)

    def init_fun(rng, input_shape):
        shape = tuple(1 if d in (-1, None) else int(d) for d in input_shape)
        variables = module.init(rng, jnp.zeros(shape, dtype))
        other = sorted(k for k in variables if k != "params")
        if other:
            raise ValueError(f"{type(module).__name__}: variable collections {other} besides 'params' "
                             f"are not supported (a model's state must be stax BatchNorm's)")
        out = jax.eval_shape(lambda v, x: module.apply(v, x), variables, jnp.zeros(shape, dtype))
        return (input_shape[0], *out.shape[1:]), variables.get("params", {})

    def apply_fun(params, inputs, **kwargs):
        return module.apply({"params": params}, inputs)

    init_fun.stax_name = type(module).__name__
    return init_fun, apply_fun


def custom_model(layer: Any, *, input_shape, task: str = "classification", name: str = "custom",
                 hparams: dict | None = None) -> ModelDef:
    """A :class:`ModelDef` of a stax pair or a Flax module ``layer``.

    Args:
      layer: ``(init_fun, apply_fun)`` or a ``flax.linen.Module``.
      input_shape: one example's shape (no batch axis).
      task: ``"classification"`` (logits ``(N, num_classes)``, softmax cross-entropy and accuracy),
        ``"sequence"`` (int32 tokens ``(N, T)`` in, logits ``(N, T, V)`` out, per-token loss) or
        ``"reconstruction"`` (MSE).
      name, hparams: what the model is recorded as.

    Returns:
      The :class:`ModelDef`; its inputs are int32 for ``"sequence"``, else float32.

    Raises:
      ValueError: an unknown ``task`` or a ``layer`` of none of the two forms.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")
    input_dtype = "int32" if task == "sequence" else "float32"
    if _is_flax(layer):
        layer = flax_layer(layer, input_dtype)
    elif not (isinstance(layer, tuple) and len(layer) == 2 and all(callable(f) for f in layer)):
        raise ValueError(f"got {type(layer).__name__}; expected {FORMS}")
    return make_model_def(name, task, layer, input_shape, hparams or {}, input_dtype=input_dtype)


def _is_flax(obj: Any) -> bool:
    return callable(getattr(obj, "init", None)) and callable(getattr(obj, "apply", None)) \
        and not isinstance(obj, tuple)


def as_model(obj: Any, *, name: str, input_shape, hparams: dict) -> ModelDef:
    """What a model factory returned, as a :class:`ModelDef` named ``name``.

    Args:
      obj: a stax pair or Flax module (made a classification model by :func:`custom_model`) or a
        ``ModelDef`` (kept, renamed, its hparams updated with ``hparams``).
      name: the name to record the model under.
      input_shape: one example's shape (no batch axis); unused for a ``ModelDef``.
      hparams: the factory's hyperparameters, recorded with the model.

    Returns:
      The :class:`ModelDef`.

    Raises:
      ValueError: ``obj`` is of none of the forms; the message names :data:`FORMS`.
    """
    if isinstance(obj, ModelDef):
        return dataclasses.replace(obj, name=name, hparams={**obj.hparams, **hparams})
    return custom_model(obj, input_shape=input_shape, name=name, hparams=hparams)
