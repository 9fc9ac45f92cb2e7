"""The test suite's hooks into ``harness``: ``HARNESS_TEST_*`` variables that replace plain seams.

A test puts this folder first on a child process's ``PYTHONPATH`` (:func:`subproc.with_hooks`) and
sets the variables; the folder's ``sitecustomize`` calls :func:`install` at the child's start, so
each seam is replaced when its module is imported (before any other module binds it). Without
such a variable nothing is installed. The seams, each a no-op or a constant in ``harness``:

- ``HARNESS_TEST_KILL_AT=POINT``: :func:`harness.tracking.store_build.kill_point` SIGKILLs the
  process at ``POINT`` (``stmt:N``: before the N-th SQL statement of a migration; or a stage).
- ``HARNESS_TEST_GATE_PAUSE_DIR=DIR``: :func:`harness.execute.rung_gate.before_decision` touches
  ``DIR/<trial id>-<step>`` and waits 0.5 s.
- ``HARNESS_TEST_SUBMISSION_CALL_S=S`` (a positive number):
  :data:`harness.train.algoperf.runner.CALL_LIMIT_S` is ``S``.
- ``HARNESS_TEST_CHUNK_SLEEP_S=S``, ``HARNESS_TEST_TRACE=FILE``:
  :func:`harness.train.checkpoint.chunk_end` appends ``pid step`` to ``FILE``, then sleeps ``S``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType

KILL_AT = "HARNESS_TEST_KILL_AT"
GATE_PAUSE_DIR = "HARNESS_TEST_GATE_PAUSE_DIR"
SUBMISSION_CALL_S = "HARNESS_TEST_SUBMISSION_CALL_S"
CHUNK_SLEEP_S = "HARNESS_TEST_CHUNK_SLEEP_S"
TRACE = "HARNESS_TEST_TRACE"
#: This folder (put first on a child's ``PYTHONPATH``).
HOOKS_DIR = str(Path(__file__).resolve().parent)


def _kill_at(env: Mapping[str, str]) -> Callable[[ModuleType], None] | None:
    point = env.get(KILL_AT)
    if not point:
        return None

    def kill_point(stage: str) -> None:
        if stage == point:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)

    return lambda mod: setattr(mod, "kill_point", kill_point)


def _gate_pause(env: Mapping[str, str]) -> Callable[[ModuleType], None] | None:
    folder = env.get(GATE_PAUSE_DIR)
    if not folder:
        return None

    def before_decision(trial_id: str, step: int) -> None:
        import time

        Path(folder, f"{trial_id}-{step}").touch()
        time.sleep(0.5)

    return lambda mod: setattr(mod, "before_decision", before_decision)


def _call_limit(env: Mapping[str, str]) -> Callable[[ModuleType], None] | None:
    try:
        seconds = float(env.get(SUBMISSION_CALL_S, ""))
    except ValueError:
        return None
    return (lambda mod: setattr(mod, "CALL_LIMIT_S", seconds)) if seconds > 0 else None


def _chunk_end(env: Mapping[str, str]) -> Callable[[ModuleType], None] | None:
    sleep_s, trace = float(env.get(CHUNK_SLEEP_S) or 0), env.get(TRACE, "")
    if not (sleep_s or trace):
        return None

    def chunk_end(step: int) -> None:
        import time

        if trace:
            with open(trace, "a") as f:
                f.write(f"{os.getpid()} {step}\n")
        if sleep_s:
            time.sleep(sleep_s)

    return lambda mod: setattr(mod, "chunk_end", chunk_end)


#: module → the rule that makes its patch from the environment (``None``: the hook is not asked for)
SEAMS = {"harness.tracking.store_build": _kill_at, "harness.execute.rung_gate": _gate_pause,
         "harness.train.algoperf.runner": _call_limit, "harness.train.checkpoint": _chunk_end}


class _PatchOnImport:
    """A meta-path finder that patches each hooked module right after it is executed."""

    def __init__(self, patches: dict[str, Callable[[ModuleType], None]]):
        self.patches = patches

    def find_spec(self, name, path, target=None):
        if name not in self.patches:
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run, patch = spec.loader.exec_module, self.patches[name]

        def exec_module(module: ModuleType) -> None:
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


def install(env: Mapping[str, str] = os.environ) -> list[str]:
    """Patch the seams ``env`` asks for: a module already imported now, the others when imported.

    Args:
      env: the environment to read the ``HARNESS_TEST_*`` variables from.

    Returns:
      The names of the hooked modules.
    """
    patches = {name: p for name, rule in SEAMS.items() if (p := rule(env)) is not None}
    for name in [n for n in patches if n in sys.modules]:
        patches.pop(name)(sys.modules[name])
    if patches:
        sys.meta_path.insert(0, _PatchOnImport(patches))
    return sorted(n for n, rule in SEAMS.items() if rule(env) is not None)
