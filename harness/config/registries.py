"""The four name → builder registries a config is checked against, and a builder's hyperparameters.

:func:`default_registries` is the one way to get the project's registries (models, optimizers,
schedules, datasets); tests inject their own :class:`Registries`. :func:`builder_hparams` reads a
builder's hyperparameters from its signature (:func:`harness.core.builders.hyperparameters`), leaving
out what the harness injects; :func:`derived_hparams` the values a built-in optimizer derives for
those left ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from harness.core.builders import INJECTED, HParam, Registries, hyperparameters

__all__ = ["Registries", "builder_hparams", "default_registries", "derived_hparams"]


def default_registries() -> Registries:
    """The project's registries: ``models.zoo.MODELS``, ``optimizers.OPTIMIZERS``,
    ``optimizers.SCHEDULES`` and :data:`harness.data.DATASETS` (imported on the first call: they
    import jax)."""
    from harness.data.sources import DATASETS
    from models.zoo import MODELS
    from optimizers import OPTIMIZERS, SCHEDULES

    return Registries(MODELS, OPTIMIZERS, SCHEDULES, DATASETS)


def builder_hparams(kind: str, builder: Callable) -> dict[str, HParam]:
    """Hyperparameters of a builder of ``kind`` (schedules: ``step_size`` is injected too)."""
    if kind == "schedule":
        skip = INJECTED | {"step_size"}
    elif kind == "dataset":  # a dataset's input_shape/num_classes (synthetic) are its own choices
        skip = frozenset()
    else:
        skip = INJECTED
    return hyperparameters(builder, skip=frozenset(skip))


def derived_hparams(optimizer: str, builder: Callable, given: Mapping[str, Any]) -> dict[str, Any]:
    """The hyperparameters a built-in optimizer derives from ``given`` for those not given
    (muon's ``convention`` fills ``ns_coeffs`` ...): :data:`optimizers.registry.HPARAMS_USED`.

    Args:
      optimizer: the entry's name; builder: the trial's builder (a built-in reached through
        ``source:`` too; a user's own derives nothing here); given: the trial's optimizer
        hyperparameters.

    Returns:
      ``{name: value}`` of the derived ones not in ``given`` (tuples as lists, as a config writes
      them); empty where the values are refused (the trial then fails with the builder's own
      message).
    """
    from optimizers import OPTIMIZERS
    from optimizers.registry import HPARAMS_USED

    name = optimizer if OPTIMIZERS.get(optimizer) is builder else \
        next((n for n, b in OPTIMIZERS.items() if b is builder), None)
    used = HPARAMS_USED.get(name) if name is not None else None
    if used is None:
        return {}
    try:
        got = used(**given)
    except (TypeError, ValueError):
        return {}

    def as_config(v):
        return [as_config(x) for x in v] if isinstance(v, tuple | list) else v

    return {k: as_config(v) for k, v in got.items() if k not in given}
