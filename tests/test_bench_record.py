"""pytest-benchmark's table and saved JSON describe the harness's measured rounds:
five benchmarks handed the fixture a ``lambda: None``, so its table reported a Transformer step as
1.458 µs. ``tests/benchmarks/paired.record`` gives the fixture the interleaved rounds' seconds."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "tests" / "benchmarks"

PROBE = """\
from paired import record


def test_probe(benchmark):
    benchmark.extra_info["harness_over_reference"] = 0.97
    record(benchmark, [0.010, 0.030, 0.020, 0.040], per=10)
"""


def test_record_gives_the_fixture_the_measured_rounds(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, "-m", "pytest", str(tmp_path / "test_probe.py"), "-q", "-p",
                        "no:cacheprovider", "--benchmark-only", f"--benchmark-json={out}",
                        f"--rootdir={tmp_path}", "-c", "/dev/null"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(BENCH), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (bench,) = json.loads(out.read_text())["benchmarks"]
    stats = bench["stats"]
    assert stats["rounds"] == 4
    assert abs(stats["min"] - 0.001) < 1e-12 and abs(stats["max"] - 0.004) < 1e-12
    assert abs(stats["median"] - 0.0025) < 1e-12
    assert bench["extra_info"] == {"harness_over_reference": 0.97}


def test_no_benchmark_hands_the_fixture_an_empty_function():
    offenders = [f"{p.name}:{i}" for p in sorted(BENCH.glob("test_*.py"))
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if re.search(r"pedantic\(\s*lambda\s*:\s*None", line)]
    assert offenders == []


def test_interleave_times_cpu_seconds_of_the_same_rounds():
    sys.path.insert(0, str(BENCH))
    try:
        from paired import interleave
    finally:
        sys.path.remove(str(BENCH))

    def spin():  # 30 ms of this process's CPU, however long the machine makes it wait
        c0 = time.process_time()
        while time.process_time() - c0 < 0.03:
            pass

    cpu: dict[str, list[float]] = {}
    wall = interleave({"sleep": lambda: time.sleep(0.05), "spin": spin}, 3, warmup=0, cpu=cpu)
    assert sorted(cpu) == ["sleep", "spin"] and all(len(v) == 3 for v in (*cpu.values(), *wall.values()))
    assert all(w >= 0.05 for w in wall["sleep"]) and all(c < 0.025 for c in cpu["sleep"]), (wall, cpu)
    assert all(c >= 0.03 for c in cpu["spin"]) and all(w >= 0.03 for w in wall["spin"]), (wall, cpu)
    assert interleave({"sleep": lambda: None}, 2, warmup=0).keys() == {"sleep"}  # cpu stays optional
