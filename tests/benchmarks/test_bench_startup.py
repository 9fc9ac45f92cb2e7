"""Start-up: seconds from a ``python -m harness sweep`` process's start to its first
line of output, on a pipe and on a terminal, and the wall-clock of the light commands.

Run: ``pytest tests/benchmarks/test_bench_startup.py --benchmark-only -s`` (about a minute on 2
cores). Each round starts a fresh process on the tiny sweep below (``--dry-run``: nothing trained
or written) and stops it at its first non-empty line (a terminal's control sequences removed).
The rounds of the variants are interleaved (:mod:`paired`); pytest-benchmark's table gets the
pipe's seconds (``record``), ``extra_info`` the medians of every variant.

Before, the first line waited for ``import jax`` (switching on the compilation cache
came first): 4.5 s after the start on a loaded machine. Now the stage line is set before JAX or
MLflow is imported: on a terminal it is printed then, on a pipe 0.5 s after the process start.
Measured on 2 shared cores (2026-12-02), 5 rounds: at a load average of ~2.5, pipe 0.72-0.83 s,
terminal 0.68-0.82 s (the quickstart's ``--dry-run`` on a pipe, same moment: 3.5-4.1 s before, 0.64-0.75
s after, three interleaved pairs); ``--help`` 0.18 s, ``report --help`` 0.45 s, ``status`` (no
store) 0.69 s, ``list`` 3.3 s (its registries import JAX). At a load average of ~7 every import
takes several times as long: pipe 3.4-4.2 s, terminal 3.1-4.5 s. The order of events is tested in
``tests/test_startup.py``.
"""

from __future__ import annotations

import os
import pty
import re
import select
import statistics
import subprocess
import sys
import time

import pytest
import yaml
from paired import interleave, record

CONFIG = {"name": "startup", "models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}],
          "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}}], "schedules": ["constant"],
          "datasets": ["digits"], "seeds": [0], "batch_size": 32, "budget": {"steps": 40},
          "eval_every": 20, "steps_per_dispatch": 20, "measure_perf": False}
_CONTROLS = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|[\r\x1b]")


def _first_line(args: list[str], cwd, terminal: bool) -> float:
    """Seconds from starting ``python -m harness ARGS`` to its first non-empty output line."""
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm", "HARNESS_CACHE_DIR": str(cwd / "cache")}
    if terminal:
        master, slave = pty.openpty()
        out = master
    else:
        r, w = os.pipe()
        slave, out = w, r
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "harness", *args], stdin=subprocess.DEVNULL,
                         stdout=slave, stderr=slave, cwd=cwd, env=env)
    os.close(slave)
    buf, seen = b"", None
    try:
        while seen is None:
            ready, _, _ = select.select([out], [], [], 120)
            if not ready:
                raise TimeoutError(f"no output from {args} in 120 s")
            try:
                data = os.read(out, 4096)
            except OSError:  # EIO: the child closed the pty
                data = b""
            if not data:
                raise RuntimeError(f"{args} ended without a line: {buf!r}")
            buf += data
            if any(_CONTROLS.sub(b"", ln).strip() for ln in buf.split(b"\n")):
                seen = time.perf_counter() - t0
    finally:
        p.kill()
        p.wait()
        os.close(out)
    return seen


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("startup")
    (d / "sweep.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    return d


def test_first_line_of_a_sweep(benchmark, work):
    args = ["sweep", str(work / "sweep.yaml"), "--dry-run", "--tracking-uri", f"sqlite:///{work / 'x.db'}"]
    firsts: dict[str, list[float]] = {"pipe": [], "terminal": []}

    def first(kind: str) -> None:
        firsts[kind].append(_first_line(args, work, kind == "terminal"))

    interleave({k: (lambda k=k: first(k)) for k in firsts}, rounds=5, warmup=1)
    firsts = {k: v[1:] for k, v in firsts.items()}  # the untimed warm-up round left out
    benchmark.extra_info.update({f"first_line_{k}_s": statistics.median(v) for k, v in firsts.items()})
    print({k: [round(x, 2) for x in v] for k, v in firsts.items()})
    record(benchmark, firsts["pipe"])


def test_light_commands(benchmark, work):
    cmds = {"help": ["--help"], "report_help": ["report", "--help"], "list": ["list"],
            "status": ["status", "--tracking-uri", f"sqlite:///{work / 'none.db'}"]}

    def run(args):
        return lambda: subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True,
                                      cwd=work, timeout=120)

    times = interleave({k: run(v) for k, v in cmds.items()}, rounds=5)
    benchmark.extra_info.update({f"{k}_s": statistics.median(v) for k, v in times.items()})
    print({k: round(statistics.median(v), 2) for k, v in times.items()})
    record(benchmark, times["help"])
