"""The compiled training programs of a trial, and the process's cache of them.

:class:`TrainingProgram`: one batch key's pure functions (``init``, ``params``, ``eval_params``,
``loss``, ``augment``, the K-step ``chunk``, ``one_step``), compiled vmapped over T trials or not, on
one device or a mesh (:meth:`get_chunk`). :func:`program_for` is the one way to get one: registries
looked up (the spec's sources included), the last :data:`PROGRAM_CACHE_SIZE` model entries and
programs kept (:data:`ENTRIES`, :data:`PROGRAMS`), so a sweep's seeds and step sizes compile once.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from harness.core import watchdog
from harness.core.builders import Registries, lookup
from harness.core.source_builders import registries_for
from harness.core.spec import TrialSpec
from harness.data.sources import Dataset
from harness.train.augment import AUGMENT_STREAM, make_augment
from harness.train.build import ModelEntry, build_model, make_opt_factory
from harness.train.chunks import (
    ORDERS,
    Chunk,
    LoopChunk,
    MeshLoopChunk,
    batch_order,
    forward_conv_flops,
    order_program,
)
from harness.train.recipe import (
    accumulate,
    clipped_count,
    clipping,
    group_hparams,
    group_masks_of,
    group_optimizer,
    loss_reduction_of,
    recipe_of,
    token_sum,
)
from models import stax
from models.custom import as_model

__all__ = ["ENTRIES", "INSPECT_BATCH", "ORDERS", "PROGRAMS", "PROGRAM_CACHE_SIZE", "TrainState",
           "TrainingProgram", "batch_order", "default_registries", "model_entry", "order_program",
           "program_for", "trial_model", "trial_registries"]

#: Model entries and programs kept per process (the most recently used of each kind).
PROGRAM_CACHE_SIZE = 16
#: On a CPU, a chunk whose step's convolutions count more FLOPs than this runs as K dispatches of one
#: compiled step with XLA's convolution (``models.stax.conv_outside_loops``) instead of a ``lax.scan``
#: with im2col patches: inside a loop XLA:CPU's convolution and the patches form are both slower
#: (docs/decisions.md, "Convolutions and max pooling on CPU"), while a dispatch costs ~0.3 ms; the
#: quickstart's CNN (~6 MFLOP of convolution per step) stays a scan, ResNet-18 at CIFAR shapes
#: (~10^9) does not.
CONV_LOOP_FLOPS = 1e8
#: Test hook: when set, ``callback(sharding)`` receives the sharding of each data-parallel training
#: batch as XLA's partitioner decided it (``jax.debug.inspect_array_sharding``, at compile time).
INSPECT_BATCH: Callable[[Any], None] | None = None


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


class TrainingProgram:
    """The training executables for one batch key (optimizer, schedule, budget) of a model entry.

    ``entry`` is the :class:`~harness.train.build.ModelEntry`, ``batch_size`` the examples per
    update, ``opt_builder`` the optimizer's registered builder, ``make_opt(step_size)`` the optimizer
    (:func:`harness.train.build.make_opt_factory`)."""

    def __init__(self, spec: TrialSpec, entry: ModelEntry, optimizers: Any, schedules: Any):
        self.entry = entry
        self.grad_clip, grad_accum, groups = recipe_of(spec.recipe)

        def make_for(weight_decay: float | None, group: int | None = None) -> Callable[[Any], Any]:
            hp = spec.hparams("optimizer")
            if group is not None:  # mask rules resolved on the whole model, cut to the group
                hp = group_masks_of({**hp, **group_hparams(groups, group)}, self._param_shapes(), groups,
                                    group, spec.optimizer)
            if weight_decay is not None:
                hp["weight_decay"] = weight_decay
            return make_opt_factory(spec.optimizer, hp, spec.schedule, spec.hparams("schedule"),
                                    spec.schedule_steps, optimizers, schedules)

        make_opt = group_optimizer(make_for, groups, per_group=True) if groups else make_for(None)
        self.make_opt = clipping(make_opt, self.grad_clip)
        self.loss_reduction = loss_reduction_of(spec.recipe)
        if self.loss_reduction == "sum" and entry.model.task != "sequence":
            raise ValueError(f"loss_reduction: sum needs a token loss; model {spec.model!r} is a "
                             f"{entry.model.task} model")
        vg = (token_sum(self.loss, self.token_count) if self.loss_reduction == "sum"
              else jax.value_and_grad(self.loss, has_aux=True))
        self.value_and_grad = accumulate(vg, grad_accum, self.loss_reduction)
        self.opt_builder = lookup(optimizers, spec.optimizer, "optimizer")
        self.optimizer = spec.optimizer
        self.batch_size = spec.batch_size
        self.augmenter = make_augment(dict(spec.augment))
        if self.batch_size > entry.num_train:
            raise ValueError(f"batch_size {self.batch_size} exceeds the {entry.num_train} training "
                             f"examples of {entry.ds.name}")
        self.compiled: dict[tuple, Any] = {}  # the chunks
        self.compile_seconds: dict[tuple, float] = {}  # what compiling (or loading) each chunk took
        self.compiled_eval_params: dict[tuple, Any] = {}  # None: the optimizer has none
        # init_seeded's executable (None: not compiled yet; False: eager, see init_seeded); a user's
        # optimizer (source:) always initialises eagerly, as it did: its init may not be pure
        self._init_exe: Any = False if spec.optimizer_source else None

    def _param_shapes(self) -> Any:
        """The model's parameter tree as shapes (``jax.eval_shape`` of its init; nothing computed)."""
        shape = (1, *self.entry.ds.input_shape)
        return jax.eval_shape(lambda k: self.entry.model.init(k, shape), jax.random.key(0))[1]

    # -- pure functions of one trial -------------------------------------------------------------

    def init(self, key: jax.Array, step_size: float) -> tuple[TrainState, float]:
        """One trial's state (uses the model entry's compiled init; optimizer init runs eagerly) and
        the seconds spent compiling now."""
        k_init, k_data, k_drop = jax.random.split(key, 3)
        exe, dt = self.entry.get("init", None, k_init)
        params, mstate = exe(k_init)
        return self._init_optimizer(params, mstate, k_data, k_drop, jnp.float32(step_size)), dt

    def _init_optimizer(self, params: Any, mstate: Any, k_data: jax.Array, k_drop: jax.Array,
                        step_size: jax.Array) -> TrainState:
        """:meth:`init`'s state from the model's initialisation, as one traceable function."""
        opt_state = self.make_opt(step_size).init_fn(params)
        perm = jnp.zeros((self.entry.num_train,), jnp.int32)
        return TrainState(opt_state, mstate, k_data, k_drop, step_size, perm, jnp.int32(-1))

    def init_seeded(self, seed: int, step_size: float) -> tuple[TrainState, float]:
        """``init(jax.random.PRNGKey(seed), step_size)``, bit for bit, in two compiled dispatches
        instead of :meth:`init`'s ~20 eager ones (docs/decisions.md): the model's (keys and
        parameters, compiled once per model: :meth:`ModelEntry.init_from_seed`, whose random
        initialisers are slow to compile)
        and the optimizer's (once per program). Returns the state and the seconds spent compiling
        now (0.0 once both are compiled). Eager, as :meth:`init`, for a user's optimizer
        (``source:``), an optimizer whose initialisation does not trace, and a seed outside
        ``[0, 2**32)``; ``tests/test_init_seeded.py`` checks every built-in optimizer and model."""
        dt = 0.0
        if self._init_exe is None:
            t0 = time.perf_counter()
            try:
                model_exe, _ = self.entry.get("init_seeded", None, np.uint32(0))
                parts = model_exe(np.uint32(0))
                self._init_exe = (model_exe, jax.jit(self._init_optimizer).lower(
                    *parts, np.float32(0)).compile())
            except Exception:  # e.g. Python control flow on the step size: eagerly, as before
                self._init_exe = False
            dt = time.perf_counter() - t0
        if self._init_exe is False or not 0 <= seed < 2**32:
            st, dt_eager = self.init(jax.random.PRNGKey(seed), step_size)
            return st, dt + dt_eager
        model_exe, opt_exe = self._init_exe
        return opt_exe(*model_exe(np.uint32(seed)), np.float32(step_size)), dt

    def params(self, state: TrainState) -> Any:
        """The parameters inside ``state``'s optimizer state (the training iterate)."""
        return self.make_opt(state.step_size).params_fn(state.opt_state)

    def eval_params(self, state: TrainState) -> Any:
        """The parameters to evaluate ``state`` at (the optimizer's ``eval_params_fn``, each leaf
        in its training parameter's dtype), or ``None`` where the optimizer has none for it.

        Raises:
          ValueError: (at trace time) evaluation parameters not shaped as the parameters."""
        opt = self.make_opt(state.step_size)
        out = None if opt.eval_params_fn is None else opt.eval_params_fn(state.opt_state)
        if out is None:
            return None
        params = opt.params_fn(state.opt_state)
        got, want = ([jnp.shape(a) for a in jax.tree.leaves(t)] for t in (out, params))
        if jax.tree.structure(out) != jax.tree.structure(params) or got != want:
            raise ValueError(f"optimizer {self.optimizer!r}: its eval_params returned "
                             f"{jax.tree.structure(out)} with shapes {got}, not the parameters' "
                             f"{jax.tree.structure(params)} with shapes {want}")
        return jax.tree.map(lambda e, p: jnp.asarray(e, jnp.result_type(p)), out, params)

    def clipped_counts(self, state: TrainState) -> Any:
        """How many updates ``grad_clip`` clipped so far (one per trial when stacked), or ``None``
        without ``grad_clip``."""
        return None if self.grad_clip is None else clipped_count(state.opt_state)

    def loss(self, params, mstate, xb, yb, rng):
        """``(float32 loss, new model state)`` of one training batch."""
        fused = self.entry.fused_loss(params, mstate, xb, yb, rng=rng, train=True)
        if fused is not None:
            return fused[0], fused[2]
        out, new_mstate = self.entry.forward(params, mstate, xb, rng=rng, train=True)
        loss = self.entry.model.loss(out, self.entry.target(xb, yb))
        return jnp.asarray(loss, jnp.float32), new_mstate

    def token_count(self, xb, yb):
        """The float32 count of tokens a sequence model's loss averages over (targets >= 0)."""
        return jnp.maximum(jnp.sum(self.entry.target(xb, yb) >= 0), 1).astype(jnp.float32)

    def augment(self, xb, data_key, i):
        """The training batch of update ``i`` augmented (:mod:`harness.train.augment`; keyed by the
        trial's data key and ``i``), or unchanged when the trial has no augmentation."""
        if self.augmenter is None:
            return xb
        key = jax.random.fold_in(jax.random.fold_in(data_key, AUGMENT_STREAM), i)
        return self.augmenter(xb, key)

    def _update(self, opt, state_pair, i, xb, yb, drop_key):
        opt_state, mstate = state_pair
        rng = jax.random.fold_in(drop_key, i) if self.entry.needs_rng else None
        params = opt.params_fn(opt_state)
        (loss, mstate), grads = self.value_and_grad(params, mstate, xb, yb, rng)
        return (opt.update_fn(i, grads, opt_state), mstate), loss

    def order(self, state: TrainState, start: jax.Array, *, n: int) -> tuple[jax.Array, TrainState]:
        """The training examples of updates ``start .. start + n - 1``: ``int32 (n, batch_size)``
        indices into the training split (epoch ``e``'s order is ``jax.random.permutation`` of the
        data key folded with ``e``; a batch may straddle two epochs), and ``state`` with the carried
        permutation advanced to the last epoch they touch. Integer work only."""
        idx, perm, perm_epoch = batch_order(state.data_key, state.perm, state.perm_epoch, start,
                                            n=n, batch_size=self.batch_size, num_train=self.entry.num_train)
        return idx, state._replace(perm=perm, perm_epoch=perm_epoch)

    def steps(self, state: TrainState, start: jax.Array, idx: jax.Array, x: jax.Array, y: jax.Array, *,
              split: Any = None, loop: bool = True) -> tuple[TrainState, jax.Array]:
        """``idx.shape[0]`` updates from update index ``start``, update ``j`` on the examples
        ``idx[j]`` (``int32 (n, batch_size)``, from :meth:`order`); returns (state, losses
        ``float32 (n,)``).

        ``split`` (data-parallel): the sharding each gathered batch ``x[idx]`` / ``y[idx]`` (leading
        axis B) is constrained to, ``NamedSharding(mesh, P("batch"))``. ``loop=False``: the updates
        unrolled when traced, no ``while`` loop in the program (:class:`LoopChunk`'s one step)."""
        opt = self.make_opt(state.step_size)

        def body(pair, inp):
            i, bidx = inp
            xb, yb = self.entry.decode(x[bidx]), y[bidx]
            if split is not None:
                xb = jax.lax.with_sharding_constraint(xb, split)
                yb = jax.lax.with_sharding_constraint(yb, split)
                if INSPECT_BATCH is not None:  # test hook: the batch's sharding, at compile time
                    jax.debug.inspect_array_sharding(xb, callback=INSPECT_BATCH)
            xb = self.augment(xb, state.data_key, i)
            return self._update(opt, pair, i, xb, yb, state.dropout_key)

        pair = (state.opt_state, state.model_state)
        if loop:
            (opt_state, mstate), losses = jax.lax.scan(body, pair, (start + jnp.arange(idx.shape[0]), idx))
        else:  # unrolled when traced: no while loop in the program (a scan of length 1 keeps one)
            out = []
            for j in range(idx.shape[0]):
                pair, loss = body(pair, (start + j, idx[j]))
                out.append(loss)
            (opt_state, mstate), losses = pair, jnp.stack(out)
        return state._replace(opt_state=opt_state, model_state=mstate), losses.astype(jnp.float32)

    def chunk(self, state: TrainState, start: jax.Array, x: jax.Array, y: jax.Array, *, n: int,
              split: Any = None):
        """``n`` steps from update index ``start`` (:meth:`order`, then :meth:`steps`, traced as one
        function); returns (state, losses ``float32 (n,)``)."""
        idx, state = self.order(state, start, n=n)
        return self.steps(state, start, idx, x, y, split=split)

    def one_step(self, state: TrainState, xb: jax.Array, yb: jax.Array, i: jax.Array):
        """One optimizer step on a given batch (what :mod:`harness.train.timing` times)."""
        opt = self.make_opt(state.step_size)
        xb = self.augment(self.entry.decode(xb), state.data_key, i)
        (opt_state, mstate), loss = self._update(
            opt, (state.opt_state, state.model_state), i, xb, yb, state.dropout_key)
        return state._replace(opt_state=opt_state, model_state=mstate), loss

    def get_chunk(self, T: int | None, n: int, *args: Any, layout: Any = None) -> tuple[Any, float]:
        """The compiled chunk of ``n`` steps (vmapped over ``T`` trials unless None), state donated,
        and the seconds spent compiling it now (0 when cached): ``exe(state, start, x, y) ->
        (state, losses)``.

        On one device (``layout`` None) it is two executables called in turn: the batch order
        (:meth:`order`; integer work, compiled once per training-split size, batch size, ``n`` and
        ``T`` and shared by every optimizer and schedule: :func:`order_program`) and the updates
        (:meth:`steps`). The order, a threefry permutation per epoch, is apart so that it compiles
        once, not in every chunk (docs/decisions.md); losses and state equal those of the chunk
        jitted as one function, to the bit (``tests/test_trainer.py``).

        ``layout`` (:class:`harness.train.parallel.Layout`): one executable (order and updates),
        jitted with explicit in/out shardings: ``"batch"``: state, start index and data replicated,
        each step's batch ``P("batch")``, losses replicated; ``"trials"``: state and the ``(T, n)``
        losses ``P("trials")``, start index and data replicated. With large convolutions on a CPU
        (:data:`CONV_LOOP_FLOPS`) the mesh chunk is a :class:`MeshLoopChunk` (the order, then ``n``
        dispatches of one step with XLA's convolution), as the one-device chunk is a ``LoopChunk``."""
        key = (T, n, layout.key if layout is not None else None)
        if key in self.compiled:
            return self.compiled[key], 0.0
        with watchdog.untimed():  # a compile is not the user's dispatch (harness.core.watchdog)
            t0 = time.perf_counter()
            if layout is None:
                exe = self._two_part_chunk(T, n, *args)
            elif n > 1 and self._conv_bound(T, args[0], args[2], args[3]):
                exe = self._mesh_loop_chunk(T, n, layout, *args)
            else:
                split = layout.split if layout.axis == "batch" else None

                def fn(s, t, x, y):
                    return self.chunk(s, t, x, y, n=n, split=split)

                if T is not None:
                    fn = jax.vmap(fn, in_axes=(0, None, None, None))
                r = layout.replicated
                st = r if layout.axis == "batch" else layout.split
                exe = jax.jit(fn, donate_argnums=(0,), in_shardings=(st, r, r, r),
                              out_shardings=(st, st)).lower(*args).compile()
        self.compiled[key] = exe
        dt = self.compile_seconds[key] = time.perf_counter() - t0
        return exe, dt

    def _two_part_chunk(self, T: int | None, n: int, state: TrainState, start: jax.Array, x: jax.Array,
                        y: jax.Array) -> Callable:
        """``get_chunk``'s one-device executable: the shared order program, then the updates."""
        order_exe = order_program(T, n, self.batch_size, self.entry.num_train, state.data_key)
        idx = jax.ShapeDtypeStruct((*(() if T is None else (T,)), n, self.batch_size), jnp.int32)

        def fn(s, t, i, x, y):
            return self.steps(s, t, i, x, y)

        if T is not None:
            fn = jax.vmap(fn, in_axes=(0, None, 0, None, None))
        if n > 1 and self._conv_bound(T, state, x, y):  # n dispatches of one step: CONV_LOOP_FLOPS
            one = jax.ShapeDtypeStruct((*idx.shape[:-2], 1, self.batch_size), jnp.int32)

            def fn1(s, t, i, x, y):
                return self.steps(s, t, i, x, y, loop=False)

            if T is not None:
                fn1 = jax.vmap(fn1, in_axes=(0, None, 0, None, None))
            with stax.conv_outside_loops():
                step_exe = jax.jit(fn1, donate_argnums=(0,)).lower(state, start, one, x, y).compile()
            return LoopChunk(order_exe, step_exe, n)
        steps_exe = jax.jit(fn, donate_argnums=(0,)).lower(state, start, idx, x, y).compile()
        return Chunk(order_exe, steps_exe)

    def _mesh_loop_chunk(self, T: int | None, n: int, layout: Any, state: TrainState, start: jax.Array,
                         x: jax.Array, y: jax.Array) -> MeshLoopChunk:
        """``get_chunk``'s mesh executable when the step's convolutions are large on a CPU
        (:data:`CONV_LOOP_FLOPS`): the batch order, then ``n`` dispatches of one step compiled with
        XLA's convolution, the shardings of the one-executable chunk."""
        r = layout.replicated
        st = r if layout.axis == "batch" else layout.split
        split = layout.split if layout.axis == "batch" else None

        def order(s, t):
            return self.order(s, t, n=n)

        def one(s, t, i, x, y):
            return self.steps(s, t, i, x, y, split=split, loop=False)

        if T is not None:
            order, one = jax.vmap(order, in_axes=(0, None)), jax.vmap(one, in_axes=(0, None, 0, None, None))
        order_exe = jax.jit(order, in_shardings=(st, r), out_shardings=(st, st)).lower(state, start).compile()
        idx = jax.ShapeDtypeStruct((*(() if T is None else (T,)), 1, self.batch_size), jnp.int32)
        with stax.conv_outside_loops():
            steps_exe = jax.jit(one, donate_argnums=(0,), in_shardings=(st, r, st, r, r),
                                out_shardings=(st, st)).lower(state, start, idx, x, y).compile()
        return MeshLoopChunk(order_exe, steps_exe, n)

    def _conv_bound(self, T: int | None, state: TrainState, x: jax.Array, y: jax.Array) -> bool:
        """Whether one step's convolutions exceed :data:`CONV_LOOP_FLOPS` on a CPU device: 3x the
        forward pass's (forward, input and weight gradients), counted once per model entry and batch."""
        if jax.default_backend() != "cpu":
            return False
        return 3 * forward_conv_flops(self.entry, self.batch_size, x) > CONV_LOOP_FLOPS

    def chunk_compile_s(self, T: int | None, n: int, layout: Any = None) -> float | None:
        """The seconds that compiling (or loading) the chunk :meth:`get_chunk` ``(T, n, layout)``
        took in this process, whoever asked for it; ``None`` when it is not compiled."""
        return self.compile_seconds.get((T, n, layout.key if layout is not None else None))

    def get_eval_params(self, T: int | None, state: TrainState, layout: Any = None) -> tuple[Any, float]:
        """The compiled :meth:`eval_params` (vmapped over ``T`` trials unless None; ``state`` not
        donated, output on the state's sharding) and the seconds spent compiling it now, or
        ``(None, 0.0)`` when the optimizer has no evaluation parameters (decided by tracing, once)."""
        key = (T, layout.key if layout is not None else None)
        if key in self.compiled_eval_params:
            return self.compiled_eval_params[key], 0.0
        fn = self.eval_params if T is None else jax.vmap(self.eval_params)
        t0 = time.perf_counter()
        if jax.eval_shape(fn, state) is None:
            self.compiled_eval_params[key] = None
            return None, 0.0
        jit_kw: dict[str, Any] = {}
        if layout is not None:
            st = layout.replicated if layout.axis == "batch" else layout.split
            jit_kw = {"in_shardings": (st,), "out_shardings": st}
        exe = jax.jit(fn, **jit_kw).lower(state).compile()
        self.compiled_eval_params[key] = exe
        return exe, time.perf_counter() - t0


