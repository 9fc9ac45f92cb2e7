"""The sequence layers of models.stax: each against a hand-written formula and flax.linen at 1e-5.

Values and gradients (w.r.t. inputs and params) are compared; shapes are tiny so the whole file
compiles in seconds. flax is in the ``dev`` extra; the flax halves skip without it.
"""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import stax
from models.stax_seq import matmul_2d

KEY = jax.random.PRNGKey(0)
TOL = {"rtol": 1e-5, "atol": 1e-5}


def _normal(shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _close(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), **TOL), a, b)


def _flax():
    return pytest.importorskip("flax.linen")


def _grads(f, *args):
    """Value and gradients of ``sum(f(*args) * w)`` for a fixed random cotangent ``w`` (one jit:
    compiling once is cheaper on CPU than running the ops one by one)."""
    w = _normal(jax.eval_shape(f, *args).shape, seed=7)
    vjp = jax.grad(lambda *a: jnp.sum(f(*a) * w), argnums=tuple(range(len(args))))
    return jax.jit(lambda *a: (f(*a), vjp(*a)))(*args)


# --------------------------------------------------------------------------------------------------
# Embedding


def test_embedding_by_hand_and_flax():
    nn = _flax()
    init, apply = stax.Embedding(7, 4)
    out_shape, (table,) = init(KEY, (2, 3))
    assert out_shape == (2, 3, 4) and table.shape == (7, 4) and table.dtype == jnp.float32
    # default init: normal with stddev 1/sqrt(features) (flax.linen.Embed's)
    _, (big,) = stax.Embedding(50, 400)[0](KEY, (1,))
    assert abs(float(jnp.std(big)) - 1 / math.sqrt(400)) < 0.005
    ids = jnp.array([[0, 6, 3], [3, 1, 0]], jnp.int32)
    table = _normal((7, 4))
    np.testing.assert_array_equal(apply((table,), ids), np.asarray(table)[np.asarray(ids)])
    # gradient w.r.t. the table: row r gets the sum of the cotangents of the positions holding r
    out, (g,) = _grads(lambda t: apply((t,), ids), table)
    w = np.asarray(_normal(out.shape, seed=7))
    expected = np.zeros((7, 4), np.float32)
    for (i, j), r in np.ndenumerate(np.asarray(ids)):
        expected[r] += w[i, j]
    np.testing.assert_allclose(g, expected, **TOL)
    # flax.linen.Embed with the same table
    emb = nn.Embed(7, 4)
    fout, (fg,) = _grads(lambda t: emb.apply({"params": {"embedding": t}}, ids), table)
    _close((out, g), (fout, fg))
    # dtype: the table's, or dtype=
    assert stax.Embedding(7, 4, dtype=jnp.bfloat16)[1]((table,), ids).dtype == jnp.bfloat16
    with pytest.raises(ValueError, match="inputs must be integer token ids, got dtype float32"):
        apply((table,), ids.astype(jnp.float32))
    # an id outside [-V, V) gives a row of NaN (a wrong vocabulary is a non-finite loss, not a clip)
    assert np.isnan(np.asarray(apply((table,), jnp.array([7])))).all()
    with pytest.raises(ValueError, match="vocab_size and features must be positive"):
        stax.Embedding(0, 4)


# --------------------------------------------------------------------------------------------------
# LayerNorm


