"""Streamed token shards: peak memory of a sweep against the corpus size, and steps per second
streamed against the same tokens held in memory.

Run: ``pytest tests/benchmarks/test_bench_tokens.py --benchmark-only -s``.

* **Peak RSS.** A real sweep (``python -m harness sweep``, a subprocess; 1 trial of a 1-layer
  ``transformer_lm``, 60 steps) over a folder of llm.c GPT-2 shards of ``HARNESS_BENCH_TOKENS_SMALL_MB``
  (default 200) and ``HARNESS_BENCH_TOKENS_LARGE_MB`` (default 2,000) MB of tokens: the peak resident
  set of each sweep process (``ru_maxrss`` of its wrapper's children) must stay under 1 GiB, and the
  large corpus's at most 1.1x the small one's (it does not grow with the corpus).
* **Throughput.** One trial on the same 8M tokens streamed (``stream: true``) and held in memory
  (``stream: false``), ``HARNESS_BENCH_TOKENS_ROUNDS`` (default 5) rounds interleaved, compile
  excluded (the trainer's ``time.train``): the median paired ratio of steps per second streamed /
  in memory must be >= 0.9; the streamed trial's ``data_wait_s`` (time the loop waited on data) is
  reported beside its training seconds.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml
from paired import record

from harness.core.spec import TrialSpec
from harness.data.shards import HEADER_BYTES, HEADER_INTS
from harness.data.tokens import load_tokens
from harness.train import loop as trainer

ROOT = Path(__file__).resolve().parents[2]
MAX_RSS = 1 << 30


def _write(path: Path, n_tokens: int, seed: int, chunk: int = 1 << 24) -> None:
    """An llm.c GPT-2 shard of ``n_tokens`` random ids below 256, written in chunks (never whole)."""
    rng = np.random.default_rng(seed)
    header = np.zeros(HEADER_INTS, "<i4")
    header[:3] = (20240520, 1, n_tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for i in range(0, n_tokens, chunk):
            f.write(rng.integers(0, 256, min(chunk, n_tokens - i), dtype="<u2").tobytes())
    assert path.stat().st_size == HEADER_BYTES + 2 * n_tokens


def _corpus(root: Path, megabytes: int) -> Path:
    d = root / f"c{megabytes}"
    d.mkdir()
    per = 100_000_000  # modded-nanogpt's shard size
    left = megabytes * 1_000_000 // 2
    k = 0
    while left > 0:
        _write(d / f"bench_train_{k:06d}.bin", min(per, left), k)
        left -= per
        k += 1
    _write(d / "bench_val_000000.bin", 65_536, 999)
    (d / "tokens.json").write_text('{"tokenizer": "bytes", "max_token_id": 255, "bytes_per_token": 1.0}\n')
    return d


_PEAK = textwrap.dedent("""
    import resource, subprocess, sys
    r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
    print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
    sys.stderr.write(r.stdout[-2000:] + r.stderr[-2000:])
""")


def _peak_rss(corpus: Path, work: Path) -> int:
    cfg = work / f"{corpus.name}.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": f"rss-{corpus.name}", "models": [{"name": "transformer_lm",
                                                  "hparams": {"width": 32, "depth": 1, "num_heads": 2}}],
        "optimizers": [{"name": "adam", "hparams": {"step_size": 1e-3}}], "schedules": ["constant"],
        "datasets": [{"name": f"tokens:{corpus}", "hparams": {"seq_len": 128, "valid_tokens": 8192}}],
        "seeds": [0], "batch_size": 16, "budget": {"steps": 60}, "eval_every": 30, "measure_perf": False}))
    cmd = [sys.executable, "-c", _PEAK, sys.executable, "-m", "harness", "sweep", str(cfg),
           "--tracking-uri", f"sqlite:///{work / (corpus.name + '.db')}"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    rc, peak = out.stdout.split()
    assert rc == "0", out.stderr
    return int(peak)


def test_peak_rss_of_a_sweep_does_not_grow_with_the_corpus(benchmark):
    small = int(os.environ.get("HARNESS_BENCH_TOKENS_SMALL_MB", "200"))
    large = int(os.environ.get("HARNESS_BENCH_TOKENS_LARGE_MB", "2000"))
    with tempfile.TemporaryDirectory(prefix="bench-tokens-") as tmp:
        work = Path(tmp)
        peaks = {mb: _peak_rss(_corpus(work, mb), work) for mb in (small, large)}
    info = {f"peak_rss_mb_{mb}MB_corpus": round(p / 2**20, 1) for mb, p in peaks.items()}
    info["ratio_large_small"] = round(peaks[large] / peaks[small], 3)
    print("\n", info)
    benchmark.extra_info.update(info)
    record(benchmark, [0.0])
    assert max(peaks.values()) < MAX_RSS
    assert peaks[large] <= 1.1 * peaks[small]


def _spec(corpus: Path, stream: bool, steps: int) -> TrialSpec:
    return TrialSpec.make(sweep="bench-tokens", model="transformer_lm", optimizer="adam", schedule="constant",
                          dataset=f"tokens:{corpus}", seed=0, steps=steps, batch_size=16, eval_every=steps,
                          steps_per_dispatch=25, optimizer_hparams={"step_size": 1e-3},
                          model_hparams={"width": 64, "depth": 2, "num_heads": 4},
                          dataset_hparams={"seq_len": 128, "valid_tokens": 4096, "stream": stream})


@pytest.mark.parametrize("steps", [100])
def test_streamed_steps_per_second_against_in_memory(benchmark, steps):
    rounds = int(os.environ.get("HARNESS_BENCH_TOKENS_ROUNDS", "5"))
    with tempfile.TemporaryDirectory(prefix="bench-tokens-") as tmp:
        corpus = _corpus(Path(tmp), 16)  # 8M tokens: small enough to hold, streamed when asked
        variants = {}
        for stream in (True, False):
            spec = _spec(corpus, stream, steps)
            variants[stream] = (spec, load_tokens(**{"path": str(corpus), **spec.hparams("dataset")}))
        times: dict[bool, list[float]] = {True: [], False: []}
        waits = []
        for r in range(rounds + 1):  # round 0 compiles, untimed
            for stream in ((True, False) if r % 2 else (False, True)):
                spec, ds = variants[stream]
                res = trainer.run_trial(spec, dataset=ds, measure_perf=False)
                if r:
                    times[stream].append(res.extra["time"]["train"])
                    if stream:
                        waits.append(res.extra["data_wait_s"])
    ratios = [m / s for s, m in zip(times[True], times[False], strict=True)]  # steps/s streamed / in memory
    info = {"steps_per_s_ratio_streamed_over_memory": round(statistics.median(ratios), 3),
            "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3),
            "streamed_train_s": round(statistics.median(times[True]), 3),
            "memory_train_s": round(statistics.median(times[False]), 3),
            "streamed_data_wait_s": round(statistics.median(waits), 4)}
    print("\n", info)
    benchmark.extra_info.update(info)
    record(benchmark, times[True])
    assert statistics.median(ratios) >= 0.9
