"""Test submission: plain SGD whose evaluations use an exponential moving average of the
parameters (``prepare_for_eval`` returns the average). The raw parameters live in the optimizer
state, so training continues from them whatever the runner was handed back. ``EVAL_PARAMS`` records
every ``(global_step, params)`` ``prepare_for_eval`` returned, for the test to check."""

import jax
import jax.numpy as jnp
from algoperf import spec

EVAL_PARAMS = []


def get_batch_size(workload_name):
    return None


def init_optimizer_state(workload, model_params, model_state, hyperparameters, rng):
    del workload, model_state, hyperparameters, rng
    copy = jax.tree.map(jnp.array, model_params)
    return {"raw": copy, "ema": jax.tree.map(jnp.array, model_params), "count": jnp.zeros([], jnp.int32)}


def _step(workload, raw, ema, count, model_state, batch, rng, lr, decay):
    def loss_fn(p):
        out, new_state = workload.model_fn(p, batch, model_state, spec.ForwardPassMode.TRAIN, rng, True)
        d = workload.loss_fn(batch["targets"], out, batch["weights"])
        return d["summed"] / d["n_valid_examples"], new_state

    grads, new_state = jax.grad(loss_fn, has_aux=True)(raw)
    raw = jax.tree.map(lambda w, g: w - lr * g, raw, grads)
    ema = jax.tree.map(lambda a, w: decay * a + (1 - decay) * w, ema, raw)
    return raw, ema, count + 1, new_state


_jit_step = jax.jit(_step, static_argnums=(0,))


def update_params(workload, current_param_container, current_params_types, model_state,
                  hyperparameters, batch, loss_type, optimizer_state, eval_results, global_step, rng,
                  train_state=None):
    del current_param_container, current_params_types, loss_type, eval_results, train_state
    assert global_step == int(optimizer_state["count"])
    raw, ema, count, new_state = _jit_step(workload, optimizer_state["raw"], optimizer_state["ema"],
                                           optimizer_state["count"], model_state, batch, rng,
                                           hyperparameters.learning_rate, hyperparameters.ema_decay)
    return {"raw": raw, "ema": ema, "count": count}, raw, new_state


def prepare_for_eval(workload, current_param_container, current_params_types, model_state,
                     hyperparameters, loss_type, optimizer_state, eval_results, global_step, rng):
    EVAL_PARAMS.append((global_step, optimizer_state["ema"]))
    return optimizer_state, optimizer_state["ema"], model_state


def data_selection(workload, input_queue, optimizer_state, current_param_container, model_state,
                   hyperparameters, global_step, rng):
    return next(input_queue)
