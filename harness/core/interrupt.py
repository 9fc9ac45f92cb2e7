"""Ctrl-C kept where Python would drop it.

Python raises ``KeyboardInterrupt`` in whatever Python code runs when SIGINT arrives. Inside a
garbage-collection callback (JAX registers one, ``_xla_gc_callback``) or a ``__del__``, the exception
is only reported ("Exception ignored in: ...") and lost, and the program goes on. A sweep then trained
every trial and exited 0 after its user pressed Ctrl-C (found by attacking ``--jobs 2``: 2 of 4
Ctrl-Cs sent while the store was being opened were lost).

While a sweep runs (:func:`kept`), its SIGINT handler also notes the interrupt, and :func:`check`,
called where the sweep can stop cleanly (between its stages, before each unit, after each training
chunk, while the ``--jobs`` parent waits for its workers), raises the noted one again. A
``KeyboardInterrupt`` that propagated as usual ends the sweep before any later check, and leaving
:func:`kept` forgets the note.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

_NOTED = [False]


def handler(signum: int, frame: Any) -> None:
    """The sweep's SIGINT handler: note the interrupt, then raise it as Python's default does."""
    _NOTED[0] = True
    raise KeyboardInterrupt


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """:func:`handler` for SIGINT during the block, where SIGINT has Python's default handler and
    this is the main thread (else nothing changes: an embedding program's own handler is kept);
    the default handler is put back after."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    _NOTED[0] = False
    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _NOTED[0] = False


def check() -> None:
    """Raise ``KeyboardInterrupt`` for a Ctrl-C noted by :func:`handler` (once).

    Raises:
      KeyboardInterrupt: the user pressed Ctrl-C since the sweep started (its exception may have
        been lost inside a garbage-collection callback).
    """
    if _NOTED[0]:
        _NOTED[0] = False
        raise KeyboardInterrupt
