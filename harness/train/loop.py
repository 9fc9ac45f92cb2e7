"""The trainer: one :class:`~harness.core.spec.TrialSpec` (or a batch of them) → :class:`TrialResult`.

How a trial trains (the same code path for one trial and for a vmapped batch):

* **Components.** ``models.zoo.MODELS[spec.model](input_shape=..., num_classes=..., **model_hp)``;
  the optimizer is built *inside* the traced program from its step size, so a step size is a traced
  scalar (vmappable, no recompile per value): ``OPTIMIZERS[name](SCHEDULES[schedule](step_size,
  **schedule_hp), **optimizer_hp)``, where a schedule argument named ``total_steps`` is filled with
  ``spec.steps``. The schedule name ``"constant"`` (when not registered) or ``"none"`` means the bare
  step size.
* **Keys.** ``jax.random.PRNGKey(seed)`` is split into (init, data order, dropout) keys.
* **Data** lives on the device. Training order is a stream of epochs, each a fresh
  ``jax.random.permutation(fold_in(data_key, epoch), N)``; step ``i`` (0-based) uses stream
  positions ``[i·B, (i+1)·B)``, so a batch may straddle two epochs and no example is dropped.
* **Sequence tasks** (``dataset.task == "sequence"``, :mod:`harness.sequences`): inputs are
  ``int32 (N, T)`` token ids kept as integers on the device, targets the next tokens ``(N, T)``;
  the model's loss and accuracy are per-token means, and evaluation's example-weighted mean is the
  token-weighted mean (every sequence has T tokens). A dataset with a known ``loss_floor`` puts it
  in ``result.extra["loss_floor"]`` (and ``entropy_rate``), from which the worker logs
  ``valid/nats_above_entropy``.
* **Augmentation** (``spec.augment``, :mod:`harness.augment`): applied in-graph to each training
  batch (not to evaluation), keyed by ``fold_in(fold_in(data_key, AUGMENT_STREAM), i)`` for update
  ``i``: same seed, same augmented batches.
* **Mixed precision** (``spec.dtype`` ``bfloat16``/``float16``): parameters, optimizer state, model
  state and stored inputs stay float32; each forward pass casts the floating parameters, state and
  inputs to the compute dtype, and its outputs back to float32, so the loss, gradients (the cast's
  transpose) and updates are float32. ``float32``/``float64``: everything in that dtype.
* **Dispatch.** ``K = spec.steps_per_dispatch`` steps run in one ``lax.scan`` per call (chunks end
  at every evaluation point, so a shorter final chunk compiles once more); the training state is
  donated. The per-step train losses leave the device once per chunk (one host sync per chunk).
* **Evaluation** on the whole **validation** split at step 0, every ``eval_every`` steps and at the
  end (the curves ``eval_*``, logged as ``valid/*``); the **test** split once, after the last step
  (``TrialResult.test_*``; not for a diverged trial). Both in batches of at most
  :data:`EVAL_BATCH` (a scan over full batches plus one remainder batch, no padding); the loss and
  every metric of the model (``ModelDef.metrics``) are example-weighted means. Models without an
  ``accuracy`` metric report ``nan`` accuracy. Training never sees either split.
* **Clock.** ``wall_s`` counts training dispatches only (compile and evaluation excluded), measured
  at each chunk's host sync; rows inside a chunk are interpolated linearly.
* **Divergence.** The first non-finite train loss, or the first train loss above
  ``spec.divergence_loss_factor`` (default 100) × the trial's initial train loss (step 1's, computed
  on the initial parameters; the rule applies only when that is finite and > 0), ends the trial:
  status ``"diverged"``, ``diverged_step`` = that step (1-based: the step whose update used that
  loss), ``reason`` says which rule fired; its row is kept. Never raises for it. Other exceptions
  propagate. (sgd at step size 1e3 on digits: diverged within a few steps, instead of "finished"
  with a train loss of 1.9e21.) The same check runs per member in a vmapped batch.
* **Convergence.** ``steps_to_target``/``seconds_to_target`` = the first validation evaluation whose
  metric (``valid/loss``, ``valid/accuracy`` or ``valid/<name>``) reaches ``spec.target``
  (``None`` = not reached).
* **Batching.** :func:`run_trials_batched` trains trials sharing ``spec.batch_key()`` (they differ in
  seed and/or ``optimizer.step_size``) as one ``jax.vmap``-ed program. Trial *i* equals
  :func:`run_trial` of it alone to float32 rounding: tested as ``rtol=1e-4, atol=1e-5`` on every
  curve value for every registered optimizer. Diverged members stop being recorded at their step;
  the batch stops when all have diverged.
* **Devices** (``spec.devices``/``spec.shard``, :mod:`harness.parallel`): on one device (the
  default) nothing below changes. On D > 1 devices a 1-D mesh of the first D visible devices:
  ``shard: batch`` jits the chunk with state and data replicated (``P()``) and each gathered batch
  constrained to ``P("batch")``, evaluation batches (``min(M, EVAL_BATCH)`` rounded down to a
  multiple of D) likewise, the remainder replicated; ``shard: trials`` splits a vmapped batch's
  state (leading axis T, padded up to a multiple of D with copies of the last trial, dropped) as
  ``P("trials")``. Curves equal the one-device ones to float32 rounding (tested at ``rtol=atol=1e-5``;
  measured max 2.4e-7). ``result.extra`` gets ``mesh`` (``"batch=4"``), ``num_devices`` and
  ``padded_trials``. Raises ``ValueError`` when the devices are too few or B % D != 0.
* **Compiled programs are cached** in the process (the last 16 of each kind): parameter init
  (compiled for a batch of 1: stax parameters do not depend on the batch size) and evaluation per
  (model, model hparams, dtype, dataset object); the K-step chunk per that plus (batch size,
  optimizer and its non-step-size hparams, schedule, steps, vmapped width). So the seeds and step
  sizes of a sweep run one after another compile once; ``compile_seconds`` is the compile time a
  call actually spent (0.0 when everything was cached). The optimizer's own ``init_fn`` runs
  eagerly.
* **Throughput** (``measure_perf``): :func:`harness.train.timing.measure` of the single-trial one-step
  function on a fixed batch (state donated), once per ``(spec.perf_key(), device kind)`` (plus the
  resolved device count on a mesh) through ``perf_cache``; on a mesh the sharded step is timed
  (:func:`_measure_perf`). FLOPs are cross-checked against ``3 × flops_per_example × batch_size``.

Curve steps are 1-based update counts for train rows (``train_loss[j]`` is the loss of the batch
that update ``train_step[j]`` used, computed before that update) and update counts for eval rows.
Same seed and machine give identical curves (wall-clock columns aside).
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from harness.train import parallel
from harness.train import timing
from harness.train.augment import AUGMENT_STREAM, make_augment
from harness.data.sources import Dataset, load_dataset
from harness.core.registry import lookup
from harness.core.spec import Curves, PerfResult, TrialResult, TrialSpec

__all__ = ["EVAL_BATCH", "TrainState", "run_trial", "run_trials_batched", "should_batch"]

#: Largest evaluation batch (examples).
EVAL_BATCH = 1024
_PROGRAM_CACHE_SIZE = 16
#: Test hook: when set, ``callback(sharding)`` receives the sharding of each data-parallel training
#: batch as XLA's partitioner decided it (``jax.debug.inspect_array_sharding``, at compile time).
_INSPECT_BATCH: Callable[[Any], None] | None = None


def _registries() -> tuple[dict, dict, dict]:
    """``(MODELS, OPTIMIZERS, SCHEDULES)``; a function so tests can substitute stand-ins."""
    from models.zoo import MODELS
    from optimizers import OPTIMIZERS, SCHEDULES

    return MODELS, OPTIMIZERS, SCHEDULES


class TrainState(NamedTuple):
    """The donated carry of one trial: optimizer state (params inside), model state, keys, step size,
    and the permutation of the last epoch the previous chunk touched (``perm_epoch`` -1: none yet),
    so that each epoch's permutation is computed once."""

    opt_state: Any
    model_state: Any
    data_key: jax.Array
    dropout_key: jax.Array
    step_size: jax.Array
    perm: jax.Array
    perm_epoch: jax.Array


