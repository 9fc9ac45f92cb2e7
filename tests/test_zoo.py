"""The model zoo: registry, ModelDef contract, losses/metrics by hand, state, FLOP counts."""

import dataclasses
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from harness.core.builders import INJECTED, hyperparameters
from models import flops, stax
from models.zoo import MODELS, ModelDef, accuracy, mse, softmax_cross_entropy

KEY = jax.random.PRNGKey(0)

# One small configuration per model and input shape it must accept.
SMALL = {
    "logreg": {},
    "mlp": {"width": 16, "depth": 2},
    "cnn1d": {"width": 4, "hidden": 8},
    "cnn": {"width": 4, "hidden": 8},
    "resnet": {"width": 4, "stages": 2},
    "autoencoder": {"width": 4},
    "resnet18": {"width": 2, "conv_impl": "xla"},  # fewer ops to compile than the patches form
    "vit": {"width": 8, "depth": 1, "num_heads": 2, "patch_size": 4},
    "transformer_lm": {"width": 8, "depth": 1, "num_heads": 2},
    "gpt": {"width": 8, "depth": 1, "num_heads": 2},
}
SHAPES = {
    "logreg": [(8, 8, 1), (40,)],
    "mlp": [(8, 8, 1)],
    "cnn1d": [(40,), (40, 2)],
    "cnn": [(8, 8, 1), (8, 8)],
    "resnet": [(8, 8, 1)],
    "autoencoder": [(10, 6), (40,)],
    # resnet18 is resnet(stages=4, blocks_per_stage=2): compiling it here cost minutes on the shared
    # CI cores; its structure, init and forward (through XLA's cost analysis) are tested in
    # tests/test_zoo_transformers.py.
    "resnet18": [],
    "vit": [(8, 8, 3)],
    "transformer_lm": [(6,)],
    "gpt": [(6,)],
}


