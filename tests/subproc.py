"""Helpers the tests share for running things out of process: a command in a pseudo-terminal, the
scripts under ``tests/benchmarks/`` loaded as modules, CPU-burning processes (a busy machine), and a
child's environment with the test hooks (``tests/hooks``)."""

from __future__ import annotations

import importlib.util
import os
import pty
import subprocess
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).parent / "benchmarks"


def run_in_pty(argv: list[str], *, cwd: Path, env: dict, timeout: float = 300) -> tuple[int, bytes]:
    """Run ``argv`` with stdin, stdout and stderr on a new pseudo-terminal (so the child sees a
    terminal); returns its exit code and every byte it wrote."""
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the pty
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return p.wait(timeout=timeout), b"".join(chunks)


def load_benchmark_script(name: str) -> ModuleType:
    """``tests/benchmarks/<name>.py`` imported as the module ``name``."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def burn_cpus(n: int) -> list[subprocess.Popen]:
    """``n`` processes spinning (``while True: pass``); the caller kills them."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


#: The folder whose ``sitecustomize`` installs the ``HARNESS_TEST_*`` hooks in a child process
#: (``tests/hooks/harness_test_hooks.py``).
HOOKS = Path(__file__).parent / "hooks"


def with_hooks(env: dict[str, str], **hooks: str) -> dict[str, str]:
    """``env`` with :data:`HOOKS` first on ``PYTHONPATH`` and the hook variables ``hooks`` set.

    Args:
      env: a child's environment (not changed).
      **hooks: ``HARNESS_TEST_*`` variables and their values.

    Returns:
      A new environment for the child.
    """
    path = os.pathsep.join([str(HOOKS), *filter(None, [env.get("PYTHONPATH")])])
    return {**env, **hooks, "PYTHONPATH": path}
