"""The harness's cache folder, and JSON files written there atomically.

Standard library only.
"""

from __future__ import annotations

import json
import os
import threading
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


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as indented, key-sorted JSON to ``path``: a temporary file, then ``os.replace``.

    A reader never sees half a file. Raises ``OSError`` when the folder cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)
