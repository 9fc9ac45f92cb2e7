"""Exactness of the modern optimizers (``optimizers.modern``, ``optimizers.modern_free``) against
their Optax twins.

Each optimizer and its twin train the same model from the same parameters for 100 steps at
matched hyperparameters, driven by one gradient sequence (``jax.grad`` of a fixed loss on fixed
data at our iterate, given to both, in one jitted ``lax.scan``; so a rounding difference is not
fed back through the gradients, where Newton-Schulz and the trust ratios amplify it): the
parameters (and the twin's extra outputs, such as Schedule-Free's evaluation parameters) must
agree to float32 rounding, ``rtol=1e-5, atol=1e-6`` (``assert_allclose``; measured: at most
1e-6, most cases 0 or a few ulps; run with ``-s`` to print each). Two models: a small MLP
(0-d, 1-d and 2-d leaves) and a tiny causal Transformer block (an embedding table, a 3-d
attention kernel, layer-norm scales, an unembedding).
Also: a traced (vmapped) step size gives the separate runs, a schedule matches Optax's, Muon's
leaf rule and its override, and the hyperparameter checks.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.contrib
import pytest

import optimizers as O

STEPS = 100
RTOL, ATOL = 1e-5, 1e-6


# ---------------------------------------------------------------------------------------------
# Models.


def _normal(rng, *shape, scale=1.0):
    return jnp.asarray(scale * rng.standard_normal(shape), jnp.float32)


def mlp():
    rng = np.random.default_rng(0)
    params = {"l1": {"w": _normal(rng, 8, 16, scale=0.4), "b": _normal(rng, 16, scale=0.1)},
              "l2": {"w": _normal(rng, 16, 4, scale=0.3), "b": jnp.zeros(4, jnp.float32)},
              "temp": jnp.float32(1.0)}
    x, y = _normal(rng, 32, 8), jnp.asarray(rng.integers(0, 4, 32), jnp.int32)

    def loss(p):
        h = jnp.tanh(x @ p["l1"]["w"] + p["l1"]["b"])
        logits = p["temp"] * (h @ p["l2"]["w"] + p["l2"]["b"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    return params, loss


def transformer():
    """One pre-norm causal attention + MLP block on 6 tokens of a 12-symbol vocabulary."""
    rng = np.random.default_rng(1)
    v, d = 12, 8
    params = {"embed": _normal(rng, v, d, scale=0.5), "qkv": _normal(rng, d, 3, d, scale=0.3),
              "out": _normal(rng, d, d, scale=0.3), "ln1": jnp.ones(d, jnp.float32),
              "ln2": jnp.ones(d, jnp.float32), "mlp_in": _normal(rng, d, 16, scale=0.3),
              "mlp_b": jnp.zeros(16, jnp.float32), "mlp_out": _normal(rng, 16, d, scale=0.2),
              "unembed": _normal(rng, d, v, scale=0.3)}
    tokens = jnp.asarray(rng.integers(0, v, (4, 7)), jnp.int32)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    mask = jnp.tril(jnp.ones((6, 6), bool))

    def norm(h, scale):
        h = h - h.mean(-1, keepdims=True)
        return scale * h * jax.lax.rsqrt((h * h).mean(-1, keepdims=True) + 1e-5)

    def loss(p):
        h = p["embed"][inputs]
        q, k, val = jnp.moveaxis(jnp.einsum("btd,dke->btke", norm(h, p["ln1"]), p["qkv"]), 2, 0)
        att = jnp.where(mask, q @ jnp.swapaxes(k, 1, 2) / np.sqrt(d), -1e9)
        h = h + jax.nn.softmax(att, -1) @ val @ p["out"]
        h = h + jax.nn.gelu(norm(h, p["ln2"]) @ p["mlp_in"] + p["mlp_b"]) @ p["mlp_out"]
        return optax.softmax_cross_entropy_with_integer_labels(h @ p["unembed"], targets).mean()

    return params, loss


MODELS = {"mlp": mlp, "transformer": transformer}


# ---------------------------------------------------------------------------------------------
# Runners.


def run_ours(opt, params, loss, steps=STEPS):
    """The final state of ``steps`` updates of the triple, in one jitted scan."""
    grad = jax.grad(loss)

    @jax.jit
    def go(params):
        def body(s, i):
            return opt.update_fn(i, grad(opt.params_fn(s)), s), None

        return jax.lax.scan(body, opt.init_fn(params), jnp.arange(steps))[0]

    return go(params)


def run_optax(tx, params, loss, steps=STEPS):
    """``(params, state)`` after ``steps`` updates of an Optax transformation, in one jitted scan."""
    grad = jax.grad(loss)

    @jax.jit
    def go(params):
        def body(carry, _):
            p, s = carry
            u, s = tx.update(grad(p), s, p)
            return (optax.apply_updates(p, u), s), None

        return jax.lax.scan(body, (params, tx.init(params)), None, length=steps)[0]

    return go(params)


def run_pair(opt, tx, params, loss, steps=STEPS):
    """The triple and the Optax transformation driven by one gradient sequence, in one jitted
    scan: step ``i``'s gradient is ``jax.grad(loss)`` at the triple's parameters, given to both.
    Returns ``(our state, (optax params, optax state))``."""
    grad = jax.grad(loss)

    @jax.jit
    def go(params):
        def body(carry, i):
            s, (p, ts) = carry
            g = grad(opt.params_fn(s))
            u, ts = tx.update(g, ts, p)
            return (opt.update_fn(i, g, s), (optax.apply_updates(p, u), ts)), None

        init = (opt.init_fn(params), (params, tx.init(params)))
        return jax.lax.scan(body, init, jnp.arange(steps))[0]

    return go(params)


def max_abs_diff(a, b) -> float:
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return max(float(jnp.max(jnp.abs(x - y))) for x, y in pairs)


def assert_close(ours, theirs, what=""):
    jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL,
                                                         err_msg=what), ours, theirs)


def assert_moved(params, final):
    pairs = zip(jax.tree.leaves(params), jax.tree.leaves(final), strict=True)
    assert any(not np.allclose(a, b) for a, b in pairs)


# ---------------------------------------------------------------------------------------------
# Parity with Optax: (ours, twin) at matched hyperparameters.

LR = 0.01
CASES = {
    "muon": (lambda: O.muon(0.02), lambda: optax.contrib.muon(0.02)),
    "muon_no_nesterov_decay": (
        lambda: O.muon(0.02, beta=0.9, nesterov=False, weight_decay=0.05, adam_b2=0.99,
                       adam_weight_decay=0.01, adam_lr_ratio=0.5),
        lambda: optax.contrib.muon(0.02, beta=0.9, nesterov=False, weight_decay=0.05, adam_b2=0.99,
                                   adam_weight_decay=0.01, adam_learning_rate=0.01)),
    "schedule_free_sgd": (lambda: O.schedule_free_sgd(0.2, weight_decay=1e-3),
                          lambda: optax.contrib.schedule_free_sgd(0.2, weight_decay=1e-3)),
    "schedule_free_adamw": (lambda: O.schedule_free_adamw(LR, b1=0.95, weight_decay=1e-2),
                            lambda: optax.contrib.schedule_free_adamw(LR, b1=0.95, weight_decay=1e-2)),
    "adafactor": (lambda: O.adafactor(LR, min_dim_size_to_factor=4),
                  lambda: optax.adafactor(LR, min_dim_size_to_factor=4)),
    "adafactor_momentum_decay": (
        lambda: O.adafactor(LR, min_dim_size_to_factor=4, momentum=0.9, weight_decay_rate=1e-3,
                            decay_offset=-3),
        lambda: optax.adafactor(LR, min_dim_size_to_factor=4, momentum=0.9, weight_decay_rate=1e-3,
                                decay_offset=-3)),
    "adafactor_unfactored_unclipped": (
        lambda: O.adafactor(LR, clipping_threshold=None, multiply_by_parameter_scale=False),
        lambda: optax.adafactor(LR, clipping_threshold=None, multiply_by_parameter_scale=False)),
    "lamb": (lambda: O.lamb(LR, weight_decay=0.01), lambda: optax.lamb(LR, weight_decay=0.01)),
    "lars": (lambda: O.lars(0.5, weight_decay=1e-4), lambda: optax.lars(0.5, weight_decay=1e-4)),
    "lars_nesterov": (lambda: O.lars(0.5, trust_coefficient=0.01, eps=1e-6, momentum=0.8, nesterov=True),
                      lambda: optax.lars(0.5, trust_coefficient=0.01, eps=1e-6, momentum=0.8, nesterov=True)),
    "prodigy": (lambda: O.prodigy(1.0), lambda: optax.contrib.prodigy(1.0)),
    "prodigy_decay_safeguard": (
        lambda: O.prodigy(0.5, b1=0.85, beta3=0.99, weight_decay=0.01, safeguard_warmup=True,
                          estim_lr_coef=0.9),
        lambda: optax.contrib.prodigy(0.5, betas=(0.85, 0.999), beta3=0.99, weight_decay=0.01,
                                      safeguard_warmup=True, estim_lr_coef=0.9)),
}
#: Largest |ours - twin| over the parameters after 100 steps, filled by the parity test (the
#: numbers the module docstring's tolerance is checked against; printed with ``-s``).
MEASURED: dict[tuple[str, str], float] = {}


#: The Transformer block runs each optimizer's first case (its defaults), the MLP every case.
PAIRS = [(c, "mlp") for c in sorted(CASES)] + [(c, "transformer") for c in CASES if c in O.OPTIMIZERS]


@pytest.mark.parametrize("case, model", PAIRS)
def test_matches_optax_over_100_steps(case, model):
    params, loss = MODELS[model]()
    ours, theirs = CASES[case]
    opt = ours()
    state, (final, tstate) = run_pair(opt, theirs(), params, loss)
    mine = opt.params_fn(state)
    MEASURED[case, model] = max_abs_diff(mine, final)
    print(f"{case} on {model}: max |ours - optax| = {MEASURED[case, model]:.2e}")
    assert all(np.isfinite(x).all() for x in jax.tree.leaves((mine, final)))
    assert_moved(params, final)
    assert_close(mine, final, case)
    if case.startswith("schedule_free"):
        theirs_eval = optax.contrib.schedule_free_eval_params(tstate, final)
        assert_close(O.schedule_free_eval_params(state), theirs_eval)


# ---------------------------------------------------------------------------------------------
# Traced step sizes and schedules.


@pytest.mark.parametrize("name", ["muon", "schedule_free_adamw", "prodigy", "adafactor"])
def test_vmapped_step_size_is_two_separate_runs(name):
    params, loss = mlp()
    make = O.OPTIMIZERS[name]
    lrs = (0.01, 0.003) if name != "prodigy" else (1.0, 0.3)
    both = jax.vmap(lambda lr: make(lr).params_fn(run_ours(make(lr), params, loss, 30)))(jnp.asarray(lrs))
    for k, lr in enumerate(lrs):
        alone = make(lr).params_fn(run_ours(make(lr), params, loss, 30))
        assert_close(jax.tree.map(lambda x, k=k: x[k], both), alone, f"{name} lr={lr}")
    assert not np.allclose(both["l1"]["w"][0], both["l1"]["w"][1])


def test_schedules_match_optax():
    """A harness schedule as step size: lamb under warmup + cosine decay, Schedule-Free AdamW under
    a linear warmup (Optax's ``warmup_steps``), Muon under exponential decay."""
    params, loss = mlp()
    sched = O.warmup_cosine_decay(0.01, warmup_steps=10, total_steps=STEPS)
    cases = [
        (O.lamb(sched), optax.lamb(optax.warmup_cosine_decay_schedule(0.0, 0.01, 10, STEPS))),
        (O.schedule_free_adamw(O.linear_warmup(0.01, 20)),
         optax.contrib.schedule_free_adamw(0.01, warmup_steps=20)),
        (O.muon(O.exponential_decay(0.02, 50, 0.5)),
         optax.contrib.muon(optax.exponential_decay(0.02, 50, 0.5))),
        (O.adafactor(O.linear_warmup(0.01, 20)), optax.adafactor(optax.linear_schedule(0.0, 0.01, 20))),
    ]
    for opt, tx in cases:
        state, (final, _) = run_pair(opt, tx, params, loss)
        mine = opt.params_fn(state)
        print(f"schedule: max |ours - optax| = {max_abs_diff(mine, final):.2e}")
        assert_close(mine, final)


def test_prodigy_keeps_its_estimate_through_a_zero_step_size():
    """The one convention difference: a step size of 0 at step 0 (a warmup from 0) leaves
    ``sum |s| = 0``; the authors' code then keeps ``d``, Optax's ``d`` becomes 0/0 = NaN. After
    the first nonzero step both agree again up to the NaN, so ours trains and matches a run
    whose first step is skipped."""
    params, loss = mlp()
    sched = O.linear_warmup(1.0, 10)
    mine = O.prodigy(sched)
    twin = optax.contrib.prodigy(optax.linear_schedule(0.0, 1.0, 10))
    state, (final, _) = run_pair(mine, twin, params, loss, steps=20)
    assert np.isnan(np.asarray(final["l1"]["w"])).all()
    got = mine.params_fn(state)
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(got))
    assert float(loss(got)) < float(loss(params))


