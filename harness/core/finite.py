"""The one test of "a finite number", shared by the config checks, the records and the tracking.

Standard library only.
"""

from __future__ import annotations

import math
from typing import Any


def finite(x: Any) -> bool:
    """Whether ``x`` is a finite ``int`` or ``float``.

    Args:
      x: any value.

    Returns:
      ``False`` for a ``bool``, ``None``, a non-number, ``nan``, ``±inf`` and an ``int`` no float can
      hold (``10**400``, on which ``math.isfinite`` raises ``OverflowError``); else ``True``.
    """
    if not isinstance(x, int | float) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False
