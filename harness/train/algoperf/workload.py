"""A harness model on its dataset, seen through AlgoPerf's ``Workload`` interface; its input queue.

:func:`make_workload` wraps a :class:`harness.train.build.ModelEntry` (the model on its dataset) in
a class derived from :class:`HarnessWorkload` and from the ``spec.Workload`` the submission imported
(AlgoPerf's when installed, else the stand-in), so ``isinstance(workload, spec.Workload)`` holds.
What a submission may use:

* ``model_fn(params, batch, model_state, mode, rng, update_batch_norm, use_running_average_bn=None,
  dropout_rate=None) -> (outputs, new_model_state)``: the harness's forward pass
  (``entry.forward``, mixed precision included); ``mode`` ``TRAIN`` turns dropout on and updates
  BatchNorm statistics (kept only with ``update_batch_norm``), ``EVAL`` neither. ``rng`` feeds
  dropout. ``dropout_rate`` and ``use_running_average_bn`` are accepted and ignored: a harness
  model's dropout is a model hyperparameter, fixed when it is built.
* ``loss_fn(label_batch, logits_batch, mask_batch=None, label_smoothing=0.0) -> {"summed",
  "n_valid_examples", "per_example"}``, the model's own loss (:mod:`models.zoo`) as a masked sum:
  classification, softmax cross-entropy with integer labels (``label_smoothing`` spreads that
  mass uniformly over the classes); sequence, the same per token, targets < 0 excluded;
  reconstruction, the mean squared error of each example. ``summed / n_valid_examples`` equals
  ``model.loss`` with all-ones weights.
* ``param_shapes`` (tree of ``ShapeTuple``), ``model_params_types`` (tree of ``ParameterType``,
  guessed from each leaf's rank: 1 → ``BIAS``, 2 → ``WEIGHT``, more → ``CONV_WEIGHT``; stax
  parameters carry no names), ``step_hint`` (``spec.steps``), ``num_train_examples``,
  ``num_validation_examples``, ``num_test_examples``, ``eval_batch_size``, ``loss_type``,
  ``target_metric_name``, ``validation_target_value``, ``has_reached_validation_target``,
  ``train_mean``/``train_stddev`` (of the training inputs), ``metrics_logger`` (``None``),
  ``workload_name`` (``spec.workload``, else ``<dataset>_<model>``, e.g. ``mnist1d_mlp``) and a
  class name made from it (``Mnist1dMlpWorkload``).

:class:`InputQueue` yields the training batches ``{"inputs", "targets", "weights"}`` (weights all
ones; ``targets`` are the inputs for a reconstruction model) in the harness trainer's data order:
a stream of epochs, each ``jax.random.permutation(fold_in(data_key, epoch), N)``; the ``p``-th batch
drawn is stream positions ``[p·B, (p+1)·B)``, augmented (``spec.augment``) with the key of update
``p``. A submission that draws one batch per step (``next(input_queue)`` in ``data_selection``)
therefore trains step ``i`` on exactly the examples the native trainer's step ``i`` uses.
"""

from __future__ import annotations

import math
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from harness.core.spec import TrialSpec
from harness.train.augment import AUGMENT_STREAM, make_augment

__all__ = ["HarnessWorkload", "InputQueue", "make_workload", "workload_name"]


def workload_name(spec: TrialSpec) -> str:
    """``spec.workload`` when set, else ``<dataset>_<model>``; characters other than letters,
    digits and ``_`` become ``_`` (``tfds:cifar10`` → ``tfds_cifar10``)."""
    raw = spec.workload or f"{spec.dataset}_{spec.model}"
    return re.sub(r"[^A-Za-z0-9_]", "_", raw)