def test_layernorm_by_hand_and_flax():
    nn = _flax()
    x = _normal((2, 3, 5)) * 3.0 + 1.0
    init, apply = stax.LayerNorm(epsilon=1e-5)
    out_shape, (beta, gamma) = init(KEY, x.shape)
    assert out_shape == x.shape
    np.testing.assert_array_equal(beta, np.zeros(5)) and np.testing.assert_array_equal(gamma, np.ones(5))
    beta, gamma = _normal((5,), 1), _normal((5,), 2)

    def by_hand(x, beta, gamma):
        mu = jnp.mean(x, -1, keepdims=True)
        var = jnp.mean((x - mu) ** 2, -1, keepdims=True)
        return gamma * (x - mu) / jnp.sqrt(var + 1e-5) + beta

    ours = _grads(lambda x, b, g: apply((b, g), x), x, beta, gamma)
    _close(ours, _grads(by_hand, x, beta, gamma))
    ln = nn.LayerNorm(epsilon=1e-5)
    flax_out = _grads(lambda x, b, g: ln.apply({"params": {"bias": b, "scale": g}}, x), x, beta, gamma)
    _close(ours, flax_out)
    # center/scale off: no params in their place, and the plain standardisation
    _, p = stax.LayerNorm(center=False, scale=False)[0](KEY, x.shape)
    assert p == ((), ())
    z = stax.LayerNorm(epsilon=1e-5, center=False, scale=False)[1](p, x)
    _close(z, by_hand(x, 0.0, 1.0))
    # bfloat16 in, bfloat16 out; statistics in float32 (close to the float32 result)
    zb = apply((beta, gamma), x.astype(jnp.bfloat16))
    assert zb.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(zb, np.float32), apply((beta, gamma), x), atol=0.05)
    with pytest.raises(stax.ShapeError, match=r"LayerNorm\(eps=1e-06\): needs a known last"):
        stax.LayerNorm()[0](KEY, ())


# --------------------------------------------------------------------------------------------------
# Positional embeddings


def test_learned_positional_embedding_by_hand_and_flax():
    nn = _flax()
    init, apply = stax.PositionalEmbedding(6)
    x = _normal((2, 4, 3))
    out_shape, (table,) = init(KEY, x.shape)
    assert out_shape == x.shape and table.shape == (6, 3)
    table = _normal((6, 3), 1)
    ours = _grads(lambda x, t: apply((t,), x), x, table)
    _close(ours, _grads(lambda x, t: x + t[:4][None], x, table))
    emb = nn.Embed(6, 3)
    flax_out = _grads(lambda x, t: x + emb.apply({"params": {"embedding": t}}, jnp.arange(4))[None],
                      x, table)
    _close(ours, flax_out)
    np.testing.assert_array_equal(ours[1][1][4:], 0.0)  # unused positions get no gradient
    with pytest.raises(stax.ShapeError, match="sequence length 7 exceeds max_len 6"):
        init(KEY, (2, 7, 3))
    with pytest.raises(stax.ShapeError, match=r"expected an input shape of rank 3 \(batch, length"):
        init(KEY, (2, 3))


def test_sinusoidal_positional_embedding_by_hand():
    # flax.linen has no sinusoidal layer; the reference is Vaswani et al.'s formula in plain Python.
    T, F = 5, 6
    table = np.asarray(stax.sinusoidal_table(T, F))
    for p in range(T):
        for i in range(F):
            angle = p / 10_000 ** ((i - i % 2) / F)
            want = math.sin(angle) if i % 2 == 0 else math.cos(angle)
            assert abs(table[p, i] - want) < 1e-5, (p, i)
    assert stax.sinusoidal_table(3, 5).shape == (3, 5)  # odd width: the last column is a sine
    np.testing.assert_allclose(stax.sinusoidal_table(3, 5)[:, 4], np.sin(np.arange(3) / 10_000 ** 0.8),
                               **TOL)
    init, apply = stax.SinusoidalPositionalEmbedding()
    x = _normal((2, T, F))
    assert init(KEY, x.shape) == (x.shape, ())
    _close(apply((), x), x + table[None])
    _, (g,) = _grads(lambda x: apply((), x), x)
    _close(g, _normal(x.shape, seed=7))  # identity Jacobian
    assert apply((), x.astype(jnp.bfloat16)).dtype == jnp.bfloat16


# --------------------------------------------------------------------------------------------------
# Multi-head self-attention


