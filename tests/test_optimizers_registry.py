"""The optimizer and schedule registries, pinned: every entry's name (in order), hyperparameters
with their annotations and defaults (what the config validator reads), and the sentence
``python -m harness list`` shows for it. An entry is registered where it is defined
(``optimizers.core`` / ``optimizers.extra``), with its defaults in its own signature."""

import inspect
import typing

import jax
import pytest

import optimizers as O
from harness.cli.list_cmd import describe
from harness.core.builders import hyperparameters
from optimizers import core, extra, modern, modern_free, modern_soap, wsd
from optimizers.registry import NOTES, register_optimizer, with_defaults

PINNED_OPTIMIZERS = {
    "sgd": (
        "step_size",
        "Stochastic gradient descent: x <- x - lr * g.",
    ),
    "momentum": (
        "step_size, mass: float = 0.9",
        "SGD with heavy-ball momentum (Polyak 1964).",
    ),
    "nesterov": (
        "step_size, mass: float = 0.9",
        "SGD with Nesterov momentum (Sutskever et al. 2013 formulation).",
    ),
    "adagrad": (
        "step_size, momentum: float = 0.9",
        "Adagrad with momentum (Duchi, Hazan & Singer 2011, JMLR 12).",
    ),
    "rmsprop": (
        "step_size, gamma: float = 0.9, eps: float = 1e-08",
        "RMSProp (Tieleman & Hinton 2012, lecture 6.5).",
    ),
    "rmsprop_momentum": (
        "step_size, gamma: float = 0.9, eps: float = 1e-08, momentum: float = 0.9",
        "RMSProp with momentum.",
    ),
    "adam": (
        "step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-08",
        "Adam (Kingma & Ba 2015, arXiv:1412.6980).",
    ),
    "adamax": (
        "step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-08",
        "AdaMax, Adam with the infinity norm (Kingma & Ba 2015, section 7).",
    ),
    "sm3": (
        "step_size, momentum: float = 0.9",
        "SM3-II with momentum (Anil, Gupta, Koren & Singer 2019, arXiv:1901.11150).",
    ),
    "adamw": (
        "step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-08, weight_decay: float = 0.0001",
        "AdamW: Adam with decoupled weight decay (Loshchilov & Hutter 2019, arXiv:1711.05101).",
    ),
    "nadamw": (
        "step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-08, weight_decay: float = 0.0001",
        "NAdamW, the AlgoPerf baseline: Nesterov Adam (Dozat 2016) with decoupled weight decay.",
    ),
    "lion": (
        "step_size, b1: float = 0.9, b2: float = 0.99, weight_decay: float = 0.001",
        "Lion, EvoLved Sign Momentum (Chen et al. 2023, arXiv:2302.06675).",
    ),
    "optax_sgd": (
        "step_size",
        "optax.sgd(step_size) through optimizers.extra.from_optax.",
    ),
    "optax_momentum": (
        "step_size, mass: float = 0.9, nesterov: bool = False",
        "optax.sgd(step_size, momentum=mass, nesterov=nesterov) through from_optax.",
    ),
    "optax_adam": (
        "step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-08",
        "optax.adam(step_size, b1, b2, eps) through from_optax.",
    ),
    "muon": (
        'step_size, beta: float = 0.95, ns_steps: int | None = None, eps: float = 1e-08, weight_decay: '
        'float = 0.0, nesterov: bool = True, adam_b1: float = 0.9, adam_b2: float = 0.999, '
        'adam_weight_decay: float = 0.0, adam_lr_ratio: float = 1.0, muon_mask: Callable[[typing.Any], '
        'typing.Any] | str | list[str] | None = None, convention: typing.Literal[\'optax\', \'jordan\', '
        '\'modded_nanogpt\'] = \'optax\', ns_coeffs: tuple[float, float, float] | tuple[tuple[float, '
        'float, float], ...] | None = None, ns_eps: float | None = None, ns_dtype: '
        'typing.Optional[typing.Literal[\'float32\', \'bfloat16\', \'float16\']] = None, momentum_form: '
        'typing.Optional[typing.Literal[\'bias_corrected\', \'lerp\']] = None, adam_nesterov: bool | '
        'None = None, adam_eps: float | None = None',
        'Muon, MomentUm Orthogonalized by Newton-Schulz (Jordan et al. 2024), AdamW for non-matrices; '
        '(matrix set muon_mask: default every 2-D leaf; in YAML a group rule or a list of them: '
        'hidden_matrices, embeddings, head, norms_and_biases, glob:PATTERN; named conventions: optax, '
        'jordan, modded_nanogpt).',
    ),
    "adafactor": (
        'step_size, min_dim_size_to_factor: int = 128, decay_rate: float = 0.8, decay_offset: int = '
        '0, multiply_by_parameter_scale: bool = True, clipping_threshold: float | None = 1.0, '
        'momentum: float | None = None, weight_decay_rate: float | None = None, eps: float = 1e-30, '
        'factored: bool = True',
        'Adafactor (Shazeer & Stern 2018, arXiv:1804.04235): factored second moments, update '
        'clipping.',
    ),
    "lamb": (
        'step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-06, weight_decay: float = 0.0',
        'LAMB, layer-wise adaptive Adam (You et al. 2020, arXiv:1904.00962).',
    ),
    "lars": (
        'step_size, weight_decay: float = 0.0, trust_coefficient: float = 0.001, eps: float = 0.0, '
        'momentum: float = 0.9, nesterov: bool = False',
        'LARS, layer-wise adaptive rate scaling (You, Gitman & Ginsburg 2017, arXiv:1708.03888).',
    ),
    "schedule_free_sgd": (
        'step_size, b1: float = 0.9, weight_decay: float = 0.0, weight_lr_power: float = 2.0',
        'Schedule-Free SGD (Defazio et al. 2024, arXiv:2405.15682, "The Road Less Scheduled").',
    ),
    "schedule_free_adamw": (
        'step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-08, weight_decay: float = '
        '0.0, weight_lr_power: float = 2.0',
        'Schedule-Free AdamW (Defazio et al. 2024, arXiv:2405.15682), the AlgoPerf 2024 winner.',
    ),
    "prodigy": (
        'step_size, b1: float = 0.9, b2: float = 0.999, beta3: float | None = None, eps: float = '
        '1e-08, estim_lr0: float = 1e-06, estim_lr_coef: float = 1.0, weight_decay: float = 0.0, '
        'safeguard_warmup: bool = False',
        'Prodigy, learning-rate-free AdamW (Mishchenko & Defazio 2024, arXiv:2306.06101).',
    ),
    "soap": (
        'step_size, b1: float = 0.95, b2: float = 0.95, shampoo_beta: float | None = None, eps: float'
        ' = 1e-08, weight_decay: float = 0.01, precondition_frequency: int = 10, max_precond_dim: int'
        ' = 10000, soap_mask: Callable[[typing.Any], typing.Any] | str | list[str] | None = None',
        "SOAP, ShampoO with Adam in the Preconditioner's eigenbasis (Vyas et al. 2024, "
        'arXiv:2409.11321); (matrix set soap_mask: default every 2-D leaf; in YAML a group rule or a '
        'list of them: hidden_matrices, embeddings, head, norms_and_biases, glob:PATTERN).',
    ),
}

