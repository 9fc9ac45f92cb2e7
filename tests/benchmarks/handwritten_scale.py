"""the yardstick: N short trials as a competent user would write them by hand, with or without
MLflow logging. Not part of the harness; it imports nothing from it.

The same work as the benchmark's harness config (:data:`test_bench_scale.CONFIG`): logistic
regression (the reference ``stax.Dense(10)`` on the 64 flattened pixels) on scikit-learn's digits
(1,150 train / 287 validation, pixels / 16), Adam from the reference ``optimizers``, 20 steps of
batch 64, validation at steps 0, 10 and 20; N/2 step sizes log-uniform in [1e-4, 1e-1] (scipy's
scrambled Sobol sequence) × 2 seeds. One jitted step program whose step size is an argument, so it
compiles once for every trial. Logged per trial, as a careful script would: one ``create_run``
with its tags, one ``log_batch`` with the params, every training loss, the validation curve and the
final metrics, and ``set_terminated``.

Usage: ``python handwritten_scale.py N TRACKING_URI|none [same]`` prints one JSON line
``{"trials": N, "seconds": wall, "cpu": process CPU seconds}`` (whole process, from the first line
of this file's imports). ``none``: the same training without any MLflow call (nor import).
``same``: the same three calls carrying a record of the harness's size and names (28 tags with
``mlflow.runName``, 16 params, 18 metric keys in 43 rows; see :data:`SAME_TAGS`), to tell the
harness's own cost from its record's.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()
C0 = time.process_time()

import json  # noqa: E402
import sys  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.example_libraries import optimizers, stax  # noqa: E402
from scipy.stats import qmc  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

STEPS, EVAL_EVERY, BATCH, SEEDS = 20, 10, 64, 2
#: The harness's trial tags besides ``mlflow.runName`` (what a 20-step trial of its sweep stores).
SAME_TAGS = [
    "harness.trial_id", "harness.sweep", "harness.sweep_id", "harness.kind", "mlflow.parentRunId", "model",
    "optimizer", "schedule", "dataset", "seed", "harness_commit", "config_commit", "jax_version",
    "jaxlib_version", "harness_version", "device_kind", "xla_cpu_threads", "harness.search",
    "harness.search_index", "harness.search_space", "harness.batching", "harness.owner",
    "harness.owner_start", "harness.heartbeat", "status", "harness.devices", "harness.trained_by"]
SAME_PARAMS = [
    "optimizer.b1", "optimizer.b2", "optimizer.eps", "dataset.validation_fraction", "model", "optimizer",
    "optimizer.step_size", "schedule", "dataset", "train.seed", "train.steps", "train.batch_size",
    "train.eval_every", "train.steps_per_dispatch", "train.dtype", "train.divergence_loss_factor"]
SAME_SCALARS = [
    "best/valid_accuracy", "best/valid_loss", "compile/cache_hits", "compile/cache_misses",
    "final/valid_accuracy", "final/valid_loss", "test/accuracy", "test/loss", "time/compile_s", "time/eval_s",
    "time/other_s", "time/throughput_s", "time/tracking_s", "time/train_s"]


def data():
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    perm = np.random.default_rng(0).permutation(len(x))
    x, y = x[perm], y[perm].astype(np.int32)
    x, y = x[:-360], y[:-360]
    return (jnp.asarray(x[:-287]), jnp.asarray(y[:-287])), (jnp.asarray(x[-287:]), jnp.asarray(y[-287:]))


def main(n: int, uri: str, same: bool = False) -> None:
    (xtr, ytr), (xva, yva) = data()
    init_fun, apply_fun = stax.serial(stax.Dense(10))
    u = qmc.Sobol(1, scramble=True, seed=0).random(max(n // SEEDS, 1))[:, 0]
    step_sizes = 10 ** (-4 + 3 * u)

    def loss(params, x, y):
        logp = jax.nn.log_softmax(apply_fun(params, x))
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def evaluate(params):
        logits = apply_fun(params, xva)
        logp = jax.nn.log_softmax(logits)
        return (-jnp.mean(jnp.take_along_axis(logp, yva[:, None], axis=1)),
                jnp.mean(jnp.argmax(logits, -1) == yva))

    @jax.jit
    def step(i, state, key, step_size):
        _, opt_update, get_params = optimizers.adam(step_size)
        idx = jax.random.randint(jax.random.fold_in(key, i), (BATCH,), 0, xtr.shape[0])
        value, g = jax.value_and_grad(loss)(get_params(state), xtr[idx], ytr[idx])
        return value, opt_update(i, g, state)

    @jax.jit
    def start(key, step_size):
        opt_init, _, _ = optimizers.adam(step_size)
        return opt_init(init_fun(key, (-1, 64))[1])

    @jax.jit
    def evaluate_state(state, step_size):
        return evaluate(optimizers.adam(step_size)[2](state))

    client = None
    if uri != "none":
        import mlflow
        from mlflow.entities import Metric, Param, RunTag

        client = mlflow.MlflowClient(uri)
        exp = client.create_experiment(f"handwritten-scale-{time.time_ns()}")  # new on a shared server
    done = 0
    for j, lr in enumerate(step_sizes):
        for seed in range(SEEDS):
            t_ms = int(time.time() * 1000)
            key = jax.random.PRNGKey(seed)
            state = start(key, lr)
            train, valid = [], [(0, *map(float, evaluate_state(state, lr)))]
            for i in range(STEPS):
                value, state = step(i, state, key, lr)
                train.append((i + 1, float(value)))
                if (i + 1) % EVAL_EVERY == 0:
                    valid.append((i + 1, *map(float, evaluate_state(state, lr))))
            done += 1
            if client is None:
                continue
            if same:
                tags = {k: f"{k}-{j}-{seed}" for k in SAME_TAGS}
                tags["harness.search_space"] = '{"optimizer.step_size":["log_uniform",0.0001,0.1]}'
                run = client.create_run(exp, start_time=t_ms, tags=tags,
                                        run_name=f"logreg-adam-lr{lr:g}-s{seed}")
                ms = [Metric("train/loss", v, t_ms, s) for s, v in train]
                ms += [Metric(k, v, t_ms, s) for s, lo, acc in valid
                       for k, v in (("valid/loss", lo), ("valid/accuracy", acc), ("time/wall_s", s / 1e3))]
                ms += [Metric(k, valid[-1][1], t_ms, STEPS) for k in SAME_SCALARS]
                client.log_batch(run.info.run_id, metrics=ms,
                                 params=[Param(k, repr(float(lr)) if k == "optimizer.step_size" else f"{k}-v")
                                         for k in SAME_PARAMS])
                client.set_terminated(run.info.run_id)
                continue
            run = client.create_run(exp, start_time=t_ms, tags={
                "trial_id": f"{j}-{seed}", "model": "logreg", "optimizer": "adam", "dataset": "digits",
                "seed": str(seed)})
            ms = [Metric("train/loss", v, t_ms, s) for s, v in train]
            ms += [Metric("valid/loss", lo, t_ms, s) for s, lo, _ in valid]
            ms += [Metric("valid/accuracy", acc, t_ms, s) for s, _, acc in valid]
            ms += [Metric("final/valid_loss", valid[-1][1], t_ms, STEPS),
                   Metric("final/valid_accuracy", valid[-1][2], t_ms, STEPS)]
            client.log_batch(run.info.run_id, metrics=ms, params=[
                Param("optimizer.step_size", repr(float(lr))), Param("seed", str(seed)),
                Param("steps", str(STEPS)), Param("batch_size", str(BATCH))],
                tags=[RunTag("status", "finished")])
            client.set_terminated(run.info.run_id)
    print(json.dumps({"trials": done, "seconds": time.perf_counter() - T0,
                      "cpu": time.process_time() - C0}))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], same=sys.argv[3:] == ["same"])