def _attention_by_hand(x, W_qkv, b_qkv, W_out, b_out, H, causal):
    B, T, _ = x.shape
    inner = W_out.shape[0]
    D = inner // H
    qkv = x @ W_qkv + b_qkv
    q, k, v = (qkv[..., i * inner:(i + 1) * inner].reshape(B, T, H, D) for i in range(3))
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D)
    if causal:
        s = jnp.where(np.tril(np.ones((T, T), bool)), s, -1e30)
    a = jnp.exp(s - s.max(-1, keepdims=True))
    a = a / a.sum(-1, keepdims=True)
    o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(B, T, inner)
    return o @ W_out + b_out


@pytest.mark.parametrize("causal", [False, True])
def test_attention_by_hand_and_flax(causal):
    nn = _flax()
    B, T, F, H = 2, 4, 6, 2
    x = _normal((B, T, F))
    mha = nn.MultiHeadDotProductAttention(num_heads=H)
    fparams = mha.init(KEY, x)["params"]
    fparams = jax.tree.map(lambda p: p + 0.1 * _normal(p.shape, 3), fparams)  # non-zero biases
    from flax_reference import mha_to_stax

    init, apply = stax.MultiHeadSelfAttention(H, causal=causal)
    out_shape, p0 = init(KEY, x.shape)
    assert out_shape == x.shape
    assert [a.shape for a in p0] == [(F, 3 * F), (3 * F,), (F, F), (F,)]
    params = mha_to_stax(fparams)
    ours = _grads(lambda x, p: apply(p, x), x, params)
    _close(ours, _grads(lambda x, p: _attention_by_hand(x, *p, H, causal), x, params))
    mask = nn.make_causal_mask(jnp.ones((B, T))) if causal else None
    fout, (fgx, fgp) = _grads(lambda x, p: mha.apply({"params": p}, x, mask=mask), x, fparams)
    _close(ours, (fout, (fgx, mha_to_stax(fgp))))
    if causal:  # position t does not see t+1..: changing the last token leaves the others unchanged
        y2 = apply(params, x.at[:, -1].add(1.0))
        np.testing.assert_array_equal(y2[:, :-1], ours[0][:, :-1])


def test_attention_dropout_rng_rule_and_formula():
    B, T, F, H = 2, 3, 4, 2
    x = _normal((B, T, F))
    init, apply = stax.MultiHeadSelfAttention(H, dropout=0.5, out_dropout=0.25)
    _, params = init(KEY, x.shape)
    with pytest.raises(ValueError, match="requires apply_fun to be called with a PRNG key"):
        apply(params, x)
    rng = jax.random.PRNGKey(3)
    y = apply(params, x, rng=rng)
    # by hand: weights dropped (keep 0.5) with the first split key, output (keep 0.75) with the second
    r_attn, r_out = jax.random.split(rng)
    W_qkv, b_qkv, W_out, b_out = params
    qkv = (x @ W_qkv + b_qkv).reshape(B, T, 3, H, F // H)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    w = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(F // H), axis=-1)
    w = jnp.where(jax.random.bernoulli(r_attn, 0.5, w.shape), w / 0.5, 0.0)
    o = jnp.einsum("bhqk,bkhd->bqhd", w, v).reshape(B, T, F) @ W_out + b_out
    o = jnp.where(jax.random.bernoulli(r_out, 0.75, o.shape), o / 0.75, 0.0)
    _close(y, o)
    # test mode and stateful(train=False) are deterministic and need no rng
    det = stax.MultiHeadSelfAttention(H)[1](params, x)
    _close(stax.MultiHeadSelfAttention(H, dropout=0.5, mode="test")[1](params, x), det)
    init_s, apply_s = stax.stateful(stax.MultiHeadSelfAttention(H, dropout=0.5))
    assert init_s(KEY, x.shape)[2] == ()
    _close(apply_s(params, (), x, train=False)[0], det)
    _close(apply_s(params, (), x, train=True, rng=rng)[0],
           stax.MultiHeadSelfAttention(H, dropout=0.5)[1](params, x, rng=rng))
    # no dropout: train mode needs no rng
    _close(stax.MultiHeadSelfAttention(H)[1](params, x, rng=None), det)
    with pytest.raises(ValueError, match=r"dropout is a drop probability and must be in \[0, 1\)"):
        stax.MultiHeadSelfAttention(H, dropout=1.0)
    with pytest.raises(stax.ShapeError, match="qkv features 5 are not divisible by num_heads 2"):
        stax.MultiHeadSelfAttention(2, qkv_features=5)[0](KEY, (1, 3, 4))


def test_attention_bfloat16_params_float32():
    x = _normal((2, 3, 4))
    init, apply = stax.MultiHeadSelfAttention(2, causal=True)
    _, params = init(KEY, x.shape)
    yb = apply(params, x.astype(jnp.bfloat16))  # float32 params, bfloat16 compute
    assert yb.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(yb, np.float32), apply(params, x), atol=0.05)


