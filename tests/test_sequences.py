"""markov_lm (exact entropy rate), sequence tasks in the trainer, mixed precision, augmentation."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from harness.core.spec import TrialSpec
from harness.data import sequences
from harness.data.sources import load_dataset
from harness.train import loop as trainer
from harness.train import program
from harness.train.augment import make_augment, validate_augment
from models import stax
from models.zoo import ModelDef

# --------------------------------------------------------------------------------------- the chain


def _h(p):
    return -sum(x * math.log(x) for x in p if x > 0)


def test_entropy_rate_order1_by_hand():
    a, b = 0.1, 0.4  # P(0→1) = a, P(1→0) = b: π = (b, a) / (a + b)
    chain = sequences.MarkovChain(np.array([[1 - a, a], [b, 1 - b]]))
    np.testing.assert_allclose(chain.stationary, [b / (a + b), a / (a + b)], rtol=1e-12)
    want = (b * _h([1 - a, a]) + a * _h([b, 1 - b])) / (a + b)
    assert sequences.entropy_rate(chain) == pytest.approx(want, rel=1e-12)
    # order 1: every target has a full context, the floor is the entropy rate
    assert sequences.loss_floor(chain, 7) == pytest.approx(want, rel=1e-12)


def test_loss_floor_order2_by_hand():
    # order 2 over 2 tokens; target 0 sees one token: its floor is H(X1 | X0) = H(X0, X1) - H(X0)
    chain = sequences.make_chain(2, 2, 1.0, seed=3)
    pi = chain.stationary  # over (x0, x1)
    H2 = _h(pi.ravel())
    H1 = _h(pi.sum(1))
    H = sequences.entropy_rate(chain)
    want = ((H2 - H1) + 3 * H) / 4
    assert sequences.loss_floor(chain, 4) == pytest.approx(want, rel=1e-12)
    assert H2 - H1 >= H - 1e-12  # less context never helps


def test_entropy_rate_matches_the_sample():
    """The empirical mean of -log P(next | context) over a long stationary sample approaches H."""
    chain = sequences.make_chain(4, 2, 0.5, seed=1)
    seq = sequences.sample_sequences(chain, 200, 501, np.random.default_rng(0))
    nll = -np.log(chain.probs[seq[:, :-2], seq[:, 1:-1], seq[:, 2:]])
    H = sequences.entropy_rate(chain)
    assert abs(nll.mean() - H) < 4 * nll.std() / math.sqrt(nll.size) + 1e-3
    # the start contexts are stationary: their frequencies match π
    freq = np.bincount(seq[:, 0] * 4 + seq[:, 1], minlength=16) / 200
    assert np.abs(freq - chain.stationary.ravel()).max() < 0.1


def test_markov_lm_dataset():
    ds = load_dataset("markov_lm", num_train=64, num_valid=16, num_test=16)
    assert ds.task == "sequence" and ds.input_shape == (32,) and ds.num_classes == 16
    assert ds.x_train.shape == ds.y_train.shape == (64, 32) and ds.x_train.dtype == np.int32
    np.testing.assert_array_equal(ds.x_train[:, 1:], ds.y_train[:, :-1])  # next-token targets
    assert ds.x_train.min() >= 0 and ds.x_train.max() < 16
    # the defaults' chain (seed 0): pinned numbers the workload target is set from
    assert ds.entropy_rate == pytest.approx(1.848677, abs=1e-6)
    assert ds.loss_floor == pytest.approx(1.874714, abs=1e-6)
    again = sequences.markov_lm(num_train=64, num_valid=16, num_test=16)
    np.testing.assert_array_equal(again.x_train, ds.x_train)
    other = sequences.markov_lm(num_train=64, num_valid=16, num_test=16, seed=1)
    assert not np.array_equal(other.x_train, ds.x_train)
    with pytest.raises(ValueError, match="markov_lm needs vocab_size >= 2"):
        sequences.markov_lm(vocab_size=1)


def test_pack_bytes():
    x, y = sequences.pack_bytes(["ab", "cde"], seq_len=3)
    # "ab\0cde\0" = 97 98 0 99 100 101 0 -> one window of 4 bytes
    np.testing.assert_array_equal(x, [[97, 98, 0]])
    np.testing.assert_array_equal(y, [[98, 0, 99]])
    assert x.dtype == np.int32
    x, _ = sequences.pack_bytes(["é" * 10], seq_len=2, max_sequences=3)
    assert x.shape == (3, 2) and x.max() < 256
    with pytest.raises(ValueError, match="fewer than one window"):
        sequences.pack_bytes(["a"], seq_len=8)


# ----------------------------------------------------------------------- a stand-in sequence model


def _seq_ce(logits, targets):
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


def _seq_acc(logits, targets):
    return jnp.mean((jnp.argmax(logits, -1) == targets).astype(jnp.float32))


def bigram_mlp(*, input_shape, num_classes, width: int = 32):
    """Stand-in for transformer_lm: embeds (x_{t-1}, x_t) and predicts x_{t+1} with an MLP, so it can
    represent an order-2 chain exactly."""
    V = num_classes
    emb_init = jax.nn.initializers.normal(1.0)
    dense_init, dense_apply = stax.serial(stax.Dense(width), stax.Relu, stax.Dense(V))

    def init(rng, shape):
        k1, k2 = jax.random.split(rng)
        _, p = dense_init(k2, (-1, 2 * width))
        return (*tuple(shape), V), (emb_init(k1, (V, width)), p), ()

    def apply(params, state, tokens, *, rng=None, train):
        emb, p = params
        e = emb[tokens]
        prev = jnp.concatenate([jnp.zeros_like(e[:, :1]), e[:, :-1]], axis=1)
        h = jnp.concatenate([prev, e], -1)
        return dense_apply(p, h), state

    return ModelDef(name="bigram_mlp", task="sequence", init=init, apply=apply, loss=_seq_ce,
                    metrics={"accuracy": _seq_acc}, flops_per_example=lambda s=None: None,
                    input_shape=tuple(input_shape), hparams={"width": width})


@pytest.fixture
def standin(monkeypatch):
    real = program.default_registries

    def regs():
        r = real()
        return dataclasses.replace(r, models={**r.models, "bigram_mlp": bigram_mlp})

    monkeypatch.setattr(program, "default_registries", regs)


def _spec(**kw):
    base = dict(sweep="t", model="bigram_mlp", optimizer="adam", schedule="constant",
                dataset="markov_lm", seed=0, steps=200, batch_size=64, eval_every=100,
                steps_per_dispatch=50, optimizer_hparams={"step_size": 1e-2},
                dataset_hparams={"num_train": 2048, "num_valid": 256, "num_test": 256})
    base.update(kw)
    return TrialSpec.make(**base)


def _ds():
    return load_dataset("markov_lm", num_train=2048, num_valid=256, num_test=256)


def test_sequence_task_and_bfloat16(standin, monkeypatch, tmp_path):
    """A sequence task trains towards the dataset's floor; mixed precision (float32 parameters,
    optimizer state and loss, bfloat16 compute) gives curves within 0.03 nats (eval) / 0.05 (train)
    of float32 at every point, and its throughput counts against the bfloat16 peak."""
    ds = _ds()
    f32 = trainer.run_trial(_spec(), dataset=ds, measure_perf=False)
    assert f32.status == "finished"
    c = f32.curves
    assert c.eval_loss[0] > math.log(16) - 0.3  # untrained: no better than uniform
    assert c.eval_loss[-1] < c.eval_loss[0] - 0.5
    assert f32.extra["loss_floor"] == pytest.approx(ds.loss_floor)
    assert f32.extra["entropy_rate"] == pytest.approx(ds.entropy_rate)
    gap = c.eval_loss[-1] - ds.loss_floor
    assert 0.0 < gap < 0.5  # a model cannot beat the floor (up to sampling noise of the split)
    assert 0.3 < c.eval_accuracy[-1] < 1.0

    from harness.train import timing

    seen = []

    def fake_peak(device=None, dtype=jnp.float32, **kw):
        seen.append(jnp.dtype(dtype).name)
        return {"bfloat16": 2e9, "float32": 1e9}[jnp.dtype(dtype).name]

    monkeypatch.setattr(timing, "device_peak_flops", fake_peak)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))  # a re-timed peak is cached here
    monkeypatch.setattr(timing, "_PEAK", {})
    monkeypatch.setattr(timing, "_RETIMED", set())
    bf16 = trainer.run_trial(_spec(dtype="bfloat16"), dataset=ds)
    np.testing.assert_allclose(bf16.curves.eval_loss, f32.curves.eval_loss, atol=0.03)
    np.testing.assert_allclose(bf16.curves.train_loss, f32.curves.train_loss, atol=0.05)
    assert bf16.curves.eval_loss != f32.curves.eval_loss  # it really computed in bf16
    # the bf16 peak, never the f32 one (asked again if the step beat it: timing re-times the peak)
    assert bf16.perf.dtype == "bfloat16" and bf16.perf.peak_flops == 2e9 and set(seen) == {"bfloat16"}
    # parameters and optimizer state stay float32, the loss is float32
    prog = program.program_for(_spec(dtype="bfloat16"), ds)
    state, _ = prog.init(jax.random.PRNGKey(0), 1e-3)
    assert {a.dtype for a in jax.tree_util.tree_leaves(state.opt_state)} == {jnp.dtype(jnp.float32)}
    loss, _ = prog.loss(prog.params(state), state.model_state, prog.entry.x_train[:4],
                        prog.entry.y_train[:4], None)
    assert loss.dtype == jnp.float32


# ---------------------------------------------------------------------------------- augmentation


def test_crop_and_flip_by_hand():
    x = jnp.arange(2 * 4 * 4 * 1, dtype=jnp.float32).reshape(2, 4, 4, 1)
    flip = make_augment({"flip": True})
    out = np.asarray(flip(x, jax.random.PRNGKey(0)))
    for i in range(2):  # each example is either itself or mirrored along W
        assert np.array_equal(out[i], x[i]) or np.array_equal(out[i], x[i, :, ::-1])
    crop = make_augment({"crop_pad": 1})
    out = np.asarray(crop(x, jax.random.PRNGKey(1)))
    padded = np.pad(np.asarray(x), ((0, 0), (1, 1), (1, 1), (0, 0)))
    for i in range(2):  # a 4×4 window of the zero-padded 6×6 image
        assert any(np.array_equal(out[i], padded[i, a:a + 4, b:b + 4]) for a in range(3) for b in range(3))
    assert make_augment({}) is None
    with pytest.raises(ValueError, match=r"unknown augment hyperparameter\(s\) \['rotate'\]"):
        validate_augment({"rotate": 1})
    with pytest.raises(ValueError, match=r"augment\.crop_pad must be an int >= 0"):
        validate_augment({"crop_pad": -1})


def test_augmentation_reproducible_and_changes_the_batch():
    ds = load_dataset("digits")
    spec = TrialSpec.make(sweep="t", model="mlp", optimizer="adam", schedule="constant",
                          dataset="digits", seed=0, steps=10, batch_size=32, eval_every=10,
                          steps_per_dispatch=10, optimizer_hparams={"step_size": 1e-3},
                          model_hparams={"width": 16, "depth": 1},
                          augment={"crop_pad": 1, "flip": True})
    a = trainer.run_trial(spec, dataset=ds, measure_perf=False)
    b = trainer.run_trial(spec, dataset=ds, measure_perf=False)
    assert a.curves.train_loss == b.curves.train_loss and a.curves.eval_loss == b.curves.eval_loss
    plain = trainer.run_trial(TrialSpec.make(**{**spec.to_dict(), "augment": {}}), dataset=ds,
                              measure_perf=False)
    assert plain.curves.train_loss != a.curves.train_loss
    # the augmented batch differs from the plain one, and is keyed by the data key and the step
    prog = program.program_for(spec, ds)
    st, _ = prog.init(jax.random.PRNGKey(0), 1e-3)
    xb = prog.entry.x_train[:32]
    a0 = prog.augment(xb, st.data_key, jnp.int32(0))
    assert not np.array_equal(np.asarray(a0), np.asarray(xb))
    np.testing.assert_array_equal(a0, prog.augment(xb, st.data_key, jnp.int32(0)))
    assert not np.array_equal(np.asarray(a0), np.asarray(prog.augment(xb, st.data_key, jnp.int32(1))))
    # spec identity: augment is in the trial id only when set
    assert "augment" not in TrialSpec.make(**{**spec.to_dict(), "augment": {}}).to_dict()
    assert spec.to_dict()["augment"] == {"crop_pad": 1, "flip": True}
