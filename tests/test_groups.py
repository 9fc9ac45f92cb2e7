"""Parameter groups by name rules: the roles on zoo models and a named tree, refusals, Muon's matrix
set written as rules, and a sweep that refuses a rule before any work."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

from harness.cli import app
from models.zoo import MODELS
from optimizers import OPTIMIZERS
from optimizers.groups import group_masks, leaf_paths, rule_mask


def _params(name, shape, concrete=False, **hp):
    """The model's parameters: abstract (``jax.eval_shape``, as the pre-flight checks rules) or real."""
    model = MODELS[name](input_shape=shape, num_classes=16, **hp)
    init = jax.jit(lambda k: model.init(k, (1, *shape))[1])
    return init(jax.random.key(0)) if concrete else jax.eval_shape(init, jax.random.key(0))


def _hits(params, rule):
    return [p for p, f in zip(leaf_paths(params), jax.tree.leaves(rule_mask(params, rule)), strict=True) if f]


def test_roles_on_transformer_lm_and_mlp():
    lm = _params("transformer_lm", (32,), width=8, depth=1, num_heads=2)
    assert _hits(lm, "embeddings") == ["0/0", "1/0"]  # token and position tables
    assert _hits(lm, "head") == ["5/0"]
    assert _hits(lm, "hidden_matrices") == ["2/1/0", "2/1/2", "3/1/0", "3/3/0"]  # qkv, out, MLP
    assert len(_hits(lm, "norms_and_biases")) == 18 - 7
    mlp = _params("mlp", (8, 8, 1), width=16, depth=2)
    assert _hits(mlp, "hidden_matrices") == ["1/0", "3/0"] and _hits(mlp, "head") == ["5/0"]
    assert _hits(mlp, ["head", "glob:1/*"]) == ["1/0", "1/1", "5/0"]


def test_roles_on_a_named_tree():
    w, v = 4, 10
    tree = {"embed": {"tokens": jnp.zeros((v, w))},
            "blocks": [{"attn": {"q": jnp.zeros((w, w)), "q_bias": jnp.zeros(w)},
                        "norm": {"scale": jnp.zeros(w)}}],
            "head": {"kernel": jnp.zeros((w, v))}}
    assert _hits(tree, "embeddings") == ["embed/tokens"]
    assert _hits(tree, "head") == ["head/kernel"]
    assert _hits(tree, "hidden_matrices") == ["blocks/0/attn/q"]
    assert _hits(tree, "norms_and_biases") == ["blocks/0/attn/q_bias", "blocks/0/norm/scale"]
    assert _hits(tree, "glob:blocks/*/attn/*") == ["blocks/0/attn/q", "blocks/0/attn/q_bias"]


def test_refusals():
    mlp = _params("mlp", (8, 8, 1), width=16, depth=1)
    with pytest.raises(ValueError, match=r"^parameter group rule 'embeddings' matches no parameter \(paths: "
                                         r"1/0, "):
        rule_mask(mlp, "embeddings")
    with pytest.raises(ValueError, match=r"^unknown parameter group rule 'hidden'; valid: hidden_matrices, "):
        rule_mask(mlp, "hidden")
    with pytest.raises(ValueError, match=r"^parameter '3/0' is claimed by groups 'matrices' and 'out'$"):
        group_masks(mlp, {"matrices": ["hidden_matrices", "head"], "out": "head"})


def test_muon_matrix_set_as_rules_equals_the_bool_mask():
    params = _params("transformer_lm", (32,), concrete=True, width=8, depth=1, num_heads=2)
    by_rule = OPTIMIZERS["muon"](0.02, muon_mask="hidden_matrices")
    by_mask = OPTIMIZERS["muon"](0.02, muon_mask=rule_mask(params, "hidden_matrices"))
    a, b = by_rule.init_fn(params), by_mask.init_fn(params)
    assert a.subtree_defs == b.subtree_defs  # the same leaves take Muon: the same updates follow
    # the embeddings and the head take AdamW (state x, m, v), the hidden matrices Muon (x, m)
    sizes = [s.num_leaves for s in a.subtree_defs]
    assert [sizes[i] for i in (0, 1, 4, 6, 17)] == [3, 3, 2, 2, 3] and sizes[16] == 3
    with pytest.raises(ValueError, match=r"^muon: muon_mask: parameter group rule 'glob:nope' matches no "):
        OPTIMIZERS["muon"](0.02, muon_mask=["hidden_matrices", "glob:nope"]).init_fn(params)


def test_a_rule_matching_nothing_is_refused_before_any_work(tmp_path, write_sweep, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    muon = {"name": "muon", "hparams": {"step_size": 0.02, "muon_mask": "embeddings"}}
    cfg = write_sweep(optimizers=[muon])
    r = CliRunner().invoke(app, ["sweep", str(cfg)])
    assert r.exit_code == 2, r.output
    assert f"{cfg}: optimizers[0].hparams" in r.output
    assert "muon: muon_mask: parameter group rule 'embeddings' matches no parameter" in r.output
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()
    listing = CliRunner().invoke(app, ["list", "optimizers", "muon"])
    text = " ".join(listing.output.split())
    assert "hidden_matrices, embeddings, head, norms_and_biases, glob:PATTERN" in text


def test_soap_matrix_set_as_rules():
    params = _params("transformer_lm", (32,), width=8, depth=1, num_heads=2)
    state = jax.eval_shape(OPTIMIZERS["soap"](0.01, soap_mask="hidden_matrices").init_fn, params)
    # rotated leaves keep (x, m, v, L, Q_L, R, Q_R); the embeddings, the head and 1-D leaves (x, m, v)
    sizes = [s.num_leaves for s in state.subtree_defs]
    assert [sizes[i] for i in (0, 1, 4, 6, 12, 16, 17)] == [3, 3, 7, 7, 7, 3, 3]
    small = {"w": jnp.linspace(-1.0, 1.0, 12).reshape(3, 4), "b": jnp.ones(4)}
    every, default = OPTIMIZERS["soap"](0.01, soap_mask="glob:w"), OPTIMIZERS["soap"](0.01)
    a, b = every.init_fn(small), default.init_fn(small)
    for t in range(2):  # step 0 gathers statistics, step 1 updates in the rotated basis
        g = jax.tree.map(lambda x, t=t: jnp.sin(3.0 * x + t), small)
        a, b = every.update_fn(t, g, a), default.update_fn(t, g, b)
    for x, y in zip(jax.tree.leaves(every.params_fn(a)), jax.tree.leaves(default.params_fn(b)), strict=True):
        np.testing.assert_array_equal(x, y)
