"""The model zoo: ``MODELS[name](*, input_shape, num_classes, **hparams) -> ModelDef``.

Each builder's keyword arguments after ``input_shape``/``num_classes`` are its hyperparameters (with
defaults; the config validator reads them from the signature). ``input_shape`` is one example's
shape without the batch axis, e.g. ``(8, 8, 1)`` for digits images or ``(40,)`` for MNIST-1D.
Every model is built from :mod:`models.stax` layers and wrapped with :func:`models.stax.stateful`,
so BatchNorm running statistics are threaded explicitly (``state`` is ``()`` for stateless models).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp

from models import stax
from models.flops import jaxpr_flops, lm_train_flops_per_token, xla_flops
from models.gpt import GPT, check_gpt, mlp_dim
from models.lm_loss import token_nll

__all__ = [
    "ACTIVATIONS", "MODELS", "ModelDef", "accuracy", "autoencoder", "cnn", "cnn1d", "gpt", "logreg", "mlp",
    "mse", "resnet", "resnet18", "sequence_accuracy", "sequence_cross_entropy",
    "softmax_cross_entropy", "transformer_lm", "vit",
]


# --------------------------------------------------------------------------------------------------
# Losses and metrics


def softmax_cross_entropy(logits, labels):
    """Mean softmax cross-entropy of class logits against integer labels.

    Args:
      logits: float ``(N, K)``.
      labels: int class indices ``(N,)`` in ``[0, K)``.

    Returns:
      The mean over the batch (nats), a scalar.
    """
    logp = jax.nn.log_softmax(logits, axis=-1)
    picked = jnp.take_along_axis(logp, jnp.asarray(labels, jnp.int32)[:, None], axis=-1)[:, 0]
    return -jnp.mean(picked)


def accuracy(logits, labels):
    """Fraction of rows of ``logits`` whose argmax equals the label.

    Args:
      logits: ``(N, K)``.
      labels: int class indices ``(N,)``.

    Returns:
      The fraction, a float32 scalar.
    """
    return jnp.mean((jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32))


def sequence_cross_entropy(logits, targets):
    """Mean per-token softmax cross-entropy of next-token logits, padding excluded.

    ``logsumexp(z) - z[target]`` (:func:`models.lm_loss.token_nll`) in float32 whatever the
    logits' dtype, as ``optax.softmax_cross_entropy_with_integer_labels``.

    Args:
      logits: ``(N, T, V)``, any float dtype.
      targets: int token ids ``(N, T)`` in ``[0, V)``; ids < 0 are padding, left out of the mean.

    Returns:
      The mean over the non-padding tokens (nats), a float32 scalar; 0 if every target is padding.
    """
    nll, valid = token_nll(logits, targets)
    return jnp.sum(nll) / jnp.maximum(jnp.sum(valid), 1).astype(jnp.float32)


def sequence_accuracy(logits, targets):
    """Fraction of non-padding tokens whose target equals the argmax of the logits.

    Args:
      logits: ``(N, T, V)``.
      targets: int token ids ``(N, T)``; ids < 0 are padding, left out.

    Returns:
      The fraction, a float32 scalar; 0 if every target is padding.
    """
    t = jnp.asarray(targets, jnp.int32)
    valid = t >= 0
    hit = (jnp.argmax(logits, axis=-1) == t) & valid
    return jnp.sum(hit).astype(jnp.float32) / jnp.maximum(jnp.sum(valid), 1).astype(jnp.float32)


def mse(outputs, targets):
    """Mean squared error over all elements (= mean over the batch of per-example means).

    Args:
      outputs, targets: arrays of one shape (a reconstruction and its inputs).

    Returns:
      The mean, a scalar.
    """
    return jnp.mean(jnp.square(outputs - targets))


# --------------------------------------------------------------------------------------------------
# ModelDef


@dataclass(frozen=True)
class ModelDef:
    """A named model: how to init, apply, score and count it.

    Fields:
      name: registry name. task: ``"classification"`` (targets int32 labels, outputs logits
        ``(N, num_classes)``), ``"reconstruction"`` (targets are the inputs, outputs their shape)
        or ``"sequence"`` (inputs int32 tokens ``(N, T)``, targets int32 next tokens ``(N, T)``,
        outputs logits ``(N, T, vocab)``; loss and metrics are per-token means, targets < 0 are
        padding and excluded).
      init: ``init(rng, batch_input_shape) -> (output_shape, params, state)``; the batch dim may be
        -1; a shape without the batch dim (``input_shape``) is accepted too.
      apply: ``apply(params, state, inputs, *, rng=None, train) -> (outputs, new_state)``; jit/vmap
        safe; BatchNorm statistics update when ``train=True`` and are used when ``train=False``;
        dropout is active only with ``train=True`` and then needs ``rng`` (``needs_rng``).
      loss: ``loss(outputs, targets) -> scalar`` mean over the batch.
      metrics: ``{name: fn(outputs, targets) -> scalar}``.
      flops_per_example: ``f(input_shape or batch_input_shape) -> float | None`` analytic forward
        FLOPs of one example (multiply-add = 2), counted from the jaxpr in eval mode
        (:func:`models.flops.jaxpr_flops`): the work the model executes, so with
        ``conv_impl='patches'`` the zero taps of SAME padding count (XLA counts them too).
      needs_rng: whether ``apply(..., train=True)`` needs an rng (dropout).
      input_shape: the example shape it was built for. hparams: the builder's hyperparameters.
      layer: the underlying stax ``(init_fun, apply_fun)`` pair (reference-style use).
      input_dtype: the dtype ``apply`` expects its inputs in: ``"float32"`` (cast to the compute
        dtype, e.g. bfloat16, by a mixed-precision policy) or ``"int32"`` (token ids of sequence
        models: never cast; such a model computes in its params' dtype).
      fused_loss: None, or ``fused_loss(params, state, inputs, targets, *, rng=None, train) ->
        (loss, {metric: value}, new_state)``: ``loss`` and ``metrics`` of ``apply``'s outputs
        computed without them (``gpt``: the head fused with the loss, logits in blocks); with
        ``train=True`` the loss is differentiable and the metrics are ``{}``.
    """

    name: str
    task: str
    init: Callable
    apply: Callable
    loss: Callable
    metrics: dict[str, Callable]
    flops_per_example: Callable
    needs_rng: bool = False
    input_shape: tuple[int, ...] = ()
    hparams: dict[str, Any] = field(default_factory=dict)
    layer: Any = None
    input_dtype: str = "float32"
    fused_loss: Callable | None = None

    def xla_flops_per_example(self, input_shape=None) -> float | None:
        """Forward FLOPs of one example from XLA's cost analysis (eval mode, batch 1); None if unknown."""
        params, state, x = _example_args(self, input_shape)
        return xla_flops(lambda p, s, v: self.apply(p, s, v, train=False)[0], params, state, x)


def _example_shape(model_input_shape, shape):
    shape = tuple(model_input_shape if shape is None else shape)
    if len(shape) == len(model_input_shape) + 1:
        shape = shape[1:]
    return shape


def _example_args(model: ModelDef, input_shape):
    shape = _example_shape(model.input_shape, input_shape)
    _, params, state = jax.eval_shape(lambda k: model.init(k, (1, *shape)), jax.random.PRNGKey(0))
    return params, state, jax.ShapeDtypeStruct((1, *shape), jnp.dtype(model.input_dtype))


def make_model_def(name, task, layer, input_shape, hparams, needs_rng=False, input_dtype="float32"):
    init_s, apply_s = stax.stateful(layer)
    input_shape = tuple(int(d) for d in input_shape)

    def init(rng, batch_input_shape):
        shape = tuple(batch_input_shape)
        if len(shape) == len(input_shape):
            shape = (-1, *shape)
        out_shape, params, state = init_s(rng, shape)
        # lax's shape rules turn an unknown (-1) batch into 0 or -1; report the batch as given.
        out_shape = (int(shape[0]), *(int(d) for d in out_shape[1:]))
        return out_shape, params, state

    def apply(params, state, inputs, *, rng=None, train):
        return apply_s(params, state, inputs, train=bool(train), rng=rng)

    if task == "classification":
        loss, metrics = softmax_cross_entropy, {"accuracy": accuracy}
    elif task == "sequence":
        loss, metrics = sequence_cross_entropy, {"accuracy": sequence_accuracy}
    else:
        loss, metrics = mse, {"mse": mse}

    holder = {}

    def flops_per_example(shape=None):
        shape = _example_shape(input_shape, shape)
        params, state, x = _example_args(holder["model"], shape)
        return jaxpr_flops(lambda p, s, v: apply(p, s, v, train=False)[0], params, state, x)

    model = ModelDef(name=name, task=task, init=init, apply=apply, loss=loss, metrics=metrics,
                     flops_per_example=flops_per_example, needs_rng=needs_rng, input_shape=input_shape,
                     hparams=dict(hparams), layer=layer, input_dtype=input_dtype)
    holder["model"] = model
    return model


# --------------------------------------------------------------------------------------------------
# Small private layers


def _reshape(example_shape):
    """Reshape ``(N, ...)`` to ``(N, *example_shape)`` (same number of elements per example)."""
    example_shape = tuple(example_shape)

    def init_fun(rng, input_shape):
        if math.prod(input_shape[1:]) != math.prod(example_shape):
            raise stax.ShapeError(f"Reshape{example_shape}: input shape {tuple(input_shape)} has "
                                  f"{math.prod(input_shape[1:])} elements per example")
        return (input_shape[0], *example_shape), ()

    def apply_fun(params, inputs, **kwargs):
        return jnp.reshape(inputs, (inputs.shape[0], *example_shape))

    init_fun.stax_name = f"Reshape{example_shape}"
    return init_fun, apply_fun


def _global_avg_pool():
    """Mean over the spatial axes of ``(N, *spatial, C)`` -> ``(N, C)``."""

    def init_fun(rng, input_shape):
        return (input_shape[0], input_shape[-1]), ()

    def apply_fun(params, inputs, **kwargs):
        return jnp.mean(inputs, axis=tuple(range(1, inputs.ndim - 1)))

    init_fun.stax_name = "GlobalAvgPool"
    return init_fun, apply_fun


def _crop(example_shape):
    """Crop ``(N, *spatial, C)`` to the leading ``example_shape`` spatial sizes."""

    def init_fun(rng, input_shape):
        return (input_shape[0], *example_shape[:-1], input_shape[-1]), ()

    def apply_fun(params, inputs, **kwargs):
        idx = (slice(None), *(slice(0, d) for d in example_shape[:-1]), slice(None))
        return inputs[idx]

    init_fun.stax_name = "Crop"
    return init_fun, apply_fun


#: Activation names a config may use.
ACTIVATIONS: dict[str, Any] = {
    "relu": stax.Relu, "tanh": stax.Tanh, "gelu": stax.Gelu, "elu": stax.Elu, "selu": stax.Selu,
    "sigmoid": stax.Sigmoid, "softplus": stax.Softplus, "leaky_relu": stax.LeakyRelu,
}


def _activation(name):
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}") from None


