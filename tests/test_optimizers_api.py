"""optimizers: reference pitfalls, bad input, serialization/resume, donation, registries."""

import inspect
import pickle
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.example_libraries import optimizers as R

import optimizers as O
from harness.core.builders import INJECTED, REQUIRED, hyperparameters


def tree():
    rng = np.random.default_rng(0)
    return {
        "w": jnp.asarray(rng.standard_normal((3, 2, 2, 2)), jnp.float32),
        "b": (jnp.asarray(rng.standard_normal(4), jnp.float32), [jnp.float32(0.5)]),
    }


def grads_of(params, t):
    return jax.tree.map(lambda x: jnp.cos(2.0 * x) + 0.01 * t, params)


def test_public_api_covers_reference():
    ref_public = {
        n
        for n in dir(R)
        if not n.startswith("_")
        and n not in {"annotations", "functools", "jax", "jnp", "partial", "namedtuple", "NamedTuple"}
        and n not in {"Any", "Callable", "map", "zip", "safe_map", "safe_zip", "unzip2"}
    }
    missing = ref_public - set(O.__all__)
    assert not missing
    for name in ("sgd", "momentum", "adam", "sm3", "piecewise_constant", "inverse_time_decay"):
        ours = inspect.signature(getattr(O, name)).parameters
        ref = inspect.signature(getattr(R, name)).parameters
        assert list(ours) == list(ref)
        assert [p.default for p in ours.values()] == [p.default for p in ref.values()]