# --------------------------------------------------------------------------------------------------
# building one program (shared by all trials with the same batch key)


def _storage(x: np.ndarray, dtype: Any) -> np.ndarray:
    """Floating inputs in the storage dtype; integer inputs (token ids) unchanged."""
    return np.asarray(x, dtype) if np.issubdtype(x.dtype, np.floating) else np.asarray(x)


def _cast_floats(tree: Any, dtype: Any) -> Any:
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


def _step_size(spec: TrialSpec, opt_builder: Callable) -> float:
    try:
        return base_step_size(spec.optimizer, spec.hparams("optimizer"), opt_builder)
    except ValueError as e:
        raise ValueError(f"trial {spec.trial_id}: {e}") from None


def make_opt_factory(optimizer: str, optimizer_hparams: Mapping[str, Any], schedule: str,
                     schedule_hparams: Mapping[str, Any], steps: int, OPTIMIZERS: Mapping[str, Callable],
                     SCHEDULES: Mapping[str, Callable]) -> Callable[[Any], Any]:
    """``make(step_size) -> Optimizer``, built exactly as a trial builds it: the optimizer's
    hyperparameters except ``step_size`` (which ``make`` takes, a float or a traced scalar), wrapped
    in ``schedule`` (``"none"``/``""``, or ``"constant"`` when no such schedule is registered, mean
    none) whose ``total_steps`` argument, if it has one, is filled with ``steps``.

    Raises:
      KeyError: an unknown optimizer or schedule name (with the valid choices).
    """
    opt_builder = lookup(OPTIMIZERS, optimizer, "optimizer")
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
        return opt_builder(lr, **opt_hp)

    return make


