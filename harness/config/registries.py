"""The four name → builder registries a config is checked against, and a builder's hyperparameters.

:func:`default_registries` is the one way to get the project's registries (models, optimizers,
schedules, datasets); tests inject their own :class:`Registries`. :func:`builder_hparams` reads a
builder's hyperparameters from its signature (:func:`harness.core.builders.hyperparameters`), leaving
out what the harness injects.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.core.builders import INJECTED, HParam, Registries, hyperparameters

__all__ = ["Registries", "builder_hparams", "default_registries"]


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
