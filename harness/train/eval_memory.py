"""The evaluation batch of a model from a memory budget, not a fixed count of examples.

:func:`eval_batch_size` compiles (never runs) one evaluation batch of :data:`PROBE_EXAMPLES`
examples of a sequence model and reads XLA's memory analysis (``compiled.memory_analysis()``): its
temporaries and outputs per example are what each example of an evaluation batch adds. The batch is
then as many examples as :data:`EVAL_MEMORY` holds, at most ``EVAL_BATCH``. A ``gpt`` evaluates
through its ``fused_loss`` (logits in blocks, :mod:`models.lm_loss`), so a batch's memory is its
activations, not ``batch × context × vocabulary`` logits. Other models (a class or a reconstruction
per example) keep ``EVAL_BATCH``.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.extend.core
import jax.numpy as jnp

__all__ = ["EVAL_MEMORY", "PROBE_EXAMPLES", "eval_batch_size", "eval_bytes_per_example"]

#: Bytes one evaluation batch of a sequence model may add on the device beside the parameters
#: (4 GiB: room on any current accelerator beside a trial's training state). Read at call time.
EVAL_MEMORY = 4 * 2**30

#: Examples of the batch whose compiled memory gives the bytes per example.
PROBE_EXAMPLES = 8


def _stats_fn(model: Any):
    fused = getattr(model, "fused_loss", None)

    def stats(p, s, xb, yb):
        if fused is not None:
            return fused(p, s, xb, yb, train=False)[:2]
        out = model.apply(p, s, xb, train=False)[0]
        return model.loss(out, yb), {k: f(out, yb) for k, f in model.metrics.items()}

    return stats


def _probe_args(model: Any, probe: int):
    shape = tuple(model.input_shape)
    _, params, state = jax.eval_shape(lambda k: model.init(k, (1, *shape)), jax.random.PRNGKey(0))
    tokens = jax.ShapeDtypeStruct((probe, *shape), jnp.int32)  # a sequence model's inputs: token ids
    return params, state, tokens, tokens


def _jaxpr_bytes(jaxpr) -> int:
    """Bytes of every value a jaxpr's equations make, nested jaxprs once (no buffer reused)."""
    total = 0
    for eqn in jaxpr.eqns:
        total += sum(math.prod(v.aval.shape) * v.aval.dtype.itemsize for v in eqn.outvars
                     if hasattr(v.aval, "shape"))
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            total += _jaxpr_bytes(sub)
    return total


def eval_bytes_per_example(model: Any, probe: int = PROBE_EXAMPLES) -> float:
    """Device bytes one example adds to an evaluation batch of ``model`` (a sequence ModelDef).

    Args:
      model: a :class:`models.zoo.ModelDef` (its ``fused_loss`` when it has one, else ``apply``,
        ``loss`` and ``metrics``), float32.
      probe: examples of the compiled probe batch.

    Returns:
      ``(temporaries + outputs) / probe`` of the compiled probe batch, bytes (an over-estimate:
      fixed workspace, such as one block of logits, is shared by the probe's examples).
    """
    params, state, x, y = _probe_args(model, probe)
    stats = _stats_fn(model)
    m = jax.jit(stats).lower(params, state, x, y).compile().memory_analysis()
    return (m.temp_size_in_bytes + m.output_size_in_bytes) / probe


def eval_batch_size(model: Any, num_examples: int, limit: int, budget: float | None = None) -> int:
    """The evaluation batch of ``model`` on a split of ``num_examples``.

    Args:
      model: a :class:`models.zoo.ModelDef`.
      num_examples: examples in the split (> 0).
      limit: the most examples a batch may hold (``EVAL_BATCH``).
      budget: bytes a batch may add (default :data:`EVAL_MEMORY`); used for ``"sequence"`` models
        only (:func:`eval_bytes_per_example`), others take ``min(num_examples, limit)``.

    Returns:
      ``min(num_examples, limit, floor(budget / bytes per example))``, at least 1; ``min(num_examples,
      limit)`` without compiling when even every value of the traced batch, none reused, would take
      at most half the budget.
    """
    n = min(int(num_examples), int(limit))
    if getattr(model, "task", None) != "sequence" or n <= 1:
        return max(1, n)
    budget = EVAL_MEMORY if budget is None else budget
    probe = min(PROBE_EXAMPLES, n)
    traced = jax.make_jaxpr(_stats_fn(model))(*_probe_args(model, probe)).jaxpr
    if n * _jaxpr_bytes(traced) / probe <= budget / 2:  # every value kept at once fits: no compile
        return n
    per = eval_bytes_per_example(model, probe)
    return max(1, min(n, math.floor(budget / max(per, 1.0))))
