"""One copy of each dataset per device, shared by every model entry and program that reads it.

:func:`shared` puts a :class:`~harness.data.dataset.Dataset`'s six splits on the device once per
(dataset, storage dtype, layout) and hands the same arrays to every caller. Inputs that are whole
multiples of ``1 / d`` for a divisor ``d`` in :data:`DIVISORS` (images loaded as ``uint8 / 255``, the
digits' ``/ 16``), checked bit for bit, go to the device as ``uint8`` (a quarter of float32's bytes);
:func:`decode` turns a gathered batch back into the storage dtype inside the compiled step, with the
same float32 division the loader did on the host (same values to the bit).
:func:`resident_bytes` is what the process holds on devices for data (the dry run states a sweep's:
:func:`planned_bytes`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from harness.data.dataset import Dataset

__all__ = ["DIVISORS", "DeviceData", "decode", "planned_bytes", "resident_bytes", "shared",
           "storage_array", "uint8_divisor"]

#: Divisors tried, in order: ``x == uint8 / d`` exactly (float32) stores ``x`` as ``uint8``.
DIVISORS = (255.0, 16.0, 1.0)


@dataclass(frozen=True)
class DeviceData:
    """A dataset's splits on the device: ``arrays`` = ``(x_train, y_train, x_valid, y_valid, x_test,
    y_test)``; ``divisor`` set when the inputs are ``uint8`` (value = ``x / divisor``); ``nbytes`` their
    device bytes (one device's copy)."""

    arrays: tuple
    divisor: float | None
    nbytes: int


#: dataset -> {(storage dtype, layout key): DeviceData}; a dataset freed frees its copies.
_CACHE: weakref.WeakKeyDictionary[Dataset, dict[tuple, DeviceData]] = weakref.WeakKeyDictionary()
#: dataset -> its uint8 divisor (or None), computed once per dataset.
_DIVISOR: weakref.WeakKeyDictionary[Dataset, Any] = weakref.WeakKeyDictionary()


def uint8_divisor(*xs: np.ndarray) -> float | None:
    """The first ``d`` of :data:`DIVISORS` with ``x == float32(uint8(x·d)) / float32(d)`` bit for bit
    for every array of ``xs`` (float32), else ``None`` (also for non-float32 inputs)."""
    if not xs or any(x.dtype != np.float32 for x in xs):
        return None
    for d in DIVISORS:
        fd = np.float32(d)
        ok = True
        for x in xs:
            flat = x.reshape(-1)
            q = np.rint(flat[:4096] * fd)  # a cheap look first: most inputs fail here
            if q.size and (q.min() < 0 or q.max() > 255 or not np.array_equal(
                    q.astype(np.uint8).astype(np.float32) / fd, flat[:4096])):
                ok = False
                break
            q = np.rint(flat * fd)
            if q.size and (q.min() < 0 or q.max() > 255 or not np.array_equal(
                    q.astype(np.uint8).astype(np.float32) / fd, flat)):
                ok = False
                break
        if ok:
            return d
    return None


def _divisor(ds: Dataset) -> float | None:
    if ds not in _DIVISOR:
        _DIVISOR[ds] = None if ds.task == "sequence" else uint8_divisor(ds.x_train, ds.x_valid, ds.x_test)
    return _DIVISOR[ds]


def storage_array(x: np.ndarray, dtype: Any) -> np.ndarray:
    """Floating inputs in the storage ``dtype``; integer inputs (token ids) unchanged."""
    return np.asarray(x, dtype) if np.issubdtype(x.dtype, np.floating) else np.asarray(x)


def _host_inputs(x: np.ndarray, dtype: Any, divisor: float | None) -> np.ndarray:
    if divisor is not None:
        return np.rint(x * np.float32(divisor)).astype(np.uint8)
    return storage_array(x, dtype)


def shared(ds: Dataset, dtype: Any, layout: Any = None) -> DeviceData:
    """``ds``'s splits on the device (``layout``: replicated over its mesh, ``layout.replicated``),
    built once per (``ds``, ``dtype``, layout) and shared; floating inputs in ``dtype``, or ``uint8``
    where :func:`uint8_divisor` finds a divisor (:func:`decode` in the step)."""
    per = _CACHE.setdefault(ds, {})
    key = (str(jnp.dtype(dtype)), None if layout is None else layout.key)
    if key not in per:
        div = _divisor(ds) if jnp.issubdtype(jnp.dtype(dtype), jnp.floating) else None
        host = []
        for name in ("train", "valid", "test"):
            host += [_host_inputs(getattr(ds, f"x_{name}"), dtype, div), getattr(ds, f"y_{name}")]
        where = None if layout is None else layout.replicated
        arrays = tuple(jax.device_put(a, where) for a in host)
        per[key] = DeviceData(arrays, div, int(sum(a.nbytes for a in host)))
    return per[key]


def decode(xb: jax.Array, divisor: float | None, dtype: Any) -> jax.Array:
    """A gathered batch in the storage ``dtype``: ``uint8`` inputs as ``float32(x) / divisor`` (the
    loader's own host arithmetic, then cast to ``dtype``); anything else unchanged. Traced."""
    if divisor is None or xb.dtype != jnp.uint8:
        return xb
    return (xb.astype(jnp.float32) / jnp.float32(divisor)).astype(dtype)


def resident_bytes() -> int:
    """Device bytes of every dataset copy this process holds (all devices of a layout count once)."""
    return int(sum(d.nbytes for per in list(_CACHE.values()) for d in per.values()))


def planned_bytes(datasets: list[tuple[Dataset, Any]]) -> int:
    """Device bytes the data of ``datasets`` (``(dataset, storage dtype)`` pairs; repeats count
    once) would hold, one copy each, without putting anything on a device."""
    total, seen = 0, set()
    for ds, dtype in datasets:
        key = (id(ds), str(jnp.dtype(dtype)))
        if key in seen:
            continue
        seen.add(key)
        div = _divisor(ds) if jnp.issubdtype(jnp.dtype(dtype), jnp.floating) else None
        for name in ("train", "valid", "test"):
            x, y = getattr(ds, f"x_{name}"), getattr(ds, f"y_{name}")
            isz = 1 if div is not None else (jnp.dtype(dtype).itemsize
                                             if np.issubdtype(x.dtype, np.floating) else x.itemsize)
            total += x.size * isz + y.nbytes
    return int(total)
