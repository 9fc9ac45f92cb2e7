"""The device check: what a first run on a GPU/TPU must show, in one table (run by ``check.sh``).

    python tests/device/check.py            # full sizes on a GPU/TPU, small sizes on a CPU
    python tests/device/check.py --small    # small sizes anywhere (what tests/test_device_check.py runs)

Rows (each part also runs on a CPU, at small sizes); a figure ``Nx`` is a ratio of times whose
direction the row's detail states (``harness/flax``: lower is better; ``vmapped trials``: higher):
* ``quickstart``: ``experiments/quickstart.yaml`` swept into a fresh store (small: 2 trials of it),
  sweep seconds and trials FINISHED; ``--jobs 2``: the same on two worker processes sharing the one
  device.
* ``<model>/flax``: the harness's compiled K-step chunk (``TrainingProgram.get_chunk``, as training
  runs it) against the same network in flax.linen + optax (``tests/flax_reference.py``), K jitted
  steps (state donated) on batches gathered from the same device data, at float32 and
  bfloat16 (both sides: bfloat16 compute, float32 parameters); interleaved rounds, median of paired
  ratios (``tests/benchmarks/paired.py``), harness time over flax time (below 1: the harness is
  faster). ``transformer_lm`` and ``resnet18``.
* ``MFU``: the harness step's XLA FLOPs per step over its step time and the device's measured
  bfloat16 matmul peak (``harness.train.timing.device_peak_flops``, cached in ``peak.json``).
* ``vmapped trials``: what ``harness.train.batching`` decides for 8 seeds of the MLP (device memory;
  measured on a CPU), and the training seconds of those seeds one by one over vmapped (above 1:
  vmapping is faster), vmapped in programs of as many as fit device memory where the harness decides
  to vmap, else in one program of 8 (what vmapping would have given).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
for p in (str(_ROOT / "tests" / "benchmarks"), str(_ROOT / "tests"), str(_ROOT)):
    if p not in sys.path:
        sys.path.insert(0, p)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import yaml  # noqa: E402
from paired import interleave, paired  # noqa: E402

import harness  # noqa: E402  (sets the XLA CPU pool before JAX's client starts, as a sweep does)
from harness.core.spec import TrialSpec  # noqa: E402
from harness.data.sources import load_dataset  # noqa: E402
from harness.train import batching  # noqa: E402
from harness.train import loop as trainer  # noqa: E402
from harness.train.build import cast_floats  # noqa: E402
from harness.train.program import program_for  # noqa: E402
from harness.train.timing import device_kind, device_peak_flops  # noqa: E402

#: model -> (model hparams, dataset, dataset hparams, batch) per size.
MODELS = {
    "full": {
        "transformer_lm": ({"width": 512, "depth": 6, "num_heads": 8}, "markov_lm",
                           {"seq_len": 256, "num_train": 4096, "num_valid": 64, "num_test": 64}, 64),
        "resnet18": ({"width": 64}, "synthetic", {"num_examples": 4096, "num_valid": 64, "num_test": 64,
                                                  "input_shape": [32, 32, 3]}, 128),
    },
    "small": {
        "transformer_lm": ({"width": 16, "depth": 1, "num_heads": 2}, "markov_lm",
                           {"seq_len": 8, "num_train": 256, "num_valid": 16, "num_test": 16}, 8),
        # XLA's convolution: fewer ops to compile than the patches form (as tests/test_zoo.py)
        "resnet18": ({"width": 2, "conv_impl": "xla"}, "synthetic",
                     {"num_examples": 64, "num_valid": 8, "num_test": 8, "input_shape": [8, 8, 3]}, 4),
    },
}
K = {"full": 20, "small": 2}        # steps per chunk
ROUNDS = {"full": 9, "small": 2}    # interleaved rounds after one warm-up
SEEDS, BATCH_STEPS = 8, {"full": 400, "small": 20}
DTYPES = ("float32", "bfloat16")


def _spec(model, model_hp, dataset, dataset_hp, batch, dtype, *, seed=0, steps=1, optimizer="adam",
          k=1) -> TrialSpec:
    return TrialSpec.make(sweep="device_check", model=model, optimizer=optimizer, schedule="constant",
                          dataset=dataset, dataset_hparams=dataset_hp, seed=seed, steps=steps,
                          batch_size=batch, eval_every=steps, steps_per_dispatch=k, model_hparams=model_hp,
                          optimizer_hparams={"step_size": 1e-3}, dtype=dtype)


# --------------------------------------------------------------------------------------------------
# the harness chunk against flax.linen + optax


def _flax_net(model: str, hp: dict, ds):
    """The flax.linen twin of the zoo's ``model`` and whether it has BatchNorm statistics."""
    from flax_reference import ResNet18, TransformerLM

    if model == "resnet18":
        return ResNet18(ds.num_classes, hp["width"]), True
    if model == "mlp":
        import flax.linen as nn

        class MLP(nn.Module):
            @nn.compact
            def __call__(self, v):
                v = v.reshape(v.shape[0], -1)
                for _ in range(hp["depth"]):
                    v = nn.relu(nn.Dense(hp["width"])(v))
                return nn.Dense(ds.num_classes)(v)

        return MLP(), False
    return TransformerLM(ds.num_classes, hp["width"], hp["depth"], hp["num_heads"], ds.input_shape[0]), False


