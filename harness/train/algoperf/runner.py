"""An AlgoPerf submission as an update rule of the one training loop
(:class:`harness.train.loop.TrialLoop`): :class:`AlgoPerfRule` turns its ``init_optimizer_state``,
``data_selection`` / ``update_params`` and ``prepare_for_eval`` into the loop's seam; the loop owns
evaluation points, checkpoints, divergence, targets, progress and the test evaluation.

* **Set-up.** The submission is loaded (:func:`~harness.train.algoperf.submission.load_submission`);
  the model is the native trainer's :class:`~harness.train.build.ModelEntry` seen through
  :func:`~harness.train.algoperf.workload.make_workload`. Keys: ``split(PRNGKey(seed), 3)`` =
  (init, data order, dropout), as the native trainer; step ``i``'s update ``rng`` is
  ``fold_in(dropout key, i)``; ``init_optimizer_state``, ``data_selection`` and
  ``prepare_for_eval`` get keys of their own (``fold_in(PRNGKey(seed), AUX_STREAM)`` derived).
  ``hyperparameters``: a namedtuple of ``spec.hparams("optimizer")``.
* **Batch size.** ``get_batch_size(workload_name)`` when it knows the name, else the spec's.
* **A step** (one per :meth:`AlgoPerfRule.run`): ``data_selection`` (the native trainer's batches,
  :class:`~harness.train.algoperf.workload.InputQueue`), the batch's train loss at the parameters
  before the update (a jitted forward pass, not in ``wall_s``), ``update_params`` (``train_state``
  when it takes one) waited for. ``spec.TrainingCompleteError`` ends training.
* **Evaluation**: ``prepare_for_eval`` before each validation evaluation, its state kept;
  ``eval_results`` is the list of ``(step, {"validation/loss": ...})`` so far.
* **Clock.** ``wall_s`` counts update calls less the JAX compile time inside them
  (:func:`compile_clock`); that goes to ``compile_seconds``.
* **Throughput**: the trial's own update calls (first call's compile = ``compile_s``, 3 warm-up,
  the rest timed), FLOPs ``3 × flops_per_example × B``.
* **Bound.** Every call into the submission runs under :func:`harness.core.source.bounded` with
  :func:`call_limit_s` seconds: an overrun, ``os._exit``, a ``KeyboardInterrupt`` or a change of
  directory is a ``SourceError`` that fails this trial alone (main thread only).
* **Result.** ``extra``: ``optimizer_api = "algoperf"``, the workload name, the batch size and its
  source, ``prepare_for_eval``, ``train_loss``, ``eval_batch``, ``checkpoint`` and ``time``
  (``compile``, ``train``, ``throughput``). One device only.
"""

from __future__ import annotations

import collections
import inspect
import threading
import time
import types
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from harness.core.source import SourceError, bounded, source_of
from harness.core.spec import PerfResult, TrialResult, TrialSpec
from harness.data.sources import Dataset
from harness.train import timing
from harness.train.algoperf import state as ckstate
from harness.train.algoperf.submission import (
    algoperf_modules,
    load_submission,
    optional_fn,
    submission_name,
)
from harness.train.algoperf.workload import InputQueue, make_workload
from harness.train.build import ModelEntry
from harness.train.checkpoint import TrainCheckpoints
from harness.train.perf import perf_cache_key
from harness.train.program import TrainState, model_entry
from harness.train.track import TrialTrack

__all__ = ["AUX_STREAM", "CALL_LIMIT_S", "AlgoPerfRule", "batch_size_of", "call_limit_s", "compile_clock",
           "entry_for", "first_update", "hyperparameters_of"]

#: ``fold_in(PRNGKey(seed), AUX_STREAM)`` is the root of the keys the native trainer has no use for
#: (``init_optimizer_state``: its fold 0; step ``i``'s ``data_selection`` and ``prepare_for_eval``:
#: ``split(fold_in(fold_in(root, 1), i))``).
AUX_STREAM = 0x41504552
_WARMUP = 3
#: Seconds one call into a submission may take while it trains (:func:`call_limit_s`).
CALL_LIMIT_S = 600.0


