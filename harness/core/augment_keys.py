"""``augment``: the image-augmentation hyperparameters a config (or a workload) may give, checked.

:data:`AUGMENT_KEYS` names them with their defaults (``crop_pad: int >= 0``, ``flip: bool``);
:func:`validate_augment` checks a mapping and fills in the defaults. The config validator calls it
before any trial runs; :func:`harness.train.augment.make_augment` builds the in-graph augmentation
from its result. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["AUGMENT_KEYS", "validate_augment"]

#: The hyperparameters an ``augment`` mapping may name, with their defaults.
AUGMENT_KEYS: dict[str, Any] = {"crop_pad": 0, "flip": False}


def validate_augment(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """``hparams`` with defaults filled in.

    Raises:
      ValueError: an unknown key, a negative or non-integer ``crop_pad``, a non-bool ``flip``.
    """
    unknown = sorted(set(hparams) - set(AUGMENT_KEYS))
    if unknown:
        raise ValueError(f"unknown augment hyperparameter(s) {unknown}; valid: {sorted(AUGMENT_KEYS)}")
    hp = {**AUGMENT_KEYS, **dict(hparams)}
    pad = hp["crop_pad"]
    if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
        raise ValueError(f"augment.crop_pad must be an int >= 0, got {pad!r}")
    if not isinstance(hp["flip"], bool):
        raise ValueError(f"augment.flip must be true or false, got {hp['flip']!r}")
    return hp
