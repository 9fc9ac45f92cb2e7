"""Trainer speed against hand-written references, and the batching decision's evidence.

Run: ``pytest tests/benchmarks/test_bench_trainer.py --benchmark-only -s``. Each test interleaves
rounds of the trainer and of its reference (the VM's speed swings within a minute, so only same-run
ratios mean anything), stores the medians and the ratio in ``benchmark.extra_info`` and prints them.

* ``test_step_vs_hand_scan[digits-mlp|mlp784]``: the trainer's dispatch loop (its compiled K-step
  chunk, the losses fetched to the host once per chunk) against a hand-written jitted ``lax.scan``
  of the same K steps with donated state, written with ``jax.example_libraries`` (stax + momentum),
  batches gathered from device-resident data by precomputed indices, synced once at the end; and
  the same hand-written scan around the project's ``models.zoo`` MLP and ``optimizers`` momentum
  (``hand_scan_same``: the trainer's own overhead, model and optimizer held equal); and the
  stax scan again with the per-epoch shuffle computed in the jitted chunk as any shuffling loop
  must (``hand_scan_shuffled``: precomputed indices leave out work the trainer has to do).
* ``test_batching_8_seeds``: 8 seeds of a digits MLP, 500 adam steps, as one vmapped program
  (``run_trials_batched``) against 8 trials in sequence (``run_trial``), compile excluded, beside
  the decision :mod:`harness.batching` measures for the same group.

Interleaving and paired ratios come from ``tests/benchmarks/paired.py`` (shared by every benchmark).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.example_libraries import optimizers as ref_opt
from jax.example_libraries import stax
from paired import interleave, medians, paired

from harness.core.spec import TrialSpec
from harness.data.sources import load_dataset
from harness.train import batching, program
from harness.train import loop as trainer
from models.zoo import MODELS
from optimizers import OPTIMIZERS

K = 50


CASES = {
    "digits-mlp": dict(dataset="digits", dataset_hparams={}, width=256, depth=2, batch=128, chunks=4),
    "mlp784": dict(dataset="synthetic", dataset_hparams={"num_examples": 4096, "num_test": 256},
                   width=1024, depth=2, batch=128, chunks=1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_step_vs_hand_scan(benchmark, case):
    c = CASES[case]
    ds = load_dataset(c["dataset"], **c["dataset_hparams"])
    spec = TrialSpec.make(sweep="bench", model="mlp", optimizer="momentum", schedule="constant",
                          dataset=c["dataset"], dataset_hparams=c["dataset_hparams"], seed=0,
                          steps=K * c["chunks"], batch_size=c["batch"], eval_every=K * c["chunks"],
                          steps_per_dispatch=K, model_hparams={"width": c["width"], "depth": c["depth"]},
                          optimizer_hparams={"step_size": 0.01, "mass": 0.9})
    # -- the trainer's inner loop, as _train runs it
    prog = program.program_for(spec, ds)
    e = prog.entry
    state0, _ = prog.init(jax.random.PRNGKey(0), 0.01)
    exe, _ = prog.get_chunk(None, K, state0, jnp.int32(0), e.x_train, e.y_train)
    box = {"s": state0}

    def trainer_loop():
        s = box["s"]
        for i in range(c["chunks"]):
            s, losses = exe(s, jnp.int32(i * K), e.x_train, e.y_train)
            np.asarray(losses)  # once per chunk, as the trainer does
        box["s"] = s

    # -- hand-written reference: stax MLP + example_libraries momentum, donated scan state
    layers = [stax.Flatten]
    for _ in range(c["depth"]):
        layers += [stax.Dense(c["width"]), stax.Relu]
    init_fun, apply_fun = stax.serial(*layers, stax.Dense(10))
    _, params = init_fun(jax.random.PRNGKey(0), (c["batch"], *ds.input_shape))
    opt_init, opt_update, get_params = ref_opt.momentum(0.01, 0.9)
    x, y = jnp.asarray(ds.x_train), jnp.asarray(ds.y_train)
    N, B = ds.num_train, c["batch"]
    rng = np.random.default_rng(0)
    stream = np.concatenate([rng.permutation(N) for _ in range(-(-K * B * c["chunks"] // N) + 1)])
    idx = jnp.asarray(stream[: K * B * c["chunks"]].reshape(c["chunks"], K, B))

    def loss_fn(p, xb, yb):
        logp = jax.nn.log_softmax(apply_fun(p, xb))
        return -jnp.mean(jnp.take_along_axis(logp, yb[:, None], axis=1))

    def ref_chunk(opt_state, start, bidx, x, y):
        def body(st, inp):
            i, bi = inp
            loss, g = jax.value_and_grad(loss_fn)(get_params(st), x[bi], y[bi])
            return opt_update(i, g, st), loss
        return jax.lax.scan(body, opt_state, (start + jnp.arange(K), bidx))

    def make_loop(chunk_fn, opt_state):
        f = jax.jit(chunk_fn, donate_argnums=(0,))
        rbox = {"s": opt_state}

        def loop():
            s = rbox["s"]
            for i in range(c["chunks"]):
                s, losses = f(s, i * K, idx[i], x, y)
            jax.block_until_ready(losses)
            rbox["s"] = s
        return loop

    ref_loop = make_loop(ref_chunk, opt_init(params))

    # the same hand-written scan, shuffling as a real loop must: each epoch's order is a
    # jax.random.permutation computed inside the jitted chunk (the work the trainer's data order does)
    n_ep = -(-K * B // N) + 1
    data_key = jax.random.PRNGKey(1)

    def shuffled_chunk(opt_state, start, _bidx, x, y):
        first = start * B
        e0 = first // N
        perms = jax.vmap(lambda e: jax.random.permutation(jax.random.fold_in(data_key, e), N))(
            e0 + jnp.arange(n_ep))
        bidx = perms.reshape(-1)[first - e0 * N + jnp.arange(K * B)].reshape(K, B)
        return ref_chunk(opt_state, start, bidx, x, y)

    shuffled_loop = make_loop(shuffled_chunk, opt_init(jax.tree.map(jnp.copy, params)))
    # the same hand-written scan around the project's own model and optimizer (isolates the trainer)
    model = MODELS["mlp"](input_shape=ds.input_shape, num_classes=10, width=c["width"], depth=c["depth"])
    _, mparams, mstate = model.init(jax.random.PRNGKey(0), (B, *ds.input_shape))
    opt = OPTIMIZERS["momentum"](0.01, mass=0.9)

    def same_chunk(opt_state, start, bidx, x, y):
        def body(st, inp):
            i, bi = inp
            loss, g = jax.value_and_grad(
                lambda p: model.loss(model.apply(p, mstate, x[bi], train=True)[0], y[bi]))(opt.params_fn(st))
            return opt.update_fn(i, g, st), loss
        return jax.lax.scan(body, opt_state, (start + jnp.arange(K), bidx))

    same_loop = make_loop(same_chunk, opt.init_fn(mparams))

    fns = {"trainer": trainer_loop, "hand_scan_stax": ref_loop, "hand_scan_same": same_loop,
           "hand_scan_shuffled": shuffled_loop}
    times = interleave(fns, rounds=7)  # one warm-up round (compile) first
    med = medians(times)
    steps = K * c["chunks"]
    info = {f"{k}_ms_per_step": v / steps * 1e3 for k, v in med.items()}
    for ref in ("hand_scan_stax", "hand_scan_same", "hand_scan_shuffled"):  # medians of per-round ratios
        p = paired(times["trainer"], times[ref])
        info[f"ratio_trainer_over_{ref[5:]}"] = p.median
        info[f"ratio_trainer_over_{ref[5:]}_spread"] = str(p)
    benchmark.extra_info.update(info)
    print(f"\n[{case}] {info}")
    benchmark.pedantic(trainer_loop, rounds=3, iterations=1)


def test_batching_8_seeds(benchmark, monkeypatch):
    monkeypatch.delenv("HARNESS_BATCH", raising=False)  # tests/conftest.py pins it for the suite
    ds = load_dataset("digits")
    specs = [TrialSpec.make(sweep="bench", model="mlp", optimizer="adam", schedule="constant",
                            dataset="digits", seed=s, steps=500, batch_size=32, eval_every=500,
                            steps_per_dispatch=K, model_hparams={"width": 64, "depth": 1},
                            optimizer_hparams={"step_size": 1e-3}) for s in range(8)]

    def batched():
        return trainer.run_trials_batched(specs, dataset=ds, measure_perf=False)

    def sequential():
        return [trainer.run_trial(s, dataset=ds, measure_perf=False) for s in specs]

    times = interleave({"batched": batched, "sequential": sequential}, rounds=3)  # warm-up: compile
    med = medians(times)
    p = paired(times["sequential"], times["batched"])
    rb, rs = batched(), sequential()
    info = {"batched_s": med["batched"], "sequential_s": med["sequential"],
            "speedup_batched": p.median, "speedup_spread": str(p),
            "batched_train_s": rb[0].train_seconds,
            "sequential_train_s": sum(r.train_seconds for r in rs),
            "should_batch": trainer.should_batch(specs), "decision": batching.decide(specs).label,
            "device": jax.devices()[0].device_kind}
    benchmark.extra_info.update(info)
    print(f"\n[8 seeds digits mlp, 500 adam steps] {info}")
    benchmark.pedantic(batched, rounds=1, iterations=1)