def call_limit_s() -> float:
    """:data:`CALL_LIMIT_S`, read when called (a test lowers it)."""
    return CALL_LIMIT_S


def entry_for(spec: TrialSpec, ds: Dataset) -> ModelEntry:
    """The (cached) :class:`~harness.train.build.ModelEntry` of ``spec``'s model on ``ds``: the
    native trainer's (:func:`harness.train.program.model_entry`)."""
    return model_entry(spec, ds)


def hyperparameters_of(spec: TrialSpec) -> Any:
    """The trial's optimizer hyperparameters as AlgoPerf hands them over: a namedtuple."""
    hp = spec.hparams("optimizer")
    return collections.namedtuple("Hyperparameters", list(hp))(**hp)


def batch_size_of(module: Any, name: str, default: int) -> tuple[int, str]:
    """``(batch size, "submission" | "workload")``: ``get_batch_size(name)`` when it knows the
    workload, else ``default`` (the spec's).

    Raises:
      SourceError: it returned something that is not a positive integer.
    """
    try:
        b = module.get_batch_size(name)
    except (KeyError, ValueError, NotImplementedError):
        return int(default), "workload"
    if b is None:
        return int(default), "workload"
    if isinstance(b, bool) or not isinstance(b, int | np.integer) or b < 1:
        raise SourceError(f"get_batch_size({name!r}) returned {b!r}; expected a positive integer")
    return int(b), "submission"


_COMPILING = threading.local()
_LISTENING: list[bool] = []


def _on_event(name: str, seconds: float, **_: Any) -> None:
    if name.startswith("/jax/core/compile/"):
        _COMPILING.seconds = getattr(_COMPILING, "seconds", 0.0) + seconds


def compile_clock() -> float:
    """Seconds this thread has spent tracing, lowering and compiling JAX programs since the first
    call (JAX's ``/jax/core/compile/*`` duration events; the listener is registered once)."""
    if not _LISTENING:
        jax.monitoring.register_event_duration_secs_listener(_on_event)
        _LISTENING.append(True)
    return getattr(_COMPILING, "seconds", 0.0)


def _block(tree: Any) -> None:
    jax.block_until_ready([x for x in jax.tree.leaves(tree) if isinstance(x, jax.Array)])