# ---------------------------------------------------------------------------------------------
# Muon's leaf rule.


def test_muon_leaf_rule_default_and_override():
    params, loss = transformer()
    rule = O.muon_matrices(params)
    assert rule["embed"] and rule["out"] and rule["unembed"] and not rule["qkv"] and not rule["ln1"]
    state = O.muon(0.02).init_fn(params)
    # Muon leaves keep (x, m), AdamW leaves (x, m, v).
    sizes = dict(zip(sorted(params), [len(f) for f in state.packed_state], strict=True))
    assert sizes == {k: 2 if rule[k] else 3 for k in params}
    # The embedding and the output layer to AdamW, as Optax's dimension numbers with None there.
    to_adam = ("embed", "unembed")
    mask = {k: bool(rule[k]) and k not in to_adam for k in params}
    dims = {k: optax.contrib.MuonDimensionNumbers() if mask[k] else None for k in params}
    opt = O.muon(0.02, muon_mask=lambda p: mask)
    tx = optax.contrib.muon(0.02, muon_weight_dimension_numbers=dims)
    state, (final, _) = run_pair(opt, tx, params, loss)
    mine = opt.params_fn(state)
    assert_close(mine, final)
    default = O.muon(0.02).params_fn(run_ours(O.muon(0.02), params, loss))
    assert not np.allclose(default["embed"], mine["embed"])
    with pytest.raises(ValueError, match="2-D"):
        O.muon(0.02, muon_mask={**mask, "ln1": True}).init_fn(params)


