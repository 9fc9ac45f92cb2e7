"""warmup_stable_decay: hand-computed values, Optax's twin (linear), modded-nanogpt's get_lr, checks."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from optimizers import SCHEDULES, warmup_stable_decay


def test_hand_computed_linear_and_one_minus_sqrt():
    # T=10, W=2, D=0.4*10=4, S=6: warm-up 0.5, 0.75 (init_scale 0.5); stable 2..5; cool-down 6..10
    s = warmup_stable_decay(2.0, warmup_steps=2, total_steps=10, decay_fraction=0.4, init_scale=0.5)
    got = [float(s(i)) for i in range(12)]
    want = [1.0, 1.5, 2.0, 2.0, 2.0, 2.0, 2.0, 1.5, 1.0, 0.5, 0.0, 0.0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    r = warmup_stable_decay(1.0, total_steps=10, decay_fraction=0.4, decay_shape="1-sqrt", final_scale=0.2)
    got = [float(r(i)) for i in (5, 6, 7, 8, 10, 11)]
    want = [1.0, 1.0, 0.2 + 0.8 * (1 - math.sqrt(0.25)), 0.2 + 0.8 * (1 - math.sqrt(0.5)), 0.2, 0.2]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_equals_optax_joined_linear_schedules():
    T, W, D, lr = 100, 10, 30, 3e-3
    twin = optax.join_schedules([optax.linear_schedule(0.0, lr, W), optax.constant_schedule(lr),
                                 optax.linear_schedule(lr, 0.1 * lr, D)], [W, T - D])
    ours = warmup_stable_decay(lr, warmup_steps=W, total_steps=T, decay_fraction=D / T, final_scale=0.1)
    steps = jnp.arange(T + 5)
    np.testing.assert_allclose(jax.vmap(ours)(steps), jax.vmap(twin)(steps), rtol=2e-6, atol=1e-9)


def test_equals_modded_nanogpt_get_lr():
    """Their rule: x = step / T; 1 while x < 1 - cooldown_frac, else w * 1 + (1 - w) * 0.1 with
    w = (1 - x) / cooldown_frac (records/track_3_optimization/train_gpt_simple.py)."""
    T, cf = 50, 0.45

    def get_lr(step):
        x = step / T
        if x < 1 - cf:
            return 1.0
        w = (1 - x) / cf
        return w * 1.0 + (1 - w) * 0.1

    ours = warmup_stable_decay(1.0, total_steps=T, decay_fraction=cf, final_scale=0.1)
    np.testing.assert_allclose([float(ours(i)) for i in range(T + 1)], [get_lr(i) for i in range(T + 1)],
                               rtol=1e-6)


def test_traced_step_size_scales_the_schedule():
    s = jax.jit(lambda lr, i: warmup_stable_decay(lr, warmup_steps=4, total_steps=20)(i))
    assert float(s(2.0, 2)) == pytest.approx(1.0)
    assert SCHEDULES["warmup_stable_decay"] is warmup_stable_decay


@pytest.mark.parametrize("kw, msg", [
    ({"total_steps": None}, "warmup_stable_decay: total_steps is required (the harness fills it with "
                            "the trial's step budget)"),
    ({"decay_fraction": 0.0}, "warmup_stable_decay: decay_fraction must be in (0, 1], got 0.0"),
    ({"decay_shape": "cosine"},
     "warmup_stable_decay: decay_shape must be one of linear, 1-sqrt, got 'cosine'"),
    ({"final_scale": 1.5}, "warmup_stable_decay: final_scale must be in [0, 1], got 1.5"),
    ({"warmup_steps": 90}, "warmup_stable_decay: warmup_steps (90) must end before the cool-down starts at "
                           "step 80 (total_steps 100 x (1 - decay_fraction 0.2))"),
])
def test_bad_values_refused(kw, msg):
    with pytest.raises(ValueError) as e:
        warmup_stable_decay(1.0, **{"total_steps": 100, **kw})
    assert str(e.value) == msg
