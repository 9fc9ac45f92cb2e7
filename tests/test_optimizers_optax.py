"""Agreement of optimizers (and the extras) with Optax 0.2.8, and the AlgoPerf NAdamW formula.

Tolerances (float32, 100 steps in one jitted ``lax.scan``, gradients that depend on the
parameters): the same update rule computed with different but equivalent arithmetic (e.g.
``rsqrt`` vs ``1/sqrt``, bias correction folded differently) drifts by a few ulps per step, so
parameters must agree to ``rtol=RTOL, atol=ATOL``; schedules to ``rtol=1e-6``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optimizers as O

optax = pytest.importorskip("optax")

RTOL, ATOL = 2e-5, 2e-6
STEPS = 100


def make_tree():
    rng = np.random.default_rng(7)
    return {
        "k": jnp.asarray(rng.standard_normal((2, 3, 2, 2)), jnp.float32),
        "b": [jnp.asarray(rng.standard_normal(5), jnp.float32), jnp.float32(0.4)],
    }


def grad_fn(params, t):
    return jax.tree.map(lambda x: jnp.cos(3.0 * x) + 0.1 * x + 0.05 * jnp.sin(t * 1.0), params)


def run_ours(opt, params):
    def body(s, t):
        return opt.update_fn(t, grad_fn(opt.params_fn(s), t), s), None

    s, _ = jax.lax.scan(body, opt.init_fn(params), jnp.arange(STEPS))
    return opt.params_fn(s)


def run_optax(tx, params):
    def body(carry, t):
        p, s = carry
        u, s = tx.update(grad_fn(p, t), s, p)
        return (optax.apply_updates(p, u), s), None

    (p, _), _ = jax.lax.scan(body, (params, tx.init(params)), jnp.arange(STEPS))
    return p


LR = 3e-3
PAIRS = {
    "sgd": (lambda: O.sgd(LR), lambda: optax.sgd(LR)),
    "momentum": (lambda: O.momentum(LR, 0.9), lambda: optax.sgd(LR, momentum=0.9)),
    "nesterov": (lambda: O.nesterov(LR, 0.9), lambda: optax.sgd(LR, momentum=0.9, nesterov=True)),
    "adam": (lambda: O.adam(LR, 0.9, 0.99, 1e-8), lambda: optax.adam(LR, b1=0.9, b2=0.99, eps=1e-8)),
    "rmsprop": (lambda: O.rmsprop(LR, 0.9, 1e-8), lambda: optax.rmsprop(LR, decay=0.9, eps=1e-8)),
    "adamax": (lambda: O.adamax(LR, 0.9, 0.99, 1e-8), lambda: optax.adamax(LR, b1=0.9, b2=0.99, eps=1e-8)),
    "adagrad": (
        lambda: O.adagrad(LR, momentum=0.0),
        lambda: optax.adagrad(LR, initial_accumulator_value=0.0, eps=0.0),
    ),
    "adamw": (
        lambda: O.adamw(LR, 0.9, 0.99, 1e-8, weight_decay=0.1),
        lambda: optax.adamw(LR, b1=0.9, b2=0.99, eps=1e-8, weight_decay=0.1),
    ),
    "lion": (
        lambda: O.lion(LR, 0.9, 0.99, weight_decay=0.1),
        lambda: optax.lion(LR, b1=0.9, b2=0.99, weight_decay=0.1),
    ),
    "from_optax(adam) vs adam": (lambda: O.adam(LR), lambda: None),
}


def test_agreement_with_optax():
    params = make_tree()
    ours = jax.jit(lambda p: {k: run_ours(mk(), p) for k, (mk, _) in PAIRS.items()})(params)

    def theirs_all(p):
        out = {k: run_optax(mk(), p) for k, (_, mk) in PAIRS.items() if k != "from_optax(adam) vs adam"}
        out["from_optax(adam) vs adam"] = run_ours(O.from_optax(optax.adam(LR)), p)
        return out

    theirs = jax.jit(theirs_all)(params)
    for name in PAIRS:
        moved = max(
            float(jnp.max(jnp.abs(a - b)))
            for a, b in zip(*map(jax.tree.leaves, (ours[name], params)), strict=True)
        )
        assert moved > 1e-3, name
        for a, b in zip(jax.tree.leaves(ours[name]), jax.tree.leaves(theirs[name]), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL, err_msg=name)


def test_registry_optax_entries_match_harness_counterparts():
    params = make_tree()
    pairs = [("adam", "optax_adam", {}), ("sgd", "optax_sgd", {}), ("momentum", "optax_momentum", {})]
    pairs.append(("nesterov", "optax_momentum", {"nesterov": True}))

    def run(p):
        out = []
        for ours, theirs, kw in pairs:
            sched = O.exponential_decay(LR, 30, 0.5)
            out.append(
                (run_ours(O.OPTIMIZERS[ours](sched), p), run_ours(O.OPTIMIZERS[theirs](sched, **kw), p))
            )
        return out

    for (name, _, _), (a, b) in zip(pairs, jax.jit(run)(params), strict=True):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=RTOL, atol=ATOL, err_msg=name)


def test_schedules_match_optax():
    lr = 0.1
    steps = jnp.arange(0, 130)
    cases = [
        (O.linear_warmup(lr, 20, init_scale=0.1), optax.linear_schedule(0.1 * lr, lr, 20)),
        (O.cosine_decay(lr, 100, alpha=0.2), optax.cosine_decay_schedule(lr, 100, alpha=0.2)),
        (
            O.warmup_cosine_decay(lr, 10, 100, init_scale=0.0, alpha=0.1),
            optax.warmup_cosine_decay_schedule(0.0, lr, 10, 100, end_value=0.1 * lr),
        ),
        (
            O.join_schedules([O.constant(lr), O.exponential_decay(lr, 10, 0.5)], [50]),
            optax.join_schedules([optax.constant_schedule(lr), optax.exponential_decay(lr, 10, 0.5)], [50]),
        ),
        (O.exponential_decay(lr, 10, 0.5), optax.exponential_decay(lr, 10, 0.5)),
    ]
    for k, (ours, theirs) in enumerate(cases):
        a = np.asarray(jax.vmap(ours)(steps))
        b = np.asarray(jax.vmap(theirs)(steps))
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9, err_msg=str(k))
    # Hand-computed points.
    cos = O.cosine_decay(lr, 100, alpha=0.2)
    assert float(cos(0)) == pytest.approx(lr)
    assert float(cos(50)) == pytest.approx(lr * (0.8 * 0.5 + 0.2))
    assert float(cos(100)) == float(cos(1000)) == pytest.approx(0.2 * lr)
    warm = O.linear_warmup(lr, 20)
    assert [float(warm(i)) for i in (0, 10, 20, 30)] == pytest.approx([0.0, lr / 2, lr, lr])
    wcd = O.warmup_cosine_decay(lr, 10, 110)
    assert float(wcd(10)) == pytest.approx(lr) and float(wcd(60)) == pytest.approx(lr / 2)


def test_nadamw_matches_algoperf_formula_float64():
    """NAdamW against a numpy float64 transcription of AlgoPerf's scale_by_nadam + decoupled decay."""
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal(6)
    gs = rng.standard_normal((50, 6))
    lr, b1, b2, eps, wd = 1e-2, 0.9, 0.98, 1e-8, 0.05
    x, m, v = x0.copy(), np.zeros(6), np.zeros(6)
    for t, g in enumerate(gs, start=1):
        m = (1 - b1) * g + b1 * m
        v = (1 - b2) * g**2 + b2 * v
        mu_hat = ((1 - b1) * g + b1 * m) / (1 - b1**t)
        nu_hat = v / (1 - b2**t)
        x = x - lr * (mu_hat / (np.sqrt(nu_hat) + eps) + wd * x)
    with jax.enable_x64(True):
        opt = O.nadamw(lr, b1, b2, eps, weight_decay=wd)
        s = opt.init_fn(jnp.asarray(x0))
        upd = jax.jit(opt.update_fn)
        for i, g in enumerate(gs):
            s = upd(i, jnp.asarray(g), s)
        out = np.asarray(opt.params_fn(s))
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, x, rtol=1e-12)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_adamw_on_low_precision_leaves_takes_the_bias_correction_powers_in_float32_as_optax(dtype):
    """In bfloat16, 0.999 rounds to 1.0: with the powers in the leaf's dtype ``1 - b2**t`` was 0,
    ``v^`` inf and every step 0 (the parameters never moved; Optax moved them by 0.234 in 20
    steps); in float16 the result drifted 1.7e-3 from Optax (the numerics attack, F1). Now the
    powers are taken in float32 as ``optax.tree.bias_correction`` does: bit for bit Optax's, 20
    eager steps. ``adam`` keeps the reference's rule (its bfloat16 steps stay 0, as the
    reference's)."""
    p0 = {"w": jnp.linspace(-1, 1, 8, dtype=dtype), "b": jnp.asarray([0.25, -0.5], dtype)}
    g = jax.tree.map(lambda x: jnp.full_like(x, 0.5), p0)
    ours, tx = O.adamw(1e-2, weight_decay=0.0), optax.adamw(1e-2, weight_decay=0.0)
    s, os_, ps = ours.init_fn(p0), tx.init(p0), p0
    for i in range(20):
        s = ours.update_fn(i, g, s)
        u, os_ = tx.update(g, os_, ps)
        ps = optax.apply_updates(ps, u)
    got = ours.params_fn(s)
    for k in p0:
        assert got[k].dtype == dtype
        np.testing.assert_array_equal(np.asarray(got[k], np.float32), np.asarray(ps[k], np.float32))
    assert float(jnp.abs(got["w"].astype(jnp.float32) - p0["w"].astype(jnp.float32)).max()) > 0.2
    n = O.nadamw(1e-2, weight_decay=0.0)
    sn = n.init_fn(p0)
    for i in range(20):
        sn = n.update_fn(i, g, sn)
    assert float(jnp.abs(n.params_fn(sn)["w"].astype(jnp.float32) - p0["w"].astype(jnp.float32)).max()) > 0.2
