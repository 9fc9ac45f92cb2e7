"""Processes: whether one is alive on this host, and how the user invokes this interpreter.

Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (``os.kill(pid, 0)``; another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def python_command() -> str:
    """How the user should invoke this interpreter: ``python`` when that resolves on ``PATH`` to
    ``sys.executable`` (e.g. an activated venv), else ``sys.executable`` relative to the working
    directory when it lies under it (``.venv/bin/python``), else its absolute path."""
    import shlex
    import shutil
    import sys

    exe = sys.executable
    found = shutil.which("python")
    # same bin directory and same binary (a venv's python and python3 are links to one file; the
    # system python that a venv links to is a different directory, so it does not count)
    if found and os.path.dirname(os.path.abspath(found)) == os.path.dirname(os.path.abspath(exe)) \
            and os.path.realpath(found) == os.path.realpath(exe):
        return "python"
    try:
        rel = Path(exe).relative_to(Path.cwd())
    except ValueError:
        return shlex.quote(exe)
    return shlex.quote(str(rel))