def _x(shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def test_registry_names_and_hyperparameters():
    assert sorted(MODELS) == ["autoencoder", "cnn", "cnn1d", "gpt", "logreg", "mlp", "resnet", "resnet18",
                              "transformer_lm", "vit"]
    for name, builder in MODELS.items():
        sig = inspect.signature(builder)
        assert {"input_shape", "num_classes"} <= set(sig.parameters), name
        for p in sig.parameters.values():
            assert p.kind is p.KEYWORD_ONLY, (name, p.name)
        for hp in hyperparameters(builder, INJECTED).values():
            assert not hp.required, (name, hp.name)
    assert list(hyperparameters(MODELS["mlp"])) == ["width", "depth", "activation", "dropout"]
    assert {f.name for f in dataclasses.fields(ModelDef)} >= {
        "name", "task", "init", "apply", "loss", "metrics", "flops_per_example", "needs_rng"}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_init_apply_loss(name):
    for shape in SHAPES[name]:
        model = MODELS[name](input_shape=shape, num_classes=5, **SMALL[name])
        assert model.name == name
        box = {}

        def init(key, model=model, shape=shape, box=box):
            box["out_shape"], params, state = model.init(key, (-1, *shape))
            return params, state

        params, state = jax.jit(init)(KEY)
        out_shape = box["out_shape"]
        x = _x((3, *shape))
        if model.task == "classification":
            y = jnp.array([0, 4, 2], jnp.int32)
            assert set(model.metrics) == {"accuracy"}
        elif model.task == "sequence":  # int32 tokens in, next tokens as targets
            assert model.input_dtype == "int32" and set(model.metrics) == {"accuracy"}
            x = jax.random.randint(KEY, (3, *shape), 0, 5)
            y = jnp.roll(x, -1, axis=1)
        else:
            assert model.task == "reconstruction"
            y = x

        def run(params, state, x, y, model=model):
            def loss_fn(p):
                out, new_state = model.apply(p, state, x, train=True)
                return model.loss(out, y), (out, new_state)
            if name in ("logreg", "mlp", "transformer_lm"):
                (loss, (out, new_state)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
            else:  # conv backward passes compile slowly on CPU; the benchmarks train them
                loss, (out, new_state) = loss_fn(params)
                grads = params
            ev, _ = model.apply(params, new_state, x, train=False)
            return loss, out, new_state, grads, {k: f(ev, y) for k, f in model.metrics.items()}

        loss, out, new_state, grads, metrics = jax.jit(run)(params, state, x, y)
        assert jax.tree.structure(new_state) == jax.tree.structure(state)
        assert jax.tree.structure(grads) == jax.tree.structure(params)
        if model.task == "classification":
            assert out_shape == (-1, 5) and out.shape == (3, 5)
        elif model.task == "sequence":
            assert out_shape == (-1, *shape, 5) and out.shape == (3, *shape, 5)
        else:
            assert out_shape == (-1, *shape) and out.shape == x.shape
        assert np.isfinite(float(loss)) and float(loss) > 0
        np.testing.assert_allclose(loss, model.loss(out, y), rtol=1e-5)
        assert all(np.isfinite(float(v)) for v in metrics.values())
        # init accepts the example shape without a batch dim too (shapes only: no compile)
        assert jax.eval_shape(lambda k, m=model, s=shape: m.init(k, s)[1:], KEY) is not None


def test_losses_and_metrics_by_hand():
    logits = jnp.array([[2.0, 0.0, 0.0], [0.0, 1.0, 3.0]])
    labels = jnp.array([0, 1])
    lse0 = np.log(np.exp(2) + 2)
    lse1 = np.log(1 + np.e + np.exp(3))
    expected = ((lse0 - 2.0) + (lse1 - 1.0)) / 2
    np.testing.assert_allclose(softmax_cross_entropy(logits, labels), expected, rtol=1e-6)
    assert float(accuracy(logits, labels)) == 0.5
    np.testing.assert_allclose(mse(jnp.ones((2, 3)), jnp.zeros((2, 3)) + 0.5), 0.25)


def test_logreg_is_softmax_regression_by_hand():
    model = MODELS["logreg"](input_shape=(2, 2), num_classes=3)
    _, params, state = model.init(KEY, (-1, 2, 2))
    x = _x((4, 2, 2))
    out, _ = model.apply(params, state, x, train=False)
    W, b = params[1]
    np.testing.assert_allclose(out, x.reshape(4, 4) @ W + b, rtol=1e-5, atol=1e-6)


def test_mlp_dropout_is_drop_probability_and_needs_rng():
    model = MODELS["mlp"](input_shape=(20,), num_classes=3, width=2000, depth=1, dropout=0.25)
    assert model.needs_rng and not MODELS["mlp"](input_shape=(20,), num_classes=3).needs_rng
    _, params, state = model.init(KEY, (-1, 20))
    x = _x((1, 20))
    with pytest.raises(ValueError, match="requires apply_fun to be called with a PRNG key"):
        model.apply(params, state, x, train=True)
    # The layer after Flatten, Dense, Relu is stax.Dropout(keep = 1 - 0.25): about 25% dropped.
    drop = model.layer[0].stax_layers[3]
    assert stax.layer_name(drop) == "Dropout(keep=0.75)"
    kept = np.asarray(drop[1]((), jnp.ones((1, 2000)), rng=jax.random.PRNGKey(1)) != 0).mean()
    assert abs(kept - 0.75) < 0.03
    ev1, _ = model.apply(params, state, x, train=False)
    ev2, _ = model.apply(params, state, x, train=False, rng=jax.random.PRNGKey(9))
    np.testing.assert_array_equal(ev1, ev2)


@pytest.mark.parametrize(("builder", "kwargs", "message"), [
    ("mlp", {"activation": "swish"}, "unknown activation 'swish'; choose one of ['elu', 'gelu', "
                                     "'leaky_relu', 'relu', 'selu', 'sigmoid', 'softplus', 'tanh']"),
    ("mlp", {"dropout": 1.0}, "mlp: dropout is the drop probability and must be in [0, 1), got 1.0"),
    ("cnn", {"input_shape": (40,)}, "cnn: input_shape must be (H, W) or (H, W, C), got (40,); "
                                         "for 1-D data use cnn1d (or mlp, logreg)"),
    ("cnn1d", {"input_shape": (8, 8, 1)}, "cnn1d: input_shape must be (L) or (L, C), got (8, 8, 1); "
                                              "for images use cnn or resnet (or mlp, logreg)"),
    ("resnet", {"width": 0}, "resnet: width must be positive, got 0"),
    ("mlp", {"dropout": -0.1}, "mlp: dropout is the drop probability and must be in [0, 1), got -0.1"),
    ("mlp", {"width": 0}, "mlp: width must be positive, got 0"),
    ("mlp", {"depth": -1}, "mlp: depth must be >= 0, got -1"),
    ("cnn", {"hidden": -1}, "cnn: hidden must be >= 0, got -1"),
    ("cnn1d", {"input_shape": (40,), "hidden": -2}, "cnn1d: hidden must be >= 0, got -2"),
    ("resnet", {"bn_momentum": 1.0}, "resnet: bn_momentum must be in [0, 1), got 1.0"),
    ("autoencoder", {"width": 0}, "autoencoder: width must be positive, got 0"),
])
def test_bad_hyperparameters(builder, kwargs, message):
    args = {"input_shape": (8, 8, 1), "num_classes": 3, **kwargs}
    with pytest.raises(ValueError) as err:
        MODELS[builder](**args)
    assert str(err.value) == message


def test_resnet_batchnorm_state_eval_one_example_equals_batch():
    model = MODELS["resnet"](input_shape=(8, 8, 1), num_classes=4, width=4, stages=2, bn_momentum=0.0)
    _, params, state = model.init(KEY, (-1, 8, 8, 1))
    assert jax.tree.leaves(state)  # BatchNorm running statistics present
    x = _x((16, 8, 8, 1), seed=3)
    step = jax.jit(model.apply, static_argnames="train")
    train_out, state = step(params, state, x, train=True)
    ev, _ = step(params, state, x, train=False)
    np.testing.assert_allclose(ev, train_out, atol=1e-4)
    one, _ = step(params, state, x[5:6], train=False)
    np.testing.assert_allclose(one[0], train_out[5], atol=1e-4)


def test_vmap_over_seeds():
    model = MODELS["mlp"](input_shape=(6,), num_classes=3, width=8, depth=1, dropout=0.5)
    x = _x((4, 6))

    def run(key):
        _, params, state = model.init(key, (-1, 6))
        return model.apply(params, state, x, train=True, rng=key)[0]

    keys = jax.random.split(KEY, 3)
    batched = jax.jit(jax.vmap(run))(keys)
    single = jax.jit(run)
    for i in range(3):
        np.testing.assert_allclose(batched[i], single(keys[i]), rtol=1e-5, atol=1e-6)


def test_cnn_patches_impl_matches_xla_within_1e5():
    a = MODELS["cnn"](input_shape=(8, 8, 1), num_classes=3, width=4, hidden=0, conv_impl="xla")
    b = MODELS["cnn"](input_shape=(8, 8, 1), num_classes=3, width=4, hidden=0, conv_impl="patches")
    assert MODELS["cnn"](input_shape=(8, 8), num_classes=3).hparams["conv_impl"] == "auto"
    _, params, state = a.init(KEY, (-1, 8, 8, 1))
    x = _x((4, 8, 8, 1))
    fa = jax.jit(lambda p, v: a.apply(p, state, v, train=False)[0])
    fb = jax.jit(lambda p, v: b.apply(p, state, v, train=False)[0])
    np.testing.assert_allclose(fb(params, x), fa(params, x), atol=1e-5)


# --------------------------------------------------------------------------------------------------
# FLOPs


@pytest.mark.parametrize(("name", "shape", "kwargs"), [
    ("logreg", (8, 8, 1), {}),
    ("mlp", (8, 8, 1), {"width": 32}),
    ("cnn1d", (40,), {"width": 8, "hidden": 16}),
    ("cnn", (12, 12, 1), {"width": 8, "hidden": 16}),
    ("autoencoder", (8, 8, 1), {"width": 4}),
])
def test_flops_xla_agrees_with_analytic_within_10pct(name, shape, kwargs):
    model = MODELS[name](input_shape=shape, num_classes=10, **kwargs)
    analytic = model.flops_per_example(shape)
    assert analytic == model.flops_per_example((128, *shape))  # batch shape accepted, per example
    xla = model.xla_flops_per_example(shape)
    assert xla is not None and abs(xla - analytic) <= 0.1 * xla
    # The matmul/conv part alone is the bulk and is counted exactly as 2 x multiply-adds.
    _, params, state = model.init(KEY, (1, *shape))
    core = flops.jaxpr_flops(lambda p, v: model.apply(p, state, v, train=False)[0], params,
                             jnp.zeros((1, *shape)), matmul_only=True)
    assert 0.5 * analytic < core <= analytic


def test_mlp_analytic_flops_by_hand():
    model = MODELS["mlp"](input_shape=(10,), num_classes=3, width=7, depth=2)
    # dense MACs: 10*7 + 7*7 + 7*3 = 140 -> 280 FLOPs; bias adds 7+7+3; relus 7+7
    assert model.flops_per_example((10,)) == 280 + 17 + 14
    assert model.xla_flops_per_example((10,)) == 280 + 17 + 14


def test_conv_flops_by_hand_exclude_padding_like_xla():
    from models import stax
    init, apply = stax.Conv(2, (3, 3), padding="SAME")
    _, params = init(KEY, (1, 4, 4, 1))
    x = jnp.zeros((1, 4, 4, 1))
    # taps per dim that hit input for n=4, k=3, SAME: 2+3+3+2 = 10 -> 100 pairs; x 2 out chans x 2
    expected = 2 * 2 * 1 * 100 + 4 * 4 * 2  # + bias add
    assert flops.jaxpr_flops(apply, params, x) == expected
    assert flops.xla_flops(apply, params, x) == expected


@pytest.mark.parametrize(("cost", "expected"), [
    ({"flops": 12.0, "bytes accessed": 3.0}, 12.0),
    ([{"flops": 5.0}, {"flops": 7.0}], 12.0),
    ([{"flops": 5.0}], 5.0),
    ({"flops": -1.0}, None),
    ([{"flops": -1}], None),
    (None, None),
    ({}, None),
    ([], None),
    ([None], None),
    ({"flops": float("nan")}, None),
    ({"flops": None}, None),
])
def test_cost_analysis_flops_shapes(cost, expected):
    assert flops.cost_analysis_flops(cost) == expected


def test_xla_flops_none_on_failure():
    def bad(x):
        raise RuntimeError("cannot lower")
    assert flops.xla_flops(bad, jnp.zeros(3)) is None
    assert flops.xla_flops(lambda a, b: a @ b, jnp.zeros((4, 5)), jnp.zeros((5, 6))) == 2 * 4 * 5 * 6