def _flax_chunk(model, hp, ds, entry, batch, dtype, k, *, scan=False, optimizer="adam"):
    """``run()``: K adam steps of the flax twin, each a jitted step (as flax is run), on batches
    gathered from the harness's own device copy (decoded as the harness decodes it); bfloat16:
    parameters and inputs cast for the forward pass, as the harness's mixed precision does.
    ``scan``: the K steps as one jitted ``lax.scan`` instead; ``optimizer``: ``adam`` (1e-3) or
    ``momentum`` (0.1, 0.9)."""
    import optax

    from models.zoo import sequence_cross_entropy, softmax_cross_entropy

    net, has_bn = _flax_net(model, hp, ds)
    cd = jnp.dtype(dtype)
    x, y = entry.x_train, entry.y_train
    x0 = entry.decode(x[:batch])
    variables = net.init(jax.random.PRNGKey(0), x0)
    tx = optax.adam(1e-3) if optimizer == "adam" else optax.sgd(0.1, momentum=0.9)
    loss_of = sequence_cross_entropy if model == "transformer_lm" else softmax_cross_entropy

    def step(carry, idx):
        params, stats, opt = carry
        xb, yb = entry.decode(x[idx]), y[idx]

        def lf(p):
            v = {"params": cast_floats(p, cd), **({"batch_stats": stats} if has_bn else {})}
            if has_bn:
                out, upd = net.apply(v, cast_floats(xb, cd), mutable=["batch_stats"])
                return loss_of(out.astype(jnp.float32), yb), jax.tree.map(
                    lambda n, o: n.astype(o.dtype), upd["batch_stats"], stats)
            return loss_of(net.apply(v, xb).astype(jnp.float32), yb), stats

        (loss, stats), g = jax.value_and_grad(lf, has_aux=True)(params)
        u, opt = tx.update(g, opt, params)
        return (optax.apply_updates(params, u), stats, opt), loss

    def keyed(c, key):
        return step(c, jax.random.randint(key, (batch,), 0, x.shape[0]))

    run_step = jax.jit(keyed, donate_argnums=0)
    run_scan = jax.jit(lambda c, keys: jax.lax.scan(keyed, c, keys), donate_argnums=0)
    box = {"c": (variables["params"], variables.get("batch_stats", {}), tx.init(variables["params"])),
           "key": jax.random.PRNGKey(1)}

    def run():
        keys = jax.random.split(box["key"], k + 1)
        box["key"], c = keys[0], box["c"]
        if scan:
            c, loss = run_scan(c, keys[1:])
        else:
            for j in range(k):
                c, loss = run_step(c, keys[j + 1])
        box["c"] = c
        jax.block_until_ready(loss)

    return run


