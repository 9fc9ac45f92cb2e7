"""Where a result came from: the git commit of the working directory and the software environment.

:func:`git_commit` and :func:`environment_tags` give the values of the environment tags every trial
run carries (:data:`harness.core.names.ENV_TAGS`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def git_commit(cwd: str | Path | None = None) -> str:
    """``git rev-parse HEAD`` of the working directory (``+dirty`` if modified), or ``unknown``."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                              timeout=5)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=5)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment_tags() -> dict[str, str]:
    """``jax_version``, ``jaxlib_version``, ``harness_version``, ``device_kind`` (imports jax)."""
    import jax
    import jaxlib

    import harness

    try:
        dev = jax.devices()[0]
        kind = f"{dev.platform}:{dev.device_kind}"
    except Exception:
        kind = "unknown"
    return {"jax_version": jax.__version__, "jaxlib_version": jaxlib.__version__,
            "harness_version": harness.__version__, "device_kind": kind}