# --------------------------------------------------------------------------------------------------
# Residual


def test_residual_by_hand_and_equivalent_to_fanout_sum():
    x = _normal((2, 3, 4))
    branch = (stax.LayerNorm(), stax.Dense(4))
    init, apply = stax.Residual(*branch)
    out_shape, params = init(KEY, x.shape)
    s_init, s_apply = stax.serial(*branch)
    assert out_shape == x.shape
    _close(params, s_init(KEY, x.shape)[1])  # params are exactly the inner serial's
    ours = _grads(lambda x, p: apply(p, x), x, params)
    _close(ours, _grads(lambda x, p: x + s_apply(p, x), x, params))
    fan = stax.serial(stax.FanOut(2), stax.parallel(stax.serial(*branch), stax.Identity), stax.FanInSum)
    _close(ours[0], fan[1]([[], (params, ()), []], x))
    # through stateful: BatchNorm state inside is threaded, dropout follows the train flag
    init_s, apply_s = stax.stateful(stax.Residual(stax.BatchNorm(axis=(0, 1)), stax.Dropout(0.5)))
    _, p, st = init_s(KEY, x.shape)
    y, st2 = apply_s(p, st, x, train=False)
    assert jax.tree.structure(st2) == jax.tree.structure(st)
    _close(y, x + x / jnp.sqrt(1.0 + 1e-5))  # running stats (0, 1); dropout off
    with pytest.raises(stax.ShapeError, match=r"Residual\[1\]: the residual branch maps \(2, 3, 4\) to"):
        stax.Residual(stax.Dense(5))[0](KEY, x.shape)


def test_matmul_2d_same_bits_as_einsum_and_kernel_gradient_without_a_transposed_copy():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(4, 16, 32)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(32, 48)) / 6, jnp.float32)

    def loss(mm):
        return lambda x, w: jnp.sum(jnp.sin(mm(x, w)))

    einsum = lambda x, w: jnp.einsum("...f,fo->...o", x, w)  # noqa: E731
    y = jax.jit(matmul_2d)(x, w)
    assert y.shape == (4, 16, 48)
    np.testing.assert_array_equal(y, jax.jit(einsum)(x, w))
    for a, b in zip(jax.jit(jax.grad(loss(matmul_2d), (0, 1)))(x, w),
                    jax.jit(jax.grad(loss(einsum), (0, 1)))(x, w), strict=True):
        np.testing.assert_array_equal(a, b)
    # XLA's CPU backend gave the einsum's kernel gradient a transposed copy of the (4, 16, 48)
    # output gradient and a slower product; the 2-D form contracts the tokens axis in place
    def copies(mm):
        hlo = jax.jit(jax.grad(loss(mm), 1)).lower(x, w).compile().as_text()
        return len(re.findall(r"= f32\[[\d,]+\]\{[\d,]+\} (?:copy|transpose)\(", hlo))
    if jax.default_backend() == "cpu":
        assert copies(matmul_2d) == 0
        assert copies(einsum) > 0  # the form it replaces, so the check above can fail
