"""Small rules that several subpackages share: the cache folder, process liveness, atomic JSON files,
frozen (hashable) hyperparameter mappings, finite numbers, a logger's level for a block.

Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

#: Environment variable naming the harness's cache folder (default ``~/.cache/harness``).
CACHE_ENV = "HARNESS_CACHE_DIR"


def cache_dir(*parts: str) -> Path:
    """``$HARNESS_CACHE_DIR`` (default ``~/.cache/harness``) joined with ``parts``; not created.

    The one home of the cache's location: datasets (``.npz``), ``peak.json``, ``batching.json``,
    the MLflow schema template and the spool all live below it.
    """
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "harness").joinpath(*parts)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (``os.kill(pid, 0)``; another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as indented, key-sorted JSON to ``path``: a temporary file, then ``os.replace``.

    A reader never sees half a file. Raises ``OSError`` when the folder cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def freeze(mapping: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """A mapping as a hashable, canonical value: sorted ``(str(key), value)`` pairs, lists and tuples
    as tuples and nested mappings frozen the same way, all the way down.

    The one rule behind :class:`harness.core.spec.TrialSpec`'s hyperparameter fields (hence its
    ``trial_id``) and the dataset memo's key. Example: ``freeze({"b": [1, 2], "a": {"y": 0}}) ==
    (("a", (("y", 0),)), ("b", (1, 2)))``; ``freeze(None) == ()``.
    """
    def norm(v: Any) -> Any:
        if isinstance(v, list | tuple):
            return tuple(norm(x) for x in v)
        if isinstance(v, Mapping):
            return tuple(sorted((str(k), norm(x)) for k, x in v.items()))
        return v

    return tuple(sorted((str(k), norm(v)) for k, v in (mapping or {}).items()))


def finite(x: Any) -> bool:
    """Whether ``x`` is a finite ``int`` or ``float`` (not a ``bool``, not ``nan``/``inf``, not ``None``)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


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
