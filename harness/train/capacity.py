"""How many trials fit one vmapped program: the device's memory against the compiled step's footprint.

:func:`footprint` reads XLA's memory analysis of a compiled single-trial chunk
(``compiled.memory_analysis()``): one trial's bytes are its arguments less the training data every
trial of a vmapped program shares, its outputs less what donation aliases onto the arguments, and
the step's temporaries (activations, gradients). :func:`capacity` is how many such trials fit in
:data:`MEMORY_FRACTION` of :func:`device_memory` beside the data the process already holds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import jax

__all__ = ["MEMORY_FRACTION", "Footprint", "capacity", "device_memory", "footprint", "mib"]

#: Share of the device's memory the trials of one program may fill (XLA's workspace, fragmentation).
MEMORY_FRACTION = 0.8


@dataclass(frozen=True)
class Footprint:
    """``per_trial``: device bytes one trial adds to a vmapped program; ``shared``: the bytes of
    the data arguments every trial of it reads (one copy)."""

    per_trial: int
    shared: int


def mib(n: float) -> str:
    """``n`` bytes as ``'12.3 MiB'`` (``'1.5 GiB'`` from 1 GiB)."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def device_memory(device: Any = None) -> int | None:
    """Bytes of memory of ``device`` (default ``jax.devices()[0]``): its allocator's ``bytes_limit``
    on a GPU/TPU; the machine's physical memory on a CPU (XLA:CPU reports none); ``None`` if unknown."""
    device = device if device is not None else jax.devices()[0]
    try:
        stats = device.memory_stats()
    except Exception:  # some backends raise instead of returning None
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    if device.platform == "cpu":
        try:
            return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):
            return None
    return None


def footprint(compiled: Any, data_bytes: int) -> Footprint:
    """The :class:`Footprint` of a compiled single-trial chunk whose arguments include ``data_bytes``
    of training data (shared by every trial of a vmapped program).

    Raises:
      AttributeError: ``compiled`` has no ``memory_analysis`` (not an XLA executable).
    """
    m = compiled.memory_analysis()
    per = (max(0, m.argument_size_in_bytes - data_bytes)
           + max(0, m.output_size_in_bytes - m.alias_size_in_bytes) + m.temp_size_in_bytes)
    return Footprint(int(per), int(data_bytes))


def capacity(fp: Footprint, device_bytes: int, held: int = 0, fraction: float = MEMORY_FRACTION) -> int:
    """Trials of footprint ``fp`` that fit in ``fraction`` of ``device_bytes`` beside ``held`` bytes
    already on the device (its datasets; ``fp.shared`` when more: the program's own data). >= 0."""
    free = device_bytes * fraction - max(held, fp.shared)
    return max(0, int(free // max(fp.per_trial, 1)))
