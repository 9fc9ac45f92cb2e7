"""A standard-library logger's level for the length of a block.

Standard library only.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def logger_level(name: str, level: int) -> Iterator[None]:
    """The standard-library logger ``name`` at ``level`` for the block (a library's chatter off:
    ``logger_level("absl", logging.ERROR)``), its own level restored after."""
    log = logging.getLogger(name)
    old = log.level
    log.setLevel(level)
    try:
        yield
    finally:
        log.setLevel(old)
