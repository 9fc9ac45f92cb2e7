"""``checkpoint_every``: when a unit checkpoints mid-trial, as a :class:`Cadence` (:func:`parse_every`).

A number of steps (``500`` or ``"500 steps"``), a wall-clock time (``"90s"``, ``"10min"``, ``"1h"``)
or ``off``; the default :data:`DEFAULT_EVERY` is one minute. The config's schema stores the canonical
text (``str(Cadence)``); the checkpoints of :mod:`harness.train.checkpoint` read it back. Standard
library only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_EVERY", "Cadence", "parse_every"]

#: Default cadence: every minute of wall-clock since the unit started training.
DEFAULT_EVERY = "1min"
_OFF = ("off", "never", "none", "no", "false", "0")
_TIME_UNITS = {"s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
               "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
               "h": 3600.0, "hour": 3600.0, "hours": 3600.0}
_EVERY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


@dataclass(frozen=True)
class Cadence:
    """When to checkpoint: every ``steps`` updates, or every ``seconds`` of wall-clock (one of them;
    both ``None`` = off)."""

    steps: int | None = None
    seconds: float | None = None

    @property
    def off(self) -> bool:
        return self.steps is None and self.seconds is None

    def __str__(self) -> str:
        if self.steps is not None:
            return f"{self.steps} steps"
        if self.seconds is not None:
            return f"{self.seconds:g}s"
        return "off"


def parse_every(value: Any) -> Cadence:
    """Parse a ``checkpoint_every`` value.

    Accepted: ``None`` or ``"default"`` (:data:`DEFAULT_EVERY`); ``False``, ``0``, ``"off"``,
    ``"never"``, ``"none"`` (off); a positive int or ``"N steps"`` (every N updates, at the first chunk
    end at or past each multiple of N); ``"Xs"``, ``"X min"``, ``"X h"`` (X > 0 seconds, minutes,
    hours of wall-clock).

    Raises:
      ValueError: anything else; the message lists the accepted forms.
    """
    if value is None or (isinstance(value, str) and value.strip().lower() == "default"):
        return parse_every(DEFAULT_EVERY)
    if value is False or (isinstance(value, int) and not isinstance(value, bool) and value == 0):
        return Cadence()
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"checkpoint_every must be >= 0 steps, got {value}")
        return Cadence(steps=value)
    if isinstance(value, str):
        s = value.strip().lower()
        if s in _OFF:
            return Cadence()
        m = _EVERY_RE.match(s)
        if m:
            num, unit = float(m.group(1)), m.group(2)
            if unit in ("", "step", "steps") and num.is_integer() and "." not in m.group(1):
                return Cadence(steps=int(num)) if num > 0 else Cadence()
            if unit in _TIME_UNITS and num > 0 and math.isfinite(num):
                return Cadence(seconds=num * _TIME_UNITS[unit])
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise ValueError(f"checkpoint_every: cannot read {shown}; use a number of steps (500 or "
                     "'500 steps'), a time ('90s', '10min', '1h'), or 'off'")
