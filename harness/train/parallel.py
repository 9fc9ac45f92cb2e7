"""Devices and parallelism of one trial: the device count, the 1-D mesh and its shardings.

A trial's ``parallelism`` (``TrialSpec.devices``, ``TrialSpec.shard``; config key ``parallelism:
{devices: all | N, shard: batch | trials}``) picks the first ``devices`` of
:func:`visible_devices` (never ``jax.devices()`` directly, so a launcher's
``HARNESS_DEVICE_IDS`` is honoured) and lays them out as a 1-D :class:`jax.sharding.Mesh` whose one
axis is named after what it splits:

* ``shard: batch`` (data-parallel): axis ``"batch"``. Each training batch ``(B, ...)`` gathered
  inside the K-step ``lax.scan`` is constrained to ``NamedSharding(mesh, P("batch"))`` (B/D examples
  per device); parameters, optimizer state, model state, keys and the training/evaluation arrays
  are replicated (``P()``). ``B`` must divide by ``D``.
* ``shard: trials`` (trial-parallel): axis ``"trials"``. The vmapped state of T trials (leading
  axis T) is ``P("trials")``; data replicated. T is padded up to a multiple of D with copies of the
  last trial, whose results are dropped.

One device (``devices: 1``, or ``all`` on a one-device process) uses no mesh at all: the
single-device code path, bit-identical.

Errors are raised as :class:`ValueError` with messages the pre-flight turns into config errors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

__all__ = ["DEVICE_IDS_ENV", "Layout", "batch_problem", "layout_for", "mesh_label", "resolve_devices",
           "visible_devices"]

#: A comma-separated list of indices into ``jax.devices()``: the devices this process may use (set
#: by a launcher, :mod:`harness.execute.devices`).
DEVICE_IDS_ENV = "HARNESS_DEVICE_IDS"


def visible_devices() -> list:
    """The ``jax.Device`` objects this process may use, in ``jax.devices()`` order.

    Raises:
      ValueError: ``HARNESS_DEVICE_IDS`` is set but empty (it names no device), or is not a
        comma-separated list of distinct indices of ``jax.devices()``.
    """
    import jax

    devs = jax.devices()
    if os.environ.get(DEVICE_IDS_ENV) is None:
        return list(devs)
    raw = os.environ[DEVICE_IDS_ENV].strip()
    if not raw:  # as an empty CUDA_VISIBLE_DEVICES hides every GPU: set and empty names none
        raise ValueError(f"{DEVICE_IDS_ENV} is set but empty, which names no device (as an empty "
                         f"CUDA_VISIBLE_DEVICES hides every GPU): unset it to use all {len(devs)} "
                         f"({devs[0].platform}), or list indices, e.g. {DEVICE_IDS_ENV}=0")
    try:
        ids = [int(t) for t in raw.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"{DEVICE_IDS_ENV}={raw!r} is not a comma-separated list of device "
                         f"indices: this process has {len(devs)} ({devs[0].platform}), use indices "
                         f"0..{len(devs) - 1}, e.g. {DEVICE_IDS_ENV}=0") from None
    bad = [i for i in ids if not 0 <= i < len(devs)]
    if bad or not ids:
        raise ValueError(f"{DEVICE_IDS_ENV}={raw!r} names devices {bad or ids} but this process has "
                         f"{len(devs)} ({devs[0].platform}): use indices 0..{len(devs) - 1}")
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:  # a mesh over one device twice cannot shard (every trial failed in jax's reshard)
        raise ValueError(f"{DEVICE_IDS_ENV}={raw!r} names device{'s' if len(twice) > 1 else ''} "
                         f"{', '.join(map(str, twice))} more than once: list each device once, e.g. "
                         f"{DEVICE_IDS_ENV}={','.join(map(str, dict.fromkeys(ids)))}")
    return [devs[i] for i in ids]


def resolve_devices(devices: int | str, visible: int | None = None) -> int:
    """The device count ``devices`` means in this process: ``"all"`` → the number of visible
    devices; an int → itself.

    Args:
      devices: ``TrialSpec.devices`` (an int >= 1 or ``"all"``).
      visible: the number of visible devices (default: ``len(visible_devices())``, imports jax).

    Raises:
      ValueError: ``devices`` exceeds the visible devices, or is neither an int >= 1 nor ``"all"``.
    """
    if visible is None:
        visible = len(visible_devices())
    if devices == "all":
        return visible
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ValueError(f"parallelism.devices must be an integer >= 1 or 'all', got {devices!r}")
    if devices > visible:
        ids = os.environ.get(DEVICE_IDS_ENV, "").strip()
        how = (f"{DEVICE_IDS_ENV}={ids!r} limits this process to them: list more devices there" if ids
               else "on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N set before JAX starts "
                    "gives N devices")
        raise ValueError(f"parallelism.devices {devices} exceeds the {visible} visible device"
                         f"{'s' if visible != 1 else ''} of this process (use 'all' or at most {visible};"
                         f" {how})")
    return devices


def batch_problem(batch_size: int, num_devices: int) -> str | None:
    """Why ``batch_size`` cannot be sharded over ``num_devices`` devices (``None`` when it can):
    ``"batch_size 100 does not divide over 8 devices: use 96 or 104"`` (the nearest multiples of
    the device count below and above; only the one above when the one below would be 0)."""
    if num_devices <= 1 or batch_size % num_devices == 0:
        return None
    lo = batch_size // num_devices * num_devices
    hi = lo + num_devices
    use = f"{lo} or {hi}" if lo > 0 else f"{hi}"
    return f"batch_size {batch_size} does not divide over {num_devices} devices: use {use}"


def mesh_label(axis: str, num_devices: int) -> str:
    """``"batch=4"``: the mesh shape as the ``harness.mesh`` tag records it."""
    return f"{axis}={num_devices}"


@dataclass(frozen=True)
class Layout:
    """A 1-D mesh of ``num_devices`` devices with axis ``axis`` (``"batch"`` or ``"trials"``) and
    its two shardings: ``replicated`` (``P()``) and ``split`` (``P(axis)``, the leading axis split
    over the devices). ``key`` identifies it in compiled-program caches."""

    axis: str
    num_devices: int
    mesh: Any
    replicated: Any
    split: Any
    key: tuple

    @property
    def label(self) -> str:
        return mesh_label(self.axis, self.num_devices)

    def pad(self, n: int) -> int:
        """``n`` rounded up to a multiple of the device count (trial-axis padding)."""
        return -(-n // self.num_devices) * self.num_devices


def layout_for(devices: int | str, shard: str, *, batch_size: int, num_trials: int | None) -> Layout | None:
    """The layout of a trial (``num_trials`` None) or a vmapped batch of ``num_trials`` trials, or
    ``None`` for the one-device path (one device resolved, or ``shard: trials`` for a lone trial,
    which has no trial axis to split and runs on one device).

    Raises:
      ValueError: too many devices requested (:func:`resolve_devices`), or ``shard: batch`` with a
        batch size that does not divide over the devices (:func:`batch_problem`'s message).
    """
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devs = visible_devices()
    n = resolve_devices(devices, len(devs))
    if n == 1 or (shard == "trials" and num_trials is None):
        return None
    if shard == "batch":
        if (msg := batch_problem(batch_size, n)) is not None:
            raise ValueError(msg)
    elif shard != "trials":
        raise ValueError(f"parallelism.shard must be 'batch' or 'trials', got {shard!r}")
    used = devs[:n]
    mesh = Mesh(np.array(used, dtype=object), (shard,))
    return Layout(shard, n, mesh, NamedSharding(mesh, PartitionSpec()),
                  NamedSharding(mesh, PartitionSpec(shard)),
                  (shard, tuple((d.platform, d.id) for d in used)))
