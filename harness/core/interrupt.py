"""Ctrl-C (and SIGTERM) kept where Python would drop it.

Python raises ``KeyboardInterrupt`` in whatever Python code runs when SIGINT arrives. Inside a
garbage-collection callback (JAX registers one, ``_xla_gc_callback``) or a ``__del__``, the exception
is only reported ("Exception ignored in: ...") and lost, and the program goes on: a sweep would train
every trial and exit 0 after its user pressed Ctrl-C (docs/decisions.md, "A Ctrl-C is never lost").

While a sweep runs (:func:`kept`), its SIGINT handler (SIGTERM's too: a sweep stops on it as on
Ctrl-C, :data:`SIGNUM` says which) also notes the interrupt, and :func:`check`,
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
#: The signal :func:`handler` last took: SIGINT (Ctrl-C) or SIGTERM (what ``timeout``, SLURM,
#: Kubernetes and systemd send first); the sweep's exit status is 128 + it.
SIGNUM = [int(signal.SIGINT)]
#: The signals a sweep takes, each with the handler Python starts with (only then is it taken).
_DEFAULTS = ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL))
#: The signals the running :func:`kept` block took (:func:`retake` takes them back).
_TAKEN: list[signal.Signals] = []
#: Whether :func:`handler` has raised its interrupt: the sweep is stopping, and a second signal is
#: ignored (raised again inside the stop's own writes, it would leave trial runs RUNNING, end the
#: parent run before the last results are counted, and leave a Ray sweep's workers running).
_STOPPING = [False]


def handler(signum: int, frame: Any) -> None:
    """The sweep's SIGINT and SIGTERM handler: note the interrupt and its signal, then raise
    ``KeyboardInterrupt`` as Python's default SIGINT handler does (SIGTERM's default kills the
    process, losing the results queued for the writer and leaving the parent run RUNNING).
    Once per :func:`kept` block: a signal after that one is ignored while the sweep stops."""
    if _STOPPING[0]:
        return
    _NOTED[0] = _STOPPING[0] = True
    SIGNUM[0] = int(signum)
    raise KeyboardInterrupt


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """:func:`handler` for SIGINT and SIGTERM during the block, each where it has Python's default
    handler and this is the main thread (else nothing changes: an embedding program's own handler
    is kept); the default handlers are put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken = [(s, d) for s, d in _DEFAULTS if signal.getsignal(s) is d]
    _NOTED[0], _STOPPING[0], SIGNUM[0] = False, False, int(signal.SIGINT)
    for s, _ in taken:
        signal.signal(s, handler)
    _TAKEN[:] = [s for s, _ in taken]
    try:
        yield
    finally:
        _TAKEN.clear()
        for s, d in taken:
            signal.signal(s, d)
        _NOTED[0] = _STOPPING[0] = False


def retake() -> None:
    """Put :func:`handler` back on the signals the running :func:`kept` block took, after a library
    replaced it (``ray.init`` sets SIGTERM's to ``sys.exit(15)``: a Ray sweep ended with exit 15, no
    line, behind Ray's C++ stack dump; ``ray.shutdown`` resets the process's action to the default
    while ``signal.getsignal`` still names this handler, so it is set again whatever that says).
    Nothing outside :func:`kept` or off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    for s in _TAKEN:
        signal.signal(s, handler)


def noted() -> bool:
    """Whether :func:`handler` took a signal that no :func:`check` has raised again yet: a
    ``KeyboardInterrupt`` now is the sweep's interrupt, not one a user's code raised
    (:func:`harness.core.source.bounded` tells the two apart by it)."""
    return _NOTED[0]


def check() -> None:
    """Raise ``KeyboardInterrupt`` for a Ctrl-C noted by :func:`handler` (once).

    Raises:
      KeyboardInterrupt: the user pressed Ctrl-C since the sweep started (its exception may have
        been lost inside a garbage-collection callback).
    """
    if _NOTED[0]:
        _NOTED[0] = False
        raise KeyboardInterrupt
