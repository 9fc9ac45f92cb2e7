"""What the one-thread CPU pool costs training: the trainer's chunk on XLA's whole pool against one thread.

Run: ``pytest tests/benchmarks/test_bench_threads.py --benchmark-only -s`` (skipped in the normal
run by ``--benchmark-skip``). ``import harness`` sets XLA's CPU pool (and BLAS's) to one thread
(:mod:`harness.core.xla_threads`) so that step times rank optimizers the same on a busy machine;
``HARNESS_XLA_CPU_THREADS=all`` gives XLA its whole pool. The README quotes this benchmark.

Two worker processes per model, one per setting, each builds the trainer's compiled K-step chunk
(:func:`tests/device/check._harness_chunk`, as training runs it) once; then they take turns round
by round (:func:`paired.interleave`: one runs while the other waits), and the figure is the median
of the per-round wall-time ratios one thread / whole pool (above 1: the whole pool trains faster),
with its IQR. Models: ResNet-18 (width 16, 32×32×3, batch 64, momentum) and ``transformer_lm``
(width 256, depth 4, 4 heads, context 128, batch 32, adam), K = 3. The figure depends on the cores
and their load: the test prints ``os.cpu_count()`` and the load average beside it. It asserts only
that both settings trained (a speed claim is the README's, with these conditions).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))  # paired.py

from paired import interleave, paired, record  # noqa: E402

#: model -> (model hparams, dataset, dataset hparams, batch, optimizer)
CASES = {
    "resnet18": ({"width": 16}, "synthetic", {"num_examples": 1024, "num_valid": 16, "num_test": 16,
                                              "input_shape": [32, 32, 3]}, 64, "momentum"),
    "transformer_lm": ({"width": 256, "depth": 4, "num_heads": 4}, "markov_lm",
                       {"seq_len": 128, "num_train": 1024, "num_valid": 16, "num_test": 16}, 32, "adam"),
}
K = 3
ROUNDS = int(os.environ.get("HARNESS_BENCH_ROUNDS", "9"))


def worker(model: str) -> None:
    """Build ``model``'s chunk under this process's thread setting, then run it once per line read."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "device")]
    import check  # sets nothing itself; `import harness` inside it reads HARNESS_XLA_CPU_THREADS

    from harness.data.sources import load_dataset

    hp, dataset, dhp, batch, opt = CASES[model]
    spec = check._spec(model, hp, dataset, dhp, batch, "float32", k=K, steps=K, optimizer=opt)
    run, _ = check._harness_chunk(spec, load_dataset(dataset, **dhp), K)
    run()  # compile and first touch
    print("ready", flush=True)
    for _ in sys.stdin:
        run()
        print("done", flush=True)


def _start(model: str, threads: str) -> subprocess.Popen:
    env = {**os.environ, "HARNESS_XLA_CPU_THREADS": threads, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, __file__, model], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.strip() == "ready", f"{model} worker ({threads} threads) did not start: {line!r}"
    return p


def _go(p: subprocess.Popen):
    def run():
        p.stdin.write("go\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "done"

    return run


@pytest.mark.parametrize("model", list(CASES))
def test_one_thread_against_the_whole_pool(benchmark, model):
    procs = {"one thread": _start(model, "1"), "whole pool": _start(model, "all")}
    try:
        times = interleave({k: _go(p) for k, p in procs.items()}, ROUNDS)
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait(timeout=60)
    r = paired(times["one thread"], times["whole pool"])
    ms = {k: 1e3 * sorted(v)[len(v) // 2] / K for k, v in times.items()}
    info = {"cores": os.cpu_count(), "load_1min": os.getloadavg()[0],
            "one_thread_ms_per_step": ms["one thread"], "whole_pool_ms_per_step": ms["whole pool"],
            "one_over_whole": r.median, "iqr": [r.q1, r.q3]}
    print(f"\n[{model} chunk, K {K}, {ROUNDS} rounds] " + json.dumps(info))
    benchmark.extra_info.update(info)
    benchmark.group = f"threads-{model}"
    record(benchmark, times["whole pool"], per=K)
    assert all(t > 0 for v in times.values() for t in v)


if __name__ == "__main__":
    worker(sys.argv[1])
