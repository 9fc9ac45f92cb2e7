"""The language-model loss: log-sum-exp minus the target logit, the blocked head + loss, and the
``gpt`` options that use them (``loss_block``, ``remat``): values and gradients against the
whole-logits ``log_softmax`` formula at float32 tolerance."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import lm_loss, stax
from models.gpt import check_gpt
from models.zoo import MODELS, sequence_cross_entropy

V = 97


def _log_softmax_loss(logits, targets):
    """The loss as the zoo computed it before: a whole ``log_softmax``, a gather, a masked mean."""
    logp = jax.nn.log_softmax(jnp.asarray(logits).astype(jnp.float32), axis=-1)
    t = jnp.asarray(targets, jnp.int32)
    valid = t >= 0
    picked = jnp.take_along_axis(logp, jnp.maximum(t, 0)[..., None], axis=-1)[..., 0]
    return -jnp.sum(jnp.where(valid, picked, 0.0)) / jnp.maximum(jnp.sum(valid), 1).astype(jnp.float32)


def _data(shape=(3, 11), seed=0):
    rng = np.random.default_rng(seed)
    logits = jnp.asarray(rng.normal(size=(*shape, V)) * 4, jnp.float32)
    t = rng.integers(0, V, shape)
    t[0, :4] = -1  # padding
    return logits, jnp.asarray(t, jnp.int32)


def test_sequence_cross_entropy_values_and_gradients_equal_the_log_softmax_form():
    logits, t = _data()
    v1, g1 = jax.value_and_grad(sequence_cross_entropy)(logits, t)
    v0, g0 = jax.value_and_grad(_log_softmax_loss)(logits, t)
    np.testing.assert_allclose(v1, v0, rtol=1e-6)
    np.testing.assert_allclose(g1, g0, rtol=1e-5, atol=1e-8)
    assert float(jnp.abs(g1[0, :4]).max()) == 0.0  # padding: no gradient
    # hand-computed: one token, logits (0, ln 3): p(target 1) = 3/4
    z = jnp.asarray([[[0.0, np.log(3.0)]]], jnp.float32)
    np.testing.assert_allclose(sequence_cross_entropy(z, jnp.asarray([[1]])), -np.log(0.75), rtol=1e-6)
    assert sequence_cross_entropy(logits.astype(jnp.bfloat16), t).dtype == jnp.float32


def _head(seed=1, F=16, bias=True):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(2, 13, F)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(F, V)) * 0.3, jnp.float32)
    b = jnp.asarray(rng.normal(size=(V,)), jnp.float32) if bias else None
    return x, k, b


@pytest.mark.parametrize("bias,cap,form,block", [(True, 0.0, "algebraic", 5), (False, 3.0, "tanh", 26),
                                                 (True, 15.0, "algebraic", 7)])
def test_blocked_head_loss_equals_the_whole_logits_loss(bias, cap, form, block):
    x, k, b = _head(bias=bias)
    _, t = _data((2, 13), seed=2)

    def whole(x, k, b):
        z = x @ k + (0.0 if b is None else b)
        return jnp.sum(lm_loss.token_nll(stax.soft_cap(z, cap, form), t)[0])

    def blocked(x, k, b):
        return lm_loss.head_nll_sum(x, k, b, t, cap, form, block)

    argnums = (0, 1, 2) if bias else (0, 1)
    v0, g0 = jax.value_and_grad(whole, argnums)(x, k, b)
    v1, g1 = jax.jit(jax.value_and_grad(blocked, argnums))(x, k, b)
    np.testing.assert_allclose(v1, v0, rtol=1e-5)
    for a, c in zip(g1, g0, strict=True):
        np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-5)
    nll, hits, count = lm_loss.head_stats(x, k, b, t, cap, form, block)
    z = stax.soft_cap(x @ k + (0.0 if b is None else b), cap, form)
    np.testing.assert_allclose(nll, v0, rtol=1e-5)
    assert float(count) == int(jnp.sum(t >= 0))
    assert float(hits) == int(jnp.sum((jnp.argmax(z, -1) == t) & (t >= 0)))
    # vmapped (stacked trials): each trial's gradient is its own
    bs = None if b is None else jnp.stack([b, b])
    gv = jax.vmap(jax.grad(blocked))(jnp.stack([x, 2 * x]), jnp.stack([k, k]), bs)
    np.testing.assert_allclose(gv[1], jax.grad(whole)(2 * x, k, b), rtol=1e-4, atol=1e-5)


def test_loss_block_tokens_auto_blocks_only_above_the_byte_budget():
    assert lm_loss.loss_block_tokens(100, 50304, None) is None  # 20 MB of logits: whole
    assert lm_loss.loss_block_tokens(64 * 1024, 50304, 0) is None  # 0: always whole
    b = lm_loss.loss_block_tokens(64 * 1024, 50304, None)  # 13 GB of logits at the track's shape
    assert 4 * b * 50304 <= lm_loss.AUTO_BLOCK_BYTES * 1.01 and (64 * 1024) % b == 0
    assert lm_loss.loss_block_tokens(10, 7, 4) == 2 and lm_loss.loss_block_tokens(11, 7, 3) == 3
    assert lm_loss.loss_block_tokens(10, 7, 50) == 10


def _gpt(**hp):
    return MODELS["gpt"](input_shape=(12,), num_classes=V, width=16, depth=1, num_heads=2, zero_init=False,
                         logit_softcap=15.0, **hp)


@pytest.mark.parametrize("hp", [{"loss_block": 0}, {"loss_block": 7}, {"loss_block": 5, "tied_head": True},
                                {"remat": "block"}])
def test_gpt_fused_loss_and_remat_equal_the_loss_of_the_logits(hp):
    base, model = _gpt(), _gpt(**hp)
    _, params, state = model.init(jax.random.PRNGKey(0), (3, 12))
    tok = jax.random.randint(jax.random.PRNGKey(1), (3, 13), 0, V)
    x, y = tok[:, :-1], tok[:, 1:].at[0, :3].set(-1)

    ref = model if hp.get("tied_head") else base  # a tied head: the model's own logits are the reference

    def reference(p):
        return _log_softmax_loss(ref.apply(p, state, x, train=True)[0], y)

    def fused(p):
        return model.fused_loss(p, state, x, y, train=True)[0]
    v0, g0 = jax.value_and_grad(reference)(params)
    v1, g1 = jax.jit(jax.value_and_grad(fused))(params)
    np.testing.assert_allclose(v1, v0, rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), g1, g0)
    loss, metrics, _ = model.fused_loss(params, state, x, y, train=False)
    logits = model.apply(params, state, x, train=False)[0]
    np.testing.assert_allclose(loss, v0, rtol=1e-5)
    np.testing.assert_allclose(metrics["accuracy"], model.metrics["accuracy"](logits, y), rtol=1e-6)


@pytest.mark.parametrize("key,value,message", [
    ("remat", "full", "gpt: remat must be one of ['none', 'block'], got 'full'"),
    ("loss_block", -1, "gpt: loss_block must be an integer >= 0 (0: whole logits) or null (auto), got -1"),
    ("loss_block", 2.5, "gpt: loss_block must be an integer >= 0 (0: whole logits) or null (auto), got 2.5"),
])
def test_check_gpt_refuses_bad_remat_and_loss_block(key, value, message):
    hp = dict(vocab_size=V, width=16, depth=1, num_heads=2, mlp="relu2", mlp_ratio=4.0, logit_softcap=0.0,
              softcap_form="algebraic", rope_base=1024.0, rope_fraction=0.5, attn_scale=None, norm_eps=1e-6)
    with pytest.raises(ValueError) as err:
        check_gpt(**hp, **{key: value})
    assert str(err.value) == message


def test_eval_batch_follows_the_memory_budget(monkeypatch):
    from harness.train import eval_memory
    from harness.train.eval_memory import eval_batch_size, eval_bytes_per_example
    model = _gpt()
    per = eval_bytes_per_example(model, probe=4)
    assert per >= 4 * 12 * 16  # at least the example's float32 features
    assert eval_batch_size(model, 1000, 1024, budget=3.5 * per) == 3  # memory binds
    monkeypatch.setattr(eval_memory, "eval_bytes_per_example", None)  # far under the budget: no probe
    assert eval_batch_size(model, 1000, 1024, budget=1e12) == 1000
    monkeypatch.undo()
    assert eval_batch_size(model, 1000, 2, budget=1e12) == 2  # the count limit binds
    assert eval_batch_size(model, 5, 1024, budget=1e12) == 5  # the split binds
    assert eval_batch_size(model, 1000, 1024, budget=1.0) == 1  # never 0
    cls = MODELS["mlp"](input_shape=(4,), num_classes=3)
    assert eval_batch_size(cls, 5000, 1024, budget=1.0) == 1024  # not a sequence model: no probe


def test_the_trainer_trains_and_evaluates_gpt_through_its_fused_loss():
    """The program's training loss and the whole-split evaluation of a ``gpt`` with 3-token blocks
    equal the loss and accuracy of its whole logits."""
    from harness.core.spec import TrialSpec
    from harness.data.sources import load_dataset
    from harness.train.program import program_for

    hp = {"seq_len": 8, "num_train": 64, "num_valid": 40, "num_test": 8}
    spec = TrialSpec.make(sweep="t", model="gpt", optimizer="adam", schedule="constant", dataset="markov_lm",
                          dataset_hparams=hp, seed=0, steps=1, batch_size=4, eval_every=1,
                          model_hparams={"width": 8, "depth": 1, "num_heads": 1, "loss_block": 3},
                          steps_per_dispatch=1, optimizer_hparams={"step_size": 1e-3})
    program = program_for(spec, load_dataset("markov_lm", **hp))
    entry = program.entry
    params, mstate = entry.init_params(jax.random.PRNGKey(0))
    x, y = entry.x_valid, entry.y_valid
    logits = entry.model.apply(params, mstate, x, train=False)[0]
    loss, _ = program.loss(params, mstate, x[:4], y[:4], None)
    np.testing.assert_allclose(loss, _log_softmax_loss(logits[:4], y[:4]), rtol=1e-5)
    v_loss, mets = jax.jit(entry.evaluate)(params, mstate, x, y)
    np.testing.assert_allclose(v_loss, _log_softmax_loss(logits, y), rtol=1e-5)
    np.testing.assert_allclose(mets["accuracy"], entry.model.metrics["accuracy"](logits, y), rtol=1e-6)
