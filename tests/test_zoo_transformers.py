"""transformer_lm, vit and resnet18: shapes, the sequence loss/metric by hand, parity of the whole
language model with its flax.linen twin (values and gradients at 1e-5), and FLOP counts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import flops
from models.zoo import MODELS, sequence_accuracy, sequence_cross_entropy

KEY = jax.random.PRNGKey(0)


def test_sequence_loss_and_accuracy_by_hand():
    logits = jnp.array([[[2.0, 0.0, 0.0], [0.0, 1.0, 3.0]], [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]])
    targets = jnp.array([[0, 1], [2, -1]], jnp.int32)  # -1: padding
    lse = lambda row: np.log(np.sum(np.exp(row)))  # noqa: E731
    nll = [lse([2, 0, 0]) - 2, lse([0, 1, 3]) - 1, lse([0, 0, 0]) - 0]
    np.testing.assert_allclose(sequence_cross_entropy(logits, targets), np.mean(nll), rtol=1e-6)
    # argmax per token: 0 (hit), 2 (miss), 0 (miss vs 2); the padded token is not counted
    np.testing.assert_allclose(sequence_accuracy(logits, targets), 1 / 3, rtol=1e-6)
    # bfloat16 logits: the loss is float32
    assert sequence_cross_entropy(logits.astype(jnp.bfloat16), targets).dtype == jnp.float32
    all_pad = -jnp.ones((2, 2), jnp.int32)
    assert float(sequence_cross_entropy(logits, all_pad)) == 0.0
    assert float(sequence_accuracy(logits, all_pad)) == 0.0


def test_transformer_lm_matches_flax_twin_values_and_gradients():
    pytest.importorskip("flax")
    from flax_reference import TransformerLM, lm_to_stax

    V, T, d, L, H = 11, 5, 8, 1, 2
    model = MODELS["transformer_lm"](input_shape=(T,), num_classes=V, width=d, depth=L, num_heads=H)
    assert model.task == "sequence" and model.input_dtype == "int32" and not model.needs_rng
    assert model.hparams["vocab_size"] == V and model.hparams["context"] == T
    tokens = jax.random.randint(KEY, (2, T), 0, V)
    targets = jnp.roll(tokens, -1, axis=1)
    twin = TransformerLM(V, d, L, H, T)
    fparams = twin.init(KEY, tokens)
    fparams = jax.tree.map(lambda p: p + 0.05 * jax.random.normal(jax.random.PRNGKey(p.size), p.shape),
                           fparams)  # non-zero biases, non-unit LayerNorm scales
    params = lm_to_stax(fparams, L)
    _, p0, state = model.init(KEY, (-1, T))
    assert jax.tree.structure(p0) == jax.tree.structure(params)
    assert all(a.shape == b.shape for a, b in zip(jax.tree.leaves(p0), jax.tree.leaves(params), strict=True))

    def ours(p):
        out, _ = model.apply(p, state, tokens, train=True)
        return model.loss(out, targets), out

    def theirs(p):
        out = twin.apply(p, tokens)
        return sequence_cross_entropy(out, targets), out

    (l1, o1), g1 = jax.jit(jax.value_and_grad(ours, has_aux=True))(params)
    (l2, o2), g2 = jax.jit(jax.value_and_grad(theirs, has_aux=True))(fparams)
    np.testing.assert_allclose(o1, o2, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(l1, l2, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(lm_to_stax(g2, L)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_transformer_lm_hyperparameters_and_errors():
    lm = MODELS["transformer_lm"]
    m = lm(input_shape=(4,), num_classes=None, vocab_size=7, context=9, width=8, num_heads=2, depth=1,
           dropout=0.1, positional="sinusoidal")
    assert m.needs_rng and m.hparams["context"] == 9 and m.hparams["vocab_size"] == 7
    out_shape, _, _ = m.init(KEY, (-1, 4))
    assert out_shape == (-1, 4, 7)
    cases = [
        ({"input_shape": (4,), "num_classes": 5, "vocab_size": 6},
         "vocab_size 6 differs from the dataset's 5"),
        ({"input_shape": (4,), "num_classes": None}, "needs vocab_size"),
        ({"input_shape": (4, 2), "num_classes": 5}, r"input_shape must be \(T,\) token positions"),
        ({"input_shape": (8,), "num_classes": 5, "context": 4}, "sequences of length 8 exceed context 4"),
        ({"input_shape": (4,), "num_classes": 5, "width": 6, "num_heads": 4},
         "width 6 must be divisible by num_heads 4"),
        ({"input_shape": (4,), "num_classes": 5, "positional": "rope"}, "positional must be 'learned' or"),
        ({"input_shape": (4,), "num_classes": 5, "dropout": 1.0}, "dropout is the drop probability"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            lm(**kwargs)
    with pytest.raises(ValueError, match="not a multiple of patch_size 3"):
        MODELS["vit"](input_shape=(8, 8, 3), num_classes=10, patch_size=3)


def test_transformer_lm_dropout_needs_rng_and_train_flag():
    m = MODELS["transformer_lm"](input_shape=(4,), num_classes=5, width=8, depth=1, num_heads=2,
                                 dropout=0.5)
    _, p, s = m.init(KEY, (-1, 4))
    x = jnp.zeros((1, 4), jnp.int32)
    with pytest.raises(ValueError, match="PRNG key"):
        m.apply(p, s, x, train=True)
    a = m.apply(p, s, x, train=True, rng=jax.random.PRNGKey(1))[0]
    b = m.apply(p, s, x, train=True, rng=jax.random.PRNGKey(2))[0]
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(m.apply(p, s, x, train=False)[0], m.apply(p, s, x, train=False)[0])


def test_resnet18_is_the_cifar_resnet18():
    m = MODELS["resnet18"](input_shape=(32, 32, 3), num_classes=10)
    assert m.name == "resnet18" and m.hparams == {"width": 64, "bn_momentum": 0.9, "conv_impl": "auto"}
    _, params, state = jax.eval_shape(lambda k: m.init(k, (-1, 32, 32, 3)), KEY)
    kernels = [x.shape for x in jax.tree.leaves(params) if len(x.shape) == 4 and x.shape[:3] != (1, 1, 1)]
    assert len(kernels) == 17 + 3  # 17 3x3 convs (stem + 16 in blocks) + 3 1x1 projections
    assert sum(k[0] == 3 for k in kernels) == 17
    n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    assert 11.1e6 < n < 11.3e6  # the CIFAR ResNet-18 has 11.17M parameters
    assert len(jax.tree.leaves(state)) == 2 * 20  # running mean/var of 20 BatchNorms


# --------------------------------------------------------------------------------------------------
# FLOPs: XLA's cost analysis vs the analytic (jaxpr) count, and the matmul part in closed form


@pytest.mark.parametrize(("name", "shape", "kwargs"), [
    ("transformer_lm", (16,), {"width": 32, "depth": 2, "num_heads": 4}),
    ("vit", (16, 16, 3), {"width": 32, "depth": 2, "num_heads": 4, "patch_size": 4}),
    ("resnet18", (16, 16, 3), {"width": 8, "conv_impl": "xla"}),
])
def test_flops_xla_agrees_with_analytic_within_10pct(name, shape, kwargs):
    model = MODELS[name](input_shape=shape, num_classes=10, **kwargs)
    analytic = model.flops_per_example(shape)
    xla = model.xla_flops_per_example(shape)
    assert xla is not None and abs(xla - analytic) <= 0.1 * xla, (xla, analytic)
    _, params, state = jax.eval_shape(lambda k: model.init(k, (1, *shape)), KEY)
    x = jax.ShapeDtypeStruct((1, *shape), jnp.dtype(model.input_dtype))
    core = flops.jaxpr_flops(lambda p, s, v: model.apply(p, s, v, train=False)[0], params, state, x,
                             matmul_only=True)
    assert 0.5 * analytic < core <= analytic
    d = kwargs["width"]
    if name == "transformer_lm":
        T = shape[0]
        assert core == flops.transformer_matmul_flops(T, d, 2, 4 * d) + 2 * T * d * 10
    elif name == "vit":
        T = (16 // 4) ** 2
        assert core == flops.transformer_matmul_flops(T, d, 2, 4 * d) + 2 * T * (4 * 4 * 3) * d + 2 * d * 10


def test_transformer_matmul_flops_by_hand():
    # T=2, d=4, m=8, one block: qkv 2*2*4*12=192, scores 2*2*2*4=32, values 32, out 2*2*4*4=64,
    # mlp 2*2*4*8*2=256 -> 576
    assert flops.transformer_matmul_flops(2, 4, 1, 8) == 576.0
    assert flops.transformer_matmul_flops(2, 4, 3, 8) == 3 * 576.0