def test_newton_schulz_is_nearly_orthogonal():
    g = jax.random.normal(jax.random.key(0), (16, 40))
    for x in (g, g.T):
        o = O.newton_schulz(x)
        s = np.linalg.svd(np.asarray(o), compute_uv=False)
        assert o.shape == x.shape and s.min() > 0.5 and s.max() < 1.3
        u, _, vt = np.linalg.svd(np.asarray(x), full_matrices=False)
        assert np.sum(np.asarray(o) * (u @ vt)) > 0.8 * min(x.shape)  # aligned with U V^T


# ---------------------------------------------------------------------------------------------
# Registry and checks.

NEW = ["muon", "adafactor", "lamb", "lars", "schedule_free_sgd", "schedule_free_adamw", "prodigy"]


def test_registered_with_typed_defaults():
    import inspect
    import typing

    for name in NEW:
        fn = O.OPTIMIZERS[name]
        sig, hints = inspect.signature(fn), typing.get_type_hints(fn)
        params = list(sig.parameters.values())
        assert params[0].name == "step_size" and params[0].default is inspect.Parameter.empty
        for p in params[1:]:
            assert p.default is not inspect.Parameter.empty, (name, p.name)
            if isinstance(p.default, bool):
                assert hints[p.name] is bool, (name, p.name)
            elif isinstance(p.default, float):
                assert hints[p.name] in (float, float | None), (name, p.name)
            elif isinstance(p.default, int):
                assert hints[p.name] is int, (name, p.name)
        assert fn.__doc__ and "optax" in fn.__doc__.lower()


@pytest.mark.parametrize("name", NEW)
def test_bad_hyperparameters_raise(name):
    with pytest.raises(ValueError, match="step_size"):
        O.OPTIMIZERS[name](0.0)
    bad = {"muon": {"beta": 1.0}, "adafactor": None, "lamb": {"b2": -0.1},
           "lars": {"weight_decay": -1.0}, "schedule_free_sgd": {"b1": 0.0},
           "schedule_free_adamw": {"b1": 1.0}, "prodigy": {"estim_lr0": 0.0}}[name]
    if bad:
        with pytest.raises(ValueError, match=next(iter(bad))):
            O.OPTIMIZERS[name](0.1, **bad)


def test_state_packs_and_a_wrong_gradient_tree_is_refused():
    params, _ = mlp()
    for name in NEW:
        opt = O.OPTIMIZERS[name](0.01)
        s = opt.init_fn(params)
        s2 = O.pack_optimizer_state(O.unpack_optimizer_state(s))
        assert jax.tree.structure(s2) == jax.tree.structure(s)
        with pytest.raises(TypeError, match="tree"):
            opt.update_fn(0, {"l1": params["l1"]}, s)