class AlgoPerfRule:
    """One AlgoPerf trial's update rule (module docstring): ``run`` takes one step."""

    max_chunk = 1

    def __init__(self, spec: TrialSpec, ds: Dataset):
        ref = source_of(spec)
        if ref is None or ref.kind != "algoperf":
            raise ValueError(f"trial {spec.trial_id}: its optimizer is not an AlgoPerf submission "
                             f"(source {spec.optimizer_source!r})")
        if spec.devices != 1:
            raise ValueError(f"trial {spec.trial_id}: AlgoPerf submissions train on one device "
                             f"(parallelism.devices is {spec.devices!r})")
        self.spec = spec
        self.sub = load_submission(ref)
        self.name = submission_name(ref)
        self.file = ref.target
        self.prepare = optional_fn(self.sub, "prepare_for_eval")
        api, _ = algoperf_modules()
        self.complete_error = getattr(api, "TrainingCompleteError", ())
        self.entry = e = entry_for(spec, ds)
        self.workload = make_workload(e, spec, api)
        self.hp = hyperparameters_of(spec)
        with self._bounded("get_batch_size"):
            self.batch_size, self.batch_source = batch_size_of(self.sub, self.workload.workload_name,
                                                               spec.batch_size)
        if self.batch_size > e.num_train:
            raise ValueError(f"batch size {self.batch_size} ({self.batch_source}) exceeds the {e.num_train} "
                             f"training examples of {e.ds.name}")
        self.compile_s, self.step, self.wall = 0.0, 0, 0.0
        self.step_times: list[float] = []
        self.track = TrialTrack(spec)  # the loop's (``validation_goal_reached``)
        self.eval_results: list[tuple[int, dict[str, float]]] = []
        key = jax.random.PRNGKey(spec.seed)
        k_init, self.k_data, self.k_drop = jax.random.split(key, 3)
        aux = jax.random.fold_in(key, AUX_STREAM)
        self.k_opt, self.k_steps = jax.random.fold_in(aux, 0), jax.random.fold_in(aux, 1)
        exe, dt = e.get("init", None, k_init)
        self.compile_s += dt
        self.params, self.model_state = exe(k_init)
        self.workload.set_params(self.params)
        with self._bounded("init_optimizer_state"):
            self.optimizer_state = self.sub.init_optimizer_state(
                self.workload, self.params, self.model_state, self.hp, self.k_opt)
        self.fresh = (self.optimizer_state, self.params)
        self.queue = InputQueue(e, spec, self.k_data, self.batch_size)
        self.takes_train_state = "train_state" in inspect.signature(self.sub.update_params).parameters
        self._loss = jax.jit(self._batch_loss)
        self.like = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), self.params)
        exe, dt = e.get("eval", None, self.params, self.model_state, e.x_valid, e.y_valid)
        self.compile_s += dt
        self.first_call = True
        self.first_compile_s = 0.0

    # -- pieces --------------------------------------------------------------------------------

    def _bounded(self, fn: str):
        """A call of the submission's ``fn``, bounded (module docstring: **Bound**)."""
        step = f" at step {self.step}" if hasattr(self, "step") else ""
        return bounded(f"AlgoPerf submission {self.name}: {fn}{step}", call_limit_s(), self.file,
                       "the limit of one call into a submission while it trains")

    def _batch_loss(self, params, mstate, batch, rng):
        out, _ = self.entry.forward(params, mstate, batch["inputs"], rng=rng, train=True)
        return jnp.asarray(self.entry.model.loss(out, batch["targets"]), jnp.float32)

    def _step_keys(self, step: int) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(data selection, prepare for eval, update) keys of ``step``."""
        sel, prep = jax.random.split(jax.random.fold_in(self.k_steps, step))
        return sel, prep, jax.random.fold_in(self.k_drop, step)

    def _train_state(self) -> types.MappingProxyType:
        return types.MappingProxyType({
            "validation_goal_reached": self.track.steps_to_target is not None,
            "test_goal_reached": False, "is_time_remaining": True, "training_complete": False,
            "accumulated_submission_time": self.wall, "accumulated_eval_time": 0.0,
            "accumulated_logging_time": 0.0, "last_eval_time": 0.0, "last_step_end_time": None})

    def _three(self, out: Any, fn: str) -> tuple[Any, Any, Any]:
        if not isinstance(out, tuple | list) or len(out) != 3:
            got = f"{len(out)} values" if isinstance(out, tuple | list) else type(out).__name__
            raise TypeError(f"AlgoPerf submission {self.name}: {fn} returned {got}; expected "
                            f"(optimizer_state, params, model_state)")
        return tuple(out)  # type: ignore[return-value]

    # -- the loop's seam -----------------------------------------------------------------------

    def checkpoint_state(self) -> TrainState:
        """The submission's state in the form of :mod:`harness.train.algoperf.state`."""
        return ckstate.pack(self.optimizer_state, self.params, self.model_state, self.k_data,
                            self.k_drop, self.queue.position)

    def params_fn(self, _state: Any) -> Any:
        return self.params

    def restore(self, state: TrainState, step: int, wall: float) -> None:
        """Continue from a checkpoint's state at ``step``."""
        self.step, self.wall = step, wall
        self.optimizer_state, self.params, self.model_state, self.queue.position = ckstate.unpack(
            state, *self.fresh)

    def resumed(self, tracks: Sequence[TrialTrack]) -> None:
        """``eval_results`` rebuilt from the restored curves."""
        c = tracks[0].curves
        self.eval_results = [(s, {"validation/loss": lo, "validation/accuracy": a,
                                  **{f"validation/{k}": v[j] for k, v in c.eval_metrics.items()}})
                             for j, (s, lo, a) in enumerate(zip(c.eval_step, c.eval_loss, c.eval_accuracy,
                                                                 strict=True))]

    def before_eval(self, step: int) -> None:
        """``prepare_for_eval`` (when the submission has one); its state is kept."""
        if self.prepare is None:
            return
        _, prep_rng, _ = self._step_keys(step)
        with self._bounded("prepare_for_eval"):
            out = self.prepare(
                workload=self.workload, current_param_container=self.params,
                current_params_types=self.workload.model_params_types,
                model_state=self.model_state, hyperparameters=self.hp,
                loss_type=self.workload.loss_type, optimizer_state=self.optimizer_state,
                eval_results=list(self.eval_results), global_step=step, rng=prep_rng)
        self.optimizer_state, self.params, self.model_state = self._three(out, "prepare_for_eval")

    def evaluate(self, split: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``(loss (1,), {metric: (1,)})`` on ``split`` with the harness's compiled evaluation."""
        e = self.entry
        x, y = (e.x_valid, e.y_valid) if split == "valid" else (e.x_test, e.y_test)
        params = jax.tree.map(lambda p, s: jnp.asarray(p, s.dtype), self.params, self.like)
        exe, dt = e.get("eval", None, params, self.model_state, x, y)
        self.compile_s += dt
        loss, mets = exe(params, self.model_state, x, y)
        return np.array([float(loss)]), {k: np.array([float(v)]) for k, v in mets.items()}

    def on_eval(self, step: int, loss: float, metrics: dict[str, float]) -> None:
        self.eval_results.append((step, {"validation/loss": loss,
                                         **{f"validation/{k}": v for k, v in metrics.items()}}))

    def run(self, step: int, n: int = 1, next_n: int = 0) -> tuple[np.ndarray, float] | None:
        """One step (``n`` is 1): data selection, the train loss, ``update_params``; ``None`` when
        the submission declared training complete (nothing was updated then)."""
        self.step = step
        sel_rng, _, upd_rng = self._step_keys(step)
        with self._bounded("data_selection"):
            batch = self.sub.data_selection(self.workload, self.queue, self.optimizer_state,
                                            self.params, self.model_state, self.hp, step, sel_rng)
        rng = upd_rng if self.entry.needs_rng else None
        c0 = compile_clock()
        loss = float(self._loss(self.params, self.model_state, batch, rng))
        kw = {"train_state": self._train_state()} if self.takes_train_state else {}
        c1 = compile_clock()
        t0 = time.perf_counter()
        try:
            with self._bounded("update_params"):
                out = self.sub.update_params(
                    workload=self.workload, current_param_container=self.params,
                    current_params_types=self.workload.model_params_types,
                    model_state=self.model_state, hyperparameters=self.hp, batch=batch,
                    loss_type=self.workload.loss_type, optimizer_state=self.optimizer_state,
                    eval_results=list(self.eval_results), global_step=step, rng=upd_rng, **kw)
        except self.complete_error:
            return None
        self.optimizer_state, self.params, self.model_state = self._three(out, "update_params")
        _block((self.optimizer_state, self.params, self.model_state))
        dt = time.perf_counter() - t0
        compiling = compile_clock() - c1
        if self.first_call and compiling == 0.0:  # no compile events seen: the whole first call
            compiling = dt
        counted = max(dt - compiling, 0.0)
        self.compile_s += c1 - c0 + compiling
        if self.first_call:
            self.first_compile_s = compiling
        self.first_call = False
        self.step_times.append(counted)
        self.step, self.wall = step + 1, self.wall + counted
        return np.array([[loss]]), counted

    # -- results -------------------------------------------------------------------------------

    def perf(self, perf_cache: dict | None) -> PerfResult | None:
        """Throughput from the trial's own update calls (module docstring), via ``perf_cache``."""
        key = (*perf_cache_key(self.spec), "algoperf", self.batch_size)
        if perf_cache is not None and key in perf_cache:
            return perf_cache[key]
        if not self.step_times:
            return None
        rest = self.step_times[1:]
        warm = min(_WARMUP, max(len(rest) - 1, 0))
        timed = np.asarray(rest[warm:] or self.step_times[:1]) * 1e3
        median = float(np.median(timed))
        p10, p90 = (float(v) for v in np.percentile(timed, [10, 90]))
        flops = self._analytic_flops()
        peak = None
        try:
            peak = timing.device_peak_flops(None, self.entry.compute_dtype)
        except Exception:  # utilisation unknown
            peak = None
        util = flops / (median / 1e3) / peak if flops and peak and median > 0 else None
        eps = self.batch_size / (median / 1e3) if median > 0 else float("inf")
        perf = PerfResult(compile_s=self.first_compile_s, step_time_ms=median, step_time_ms_p10=p10,
                          step_time_ms_p90=p90, examples_per_sec=eps, flops_per_step=flops,
                          flops_per_step_analytic=flops, peak_flops=peak, utilization=util,
                          timed_steps=len(timed), warmup_steps=warm, device_kind=timing.device_kind(),
                          dtype=jnp.dtype(self.entry.compute_dtype).name, num_devices=1,
                          examples_per_sec_per_device=eps)
        if perf_cache is not None:
            perf_cache[key] = perf
        return perf

    def _analytic_flops(self) -> float | None:
        fn = getattr(self.entry.model, "flops_per_example", None)
        try:
            fpe = fn(self.entry.input_shape) if fn is not None else None
        except Exception:  # an analytic count is optional
            fpe = None
        return 3.0 * float(fpe) * self.batch_size if fpe else None

    def extra(self, ck: TrainCheckpoints | None) -> dict[str, Any]:
        ds = self.entry.ds
        return {"batched": 1, "optimizer_api": "algoperf", "submission": self.name,
                "workload_name": self.workload.workload_name, "batch_size": self.batch_size,
                "batch_size_source": self.batch_source,
                "prepare_for_eval": self.prepare is not None,
                "train_loss": "harness: the step's batch before the update (not in wall_s)",
                "eval_batch": self.entry.eval_batch,
                **{k: float(getattr(ds, k)) for k in ("loss_floor", "entropy_rate")
                   if getattr(ds, k, None) is not None},
                **({"checkpoint": {"resumed_from_step": ck.resumed_from, "saves": ck.saves,
                                   "save_s": ck.save_seconds}} if ck is not None else {})}

    def result(self, track: TrialTrack, ck: TrainCheckpoints | None, perf_cache: dict | None,
               measure_perf: bool) -> TrialResult:
        """The trial's :class:`TrialResult` once the loop has trained it (and evaluated the test split)."""
        t_perf, perf = time.perf_counter(), None
        if measure_perf:
            perf = self.perf(perf_cache)
        # the time budget (harness.core.budget): evaluation is not timed apart here (it is in "other")
        times = {"compile": self.compile_s, "train": float(sum(self.step_times)),
                 "throughput": time.perf_counter() - t_perf if measure_perf else 0.0}
        return track.result(perf=perf, compile_s=self.compile_s, extra={**self.extra(ck), "time": times})


def first_update(spec: TrialSpec, dataset: Dataset) -> None:
    """Build trial ``spec`` as the loop does (nothing written, no checkpoints) and take its first
    update: what the pre-flight runs so that an error inside the submission's
    ``init_optimizer_state``, ``data_selection`` or ``update_params`` is refused before any write.

    Raises:
      SourceError: the submission cannot be loaded, or a call into it overran or left by a side
        door. Any exception of the submission propagates.
    """
    AlgoPerfRule(spec, dataset).run(0)