def _state(prog, seed: int):
    """A trial's state, initialised eagerly (compiling ResNet-18's initialisers took minutes on a
    loaded CPU; the values do not matter to a speed check)."""
    k_init, k_data, k_drop = jax.random.split(jax.random.PRNGKey(seed), 3)
    params, mstate = prog.entry.init_params(k_init)
    return prog._init_optimizer(params, mstate, k_data, k_drop, jnp.float32(1e-3))


def _harness_chunk(spec, ds, k):
    """``(run, program)``: ``run()`` is one call of the trainer's compiled K-step chunk."""
    prog = program_for(spec, ds)
    e = prog.entry
    box = {"s": _state(prog, spec.seed), "i": 0}
    exe, _ = prog.get_chunk(None, k, box["s"], jnp.int32(0), e.x_train, e.y_train)

    def run():
        box["s"], losses = exe(box["s"], jnp.int32(box["i"]), e.x_train, e.y_train)
        box["i"] += k
        jax.block_until_ready(losses)

    return run, prog


def ratio_rows(size: str, dtypes=DTYPES) -> list[dict]:
    """Per model and dtype: harness chunk / flax chunk (paired, interleaved) and the harness's MFU."""
    rows = []
    peak = device_peak_flops(dtype=jnp.bfloat16)
    for model, (hp, dataset, dhp, batch) in MODELS[size].items():
        ds = load_dataset(dataset, **dhp)
        for dtype in dtypes:
            spec = _spec(model, hp, dataset, dhp, batch, dtype, k=K[size], steps=K[size])
            h, prog = _harness_chunk(spec, ds, K[size])
            e = prog.entry
            f = _flax_chunk(model, hp, ds, e, batch, dtype, K[size])
            t = interleave({"harness": h, "flax": f}, ROUNDS[size])
            p = paired(t["harness"], t["flax"])
            step_s = float(np.median(t["harness"])) / K[size]
            flops = _step_flops(prog, K[size])
            rows.append({"part": f"{model}/flax", "dtype": dtype, "figure": f"{p.median:.2f}x",
                         "detail": f"harness/flax time, < 1: harness faster; [{p.lo:.2f}-{p.hi:.2f}] "
                                   f"harness {1e3 * step_s:.2f} ms/step, flax "
                                   f"{1e3 * float(np.median(t['flax'])) / K[size]:.2f}; batch {batch}",
                         "ratio": p.median})
            mfu = flops / step_s / peak if flops else float("nan")
            rows.append({"part": f"MFU {model}", "dtype": dtype, "figure": f"{100 * mfu:.1f}%",
                         "detail": f"{flops / 1e9:.3f} GFLOP/step (XLA) / {1e3 * step_s:.2f} ms / bf16 "
                                   f"peak {peak / 1e12:.2f} TFLOP/s", "mfu": mfu})
    return rows


def _step_flops(prog, k: int) -> float:
    """XLA's FLOP count of one training step from the chunk compiled already: its updates program
    (a ``lax.scan`` is counted once, as its body; the loop form is one step)."""
    cost = prog.compiled[(None, k, None)].steps_exe.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float((cost or {}).get("flops", 0.0))


# --------------------------------------------------------------------------------------------------
# vmapped trials, the quickstart, --jobs 2