def _class_name(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_") if p) + "Workload"


def _mode_name(mode: Any) -> str:
    return str(getattr(mode, "name", mode)).upper()


class HarnessWorkload:
    """The methods and properties of the adapter (module docstring); use :func:`make_workload`."""

    def __init__(self, entry: Any, spec: TrialSpec, api: Any):
        super().__init__()
        self.entry, self.spec, self.api = entry, spec, api
        self.workload_name = workload_name(spec)
        self.metrics_logger = None
        self.task = getattr(entry.model, "task", "classification")
        self._param_shapes: Any = None
        self._param_types: Any = None

    # -- parameters ----------------------------------------------------------------------------

    def set_params(self, params: Any) -> None:
        """Record the parameter tree's shapes and types (called once the model is initialised)."""
        api = self.api
        kinds = {1: api.ParameterType.BIAS, 2: api.ParameterType.WEIGHT}
        self._param_shapes = jax.tree.map(lambda p: api.ShapeTuple(tuple(p.shape)), params)
        self._param_types = jax.tree.map(
            lambda p: kinds.get(p.ndim, api.ParameterType.CONV_WEIGHT), params)

    @property
    def param_shapes(self) -> Any:
        if self._param_shapes is None:
            raise ValueError("param_shapes is known once the model is initialised")
        return self._param_shapes

    @property
    def model_params_types(self) -> Any:
        if self._param_types is None:
            raise ValueError("model_params_types is known once the model is initialised")
        return self._param_types

    def init_model_fn(self, rng: Any) -> tuple[Any, Any]:
        """``(params, model_state)`` of the model initialised with ``rng``."""
        params, mstate = self.entry.init_params(rng)
        self.set_params(params)
        return params, mstate

    def is_output_params(self, param_key: Any) -> bool:
        return False

    # -- forward pass and loss -----------------------------------------------------------------

    def model_fn(self, params: Any, augmented_and_preprocessed_input_batch: dict[str, Any],
                 model_state: Any, mode: Any, rng: Any, update_batch_norm: bool,
                 use_running_average_bn: bool | None = None, dropout_rate: float | None = None):
        """``(outputs, new_model_state)`` (module docstring)."""
        del use_running_average_bn, dropout_rate
        train = _mode_name(mode) == "TRAIN"
        rng = rng if (train and self.entry.needs_rng) else None
        inputs = augmented_and_preprocessed_input_batch["inputs"]
        out, new_state = self.entry.forward(params, model_state, inputs, rng=rng, train=train)
        return out, (new_state if train and update_batch_norm else model_state)

    def loss_fn(self, label_batch: Any, logits_batch: Any, mask_batch: Any = None,
                label_smoothing: float = 0.0) -> dict[str, Any]:
        """``{"summed", "n_valid_examples", "per_example"}`` (module docstring)."""
        out = jnp.asarray(logits_batch)
        if self.task == "reconstruction":
            err = jnp.square(out - jnp.asarray(label_batch, out.dtype))
            per = jnp.mean(err.reshape(err.shape[0], -1), axis=1)
            valid = jnp.ones(per.shape, bool)
        else:
            logp = jax.nn.log_softmax(out.astype(jnp.float32), axis=-1)
            t = jnp.asarray(label_batch, jnp.int32)
            valid = t >= 0
            picked = jnp.take_along_axis(logp, jnp.maximum(t, 0)[..., None], axis=-1)[..., 0]
            per = -((1.0 - label_smoothing) * picked + label_smoothing * jnp.mean(logp, axis=-1))
        w = valid.astype(per.dtype)
        if mask_batch is not None:
            m = jnp.asarray(mask_batch, per.dtype)
            while m.ndim < per.ndim:
                m = m[..., None]
            w = w * m
        per = jnp.where(w > 0, per, 0.0) * w
        return {"summed": jnp.sum(per), "n_valid_examples": jnp.sum(w), "per_example": per}

    # -- the workload's numbers ----------------------------------------------------------------

    @property
    def loss_type(self) -> Any:
        lt = self.api.LossType
        return lt.MEAN_SQUARED_ERROR if self.task == "reconstruction" else lt.SOFTMAX_CROSS_ENTROPY

    @property
    def step_hint(self) -> int:
        return int(self.spec.steps)

    @property
    def num_train_examples(self) -> int:
        return int(self.entry.num_train)

    @property
    def num_eval_train_examples(self) -> int:
        return int(self.entry.num_train)

    @property
    def num_validation_examples(self) -> int:
        return int(self.entry.num_valid)

    @property
    def num_test_examples(self) -> int:
        return int(self.entry.ds.num_test) if hasattr(self.entry.ds, "num_test") else \
            int(self.entry.ds.x_test.shape[0])

    @property
    def eval_batch_size(self) -> int:
        return int(self.entry.eval_batch)

    @property
    def train_mean(self) -> Any:
        return float(np.mean(self.entry.ds.x_train))

    @property
    def train_stddev(self) -> Any:
        return float(np.std(self.entry.ds.x_train))

    @property
    def target_metric_name(self) -> str:
        tgt = self.spec.target
        if tgt is not None:
            return tgt.metric.split("/", 1)[-1]
        return "loss" if self.task == "reconstruction" else "accuracy"

    @property
    def validation_target_value(self) -> float:
        return float(self.spec.target.value) if self.spec.target is not None else math.nan

    @property
    def test_target_value(self) -> float:
        return self.validation_target_value

    @property
    def max_allowed_runtime_sec(self) -> float:
        return math.inf

    @property
    def eval_period_time_sec(self) -> float:
        return math.inf

    def has_reached_validation_target(self, eval_result: dict[str, float]) -> bool:
        tgt = self.spec.target
        value = eval_result.get(f"validation/{self.target_metric_name}", math.nan)
        return tgt is not None and tgt.reached(float(value))

    def has_reached_test_target(self, eval_result: dict[str, float]) -> bool:
        tgt = self.spec.target
        value = eval_result.get(f"test/{self.target_metric_name}", math.nan)
        return tgt is not None and tgt.reached(float(value))


def make_workload(entry: Any, spec: TrialSpec, api: Any) -> HarnessWorkload:
    """The adapter of ``entry`` for ``spec``, an instance of a class named after the workload
    (``Mnist1dMlpWorkload``) derived from :class:`HarnessWorkload` and ``api.Workload``."""
    name = _class_name(workload_name(spec))
    cls = type(name, (HarnessWorkload, api.Workload), {"__module__": __name__})
    if getattr(cls, "__abstractmethods__", None):  # the real ABC's members this harness leaves out
        cls.__abstractmethods__ = frozenset()
    return cls(entry, spec, api)


class InputQueue:
    """The training batches in the harness's data order (module docstring); an iterator without
    end. ``position`` is the number of batches drawn (checkpointed with the trial)."""

    def __init__(self, entry: Any, spec: TrialSpec, data_key: jax.Array, batch_size: int):
        self.entry, self.B, self.N = entry, int(batch_size), int(entry.num_train)
        self.data_key = data_key
        self.position = 0
        self._perms: dict[int, np.ndarray] = {}
        augmenter = make_augment(dict(spec.augment))
        reconstruction = entry.reconstruction

        def perm(key, e):
            return jax.random.permutation(jax.random.fold_in(key, e), self.N).astype(jnp.int32)

        def gather(x, y, idx, key, i):
            xb, yb = entry.decode(x[idx]), y[idx]
            if augmenter is not None:
                xb = augmenter(xb, jax.random.fold_in(jax.random.fold_in(key, AUGMENT_STREAM), i))
            return {"inputs": xb, "targets": xb if reconstruction else yb,
                    "weights": jnp.ones(yb.shape if entry.model.task == "sequence" else yb.shape[:1],
                                        jnp.float32)}

        self._perm = jax.jit(perm)
        self._gather = jax.jit(gather)

    def __iter__(self) -> InputQueue:
        return self

    def _epoch(self, e: int) -> np.ndarray:
        if e not in self._perms:
            self._perms = {k: v for k, v in self._perms.items() if k >= e - 1}
            self._perms[e] = np.asarray(self._perm(self.data_key, jnp.int32(e)))
        return self._perms[e]

    def indices(self, p: int) -> np.ndarray:
        """The training examples of the ``p``-th batch (0-based)."""
        first, last = p * self.B, (p + 1) * self.B - 1
        e0, e1 = first // self.N, last // self.N
        stream = np.concatenate([self._epoch(e) for e in range(e0, e1 + 1)])
        return stream[first - e0 * self.N: last - e0 * self.N + 1]

    def __next__(self) -> dict[str, jax.Array]:
        p = self.position
        idx = jnp.asarray(self.indices(p))
        self.position += 1
        e = self.entry
        return self._gather(e.x_train, e.y_train, idx, self.data_key, jnp.int32(p))
