"""Data-parallel overhead: the harness's sharded training step against a hand-written sharded
``jax.jit`` step of the same network, on 4 forced CPU devices.

Run: ``pytest tests/benchmarks/test_bench_parallel.py --benchmark-only -s`` (about a minute). JAX
fixes its device count when it starts, so the measurement runs in a subprocess started with
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` (:data:`SCRIPT`); it prints one JSON line
that the tests store in ``benchmark.extra_info`` and print.

Variants (digits, ``models.zoo`` MLP width 256 × depth 2, the project's ``adam``, batch 256 split
over a 1-D mesh ``batch=4``, parameters and optimizer state replicated ``P()``, batches
``P("batch")``, state donated):

* ``harness``: the trainer's own compiled K-step chunk (``TrainingProgram.get_chunk`` with the trainer's
  layout: the per-epoch shuffle and the batch gather inside the jitted ``lax.scan``, the batch
  constrained to ``P("batch")``), the K losses fetched to the host once per chunk, as
  ``run_trial`` runs it;
* ``hand_step``: a hand-written step ``jax.jit(step, in_shardings=(P(), P("batch"), P("batch")),
  out_shardings=P(), donate_argnums=0)`` called K times on batches gathered and sharded beforehand
  (the loop a user writes first);
* ``hand_scan``: a hand-written ``jax.jit`` of ``lax.scan`` over K such pre-sharded batches
  (stacked ``(K, B, ...)``, ``P(None, "batch")``), the strictest reference: no shuffle, no gather;
* ``hand_scan_gather``: a hand-written ``lax.scan`` that gathers each batch from the replicated
  device-resident training arrays by precomputed ``(K, B)`` indices and constrains it to
  ``P("batch")``: the trainer's work except its per-epoch shuffle;
* ``hand_scan_shuffle``: the same scan with the trainer's data order written by hand in the graph
  (each epoch ``jax.random.permutation(fold_in(key, epoch), N)``, step ``i`` takes stream positions
  ``[i·B, (i+1)·B)``): the trainer's work, the like-for-like reference for the overhead.
  (K·B = 5,120 is 4.5 epochs of digits' 1,150 training examples, so each chunk permutes 5–6
  epochs; that shuffle is what separates ``hand_scan_gather`` from ``hand_scan_shuffle``.)

The variants run interleaved round by round (``paired.interleave``, the order rotated each round:
the VM's speed swings within a minute, so only same-round ratios mean anything); reported per reference:
the median of the per-round ratios harness / reference and its spread (25th–75th percentile).
Target: harness / hand-written <= 1.05.

``test_cnn_data_parallel_curves`` is the CNN counterpart of ``tests/test_parallel.py``'s curve
equality (kept here because its compiles do not fit the unit suite's time budget): a small CNN
on 4 devices against 1, every curve value within ``1e-5 + 1e-5·|x|``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from paired import record

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import json, statistics, sys, time
import numpy as np
import paired
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
from harness.train import parallel
from harness.train import loop as trainer
from harness.train import program
from harness.data.sources import load_dataset
from harness.core.spec import TrialSpec
from models.zoo import MODELS
from optimizers import OPTIMIZERS

out = {"devices": jax.device_count()}
ds = load_dataset("digits")
K, B, ROUNDS = 20, 256, int(sys.argv[1])


def mk(**kw):
    base = dict(sweep="b", model="mlp", optimizer="adam", schedule="constant", dataset="digits",
                seed=0, steps=10 * K, batch_size=B, eval_every=10 * K, steps_per_dispatch=K,
                model_hparams={"width": 256, "depth": 2}, optimizer_hparams={"step_size": 1e-3},
                devices=4)
    base.update(kw)
    return TrialSpec.make(**base)


# ---- the harness: its compiled chunk on its layout, run as the trainer runs it
spec = mk()
prog = program.program_for(spec, ds)
layout = parallel.layout_for(4, "batch", batch_size=B, num_trials=None)
r, sp = layout.replicated, layout.split
x_tr, y_tr = prog.entry.placed(layout)[:2]
st, _ = prog.init(jax.random.PRNGKey(0), 1e-3)
h_state = [jax.device_put(st, r)]
start = [0]
exe, _ = prog.get_chunk(None, K, h_state[0], jax.device_put(jnp.int32(0), r), x_tr, y_tr, layout=layout)


def harness_round():
    s = jax.device_put(jnp.int32(start[0]), r)
    h_state[0], losses = exe(h_state[0], s, x_tr, y_tr)
    np.asarray(losses)  # the trainer's one host sync per chunk
    start[0] += K

# ---- hand-written: same network and optimizer, same shardings
model = MODELS["mlp"](input_shape=ds.input_shape, num_classes=ds.num_classes, width=256, depth=2)
opt = OPTIMIZERS["adam"](1e-3)
_, params, mstate = model.init(jax.random.PRNGKey(0), (1, *ds.input_shape))


def loss_fn(p, xb, yb):
    logits, _ = model.apply(p, mstate, xb, rng=None, train=True)
    return model.loss(logits, yb)


def step(carry, xb, yb):
    i, os_ = carry
    loss, g = jax.value_and_grad(loss_fn)(opt.params_fn(os_), xb, yb)
    return (i + 1, opt.update_fn(i, g, os_)), loss


hand_step = jax.jit(step, in_shardings=(r, sp, sp), out_shardings=(r, r), donate_argnums=0)
spk = NamedSharding(layout.mesh, P(None, "batch"))


def scan_k(carry, xs, ys):
    return jax.lax.scan(lambda c, b: step(c, *b), carry, (xs, ys))


hand_scan = jax.jit(scan_k, in_shardings=(r, spk, spk), out_shardings=(r, r), donate_argnums=0)


def scan_gather(carry, x, y, idx):
    def body(c, bidx):
        xb = jax.lax.with_sharding_constraint(x[bidx], sp)
        yb = jax.lax.with_sharding_constraint(y[bidx], sp)
        return step(c, xb, yb)
    return jax.lax.scan(body, carry, idx)


hand_gather = jax.jit(scan_gather, in_shardings=(r, r, r, r), out_shardings=(r, r), donate_argnums=0)


def scan_shuffle(carry, x, y, data_key, start):
    # the trainer's data order written by hand: epoch e is permutation(fold_in(data_key, e), N) and
    # step i takes stream positions [i*B, (i+1)*B); every epoch the chunk touches is permuted anew
    N = x.shape[0]
    first = start * B
    e0 = first // N
    perms = jnp.concatenate([jax.random.permutation(jax.random.fold_in(data_key, e0 + j), N)
                             for j in range(-(-K * B // N) + 1)])
    idx = jax.lax.dynamic_slice(perms, (first - e0 * N,), (K * B,)).reshape(K, B)
    return scan_gather(carry, x, y, idx)


hand_shuffle = jax.jit(scan_shuffle, in_shardings=(r, r, r, r, r), out_shardings=(r, r),
                       donate_argnums=0)
rng = np.random.default_rng(0)
idx = rng.permutation(ds.x_train.shape[0])[: K * B].reshape(K, B) if K * B <= ds.x_train.shape[0] else \
    rng.integers(0, ds.x_train.shape[0], (K, B))
xs_np, ys_np = np.asarray(ds.x_train, np.float32)[idx], np.asarray(ds.y_train)[idx]
batches = [(jax.device_put(xs_np[k], sp), jax.device_put(ys_np[k], sp)) for k in range(K)]
xs, ys = jax.device_put(xs_np, spk), jax.device_put(ys_np, spk)
s_state = [jax.device_put((jnp.int32(0), opt.init_fn(params)), r)]
c_state = [jax.device_put((jnp.int32(0), opt.init_fn(params)), r)]
g_state = [jax.device_put((jnp.int32(0), opt.init_fn(params)), r)]
f_state = [jax.device_put((jnp.int32(0), opt.init_fn(params)), r)]
f_start = [0]
data_key = jax.device_put(jax.random.PRNGKey(1), r)
idx_dev = jax.device_put(jnp.asarray(idx, jnp.int32), r)


def hand_step_round():
    c = s_state[0]
    for xb, yb in batches:
        c, loss = hand_step(c, xb, yb)
    s_state[0] = c
    jax.block_until_ready(loss)


def hand_scan_round():
    c_state[0], losses = hand_scan(c_state[0], xs, ys)
    jax.block_until_ready(losses)


def hand_gather_round():
    g_state[0], losses = hand_gather(g_state[0], x_tr, y_tr, idx_dev)
    np.asarray(losses)


def hand_shuffle_round():
    f_state[0], losses = hand_shuffle(f_state[0], x_tr, y_tr, data_key,
                                      jax.device_put(jnp.int32(f_start[0]), r))
    np.asarray(losses)
    f_start[0] += K


fns = {"harness": harness_round, "hand_step": hand_step_round, "hand_scan": hand_scan_round,
       "hand_scan_gather": hand_gather_round, "hand_scan_shuffle": hand_shuffle_round}
times = paired.interleave(fns, ROUNDS, warmup=3)  # order rotated round by round
res = {f"{k}_ms_per_step": statistics.median(v) * 1e3 / K for k, v in times.items()}
for ref in ("hand_step", "hand_scan", "hand_scan_gather", "hand_scan_shuffle"):
    ratios = np.array(times["harness"]) / np.array(times[ref])
    q25, q50, q75 = np.percentile(ratios, [25, 50, 75])
    res[f"harness_over_{ref}"] = float(q50)
    res[f"harness_over_{ref}_p25"] = float(q25)
    res[f"harness_over_{ref}_p75"] = float(q75)
out["overhead"] = res
out["harness_round_s"] = times["harness"]  # K steps per round
out["steps_per_round"] = K

# ---- a small CNN, data-parallel on 4 devices vs 1: curve equality
def curves(rr):
    c = rr.curves
    return [*c.train_loss, *c.eval_loss, *c.eval_accuracy, rr.test_loss, rr.test_accuracy]


cnn = dict(model="cnn", model_hparams={"width": 4, "hidden": 0}, batch_size=32, steps=12,
           eval_every=6, steps_per_dispatch=6, optimizer_hparams={"step_size": 0.01})
r1 = trainer.run_trial(mk(devices=1, **cnn), dataset=ds, measure_perf=False)
r4 = trainer.run_trial(mk(devices=4, **cnn), dataset=ds, measure_perf=False)
out["cnn"] = {"one": curves(r1), "four": curves(r4), "four_train_s": r4.train_seconds,
              "steps": cnn["steps"]}
print("JSON:" + json.dumps(out))
'''


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    work = tmp_path_factory.mktemp("bench_parallel")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "benchmarks")]),
           "HARNESS_CACHE_DIR": str(work)}
    env.pop("HARNESS_DEVICE_IDS", None)
    rounds = os.environ.get("HARNESS_BENCH_ROUNDS", "40")
    p = subprocess.run([sys.executable, "-c", SCRIPT, rounds], cwd=work, env=env,
                       capture_output=True, text=True, timeout=1800)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("JSON:")), None)
    assert p.returncode == 0 and line, f"rc={p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
    return json.loads(line[5:])


def test_data_parallel_overhead_vs_hand_written(benchmark, measured):
    """harness / hand-written sharded step, median of paired per-round ratios (target <= 1.05)."""
    assert measured["devices"] == 4
    info = measured["overhead"]
    benchmark.extra_info.update(info)
    print("\n[data-parallel, 4 CPU devices] " + ", ".join(f"{k}={v:.3f}" for k, v in info.items()))
    record(benchmark, measured["harness_round_s"], per=measured["steps_per_round"])  # s per step


def test_cnn_data_parallel_curves(benchmark, measured):
    one, four = measured["cnn"]["one"], measured["cnn"]["four"]
    assert len(one) == len(four)
    worst = max(abs(a - b) for a, b in zip(four, one, strict=True))
    assert all(abs(a - b) <= 1e-5 + 1e-5 * abs(b) for a, b in zip(four, one, strict=True))
    benchmark.extra_info["cnn_max_abs_diff"] = worst
    print(f"\n[cnn 4 devices vs 1] max |diff| = {worst:.3g}")
    # the 4-device trial's training seconds per step (compile and evaluation excluded)
    record(benchmark, [measured["cnn"]["four_train_s"]], per=measured["cnn"]["steps"])
