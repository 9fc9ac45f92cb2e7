"""MaxPool with tiling windows: bit parity with the reference for values, gradients and JVPs.

On CPU `models.stax.MaxPool` with ``strides == window`` and VALID padding uses an explicit
derivative instead of XLA's select_and_scatter (much faster on XLA:CPU); these tests pin that it
changes nothing numerically, ties included.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.example_libraries import stax as R

from models import stax as S

CASES = [  # window, spec, input shape
    ((2, 2), None, (3, 8, 8, 4)),
    ((3, 3), None, (2, 9, 7, 3)),  # 7 is not a multiple of 3: VALID drops the remainder
    ((2, 2), "NCHW", (2, 3, 6, 6)),
    ((2,), None, (4, 10, 5)),
]


def _relu_data(shape, seed=0):
    x = np.random.default_rng(seed).normal(size=shape).astype(np.float32)
    return jnp.asarray(np.maximum(x, 0.0))  # many exact ties at 0


@pytest.mark.parametrize("window,spec,shape", CASES)
def test_values_grads_and_jvp_equal_reference(window, spec, shape):
    assert jax.default_backend() == "cpu"  # the fast path under test is CPU-only
    _, ref_apply = R.MaxPool(window, window, spec=spec)
    _, our_apply = S.MaxPool(window, window, spec=spec)
    x = _relu_data(shape)
    np.testing.assert_array_equal(our_apply((), x), ref_apply((), x))
    w = jnp.asarray(np.random.default_rng(1).normal(size=our_apply((), x).shape).astype(np.float32))

    def f(apply):
        return lambda x: jnp.sum(jnp.sin(apply((), x)) * w)

    np.testing.assert_array_equal(jax.grad(f(our_apply))(x), jax.grad(f(ref_apply))(x))
    np.testing.assert_array_equal(jax.jit(jax.grad(f(our_apply)))(x), jax.grad(f(ref_apply))(x))
    t = jnp.asarray(np.random.default_rng(2).normal(size=shape).astype(np.float32))
    _, jv_ours = jax.jvp(lambda x: our_apply((), x), (x,), (t,))
    _, jv_ref = jax.jvp(lambda x: ref_apply((), x), (x,), (t,))
    np.testing.assert_array_equal(jv_ours, jv_ref)


def test_all_tied_window_sends_the_gradient_to_the_first_element():
    _, apply = S.MaxPool((2, 2), (2, 2))
    g = jax.grad(lambda x: jnp.sum(apply((), x)))(jnp.ones((1, 2, 2, 1)))
    np.testing.assert_array_equal(g.ravel(), [1.0, 0.0, 0.0, 0.0])


def test_second_derivative_through_the_pool_matches_reference():
    _, ref_apply = R.MaxPool((2, 2), (2, 2))
    _, our_apply = S.MaxPool((2, 2), (2, 2))
    x = _relu_data((1, 4, 4, 2), seed=3) + 0.5

    def hvp(apply):
        f = lambda x: jnp.sum(apply((), x) ** 3)  # noqa: E731
        return jax.jvp(jax.grad(f), (x,), (jnp.ones_like(x),))[1]

    np.testing.assert_allclose(hvp(our_apply), hvp(ref_apply), rtol=1e-6)
