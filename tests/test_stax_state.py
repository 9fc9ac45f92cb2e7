"""Running-statistics BatchNorm and the explicit-state layer form (models.stax.stateful)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.example_libraries import stax as R

from models import stax as S

KEY = jax.random.PRNGKey(0)


def _x(shape, seed=0, loc=0.0, scale=1.0):
    return jnp.asarray(np.random.default_rng(seed).normal(loc, scale, shape), jnp.float32)


def _net(m=S, momentum=None):
    bn = (lambda **kw: m.BatchNorm(**kw)) if momentum is None else (
        lambda **kw: m.BatchNorm(momentum=momentum, **kw))
    return m.serial(m.Conv(4, (3, 3), padding="SAME"), bn(), m.Relu, m.Flatten, m.Dense(6),
                    bn(axis=(0,)), m.Relu, m.Dense(3))


def test_stateful_params_equal_plain_and_reference_params():
    init, _ = S.stateful(_net())
    shape, params, state = init(KEY, (-1, 5, 5, 2))
    rshape, rparams = _net(R)[0](KEY, (-1, 5, 5, 2))
    assert tuple(shape) == tuple(rshape)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(rparams), strict=True):
        np.testing.assert_array_equal(a, b)
    # State: one (mean, var) pair per BatchNorm, () for every other layer.
    assert state[0] == () and state[2] == () and state[4] == ()
    mean, var = state[1]
    np.testing.assert_array_equal(mean, np.zeros(4)) and np.testing.assert_array_equal(var, np.ones(4))
    assert state[5][0].shape == (6,)


def test_stateless_models_have_empty_state():
    init, apply = S.stateful(S.serial(S.Dense(3), S.Relu, S.Dropout(0.5)))
    _, params, state = init(KEY, (-1, 4))
    assert state == ()
    out, new_state = apply(params, state, _x((2, 4)), train=False)
    assert new_state == () and out.shape == (2, 3)
    assert not S.has_state(S.serial(S.Dense(3), S.Dropout(0.5)))
    assert S.has_state(S.serial(S.Dense(3), S.serial(S.BatchNorm(axis=(0,)))))


def test_train_mode_matches_reference_and_updates_running_stats_by_hand():
    layer = S.BatchNorm(axis=(0,), momentum=0.9)
    init, apply = S.stateful(layer)
    _, params, state = init(KEY, (-1, 3))
    x = _x((16, 3), loc=2.0, scale=3.0)
    out, (mean, var) = jax.jit(lambda p, s, v: apply(p, s, v, train=True))(params, state, x)
    ref = R.BatchNorm(axis=(0,))[1](params, x)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5)
    xn = np.asarray(x, np.float64)
    np.testing.assert_allclose(mean, 0.1 * xn.mean(0), rtol=1e-5)
    np.testing.assert_allclose(var, 0.9 + 0.1 * xn.var(0), rtol=1e-5)


def test_one_example_eval_equals_example_inside_large_batch():
    init, apply = S.stateful(_net(momentum=0.0))
    _, params, state = init(KEY, (-1, 5, 5, 2))
    big = _x((64, 5, 5, 2), seed=1, loc=1.0, scale=2.0)
    fwd = jax.jit(apply, static_argnames="train")
    train_out, state = fwd(params, state, big, train=True)  # momentum 0: stats = this batch's
    batch_eval, same_state = fwd(params, state, big, train=False)
    np.testing.assert_allclose(batch_eval, train_out, rtol=0, atol=2e-5)
    for a, b in zip(jax.tree.leaves(same_state), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(a, b)
    for i in (0, 17, 63):
        one, _ = fwd(params, state, big[i:i + 1], train=False)
        np.testing.assert_allclose(one[0], train_out[i], rtol=0, atol=2e-5)
    # The reference normalises a single example by itself: every output is the last layer's bias.
    ref = _net(R)[1](params, big[:1])
    np.testing.assert_allclose(ref[0], params[-1][1] + jnp.dot(
        jnp.maximum(params[5][0], 0), params[-1][0]), atol=1e-5)


def test_running_stats_converge_over_steps():
    init, apply = S.stateful(S.BatchNorm(axis=(0, 1, 2), momentum=0.5))
    _, params, state = init(KEY, (-1, 4, 4, 2))
    step = jax.jit(lambda s, v: apply(params, s, v, train=True)[1])
    for i in range(20):
        state = step(state, _x((8, 4, 4, 2), seed=i, loc=3.0, scale=2.0))
    np.testing.assert_allclose(state[0], [3.0, 3.0], atol=0.3)
    np.testing.assert_allclose(state[1], [4.0, 4.0], rtol=0.25)


def test_vmap_over_seeds_matches_loop():
    init, apply = S.stateful(S.serial(S.Dense(5), S.BatchNorm(axis=(0,), momentum=0.8), S.Relu,
                                      S.Dropout(0.7), S.Dense(2)))
    keys = jax.random.split(KEY, 3)
    x = _x((10, 4))

    def one(key):
        _, params, state = init(key, (-1, 4))
        out, new_state = apply(params, state, x, train=True, rng=key)
        ev, _ = apply(params, new_state, x[:2], train=False)
        return out, new_state, ev

    batched = jax.jit(jax.vmap(one))(keys)
    for i, key in enumerate(keys):
        single = one(key)
        for a, b in zip(jax.tree.leaves(batched), jax.tree.leaves(single), strict=True):
            np.testing.assert_allclose(a[i], b, rtol=1e-5, atol=1e-6)


def test_stateful_dropout_identity_in_eval_and_reference_in_train():
    layer = S.serial(S.Dense(8), S.Dropout(0.6))
    init, apply = S.stateful(layer)
    _, params, state = init(KEY, (-1, 4))
    x = _x((20, 4))
    ev, _ = apply(params, state, x, train=False)
    np.testing.assert_allclose(ev, S.Dense(8)[1](params[0], x), rtol=1e-6)
    tr, _ = apply(params, state, x, train=True, rng=jax.random.PRNGKey(5))
    ref = R.serial(R.Dense(8), R.Dropout(0.6))[1](params, x, rng=jax.random.PRNGKey(5))
    np.testing.assert_array_equal(tr, ref)
    with pytest.raises(ValueError, match="requires apply_fun to be called with a PRNG key"):
        apply(params, state, x, train=True)


def test_parallel_and_shape_dependent_thread_state():
    block = S.serial(S.FanOut(2), S.parallel(S.serial(S.Dense(3), S.BatchNorm(axis=(0,), momentum=0.0)),
                                             S.Dense(3)), S.FanInSum)
    init, apply = S.stateful(S.serial(block, S.shape_dependent(lambda s: S.BatchNorm(axis=(0,)))))
    _, params, state = init(KEY, (-1, 4))
    x = _x((9, 4), loc=1.0)
    _, new_state = apply(params, state, x, train=True)
    inner_mean = new_state[0][1][0][1][0]
    h = S.Dense(3)[1](params[0][1][0][0], x)
    np.testing.assert_allclose(inner_mean, h.mean(0), rtol=1e-5, atol=1e-6)
    assert jax.tree.structure(new_state) == jax.tree.structure(state)


def test_running_stats_need_known_feature_sizes():
    init, _ = S.stateful(S.BatchNorm(axis=(1,)))
    with pytest.raises(S.ShapeError, match=r"running statistics need known sizes off the normalised "
                                           r"axes, got input shape \(-1, 3\)"):
        init(KEY, (-1, 3))


# --------------------------------------------------------------------------------------------------
# against flax.linen.BatchNorm (the ResNet benchmarks' reference): values, gradients, statistics, cost


def _flax_bn_pair(x, momentum):
    """``(stax apply, flax apply, stax params, flax variables)`` for BatchNorm over N, H, W of ``x``
    with random scale and bias, the same in both."""
    import flax.linen as nn

    rng = np.random.default_rng(7)
    c = x.shape[-1]
    gamma, beta = (jnp.asarray(rng.normal(1.0, 0.5, c), jnp.float32) for _ in range(2))
    mean = jnp.asarray(rng.normal(0, 1, c), jnp.float32)
    var = jnp.asarray(rng.uniform(0.5, 2, c), jnp.float32)
    _, apply = S.stateful(S.BatchNorm(momentum=momentum))
    bn = nn.BatchNorm(momentum=momentum, epsilon=1e-5)
    variables = {"params": {"scale": gamma, "bias": beta}, "batch_stats": {"mean": mean, "var": var}}
    return apply, bn, ((beta, gamma), (mean, var)), variables


def _grads_stax(apply, pair, x, w, train):
    def loss(p, v):
        y, st = apply(p, pair[1], v, train=train)
        return jnp.sum(y * w), (y, st)

    (g_p, g_x), (y, st) = jax.grad(loss, argnums=(0, 1), has_aux=True)(pair[0], x)
    return y, st, (g_p[1], g_p[0], g_x)  # gamma, beta, x


def _grads_flax(bn, variables, x, w, train):
    def loss(p, v):
        y, upd = bn.apply({"params": p, "batch_stats": variables["batch_stats"]}, v,
                          use_running_average=not train, mutable=["batch_stats"])
        return jnp.sum(y * w), (y, upd["batch_stats"])

    (g_p, g_x), (y, st) = jax.grad(loss, argnums=(0, 1), has_aux=True)(variables["params"], x)
    return y, (st["mean"], st["var"]), (g_p["scale"], g_p["bias"], g_x)


@pytest.mark.parametrize("train", [True, False])
def test_batchnorm_matches_flax_values_gradients_and_running_stats(train):
    x = _x((8, 5, 5, 3), seed=3, loc=1.5, scale=2.0)
    w = _x((8, 5, 5, 3), seed=4)
    apply, bn, pair, variables = _flax_bn_pair(x, 0.9)
    ours = jax.jit(lambda v: _grads_stax(apply, pair, v, w, train))(x)
    ref = jax.jit(lambda v: _grads_flax(bn, variables, v, w, train))(x)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-5)
    if not train:  # running statistics unchanged in eval mode
        np.testing.assert_array_equal(ours[1][0], pair[1][0])


def test_batchnorm_training_step_accesses_no_more_bytes_than_flax():
    # gamma folded into rsqrt(var + eps): the backward pass keeps x - mean only, as flax's; gamma
    # applied to the standardised x kept it too (4.72 MB accessed here against flax's 3.67 MB)
    x = _x((32, 16, 16, 8), seed=5)
    w = _x((32, 16, 16, 8), seed=6)
    apply, bn, pair, variables = _flax_bn_pair(x, 0.9)

    def bytes_of(fn):
        return jax.jit(fn).lower(x).compile().cost_analysis()["bytes accessed"]

    ours = bytes_of(lambda v: _grads_stax(apply, pair, v, w, True))
    ref = bytes_of(lambda v: _grads_flax(bn, variables, v, w, True))
    assert ours <= ref, (ours, ref)


def test_running_stats_refuse_a_negative_axis_and_a_rank_too_small():
    # the reference's params keep a negative axis's dim while the statistics drop it: params (5, 6),
    # state (5,), and the stateful apply failed on broadcasting; a 0-d input divided by zero
    init, _ = S.stateful(S.BatchNorm(axis=(0, -1)))
    with pytest.raises(S.ShapeError, match=r"with running statistics, give the axes as non-negative"):
        init(KEY, (4, 5, 6))
    init, _ = S.stateful(S.BatchNorm())
    with pytest.raises(S.ShapeError, match=r"axis out of range for input shape \(\)"):
        init(KEY, ())
    out_shape, params = S.BatchNorm(axis=(0, -1))[0](KEY, (4, 5, 6))  # stateless: as the reference
    assert out_shape == (4, 5, 6) and params[0].shape == (5, 6)


@pytest.mark.parametrize("momentum", [None, "0.9", 1.0, 1.5, -0.5, float("nan"), True])
def test_batchnorm_refuses_a_momentum_outside_0_1_when_built(momentum):
    # it built, then failed inside apply (None, a string) or drove the running statistics wrong
    with pytest.raises(ValueError, match=r"BatchNorm: momentum must be a number in \[0, 1\), got"):
        S.BatchNorm(axis=(0,), momentum=momentum)
    S.BatchNorm(axis=(0,), momentum=np.float32(0.5))  # a numpy number is a number


def test_batchnorm_statistics_of_bfloat16_inputs_are_taken_in_float32():
    # E[x²] - E[x]² cancels in bfloat16: at mean 4 and std 0.1 the batch variance read 0 and the
    # output's std ~33 instead of 1
    x = 4.0 + 0.1 * jax.random.normal(KEY, (128, 4))
    init, apply = S.stateful(S.BatchNorm(axis=(0,), momentum=0.5))
    _, params, state = init(KEY, x.shape)
    y32, s32 = apply(params, state, x, train=True)
    y16, s16 = apply(jax.tree.map(lambda p: p.astype(jnp.bfloat16), params), state,
                     x.astype(jnp.bfloat16), train=True)
    assert y16.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(y16, np.float32).std(0), np.asarray(y32).std(0), rtol=0.02)
    np.testing.assert_allclose(s16[1], s32[1], rtol=0.02)  # the running variance
