"""GPU check in one command: the harness's step throughput and trial batching on this machine's device.

    python tests/benchmarks/gpu_check.py            # full sizes on a GPU/TPU, small sizes on CPU
    python tests/benchmarks/gpu_check.py --small    # small sizes anywhere (what tests/test_gpu_check.py runs)
    python tests/benchmarks/gpu_check.py --json out.json

Prints one table: examples/s and utilisation of one training step of the zoo's MLP, CNN and (when
``models.zoo`` has it) Transformer LM, at float32 and bfloat16, measured exactly as a sweep measures
them (the trainer's compiled single-trial step, timed by :func:`harness.train.timing.measure`: compile apart,
warm-up, 20 timed steps each ended with ``block_until_ready``, FLOPs from XLA's cost analysis,
utilisation against the device's measured matmul peak of that dtype, cached in
``$HARNESS_CACHE_DIR/peak.json``). Then the trial-batching speed-up for 8 seeds of the digits MLP:
``run_trials_batched`` (one vmapped program) against 8 ``run_trial`` calls, each side's training
seconds as the trainer counts them (compile and evaluation excluded), 3 interleaved repetitions,
median of the paired ratios; beside it, what :mod:`harness.batching` decides for that group
(``HARNESS_BATCH`` respected). The design claims >= 3x on a GPU. (Small sizes use the small MLP
row's network for this part.)

Then (workload ``gpt``) the zoo's ``gpt`` at the optimization track's shape: one micro-batch of
64 × 1,024 tokens in bfloat16 (or the largest that fits), its step time, MFU against the device's
stated peak and peak device memory, with ``remat`` none and block (:mod:`gpt_check`).

On CPU (auto-detected) or with ``--small`` every size is small so that the whole check takes
seconds; the figures are then only a smoke test of the script.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for p in (str(_HERE), str(_HERE.parents[1])):  # paired.py; the repository root (harness, models)
    if p not in sys.path:
        sys.path.insert(0, p)

import jax  # noqa: E402
from paired import paired  # noqa: E402

from harness.core.spec import TrialSpec  # noqa: E402
from harness.data.sources import load_dataset  # noqa: E402
from harness.train import batching, timing  # noqa: E402
from harness.train import loop as trainer  # noqa: E402
from harness.train.perf import measure_trial_perf  # noqa: E402
from harness.train.program import program_for  # noqa: E402

#: (model, model hparams, dataset, dataset hparams, batch size) per workload and size.
SIZES = {
    "full": {
        "mlp": ("mlp", {"width": 1024, "depth": 2}, "synthetic",
                {"num_examples": 8192, "num_valid": 256, "num_test": 256, "input_shape": [784]}, 1024),
        "cnn": ("cnn", {"width": 32, "hidden": 0}, "synthetic",
                {"num_examples": 4096, "num_valid": 256, "num_test": 256, "input_shape": [28, 28, 1]}, 256),
        "transformer": ("transformer_lm", {"width": 512, "depth": 4, "num_heads": 8}, "markov_lm",
                        {"seq_len": 256, "num_train": 2048, "num_valid": 64, "num_test": 64}, 64),
    },
    "small": {
        "mlp": ("mlp", {"width": 64, "depth": 2}, "synthetic",
                {"num_examples": 4096, "num_valid": 32, "num_test": 32, "input_shape": [64]}, 64),
        "cnn": ("cnn", {"width": 4, "hidden": 0}, "synthetic",
                {"num_examples": 1024, "num_valid": 32, "num_test": 32, "input_shape": [8, 8, 1]}, 32),
        "transformer": ("transformer_lm", {"width": 32, "depth": 1, "num_heads": 2}, "markov_lm",
                        {"seq_len": 16, "num_train": 2048, "num_valid": 32, "num_test": 32}, 16),
    },
}
DTYPES = ("float32", "bfloat16")
#: The batching check: 8 seeds of the digits MLP (as in tests/benchmarks/test_bench_trainer.py).
SEEDS = 8
BATCH_STEPS = {"full": 500, "small": 100}
COLUMNS = ("workload", "dtype", "batch", "step_ms", "examples_per_s", "gflop_per_step", "tflop_per_s",
           "utilization_pct", "peak_tflop_per_s")


def _spec(model, model_hp, dataset, dataset_hp, batch, dtype, *, seed=0, steps=1, optimizer="adam"):
    return TrialSpec.make(sweep="gpu_check", model=model, optimizer=optimizer, schedule="constant",
                          dataset=dataset, dataset_hparams=dataset_hp, seed=seed, steps=steps,
                          batch_size=batch, eval_every=steps, steps_per_dispatch=min(steps, 50),
                          model_hparams=model_hp, optimizer_hparams={"step_size": 1e-3}, dtype=dtype)


def throughput_rows(size: str, workloads: Sequence[str] | None = None,
                    dtypes: Sequence[str] = DTYPES) -> list[dict]:
    """One row per (workload, dtype): the trainer's perf measurement of its single-trial step."""
    from models.zoo import MODELS

    rows = []
    for name, (model, model_hp, dataset, dataset_hp, batch) in SIZES[size].items():
        if model not in MODELS or (workloads is not None and name not in workloads):
            continue
        ds = load_dataset(dataset, **dataset_hp)
        for dtype in dtypes:
            spec = _spec(model, model_hp, dataset, dataset_hp, batch, dtype)
            # what run_trial(..., measure_perf=True) measures, without training and evaluating
            perf = measure_trial_perf(program_for(spec, ds), spec, None)
            flops, sec = perf.flops_per_step, perf.step_time_ms / 1e3
            rows.append({
                "workload": name, "dtype": dtype, "batch": batch, "step_ms": perf.step_time_ms,
                "examples_per_s": perf.examples_per_sec,
                "gflop_per_step": flops / 1e9 if flops else float("nan"),
                "tflop_per_s": flops / sec / 1e12 if flops else float("nan"),
                "utilization_pct": 100 * perf.utilization if perf.utilization is not None else float("nan"),
                "peak_tflop_per_s": perf.peak_flops / 1e12 if perf.peak_flops else float("nan"),
            })
    return rows