def vmapped_row(size: str) -> dict:
    """8 seeds of the MLP: what harness.batching decides, and their training seconds one by one over
    vmapped (in programs of as many trials as fit device memory where it decides to vmap, else all
    in one program: what vmapping would give)."""
    dhp = {"num_examples": 2048, "num_valid": 32, "num_test": 32, "input_shape": [64]}
    hp = {"width": 256 if size == "full" else 32, "depth": 2}
    ds = load_dataset("synthetic", **dhp)
    specs = [_spec("mlp", hp, "synthetic", dhp, 64, "float32", seed=s, steps=BATCH_STEPS[size], k=10)
             for s in range(SEEDS)]
    dec = batching.decide(specs)
    per = batching.group_size(specs) if dec.batch else SEEDS
    t_s = sum(trainer.run_trial(s, dataset=ds, measure_perf=False).train_seconds for s in specs)
    t_v = sum(trainer.run_trials_batched(specs[i:i + per], dataset=ds, measure_perf=False)[0].train_seconds
              for i in range(0, SEEDS, per))
    return {"part": "vmapped trials", "dtype": "float32", "figure": f"{t_s / max(t_v, 1e-9):.2f}x",
            "detail": f"one-by-one/vmapped time, > 1: vmapped faster; {SEEDS} seeds of mlp {hp}, "
                      f"{BATCH_STEPS[size]} steps: vmapped {t_v:.3f} s (programs of {per}) vs {t_s:.3f} s "
                      f"one by one; harness decides: {dec.label}",
            "speedup": t_s / max(t_v, 1e-9)}


def _sweep_config(size: str) -> dict:
    cfg = yaml.safe_load((_ROOT / "experiments" / "quickstart.yaml").read_text())
    if size == "small":
        cfg.update(models=[{"name": "mlp", "hparams": {"width": 16, "depth": 1}}], seeds=2,
                   optimizers=[{"name": "sgd", "hparams": {"step_size": 0.1}}], schedules=["constant"],
                   budget={"steps": 20}, eval_every=10, steps_per_dispatch=10, measure_perf=False)
    return cfg


def jobs_to_run(platform: str, jobs=(1, 2)) -> tuple[tuple[int, ...], list[dict]]:
    """The ``--jobs`` values a platform can run, and a row for each it refuses (a TPU chip opens in
    one process only, so the harness refuses ``--jobs 2`` there before any work)."""
    if platform != "tpu":
        return tuple(jobs), []
    return tuple(n for n in jobs if n == 1), [
        {"part": f"--jobs {n}, one device", "dtype": "auto", "figure": "refused",
         "detail": "a TPU chip opens in one process only: the harness refuses --jobs > 1 on a TPU host"}
        for n in jobs if n != 1]


def sweep_rows(size: str, jobs=(1, 2)) -> list[dict]:
    """The quickstart swept into a fresh store, once per ``jobs`` value (workers share the device)."""
    jobs, rows = jobs_to_run(jax.devices()[0].platform, jobs)
    for n in jobs:
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            res = harness.sweep(_sweep_config(size), tracking_uri=f"sqlite:///{d}/mlflow.db", jobs=n,
                                quiet=True, executor="inprocess" if n == 1 else "process")
            dt = time.perf_counter() - t0
            outs = res.summary.outcomes
            ok = sum(o.status == "finished" for o in outs)
        rows.append({"part": "quickstart" if n == 1 else f"--jobs {n}, one device", "dtype": "auto",
                     "figure": f"{dt:.1f} s", "detail": f"{ok} of {len(outs)} trials FINISHED",
                     "finished": ok, "trials": len(outs), "seconds": dt})
    return rows


