"""The test suite's hooks (``tests/hooks``) replace plain seams of ``harness`` in a child process,
and ``harness`` itself holds no test hook: no ``HARNESS_TEST_`` string under ``harness/``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from subproc import with_hooks

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import harness.execute.rung_gate as gate, harness.train.checkpoint as ckpt
import harness.train.algoperf.runner as runner
from harness.tracking import store, store_build
ckpt.chunk_end(7)
gate.before_decision("abc", 3)
print(runner.call_limit_s(), flush=True)
store_build.kill_point("built")
print("alive", flush=True)
store_build.kill_point("linked")
print("not reached", flush=True)
"""


def _child(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_hooks_replace_the_seams_in_a_child(tmp_path):
    trace, pause = tmp_path / "trace", tmp_path / "pause"
    pause.mkdir()
    env = with_hooks({**os.environ, "PYTHONPATH": str(ROOT)}, HARNESS_TEST_TRACE=str(trace),
                     HARNESS_TEST_CHUNK_SLEEP_S="0.01", HARNESS_TEST_GATE_PAUSE_DIR=str(pause),
                     HARNESS_TEST_SUBMISSION_CALL_S="3", HARNESS_TEST_KILL_AT="linked")
    r = _child(tmp_path, env)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert r.stdout.split() == ["3.0", "alive"]
    pid, step = trace.read_text().split()
    assert int(pid) > 0 and step == "7"
    assert [p.name for p in pause.iterdir()] == ["abc-3"]


def test_without_the_hooks_the_seams_do_nothing(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_TEST_KILL_AT": "linked",
           "HARNESS_TEST_SUBMISSION_CALL_S": "3"}  # the variables alone, hooks not on the path
    r = _child(tmp_path, env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["600.0", "alive", "not", "reached"]


def test_harness_holds_no_test_hook():
    found = [str(p.relative_to(ROOT)) for p in (ROOT / "harness").rglob("*.py")
             if "HARNESS_TEST_" in p.read_text(encoding="utf-8")]
    assert found == []