def test_import_is_light():
    code = (
        "import sys, optimizers; print(sorted(m for m in ('optax', 'harness', 'mlflow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# Pitfalls.


def test_sm3_scalar_and_4d_params_under_jit_and_scan():
    params = {"s": jnp.float32(2.0), "w": jnp.ones((2, 3, 1, 2), jnp.float32)}
    opt = O.sm3(0.1, momentum=0.5)

    @jax.jit
    def run(p):
        def body(s, t):
            return opt.update_fn(t, grads_of(opt.params_fn(s), t), s), None

        s, _ = jax.lax.scan(body, opt.init_fn(p), jnp.arange(10))
        return opt.params_fn(s)  # the reference's params_fn fails here (shape tracers)

    out = run(params)
    assert out["s"].shape == () and out["w"].shape == (2, 3, 1, 2)
    # Same numbers as the reference run eagerly (where its params_fn works).
    ref = R.sm3(0.1, momentum=0.5)
    s = ref.init_fn(params)
    for t in range(10):
        s = ref.update_fn(t, grads_of(ref.params_fn(s), t), s)
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(ref.params_fn(s)), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
    # Hand check of one step on a scalar: accum = g**2, m = (1 - 0.5) * g / |g|, x = 2 - 0.1 * m.
    s1 = opt.update_fn(0, {"s": jnp.float32(-3.0), "w": jnp.zeros((2, 3, 1, 2))}, opt.init_fn(params))
    assert float(opt.params_fn(s1)["s"]) == pytest.approx(2.0 + 0.1 * 0.5, rel=1e-7)
    np.testing.assert_array_equal(opt.params_fn(s1)["w"], 1.0)  # zero grad: 0 where accum == 0


@pytest.mark.parametrize(
    "boundaries,values",
    [([0], [1.0, 0.5]), ([0, 3, 7], [1.0, 0.5, 0.25, 0.125]), ([5, 5, 9], [4.0, 3.0, 2.0, 1.0])],
)
def test_piecewise_constant_at_boundaries(boundaries, values):
    ours, ref = O.piecewise_constant(boundaries, values), R.piecewise_constant(boundaries, values)
    steps = sorted({max(b + d, 0) for b in boundaries for d in (-1, 0, 1)} | {0, 100})
    jo, jr = jax.jit(ours), jax.jit(ref)
    for i in steps:
        expected = values[sum(i > b for b in boundaries)]  # at a boundary the old value holds
        assert float(ours(i)) == float(ref(i)) == float(jo(i)) == float(jr(i)) == pytest.approx(expected)
    if boundaries == [0]:
        assert float(ours(0)) == 1.0 and float(ours(1)) == 0.5


def test_pack_unpack_pickle_and_bit_identical_resume():
    params = tree()
    opt = O.adam(O.exponential_decay(1e-2, 10, 0.5))
    upd = jax.jit(opt.update_fn)

    def train(state, start, n):
        for t in range(start, start + n):
            state = upd(t, grads_of(opt.params_fn(state), t), state)
        return state

    s10 = train(opt.init_fn(params), 0, 10)
    unpacked = O.unpack_optimizer_state(s10)
    assert all(isinstance(x, O.JoinPoint) for x in jax.tree.leaves(unpacked))
    repacked = O.pack_optimizer_state(unpacked)
    assert repacked.tree_def == s10.tree_def and repacked.subtree_defs == s10.subtree_defs
    assert jax.tree.structure(repacked) == jax.tree.structure(s10)
    for a, b in zip(jax.tree.leaves(repacked), jax.tree.leaves(s10), strict=True):
        assert a is b  # exactly the same arrays
    restored = O.pack_optimizer_state(pickle.loads(pickle.dumps(unpacked)))
    straight = train(s10, 10, 10)
    resumed = train(restored, 10, 10)
    for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # Interchangeable with the reference's serialization helpers.
    ref_repacked = R.pack_optimizer_state(R.unpack_optimizer_state(s10))
    assert ref_repacked.tree_def == s10.tree_def


def test_reference_checkpoint_loads_after_swapping_the_import():
    """A state unpacked and pickled with jax.example_libraries packs with ``optimizers`` and
    training resumes bit-identically (this raised TypeError naming 'JoinPoint' before)."""
    params = tree()
    ref = R.adam(1e-2)
    ref_upd = jax.jit(ref.update_fn)
    state = ref.init_fn(params)
    for t in range(5):
        state = ref_upd(t, grads_of(ref.params_fn(state), t), state)
    blob = pickle.dumps(R.unpack_optimizer_state(state))
    ours = O.adam(1e-2)
    restored = O.pack_optimizer_state(pickle.loads(blob))
    a, b = state, restored
    for t in range(5, 10):
        a = ref_upd(t, grads_of(ref.params_fn(a), t), a)
        b = jax.jit(ours.update_fn)(t, grads_of(ours.params_fn(b), t), b)
    for x, y in zip(jax.tree.leaves(ref.params_fn(a)), jax.tree.leaves(ours.params_fn(b)), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_pack_rejects_non_join_point_leaves_naming_the_class():
    msg = r"^pack_optimizer_state expects JoinPoint leaves, got builtins\.int$"
    with pytest.raises(TypeError, match=msg):
        O.pack_optimizer_state({"w": 3})


def test_from_optax_state_packs_and_resumes():
    optax = pytest.importorskip("optax")
    opt = O.from_optax(optax.adam(1e-2))
    params = tree()
    s = opt.init_fn(params)
    for t in range(3):
        s = opt.update_fn(t, grads_of(opt.params_fn(s), t), s)
    restored = O.pack_optimizer_state(pickle.loads(pickle.dumps(O.unpack_optimizer_state(s))))
    a = opt.update_fn(3, grads_of(opt.params_fn(s), 3), s)
    b = opt.update_fn(3, grads_of(opt.params_fn(restored), 3), restored)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_init_copies_so_donation_keeps_caller_params():
    params = tree()
    for opt in (O.sgd(0.1), O.momentum(0.1, 0.9), O.OPTIMIZERS["optax_adam"](0.1)):
        upd = jax.jit(opt.update_fn, donate_argnums=2)
        s = upd(0, grads_of(params, 0), opt.init_fn(params))
        jax.block_until_ready(s)
        np.testing.assert_array_equal(np.asarray(params["w"]), np.asarray(tree()["w"]))  # not deleted


def test_l2_norm_and_clip_grads_match_reference():
    g = tree()
    assert float(O.l2_norm(g)) == float(R.l2_norm(g))
    for max_norm in (0.1, 1e3):
        for a, b in zip(
            jax.tree.leaves(O.clip_grads(g, max_norm)),
            jax.tree.leaves(R.clip_grads(g, max_norm)),
            strict=True,
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_allclose(float(O.l2_norm(O.clip_grads(g, 0.1))), 0.1, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Bad input.


def test_grad_tree_mismatch_names_both_structures():
    params = tree()
    opt = O.adam(1e-3)
    s = opt.init_fn(params)
    bad = {"w": params["w"], "b": params["b"][0]}
    with pytest.raises(TypeError) as e:
        opt.update_fn(0, bad, s)
    msg = str(e.value)
    assert str(jax.tree.structure(params)) in msg and str(jax.tree.structure(bad)) in msg
    with pytest.raises(TypeError, match="parameter tree"):
        jax.jit(opt.update_fn)(0, bad, s)  # raised at trace time
    optax = pytest.importorskip("optax")
    opt2 = O.from_optax(optax.sgd(0.1))
    with pytest.raises(TypeError) as e2:
        opt2.update_fn(0, bad, opt2.init_fn(params))
    assert str(jax.tree.structure(bad)) in str(e2.value)


def test_piecewise_constant_bad_lengths():
    with pytest.raises(ValueError, match=r"2 boundaries \[1, 2\] and 2 values \[0.1, 0.2\]"):
        O.piecewise_constant([1, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="non-decreasing"):  # the extra refuses; the drop-in takes them
        O.SCHEDULES["piecewise"](0.1, boundaries=[5, 2], multipliers=[1.0, 0.5, 0.1])
    with pytest.raises(ValueError, match="sequences"):
        O.piecewise_constant(3, [0.1, 0.2])
    with pytest.raises(ValueError, match=r"multipliers|values"):
        O.SCHEDULES["piecewise"](0.1, boundaries=[10], multipliers=[1.0])


@pytest.mark.parametrize("bad", [0.0, -0.1, float("nan"), np.float32(0.0), 0, jnp.asarray(-1.0)])
def test_nonpositive_concrete_step_size(bad):
    for make in (O.adamw, O.lion, O.OPTIMIZERS["muon"], lambda s: O.warmup_cosine_decay(s, 2, 10)):
        with pytest.raises(ValueError, match="step_size must be positive, got") as e:
            make(bad)
        assert repr(bad) in str(e.value)
    with pytest.raises(ValueError, match="step_size must be positive"):
        O.OPTIMIZERS["optax_adam"](bad)


@pytest.mark.parametrize("kw", [{"b1": 1.0}, {"b1": -0.1}, {"b2": 1.0}, {"b2": 1.5}, {"b1": float("nan")}])
def test_betas_outside_unit_interval(kw):
    ((name, value),) = kw.items()
    for make in (O.adamw, O.nadamw, O.lion, O.OPTIMIZERS["optax_adam"]):  # adam, adamax: as the reference
        with pytest.raises(ValueError, match=rf"{name} must be in \[0, 1\), got") as e:
            make(1e-3, **kw)
        assert repr(value) in str(e.value)


def test_schedule_argument_errors():
    with pytest.raises(ValueError, match="total_steps is required"):
        O.SCHEDULES["cosine_decay"](0.1)
    with pytest.raises(ValueError, match="must exceed warmup_steps"):
        O.warmup_cosine_decay(0.1, 100, 50)
    with pytest.raises(ValueError, match="one boundary fewer"):
        O.join_schedules([O.constant(0.1)], [5])
    with pytest.raises(TypeError):
        O.make_schedule(jnp.ones(3))


# ---------------------------------------------------------------------------------------------
# Registries.

EXPECTED_OPTIMIZERS = {
    "sgd": {},
    "momentum": {"mass": 0.9},
    "nesterov": {"mass": 0.9},
    "adagrad": {"momentum": 0.9},
    "rmsprop": {"gamma": 0.9, "eps": 1e-8},
    "rmsprop_momentum": {"gamma": 0.9, "eps": 1e-8, "momentum": 0.9},
    "adam": {"b1": 0.9, "b2": 0.999, "eps": 1e-8},
    "adamax": {"b1": 0.9, "b2": 0.999, "eps": 1e-8},
    "sm3": {"momentum": 0.9},
    "adamw": {"b1": 0.9, "b2": 0.999, "eps": 1e-8, "weight_decay": 1e-4},
    "nadamw": {"b1": 0.9, "b2": 0.999, "eps": 1e-8, "weight_decay": 1e-4},
    "lion": {"b1": 0.9, "b2": 0.99, "weight_decay": 1e-3},
    "optax_sgd": {},
    "optax_momentum": {"mass": 0.9, "nesterov": False},
    "optax_adam": {"b1": 0.9, "b2": 0.999, "eps": 1e-8},
    "muon": {"beta": 0.95, "ns_steps": None, "eps": 1e-08, "weight_decay": 0.0, "nesterov": True,
             "adam_b1": 0.9, "adam_b2": 0.999, "adam_weight_decay": 0.0, "adam_lr_ratio": 1.0,
             "muon_mask": None,
             "convention": "optax", "ns_coeffs": None, "ns_eps": None, "ns_dtype": None,
             "momentum_form": None, "adam_nesterov": None, "adam_eps": None},
    "adafactor": {"min_dim_size_to_factor": 128, "decay_rate": 0.8, "decay_offset": 0,
                  "multiply_by_parameter_scale": True, "clipping_threshold": 1.0, "momentum": None,
                  "weight_decay_rate": None, "eps": 1e-30, "factored": True},
    "lamb": {"b1": 0.9, "b2": 0.999, "eps": 1e-06, "weight_decay": 0.0},
    "lars": {"weight_decay": 0.0, "trust_coefficient": 0.001, "eps": 0.0, "momentum": 0.9, "nesterov": False},
    "schedule_free_sgd": {"b1": 0.9, "weight_decay": 0.0, "weight_lr_power": 2.0},
    "schedule_free_adamw": {"b1": 0.9, "b2": 0.999, "eps": 1e-08, "weight_decay": 0.0,
                            "weight_lr_power": 2.0},
    "prodigy": {"b1": 0.9, "b2": 0.999, "beta3": None, "eps": 1e-08, "estim_lr0": 1e-06,
                "estim_lr_coef": 1.0, "weight_decay": 0.0, "safeguard_warmup": False},
    "soap": {"b1": 0.95, "b2": 0.95, "shampoo_beta": None, "eps": 1e-08, "weight_decay": 0.01,
             "precondition_frequency": 10, "max_precond_dim": 10000, "soap_mask": None},
}


def test_optimizer_registry_signatures():
    assert set(O.OPTIMIZERS) == set(EXPECTED_OPTIMIZERS)
    for name, factory in O.OPTIMIZERS.items():
        hp = hyperparameters(factory)
        assert hp["step_size"].required
        assert {k: v.default for k, v in hp.items() if k != "step_size"} == EXPECTED_OPTIMIZERS[name]


def test_schedule_registry_signatures():
    expected = {
        "constant": {},
        "exponential_decay": {"decay_steps": REQUIRED, "decay_rate": REQUIRED},
        "inverse_time_decay": {"decay_steps": REQUIRED, "decay_rate": REQUIRED, "staircase": False},
        "polynomial_decay": {"decay_steps": REQUIRED, "final_step_size": REQUIRED, "power": 1.0},
        "piecewise": {"boundaries": REQUIRED, "multipliers": REQUIRED},
        "linear_warmup": {"warmup_steps": REQUIRED, "init_scale": 0.0},
        "cosine_decay": {"alpha": 0.0},
        "warmup_cosine_decay": {"warmup_steps": REQUIRED, "init_scale": 0.0, "alpha": 0.0},
        "warmup_stable_decay": {"warmup_steps": 0, "decay_fraction": 0.2, "decay_shape": "linear",
                                "init_scale": 0.0, "final_scale": 0.0, "warmup_offset": 0},
    }
    assert set(O.SCHEDULES) == set(expected)
    assert "total_steps" in INJECTED
    for name, factory in O.SCHEDULES.items():
        hp = hyperparameters(factory)
        assert hp.pop("step_size").required
        assert {k: v.default for k, v in hp.items()} == expected[name], name
        if name.endswith(("cosine_decay", "stable_decay")):
            assert inspect.signature(factory).parameters["total_steps"].default is None


def test_every_registry_entry_runs_in_scan_with_traced_lr_and_schedule():
    """Every optimizer with a registry schedule, vmapped over two learning rates, in one jitted
    scan (as the trainer runs them): finite, moving, and lr-dependent."""
    params = {"w": jnp.linspace(-1.0, 1.0, 6, dtype=jnp.float32).reshape(2, 3), "s": jnp.float32(0.3)}
    hp = {
        "exponential_decay": {"decay_steps": 10, "decay_rate": 0.5},
        "inverse_time_decay": {"decay_steps": 10, "decay_rate": 0.5},
        "polynomial_decay": {"decay_steps": 10, "final_step_size": 1e-4},
        "piecewise": {"boundaries": [3, 6], "multipliers": [1.0, 0.5, 0.1]},
        "linear_warmup": {"warmup_steps": 3},
        "cosine_decay": {"total_steps": 12},
        "warmup_cosine_decay": {"warmup_steps": 3, "total_steps": 12},
        "warmup_stable_decay": {"warmup_steps": 3, "total_steps": 12},
    }
    names = list(O.OPTIMIZERS)
    sched_names = list(O.SCHEDULES)

    def run(lr):
        out = {}
        for k, name in enumerate(names):
            sname = sched_names[k % len(sched_names)]
            # prodigy's step_size multiplies its own estimate, which starts at estim_lr0 (1e-6 by
            # default: 12 steps would not move float32 parameters)
            ohp = {"estim_lr0": 1e-2} if name == "prodigy" else {}
            opt = O.OPTIMIZERS[name](O.SCHEDULES[sname](lr, **hp.get(sname, {})), **ohp)

            def body(s, t, opt=opt):
                return opt.update_fn(t, grads_of(opt.params_fn(s), t), s), None

            s, _ = jax.lax.scan(body, opt.init_fn(params), jnp.arange(12))
            out[name] = opt.params_fn(s)
        return out

    out = jax.jit(jax.vmap(run))(jnp.asarray([1e-2, 1e-3], jnp.float32))
    for name in names:
        w = np.asarray(out[name]["w"])
        assert np.isfinite(w).all(), name
        assert not np.array_equal(w[0], w[1]), name
        assert not np.allclose(w[1], np.asarray(params["w"]), rtol=0, atol=0), name


def test_join_schedules_and_make_schedule_refuse_what_their_docstrings_exclude():
    c = O.constant
    for bounds in ([5, 3], [-3, 5], [4, 4]):
        with pytest.raises(ValueError, match=r"boundaries must be increasing step indices >= 0"):
            O.join_schedules([c(0.1), c(0.2), c(0.3)], bounds)
    with pytest.raises(TypeError, match=r"a 0-d number or a schedule \(a callable\), got .* of shape \(2,\)"):
        O.make_schedule(jnp.array([0.1, 0.2]))
