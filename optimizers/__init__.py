"""Optimizers for JAX in the ``(init_fn, update_fn, params_fn)`` triple form.

A drop-in replacement for ``jax.example_libraries.optimizers`` (every public name, same
signatures and update rules; see :mod:`optimizers.core`), plus ``adamw``, ``nadamw``, ``lion``,
the schedules ``linear_warmup``, ``cosine_decay``, ``warmup_cosine_decay``, ``join_schedules``,
the Optax bridge ``from_optax`` (:mod:`optimizers.extra`), the optimizers of 2018-2024
``muon``, ``adafactor``, ``lamb``, ``lars`` (:mod:`optimizers.modern`), ``schedule_free_sgd``,
``schedule_free_adamw`` with ``schedule_free_eval_params``, ``prodigy``
(:mod:`optimizers.modern_free`), ``soap`` (:mod:`optimizers.modern_soap`), the schedule
``warmup_stable_decay`` (:mod:`optimizers.wsd`), and the name
registries ``OPTIMIZERS`` and ``SCHEDULES`` (:mod:`optimizers.registry`; each entry registers
itself where it is defined). Shared helpers: :mod:`optimizers.common`. Imports jax and numpy
only (never ``harness``).
"""

from optimizers.core import (
    Array,
    InitFn,
    JoinPoint,
    Optimizer,
    OptimizerState,
    Params,
    ParamsFn,
    Schedule,
    State,
    Step,
    UpdateFn,
    Updates,
    adagrad,
    adam,
    adamax,
    clip_grads,
    constant,
    exponential_decay,
    inverse_time_decay,
    l2_norm,
    make_schedule,
    momentum,
    nesterov,
    optimizer,
    pack_optimizer_state,
    piecewise_constant,
    polynomial_decay,
    rmsprop,
    rmsprop_momentum,
    sgd,
    sm3,
    unpack_optimizer_state,
)
from optimizers.extra import (
    adamw,
    cosine_decay,
    from_optax,
    join_schedules,
    linear_warmup,
    lion,
    nadamw,
    warmup_cosine_decay,
)
from optimizers.modern import adafactor, lamb, lars, muon, muon_matrices, newton_schulz
from optimizers.modern_free import prodigy, schedule_free_adamw, schedule_free_eval_params, schedule_free_sgd
from optimizers.modern_soap import soap
from optimizers.registry import OPTIMIZERS, SCHEDULES
from optimizers.wsd import warmup_stable_decay

__all__ = [
    "OPTIMIZERS",
    "SCHEDULES",
    "Array",
    "InitFn",
    "JoinPoint",
    "Optimizer",
    "OptimizerState",
    "Params",
    "ParamsFn",
    "Schedule",
    "State",
    "Step",
    "UpdateFn",
    "Updates",
    "adafactor",
    "adagrad",
    "adam",
    "adamax",
    "adamw",
    "clip_grads",
    "constant",
    "cosine_decay",
    "exponential_decay",
    "from_optax",
    "inverse_time_decay",
    "join_schedules",
    "l2_norm",
    "lamb",
    "lars",
    "linear_warmup",
    "lion",
    "make_schedule",
    "momentum",
    "muon",
    "muon_matrices",
    "nadamw",
    "nesterov",
    "newton_schulz",
    "optimizer",
    "pack_optimizer_state",
    "piecewise_constant",
    "polynomial_decay",
    "prodigy",
    "rmsprop",
    "rmsprop_momentum",
    "schedule_free_adamw",
    "schedule_free_eval_params",
    "schedule_free_sgd",
    "sgd",
    "sm3",
    "soap",
    "unpack_optimizer_state",
    "warmup_cosine_decay",
    "warmup_stable_decay",
]