class _ModelEntry:
    """A model on one dataset: device-resident data and the optimizer-independent executables
    (parameter init, evaluation), shared by every optimizer, step size and seed."""

    def __init__(self, spec: TrialSpec, ds: Dataset):
        MODELS, _, _ = _registries()
        self.ds = ds  # kept alive while cached, so id(ds) in the cache key stays unique
        self.model = lookup(MODELS, spec.model, "model")(
            input_shape=ds.input_shape, num_classes=ds.num_classes, **spec.hparams("model"))
        # mixed precision: bfloat16/float16 compute, float32 parameters, inputs and loss
        self.compute_dtype = jnp.dtype(spec.dtype)
        self.mixed = self.compute_dtype in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
        self.dtype = jnp.dtype(jnp.float32) if self.mixed else self.compute_dtype
        self.N, self.M = ds.num_train, ds.num_valid
        self.input_shape = ds.input_shape
        self.recon = getattr(self.model, "task", "classification") == "reconstruction"
        self.needs_rng = bool(getattr(self.model, "needs_rng", False))
        self.metric_fns = dict(sorted((dict(getattr(self.model, "metrics", {}) or {})).items()))
        self.x_train = jax.device_put(_storage(ds.x_train, self.dtype))
        self.y_train = jax.device_put(ds.y_train)
        self.x_valid = jax.device_put(_storage(ds.x_valid, self.dtype))
        self.y_valid = jax.device_put(ds.y_valid)
        self.x_test = jax.device_put(_storage(ds.x_test, self.dtype))
        self.y_test = jax.device_put(ds.y_test)
        self.compiled: dict[tuple, Any] = {}
        self._placed: dict[tuple, tuple] = {}

    def placed(self, layout: Any) -> tuple:
        """``(x_train, y_train, x_valid, y_valid, x_test, y_test)`` replicated over ``layout``'s
        mesh (``NamedSharding(mesh, P())``; cached per mesh), or the one-device arrays for ``None``."""
        arrays = (self.x_train, self.y_train, self.x_valid, self.y_valid, self.x_test, self.y_test)
        if layout is None:
            return arrays
        if layout.key not in self._placed:
            self._placed[layout.key] = tuple(jax.device_put(a, layout.replicated) for a in arrays)
        return self._placed[layout.key]

    def init_params(self, k_init: jax.Array):
        # parameters do not depend on the batch size (stax convention): init with a batch of 1
        _, params, mstate = self.model.init(k_init, (1, *self.input_shape))
        return jax.tree_util.tree_map(lambda p: jnp.asarray(p, self.dtype), params), mstate

    def forward(self, params: Any, mstate: Any, xb: jax.Array, *, rng: Any, train: bool):
        """``model.apply``; under mixed precision the floating parameters, state and inputs are cast
        to the compute dtype, the outputs back to float32 and the new state to its own dtypes."""
        if not self.mixed:
            return self.model.apply(params, mstate, xb, rng=rng, train=train)
        cd = self.compute_dtype
        out, new = self.model.apply(_cast_floats(params, cd), _cast_floats(mstate, cd),
                                    _cast_floats(xb, cd), rng=rng, train=train)
        new = jax.tree_util.tree_map(lambda n, o: jnp.asarray(n, o.dtype), new, mstate)
        return _cast_floats(out, jnp.float32), new

    def evaluate(self, params: Any, mstate: Any, x: jax.Array, y: jax.Array, *, split: Any = None):
        """Example-weighted ``(loss, {metric name: value})`` over the whole split (every metric of
        the model, ``float32`` scalars), in batches of ≤ EVAL_BATCH.

        ``split`` (data-parallel, a ``NamedSharding(mesh, P("batch"))`` of D devices): the batch
        size is ``min(M, EVAL_BATCH)`` rounded down to a multiple of D, each full batch is
        constrained to ``split`` (its examples spread over the devices) and the remainder batch
        (< D·⌈…⌉ examples) runs replicated. The means equal the one-device ones to float32 rounding.
        """
        rng = jax.random.PRNGKey(0) if self.needs_rng else None
        M = x.shape[0]
        eb = min(M, EVAL_BATCH)
        if split is not None:
            D = split.mesh.size
            eb = eb // D * D
            if eb == 0:  # fewer examples than devices: all replicated, one batch
                eb, split = M, None
        nb, r = divmod(M, eb)

        def stats(xb, yb, shard=False):
            if shard:
                xb = jax.lax.with_sharding_constraint(xb, split)
                yb = jax.lax.with_sharding_constraint(yb, split)
            out, _ = self.forward(params, mstate, xb, rng=rng, train=False)
            tgt = xb if self.recon else yb
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
        """Compiled ``init`` (single trial) or ``eval`` (``T`` = None or vmapped over T; one program
        per split size) and the seconds spent compiling it now (0 when cached).

        ``layout`` (:class:`harness.train.parallel.Layout`, eval only): ``"batch"`` shards each evaluation
        batch (parameters, state and data replicated); ``"trials"`` takes parameters and state split
        along the trial axis (data replicated) and returns per-trial values split the same way."""
        key = (kind, T, EVAL_BATCH, args[2].shape[0] if kind == "eval" else None,
               layout.key if layout is not None else None)
        if key in self.compiled:
            return self.compiled[key], 0.0
        jit_kw: dict[str, Any] = {}
        if kind == "init":
            fn = self.init_params
        elif layout is not None and layout.axis == "batch":
            def fn(p, m, x, y):
                return self.evaluate(p, m, x, y, split=layout.split)
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


