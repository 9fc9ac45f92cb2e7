"""Where a result came from: the harness's own git commit, the config folder's, and the software
environment.

:func:`commit_tags` and :func:`environment_tags` give the values of the environment tags every trial
run carries (:data:`harness.core.names.ENV_TAGS`). The harness's commit is read where the running
``harness`` package lives (an editable install of a git checkout: that checkout), not in the
working directory: a sweep run from a project folder outside the clone recorded ``git_commit
unknown``. The config's folder is a repository of its own (the user's experiments),
recorded apart.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from harness.core.names import TAG_CONFIG_COMMIT, TAG_HARNESS_COMMIT


def _git(cwd: str | Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5)


def git_commit(cwd: str | Path | None = None, tracked: str | Path | None = None) -> str:
    """``git rev-parse HEAD`` of the repository holding ``cwd`` (``+dirty`` if a tracked file is
    modified), or ``unknown``. With ``tracked`` (a path in that repository), also ``unknown`` when
    git does not track that file (a virtual environment's ``site-packages`` inside some other
    repository is not that repository's code)."""
    try:
        head = _git(cwd or ".", "rev-parse", "HEAD")
        if head.returncode != 0:
            return "unknown"
        if tracked is not None and _git(cwd or ".", "ls-files", "--error-unmatch", str(tracked)).returncode:
            return "unknown"
        dirty = _git(cwd or ".", "status", "--porcelain", "--untracked-files=no")
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@functools.cache
def harness_commit() -> str:
    """The commit (``+dirty``) of the git checkout the running ``harness`` package is imported from
    (an editable install: the clone, wherever the sweep runs), or ``unknown`` (an installed wheel)."""
    import harness

    pkg = Path(harness.__file__).resolve().parent
    return git_commit(pkg.parent, tracked=pkg / "__init__.py")


def config_commit(config_path: str | Path) -> str:
    """The commit (``+dirty``) of the repository holding the config file's folder,
    ``+untracked`` when the config itself is not in it; ``unknown`` outside a repository."""
    path = Path(config_path).resolve()
    commit = git_commit(path.parent)
    if commit != "unknown" and _git(path.parent, "ls-files", "--error-unmatch", path.name).returncode:
        commit += "+untracked"
    return commit


def commit_tags(config_path: str | Path) -> dict[str, str]:
    """``harness_commit`` and ``config_commit`` (:mod:`harness.core.names`): the provenance tags of
    a sweep's parent and trial runs."""
    return {TAG_HARNESS_COMMIT: harness_commit(), TAG_CONFIG_COMMIT: config_commit(config_path)}


def environment_tags() -> dict[str, str]:
    """``jax_version``, ``jaxlib_version``, ``harness_version``, ``device_kind`` and, on a CPU device,
    ``xla_cpu_threads`` (the threads of XLA's CPU pool this process computes on:
    :func:`harness.core.xla_threads.pool_threads`, read once JAX's client has started). Imports jax."""
    import jax
    import jaxlib

    import harness
    from harness.core.names import TAG_XLA_CPU_THREADS
    from harness.core.xla_threads import pool_threads

    try:
        dev = jax.devices()[0]
        kind = f"{dev.platform}:{dev.device_kind}"
    except Exception:
        kind = "unknown"
    tags = {"jax_version": jax.__version__, "jaxlib_version": jaxlib.__version__,
            "harness_version": harness.__version__, "device_kind": kind}
    threads = pool_threads() if kind.startswith("cpu:") else None
    if threads:
        tags[TAG_XLA_CPU_THREADS] = str(threads)
    return tags
