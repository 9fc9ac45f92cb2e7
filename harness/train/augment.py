"""In-graph image augmentation, keyed by the trial's data key so that curves stay reproducible.

:func:`make_augment` turns a trial's ``augment`` hyperparameters into ``f(x, key) -> x`` on one batch
``x float (B, H, W, C)`` (images stored ``(B, H, W)`` are taken as ``C = 1``), traced inside the
trainer's ``lax.scan``. The trainer's key for training step ``i`` (0-based update index) is
``fold_in(fold_in(data_key, AUGMENT_STREAM), i)``, where ``data_key`` is the trial's data-order key:
same seed → the same crops and flips at every step, on every run and under ``vmap``.

Hyperparameters (a trial's ``augment`` mapping; empty = no augmentation):

* ``crop_pad: int`` (default 0): zero-pad ``crop_pad`` pixels on each side of H and W, then crop a
  window of the original size at an offset drawn uniformly from ``[0, 2·crop_pad]`` per axis and per
  example (the CIFAR recipe of He et al. 2016 uses 4).
* ``flip: bool`` (default False): mirror each example left-right (the W axis) with probability 1/2.

Each example draws its own offsets and flip from ``split(key, B)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from harness.core.augment_keys import AUGMENT_KEYS, validate_augment

__all__ = ["AUGMENT_KEYS", "AUGMENT_STREAM", "make_augment", "validate_augment"]

#: ``fold_in`` constant that separates the augmentation stream from the epoch permutations
#: (``fold_in(data_key, epoch)``, epochs counted from 0).
AUGMENT_STREAM = 2**31 - 1


def make_augment(hparams: Mapping[str, Any]) -> Callable[[jax.Array, jax.Array], jax.Array] | None:
    """The batch augmentation ``f(x, key) -> x`` (same shape and dtype), or ``None`` when ``hparams``
    asks for nothing (no crop, no flip).

    Raises:
      ValueError: see :func:`harness.core.augment_keys.validate_augment`.
    """
    hp = validate_augment(hparams)
    pad, flip = int(hp["crop_pad"]), bool(hp["flip"])
    if pad == 0 and not flip:
        return None

    def one(img: jax.Array, key: jax.Array) -> jax.Array:
        k_crop, k_flip = jax.random.split(key)
        if pad:
            H, W = img.shape[0], img.shape[1]
            padded = jnp.pad(img, ((pad, pad), (pad, pad)) + ((0, 0),) * (img.ndim - 2))
            off = jax.random.randint(k_crop, (2,), 0, 2 * pad + 1)
            start = (off[0], off[1]) + (0,) * (img.ndim - 2)
            img = jax.lax.dynamic_slice(padded, start, (H, W, *img.shape[2:]))
        if flip:
            img = jnp.where(jax.random.bernoulli(k_flip), img[:, ::-1], img)
        return img

    def augment(x: jax.Array, key: jax.Array) -> jax.Array:
        if x.ndim < 3:
            raise ValueError(f"image augmentation needs batches (B, H, W[, C]), got shape {x.shape}")
        return jax.vmap(one)(x, jax.random.split(key, x.shape[0]))

    return augment