PINNED_SCHEDULES = {
    "constant": (
        "step_size",
        "schedule(i) = step_size.",
    ),
    "exponential_decay": (
        "step_size, decay_steps: float, decay_rate: float",
        "schedule(i) = step_size * decay_rate ** (i / decay_steps) (continuous, not staircase).",
    ),
    "inverse_time_decay": (
        "step_size, decay_steps: float, decay_rate: float, staircase: bool = False",
        "schedule(i) = step_size / (1 + decay_rate * i / decay_steps).",
    ),
    "polynomial_decay": (
        "step_size, decay_steps: int, final_step_size: float, power: float = 1.0",
        "schedule(i) = (1 - min(i, decay_steps) / decay_steps) ** power * (step_size - final) + "
        "final: from step_size at 0 to final_step_size at decay_steps and after; (final_step_size "
        "is absolute).",
    ),
    "piecewise": (
        "step_size, boundaries: Sequence[int], multipliers: Sequence[float]",
        "schedule(i) = values[k] where k is the number of boundaries strictly below i; with values "
        "step_size * multipliers[k].",
    ),
    "linear_warmup": (
        "step_size, warmup_steps: int, init_scale: float = 0.0",
        "Linear ramp from init_scale * step_size at step 0 to step_size at warmup_steps, constant "
        "after: lr(i) = (i0 - step_size) * (1 - min(max(i, 0), w) / w) + step_size with i0 = "
        "init_scale * step_size.",
    ),
    "cosine_decay": (
        "step_size, total_steps: int | None = None, alpha: float = 0.0",
        "Cosine decay (Loshchilov & Hutter 2017, SGDR, without restarts) over total_steps: lr(i) = "
        "step_size * ((1 - alpha) * 0.5 * (1 + cos(pi * min(i, T) / T)) + alpha), from step_size at"
        " 0 to alpha * step_size at T and after; (total_steps injected by the harness).",
    ),
    "warmup_cosine_decay": (
        "step_size, warmup_steps: int, total_steps: int | None = None, init_scale: float = 0.0, "
        "alpha: float = 0.0",
        "linear_warmup over warmup_steps then cosine_decay over the remaining total_steps - "
        "warmup_steps steps, from step_size down to alpha * step_size; (total_steps injected by the"
        " harness).",
    ),
    "warmup_stable_decay": (
        "step_size, warmup_steps: int = 0, total_steps: int | None = None, decay_fraction: float = 0.2, "
        "decay_shape: typing.Literal['linear', '1-sqrt'] = 'linear', init_scale: float = 0.0, "
        "final_scale: float = 0.0, warmup_offset: int = 0",
        "Linear warm-up, constant, then a cool-down over the last decay_fraction of the budget; "
        "(total_steps injected by the harness).",
    ),
}


