"""NAdamW with linear warm-up and cosine decay, written against AlgoPerf's JAX submission API.

A complete AlgoPerf submission (``get_batch_size``, ``init_optimizer_state``, ``update_params``,
``prepare_for_eval``, ``data_selection``) that runs unchanged on AlgoPerf and on this harness
(``source: "algoperf:submissions/nadamw.py"`` in a config's optimizer entry). Copy it as the
starting point of your own.

Hyperparameters (``tuning_search_space.json`` beside this file): ``learning_rate``,
``one_minus_beta1`` (b1 = 1 - it), ``beta2``, ``weight_decay`` (decoupled, multiplied by the
scheduled learning rate), ``warmup_factor`` (warm-up steps = int(warmup_factor * step_hint)), and
optionally ``label_smoothing`` and ``grad_clip`` (global-norm clipping).

The update, with t = step + 1 (Dozat's NAdam without momentum decay, Adam's bias corrections)::

    m <- b1 m + (1 - b1) g          v <- b2 v + (1 - b2) g^2
    n = (b1 m + (1 - b1) g) / (1 - b1^t)        v^ = v / (1 - b2^t)
    w <- w - lr(step) * (n / (sqrt(v^) + eps) + weight_decay * w)

``lr(step)`` rises linearly from 0 to ``learning_rate`` over the warm-up, then follows a cosine to 0
at ``step_hint``. On the harness this is the built-in ``nadamw`` optimizer with the
``warmup_cosine_decay`` schedule (``tests/test_algoperf.py`` checks their curves agree).
"""

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from algoperf import jax_sharding_utils, spec

EPS = 1e-8


class NAdamWState(NamedTuple):
    """The optimizer's state: the update count and the two moments (trees like the parameters)."""

    count: jax.Array
    mu: Any
    nu: Any


def learning_rate_at(step, peak: float, warmup: int, decay: int):
    """Linear warm-up from 0 to ``peak`` over ``warmup`` steps, then a cosine decay to 0 over
    ``decay`` steps (``step`` counts updates from 0)."""
    warm = peak * (jnp.clip(step, 0, warmup) / max(warmup, 1))
    frac = jnp.clip(step - warmup, 0, decay) / decay
    cosine = peak * 0.5 * (1.0 + jnp.cos(jnp.pi * frac))
    return jnp.where(step < warmup, warm, cosine)


def get_batch_size(workload_name):
    """Batch sizes for AlgoPerf's workloads; other names (the harness's) use the workload's own."""
    sizes = {"criteo1tb": 262_144, "fastmri": 32, "imagenet_resnet": 1024, "imagenet_vit": 1024,
             "librispeech_conformer": 256, "librispeech_deepspeech": 256, "ogbg": 512, "wmt": 128,
             "mnist": 16}
    return sizes[workload_name]  # KeyError: the runner falls back to the configured batch size


def init_optimizer_state(workload, model_params, model_state, hyperparameters, rng):
    """Zero moments shaped like the parameters."""
    del model_params, model_state, rng
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape_tuple, jnp.float32), workload.param_shapes)
    return NAdamWState(jnp.zeros([], jnp.int32), zeros, jax.tree.map(jnp.zeros_like, zeros))


@functools.partial(jax.jit, static_argnums=(0, 6))
def _train_step(workload, params, model_state, opt_state, batch, rng, hp):
    """One step; ``hp`` (static) = (peak lr, b1, b2, weight decay, warm-up steps, decay steps,
    label smoothing, gradient-clipping norm or 0)."""
    peak, b1, b2, weight_decay, warmup, decay, label_smoothing, grad_clip = hp

    def loss_fn(p):
        logits, new_state = workload.model_fn(p, batch, model_state, spec.ForwardPassMode.TRAIN, rng,
                                              update_batch_norm=True)
        out = workload.loss_fn(batch["targets"], logits, batch.get("weights"), label_smoothing)
        return out["summed"] / out["n_valid_examples"], new_state

    (loss, new_model_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    if grad_clip:
        norm = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grads)))
        scale = jnp.minimum(1.0, grad_clip / (norm + 1e-6))
        grads = jax.tree.map(lambda g: g * scale, grads)

    count = opt_state.count + 1
    mu = jax.tree.map(lambda g, m: (1 - b1) * g + b1 * m, grads, opt_state.mu)
    nu = jax.tree.map(lambda g, v: (1 - b2) * jnp.square(g) + b2 * v, grads, opt_state.nu)
    c1 = 1 - jnp.asarray(b1, jnp.float32) ** count
    c2 = 1 - jnp.asarray(b2, jnp.float32) ** count
    lr = learning_rate_at(opt_state.count, peak, warmup, decay)

    def step(w, g, m, v):
        n_hat = ((1 - b1) * g + b1 * m) / c1
        return w - lr * (n_hat / (jnp.sqrt(v / c2) + EPS) + weight_decay * w)

    new_params = jax.tree.map(step, params, grads, mu, nu)
    return NAdamWState(count, mu, nu), new_params, new_model_state, loss


def update_params(workload, current_param_container, current_params_types, model_state,
                  hyperparameters, batch, loss_type, optimizer_state, eval_results, global_step, rng,
                  train_state=None):
    """One NAdamW step on ``batch``; returns (optimizer_state, params, model_state)."""
    del current_params_types, loss_type, eval_results, global_step, train_state
    h = hyperparameters
    warmup = int(h.warmup_factor * workload.step_hint)
    decay = max(workload.step_hint - warmup, 1)
    hp = (float(h.learning_rate), 1.0 - float(h.one_minus_beta1), float(h.beta2),
          float(h.weight_decay), warmup, decay, float(getattr(h, "label_smoothing", 0.0)),
          float(getattr(h, "grad_clip", 0.0) or 0.0))
    batch = jax_sharding_utils.shard_along_batch_dim(batch)
    new_state, new_params, new_model_state, _ = _train_step(
        workload, current_param_container, model_state, optimizer_state, batch, rng, hp)
    return new_state, new_params, new_model_state


def prepare_for_eval(workload, current_param_container, current_params_types, model_state,
                     hyperparameters, loss_type, optimizer_state, eval_results, global_step, rng):
    """Nothing to prepare: evaluate the current parameters."""
    del workload, current_params_types, hyperparameters, loss_type, eval_results, global_step, rng
    return optimizer_state, current_param_container, model_state


def data_selection(workload, input_queue, optimizer_state, current_param_container, model_state,
                   hyperparameters, global_step, rng):
    """The next batch of the pre-shuffled input queue."""
    del workload, optimizer_state, current_param_container, model_state, hyperparameters
    del global_step, rng
    return next(input_queue)
