"""The quickstart's 24 trials as a competent user would write them by hand: the yardstick of
``test_bench_sweep.py``. Not part of the harness; it imports nothing from it.

The same work as ``experiments/quickstart.yaml``: scikit-learn's digits (1,150 train / 287
validation / 360 test, pixels / 16), 2 models (MLP width 64 depth 2; CNN width 8 hidden 32) ×
3 optimizers (sgd 0.1, momentum 0.03 mass 0.9, adam 0.003) × 2 schedules (constant, cosine decay
to 0 over the budget) × 2 seeds, batch 64, 400 steps, validation at step 0 and every 50 steps,
test once at the end. Written with the reference libraries (``jax.example_libraries.stax`` and
``optimizers``, whose ``Conv`` is XLA's convolution), one jitted ``lax.scan`` of 50 steps per
dispatch, the 2 seeds of a configuration trained together under ``jax.vmap``, each
configuration's program compiled once; every trial logged to MLflow at the end (params, the
validation curve, test metrics).

Usage: ``python handwritten_quickstart.py TRACKING_URI`` prints one JSON line
``{"trials": 24, "seconds": ...}`` (whole process, from the first line of this file's imports).
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.example_libraries import optimizers, stax  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

STEPS, CHUNK, BATCH, SEEDS = 400, 50, 64, 2


def data():
    """Train / validation / test arrays of digits: a seed-0 permutation, the last 360 for test,
    the last 287 of the rest for validation."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 8, 8, 1)
    perm = np.random.default_rng(0).permutation(len(x))
    x, y = x[perm], y[perm].astype(np.int32)
    xtr, ytr, xte, yte = x[:-360], y[:-360], x[-360:], y[-360:]
    return (xtr[:-287], ytr[:-287]), (xtr[-287:], ytr[-287:]), (xte, yte)


def mlp():
    return stax.serial(stax.Flatten, stax.Dense(64), stax.Relu, stax.Dense(64), stax.Relu, stax.Dense(10))


def cnn():
    return stax.serial(stax.Conv(8, (3, 3), padding="SAME"), stax.Relu, stax.MaxPool((2, 2), (2, 2)),
                       stax.Conv(16, (3, 3), padding="SAME"), stax.Relu, stax.MaxPool((2, 2), (2, 2)),
                       stax.Flatten, stax.Dense(32), stax.Relu, stax.Dense(10))


def schedule(kind: str, step_size: float):
    if kind == "constant":
        return optimizers.constant(step_size)
    return lambda i: step_size * 0.5 * (1.0 + jnp.cos(jnp.pi * jnp.minimum(i, STEPS) / STEPS))


OPTIMIZERS = {"sgd": lambda s: optimizers.sgd(s), "momentum": lambda s: optimizers.momentum(s, 0.9),
              "adam": lambda s: optimizers.adam(s)}
STEP_SIZES = {"sgd": 0.1, "momentum": 0.03, "adam": 0.003}


def run_config(model, opt: str, sched: str, splits):
    """Train the 2 seeds of one configuration together; the validation curve and test metrics."""
    (xtr, ytr), (xva, yva), (xte, yte) = [(jnp.asarray(a), jnp.asarray(b)) for a, b in splits]
    init_fun, apply_fun = model
    opt_init, opt_update, get_params = OPTIMIZERS[opt](schedule(sched, STEP_SIZES[opt]))

    def loss_fn(params, x, y):
        logp = jax.nn.log_softmax(apply_fun(params, x))
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def metrics(params, x, y):
        logits = apply_fun(params, x)
        logp = jax.nn.log_softmax(logits)
        return (-jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1)),
                jnp.mean(jnp.argmax(logits, -1) == y))

    def chunk(state, key, start):
        def step(st, i):
            idx = jax.random.randint(jax.random.fold_in(key, i), (BATCH,), 0, xtr.shape[0])
            g = jax.grad(loss_fn)(get_params(st), xtr[idx], ytr[idx])
            return opt_update(i, g, st), None
        state, _ = jax.lax.scan(step, state, start + jnp.arange(CHUNK))
        return state

    def init(key):
        _, params = init_fun(key, (-1, 8, 8, 1))
        return opt_init(params)

    keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(SEEDS))
    v_chunk = jax.jit(jax.vmap(chunk, in_axes=(0, 0, None)), donate_argnums=0)
    v_eval = jax.jit(jax.vmap(lambda st, x, y: metrics(get_params(st), x, y), in_axes=(0, None, None)))
    state = jax.jit(jax.vmap(init))(keys)
    curve = [(0, *map(np.asarray, v_eval(state, xva, yva)))]
    for start in range(0, STEPS, CHUNK):
        state = v_chunk(state, keys, start)
        curve.append((start + CHUNK, *map(np.asarray, v_eval(state, xva, yva))))
    test = [np.asarray(v) for v in v_eval(state, xte, yte)]
    return curve, test


def main(uri: str) -> None:
    import mlflow

    splits = data()
    results = []
    for mname, model in (("mlp", mlp()), ("cnn", cnn())):
        for opt in OPTIMIZERS:
            for sched in ("constant", "cosine_decay"):
                curve, test = run_config(model, opt, sched, splits)
                results.append((mname, opt, sched, curve, test))
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("handwritten-quickstart")
    client = mlflow.MlflowClient()
    from mlflow.entities import Metric, Param

    n = 0
    for mname, opt, sched, curve, test in results:
        for seed in range(SEEDS):
            with mlflow.start_run() as run:
                now = int(time.time() * 1000)
                params = [Param("model", mname), Param("optimizer", opt), Param("schedule", sched),
                          Param("step_size", str(STEP_SIZES[opt])), Param("seed", str(seed))]
                ms = [Metric("valid/loss", float(lo[seed]), now, s) for s, lo, _ in curve]
                ms += [Metric("valid/accuracy", float(acc[seed]), now, s) for s, _, acc in curve]
                ms += [Metric("test/loss", float(test[0][seed]), now, STEPS),
                       Metric("test/accuracy", float(test[1][seed]), now, STEPS)]
                client.log_batch(run.info.run_id, metrics=ms, params=params)
                assert all(math.isfinite(m.value) for m in ms)
                n += 1
    print(json.dumps({"trials": n, "seconds": time.perf_counter() - T0}))


if __name__ == "__main__":
    main(sys.argv[1])
