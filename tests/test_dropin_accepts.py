"""The drop-in optimizers take every value ``jax.example_libraries.optimizers`` takes, with its results;
the harness's config layer (``harness.config.dropin_ranges``) refuses what would spoil a sweep.

Each case below raised ``ValueError`` in ``optimizers`` while the reference returned values (zeros
and NaN from ``clip_grads(tree, 0.0)``, an ascending ``sgd(-0.1)``, NaN from ``adam(b1=1.0)``...).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from jax.example_libraries import optimizers as R

import optimizers as O
from harness.config.dropin_ranges import RANGES, check_ranges

P = {"w": jnp.array([1.0, -2.0]), "b": jnp.array(0.5)}
G = {"w": jnp.array([0.5, 0.25]), "b": jnp.array(-1.0)}


def _two_steps(lib, make):
    init, update, get = make(lib)
    state = update(0, G, init(P))
    return get(update(1, G, state))


OPTIMIZER_CASES = {
    "sgd step_size=-0.1": lambda m: m.sgd(-0.1),
    "sgd step_size=0": lambda m: m.sgd(0.0),
    "momentum step_size=nan": lambda m: m.momentum(float("nan"), 0.9),
    "adam b1=1.0": lambda m: m.adam(0.1, b1=1.0),
    "adam b2=-1.0": lambda m: m.adam(0.1, b2=-1.0),
    "adam eps=-1e-8": lambda m: m.adam(0.1, eps=-1e-8),
    "adamax b1=1.5": lambda m: m.adamax(0.1, b1=1.5),
    "rmsprop gamma=1.5": lambda m: m.rmsprop(0.1, gamma=1.5),
    "rmsprop_momentum eps=-1.0": lambda m: m.rmsprop_momentum(0.1, eps=-1.0),
    "adagrad step_size=-1": lambda m: m.adagrad(-1.0),
}


@pytest.mark.parametrize("case", list(OPTIMIZER_CASES))
def test_optimizer_takes_what_the_reference_takes(case):
    ours, ref = _two_steps(O, OPTIMIZER_CASES[case]), _two_steps(R, OPTIMIZER_CASES[case])
    for k in P:  # bitwise, NaN where the reference has NaN
        np.testing.assert_array_equal(np.asarray(ours[k]), np.asarray(ref[k]), err_msg=case)


SCHEDULE_CASES = {
    "constant -1": (lambda m: m.constant(-1.0), (0, 7)),
    "make_schedule 0": (lambda m: m.make_schedule(0.0), (0, 7)),
    "exponential_decay decay_rate=-1": (lambda m: m.exponential_decay(1.0, 2, -1.0), (0, 2, 4)),
    "exponential_decay step_size=-1": (lambda m: m.exponential_decay(-1.0, 2, 0.5), (0, 3)),
    "inverse_time_decay decay_rate=-2": (lambda m: m.inverse_time_decay(1.0, 10, -2.0), (0, 2, 8)),
    "polynomial_decay final_step_size=-0.5": (lambda m: m.polynomial_decay(1.0, 10, -0.5), (0, 5, 20)),
    "polynomial_decay decay_steps=0": (lambda m: m.polynomial_decay(1.0, 0, 0.1), (jnp.int32(5),)),
    "piecewise_constant boundaries=[5, 2]": (lambda m: m.piecewise_constant([5, 2], [1.0, 0.5, 0.1]),
                                             (0, 3, 6)),
}


@pytest.mark.parametrize("case", list(SCHEDULE_CASES))
def test_schedule_takes_what_the_reference_takes(case):
    make, steps = SCHEDULE_CASES[case]
    ours, ref = make(O), make(R)
    np.testing.assert_array_equal([np.asarray(ours(i)) for i in steps], [np.asarray(ref(i)) for i in steps])


def test_exponential_decay_with_zero_decay_steps_builds_and_fails_as_the_reference():
    with pytest.raises(ZeroDivisionError):
        R.exponential_decay(1.0, 0, 0.5)(2)
    with pytest.raises(ZeroDivisionError):
        O.exponential_decay(1.0, 0, 0.5)(2)


@pytest.mark.parametrize(("tree", "max_norm", "expected"), [
    ({"a": jnp.array([3.0, 4.0])}, 0.0, [0.0, 0.0]),  # zeros, as the reference
    ({"a": jnp.zeros(2)}, 0.0, [np.nan, np.nan]),  # 0 * (0 / 0)
    ({"a": jnp.array([3.0, 4.0])}, -1.0, [-0.6, -0.8]),  # the norm's sign flipped, as the reference
    ({"a": jnp.array([3.0, 4.0])}, float("nan"), [np.nan, np.nan]),
])
def test_clip_grads_takes_what_the_reference_takes(tree, max_norm, expected):
    ours, ref = O.clip_grads(tree, max_norm)["a"], R.clip_grads(tree, max_norm)["a"]
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))
    np.testing.assert_allclose(np.asarray(ours), expected, rtol=1e-6)


# --------------------------------------------------------------------------------------------------
# The config layer's ranges


@pytest.mark.parametrize(("builder", "hp", "message"), [
    (O.adam, {"step_size": 0.1, "b1": 1.5, "b2": -1.0}, "b1 must be in [0, 1), got 1.5"),
    (O.adam, {"step_size": 0.1, "b2": 1.0}, "b2 must be in [0, 1), got 1.0"),
    (O.adamax, {"step_size": 0.1, "eps": -1e-8}, "eps must be >= 0, got -1e-08"),
    (O.rmsprop, {"step_size": 0.1, "gamma": float("nan")}, "gamma must be in [0, 1), got nan"),
    (O.rmsprop_momentum, {"step_size": 0.1, "gamma": 1.0}, "gamma must be in [0, 1), got 1.0"),
    (O.sgd, {"step_size": 0.0}, "step_size must be positive, got 0.0"),
    (O.OPTIMIZERS["sm3"], {"step_size": -1}, "step_size must be positive, got -1"),
    (O.SCHEDULES["exponential_decay"], {"step_size": 0.1, "decay_steps": 0, "decay_rate": 0.5},
     "decay_steps must be positive, got 0"),
    (O.SCHEDULES["exponential_decay"], {"step_size": 0.1, "decay_steps": 10, "decay_rate": -1.0},
     "decay_rate must be positive, got -1.0"),
    (O.SCHEDULES["inverse_time_decay"], {"step_size": 0.1, "decay_steps": 10, "decay_rate": -2.0},
     "decay_rate must be >= 0, got -2.0"),
    (O.SCHEDULES["polynomial_decay"], {"step_size": 0.1, "decay_steps": 10, "final_step_size": -0.5},
     "final_step_size must be >= 0, got -0.5"),
])
def test_check_ranges_refuses_what_would_spoil_a_sweep(builder, hp, message):
    with pytest.raises(ValueError) as e:
        check_ranges(builder, hp)
    assert str(e.value) == message


def test_check_ranges_passes_good_values_traced_ones_and_other_builders():
    check_ranges(O.adam, {"step_size": 0.1, "b1": 0.0, "b2": 0.999, "eps": 0.0})
    check_ranges(O.adam, {"step_size": O.constant(0.1), "b1": jnp.asarray(2.0)})  # not plain numbers
    check_ranges(O.adamw, {"b1": 2.0})  # an extra checks its own
    check_ranges(lambda step_size, b1: None, {"b1": 2.0})  # a user's builder
    assert all(k.startswith("optimizers.core.") for k in RANGES)
    registered = {f"{b.__module__}.{b.__qualname__}" for b in (*O.OPTIMIZERS.values(), *O.SCHEDULES.values())}
    assert set(RANGES) <= registered  # every key names a registered drop-in builder
