"""SOAP (``optimizers.modern_soap``), which has no Optax twin: its eigenbasis against
``numpy.linalg.eigh``, one step written out from the paper's algorithm with numpy, the refresh
frequency, the block bound, a traced step size, and training progress."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optimizers as O


def _grad(shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


def test_eigenbasis_is_numpys_eigh():
    x, g = _grad((4, 6), 1), _grad((4, 6), 2)
    opt = O.soap(0.1)
    s = opt.update_fn(0, g, opt.init_fn(x))
    _, _, _, sl, ql, sr, qr = jax.tree.unflatten(s.subtree_defs[0], s.packed_state[0])
    gn = np.asarray(g, np.float64)
    np.testing.assert_allclose(sl, 0.05 * gn @ gn.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sr, 0.05 * gn.T @ gn, rtol=1e-5, atol=1e-6)
    for stat, q in ((sl, ql), (sr, qr)):
        w, vecs = np.linalg.eigh(np.asarray(stat, np.float64))
        q = np.asarray(q, np.float64)
        np.testing.assert_allclose(q.T @ q, np.eye(len(w)), atol=1e-5)  # orthonormal
        np.testing.assert_allclose(q.T @ np.asarray(stat) @ q, np.diag(w), atol=1e-5)  # diagonalises
        distinct = np.abs(w) > 1e-6 * np.abs(w).max()  # R has a 2-d null space (rank 4 of 6)
        np.testing.assert_allclose(np.abs(q.T @ vecs)[np.ix_(distinct, distinct)], np.eye(distinct.sum()),
                                   atol=1e-4)  # same eigenvectors up to sign


def test_two_steps_by_hand():
    """The algorithm box with numpy's eigenvectors: step 0 leaves x and stores L = (1-s) G0 G0^T,
    R = (1-s) G0^T G0 and their eigenvectors; step 1: G' = Q_L^T G1 Q_R; m = (1-b1) G';
    v = (1-b2) G'^2; N = Q_L (m / (sqrt(v) + eps)) Q_R^T sqrt(1-b2)/(1-b1); x1 = x - lr N;
    x2 = x1 - lr wd x1. (Eigenvector signs cancel in N; a square G0 keeps both statistics full
    rank with distinct eigenvalues, so the bases are unique up to sign.)"""
    x, g0, g1 = _grad((5, 5), 3), _grad((5, 5), 4), _grad((5, 5), 5)
    lr, b1, b2, eps, wd = 0.1, 0.9, 0.99, 1e-8, 0.01
    opt = O.soap(lr, b1=b1, b2=b2, eps=eps, weight_decay=wd)
    s = opt.update_fn(0, g0, opt.init_fn(x))
    np.testing.assert_array_equal(opt.params_fn(s), x)
    got = opt.params_fn(opt.update_fn(1, g1, s))
    xn, g0n, g1n = (np.asarray(a, np.float64) for a in (x, g0, g1))
    ql = np.linalg.eigh((1 - b2) * g0n @ g0n.T)[1]
    qr = np.linalg.eigh((1 - b2) * g0n.T @ g0n)[1]
    gp = ql.T @ g1n @ qr
    m, v = (1 - b1) * gp, (1 - b2) * gp**2
    n = ql @ (m / (np.sqrt(v) + eps)) @ qr.T * np.sqrt(1 - b2) / (1 - b1)
    x1 = xn - lr * n
    np.testing.assert_allclose(got, x1 - lr * wd * x1, rtol=1e-4, atol=1e-5)
    # a 1-d leaf takes AdamW steps (step 1: N = sign(g1))
    b, c = _grad((5,), 6), _grad((5,), 7)
    got_b = opt.params_fn(opt.update_fn(1, c, opt.update_fn(0, b, opt.init_fn(b))))
    b1_ = np.asarray(b) - lr * np.sign(np.asarray(c))
    np.testing.assert_allclose(got_b, b1_ - lr * wd * b1_, rtol=1e-5, atol=1e-6)


def test_refresh_frequency_and_block_bound():
    x = _grad((3, 5), 6)
    opt = O.soap(0.01, precondition_frequency=3)
    s = opt.init_fn(x)
    bases = []
    for i in range(5):
        s = opt.update_fn(i, _grad((3, 5), 10 + i), s)
        bases.append(np.asarray(s.packed_state[0][4]))
    assert np.array_equal(bases[0], bases[1]) and np.array_equal(bases[1], bases[2])
    assert not np.allclose(np.abs(bases[2]), np.abs(bases[3]))  # refreshed at step 3
    narrow = O.soap(0.01, max_precond_dim=4).init_fn(x)  # rows 3 <= 4 rotated, columns 5 > 4 not
    assert len(narrow.packed_state[0]) == 5
    assert O.modern_soap.soap_sides((3, 5), 4) == (True, False)
    assert O.modern_soap.soap_sides((2, 3, 4), 100) == (False, False)
    with pytest.raises(ValueError, match="precondition_frequency"):
        O.soap(0.1, precondition_frequency=0)


def test_trains_jitted_with_vmapped_step_size():
    rng = np.random.default_rng(0)
    w_true = jnp.asarray(rng.standard_normal((4, 4)), jnp.float32)
    xs = jnp.asarray(rng.standard_normal((64, 4)), jnp.float32)
    params = {"w": jnp.asarray(rng.standard_normal((4, 4)), jnp.float32), "b": jnp.zeros(4, jnp.float32)}

    def loss(p):
        return jnp.mean((xs @ p["w"] + p["b"] - xs @ w_true) ** 2)

    def run(lr, steps):
        opt = O.soap(lr, weight_decay=0.0, precondition_frequency=5)

        def body(s, i):
            return opt.update_fn(i, jax.grad(loss)(opt.params_fn(s)), s), None

        return opt.params_fn(jax.lax.scan(body, opt.init_fn(params), jnp.arange(steps))[0])

    # the vmapped run is the run alone, on a fixed sequence of random gradients (on the loss's
    # own gradients, Adam's ratio at coordinates where the rotated gradient is ~0 is +-1 by
    # rounding, so batched and unbatched eigh/matmul part ways; that is SOAP's, not vmap's)
    gs = jnp.asarray(rng.standard_normal((12, 5, 3)), jnp.float32)

    def fixed(lr):
        opt = O.soap(lr, precondition_frequency=4)

        def body(s, ig):
            return opt.update_fn(ig[0], ig[1], s), None

        return opt.params_fn(jax.lax.scan(body, opt.init_fn(gs[0]), (jnp.arange(12), gs))[0])

    both = jax.jit(jax.vmap(fixed))(jnp.asarray([0.05, 0.01]))
    for k, lr in enumerate((0.05, 0.01)):
        np.testing.assert_allclose(both[k], jax.jit(fixed)(lr), rtol=1e-4, atol=1e-6)
    assert not np.allclose(both[0], both[1])
    final = jax.jit(jax.vmap(lambda lr: loss(run(lr, 60))))(jnp.asarray([0.05, 0.01]))
    assert final[0] < 0.1 * loss(params) and final[0] != final[1]
