"""Which devices this process may use.

``HARNESS_DEVICE_IDS`` (a comma-separated list of indices into ``jax.devices()``, e.g. ``"2,3"``) is how
a launcher gives a worker its share of a host's devices when the platform cannot hide the others
before JAX starts (CPU with ``XLA_FLAGS=--xla_force_host_platform_device_count=N``). On GPUs the
launcher also sets ``CUDA_VISIBLE_DEVICES`` before JAX starts, so ``jax.devices()`` already lists only
the worker's own devices and ``HARNESS_DEVICE_IDS`` is unset.
"""

from __future__ import annotations

import os

DEVICE_IDS_ENV = "HARNESS_DEVICE_IDS"

__all__ = ["DEVICE_IDS_ENV", "visible_devices"]


def visible_devices() -> list:
    """The ``jax.Device`` objects this process may use, in ``jax.devices()`` order.

    Raises:
      ValueError: ``HARNESS_DEVICE_IDS`` is not a comma-separated list of indices of ``jax.devices()``.
    """
    import jax

    devs = jax.devices()
    raw = os.environ.get(DEVICE_IDS_ENV, "").strip()
    if not raw:
        return list(devs)
    try:
        ids = [int(t) for t in raw.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"{DEVICE_IDS_ENV}={raw!r} is not a comma-separated list of device indices") from None
    bad = [i for i in ids if not 0 <= i < len(devs)]
    if bad or not ids:
        raise ValueError(f"{DEVICE_IDS_ENV}={raw!r} names devices {bad or ids} but this process has "
                         f"{len(devs)} ({devs[0].platform}): use indices 0..{len(devs) - 1}")
    return [devs[i] for i in ids]