def gpt_rows(size: str) -> list[dict]:
    """The ``gpt`` step at the track's shape with ``remat`` none and block, and what remat changes."""
    import gpt_check

    rows, got = [], {}
    for remat in ("none", "block"):
        r = got[remat] = gpt_check.gpt_row(size, remat=remat)
        mfu = "n/a" if r["mfu_pct"] != r["mfu_pct"] else f"{r['mfu_pct']:.1f}%"
        rows.append({"part": f"gpt remat {remat}", "dtype": r["dtype"], "figure": f"{r['step_ms']:.1f} ms",
                     "detail": f"{r['batch']}x{r['context']} tokens/step, {r['tokens_per_s']:.0f} tokens/s, "
                               f"MFU {mfu} of the stated peak, peak memory {r['peak_memory_gib']:.2f} GiB "
                               + ("(compiled)" if r["memory_source"] == "compiled" else
                                  f"({r['memory_source']}; compiled {r['compiled_peak_gib']:.2f} GiB)"),
                     **{k: r[k] for k in ("batch", "step_ms", "mfu_pct", "peak_memory_gib",
                                          "compiled_peak_gib")}})
    none, block = got["none"], got["block"]
    if block["batch"] != none["batch"]:  # remat fit a larger batch: compare at the same one
        block = gpt_check.gpt_row(size, remat="block", batch=none["batch"])
    mem = block["compiled_peak_gib"] / none["compiled_peak_gib"]
    rows.append({"part": "gpt remat", "dtype": none["dtype"], "figure": f"{mem:.2f}x",
                 "detail": f"block/none at {none['batch']}x{none['context']}: compiled peak memory "
                           f"(< 1: remat saves memory), step time {block['step_ms'] / none['step_ms']:.2f}x",
                 "memory_ratio": mem, "time_ratio": block["step_ms"] / none["step_ms"]})
    return rows


def guarded(part: str, fn, *args) -> list[dict]:
    """``fn(*args)``'s rows, or one row saying the part failed and why (a part that cannot run on
    this machine, a missing package say, does not end the table)."""
    try:
        return fn(*args)
    except (Exception, SystemExit) as err:  # a part's sys.exit too: the table goes on
        first = (str(err).strip().splitlines() or [""])[0][:160]
        return [{"part": part, "dtype": "-", "figure": "failed", "detail": f"{type(err).__name__}: {first}",
                 "error": f"{type(err).__name__}: {err}"}]


#: The parts, in the table's order: name -> rows of a size.
PARTS = {"quickstart": sweep_rows, "flax": ratio_rows, "gpt": gpt_rows, "vmapped": lambda s: [vmapped_row(s)]}


def format_table(rows: list[dict]) -> str:
    """The one table: part, dtype, figure, detail."""
    w = max(len(r["part"]) for r in rows)
    head = f"{'part':<{w}}  {'dtype':<8}  {'figure':>9}  detail"
    return "\n".join([head, "-" * len(head)] + [f"{r['part']:<{w}}  {r['dtype']:<8}  {r['figure']:>9}  "
                                                f"{r['detail']}" for r in rows])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="small sizes (default on a CPU)")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated subset of %(default)s")
    args = ap.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not parts or (unknown := sorted(set(parts) - set(PARTS))):
        ap.error(f"unknown part(s) {', '.join(unknown) if parts else repr(args.parts)}: choose from "
                 f"{', '.join(PARTS)}")
    dev = jax.devices()[0]
    size = "small" if args.small or dev.platform == "cpu" else "full"
    t0 = time.perf_counter()
    out = {"device_kind": device_kind(dev), "platform": dev.platform, "size": size, "rows": []}
    for part in parts:  # each part's rows as it ends (a full-size part can take minutes)
        t1 = time.perf_counter()
        print(f"device check: {part} ...", flush=True)
        out["rows"] += (new := guarded(part, PARTS[part], size))
        print(format_table(new) + f"\n({part}: {time.perf_counter() - t1:.0f} s)", flush=True)
        if args.json:  # after each part: what ended stays if a later part aborts the process
            Path(args.json).write_text(json.dumps(_json_safe(out), indent=1, default=str))
    print(f"device check: {device_kind(dev)} ({dev.platform}, {len(jax.devices())} device(s)), "
          f"jax {jax.__version__}, {size} sizes, {time.perf_counter() - t0:.0f} s")
    print(format_table(out["rows"]))
    return out


def _json_safe(v):
    """``v`` with NaN and infinities as ``null`` (strict JSON has neither)."""
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_safe(x) for x in v]
    return None if isinstance(v, float) and not math.isfinite(v) else v

if __name__ == "__main__":
    failed = [r["part"] for r in main()["rows"] if r["figure"] == "failed"]
    sys.stdout.flush()
    sys.exit(f"device check: {len(failed)} part(s) failed: {', '.join(failed)}" if failed else 0)
