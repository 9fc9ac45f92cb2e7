"""The ``HARNESS_*`` variables the trainer reads, and their rules: the checkpoint cadence and folder,
the compilation cache switch and its size bound. Standard library only.

:func:`harness.config.environment.check_environment` refuses bad values before a sweep starts
(one line each); :mod:`harness.train.compile_cache` and :mod:`harness.train.checkpoint` read them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from harness.core.echo import short_repr

__all__ = ["CHECKPOINT_DIR", "CHECKPOINT_EVERY", "COMPILE_CACHE", "COMPILE_CACHE_MAX_BYTES",
           "DEFAULT_MAX_BYTES", "MAX_BYTES", "MIN_BYTES", "OFF", "ON", "compile_cache_max_bytes",
           "shown", "switch"]

CHECKPOINT_EVERY = "HARNESS_CHECKPOINT_EVERY"
CHECKPOINT_DIR = "HARNESS_CHECKPOINT_DIR"
COMPILE_CACHE = "HARNESS_COMPILE_CACHE"
COMPILE_CACHE_MAX_BYTES = "HARNESS_COMPILE_CACHE_MAX_BYTES"
ON = ("", "1", "on", "true", "yes")
OFF = ("0", "off", "false", "no")
DEFAULT_MAX_BYTES = 2 << 30
MIN_BYTES = 1 << 20  # below this no program fits: the cache would evict everything it writes
MAX_BYTES = 2**50


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def shown(name: str, raw: str) -> str:
    """``NAME='value'`` as an error line shows it (the value bounded: :func:`short_repr`)."""
    return f"{name}={short_repr(raw)}"


def switch(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the on/off variable ``name`` is on (unset is on).

    Raises:
      ValueError: neither on (1, on, true, yes) nor off (0, off, false, no); one line.
    """
    raw = _env(environ).get(name, "")
    value = raw.strip().lower()
    if value not in ON + OFF:
        raise ValueError(f"{shown(name, raw)} is neither on (1, on, true, yes) nor off (0, off, false, no)")
    return value in ON


def compile_cache_max_bytes(environ: Mapping[str, str] | None = None) -> int:
    """``HARNESS_COMPILE_CACHE_MAX_BYTES`` as an int (default 2 GiB).

    Raises:
      ValueError: not a number, not positive, or outside [1 MiB, 1 PiB]; one line.
    """
    raw = _env(environ).get(COMPILE_CACHE_MAX_BYTES, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    line = shown(COMPILE_CACHE_MAX_BYTES, raw)
    if math.isnan(value):
        raise ValueError(f"{line} is not a number of bytes (e.g. 2e9)")
    if not value > 0:
        raise ValueError(f"{line} must be positive; to turn the cache off set {COMPILE_CACHE}=0")
    if not MIN_BYTES <= value <= MAX_BYTES:  # inf, 1e400 (OverflowError in int()), 1.5 bytes
        raise ValueError(f"{line} must be between 1 MiB ({MIN_BYTES}) and 1 PiB ({MAX_BYTES}) bytes, "
                         "e.g. 2e9")
    return int(value)
