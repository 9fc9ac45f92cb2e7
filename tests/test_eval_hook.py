"""The trainer's evaluation hook and the forms an optimizer builder may return.

Validation and test are evaluated at the optimizer's evaluation parameters where it has them (an
``optax.contrib`` Schedule-Free state, the builtin Schedule-Free pair's registered rule, a
builder's fourth member), computed here by hand from the final state; every accepted form trains;
a vmapped unit equals its trials alone; a resumed trial equals an uninterrupted one bit for bit.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
import jax.example_libraries.optimizers as jax_opt
import jax.numpy as jnp
import numpy as np
import optax
import optax.contrib
import pytest
from conftest import make_spec
from interrupting import Interrupt, Interrupting

import optimizers
from harness.train import build, program
from harness.train import loop as trainer
from harness.train.checkpoint import UnitCheckpoints, parse_every
from models.zoo import MODELS
from optimizers import OPTIMIZERS
from optimizers.extra import optax_eval_params
from optimizers.registry import EVAL_PARAMS

RTOL, ATOL = 1e-4, 1e-5  # a vmapped unit against its trials alone (as tests/test_trainer.py)


# ------------------------------------------------------------------ builders of every accepted form


def optax_sf(step_size, b1: float = 0.9):
    """The raw Optax GradientTransformation."""
    return optax.contrib.schedule_free_adamw(step_size, b1=b1)


def optax_sf_chained(step_size):
    """A Schedule-Free state two levels down: a chain, then inject_hyperparams."""
    sf = optax.inject_hyperparams(optax.contrib.schedule_free_adamw)(learning_rate=step_size)
    return optax.chain(optax.clip_by_global_norm(10.0), sf)


def optax_adam_raw(step_size):
    return optax.adam(step_size)


def half_adam(step_size):
    """Adam plus an ``eval_params`` returning half the parameters: the difference is obvious."""
    init_fn, update_fn, params_fn = optimizers.adam(step_size)
    return init_fn, update_fn, params_fn, lambda s: jax.tree.map(lambda p: 0.5 * p, params_fn(s))


def reference_adam(step_size):
    return jax_opt.adam(step_size)


def plain_triple(step_size):
    return tuple(optimizers.adam(step_size))


def triple_and_none(step_size):
    return (*optimizers.adam(step_size), None)


def returns_int(step_size):
    return 3


def returns_pair(step_size):
    return optimizers.adam(step_size)[:2]


def returns_dict(step_size):
    return {"init": 1}


#: one dict for the whole module: ``program_for`` caches programs by the registry's id
TEST_OPTIMIZERS = {**OPTIMIZERS, **{f.__name__: f for f in (
    optax_sf, optax_sf_chained, optax_adam_raw, half_adam, reference_adam, plain_triple, triple_and_none,
    returns_int, returns_pair, returns_dict)}}


@pytest.fixture(autouse=True)
def registry(monkeypatch):
    real = program.default_registries
    monkeypatch.setattr(program, "default_registries",
                        lambda: dataclasses.replace(real(), optimizers=TEST_OPTIMIZERS))


@pytest.fixture(scope="module")
def digits():
    from harness.data.sources import load_dataset

    return load_dataset("digits")


# ------------------------------------------------------------------ the final state, by hand


class FinalState:
    """A :class:`harness.train.checkpoint.TrainCheckpoints` that writes nothing and keeps the unit's
    state at the end of training (on the host)."""

    resumed_from, saves, save_seconds = None, 0, 0.0

    def __init__(self):
        self.state: Any = None

    def restore(self, template, tracks, params_fn):
        return None

    def after_chunk(self, step, wall_s, state, tracks, params_fn, *, done=False):
        pass

    def finish(self, step, wall_s, state, tracks, params_fn):
        self.state = jax.tree.map(np.asarray, state)


def _train(spec, digits):
    final = FinalState()
    r = trainer.run_trial(spec, dataset=digits, measure_perf=False, checkpoints=final)
    return r, final.state


def _losses(params, mstate, digits) -> tuple[float, float]:
    """Validation and test loss of the digits MLP of ``make_spec`` at ``params``."""
    model = MODELS["mlp"](input_shape=(8, 8, 1), num_classes=10, width=16, depth=1)
    out = []
    for x, y in ((digits.x_valid, digits.y_valid), (digits.x_test, digits.y_test)):
        logits = model.apply(params, mstate, jnp.asarray(x, jnp.float32), train=False)[0]
        out.append(float(model.loss(logits, jnp.asarray(y))))
    return out[0], out[1]


def _optax_parts(opt_state):
    """``(params, optax state)`` inside a ``from_optax`` state."""
    (leaves,), _, (inner,) = opt_state
    return jax.tree.unflatten(inner, leaves)


def _check_evaluated_at(r, state, train_params, eval_params, digits):
    valid_eval, test_eval = _losses(eval_params, state.model_state, digits)
    valid_train, _ = _losses(train_params, state.model_state, digits)
    assert r.status == "finished" and r.extra["eval_params"] is True
    assert abs(valid_eval - valid_train) > 1e-4 * abs(valid_train)  # the two points really differ
    np.testing.assert_allclose(r.curves.eval_loss[-1], valid_eval, rtol=1e-6)
    np.testing.assert_allclose(r.test_loss, test_eval, rtol=1e-6)
    assert r.final_valid_loss == r.curves.eval_loss[-1]


SPEC = dict(steps=50, eval_every=25, steps_per_dispatch=25)


def test_optax_schedule_free_is_evaluated_at_its_average(digits):
    r, state = _train(make_spec(optimizer="optax_sf", optimizer_hparams={"step_size": 0.01}, **SPEC), digits)
    params, sf_state = _optax_parts(state.opt_state)
    assert isinstance(sf_state, optax.contrib.ScheduleFreeState)
    _check_evaluated_at(r, state, params, optax.contrib.schedule_free_eval_params(sf_state, params), digits)


def test_builtin_schedule_free_is_evaluated_at_its_average(digits):
    assert EVAL_PARAMS["schedule_free_adamw"] is EVAL_PARAMS["schedule_free_sgd"] is \
        optimizers.schedule_free_eval_params
    spec = make_spec(optimizer="schedule_free_adamw", optimizer_hparams={"step_size": 0.01}, **SPEC)
    r, state = _train(spec, digits)
    params = optimizers.schedule_free_adamw(0.01).params_fn(state.opt_state)
    _check_evaluated_at(r, state, params, optimizers.schedule_free_eval_params(state.opt_state), digits)


def test_a_fourth_member_is_where_evaluation_happens(digits):
    r, state = _train(make_spec(optimizer="half_adam", **SPEC), digits)
    params = optimizers.adam(0.01).params_fn(state.opt_state)
    _check_evaluated_at(r, state, params, jax.tree.map(lambda p: 0.5 * p, params), digits)


def test_optax_eval_params_finds_the_state_anywhere():
    params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
    grads = {"w": jnp.full((2, 3), 0.5), "b": jnp.full(3, -1.0)}
    for tx, where in ((optax_sf(0.1), lambda s: s), (optax_sf_chained(0.1), lambda s: s[1].inner_state)):
        opt = optimizers.from_optax(tx)
        s = opt.init_fn(params)
        for i in range(3):
            s = opt.update_fn(i, grads, s)
        p, inner = _optax_parts(s)
        want = optax.contrib.schedule_free_eval_params(where(inner), p)
        got = optax_eval_params(s)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_array_equal(a, b)
        assert not np.allclose(got["w"], p["w"])
    adam = optimizers.from_optax(optax.adam(0.1))
    assert optax_eval_params(adam.init_fn(params)) is None  # an Optax state without Schedule-Free
    assert optax_eval_params(optimizers.adam(0.1).init_fn(params)) is None  # not an Optax state
    assert jax.eval_shape(optax_eval_params, adam.init_fn(params)) is None


# ------------------------------------------------------------------ the accepted forms


def test_every_accepted_form_trains(digits):
    def run(opt, steps=20):
        return trainer.run_trial(make_spec(optimizer=opt, steps=steps), dataset=digits, measure_perf=False)

    ours = run("adam")
    assert "eval_params" not in ours.extra
    # this project's Optimizer, jax.example_libraries' and a bare tuple (with or without a None
    # fourth member): the same adam, the same curves
    for opt in ("reference_adam", "plain_triple", "triple_and_none"):
        r = run(opt)
        assert r.curves.train_loss == ours.curves.train_loss and r.curves.eval_loss == ours.curves.eval_loss
        assert "eval_params" not in r.extra
    # a raw Optax transformation equals the registered optax_adam (from_optax around it)
    raw, named = run("optax_adam_raw"), run("optax_adam")
    assert raw.curves.train_loss == named.curves.train_loss and "eval_params" not in raw.extra
    assert raw.curves.eval_loss[-1] < raw.curves.eval_loss[0]
    # a Schedule-Free state inside a chain and inject_hyperparams is found
    chained = run("optax_sf_chained")
    assert chained.extra["eval_params"] is True and chained.curves.eval_loss[-1] < chained.curves.eval_loss[0]


@pytest.mark.parametrize("name, returned", [
    ("returns_int", "int"),
    ("returns_pair", "a tuple of 2 members (2 callable)"),
    ("returns_dict", "dict"),
])
def test_a_bad_form_is_a_type_error(name, returned, digits):
    want = (f"optimizer {name!r} returned {returned}; expected an (init_fun, update_fun, get_params) "
            "triple, a 4-tuple with eval_params, or an optax GradientTransformation")
    with pytest.raises(TypeError) as e:
        trainer.run_trial(make_spec(optimizer=name), dataset=digits, measure_perf=False)
    assert str(e.value) == want
    with pytest.raises(TypeError) as e:
        build.as_train_optimizer(TEST_OPTIMIZERS[name](0.1), name)
    assert str(e.value) == want


def test_as_train_optimizer_forms():
    tx = optax.adam(0.1)
    t = build.as_train_optimizer(tx, "x")
    assert isinstance(t, build.TrainOptimizer) and t.eval_params_fn is optax_eval_params
    assert build.as_train_optimizer(t, "x") is t
    four = half_adam(0.1)
    assert build.as_train_optimizer(four, "x").eval_params_fn is four[3]
    make = build.make_opt_factory("schedule_free_sgd", {}, "none", {}, 10, OPTIMIZERS, {})
    assert make(0.1).eval_params_fn is optimizers.schedule_free_eval_params
    # another builder under a builtin's name does not inherit the builtin's rule
    make = build.make_opt_factory("schedule_free_sgd", {}, "none", {}, 10,
                                  {"schedule_free_sgd": plain_triple}, {})
    assert make(0.1).eval_params_fn is optax_eval_params


# ------------------------------------------------------------------ vmapped units, resume


@pytest.mark.parametrize("opt", ["schedule_free_adamw", "optax_sf"])
def test_batched_schedule_free_equals_alone(opt, digits):
    specs = [make_spec(optimizer=opt, seed=0, optimizer_hparams={"step_size": 0.01}, **SPEC),
             make_spec(optimizer=opt, seed=5, optimizer_hparams={"step_size": 0.003}, **SPEC)]
    batched = trainer.run_trials_batched(specs, dataset=digits, measure_perf=False)
    for spec, rb in zip(specs, batched, strict=True):
        ra = trainer.run_trial(spec, dataset=digits, measure_perf=False)
        assert rb.extra["eval_params"] is True and rb.extra["batched"] == 2
        for a, b in ((rb.curves.train_loss, ra.curves.train_loss), (rb.curves.eval_loss, ra.curves.eval_loss),
                     (rb.curves.eval_accuracy, ra.curves.eval_accuracy), (rb.test_loss, ra.test_loss),
                     (rb.test_accuracy, ra.test_accuracy)):
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
    assert batched[0].curves.eval_loss != batched[1].curves.eval_loss




def _everything(r) -> tuple:
    c = r.curves
    return (c.train_step, c.train_loss, c.eval_step, c.eval_loss, c.eval_accuracy, c.eval_metrics, r.status,
            r.final_valid_loss, r.final_valid_accuracy, r.test_loss, r.test_accuracy)


@pytest.mark.parametrize("opt, width", [("schedule_free_adamw", 1), ("schedule_free_adamw", 2),
                                        ("optax_sf", 1)])
def test_resume_with_an_eval_hook_is_bit_identical(opt, width, tmp_path, digits):
    """Chunks end at 6, 12, 18, 20 (eval), 26, 32, 38, 40 (eval), 46, 47; a checkpoint every 10
    steps; interrupted after chunk 5 (step 26, saved at 20) and resumed: every value equal."""
    specs = [make_spec(optimizer=opt, seed=s, optimizer_hparams={"step_size": lr}, steps=47, eval_every=20,
                       steps_per_dispatch=6, batch_size=64) for s, lr in ((0, 0.01), (1, 0.003))][:width]

    def train(ck):
        if width == 1:
            return [trainer.run_trial(specs[0], dataset=digits, measure_perf=False, checkpoints=ck)]
        return trainer.run_trials_batched(specs, dataset=digits, measure_perf=False, checkpoints=ck)

    ref = train(None)
    ids, T, every = [s.trial_id for s in specs], (width if width > 1 else None), parse_every(10)
    d = str(tmp_path / "ck")
    ck = Interrupting(d, ids, T, every, stop_after=5)
    with pytest.raises(Interrupt):
        train(ck)
    ck.release()
    again = UnitCheckpoints(d, ids, T, every)
    res = train(again)
    assert again.resumed_from == 20
    for a, b in zip(res, ref, strict=True):
        assert _everything(a) == _everything(b)
        assert a.extra["eval_params"] is True and a.extra["checkpoint"]["resumed_from_step"] == 20
    again.cleanup()
    assert not Path(d).exists()
