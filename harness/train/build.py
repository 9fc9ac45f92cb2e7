"""Building a trial's parts: its model on a dataset, its optimizer, its step size and dtypes.

* :func:`build_model` calls the model builder as every trial does
  (``MODELS[spec.model](input_shape=..., num_classes=..., **model_hp)``).
* :func:`make_opt_factory` builds the optimizer *from its step size* (a float or a traced scalar,
  so step sizes can be vmapped): ``OPTIMIZERS[name](SCHEDULES[schedule](step_size, **schedule_hp),
  **optimizer_hp)``, ``total_steps`` of the schedule filled with the trial's steps;
  :func:`base_step_size` is the step size a trial starts from. The sweep's pre-flight builds
  optimizers with these two functions too.
* :func:`as_train_optimizer` turns whatever a builder returned into a :class:`TrainOptimizer`
  (``init_fn, update_fn, params_fn, eval_params_fn``): this project's or
  ``jax.example_libraries``' ``Optimizer`` or any ``(init_fun, update_fun, get_params)`` triple, a
  4-tuple whose fourth member is ``eval_params(opt_state) -> params``, or an Optax
  ``GradientTransformation`` (through ``optimizers.from_optax``). The evaluation parameters come
  from the fourth member, else the rule registered for the builtin (``optimizers.registry.
  EVAL_PARAMS``: the Schedule-Free pair), else an ``optax.contrib`` Schedule-Free state inside an
  Optax state (``optimizers.extra.optax_eval_params``).
* :class:`ModelEntry` is a model on one dataset: the data on the device (one copy per dataset,
  shared: :mod:`harness.train.device_data`), the forward pass under mixed precision
  (:func:`cast_floats`), the whole-split evaluation in batches of at most :data:`EVAL_BATCH` (fewer
  for a sequence model whose batch would pass :data:`harness.train.eval_memory.EVAL_MEMORY`), and the
  compiled parameter-init and evaluation executables, shared by every optimizer, step size and seed.

Registries are passed in (``models``, ``optimizers``, ``schedules`` mappings); this module never
looks them up itself (:mod:`harness.train.program` does).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from harness.core.builders import lookup
from harness.core.spec import TrialSpec
from harness.data.sources import Dataset
from harness.train import device_data, eval_memory
from harness.train.device_data import storage_array
from optimizers.extra import from_optax, optax_eval_params
from optimizers.registry import EVAL_PARAMS
from optimizers.registry import OPTIMIZERS as BUILTIN_OPTIMIZERS

__all__ = ["ACCEPTED_FORMS", "EVAL_BATCH", "ModelEntry", "TrainOptimizer", "as_train_optimizer",
           "base_step_size", "build_model", "cast_floats", "make_opt_factory", "storage_array",
           "trial_step_size"]

#: Largest evaluation batch (examples). Read at call time, so a test may lower it.
EVAL_BATCH = 1024


def cast_floats(tree: Any, dtype: Any) -> Any:
    """Every floating leaf of ``tree`` cast to ``dtype`` (integer leaves untouched)."""
    return jax.tree_util.tree_map(
        lambda a: a.astype(dtype) if jnp.issubdtype(jnp.result_type(a), jnp.floating) else a, tree)


def base_step_size(optimizer: str, optimizer_hparams: Mapping[str, Any], opt_builder: Callable) -> float:
    """The base step size of a trial: its ``step_size`` hyperparameter, else the builder's default
    first argument.

    Raises:
      ValueError: neither is given (``optimizer 'x' needs optimizer.step_size``).
    """
    if "step_size" in optimizer_hparams:
        return float(optimizer_hparams["step_size"])
    first = next(iter(inspect.signature(opt_builder).parameters.values()), None)
    if first is not None and first.default is not inspect.Parameter.empty:
        return float(first.default)
    raise ValueError(f"optimizer {optimizer!r} needs optimizer.step_size")


def trial_step_size(spec: TrialSpec, opt_builder: Callable) -> float:
    """:func:`base_step_size` of ``spec``.

    Raises:
      ValueError: as :func:`base_step_size`, the message prefixed with ``trial <trial_id>: ``.
    """
    try:
        return base_step_size(spec.optimizer, spec.hparams("optimizer"), opt_builder)
    except ValueError as e:
        raise ValueError(f"trial {spec.trial_id}: {e}") from None


#: What an optimizer builder may return (the end of :func:`as_train_optimizer`'s TypeError).
ACCEPTED_FORMS = ("an (init_fun, update_fun, get_params) triple, a 4-tuple with eval_params, "
                  "or an optax GradientTransformation")


class TrainOptimizer(NamedTuple):
    """An optimizer as the trainer uses it: the triple, and ``eval_params_fn(opt_state)`` giving
    the parameters to evaluate at, or ``None`` where they are ``params_fn``'s (the function itself
    may return ``None`` too: no evaluation parameters for that state, decided by its structure)."""

    init_fn: Callable[[Any], Any]
    update_fn: Callable[[Any, Any, Any], Any]
    params_fn: Callable[[Any], Any]
    eval_params_fn: Callable[[Any], Any] | None = None


def _returned(obj: Any) -> str:
    if isinstance(obj, tuple | list):
        n_callable = sum(callable(m) for m in obj)
        return f"a {type(obj).__name__} of {len(obj)} members ({n_callable} callable)"
    return type(obj).__name__


def as_train_optimizer(obj: Any, name: str,
                       eval_params: Callable[[Any], Any] | None = None) -> TrainOptimizer:
    """``obj`` (what optimizer ``name``'s builder returned) as a :class:`TrainOptimizer`.

    Accepted: an Optax ``GradientTransformation`` (anything with callable ``init`` and ``update``;
    wrapped with ``optimizers.from_optax``); a tuple of 3 callables ``(init_fun, update_fun,
    get_params)`` (this project's and ``jax.example_libraries``' ``Optimizer`` among them); a tuple of
    4 callables, the fourth ``eval_params(opt_state) -> params`` (``None`` there: none); a
    :class:`TrainOptimizer`.
    ``eval_params`` (the rule registered for a builtin) is used where ``obj`` brings none; without
    either, ``optimizers.extra.optax_eval_params`` looks for an ``optax.contrib`` Schedule-Free state.

    Raises:
      TypeError: anything else (``optimizer 'x' returned int; expected an (init_fun, update_fun,
        get_params) triple, ...``).
    """
    if isinstance(obj, TrainOptimizer):
        return obj
    if callable(getattr(obj, "init", None)) and callable(getattr(obj, "update", None)):
        return TrainOptimizer(*from_optax(obj), eval_params or optax_eval_params)
    members = list(obj[:3]) if isinstance(obj, tuple | list) and len(obj) == 4 and obj[3] is None else obj
    if isinstance(members, tuple | list) and len(members) in (3, 4) and all(callable(m) for m in members):
        init_fn, update_fn, params_fn, *fourth = members
        return TrainOptimizer(init_fn, update_fn, params_fn,
                              fourth[0] if fourth else eval_params or optax_eval_params)
    raise TypeError(f"optimizer {name!r} returned {_returned(obj)}; expected {ACCEPTED_FORMS}")


def make_opt_factory(optimizer: str, optimizer_hparams: Mapping[str, Any], schedule: str,
                     schedule_hparams: Mapping[str, Any], steps: int, OPTIMIZERS: Mapping[str, Callable],
                     SCHEDULES: Mapping[str, Callable]) -> Callable[[Any], Any]:
    """``make(step_size) -> TrainOptimizer``, built exactly as a trial builds it: the optimizer's
    hyperparameters except ``step_size`` (which ``make`` takes, a float or a traced scalar), wrapped
    in ``schedule`` (``"none"``/``""``, or ``"constant"`` when no such schedule is registered, mean
    none) whose ``total_steps`` argument, if it has one, is filled with ``steps``; what the builder
    returns goes through :func:`as_train_optimizer` (the registered evaluation rule of a builtin
    applies where ``OPTIMIZERS[optimizer]`` is the builtin's own entry).

    Raises:
      KeyError: an unknown optimizer or schedule name (with the valid choices).
      TypeError: (from ``make``) the builder returned none of the accepted forms.
    """
    opt_builder = lookup(OPTIMIZERS, optimizer, "optimizer")
    eval_rule = EVAL_PARAMS.get(optimizer) if opt_builder is BUILTIN_OPTIMIZERS.get(optimizer) else None
    opt_hp = {k: v for k, v in optimizer_hparams.items() if k != "step_size"}
    sched_hp = dict(schedule_hparams)
    if schedule in ("none", "") or (schedule == "constant" and "constant" not in SCHEDULES):
        sched_builder = None
    else:
        sched_builder = lookup(SCHEDULES, schedule, "schedule")
        if "total_steps" in inspect.signature(sched_builder).parameters:
            sched_hp = {**sched_hp, "total_steps": steps}

    def make(step_size: Any) -> Any:
        lr = step_size if sched_builder is None else sched_builder(step_size, **sched_hp)
        return as_train_optimizer(opt_builder(lr, **opt_hp), optimizer, eval_rule)

    return make


def build_model(spec: TrialSpec, ds: Dataset, models: Mapping[str, Callable]) -> Any:
    """``spec``'s model (a ``models.zoo.ModelDef``) for ``ds``'s input shape and classes.

    Raises:
      KeyError: an unknown model name (with the valid choices).
    """
    return lookup(models, spec.model, "model")(
        input_shape=ds.input_shape, num_classes=ds.num_classes, **spec.hparams("model"))


class ModelEntry:
    """A model on one dataset: device-resident data and the optimizer-independent executables
    (parameter init, evaluation), shared by every optimizer, step size and seed.

    ``dtype`` is the storage dtype of parameters and inputs (float32 under mixed precision),
    ``compute_dtype`` that of the forward pass; ``num_train`` / ``num_valid`` count the examples of
    the training and validation splits."""

    def __init__(self, spec: TrialSpec, ds: Dataset, models: Mapping[str, Callable]):
        self.ds = ds  # kept alive while cached, so id(ds) in the cache key stays unique
        self.model = build_model(spec, ds, models)
        # mixed precision: bfloat16/float16 compute, float32 parameters, inputs and loss
        self.compute_dtype = jnp.dtype(spec.dtype)
        self.mixed = self.compute_dtype in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
        self.dtype = jnp.dtype(jnp.float32) if self.mixed else self.compute_dtype
        self.num_train, self.num_valid = ds.num_train, ds.num_valid
        self.input_shape = ds.input_shape
        self.reconstruction = getattr(self.model, "task", "classification") == "reconstruction"
        self.needs_rng = bool(getattr(self.model, "needs_rng", False))
        self.metric_fns = dict(sorted((dict(getattr(self.model, "metrics", {}) or {})).items()))
        # one device copy per dataset, shared with every entry on it; uint8 images decoded in the step
        data = device_data.shared(ds, self.dtype)
        self.divisor = data.divisor
        (self.x_train, self.y_train, self.x_valid, self.y_valid, self.x_test, self.y_test) = data.arrays
        self.compiled: dict[tuple, Any] = {}
        self._eval_limits: dict[tuple, int] = {}

    @property
    def eval_batch(self) -> int:
        """The validation split's evaluation batch size: ``min(num_valid, eval_limit())``."""
        return min(self.num_valid, self.eval_limit())

    def eval_limit(self) -> int:
        """Most examples of one evaluation batch: ``EVAL_BATCH``, for a sequence model fewer if
        :data:`harness.train.eval_memory.EVAL_MEMORY` holds fewer (compiled once per value)."""
        key = (EVAL_BATCH, eval_memory.EVAL_MEMORY)
        if key not in self._eval_limits:
            self._eval_limits[key] = eval_memory.eval_batch_size(self.model, EVAL_BATCH, EVAL_BATCH)
        return self._eval_limits[key]

    def target(self, x: jax.Array, y: jax.Array) -> jax.Array:
        """What the loss compares the outputs with: the inputs for a reconstruction model, else ``y``."""
        return x if self.reconstruction else y

    def placed(self, layout: Any) -> tuple:
        """``(x_train, y_train, x_valid, y_valid, x_test, y_test)`` replicated over ``layout``'s
        mesh (``NamedSharding(mesh, P())``; cached per mesh), or the one-device arrays for ``None``."""
        if layout is None:
            return (self.x_train, self.y_train, self.x_valid, self.y_valid, self.x_test, self.y_test)
        return device_data.shared(self.ds, self.dtype, layout).arrays

    def decode(self, xb: jax.Array) -> jax.Array:
        """A gathered input batch in the storage dtype (``uint8`` images decoded; traced)."""
        return device_data.decode(xb, self.divisor, self.dtype)

    def init_params(self, k_init: jax.Array):
        """``(params, model state)`` of the model, parameters in the storage dtype."""
        # parameters do not depend on the batch size (stax convention): init with a batch of 1
        _, params, mstate = self.model.init(k_init, (1, *self.input_shape))
        return jax.tree_util.tree_map(lambda p: jnp.asarray(p, self.dtype), params), mstate

    def init_from_seed(self, seed: jax.Array):
        """``(params, model state, data key, dropout key)`` of the trial of ``seed`` (``uint32``):
        ``jax.random.PRNGKey(seed)`` split into (init, data order, dropout) keys, the first
        initialising :meth:`init_params` (compiled once per model by :meth:`get`)."""
        k_init, k_data, k_drop = jax.random.split(jax.random.PRNGKey(seed), 3)
        params, mstate = self.init_params(k_init)
        return params, mstate, k_data, k_drop

    def forward(self, params: Any, mstate: Any, xb: jax.Array, *, rng: Any, train: bool):
        """``model.apply``; under mixed precision the floating parameters, state and inputs are cast
        to the compute dtype, the outputs back to float32 and the new state to its own dtypes."""
        if not self.mixed:
            return self.model.apply(params, mstate, xb, rng=rng, train=train)
        cd = self.compute_dtype
        out, new = self.model.apply(cast_floats(params, cd), cast_floats(mstate, cd),
                                    cast_floats(xb, cd), rng=rng, train=train)
        new = jax.tree_util.tree_map(lambda n, o: jnp.asarray(n, o.dtype), new, mstate)
        return cast_floats(out, jnp.float32), new

    def fused_loss(self, params: Any, mstate: Any, xb: jax.Array, yb: jax.Array, *, rng: Any, train: bool):
        """``(float32 loss, {metric: float32 value}, new state)`` of one batch through the model's
        ``fused_loss`` (logits never whole), or None when the model has none; mixed precision as
        :meth:`forward`."""
        fn = getattr(self.model, "fused_loss", None)
        if fn is None:
            return None
        tgt = self.target(xb, yb)
        if not self.mixed:
            loss, vals, new = fn(params, mstate, xb, tgt, rng=rng, train=train)
        else:
            cd = self.compute_dtype
            loss, vals, new = fn(cast_floats(params, cd), cast_floats(mstate, cd), cast_floats(xb, cd), tgt,
                                 rng=rng, train=train)
            new = jax.tree_util.tree_map(lambda n, o: jnp.asarray(n, o.dtype), new, mstate)
        return (jnp.asarray(loss, jnp.float32), {k: jnp.asarray(v, jnp.float32) for k, v in vals.items()},
                new)

    def evaluate(self, params: Any, mstate: Any, x: jax.Array, y: jax.Array, *, split: Any = None):
        """Example-weighted ``(loss, {metric name: value})`` over the whole split (every metric of
        the model, ``float32`` scalars), in batches of ≤ :meth:`eval_limit` examples.

        ``split`` (data-parallel, a ``NamedSharding(mesh, P("batch"))`` of D devices): the batch
        size is ``min(M, eval_limit())`` rounded down to a multiple of D, each full batch is
        constrained to ``split`` (its examples spread over the devices) and the remainder batch
        (< D·⌈…⌉ examples) runs replicated. The means equal the one-device ones to float32 rounding.
        """
        rng = jax.random.PRNGKey(0) if self.needs_rng else None
        M = x.shape[0]
        eb = min(M, self.eval_limit())
        if split is not None:
            D = split.mesh.size
            eb = eb // D * D
            if eb == 0:  # fewer examples than devices: all replicated, one batch
                eb, split = M, None
        nb, r = divmod(M, eb)

        def stats(xb, yb, shard=False):
            xb = self.decode(xb)
            if shard:
                xb = jax.lax.with_sharding_constraint(xb, split)
                yb = jax.lax.with_sharding_constraint(yb, split)
            fused = self.fused_loss(params, mstate, xb, yb, rng=rng, train=False)
            if fused is not None:
                return fused[0], fused[1]
            out, _ = self.forward(params, mstate, xb, rng=rng, train=False)
            tgt = self.target(xb, yb)
            vals = {k: jnp.asarray(fn(out, tgt), jnp.float32) for k, fn in self.metric_fns.items()}
            return jnp.asarray(self.model.loss(out, tgt), jnp.float32), vals

        xs = x[: nb * eb].reshape(nb, eb, *x.shape[1:])
        ys = y[: nb * eb].reshape(nb, eb, *y.shape[1:])
        losses, mets = jax.lax.map(lambda b: stats(*b, shard=split is not None), (xs, ys))
        loss_sum = jnp.sum(losses) * eb
        sums = {k: jnp.sum(v) * eb for k, v in mets.items()}
        if r:
            lr_, mr_ = stats(x[nb * eb:], y[nb * eb:])
            loss_sum = loss_sum + lr_ * r
            sums = {k: sums[k] + mr_[k] * r for k in sums}
        return loss_sum / M, {k: v / M for k, v in sums.items()}

    def get(self, kind: str, T: int | None, *args: Any, layout: Any = None) -> tuple[Any, float]:
        """Compiled ``init`` (single trial; ``init_seeded``: :meth:`init_from_seed`) or ``eval``
        (``T`` = None or vmapped over T; one program per split size) and the seconds spent
        compiling it now (0 when cached).

        ``layout`` (:class:`harness.train.parallel.Layout`, eval only): ``"batch"`` shards each evaluation
        batch (parameters, state and data replicated; vmapped over the ``T`` trials' stacked
        parameters and state when ``T`` is given); ``"trials"`` takes parameters and state split
        along the trial axis (data replicated) and returns per-trial values split the same way."""
        ev = kind == "eval"
        key = (kind, T, self.eval_limit() if ev else None, args[2].shape[0] if ev else None,
               layout.key if layout is not None else None)
        if key in self.compiled:
            return self.compiled[key], 0.0
        jit_kw: dict[str, Any] = {}
        if kind == "init":
            fn = self.init_params
        elif kind == "init_seeded":
            fn = self.init_from_seed
        elif layout is not None and layout.axis == "batch":
            def fn(p, m, x, y):
                return self.evaluate(p, m, x, y, split=layout.split)
            if T is not None:  # a vmapped unit: its trials' parameters stacked, each batch still split
                fn = jax.vmap(fn, in_axes=(0, 0, None, None))
            r = layout.replicated
            jit_kw = {"in_shardings": (r, r, r, r), "out_shardings": r}
        else:
            fn = self.evaluate if T is None else jax.vmap(self.evaluate, in_axes=(0, 0, None, None))
            if layout is not None:  # trials
                sp, r = layout.split, layout.replicated
                jit_kw = {"in_shardings": (sp, sp, r, r), "out_shardings": sp}
        t0 = time.perf_counter()
        exe = jax.jit(fn, **jit_kw).lower(*args).compile()
        self.compiled[key] = exe
        return exe, time.perf_counter() - t0