def _spatial(input_shape, ndim, builder):
    """Canonical ``(*spatial, C)`` example shape for a conv net of ``ndim`` spatial dims."""
    shape = tuple(int(d) for d in input_shape)
    if len(shape) == ndim:
        return (*shape, 1)
    if len(shape) == ndim + 1:
        return shape
    want = f"({'L' if ndim == 1 else 'H, W'}) or ({'L' if ndim == 1 else 'H, W'}, C)"
    hint = ""
    if ndim == 2 and len(shape) == 1:
        hint = "; for 1-D data use cnn1d (or mlp, logreg)"
    elif ndim == 1 and len(shape) >= 3:
        hint = "; for images use cnn or resnet (or mlp, logreg)"
    raise ValueError(f"{builder}: input_shape must be {want}, got {shape}{hint}")


def _conv(ndim, out_chan, k, strides=None, padding="SAME", impl="xla"):
    if ndim == 1:
        return stax.GeneralConv(("NHC", "HIO", "NHC"), out_chan, (k,), strides, padding, impl=impl)
    return stax.Conv(out_chan, (k, k), strides, padding, impl=impl)


def _check_positive(builder, **values):
    for key, value in values.items():
        if value <= 0:
            raise ValueError(f"{builder}: {key} must be positive, got {value}")


