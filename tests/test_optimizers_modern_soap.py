"""SOAP (``optimizers.modern_soap``), which has no Optax twin: its eigenbasis against
``numpy.linalg.eigh``, one step written out from the paper's algorithm with numpy, ten steps of
float64 parameters against an independent float64 SOAP in numpy (:class:`Soap64`), the refresh
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


class Soap64:
    """SOAP on one array in float64 numpy, written from the paper's algorithm (Vyas et al. 2024,
    Algorithm 3) with the conventions ``optimizers.soap`` states (those of the authors' code but
    exact ``eigh`` bases): the call index ``t`` counts from 0; call 0 only accumulates the
    statistics and takes the first bases; a later call rotates the gradient into the current
    bases, takes a bias-corrected Adam step there (eps added to ``sqrt(v)``), rotates it back,
    steps, decays the updated parameters by ``lr * wd``, then accumulates ``L = G G^T`` and
    ``R = G^T G``; at every ``t % freq == 0`` the bases become ``numpy.linalg.eigh``'s
    eigenvectors and the first moment is carried into them (the second is kept). A side longer
    than ``max_dim`` is not rotated; an array that is not 2-D takes AdamW steps."""

    def __init__(self, x0, lr, b1, b2, beta, eps, wd, freq, max_dim):
        self.x = np.array(x0, np.float64)
        self.lr, self.b1, self.b2, self.beta, self.eps, self.wd, self.freq = lr, b1, b2, beta, eps, wd, freq
        self.m, self.v, self.t = np.zeros_like(self.x), np.zeros_like(self.x), 0
        sides = self.x.shape if self.x.ndim == 2 else (max_dim + 1, max_dim + 1)  # not 2-D: none
        self.stats = [np.zeros((n, n)) if n <= max_dim else None for n in sides]
        self.bases = [np.eye(len(s)) if s is not None else None for s in self.stats]

    def rotate(self, a, back=False):
        ql, qr = self.bases if self.x.ndim == 2 else (None, None)
        if ql is not None:
            a = (ql if back else ql.T) @ a
        if qr is not None:
            a = a @ (qr.T if back else qr)
        return a

    def step(self, g):
        g, t = np.asarray(g, np.float64), self.t
        if t > 0:
            gp = self.rotate(g)
            self.m = self.b1 * self.m + (1 - self.b1) * gp
            self.v = self.b2 * self.v + (1 - self.b2) * gp * gp
            direction = self.rotate(self.m / (np.sqrt(self.v) + self.eps), back=True)
            self.x = self.x - self.lr * np.sqrt(1 - self.b2**t) / (1 - self.b1**t) * direction
            self.x = self.x - self.lr * self.wd * self.x
        outer = (g @ g.T, g.T @ g) if self.x.ndim == 2 else (None, None)
        self.stats = [None if s is None else self.beta * s + (1 - self.beta) * o
                      for s, o in zip(self.stats, outer, strict=True)]
        if t % self.freq == 0 and any(s is not None for s in self.stats):
            m = self.rotate(self.m, back=True)
            self.bases = [None if s is None else np.linalg.eigh(s)[1] for s in self.stats]
            self.m = self.rotate(m)
        self.t += 1
        return self.x


def _relative_to_travel(got, ref, x0):
    """``||got - ref|| / ||ref - x0||``: the difference against the distance the reference moved."""
    return float(np.linalg.norm(np.asarray(got) - ref) / np.linalg.norm(ref - x0))


SOAP64_SETTINGS = dict(b1=0.9, b2=0.95, shampoo_beta=0.9, weight_decay=0.01, precondition_frequency=3,
                       max_precond_dim=8)


def _soap64(x0, lr, eps):
    k = SOAP64_SETTINGS
    return Soap64(x0, lr, k["b1"], k["b2"], k["shampoo_beta"], eps, k["weight_decay"],
                  k["precondition_frequency"], k["max_precond_dim"])


def test_float64_matches_an_independent_float64_soap():
    """Ten steps of float64 parameters (bases refreshed at steps 0, 3, 6, 9) on fixed random
    gradients: a square leaf rotated on both sides, two rotated on one side only (the other
    longer than ``max_precond_dim``), a 1-D and a 3-D leaf (AdamW). Every statistic is full rank
    with distinct eigenvalues, so the bases are unique up to sign, which cancels. With the
    eigendecomposition in float32 (as it once ran) the difference was 6.0e-7; in float64 it is
    1.8e-15."""
    rng = np.random.default_rng(0)
    shapes = {"square": (6, 6), "rows": (4, 9), "cols": (9, 5), "bias": (6,), "kernel": (2, 3, 4)}
    x0 = {k: rng.standard_normal(s) for k, s in shapes.items()}
    grads = [{k: rng.standard_normal(s) for k, s in shapes.items()} for _ in range(10)]
    lr, eps = 0.05, 1e-8
    refs = {k: _soap64(x0[k], lr, eps) for k in shapes}
    with jax.enable_x64(True):
        opt = O.soap(lr, eps=eps, **SOAP64_SETTINGS)
        state = opt.init_fn(jax.tree.map(jnp.asarray, x0))
        update = jax.jit(opt.update_fn)
        for i, g in enumerate(grads):
            state = update(i, jax.tree.map(jnp.asarray, g), state)
            want = {k: refs[k].step(g[k]) for k in shapes}
        got = opt.params_fn(state)
        assert all(leaf.dtype == jnp.float64 for leaf in jax.tree.leaves(state.packed_state))
    assert O.modern_soap.soap_sides((4, 9), 8) == (True, False)
    assert O.modern_soap.soap_sides((9, 5), 8) == (False, True)
    for k in shapes:
        assert _relative_to_travel(got[k], want[k], x0[k]) <= 1e-8, k


def test_float64_least_squares_matches_an_independent_float64_soap():
    """Each implementation on its own full-batch gradients of a least-squares loss, ten steps.
    Step 1's gradient is step 0's (step 0 does not move the parameters), so the rotated gradient
    is diagonal up to rounding and Adam's ratio off the diagonal is rounding over eps. With the
    bases in float32 (as they once were) the float64 parameters were 0.032 apart after the first
    real step and 0.036 after ten (at eps 1e-8: 1.0 and 0.092); in float64, 8.8e-12 after ten
    (at eps 1e-8: 9.1e-10, so eps 1e-6 here keeps the bound well clear of float64 rounding)."""
    rng = np.random.default_rng(1)
    n = 32
    xs, ys = rng.standard_normal((n, 6)), rng.standard_normal((n, 5))
    w0 = 0.1 * rng.standard_normal((6, 5))
    lr, eps = 0.05, 1e-6
    ref, w = _soap64(w0, lr, eps), w0
    for _ in range(10):
        w = ref.step(xs.T @ (xs @ w - ys) / n)
    with jax.enable_x64(True):
        opt = O.soap(lr, eps=eps, **SOAP64_SETTINGS)

        def loss(p):
            return 0.5 * jnp.sum((jnp.asarray(xs) @ p - jnp.asarray(ys)) ** 2) / n

        @jax.jit
        def one(i, s):
            return opt.update_fn(i, jax.grad(loss)(opt.params_fn(s)), s)

        state = opt.init_fn(jnp.asarray(w0))
        for i in range(10):
            state = one(i, state)
        got = opt.params_fn(state)
        assert got.dtype == jnp.float64
    assert _relative_to_travel(got, w, w0) <= 1e-8


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