#: The process's model entries and programs, least recently used first.
ENTRIES: collections.OrderedDict[tuple, ModelEntry] = collections.OrderedDict()
PROGRAMS: collections.OrderedDict[tuple, TrainingProgram] = collections.OrderedDict()


def _cached(cache: collections.OrderedDict, key: tuple, make: Callable[[], Any]) -> Any:
    obj = cache.get(key)
    if obj is None:
        obj = cache[key] = make()
        while len(cache) > PROGRAM_CACHE_SIZE:
            cache.popitem(last=False)
    cache.move_to_end(key)
    return obj


def default_registries() -> Registries:
    """The registries trials are built from: ``models.zoo.MODELS``, ``optimizers.OPTIMIZERS``,
    ``optimizers.SCHEDULES``, :data:`harness.data.sources.DATASETS` (tests replace this)."""
    from harness.data.sources import DATASETS
    from models.zoo import MODELS
    from optimizers import OPTIMIZERS, SCHEDULES

    return Registries(MODELS, OPTIMIZERS, SCHEDULES, DATASETS)


def trial_registries(spec: TrialSpec) -> Registries:
    """:func:`default_registries` plus the builders of the sources ``spec`` carries
    (:func:`harness.core.source_builders.registries_for`)."""
    return registries_for(spec, default_registries(), as_model)


