"""Stand-in for AlgoPerf's ``algoperf.spec``, as far as submissions use it.

An AlgoPerf submission begins with ``from algoperf import spec`` and uses the module for its
types and enums (``spec.ForwardPassMode.TRAIN``, ``spec.UpdateReturn``, ``spec.ShapeTuple`` with
``.shape_tuple``, ...), for the ``Workload`` it is handed, and for ``spec.TrainingCompleteError``.
When the real ``algoperf`` package is not installed, :func:`harness.train.algoperf.submission.load_submission`
registers this module as ``algoperf.spec``, so such a file runs on the harness unchanged.

Written from AlgoPerf v0.6's documented API (``algoperf/spec.py`` of mlcommons/algorithmic-efficiency):
the same names and enum members, none of its PyTorch parts. Pure Python (no jax import).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "DataSelectionFn", "ForwardPassMode", "Hyperparameters", "InitOptimizerFn", "LossType",
    "ModelAuxiliaryState", "ModelInitState", "OptimizerState", "ParameterContainer", "ParameterKey",
    "ParameterShapeTree", "ParameterType", "ParameterTypeTree", "PrepareForEvalFn", "RandomState",
    "Shape", "ShapeTuple", "Steps", "Tensor", "Timing", "TrainingCompleteError", "UpdateParamsFn",
    "UpdateReturn", "Workload",
]


class LossType(enum.Enum):
    """The kind of loss a workload trains with (member values as AlgoPerf's)."""

    SOFTMAX_CROSS_ENTROPY = 0
    SIGMOID_CROSS_ENTROPY = 1
    MEAN_SQUARED_ERROR = 2
    CTC_LOSS = 3
    MEAN_ABSOLUTE_ERROR = 4


class ForwardPassMode(enum.Enum):
    """``model_fn``'s mode: training (dropout on, BatchNorm statistics updated) or evaluation."""

    TRAIN = 0
    EVAL = 1


class ParameterType(enum.Enum):
    """What a parameter leaf is (``workload.model_params_types`` holds one per leaf)."""

    WEIGHT = 0
    BIAS = 1
    CONV_WEIGHT = 2
    BATCH_NORM_SCALE = 3
    BATCH_NORM_BIAS = 4
    LAYER_NORM_SCALE = 5
    LAYER_NORM_BIAS = 6
    EMBEDDING = 7
    ATTENTION_Q = 8
    ATTENTION_K = 9
    ATTENTION_V = 10
    ATTENTION_OUT = 11
    ATTENTION_QKV = 12
    ATTENTION_KV = 13
    ATTENTION_BIAS = 14


class ShapeTuple:
    """A parameter's shape, wrapped so that pytree utilities treat it as one leaf
    (``jax.tree.map(lambda s: jnp.zeros(s.shape_tuple), workload.param_shapes)``)."""

    def __init__(self, shape_tuple: tuple[int, ...]):
        self.shape_tuple = tuple(shape_tuple)

    def __repr__(self) -> str:
        return f"ShapeTuple({self.shape_tuple})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShapeTuple) and self.shape_tuple == other.shape_tuple

    def __hash__(self) -> int:
        return hash(self.shape_tuple)


class TrainingCompleteError(Exception):
    """Raised by ``update_params`` to end training early (one final evaluation follows)."""


# Type aliases (annotations in submissions; no behaviour).
Tensor = Any
Shape = tuple[int, ...] | ShapeTuple
ParameterKey = str
ParameterContainer = Any
ParameterShapeTree = Any
ParameterTypeTree = Any
RandomState = Any
OptimizerState = Any
Hyperparameters = Any
Timing = int
Steps = int
ModelAuxiliaryState = Any
ModelInitState = tuple[ParameterContainer, ModelAuxiliaryState]
UpdateReturn = tuple[OptimizerState, ParameterContainer, ModelAuxiliaryState]
InitOptimizerFn = Callable[..., OptimizerState]
UpdateParamsFn = Callable[..., UpdateReturn]
PrepareForEvalFn = Callable[..., UpdateReturn]
DataSelectionFn = Callable[..., dict[str, Tensor]]


class Workload:
    """The base of the workload a submission receives.

    The harness's adapter (:class:`harness.train.algoperf.workload.HarnessWorkload`) implements
    what submissions call: ``model_fn``, ``loss_fn``, ``param_shapes``, ``model_params_types``,
    ``step_hint``, ``num_train_examples``, ``eval_batch_size``, ``loss_type``, ``metrics_logger``
    and the target helpers. Anything else raises ``NotImplementedError`` naming it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        del args, kwargs
        self._param_shapes: Any = None
        self._param_types: Any = None
        self._eval_iters: dict[str, Iterator] = {}
        self.metrics_logger: Any = None

    def attach_metrics_logger(self, metrics_logger: Any) -> None:
        self.metrics_logger = metrics_logger

    @property
    def param_shapes(self) -> Any:
        """A tree of :class:`ShapeTuple` shaped like the parameters."""
        if self._param_shapes is None:
            raise ValueError("param_shapes is known once the model is initialised")
        return self._param_shapes

    @property
    def model_params_types(self) -> Any:
        """A tree of :class:`ParameterType` shaped like the parameters."""
        if self._param_types is None:
            raise ValueError("model_params_types is known once the model is initialised")
        return self._param_types

    def _missing(self, name: str) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.{name} is not provided on this harness")

    def init_model_fn(self, rng: RandomState) -> ModelInitState:
        return self._missing("init_model_fn")

    def model_fn(self, params, augmented_and_preprocessed_input_batch, model_state, mode, rng,
                 update_batch_norm, use_running_average_bn=None, dropout_rate=None):
        return self._missing("model_fn")

    def loss_fn(self, label_batch, logits_batch, mask_batch=None, label_smoothing=0.0):
        return self._missing("loss_fn")

    def is_output_params(self, param_key: ParameterKey) -> bool:
        return self._missing("is_output_params")
