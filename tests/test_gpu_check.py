"""tests/benchmarks/gpu_check.py runs on CPU in small mode and prints its table (figures positive)."""

from __future__ import annotations

import json
import math
import re

from subproc import load_benchmark_script

from harness.train import batching, timing


def _gpu_check():
    return load_benchmark_script("gpu_check")


def test_gpu_check_small_on_cpu(capsys, monkeypatch, tmp_path):
    gc = _gpu_check()
    # the peak is measured once per machine and cached (peak.json); a fresh CI machine would pay it
    monkeypatch.setattr(timing, "device_peak_flops", lambda device=None, dtype=None, **kw: 3e10)
    # the MLP at float32 only, and the batching part's compiling repetition only, keep the test's
    # compiles few (it costs seconds of CPU per program); the script's full CPU run is in the issue
    # harness.batching measures for real here: its chunks are the ones the script just compiled
    monkeypatch.delenv("HARNESS_BATCH", raising=False)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(batching, "_MEM", {})
    out = gc.main(["--small", "--workloads", "mlp", "--dtypes", "float32", "--reps", "0"])
    text = capsys.readouterr().out
    assert out["size"] == "small" and [(r["workload"], r["dtype"]) for r in out["rows"]] == [
        ("mlp", "float32")]
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("workload"))
    assert lines[head].split() == ["workload", "dtype", "batch", "step", "ms", "examples/s", "GFLOP/step",
                                   "TFLOP/s", "util", "%", "peak", "TFLOP/s"]
    table = lines[head + 2: head + 3]
    for line, row in zip(table, out["rows"], strict=True):
        cells = line.split()
        assert cells[:2] == [row["workload"], row["dtype"]] and len(cells) == len(gc.COLUMNS)
        assert all(float(c) > 0 for c in cells[2:])
    for row in out["rows"]:
        assert set(row) == set(gc.COLUMNS)
        assert all(math.isfinite(row[k]) and row[k] > 0 for k in gc.COLUMNS[2:])
    b = out["batching"]
    assert b["seeds"] == 8 and b["speedup"] > 0 and b["batched_s"] > 0 and b["sequential_s"] > 0
    assert re.search(r"trial batching, 8 seeds of mlp .* -> \d+\.\d\dx", text)
    assert re.fullmatch(r"(vmap\(8\)|sequential): measured \d+\.\d\dx", b["decision"])
    (key, entry), = json.loads((tmp_path / "batching.json").read_text()).items()
    assert "|T=8|" in key and entry["label"] == b["decision"] and entry["reps"] >= batching.MIN_REPS
    assert f"harness.batching decides: {b['decision']} (measured)" in text


def test_a_cached_batching_decision_says_so():
    """The CPU run printed vmapped 1.08x faster, then "harness.batching decides: sequential:
    measured 0.62x": a decision cached hours earlier on a busier machine, not said to be one."""
    gc = _gpu_check()
    d = gc._decision(batching.Decision(False, "sequential: measured 0.62x", 0.62, "cached"))
    assert d == {"decision": "sequential: measured 0.62x",
                 "decision_source": f"cached from an earlier run; delete {batching.cache_path()} to "
                                    "measure again"}


def test_gpt_check_small_on_cpu():
    gc = load_benchmark_script("gpt_check")
    r = gc.gpt_row("small", steps=1)
    assert (r["batch"], r["context"], r["dtype"], r["memory_source"]) == (2, 64, "bfloat16", "compiled")
    assert r["step_ms"] > 0 and r["peak_memory_gib"] > 0 and math.isfinite(r["loss"])
    assert math.isnan(r["mfu_pct"])  # a CPU has no stated peak
    assert gc.stated_peak("NVIDIA H200") == 989e12 and gc.stated_peak("cpu") is None
    assert re.match(r"gpt 2x64 bfloat16 remat none: step \d+\.\d ms, \d+ tokens/s", gc.format_row(r))