def batching_speedup(size: str, reps: int = 3) -> dict:
    """8 seeds vmapped vs in sequence (trainer-counted training seconds), median of paired ratios.

    Full size: the digits MLP (64 wide, 1 hidden layer, batch 32, adam), as the issue measured it.
    Small size: the small MLP row's network and data (equal validation and test sizes, so that each
    side compiles one evaluation program): fewer compiles, the same comparison."""
    steps = BATCH_STEPS[size]
    if size == "full":
        model_hp, dataset, dataset_hp, batch = {"width": 64, "depth": 1}, "digits", {}, 32
    else:
        _, model_hp, dataset, dataset_hp, batch = SIZES["small"]["mlp"]
    ds = load_dataset(dataset, **dataset_hp)
    specs = [_spec("mlp", model_hp, dataset, dataset_hp, batch, "float32", seed=s, steps=steps)
             for s in range(SEEDS)]
    batched_s, seq_s = [], []
    for r in range(reps + 1):  # the first repetition compiles: not counted unless reps == 0
        res_b = trainer.run_trials_batched(specs, dataset=ds, measure_perf=False)
        res_s = [trainer.run_trial(s, dataset=ds, measure_perf=False) for s in specs]
        if r or reps == 0:  # (the trainer's clock excludes compiling; a first run still warms up)
            batched_s.append(res_b[0].train_seconds)
            seq_s.append(sum(x.train_seconds for x in res_s))
    p = paired(seq_s, batched_s)
    return {"seeds": SEEDS, "steps": steps, "model": f"mlp {model_hp} on {dataset}",
            "batched_s": min(batched_s), "sequential_s": min(seq_s),
            "speedup": p.median, "speedup_min": p.lo, "speedup_max": p.hi, "reps": len(seq_s),
            **_decision(batching.decide(specs))}


def _decision(d) -> dict:
    """What harness.batching decided and where that came from: a decision read from
    ``$HARNESS_CACHE_DIR/batching.json`` was measured by an earlier run (perhaps on a busier
    machine), so it may disagree with the speed-up measured just above."""
    from harness.train import batching

    where = (f"cached from an earlier run; delete {batching.cache_path()} to measure again"
             if d.source == "cached" else d.source)
    return {"decision": d.label, "decision_source": where}


def format_table(rows: list[dict]) -> str:
    """The throughput table, one line per row, columns :data:`COLUMNS`."""
    head = (f"{'workload':<12} {'dtype':<9} {'batch':>6} {'step ms':>9} {'examples/s':>12} "
            f"{'GFLOP/step':>11} {'TFLOP/s':>9} {'util %':>7} {'peak TFLOP/s':>13}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['workload']:<12} {r['dtype']:<9} {r['batch']:>6d} {r['step_ms']:>9.3f} "
                     f"{r['examples_per_s']:>12.0f} {r['gflop_per_step']:>11.4f} {r['tflop_per_s']:>9.4f} "
                     f"{r['utilization_pct']:>7.1f} {r['peak_tflop_per_s']:>13.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="small sizes (default on CPU)")
    ap.add_argument("--json", help="also write the figures to this JSON file")
    ap.add_argument("--workloads", default=",".join([*SIZES["full"], "gpt"]),
                    help="comma-separated subset of %(default)s")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated, default %(default)s")
    ap.add_argument("--reps", type=int, default=3,
                    help="batching repetitions after the compiling one (0: count that one; "
                         "default %(default)s)")
    args = ap.parse_args(argv)
    dev = jax.devices()[0]
    size = "small" if args.small or dev.platform == "cpu" else "full"
    print(f"gpu_check: {timing.device_kind(dev)} ({len(jax.devices())} device(s)), jax {jax.__version__}, "
          f"{size} sizes")
    rows = throughput_rows(size, args.workloads.split(","), args.dtypes.split(","))
    print(format_table(rows))
    gpt = None
    if "gpt" in args.workloads.split(","):
        import gpt_check
        gpt = [gpt_check.gpt_row(size, remat=remat) for remat in ("none", "block")]
        print("\n" + "\n".join(gpt_check.format_row(r) for r in gpt))
    b = batching_speedup(size, args.reps)
    claim = ("met" if b["speedup"] >= 3 else "NOT met") if dev.platform != "cpu" else "for accelerators"
    print(f"\ntrial batching, {b['seeds']} seeds of {b['model']} ({b['steps']} adam steps): "
          f"vmapped {b['batched_s']:.3f} s vs sequential {b['sequential_s']:.3f} s of training -> "
          f"{b['speedup']:.2f}x [min-max {b['speedup_min']:.2f}-{b['speedup_max']:.2f}] "
          f"(design claim >= 3x: {claim})")
    print(f"harness.batching decides: {b['decision']} ({b['decision_source']})")
    out = {"device_kind": timing.device_kind(dev), "size": size, "rows": rows, "gpt": gpt, "batching": b}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