def _entry(spec: TrialSpec, ds: Dataset, reg: Any) -> tuple[tuple, ModelEntry]:
    """The key and the (cached) :class:`ModelEntry` of ``spec``'s model on ``ds``."""
    ekey = (spec.model, spec.model_hparams, spec.dtype, id(ds),
            (id(reg.models), id(reg.optimizers), id(reg.schedules)))
    return ekey, _cached(ENTRIES, ekey, lambda: ModelEntry(spec, ds, reg.models))


def model_entry(spec: TrialSpec, ds: Dataset) -> ModelEntry:
    """The (cached) :class:`ModelEntry` of ``spec``'s model on ``ds``, the one :func:`program_for`
    builds its program on (an AlgoPerf trial, which has no program, uses it alone)."""
    return _entry(spec, ds, trial_registries(spec))[1]


def program_for(spec: TrialSpec, ds: Dataset) -> TrainingProgram:
    """The (cached) :class:`TrainingProgram` of ``spec`` on the loaded dataset ``ds``.

    Raises:
      KeyError: unknown model, optimizer or schedule name. ValueError: a batch larger than the
        training split.
    """
    reg = trial_registries(spec)
    ekey, entry = _entry(spec, ds, reg)
    opt_hp = tuple((k, v) for k, v in spec.optimizer_hparams if k != "step_size")
    pkey = (*ekey, spec.batch_size, spec.optimizer, opt_hp, spec.schedule, spec.schedule_hparams, spec.steps,
            spec.augment, spec.recipe)

    def make() -> TrainingProgram:
        return TrainingProgram(spec, entry, reg.optimizers, reg.schedules)

    prog = _cached(PROGRAMS, pkey, make)
    if prog.entry is not entry:  # the entry was evicted and rebuilt: rebuild the program on it
        prog = PROGRAMS[pkey] = make()
    return prog


def trial_model(spec: TrialSpec, ds: Dataset) -> Any:
    """``spec``'s model on ``ds`` from the same registries as :func:`program_for` (nothing compiled,
    no data on the device)."""
    return build_model(spec, ds, trial_registries(spec).models)
