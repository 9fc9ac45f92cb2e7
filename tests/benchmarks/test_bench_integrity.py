"""What the token data's integrity checks cost: the range check per window, the shard checks per
chunk and at a trial's end, and the full-content digest per GB.

Run: ``pytest tests/benchmarks/test_bench_integrity.py --benchmark-only -s``.

* **Range check per window.** ``TokenStream.batches`` of ``B = 64`` windows of ``T = 1024`` tokens
  (random windows of ``HARNESS_BENCH_INTEGRITY_MB``, default 200, MB of GPT-2 shards), with the
  batch's check (one pass over its tokens; a failing batch is read again window by window to name
  the shard and offset) and with it replaced by a no-op, ``HARNESS_BENCH_INTEGRITY_ROUNDS``
  (default 20) rounds interleaved, CPU seconds: the median paired ratio (checked / unchecked) must be <= 1.10.
* **Shard checks.** ``TokenStream.check_unchanged`` (after every chunk: ``stat`` + ``fstat`` per
  shard) and ``TokenStream.verify`` (at the trial's end: also the sampled digest's blocks), in
  microseconds for the corpus's shards, against one chunk's read of 64 windows.
* **Full-content digest.** ``content_digest`` of the corpus from the page cache, in seconds per GB
  (its per-process cache cleared first), and again with the cache (the files unchanged).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import pytest
from paired import record
from test_bench_tokens import _corpus

from harness.data import shards
from harness.data import stream as stream_mod
from harness.data.tokens import load_tokens, scan

B, T = 64, 1024


def _cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


@pytest.mark.parametrize("batch", [B])
def test_integrity_checks_cost(benchmark, monkeypatch, batch):
    mb = int(os.environ.get("HARNESS_BENCH_INTEGRITY_MB", "200"))
    rounds = int(os.environ.get("HARNESS_BENCH_INTEGRITY_ROUNDS", "20"))
    with tempfile.TemporaryDirectory(prefix="bench-integrity-") as tmp:
        corpus = _corpus(Path(tmp), mb)
        ds = load_tokens(str(corpus), seq_len=T, valid_tokens=4096, stream=True)
        s = ds.stream
        checked = stream_mod.TokenStream._check_range

        def read(step: int, check: bool) -> float:
            monkeypatch.setattr(stream_mod.TokenStream, "_check_range", checked if check else lambda *a: None)
            return _cpu(lambda: s.batches(0, step, 1, batch))

        times: dict[bool, list[float]] = {True: [], False: []}
        for r in range(rounds + 1):  # round 0 warms the page cache, untimed
            for check in ((True, False) if r % 2 else (False, True)):
                dt = read(r, check)
                if r:
                    times[check].append(dt)
        ratios = [c / u for c, u in zip(times[True], times[False], strict=True)]
        per_window_us = [(c - u) / batch * 1e6 for c, u in zip(times[True], times[False], strict=True)]
        n = 200
        unchanged_us = _cpu(lambda: [s.check_unchanged() for _ in range(n)]) / n * 1e6
        verify_us = _cpu(lambda: [s.verify() for _ in range(20)]) / 20 * 1e6
        infos = list(scan(str(corpus)).shards)
        size_gb = sum(i.size for i in infos) / 1e9
        shards._CONTENT.clear()
        t0 = time.perf_counter()
        shards.content_digest(infos)
        full_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        shards.content_digest(infos)
        cached_s = time.perf_counter() - t0
    info = {"range_check_ratio_checked_over_unchecked": round(statistics.median(ratios), 3),
            "range_check_us_per_window": round(statistics.median(per_window_us), 2),
            "chunk_read_ms_64_windows": round(statistics.median(times[False]) * 1e3, 3),
            "check_unchanged_us": round(unchanged_us, 1), "verify_us": round(verify_us, 1),
            "shards": len(s.infos), "full_digest_s_per_gb": round(full_s / size_gb, 3),
            "full_digest_cached_ms": round(cached_s * 1e3, 3)}
    print("\n", info)
    benchmark.extra_info.update(info)
    record(benchmark, times[True])
    assert statistics.median(ratios) <= 1.10
