"""Attention through ``jax.nn.dot_product_attention`` (models/attention.py) against the attention
written out (``impl='einsum'``): outputs and gradients at float32 tolerance, with and without QK-norm
and RoPE; the implementation each ``impl`` resolves to."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import stax
from models.attention import dot_product_attention, resolve_impl


@pytest.mark.parametrize("qk_norm,rope_fraction,causal", [(True, 0.5, True), (False, 0.0, True),
                                                          (True, 1.0, False)])
def test_rotary_attention_via_dot_product_attention_equals_the_einsum_form(qk_norm, rope_fraction, causal):
    kw = dict(causal=causal, qk_norm=qk_norm, rope_fraction=rope_fraction, zero_out=False, scale=0.12)
    init, ref = stax.RotarySelfAttention(2, impl="einsum", **kw)
    _, new = stax.RotarySelfAttention(2, impl="xla", **kw)
    _, params = init(jax.random.PRNGKey(0), (2, 9, 16))
    x = jax.random.normal(jax.random.PRNGKey(1), (2, 9, 16))
    np.testing.assert_allclose(new(params, x), ref(params, x), rtol=1e-5, atol=1e-6)

    def loss(apply):
        return lambda p, x: jnp.sum(jnp.sin(apply(p, x)))

    g_ref = jax.grad(loss(ref), argnums=(0, 1))(params, x)
    g_new = jax.jit(jax.grad(loss(new), argnums=(0, 1)))(params, x)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), g_new, g_ref)


def test_causal_mask_hides_later_keys():
    q = k = jnp.zeros((1, 3, 1, 2))
    v = jnp.arange(3.0).reshape(1, 3, 1, 1) * jnp.ones((1, 3, 1, 2))
    out = dot_product_attention(q, k, v, causal=True, impl="xla")
    np.testing.assert_allclose(out[0, :, 0, 0], [0.0, 0.5, 1.0], rtol=1e-6)  # means of the visible values


def test_resolve_impl_and_its_errors():
    assert resolve_impl("auto", jnp.bfloat16, "gpu") == "cudnn"
    assert resolve_impl("auto", jnp.float32, "gpu") == "xla"
    assert resolve_impl("auto", jnp.bfloat16, "cpu") == "xla"
    assert resolve_impl("einsum", jnp.float32, "cpu") == "einsum"
    with pytest.raises(ValueError, match=r"^attention: impl must be one of \['auto', 'xla', 'cudnn', "
                                         r"'einsum'\], got 'flash'$"):
        stax.RotarySelfAttention(2, impl="flash")
    with pytest.raises(ValueError, match=r"^attention: impl 'einsum' is models\.stax\.attention"):
        dot_product_attention(jnp.zeros((1, 2, 1, 2)), jnp.zeros((1, 2, 1, 2)), jnp.zeros((1, 2, 1, 2)),
                              impl="einsum")
