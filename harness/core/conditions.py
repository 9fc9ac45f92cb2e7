"""Conditions met while a sweep runs are said in one line each, never as a Python warning.

Python prints a warning as ``file:line: Category: message`` followed by the source line that raised
it: inside a sweep's progress output that is two lines of someone else's code, printed once per
place, naming no trial. So while a sweep runs (the sweep's process and every worker that trains),
:func:`one_line_warnings` replaces how warnings are shown:

- a warning whose condition the harness records per trial (:data:`SAID_PER_TRIAL`: XLA's and the
  analytic FLOP counts more than 2x apart, ``harness.train.timing.FlopsMismatchWarning``) is not
  shown: the trial's run gets a tag (``perf.flops_mismatch``) and the sweep prints one line naming
  the optimizer and the task, once (:func:`flops_note`);
- a library's notice about a display the harness never uses (:data:`NOT_OURS`: tqdm's "IProgress
  not found", which ``import mlflow`` raises in a Jupyter kernel without ipywidgets, since MLflow
  imports ``tqdm.auto`` at import; the harness draws no tqdm bar) is not shown;
- any other warning (JAX's, a user's optimizer's, a library's) is one line on stderr,
  ``warning: UserWarning: <first line of its message>``, without the source line.

Warnings stay warnings otherwise: filters (``-W error``, ``PYTHONWARNINGS``) apply as usual.
Standard library only.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["CALLBACK_FAILED", "CALLBACK_LOGGERS", "NOT_OURS", "SAID_PER_TRIAL", "CallbackFailed",
           "drop_callback_failures", "flops_note", "one_line_warnings"]

#: Warning classes (by name) whose condition each trial records itself: never shown as warnings.
SAID_PER_TRIAL = ("FlopsMismatchWarning",)
#: (warning class name, start of its message) of library notices about displays the harness never
#: uses: not shown while a sweep runs.
NOT_OURS = (("TqdmWarning", "IProgress not found"),)

_LOCK = threading.Lock()
_DEPTH = [0]
_SAVED: list[Any] = []


def _show(message: Any, category: type, filename: str, lineno: int, file: Any = None,
          line: str | None = None) -> None:
    """``warnings.showwarning`` while a sweep runs: see the module docstring."""
    if category.__name__ in SAID_PER_TRIAL:
        return
    lines = [ln.strip() for ln in str(message).splitlines() if ln.strip()]
    if any(category.__name__ == name and lines and lines[0].startswith(start) for name, start in NOT_OURS):
        return
    text = f"warning: {category.__name__}: {lines[0] if lines else ''}"
    with contextlib.suppress(OSError, ValueError):  # stderr closed: nothing to say it on
        print(text, file=sys.stderr if file is None else file, flush=True)


@contextlib.contextmanager
def one_line_warnings() -> Iterator[None]:
    """Within the ``with``, warnings are shown as the module docstring says (reentrant, from any
    thread: the outermost exit puts back what was there)."""
    with _LOCK:
        if _DEPTH[0] == 0:
            _SAVED.append(warnings.showwarning)
            warnings.showwarning = _show
        _DEPTH[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH[0] -= 1
            if _DEPTH[0] == 0:
                warnings.showwarning = _SAVED.pop()


def flops_note(optimizer: str, task: str, text: str) -> str:
    """The line a sweep prints once per optimizer and task whose trials' FLOP counts disagree
    (``text``: the trial's ``perf.flops_mismatch`` tag)."""
    return (f"note: {optimizer} on {task}: {text}; its utilisation and cost clock use XLA's count "
            f"(run tag perf.flops_mismatch)")


#: JAX's loggers that print a failed callback's traceback, and those records' messages.
CALLBACK_LOGGERS = ("jax._src.debugging", "jax._src.callback")
CALLBACK_FAILED = ("jax.debug.callback failed", "jax.pure_callback failed", "jax.io_callback failed")


class CallbackFailed(logging.Filter):
    """Drops JAX's "jax.debug.callback failed" records: the trial that raised it is FAILED with the
    traceback kept in its run, and one line says so; ``jax.debug.log`` and every other record pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in CALLBACK_FAILED


def drop_callback_failures() -> None:
    """Put :class:`CallbackFailed` on JAX's :data:`CALLBACK_LOGGERS` in this process (the command
    line's, and each worker's that trains)."""
    for name in CALLBACK_LOGGERS:
        logging.getLogger(name).addFilter(CallbackFailed())
