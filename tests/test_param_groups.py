"""param_groups: one optimizer per group (step-size scale, weight decay) against optax.multi_transform,
in a trial, and refused before any work where a rule or a key cannot apply."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import make_spec
from typer.testing import CliRunner

from harness.cli import app
from harness.train.build import make_opt_factory
from harness.train.loop import run_trial
from harness.train.recipe import group_optimizer
from models.zoo import MODELS
from optimizers import OPTIMIZERS, SCHEDULES
from optimizers.groups import rule_mask


def test_groups_equal_optax_multi_transform():
    params = MODELS["mlp"](input_shape=(8, 8, 1), num_classes=10, width=16, depth=2).init(
        jax.random.key(0), (1, 8, 8, 1))[1]
    lr = 1e-2

    def make_for(wd):
        return make_opt_factory("adamw", {} if wd is None else {"weight_decay": wd}, "constant", {}, 10,
                                OPTIMIZERS, SCHEDULES)

    make = group_optimizer(make_for, [(["head"], 0.1, 0.0), (["hidden_matrices"], 1.0, 0.3)])
    opt = make(lr)
    wd0 = inspect.signature(OPTIMIZERS["adamw"]).parameters["weight_decay"].default
    head, hidden = rule_mask(params, "head"), rule_mask(params, "hidden_matrices")
    labels = jax.tree.map(lambda h, m: "head" if h else "hidden" if m else "rest", head, hidden)
    ref = optax.multi_transform({"head": optax.adamw(lr * 0.1, weight_decay=0.0),
                                 "hidden": optax.adamw(lr, weight_decay=0.3),
                                 "rest": optax.adamw(lr, weight_decay=wd0)}, labels)
    s, rs, rp = opt.init_fn(params), ref.init(params), params
    for t in range(3):
        g = jax.tree.map(lambda x, t=t: jnp.cos(x * (t + 1.0)) + 0.1, params)
        s = jax.jit(opt.update_fn)(t, g, s)
        u, rs = ref.update(g, rs, rp)
        rp = optax.apply_updates(rp, u)
    for x, y in zip(jax.tree.leaves(opt.params_fn(s)), jax.tree.leaves(rp), strict=True):
        np.testing.assert_allclose(x, y, rtol=2e-6, atol=1e-7)


def test_one_group_of_everything_equals_no_groups():
    plain = run_trial(make_spec(steps=6, eval_every=6, steps_per_dispatch=6), measure_perf=False)
    grouped = run_trial(make_spec(steps=6, eval_every=6, steps_per_dispatch=6,
                                  recipe={"param_groups": [[["glob:*"], 1.0, None]]}), measure_perf=False)
    np.testing.assert_array_equal(grouped.curves.train_loss, plain.curves.train_loss)


HEAD = "param_groups: mlp (optimizers[0]): "


@pytest.mark.parametrize("groups, line", [
    ([{"rules": "embeddings"}], HEAD + "parameter group rule 'embeddings' matches no parameter"),
    ([{"rules": ["head"]}, {"rules": "glob:*", "step_size_scale": 2.0}],
     HEAD + "parameter '3/0' is claimed by groups 'param_groups[0]' and 'param_groups[1]'"),
    ([{"rules": "head", "weight_decay": 0.1}],
     "param_groups[0].weight_decay: optimizer 'sgd' (optimizers[0]) has no weight_decay hyperparameter"),
    ([{"rules": "nope"}], HEAD + "unknown parameter group rule 'nope'"),
])
def test_bad_groups_refused_before_any_work(tmp_path, write_sweep, monkeypatch, groups, line):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = write_sweep(param_groups=groups)
    r = CliRunner().invoke(app, ["sweep", str(cfg)])
    assert r.exit_code == 2, r.output
    assert f"{cfg}: {line}" in r.output
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def test_groups_keep_schedule_free_evaluation_parameters():
    params = {"w": jnp.linspace(-1.0, 1.0, 6).reshape(2, 3), "b": jnp.ones(3)}

    def make_for(wd):
        return make_opt_factory("schedule_free_adamw", {} if wd is None else {"weight_decay": wd}, "constant",
                                {}, 10, OPTIMIZERS, SCHEDULES)

    grouped, plain = group_optimizer(make_for, [(["glob:w"], 1.0, None)])(0.1), make_for(None)(0.1)
    a, b = grouped.init_fn(params), plain.init_fn(params)
    for t in range(3):
        g = jax.tree.map(lambda x, t=t: jnp.sin(x + t), params)
        a, b = grouped.update_fn(t, g, a), plain.update_fn(t, g, b)
    ea, eb = grouped.eval_params_fn(a), plain.eval_params_fn(b)
    assert not np.allclose(eb["w"], plain.params_fn(b)["w"])  # evaluation is not at the iterate
    for k in params:
        np.testing.assert_allclose(ea[k], eb[k], rtol=1e-6)
