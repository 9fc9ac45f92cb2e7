"""models.stax against jax.example_libraries.stax: same params from the same rng, same outputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.example_libraries import stax as R
from jax.nn.initializers import zeros

from models import stax as S

KEY = jax.random.PRNGKey(42)


def _tree_equal(a, b):
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _inputs(shape, key=1):
    if isinstance(shape, list):
        return [_inputs(s, key + i) for i, s in enumerate(shape)]
    # numpy, not jax.random: no compile per shape.
    return jnp.asarray(np.random.default_rng(key).standard_normal(shape), jnp.float32)


def _jit_init(init, input_shape):
    """init under one jit (one compile instead of one per eager op): (output_shape, params)."""
    box = {}

    def f(key):
        box["shape"], params = init(key, input_shape)
        return params

    params = jax.jit(f)(KEY)
    return box["shape"], params


def _check(make, input_shape, rng=None, atol=0.0):
    """make(module) -> layer; compares init (shapes, params) and apply outputs (both jitted)."""
    ri, ra = make(R)
    si, sa = make(S)
    shapes, (rparams, sparams) = _jit_init(lambda k, s: tuple(zip(ri(k, s), si(k, s), strict=True)),
                                           input_shape)
    rshape, sshape = shapes
    assert jax.tree.map(int, sshape) == jax.tree.map(int, rshape)
    _tree_equal(sparams, rparams)
    x = _inputs(input_shape)
    kw = {} if rng is None else {"rng": rng}
    rout, sout = jax.jit(lambda p, v: (ra(p, v, **kw), sa(p, v, **kw)))(rparams, x)
    for r, s in zip(jax.tree.leaves(rout), jax.tree.leaves(sout), strict=True):
        assert r.shape == s.shape
        np.testing.assert_allclose(np.asarray(s), np.asarray(r), rtol=0, atol=atol)


CASES = {
    "dense": (lambda m: m.Dense(5), (3, 4)),
    "dense_3d_inits": (lambda m: m.Dense(2, W_init=m.randn(0.5), b_init=zeros), (2, 3, 4)),
    "conv_valid": (lambda m: m.Conv(3, (3, 3)), (2, 7, 6, 2)),
    "conv_same_strided": (lambda m: m.Conv(3, (3, 2), strides=(2, 1), padding="SAME"), (2, 7, 6, 2)),
    "generalconv_nchw": (lambda m: m.GeneralConv(("NCHW", "OIHW", "NCHW"), 4, (3, 3), (2, 2), "SAME"),
                         (2, 3, 7, 7)),
    "generalconv_mixed": (lambda m: m.GeneralConv(("NHWC", "OIHW", "NCHW"), 4, (2, 3)), (2, 6, 5, 3)),
    "generalconv_1d": (lambda m: m.GeneralConv(("NHC", "HIO", "NHC"), 3, (3,), padding="SAME"), (2, 9, 2)),
    "convT_same": (lambda m: m.ConvTranspose(3, (3, 3), (2, 2), "SAME"), (2, 4, 5, 2)),
    "convT_valid": (lambda m: m.ConvTranspose(2, (2, 3), (1, 2)), (1, 4, 4, 3)),
    "conv1dT": (lambda m: m.Conv1DTranspose(3, (4,), (2,), "VALID"), (2, 6, 2)),
    "generalconvT_nchw": (lambda m: m.GeneralConvTranspose(("NCHW", "IOHW", "NCHW"), 2, (3, 3), (2, 2),
                                                           "SAME"), (2, 3, 4, 4)),
    "bn_default": (lambda m: m.BatchNorm(), (4, 3, 3, 2)),
    "bn_axis0": (lambda m: m.BatchNorm(axis=(0,)), (6, 5)),
    "bn_scalar_axis": (lambda m: m.BatchNorm(axis=0, epsilon=1e-3), (6, 5)),
    "bn_axis01": (lambda m: m.BatchNorm(axis=(0, 1)), (3, 4, 5)),
    "bn_no_center": (lambda m: m.BatchNorm(center=False), (4, 3, 3, 2)),
    "bn_no_scale": (lambda m: m.BatchNorm(scale=False, beta_init=m.randn()), (4, 3, 3, 2)),
    "bn_neither": (lambda m: m.BatchNorm(center=False, scale=False), (4, 3, 3, 2)),
    "bn_nchw": (lambda m: m.BatchNorm(axis=(0, 2, 3), gamma_init=m.randn()), (4, 2, 3, 3)),
    "maxpool": (lambda m: m.MaxPool((2, 2)), (2, 5, 5, 3)),
    "maxpool_strided_same": (lambda m: m.MaxPool((3, 3), (2, 2), "SAME"), (2, 7, 6, 3)),
    "maxpool_nchw": (lambda m: m.MaxPool((2, 2), (2, 2), spec="NCHW"), (2, 3, 6, 6)),
    "sumpool": (lambda m: m.SumPool((2, 3), (1, 2), "SAME"), (2, 5, 6, 2)),
    "avgpool": (lambda m: m.AvgPool((2, 2), (2, 2)), (2, 6, 6, 2)),
    "avgpool_same": (lambda m: m.AvgPool((3, 3), (2, 2), "SAME"), (2, 7, 7, 2)),
    "avgpool_nchw_same": (lambda m: m.AvgPool((3, 2), (2, 1), "SAME", spec="NCHW"), (2, 3, 5, 4)),
    "avgpool_1d": (lambda m: m.AvgPool((3,), (2,), "SAME"), (2, 9, 2)),
    "flatten": (lambda m: m.Flatten, (2, 3, 4, 5)),
    "identity": (lambda m: m.Identity, (2, 3)),
    "custom_elementwise": (lambda m: m.elementwise(jax.nn.leaky_relu, negative_slope=0.3), (3, 4)),
    "fanout_parallel_suminsum": (lambda m: m.serial(m.FanOut(3), m.parallel(m.Dense(4), m.Identity,
                                                                           m.serial(m.Dense(4), m.Tanh)),
                                                    m.FanInSum), (2, 4)),
    "fanin_concat_last": (lambda m: m.serial(m.FanOut(2), m.parallel(m.Dense(3), m.Dense(2)),
                                             m.FanInConcat()), (2, 5)),
    "fanin_concat_axis1": (lambda m: m.serial(m.FanOut(2), m.parallel(m.Relu, m.Identity),
                                              m.FanInConcat(1)), (2, 3, 3, 2)),
    "parallel_alone": (lambda m: m.parallel(m.Dense(2), m.Relu), [(2, 3), (2, 4)]),
    "serial_cnn": (lambda m: m.serial(m.Conv(4, (3, 3), padding="SAME"), m.BatchNorm(), m.Relu,
                                      m.MaxPool((2, 2), (2, 2)), m.Flatten, m.Dense(3), m.LogSoftmax),
                   (3, 6, 6, 1)),
    "shape_dependent": (lambda m: m.shape_dependent(lambda s: m.Dense(s[-1] * 2)), (2, 3)),
    "empty_serial_in_serial": (lambda m: m.serial(m.serial(m.Dense(2)), m.Identity), (2, 3)),
}
ACTIVATIONS = ["Tanh", "Relu", "Exp", "LogSoftmax", "Softmax", "Softplus", "Sigmoid", "Elu", "LeakyRelu",
               "Selu", "Gelu"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_parity_layers(case):
    make, shape = CASES[case]
    _check(make, shape)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_parity_activations(name):
    _check(lambda m: getattr(m, name), (3, 5))


def test_parity_conv_patches_impl_within_1e5():
    for dn, shape, filt, strides, pad in [
        (("NHWC", "HWIO", "NHWC"), (2, 7, 6, 3), (3, 2), (2, 1), "SAME"),
        (("NCHW", "OIHW", "NCHW"), (2, 3, 7, 7), (3, 3), (1, 2), "VALID"),
        (("NHC", "HIO", "NHC"), (2, 9, 2), (3,), (1,), "SAME"),
    ]:
        init, ref_apply = S.GeneralConv(dn, 4, filt, strides, pad)
        _, params = _jit_init(init, shape)
        _, patch_apply = S.GeneralConv(dn, 4, filt, strides, pad, impl="patches")
        x = _inputs(shape)
        np.testing.assert_allclose(jax.jit(patch_apply)(params, x), jax.jit(ref_apply)(params, x),
                                   rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="impl must be 'xla', 'patches' or 'auto', got 'fft'"):
        S.Conv(2, (3, 3), impl="fft")


@pytest.mark.parametrize("mode", ["train", "test"])
def test_parity_dropout(mode):
    _check(lambda m: m.Dropout(0.7, mode=mode), (50, 8), rng=jax.random.PRNGKey(3))


def test_parity_serial_with_dropout_splits_rng_like_reference():
    _check(lambda m: m.serial(m.Dense(6), m.Dropout(0.5), m.Relu, m.Dense(6), m.Dropout(0.8)), (8, 4),
           rng=jax.random.PRNGKey(7))
    _check(lambda m: m.serial(m.FanOut(2), m.parallel(m.Dropout(0.5), m.Dropout(0.6)), m.FanInSum),
           (8, 4), rng=jax.random.PRNGKey(8))


def test_dropout_rate_is_keep_probability():
    _, apply = S.Dropout(0.9)
    x = jnp.ones((200, 100))
    out = apply((), x, rng=jax.random.PRNGKey(0))
    kept = np.asarray(out != 0)
    assert abs(kept.mean() - 0.9) < 0.01
    np.testing.assert_allclose(np.asarray(out)[kept], 1 / 0.9, rtol=1e-6)


def test_dropout_rng_rules():
    x = jnp.arange(6.0)
    # Test mode without an rng returns its inputs (jax 0.10.2's reference raises here).
    np.testing.assert_array_equal(S.Dropout(0.5, mode="test")[1]((), x), x)
    with pytest.raises(ValueError, match="Dropout layer requires apply_fun to be called with a PRNG key"):
        S.Dropout(0.5)[1]((), x)
    with pytest.raises(ValueError) as ref_err:
        R.Dropout(0.5)[1]((), x)
    with pytest.raises(ValueError) as our_err:
        S.Dropout(0.5)[1]((), x)
    assert str(our_err.value) == str(ref_err.value)


def test_public_names_cover_reference():
    skip = {"functools", "math", "lax", "random", "jnp"}
    ref_names = {n for n in dir(R) if not n.startswith("_") and n not in skip}
    missing = sorted(n for n in ref_names if not hasattr(S, n))
    assert missing == []
    assert S.glorot is S.glorot_normal and S.randn is S.normal and S.logsoftmax is S.log_softmax
    assert set(S.__all__) >= ref_names


#: ``models.stax``'s public names (modules it imports aside) before the modern layers moved to
#: ``models.stax_state``, ``models.stax_cpu`` and ``models.stax_seq``: every import keeps working.
STAX_PUBLIC = {
    "AvgPool", "BatchNorm", "Conv", "Conv1DTranspose", "ConvTranspose", "Dense", "Dropout", "Elu",
    "Embedding", "Exp", "FanInConcat", "FanInSum", "FanOut", "Flatten", "Gelu", "GeneralConv",
    "GeneralConvTranspose", "Identity", "LayerNorm", "LeakyRelu", "LogSoftmax", "MLP", "MLP_KINDS",
    "MaxPool", "MultiHeadSelfAttention", "PositionalEmbedding", "RMSNorm", "Relu", "Residual",
    "RotarySelfAttention", "Selu", "ShapeError", "Sigmoid", "SinusoidalPositionalEmbedding", "Softmax",
    "Softplus", "SumPool", "Tanh", "annotations", "apply_rope", "attention", "causal_mask",
    "conv_outside_loops", "elementwise", "elu", "gelu", "glorot", "glorot_normal", "has_state",
    "layer_name", "leaky_relu", "log_softmax", "logsoftmax", "normal", "ones", "parallel", "randn",
    "relu", "rms_normalize", "rope_frequencies", "selu", "serial", "shape_dependent", "sigmoid",
    "sinusoidal_table", "soft_cap", "softmax", "softplus", "standardize", "stateful", "zeros",
}


def test_public_name_set_unchanged_by_the_split():
    import types

    from models import stax_seq, stax_state

    public = {n for n in dir(S) if not n.startswith("_") and not isinstance(getattr(S, n), types.ModuleType)}
    assert public == STAX_PUBLIC
    assert set(S.__all__) == STAX_PUBLIC - {"annotations", "conv_outside_loops"}
    # the moved layers are the same objects under both names
    assert S.RotarySelfAttention is stax_seq.RotarySelfAttention and S.stateful is stax_state.stateful
    assert S.ShapeError is stax_state.ShapeError


# --------------------------------------------------------------------------------------------------
# Shape errors at init


@pytest.mark.parametrize(("layer", "shape", "message"), [
    (lambda: S.serial(S.Dense(3), S.Conv(2, (3, 3))), (4, 5),
     "layer 1 of serial: GeneralConv(NHWC,HWIO,NHWC; 2, (3, 3)): expected an input shape of rank 4 "
     "(lhs spec 'NHWC'), got (4, 3)"),
    (lambda: S.serial(S.Relu, S.Conv(2, (3, 3))), (4, 2, 2, 1),
     "layer 1 of serial: GeneralConv(NHWC,HWIO,NHWC; 2, (3, 3)): input shape (4, 2, 2, 1) gives an empty "
     "output (spatial dims (0, 0, 2); input too small for the window/filter)"),
    (lambda: S.serial(S.Dense(3), S.serial(S.Relu, S.MaxPool((2, 2)))), (4, 5),
     "layer 1 of serial: layer 1 of serial: MaxPool((2, 2)): expected an input shape of rank 4 "
     "(spatial dims plus N and C), got (4, 3)"),
    (lambda: S.serial(S.FanOut(2), S.parallel(S.Dense(3), S.Dense(4)), S.FanInSum), (4, 5),
     "layer 2 of serial: FanInSum: inputs must all have one shape, got [(4, 3), (4, 4)]"),
    (lambda: S.serial(S.FanOut(2), S.parallel(S.Dense(3))), (4, 5),
     "layer 1 of serial: parallel of 1 layers got 2 input shapes: [(4, 5), (4, 5)]"),
    (lambda: S.serial(S.Flatten, S.BatchNorm()), (4, 5),
     "layer 1 of serial: BatchNorm(axis=(0, 1, 2)): axis out of range for input shape (4, 5)"),
    (lambda: S.serial(S.Dense(2), S.ConvTranspose(2, (3, 3))), (4, 5),
     "layer 1 of serial: GeneralConvTranspose(NHWC,HWIO,NHWC; 2, (3, 3)): expected an input shape of "
     "rank 4 (lhs spec 'NHWC'), got (4, 2)"),
])
def test_shape_error_names_layer_and_shapes(layer, shape, message):
    init, _ = layer()
    with pytest.raises(S.ShapeError) as err:
        init(KEY, shape)
    assert str(err.value) == message
    assert isinstance(err.value, ValueError)


def test_shape_error_wraps_foreign_errors_with_index():
    def bad_layer():
        def init_fun(rng, input_shape):
            raise TypeError("boom")
        return init_fun, lambda p, x, **kw: x
    with pytest.raises(S.ShapeError) as err:
        S.serial(S.Identity, bad_layer())[0](KEY, (2, 3))
    assert str(err.value) == "layer 1 of serial: init_fun cannot take input shape (2, 3): TypeError: boom"
