"""grad_clip and grad_accum: against optax.clip_by_global_norm, against the large batch, in a real
sweep (what MLflow stored), and refused before any work where they cannot apply."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import make_spec
from typer.testing import CliRunner

from harness.cli import app
from harness.train.build import as_train_optimizer
from harness.train.loop import run_trial
from harness.train.recipe import clip_optimizer, global_norm
from optimizers import OPTIMIZERS, from_optax


def _grads(t):
    return {"w": jnp.array([[3.0, -4.0], [1.0, 2.0]]) * (0.2 + 0.5 * t),
            "b": jnp.array([0.5, -1.5]) * (t - 1)}


@pytest.mark.parametrize("make", [lambda: OPTIMIZERS["adam"](1e-2), lambda: from_optax(optax.adam(1e-2))])
def test_clip_equals_optax_clip_by_global_norm(make):
    params = {"w": jnp.ones((2, 2)), "b": jnp.zeros(2)}
    max_norm = 2.0
    opt = clip_optimizer(as_train_optimizer(make(), "adam"), max_norm)
    ref = optax.chain(optax.clip_by_global_norm(max_norm), optax.adam(1e-2))
    s, rs, rp = opt.init_fn(params), ref.init(params), params
    norms = []
    for t in range(4):
        g = _grads(t)
        norms.append(float(global_norm(g)))
        s = opt.update_fn(t, g, s)
        u, rs = ref.update(g, rs, rp)
        rp = optax.apply_updates(rp, u)
    for k in params:
        np.testing.assert_allclose(opt.params_fn(s)[k], rp[k], rtol=1e-6, atol=1e-7)
    assert float(global_norm(_grads(1))) == pytest.approx(float(optax.tree.norm(_grads(1))))
    # norms 1.17, 3.53, 5.89, 8.26 (hand: |w|=sqrt(30)*(0.2+0.5t), |b|=sqrt(2.5)*|t-1|): 3 above 2.0
    assert [n > max_norm for n in norms] == [False, True, True, True]
    assert int(s[1]) == 3


@functools.cache
def _trained(recipe: tuple):
    spec = make_spec(steps=8, batch_size=32, eval_every=8, steps_per_dispatch=8, recipe=dict(recipe))
    return run_trial(spec, measure_perf=False)


def _train(recipe):
    return _trained(tuple(sorted(recipe.items())))


def test_accumulation_equals_the_large_batch():
    """4 micro-batches of 8 against one batch of 32: the same updates up to float32 reassociation
    (rtol 2e-5 on every train loss, 8 adam steps)."""
    big, acc = _train({}), _train({"grad_accum": 4})
    np.testing.assert_allclose(acc.curves.train_loss, big.curves.train_loss, rtol=2e-5)
    assert acc.final_valid_loss == pytest.approx(big.final_valid_loss, rel=2e-5)
    assert "clipped_fraction" not in acc.extra


def test_clipped_fraction_of_a_trial():
    tiny, huge = _train({"grad_clip": 1e-6}), _train({"grad_clip": 1e6})
    assert tiny.extra["clipped_fraction"] == 1.0 and huge.extra["clipped_fraction"] == 0.0
    plain = _train({})
    np.testing.assert_array_equal(huge.curves.train_loss, plain.curves.train_loss)  # never clipped: same
    assert tiny.curves.train_loss[-1] > plain.curves.train_loss[-1]  # steps of norm 1e-6 barely move


def test_a_sweep_records_the_recipe(tmp_path, write_sweep, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = write_sweep(seeds=[0], budget={"steps": 20}, grad_clip=0.5, grad_accum=2)
    r = CliRunner().invoke(app, ["sweep", str(cfg)])
    assert r.exit_code == 0, r.output
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("tiny")
    runs = [x for x in client.search_runs([exp.experiment_id]) if "harness.trial_id" in x.data.tags]
    assert len(runs) == 1
    p, m = runs[0].data.params, runs[0].data.metrics
    assert p["train.grad_clip"] == "0.5" and p["train.grad_accum"] == "2"
    assert 0.0 <= m["train/clipped_fraction"] <= 1.0
    hist = client.get_metric_history(runs[0].info.run_id, "train/clipped_fraction")
    assert [h.step for h in hist] == [20]


@pytest.mark.parametrize("over, line", [
    ({"grad_accum": 5}, "grad_accum: 5 micro-batches do not divide batch_size 32 (each micro-batch must "
                        "have as many examples)"),
    ({"grad_clip": 0}, "grad_clip:"),
    ({"grad_accum": 0}, "grad_accum:"),
])
def test_bad_recipe_refused_before_any_work(tmp_path, write_sweep, monkeypatch, over, line):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = write_sweep(**over)
    r = CliRunner().invoke(app, ["sweep", str(cfg)])
    assert r.exit_code == 2, r.output
    assert f"{cfg}: {line}" in r.output
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def test_jitted_clip_counts_under_vmap():
    opt = clip_optimizer(as_train_optimizer(OPTIMIZERS["sgd"](0.1), "sgd"), 1.0)
    s = jax.vmap(opt.init_fn)({"w": jnp.zeros((2, 3))})
    g = {"w": jnp.stack([jnp.full(3, 0.1), jnp.full(3, 10.0)])}
    s = jax.jit(jax.vmap(opt.update_fn, in_axes=(None, 0, 0)))(0, g, s)
    assert s[1].tolist() == [0, 1]