def _signature_line(builder) -> str:
    hints = typing.get_type_hints(builder)
    parts = []
    for h in hyperparameters(builder, skip=frozenset()).values():
        a = hints.get(h.name)
        a = a.__name__ if isinstance(a, type) else (str(a).replace("collections.abc.", "") if a else "")
        parts.append(h.name + (f": {a}" if a else "") + ("" if h.required else f" = {h.default!r}"))
    return ", ".join(parts)


@pytest.mark.parametrize("registry, table, pinned", [("optimizers", O.OPTIMIZERS, PINNED_OPTIMIZERS),
                                                     ("schedules", O.SCHEDULES, PINNED_SCHEDULES)])
def test_registry_entries_are_pinned(registry, table, pinned):
    assert list(table) == list(pinned)
    for name, builder in table.items():
        sig, sentence = pinned[name]
        assert _signature_line(builder) == sig, name
        assert describe(builder, NOTES[registry].get(name)) == sentence, name


def test_entries_are_the_functions_themselves_except_reference_defaults():
    """No wrapper restates a default: an entry is the function defined in core/extra/modern*; only
    ``momentum``/``nesterov``, whose reference signatures have no default ``mass``, are registered
    with one (and the reference functions keep theirs unchanged)."""
    for name, builder in {**O.OPTIMIZERS, **O.SCHEDULES}.items():
        if name in ("momentum", "nesterov"):
            ref = getattr(core, name)
            assert builder is not ref and builder.__wrapped__ is ref
            assert inspect.signature(ref).parameters["mass"].default is inspect.Parameter.empty
            assert inspect.signature(builder).parameters["mass"].default == 0.9
            x = builder(0.1).init_fn(1.0)
            assert builder(0.1).update_fn(0, 1.0, x) == ref(0.1, 0.9).update_fn(0, 1.0, x)
        else:
            homes = (core, extra, modern, modern_free, modern_soap, wsd)
            assert any(builder is getattr(m, name, None) for m in homes), name


def test_register_refuses_a_second_entry_and_unknown_defaults():
    with pytest.raises(ValueError, match="already registered"):
        register_optimizer("adam")(core.adam)
    with pytest.raises(TypeError, match="no parameter"):
        with_defaults(core.momentum, {"masss": 0.9})


@pytest.mark.parametrize("name", sorted(O.OPTIMIZERS))
def test_initial_state_leaves_are_distinct_buffers(name):
    """The trainer donates the optimizer state; two leaves on one buffer fail the donation ("Attempt to
    donate the same buffer twice": schedule_free_* and prodigy did, from a shared zero), and a leaf on
    the caller's parameter buffer would be freed under it."""
    import jax.numpy as jnp

    params = {"w": jnp.ones((3, 4), jnp.float32), "b": jnp.zeros((4,), jnp.float32), "s": jnp.float32(0.5)}
    state = O.OPTIMIZERS[name](1e-2).init_fn(params)
    ptrs = [x.unsafe_buffer_pointer() for x in jax.tree.leaves(state) if isinstance(x, jax.Array)]
    assert len(ptrs) == len(set(ptrs)), name
    assert not {p.unsafe_buffer_pointer() for p in jax.tree.leaves(params)} & set(ptrs), name