class _Program:
    """The training executables for one batch key (optimizer, schedule, budget) of a model entry."""

    def __init__(self, spec: TrialSpec, entry: _ModelEntry):
        _, OPTIMIZERS, SCHEDULES = _registries()
        self.e = entry
        self.make_opt = make_opt_factory(spec.optimizer, spec.hparams("optimizer"), spec.schedule,
                                         spec.hparams("schedule"), spec.steps, OPTIMIZERS, SCHEDULES)
        self.opt_builder = lookup(OPTIMIZERS, spec.optimizer, "optimizer")
        self.B = spec.batch_size
        self.augment = make_augment(dict(spec.augment))
        if self.B > entry.N:
            raise ValueError(f"batch_size {self.B} exceeds the {entry.N} training examples of "
                             f"{entry.ds.name}")
        self.compiled: dict[tuple, Any] = {}

    # -- pure functions of one trial -------------------------------------------------------------

    def init(self, key: jax.Array, step_size: float) -> tuple[TrainState, float]:
        """One trial's state (uses the model entry's compiled init; optimizer init runs eagerly)."""
        k_init, k_data, k_drop = jax.random.split(key, 3)
        exe, dt = self.e.get("init", None, k_init)
        params, mstate = exe(k_init)
        lr = jnp.float32(step_size)
        opt_state = self.make_opt(lr).init_fn(params)
        perm = jnp.zeros((self.e.N,), jnp.int32)
        return TrainState(opt_state, mstate, k_data, k_drop, lr, perm, jnp.int32(-1)), dt

    def params(self, state: TrainState) -> Any:
        return self.make_opt(state.step_size).params_fn(state.opt_state)

    def _loss(self, params, mstate, xb, yb, rng):
        out, new_mstate = self.e.forward(params, mstate, xb, rng=rng, train=True)
        loss = self.e.model.loss(out, xb if self.e.recon else yb)
        return jnp.asarray(loss, jnp.float32), new_mstate

    def _augment(self, xb, data_key, i):
        """The training batch of update ``i`` augmented (:mod:`harness.augment`; keyed by the
        trial's data key and ``i``), or unchanged when the trial has no augmentation."""
        if self.augment is None:
            return xb
        key = jax.random.fold_in(jax.random.fold_in(data_key, AUGMENT_STREAM), i)
        return self.augment(xb, key)

    def _update(self, opt, state_pair, i, xb, yb, drop_key):
        opt_state, mstate = state_pair
        rng = jax.random.fold_in(drop_key, i) if self.e.needs_rng else None
        params = opt.params_fn(opt_state)
        (loss, mstate), grads = jax.value_and_grad(self._loss, has_aux=True)(params, mstate, xb, yb, rng)
        return (opt.update_fn(i, grads, opt_state), mstate), loss

    def chunk(self, state: TrainState, start: jax.Array, x: jax.Array, y: jax.Array, *, n: int,
              split: Any = None):
        """``n`` steps from update index ``start``; returns (state, losses ``float32 (n,)``).

        ``split`` (data-parallel): the sharding each gathered batch ``x[idx]`` / ``y[idx]`` (leading
        axis B) is constrained to, ``NamedSharding(mesh, P("batch"))``."""
        opt = self.make_opt(state.step_size)
        B, N = self.B, self.e.N
        n_ep = -(-n * B // N) + 1
        first = start * B
        e0 = first // N
        e_last = (first + n * B - 1) // N

        def perm_of(e):
            return jax.random.permutation(jax.random.fold_in(state.data_key, e), N).astype(jnp.int32)

        # epoch e0 is usually the one the previous chunk ended in (carried); later slots are computed
        # only when this chunk reaches them (lax.cond: one branch runs, except under vmap)
        perms = [jax.lax.cond(state.perm_epoch == e0, lambda: state.perm, lambda: perm_of(e0))]
        zeros = jnp.zeros((N,), jnp.int32)
        for j in range(1, n_ep):
            perms.append(jax.lax.cond(e0 + j <= e_last, lambda j=j: perm_of(e0 + j), lambda: zeros))
        perms = jnp.stack(perms)
        idx = perms.reshape(-1)[first - e0 * N + jnp.arange(n * B)].reshape(n, B)
        state = state._replace(perm=perms[e_last - e0], perm_epoch=e_last.astype(jnp.int32))

        def body(pair, inp):
            i, bidx = inp
            xb, yb = x[bidx], y[bidx]
            if split is not None:
                xb = jax.lax.with_sharding_constraint(xb, split)
                yb = jax.lax.with_sharding_constraint(yb, split)
                if _INSPECT_BATCH is not None:  # test hook: the batch's sharding, at compile time
                    jax.debug.inspect_array_sharding(xb, callback=_INSPECT_BATCH)
            xb = self._augment(xb, state.data_key, i)
            return self._update(opt, pair, i, xb, yb, state.dropout_key)

        (opt_state, mstate), losses = jax.lax.scan(
            body, (state.opt_state, state.model_state), (start + jnp.arange(n), idx))
        return state._replace(opt_state=opt_state, model_state=mstate), losses.astype(jnp.float32)

    def one_step(self, state: TrainState, xb: jax.Array, yb: jax.Array, i: jax.Array):
        """One optimizer step on a given batch (what :mod:`harness.timing` times)."""
        opt = self.make_opt(state.step_size)
        xb = self._augment(xb, state.data_key, i)
        (opt_state, mstate), loss = self._update(
            opt, (state.opt_state, state.model_state), i, xb, yb, state.dropout_key)
        return state._replace(opt_state=opt_state, model_state=mstate), loss

    def get_chunk(self, T: int | None, n: int, *args: Any, layout: Any = None) -> tuple[Any, float]:
        """The compiled chunk of ``n`` steps (vmapped over ``T`` trials unless None), state donated,
        and the seconds spent compiling it now (0 when cached).

        ``layout`` (:class:`harness.train.parallel.Layout`): jitted with explicit in/out shardings:
        ``"batch"``: state, start index and data replicated, each step's batch ``P("batch")``,
        losses replicated; ``"trials"``: state and the ``(T, n)`` losses ``P("trials")``, start
        index and data replicated."""
        key = (T, n, layout.key if layout is not None else None)
        if key in self.compiled:
            return self.compiled[key], 0.0
        split = layout.split if layout is not None and layout.axis == "batch" else None

        def fn(s, t, x, y):
            return self.chunk(s, t, x, y, n=n, split=split)

        if T is not None:
            fn = jax.vmap(fn, in_axes=(0, None, None, None))
        jit_kw: dict[str, Any] = {}
        if layout is not None:
            r = layout.replicated
            st = r if layout.axis == "batch" else layout.split
            jit_kw = {"in_shardings": (st, r, r, r), "out_shardings": (st, st)}
        t0 = time.perf_counter()
        exe = jax.jit(fn, donate_argnums=(0,), **jit_kw).lower(*args).compile()
        self.compiled[key] = exe
        return exe, time.perf_counter() - t0


_ENTRIES: collections.OrderedDict[tuple, _ModelEntry] = collections.OrderedDict()
_PROGRAMS: collections.OrderedDict[tuple, _Program] = collections.OrderedDict()


def _cached(cache: collections.OrderedDict, key: tuple, make: Callable[[], Any]) -> Any:
    obj = cache.get(key)
    if obj is None:
        obj = cache[key] = make()
        while len(cache) > _PROGRAM_CACHE_SIZE:
            cache.popitem(last=False)
    cache.move_to_end(key)
    return obj


def _program(spec: TrialSpec, ds: Dataset) -> _Program:
    regs = tuple(id(r) for r in _registries())
    ekey = (spec.model, spec.model_hparams, spec.dtype, id(ds), regs)
    entry = _cached(_ENTRIES, ekey, lambda: _ModelEntry(spec, ds))
    opt_hp = tuple((k, v) for k, v in spec.optimizer_hparams if k != "step_size")
    pkey = (*ekey, spec.batch_size, spec.optimizer, opt_hp, spec.schedule, spec.schedule_hparams, spec.steps,
            spec.augment)
    prog = _cached(_PROGRAMS, pkey, lambda: _Program(spec, entry))
    if prog.e is not entry:  # the entry was evicted and rebuilt: rebuild the program on it
        prog = _PROGRAMS[pkey] = _Program(spec, entry)
    return prog


# --------------------------------------------------------------------------------------------------
# the host loop


@dataclasses.dataclass
class _Track:
    spec: TrialSpec
    curves: Curves = dataclasses.field(default_factory=Curves)
    active: bool = True
    diverged_step: int | None = None
    diverged_reason: str = ""
    initial_loss: float | None = None
    steps_to_target: int | None = None
    seconds_to_target: float | None = None
    test_loss: float | None = None
    test_metrics: dict[str, float] = dataclasses.field(default_factory=dict)

    def check_divergence(self, step: int, loss: float) -> bool:
        """Record ``loss`` of ``step`` against the divergence rules (module docstring); True when
        it ends the trial."""
        if self.initial_loss is None:
            self.initial_loss = loss
        factor = self.spec.divergence_loss_factor
        if not math.isfinite(loss):
            self.diverged_reason = f"non-finite train loss at step {step}"
        elif factor is not None and math.isfinite(self.initial_loss) and self.initial_loss > 0 \
                and loss > factor * self.initial_loss:
            self.diverged_reason = (f"train loss {loss:.4g} at step {step} exceeds {factor:g}x the "
                                    f"initial train loss {self.initial_loss:.4g}")
        else:
            return False
        self.active, self.diverged_step = False, step
        return True

    def add_eval(self, step: int, wall: float, loss: float, metrics: dict[str, float]) -> None:
        """One validation evaluation: ``loss`` and ``{metric name: value}`` of the model."""
        c = self.curves
        c.eval_step.append(step)
        c.eval_wall_s.append(wall)
        c.eval_loss.append(loss)
        c.eval_accuracy.append(metrics.get("accuracy", math.nan))
        for k, v in metrics.items():
            if k != "accuracy":
                c.eval_metrics.setdefault(k, []).append(v)
        tgt = self.spec.target
        if tgt is not None and self.steps_to_target is None:
            name = tgt.metric.split("/", 1)[-1]
            value = loss if name == "loss" else metrics.get(name, math.nan)
            if tgt.reached(value):
                self.steps_to_target, self.seconds_to_target = step, wall


def _eval_points(steps: int, every: int) -> list[int]:
    if steps < 1 or every < 1:
        raise ValueError(f"steps and eval_every must be >= 1, got {steps}, {every}")
    pts = list(range(every, steps, every))
    return [*pts, steps]


def _num_devices(spec: TrialSpec) -> int:
    """The device count ``spec.devices`` resolves to here (the raw value if it cannot resolve)."""
    if spec.devices == 1:
        return 1
    try:
        return parallel.resolve_devices(spec.devices)
    except ValueError:
        return spec.devices  # type: ignore[return-value]


def perf_cache_key(spec: TrialSpec) -> tuple:
    """The key of ``spec``'s throughput in a ``perf_cache``: ``(spec.perf_key(), device kind)``,
    plus the resolved device count for a multi-device trial (``devices: all`` depends on the
    process)."""
    n = _num_devices(spec)
    return (spec.perf_key(), timing.device_kind()) + ((n,) if n != 1 else ())


def _measure_perf(prog: _Program, spec: TrialSpec, perf_cache: dict | None) -> PerfResult:
    """Throughput of ``spec``'s step (module docstring). On D > 1 devices the sharded step is timed:
    ``shard: batch``: one step of the B-example batch split over the mesh, state replicated
    (examples/s = B / step time); ``shard: trials``: one vmapped step of D trials (one per device,
    copies of this trial), state split along the trial axis (examples/s = D·B / step time).
    FLOPs, peak and utilisation are for the whole mesh (:func:`harness.train.timing.measure`)."""
    pkey = perf_cache_key(spec)
    if perf_cache is not None and pkey in perf_cache:
        return perf_cache[pkey]
    e = prog.e
    state, _ = prog.init(jax.random.PRNGKey(spec.seed), _step_size(spec, prog.opt_builder))
    xb, yb = e.x_train[: prog.B], e.y_train[: prog.B]
    layout = None
    if spec.devices != 1:
        D = parallel.resolve_devices(spec.devices)
        layout = parallel.layout_for(spec.devices, spec.shard, batch_size=spec.batch_size,
                                     num_trials=D if spec.shard == "trials" else None)
    fpe = None
    fpe_fn = getattr(e.model, "flops_per_example", None)
    if fpe_fn is not None:
        try:
            fpe = fpe_fn(e.input_shape)
        except Exception:  # an analytic count is optional
            fpe = None
    analytic = 3.0 * float(fpe) * prog.B if fpe else None
    if layout is None:
        perf = timing.measure(prog.one_step, (state, xb, yb, jnp.int32(0)), batch_size=prog.B,
                              donate_argnums=(0,), analytic_flops=analytic, dtype=e.compute_dtype)
    else:
        r, sp, D = layout.replicated, layout.split, layout.num_devices
        if layout.axis == "batch":
            fn, B = prog.one_step, prog.B
            args = (jax.device_put(state, r), jax.device_put(xb, sp), jax.device_put(yb, sp),
                    jax.device_put(jnp.int32(0), r))
            shardings = {"in_shardings": (r, sp, sp, r), "out_shardings": (r, r)}
        else:
            fn, B = jax.vmap(prog.one_step, in_axes=(0, None, None, None)), prog.B * D
            stacked = jax.tree_util.tree_map(lambda a: jnp.stack([a] * D), state)
            args = (jax.device_put(stacked, sp), jax.device_put(xb, r), jax.device_put(yb, r),
                    jax.device_put(jnp.int32(0), r))
            shardings = {"in_shardings": (sp, r, r, r), "out_shardings": (sp, sp)}
            analytic = analytic * D if analytic else None
        del state
        t0 = time.perf_counter()
        exe = jax.jit(fn, donate_argnums=(0,), **shardings).lower(*args).compile()
        compile_s = time.perf_counter() - t0
        perf = timing.measure(fn, args, batch_size=B, donate_argnums=(0,), analytic_flops=analytic,
                              dtype=e.compute_dtype, compiled=exe, compile_s=compile_s,
                              num_devices=D, mesh=layout.label)
    if perf_cache is not None:
        perf_cache[pkey] = perf
    return perf


def _check_batch(specs: Sequence[TrialSpec]) -> None:
    if not specs:
        raise ValueError("no trials to run")
    k0 = specs[0].batch_key()
    for s in specs[1:]:
        if s.batch_key() != k0:
            raise ValueError(f"trial {s.trial_id} differs from {specs[0].trial_id} in more than seed "
                             "and optimizer.step_size; it cannot share a batch")


def _train(specs: Sequence[TrialSpec], batched: bool, dataset: Dataset | None, perf_cache: dict | None,
           measure_perf: bool, on_progress: Callable[[int, int], None] | None,
           checkpoints: Any = None) -> list[TrialResult]:
    _check_batch(specs)
    spec0 = specs[0]
    ds = dataset if dataset is not None else load_dataset(spec0.dataset, **spec0.hparams("dataset"))
    prog = _program(spec0, ds)
    T = len(specs) if batched else None
    # parallelism (harness.parallel): None = the one-device path, unchanged
    layout = None if spec0.devices == 1 else parallel.layout_for(
        spec0.devices, spec0.shard, batch_size=spec0.batch_size, num_trials=T)
    if layout is not None and layout.axis == "trials":
        T = layout.pad(T)  # padded with copies of the last trial; their results are dropped
    state_sharding = None if layout is None else (
        layout.replicated if layout.axis == "batch" else layout.split)

    def place(tree: Any) -> Any:
        return tree if layout is None else jax.device_put(tree, state_sharding)

    e = prog.e
    x_train, y_train, x_valid, y_valid, x_test, y_test = e.placed(layout)
    compile_s = 0.0
    states = []
    for s in specs:  # each trial initialised exactly as alone (same executable), then stacked
        st, dt = prog.init(jax.random.PRNGKey(s.seed), _step_size(s, prog.opt_builder))
        states.append(st)
        compile_s += dt
    if T is not None:
        states.extend([states[-1]] * (T - len(states)))
    state = states[0] if T is None else jax.tree_util.tree_map(lambda *a: jnp.stack(a), *states)
    state = place(state)
    del states

    def params_of(st: TrainState) -> Any:
        return place(prog.params(st) if T is None else jax.vmap(prog.params)(st))

    eval_exe, dt = e.get("eval", T, params_of(state), state.model_state, x_valid, y_valid,
                         layout=layout)
    compile_s += dt

    tracks = [_Track(s) for s in specs]

    def evaluate(exe, x, y) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        loss, mets = exe(params_of(state), state.model_state, x, y)
        return (np.atleast_1d(np.asarray(loss, np.float64)),
                {k: np.atleast_1d(np.asarray(v, np.float64)) for k, v in mets.items()})

    def record_eval(step: int, wall: float) -> None:
        loss, mets = evaluate(eval_exe, x_valid, y_valid)
        for j, tr in enumerate(tracks):
            if tr.active:
                tr.add_eval(step, wall, float(loss[j]), {k: float(v[j]) for k, v in mets.items()})

    steps, K = spec0.steps, spec0.steps_per_dispatch
    if K < 1:
        raise ValueError(f"steps_per_dispatch must be >= 1, got {K}")
    step, wall, done = 0, 0.0, False
    # checkpoints (harness.checkpoint): resume at a chunk end of this very schedule, bit-identically
    ck, pfn = checkpoints, (prog.params if T is None else jax.vmap(prog.params))
    resumed = ck.restore(state, tracks, pfn) if ck is not None else None
    if resumed is not None:
        state, step, wall, done = resumed
        state = place(state)
    else:
        record_eval(0, 0.0)
    start_int = jnp.int32(0)
    for seg_end in [] if done else _eval_points(steps, spec0.eval_every):
        if seg_end <= step:  # resumed past it
            continue
        while step < seg_end:
            n = min(K, seg_end - step)
            start_int = jnp.int32(step)
            if layout is not None:
                start_int = jax.device_put(start_int, layout.replicated)
            exe, dt = prog.get_chunk(T, n, state, start_int, x_train, y_train, layout=layout)
            compile_s += dt
            t0 = time.perf_counter()
            state, losses = exe(state, start_int, x_train, y_train)
            losses = np.asarray(losses, np.float64).reshape(-1, n)
            dt = time.perf_counter() - t0
            for j, tr in enumerate(tracks):
                if not tr.active:
                    continue
                c = tr.curves
                for m in range(n):
                    c.train_step.append(step + m + 1)
                    c.train_wall_s.append(wall + dt * (m + 1) / n)
                    v = float(losses[j, m])
                    c.train_loss.append(v)
                    if tr.check_divergence(step + m + 1, v):
                        break
            step += n
            wall += dt
            if on_progress is not None:
                on_progress(step, steps)
            if not any(tr.active for tr in tracks):
                break
            if ck is not None and step < seg_end:
                ck.after_chunk(step, wall, state, tracks, pfn)
        if not any(tr.active for tr in tracks):
            break
        record_eval(step, wall)
        if ck is not None:
            ck.after_chunk(step, wall, state, tracks, pfn, done=step >= steps)
    if ck is not None:
        ck.finish(step, wall, state, tracks, pfn)

    if any(tr.diverged_step is None for tr in tracks):  # the test split, once, after the last step
        test_exe, dt = e.get("eval", T, params_of(state), state.model_state, x_test, y_test,
                             layout=layout)
        compile_s += dt
        loss, mets = evaluate(test_exe, x_test, y_test)
        for j, tr in enumerate(tracks):
            if tr.diverged_step is None:
                tr.test_loss = float(loss[j])
                tr.test_metrics = {k: float(v[j]) for k, v in mets.items()}

    perf = _measure_perf(prog, spec0, perf_cache) if measure_perf else None
    results = []
    for tr in tracks:
        c = tr.curves
        results.append(TrialResult(
            spec=tr.spec,
            status="diverged" if tr.diverged_step is not None else "finished",
            curves=c,
            perf=perf,
            reason=tr.diverged_reason,
            diverged_step=tr.diverged_step,
            steps_to_target=tr.steps_to_target,
            seconds_to_target=tr.seconds_to_target,
            final_valid_loss=c.eval_loss[-1] if c.eval_loss else None,
            final_valid_accuracy=c.eval_accuracy[-1] if c.eval_accuracy else None,
            test_loss=tr.test_loss,
            test_accuracy=tr.test_metrics.get("accuracy"),
            test_metrics={k: v for k, v in tr.test_metrics.items() if k != "accuracy"},
            train_seconds=c.train_wall_s[-1] if c.train_wall_s else 0.0,
            compile_seconds=compile_s,
            extra={"batched": len(specs) if batched else 1,
                   **({"mesh": layout.label, "num_devices": layout.num_devices,
                       "padded_trials": (T or 1) - len(specs)} if layout is not None else {}),
                   "eval_batch": min(e.M, EVAL_BATCH),
                   **{k: float(getattr(ds, k)) for k in ("loss_floor", "entropy_rate")
                      if getattr(ds, k, None) is not None},
                   **({"checkpoint": {"resumed_from_step": ck.resumed_from, "saves": ck.saves,
                                      "save_s": ck.save_seconds}} if ck is not None else {})},
        ))
    return results


# --------------------------------------------------------------------------------------------------
# public API


def run_trial(spec: TrialSpec, *, dataset: Dataset | None = None, perf_cache: dict | None = None,
              measure_perf: bool = True, on_progress: Callable[[int, int], None] | None = None,
              checkpoints: Any = None) -> TrialResult:
    """Train one trial (see the module docstring for the method).

    Args:
      spec: the trial.
      dataset: the loaded dataset (default: ``load_dataset(spec.dataset, **dataset_hparams)``).
      perf_cache: ``{(spec.perf_key(), device kind): PerfResult}``, read and filled, so throughput is
        measured once per distinct (model, optimizer, batch shape, dtype, device).
      measure_perf: time the step with :mod:`harness.timing` (``result.perf``); ``False`` skips it.
      on_progress: called ``on_progress(steps_done, total_steps)`` after every chunk.
      checkpoints: a :class:`harness.train.checkpoint.UnitCheckpoints` for this trial (``None``: none):
        training resumes from its newest checkpoint and saves at its cadence, only at chunk ends;
        ``result.extra["checkpoint"]`` says from which step it resumed and how many it wrote.

    Returns:
      ``TrialResult`` with ``status`` ``"finished"`` or ``"diverged"``; curves hold Python floats/ints.

    Raises:
      KeyError: unknown model/optimizer/schedule/dataset name. Any exception from building or
        training propagates (the caller records the trial as failed).
    """
    return _train([spec], False, dataset, perf_cache, measure_perf, on_progress, checkpoints)[0]


def run_trials_batched(specs: list[TrialSpec], *, dataset: Dataset | None = None,
                       perf_cache: dict | None = None, measure_perf: bool = True,
                       on_progress: Callable[[int, int], None] | None = None,
                       checkpoints: Any = None) -> list[TrialResult]:
    """Train trials sharing ``spec.batch_key()`` as one ``jax.vmap``-ed program.

    Result ``i`` equals ``run_trial(specs[i])`` within float32 rounding (tested at ``rtol=1e-4,
    atol=1e-5``), except wall-clock values and ``perf`` (shared, measured for the single-trial step).

    Raises:
      ValueError: the specs do not share a batch key (or the list is empty).
    """
    if len(specs) == 1:
        return [run_trial(specs[0], dataset=dataset, perf_cache=perf_cache, measure_perf=measure_perf,
                          on_progress=on_progress, checkpoints=checkpoints)]
    return _train(list(specs), True, dataset, perf_cache, measure_perf, on_progress, checkpoints)


def should_batch(specs: list[TrialSpec]) -> bool:
    """Whether to train ``specs`` with :func:`run_trials_batched` rather than one by one.

    Decided by measurement, per (program, number of trials, device kind), in
    :func:`harness.train.batching.decide`: the vmapped chunk of the T trials against T single-trial
    chunks, compile excluded, interleaved, cached in ``$HARNESS_CACHE_DIR/batching.json``; batch
    when it is at least 1.05x faster. (A fixed rule, "never on CPU", was wrong both ways: 8 seeds of
    the digits MLP ran 0.78x batched in issue 5 and 1.21x in issue 15 on the same 2-core CPU.)
    Fewer than 2 trials or specs that cannot share a batch: False; large models are not measured
    (False). ``HARNESS_BATCH=always|never`` overrides the measurement (never for incompatible specs).
    """
    from harness.train import batching

    return batching.decide(specs).batch