#: The most layers (or blocks) a zoo builder makes: deeper networks take minutes to trace and
#: compile before the first step, and a typo (``depth: 100000``) must fail at once.
MAX_LAYERS = 1000


def _check_layers(builder, **counts):
    for key, value in counts.items():
        if value > MAX_LAYERS:
            raise ValueError(f"{builder}: {key} is {value:,}; at most {MAX_LAYERS:,} (a deeper network "
                             f"takes minutes to trace before its first step)")


def _check_nonnegative(builder, **values):
    for key, value in values.items():
        if value < 0:
            raise ValueError(f"{builder}: {key} must be >= 0, got {value}")


# --------------------------------------------------------------------------------------------------
# Builders


def logreg(*, input_shape, num_classes) -> ModelDef:
    """Multinomial logistic regression: ``Flatten, Dense(num_classes)`` on any input shape.

    Args:
      input_shape: one example's shape (no batch axis).
      num_classes: the number of classes (logits per example).

    Returns:
      The ``"logreg"`` classification :class:`ModelDef`.
    """
    layer = stax.serial(stax.Flatten, stax.Dense(num_classes))
    return make_model_def("logreg", "classification", layer, input_shape, {})


def mlp(*, input_shape, num_classes, width: int = 256, depth: int = 2, activation: str = "relu",
        dropout: float = 0.0) -> ModelDef:
    """Multi-layer perceptron: Flatten, ``depth`` × (Dense(width), activation[, Dropout]), Dense.

    Args:
      input_shape: one example's shape (no batch axis), flattened.
      num_classes: the number of output logits.
      width: hidden units per layer, > 0.
      depth: hidden layers, 0 to :data:`MAX_LAYERS`.
      activation: a name in :data:`ACTIVATIONS`.
      dropout: the DROP probability in [0, 1) (0 = no dropout layer); it builds
        ``stax.Dropout(1 - dropout)`` since stax's rate is the keep probability.

    Returns:
      The ``"mlp"`` classification :class:`ModelDef` (``needs_rng`` with dropout and ``depth > 0``).

    Raises:
      ValueError: a value out of range or an unknown activation.
    """
    _check_positive("mlp", width=width)
    _check_layers("mlp", depth=depth)
    if depth < 0:
        raise ValueError(f"mlp: depth must be >= 0, got {depth}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"mlp: dropout is the drop probability and must be in [0, 1), got {dropout}")
    act = _activation(activation)
    layers = [stax.Flatten]
    for _ in range(depth):
        layers += [stax.Dense(width), act]
        if dropout > 0:
            layers.append(stax.Dropout(1.0 - dropout))
    layers.append(stax.Dense(num_classes))
    hp = {"width": width, "depth": depth, "activation": activation, "dropout": dropout}
    return make_model_def("mlp", "classification", stax.serial(*layers), input_shape, hp,
                 needs_rng=dropout > 0 and depth > 0)


def cnn1d(*, input_shape, num_classes, width: int = 32, depth: int = 2, kernel_size: int = 5,
          hidden: int = 128, conv_impl: str = "auto") -> ModelDef:
    """1-D CNN for sequences ``(L,)`` or ``(L, C)``: ``depth`` × (Conv1D(width·2^i, kernel_size,
    SAME), Relu, MaxPool(2)), Flatten, [Dense(hidden), Relu,] Dense(num_classes).

    Conv ``i`` has ``width·2^i`` channels, a ``kernel_size`` window and SAME padding; the hidden
    dense layer has ``hidden`` units.

    Args:
      input_shape: ``(L,)`` or ``(L, C)``.
      num_classes: the number of output logits.
      width: channels of the first conv, > 0.
      depth: conv blocks, 1 to :data:`MAX_LAYERS`.
      kernel_size: the conv window length, > 0.
      hidden: units of the hidden dense layer, >= 0 (0 = none).
      conv_impl: ``'auto'``, ``'xla'`` or ``'patches'``, see :func:`cnn`.

    Returns:
      The ``"cnn1d"`` classification :class:`ModelDef`.

    Raises:
      ValueError: a value out of range or an input shape of another rank.
    """
    _check_positive("cnn1d", width=width, depth=depth, kernel_size=kernel_size)
    _check_layers("cnn1d", depth=depth)
    _check_nonnegative("cnn1d", hidden=hidden)
    shape = _spatial(input_shape, 1, "cnn1d")
    layers = [_reshape(shape)]
    for i in range(depth):
        layers += [_conv(1, width * 2**i, kernel_size, impl=conv_impl), stax.Relu, stax.MaxPool((2,), (2,))]
    layers.append(stax.Flatten)
    if hidden > 0:
        layers += [stax.Dense(hidden), stax.Relu]
    layers.append(stax.Dense(num_classes))
    hp = {"width": width, "depth": depth, "kernel_size": kernel_size, "hidden": hidden,
          "conv_impl": conv_impl}
    return make_model_def("cnn1d", "classification", stax.serial(*layers), input_shape, hp)


def cnn(*, input_shape, num_classes, width: int = 32, kernel_size: int = 3, hidden: int = 128,
        conv_impl: str = "auto") -> ModelDef:
    """LeNet-like 2-D CNN for images ``(H, W)`` or ``(H, W, C)``: Conv(width, k×k, SAME), Relu,
    MaxPool(2×2), Conv(2·width), Relu, MaxPool(2×2), Flatten, [Dense(hidden), Relu,] Dense.

    Args:
      input_shape: ``(H, W)`` or ``(H, W, C)``.
      num_classes: the number of output logits.
      width: channels of the first conv (the second has ``2·width``), > 0.
      kernel_size: the conv window side ``k``, > 0.
      hidden: units of the hidden dense layer, >= 0 (0 = none).
      conv_impl: ``'auto'`` (default: im2col patches on CPU, XLA's convolution elsewhere), ``'xla'``
        or ``'patches'`` (see :func:`models.stax.GeneralConv`; outputs agree within 1e-5). On CPU
        the harness trainer's ``lax.scan`` runs XLA's convolution ~10x slower than the patches form.

    Returns:
      The ``"cnn"`` classification :class:`ModelDef`.

    Raises:
      ValueError: a value out of range or an input shape of another rank.
    """
    _check_positive("cnn", width=width, kernel_size=kernel_size)
    _check_nonnegative("cnn", hidden=hidden)
    shape = _spatial(input_shape, 2, "cnn")
    k = kernel_size
    layers = [_reshape(shape),
              _conv(2, width, k, impl=conv_impl), stax.Relu, stax.MaxPool((2, 2), (2, 2)),
              _conv(2, 2 * width, k, impl=conv_impl), stax.Relu, stax.MaxPool((2, 2), (2, 2)),
              stax.Flatten]
    if hidden > 0:
        layers += [stax.Dense(hidden), stax.Relu]
    layers.append(stax.Dense(num_classes))
    hp = {"width": width, "kernel_size": kernel_size, "hidden": hidden, "conv_impl": conv_impl}
    return make_model_def("cnn", "classification", stax.serial(*layers), input_shape, hp)


def _res_block(out_chan, stride, project, momentum, impl):
    bn = lambda: stax.BatchNorm(momentum=momentum)  # noqa: E731
    main = stax.serial(_conv(2, out_chan, 3, (stride, stride), impl=impl), bn(), stax.Relu,
                       _conv(2, out_chan, 3, impl=impl), bn())
    shortcut = (stax.serial(_conv(2, out_chan, 1, (stride, stride), impl=impl), bn()) if project
                else stax.Identity)
    return stax.serial(stax.FanOut(2), stax.parallel(main, shortcut), stax.FanInSum, stax.Relu)


def resnet(*, input_shape, num_classes, width: int = 16, stages: int = 2, blocks_per_stage: int = 1,
           bn_momentum: float = 0.9, conv_impl: str = "auto") -> ModelDef:
    """Small ResNet (He et al. 2016, basic blocks) for images ``(H, W[, C])`` (a sequence ``(L[, C])``
    is taken as an ``L×1`` image).

    Stem Conv(width, 3×3), BatchNorm, Relu; ``stages`` stages of ``blocks_per_stage`` residual blocks
    (FanOut(2) → parallel(conv-BN-relu-conv-BN, shortcut) → FanInSum → Relu) with ``width·2^s``
    channels, stride 2 and a 1×1 projection at each stage change; global average pool; Dense.

    Args:
      input_shape: ``(H, W)``, ``(H, W, C)``, ``(L,)`` or ``(L, C)``.
      num_classes: the number of output logits.
      width: channels of the stem and the first stage, > 0.
      stages, blocks_per_stage: > 0, at most :data:`MAX_LAYERS` blocks in all.
      bn_momentum: BatchNorm's running-statistics momentum, in [0, 1).
      conv_impl: see :func:`cnn`.

    Returns:
      The ``"resnet"`` classification :class:`ModelDef` (its state: BatchNorm running statistics).

    Raises:
      ValueError: a value out of range or an input shape of another rank.

    Source: He et al. 2016, arXiv:1512.03385.
    """
    _check_positive("resnet", width=width, stages=stages, blocks_per_stage=blocks_per_stage)
    _check_layers("resnet", blocks=stages * blocks_per_stage)
    if not 0.0 <= bn_momentum < 1.0:
        raise ValueError(f"resnet: bn_momentum must be in [0, 1), got {bn_momentum}")
    shape = tuple(int(d) for d in input_shape)
    shape = _spatial((shape[0], 1) if len(shape) == 1 else shape, 2, "resnet")
    layers = [_reshape(shape), _conv(2, width, 3, impl=conv_impl), stax.BatchNorm(momentum=bn_momentum),
              stax.Relu]
    chans = width
    for s in range(stages):
        out = width * 2**s
        for b in range(blocks_per_stage):
            stride = 2 if (s > 0 and b == 0) else 1
            layers.append(_res_block(out, stride, project=(stride != 1 or out != chans),
                                     momentum=bn_momentum, impl=conv_impl))
            chans = out
    layers += [_global_avg_pool(), stax.Dense(num_classes)]
    hp = {"width": width, "stages": stages, "blocks_per_stage": blocks_per_stage,
          "bn_momentum": bn_momentum, "conv_impl": conv_impl}
    return make_model_def("resnet", "classification", stax.serial(*layers), input_shape, hp)


def autoencoder(*, input_shape, num_classes=None, width: int = 16) -> ModelDef:
    """Convolutional autoencoder, reconstruction task (MSE against the inputs).

    Images use 2-D convs, sequences 1-D ones: Conv(width, 3, stride 2, SAME), Relu, Conv(2·width, 3,
    stride 2, SAME), Relu, ConvTranspose(width, 3, stride 2, SAME), Relu, ConvTranspose(C, 3, stride
    2, SAME), cropped back to the input size.

    Args:
      input_shape: an image ``(H, W)`` or ``(H, W, C)``, or a sequence ``(L,)``.
      num_classes: ignored.
      width: channels of the first conv, > 0.

    Returns:
      The ``"autoencoder"`` reconstruction :class:`ModelDef`; its outputs have the input's shape.

    Raises:
      ValueError: ``width <= 0`` or an input shape of another rank.
    """
    _check_positive("autoencoder", width=width)
    shape = tuple(int(d) for d in input_shape)
    ndim = 1 if len(shape) == 1 else 2
    canon = _spatial(shape, ndim, "autoencoder")
    chans = canon[-1]
    if ndim == 2:
        up = lambda c: stax.ConvTranspose(c, (3, 3), (2, 2), "SAME")  # noqa: E731
    else:
        up = lambda c: stax.Conv1DTranspose(c, (3,), (2,), "SAME")  # noqa: E731
    layers = [_reshape(canon),
              _conv(ndim, width, 3, (2,) * ndim), stax.Relu,
              _conv(ndim, 2 * width, 3, (2,) * ndim), stax.Relu,
              up(width), stax.Relu, up(chans), _crop(canon), _reshape(shape)]
    return make_model_def("autoencoder", "reconstruction", stax.serial(*layers), input_shape,
                          {"width": width})


def resnet18(*, input_shape, num_classes, width: int = 64, bn_momentum: float = 0.9,
             conv_impl: str = "auto") -> ModelDef:
    """CIFAR-shaped ResNet-18 (He et al. 2016, basic blocks, for 32×32×3 images): the stem is one
    Conv(width, 3×3, stride 1), BatchNorm, Relu (no max-pool, as CIFAR ResNets); four stages of two
    blocks with ``width·(1, 2, 4, 8)`` channels (stride 2 and a 1×1 projection at stages 2-4);
    global average pool; Dense(num_classes). 17 convolutions + 1 dense = 18 layers, built by
    :func:`resnet` with ``stages=4, blocks_per_stage=2``.

    Args:
      input_shape: any image ``(H, W[, C])`` with H, W >= 8, e.g. ``(32, 32, 3)``.
      num_classes: the number of output logits.
      width: stem channels, > 0; 64 is the standard network (11.2M params at 10 classes).
      bn_momentum: BatchNorm's running-statistics momentum, in [0, 1).
      conv_impl: see :func:`cnn`.

    Returns:
      The ``"resnet18"`` classification :class:`ModelDef`.

    Raises:
      ValueError: as :func:`resnet`.

    Source: He et al. 2016, arXiv:1512.03385.
    """
    model = resnet(input_shape=input_shape, num_classes=num_classes, width=width, stages=4,
                   blocks_per_stage=2, bn_momentum=bn_momentum, conv_impl=conv_impl)
    hp = {"width": width, "bn_momentum": bn_momentum, "conv_impl": conv_impl}
    return dataclasses.replace(model, name="resnet18", hparams=hp)


def _positional(kind, max_len, builder):
    if kind == "learned":
        return stax.PositionalEmbedding(max_len)
    if kind == "sinusoidal":
        return stax.SinusoidalPositionalEmbedding()
    raise ValueError(f"{builder}: positional must be 'learned' or 'sinusoidal', got {kind!r}")


def _encoder_block(width, num_heads, mlp_dim, dropout, causal):
    """Pre-LN Transformer block: x + MHSA(LN(x)); x + MLP(LN(x)) with MLP Dense-Gelu-Dense."""
    zeros = stax.zeros
    attn = stax.MultiHeadSelfAttention(num_heads, causal=causal, out_dropout=dropout)
    mlp_layers = [stax.LayerNorm(), stax.Dense(mlp_dim, b_init=zeros), stax.Gelu,
                  stax.Dense(width, b_init=zeros)]
    if dropout > 0:
        mlp_layers.append(stax.Dropout(1.0 - dropout))
    return [stax.Residual(stax.LayerNorm(), attn), stax.Residual(*mlp_layers)]


def _check_transformer(builder, width, depth, num_heads, mlp_ratio, dropout):
    _check_positive(builder, width=width, num_heads=num_heads, mlp_ratio=mlp_ratio)
    _check_nonnegative(builder, depth=depth)
    _check_layers(builder, depth=depth)
    if width % num_heads:
        raise ValueError(f"{builder}: width {width} must be divisible by num_heads {num_heads}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"{builder}: dropout is the drop probability and must be in [0, 1), got {dropout}")


def transformer_lm(*, input_shape, num_classes=None, vocab_size: int | None = None, width: int = 128,
                   depth: int = 2, num_heads: int = 4, context: int | None = None, mlp_ratio: int = 4,
                   dropout: float = 0.0, positional: str = "learned") -> ModelDef:
    """Pre-LN decoder-only Transformer language model (GPT-2 style), task ``"sequence"``.

    Int32 tokens ``(N, T)`` -> next-token logits ``(N, T, vocab_size)``; loss
    :func:`sequence_cross_entropy`, metric ``accuracy`` = :func:`sequence_accuracy`. Layers: Embedding,
    positional embedding, ``depth`` × [x + causal MultiHeadSelfAttention(LayerNorm(x)); x +
    Dense(width)(Gelu(Dense(mlp_ratio·width)(LayerNorm(x))))], LayerNorm, Dense(vocab_size) (untied).
    Params float32; in bfloat16, LayerNorm statistics, the softmax and the loss stay float32.

    Args:
      input_shape: ``(T,)``.
      num_classes, vocab_size: the dataset's vocabulary and the model's (default: the dataset's).
      width, depth, num_heads: model width, blocks (at most :data:`MAX_LAYERS`), heads dividing ``width``.
      context: the longest sequence (the learned table's length), >= ``T`` (default ``T``).
      mlp_ratio: the MLP's hidden size over ``width``, > 0.
      dropout: drop probability in [0, 1) of each block's attention and MLP outputs (``needs_rng``).
      positional: ``'learned'`` (a ``(context, width)`` table) or ``'sinusoidal'`` (fixed).

    Returns:
      The ``"transformer_lm"`` sequence :class:`ModelDef`, int32 inputs.

    Raises:
      ValueError: bad values, or ``vocab_size`` and ``num_classes`` both given and different.
    """
    shape = tuple(int(d) for d in input_shape)
    if len(shape) != 1:
        raise ValueError(f"transformer_lm: input_shape must be (T,) token positions, got {shape}")
    if vocab_size is None:
        if num_classes is None:
            raise ValueError("transformer_lm: needs vocab_size (or a dataset's num_classes)")
        vocab_size = int(num_classes)
    elif num_classes is not None and int(num_classes) != int(vocab_size):
        raise ValueError(f"transformer_lm: vocab_size {vocab_size} differs from the dataset's "
                         f"{num_classes} token classes; leave vocab_size unset to use the dataset's")
    context = shape[0] if context is None else int(context)
    _check_positive("transformer_lm", vocab_size=vocab_size, context=context)
    _check_transformer("transformer_lm", width, depth, num_heads, mlp_ratio, dropout)
    if shape[0] > context:
        raise ValueError(f"transformer_lm: sequences of length {shape[0]} exceed context {context}")
    layers = [stax.Embedding(vocab_size, width), _positional(positional, context, "transformer_lm")]
    for _ in range(depth):
        layers += _encoder_block(width, num_heads, mlp_ratio * width, dropout, causal=True)
    layers += [stax.LayerNorm(), stax.Dense(vocab_size, b_init=stax.zeros)]
    hp = {"vocab_size": vocab_size, "width": width, "depth": depth, "num_heads": num_heads,
          "context": context, "mlp_ratio": mlp_ratio, "dropout": dropout, "positional": positional}
    return make_model_def("transformer_lm", "sequence", stax.serial(*layers), shape, hp,
                 needs_rng=dropout > 0 and depth > 0, input_dtype="int32")


def _lm_vocab_context(builder, shape, num_classes, vocab_size, context):
    """``(vocab_size, context)`` of a token model from the dataset's ``num_classes`` and ``(T,)``."""
    if len(shape) != 1:
        raise ValueError(f"{builder}: input_shape must be (T,) token positions, got {shape}")
    if vocab_size is None:
        if num_classes is None:
            raise ValueError(f"{builder}: needs vocab_size (or a dataset's num_classes)")
        vocab_size = int(num_classes)
    elif num_classes is not None and int(num_classes) != int(vocab_size):
        raise ValueError(f"{builder}: vocab_size {vocab_size} differs from the dataset's "
                         f"{num_classes} token classes; leave vocab_size unset to use the dataset's")
    return int(vocab_size), shape[0] if context is None else int(context)


#: :func:`gpt`'s hyperparameters that :func:`models.gpt.check_gpt` does not take.
_NOT_CHECKED = ("context", "tied_head", "zero_init", "qk_norm", "bias")


def gpt(*, input_shape, num_classes=None, vocab_size: int | None = None, width: int = 128,
        depth: int = 2, num_heads: int = 4, context: int | None = None, mlp: str = "relu2",
        mlp_ratio: float = 4.0, tied_head: bool = False, zero_init: bool = True,
        logit_softcap: float = 0.0, softcap_form: str = "algebraic", qk_norm: bool = True,
        rope_base: float = 1024.0, rope_fraction: float = 0.5, attn_scale: float | None = None,
        bias: bool = True, norm_eps: float = 1e-6, init: str = "modded", remat: str = "none",
        loss_block: int | None = None, attn_impl: str = "auto") -> ModelDef:
    """Modern decoder-only GPT (RMSNorm, RoPE, QK-norm, ReLU²/SwiGLU), task ``"sequence"``.

    :func:`models.gpt.GPT`; inputs, outputs, loss and metric as :func:`transformer_lm`.
    ``flops_per_example`` is :func:`models.flops.lm_train_flops_per_token` (MaxText's: causal
    attention at half) ÷ 3 × ``T``, the forward third of training.

    Args:
      input_shape, num_classes, vocab_size, width, depth, num_heads: as :func:`transformer_lm`.
      context: the sequence length it trains on: the dataset's ``T`` (the default; rotary embeddings
        have no table a longer context would fill).
      mlp, mlp_ratio, tied_head, zero_init, logit_softcap, softcap_form: as :func:`models.gpt.GPT`.
      qk_norm, rope_base, rope_fraction, attn_scale, bias, norm_eps: as :func:`models.gpt.GPT`.
      init: ``"modded"`` or ``"torch"`` (torch's default initialisation), as :func:`models.gpt.GPT`.
      remat, loss_block, attn_impl: as :func:`models.gpt.GPT` (``remat: block`` for long contexts;
        ``loss_block``: the ``fused_loss``'s tokens per block of logits, 0 whole, null auto).

    Returns:
      The ``"gpt"`` sequence :class:`ModelDef`, int32 inputs, with a ``fused_loss``.

    Raises:
      ValueError: bad values (:func:`models.gpt.check_gpt`) or a ``context`` other than ``T``.
    """
    shape = tuple(int(d) for d in input_shape)
    vocab_size, context = _lm_vocab_context("gpt", shape, num_classes, vocab_size, context)
    _check_layers("gpt", depth=depth)
    if context != shape[0]:
        raise ValueError(f"gpt: context {context} differs from the dataset's sequence length {shape[0]}: "
                         f"the data gives windows of {shape[0]} tokens (leave context unset to use it)")
    hp = {"vocab_size": vocab_size, "width": width, "depth": depth, "num_heads": num_heads,
          "context": context, "mlp": mlp, "mlp_ratio": mlp_ratio, "tied_head": tied_head,
          "zero_init": zero_init, "logit_softcap": logit_softcap, "softcap_form": softcap_form,
          "qk_norm": qk_norm, "rope_base": rope_base, "rope_fraction": rope_fraction,
          "attn_scale": attn_scale, "bias": bias, "norm_eps": norm_eps, "remat": remat,
          "loss_block": loss_block, "attn_impl": attn_impl, **({"init": init} if init != "modded" else {})}
    check_gpt(**{k: v for k, v in hp.items() if k not in _NOT_CHECKED})
    layer = GPT(**{k: v for k, v in hp.items() if k != "context"})
    model = make_model_def("gpt", "sequence", layer, shape, hp, input_dtype="int32")
    flops = _gpt_flops(width, depth, context, vocab_size, mlp_ratio, mlp)
    return dataclasses.replace(model, flops_per_example=flops, fused_loss=_gpt_fused_loss(layer))


def _gpt_flops(width, depth, context, vocab_size, mlp_ratio, mlp):
    """:func:`gpt`'s ``flops_per_example``: training's FLOPs per token ÷ 3 × ``context``."""
    per_token = lm_train_flops_per_token(width=width, depth=depth, context=context, vocab_size=vocab_size,
                                         mlp_dim=mlp_dim(width, mlp_ratio),
                                         mlp_matrices=3 if mlp == "swiglu" else 2)

    def flops_per_example(shape=None):
        return per_token / 3.0 * context

    return flops_per_example


def _gpt_fused_loss(layer):
    """:func:`gpt`'s ``fused_loss``: the mean next-token NLL of ``layer``'s blocked loss, and its
    accuracy when not training."""

    def fused_loss(params, state, inputs, targets, *, rng=None, train):
        nll, hits, count = layer[1].loss_stats(params, inputs, targets, train=bool(train))
        n = jnp.maximum(count, 1.0)
        return nll / n, ({} if train else {"accuracy": hits / n}), state

    return fused_loss


def vit(*, input_shape, num_classes, patch_size: int = 4, width: int = 192, depth: int = 6,
        num_heads: int = 3, mlp_ratio: int = 4, dropout: float = 0.0, positional: str = "learned",
        conv_impl: str = "auto") -> ModelDef:
    """Vision Transformer (Dosovitskiy et al. 2021) for images ``(H, W[, C])``, e.g. CIFAR 32×32×3.

    Patch embedding Conv(width, p×p, stride p, VALID), reshaped to ``(N, (H/p)·(W/p), width)``
    tokens; positional embedding; ``depth`` pre-LN encoder blocks (non-causal MultiHeadSelfAttention,
    Dense-Gelu-Dense MLP of ``mlp_ratio·width``); LayerNorm; mean over tokens (global average
    pooling, as AlgoPerf's ViT); Dense(num_classes).

    Args:
      input_shape: ``(H, W)`` or ``(H, W, C)``, H and W multiples of ``patch_size``.
      num_classes: the number of output logits.
      patch_size: the patch side ``p`` in pixels, > 0.
      width, depth, num_heads, mlp_ratio, dropout: as :func:`transformer_lm`.
      positional: ``'learned'`` or ``'sinusoidal'`` positional embedding.
      conv_impl: the patch embedding's, see :func:`cnn`.

    Returns:
      The ``"vit"`` classification :class:`ModelDef`.

    Raises:
      ValueError: bad values.

    Source: Dosovitskiy et al. 2021, arXiv:2010.11929.
    """
    shape = _spatial(input_shape, 2, "vit")
    _check_positive("vit", patch_size=patch_size)
    _check_transformer("vit", width, depth, num_heads, mlp_ratio, dropout)
    H, W = shape[0], shape[1]
    if H % patch_size or W % patch_size:
        raise ValueError(f"vit: image size {H}x{W} is not a multiple of patch_size {patch_size}")
    tokens = (H // patch_size) * (W // patch_size)
    layers = [_reshape(shape),
              _conv(2, width, patch_size, (patch_size, patch_size), "VALID", impl=conv_impl),
              _reshape((tokens, width)), _positional(positional, tokens, "vit")]
    for _ in range(depth):
        layers += _encoder_block(width, num_heads, mlp_ratio * width, dropout, causal=False)
    layers += [stax.LayerNorm(), _global_avg_pool(), stax.Dense(num_classes, b_init=stax.zeros)]
    hp = {"patch_size": patch_size, "width": width, "depth": depth, "num_heads": num_heads,
          "mlp_ratio": mlp_ratio, "dropout": dropout, "positional": positional, "conv_impl": conv_impl}
    return make_model_def("vit", "classification", stax.serial(*layers), input_shape, hp,
                 needs_rng=dropout > 0 and depth > 0)


#: The model registry: name -> builder.
MODELS: dict[str, Callable[..., ModelDef]] = {
    "logreg": logreg,
    "mlp": mlp,
    "cnn1d": cnn1d,
    "cnn": cnn,
    "resnet": resnet,
    "autoencoder": autoencoder,
    "resnet18": resnet18,
    "transformer_lm": transformer_lm,
    "gpt": gpt,
    "vit": vit,
}
