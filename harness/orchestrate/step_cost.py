"""The dry run's cost of one training step, per distinct program: FLOPs, memory and the time it
would take on a stated accelerator at an assumed MFU (nothing is compiled or run).

* FLOPs: the model's analytic forward count (``flops_per_example``: for ``gpt``/``transformer_lm``
  :func:`models.flops.lm_train_flops_per_token` ÷ 3 × T) × 3 (forward and backward) × batch size.
* Memory: the optimizer state as its ``init`` returns it (traced, ``jax.eval_shape``, on the
  parameter shapes the pre-flight traced; this harness keeps the parameters inside it) + the
  gradients (float32), + for a Transformer LM (``width``, ``depth``, ``num_heads``) the activations
  one micro-batch keeps for the backward pass, 16-bit, without recomputation:
  ``depth · T · b · (34 d + 5 h T)`` bytes (Korthikanti et al. 2022, eq. 2) + float32 logits
  ``b · T · vocab · 4``. An estimate: XLA's own figure needs the accelerator.
* Time: FLOPs / (peak × MFU) at :data:`ASSUMED_MFU`, an assumption, not a measurement: on the
  device present (its measured matmul peak, :func:`harness.train.timing.device_peak_flops`: cached
  per device kind in ``peak.json``, else a short probe of a few seconds; float32 on a CPU, bfloat16
  elsewhere), then on :data:`ACCELERATOR` (NVIDIA H100 SXM, bf16 dense peak 989.4 TFLOP/s, its
  datasheet) for comparison.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["ACCELERATOR", "ASSUMED_MFU", "MAX_LINES", "PEAK_FLOPS", "cost_lines", "step_cost"]

ACCELERATOR = "1 H100 SXM (bf16 dense peak 989 TFLOP/s)"
PEAK_FLOPS = 989.4e12
ASSUMED_MFU = 0.40
_GIB = 2.0 ** 30
#: The dry run estimates (and prints) at most this many distinct programs; a line counts the rest.
MAX_LINES = 8


def _size(gib: float) -> str:
    return f"{gib:.2f} GiB" if gib >= 1 else f"{gib * 1024:.3g} MiB"


def _lm_activation_bytes(hp: dict[str, Any], t: int, micro: int, vocab: int) -> float | None:
    """16-bit activations of one micro-batch of a Transformer LM, + float32 logits (module doc)."""
    if not all(k in hp for k in ("width", "depth", "num_heads")):
        return None
    d, layers, heads = int(hp["width"]), int(hp["depth"]), int(hp["num_heads"])
    return layers * t * micro * (34.0 * d + 5.0 * heads * t) + micro * t * vocab * 4.0


def step_cost(spec: Any, param_shapes: Mapping[tuple, Any] | None = None) -> dict[str, Any]:
    """One training step of ``spec`` (a :class:`~harness.core.spec.TrialSpec`).

    Args:
      param_shapes: the pre-flight's abstract parameters of each model (``TrialList.param_shapes``,
        keyed as :func:`harness.orchestrate.preflight.model_key`); a model not in it is traced here.

    Returns:
      ``{"params": N, "tokens": tokens per step (None: not a sequence task), "flops": training
      FLOPs per step (None: the model has no count), "state_gib", "grads_gib", "activations_gib"
      (None: not a Transformer LM), "memory_gib", "seconds": on ACCELERATOR at ASSUMED_MFU}``.
    """
    import jax
    import numpy as np

    from harness.config.optimizer_sources import trial_registries
    from harness.data.sources import load_dataset
    from harness.orchestrate.preflight import model_key
    from harness.train.build import make_opt_factory
    from harness.train.recipe import recipe_of

    reg = trial_registries(spec)
    ds = load_dataset(spec.dataset, **spec.hparams("dataset"))
    model = reg.models[spec.model](input_shape=ds.input_shape, num_classes=ds.num_classes,
                                   **spec.hparams("model"))
    params = (param_shapes or {}).get(model_key(spec, ds))
    if params is None:
        params = jax.eval_shape(lambda k: model.init(k, (1, *ds.input_shape)), jax.random.key(0))[1]
    n = int(sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(params)))
    make = make_opt_factory(spec.optimizer, spec.hparams("optimizer"), spec.schedule,
                            spec.hparams("schedule"), spec.schedule_steps, reg.optimizers, reg.schedules)
    state = jax.eval_shape(lambda p: make(1e-3).init_fn(p), params)
    state_b = float(sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize
                        for a in jax.tree_util.tree_leaves(state)))
    fwd = model.flops_per_example(ds.input_shape) if model.flops_per_example else None
    flops = None if fwd is None else 3.0 * float(fwd) * spec.batch_size
    seq = ds.task == "sequence"
    t = int(ds.input_shape[0]) if seq else 1
    micro = spec.batch_size // recipe_of(spec.recipe)[1]
    act = _lm_activation_bytes(spec.hparams("model"), t, micro, int(ds.num_classes or 0)) if seq else None
    grads = 4.0 * n
    return {"params": n, "tokens": spec.batch_size * t if seq else None, "flops": flops,
            "state_gib": state_b / _GIB, "grads_gib": grads / _GIB,
            "activations_gib": None if act is None else act / _GIB,
            "memory_gib": (state_b + grads + (act or 0.0)) / _GIB,
            "seconds": None if flops is None else flops / (PEAK_FLOPS * ASSUMED_MFU)}


def present_peak() -> tuple[str, float] | None:
    """``(device kind, measured peak FLOP/s)`` of this process's first device (float32 on a CPU,
    bfloat16 elsewhere: the compute dtype of ``dtype: auto``), or ``None`` when it cannot be had."""
    try:
        import jax
        import jax.numpy as jnp

        from harness.train import timing

        cpu = jax.devices()[0].platform == "cpu"
        return timing.device_kind(), timing.device_peak_flops(dtype=jnp.float32 if cpu else jnp.bfloat16)
    except Exception:  # an estimate only: the H100 figure stands without it
        return None


def _key(spec: Any) -> str:
    return json.dumps([spec.model, spec.hparams("model"), spec.dataset, spec.hparams("dataset"),
                       spec.optimizer, spec.batch_size, dict(spec.recipe).get("grad_accum", 1)],
                      sort_keys=True, default=str)


def cost_lines(specs: list, param_shapes: Mapping[tuple, Any] | None = None) -> list[str]:
    """One line per distinct (model, dataset, optimizer, batch, accumulation) of ``specs``: its
    step's FLOPs, memory and estimated time (module docstring); a line saying why where it fails.
    ``param_shapes``: the pre-flight's, as :func:`step_cost` takes them."""
    seen: dict[str, Any] = {}
    for s in specs:
        seen.setdefault(_key(s), s)
    out = []
    here = present_peak() if specs else None
    for s in list(seen.values())[:MAX_LINES]:
        if s.optimizer_api == "algoperf":  # its state exists only once init_optimizer_state ran
            out.append(f"step cost of {s.model} · {s.optimizer}: not estimated (an AlgoPerf submission "
                       f"builds its optimizer state in its own init_optimizer_state)")
            continue
        try:
            c = step_cost(s, param_shapes)
        except Exception as e:  # an estimate only: the plan above stands without it
            out.append(f"step cost of {s.model} · {s.optimizer}: not estimated ({type(e).__name__}: {e})")
            continue
        tok = "" if c["tokens"] is None else f", {c['tokens']:,} tokens"
        flops = "FLOPs not counted" if c["flops"] is None else f"{c['flops']:.3g} FLOPs"
        act = ("; activations not estimated" if c["activations_gib"] is None
               else f" + activations {_size(c['activations_gib'])}")
        when = "" if c["seconds"] is None else (f"; {1e3 * c['seconds']:.4g} ms on {ACCELERATOR} at an "
                                                f"assumed MFU of {ASSUMED_MFU:.0%}")
        if c["flops"] is not None and here is not None:
            when = (f"; {1e3 * c['flops'] / (here[1] * ASSUMED_MFU):.4g} ms here ({here[0]}, measured "
                    f"peak {here[1] / 1e9:.4g} GFLOP/s){when.replace('; ', ', ', 1)}")
        out.append(f"step cost of {s.model} · {s.optimizer} ({c['params']:,} parameters, batch "
                   f"{s.batch_size}{tok}): {flops}; memory ~{_size(c['memory_gib'])} (optimizer state "
                   f"{_size(c['state_gib'])} + gradients {_size(c['grads_gib'])}{act}){when}")
    if len(seen) > MAX_LINES:
        out.append(f"step cost: {len(seen) - MAX_LINES} more programs not estimated (the first "
                   f"{MAX_LINES} above)")
    return out
