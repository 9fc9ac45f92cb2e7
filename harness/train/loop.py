"""The trainer: one :class:`~harness.core.spec.TrialSpec` (or a batch of them) → :class:`TrialResult`.

How a trial trains (the same code path for one trial and for a vmapped batch):

* **Components** (:mod:`harness.train.build`).
  ``models.zoo.MODELS[spec.model](input_shape=..., num_classes=..., **model_hp)``;
  the optimizer is built *inside* the traced program from its step size, so a step size is a traced
  scalar (vmappable, no recompile per value): ``OPTIMIZERS[name](SCHEDULES[schedule](step_size,
  **schedule_hp), **optimizer_hp)``, where a schedule argument named ``total_steps`` is filled with
  ``spec.steps``. The schedule name ``"constant"`` (when not registered) or ``"none"`` means the bare
  step size.
* **Keys.** ``jax.random.PRNGKey(seed)`` is split into (init, data order, dropout) keys.
* **Data** lives on the device. Training order is a stream of epochs, each a fresh
  ``jax.random.permutation(fold_in(data_key, epoch), N)``; step ``i`` (0-based) uses stream
  positions ``[i·B, (i+1)·B)``, so a batch may straddle two epochs and no example is dropped.
  A streamed split (``Dataset.stream``, token shards) is read on the host instead, in the stream's
  own order (a pure function of seed and step), a chunk ahead (:mod:`harness.train.streaming`).
* **Sequence tasks** (``dataset.task == "sequence"``, :mod:`harness.data.sequences`): inputs are
  ``int32 (N, T)`` token ids kept as integers on the device, targets the next tokens ``(N, T)``;
  the model's loss and accuracy are per-token means, and evaluation's example-weighted mean is the
  token-weighted mean (every sequence has T tokens). A dataset with a known ``loss_floor`` puts it
  in ``result.extra["loss_floor"]`` (and ``entropy_rate``), from which the worker logs
  ``valid/nats_above_entropy``.
* **Augmentation** (``spec.augment``, :mod:`harness.train.augment`): applied in-graph to each training
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
  :data:`harness.train.build.EVAL_BATCH` (a scan over full batches plus one remainder batch, no
  padding); the loss and
  every metric of the model (``ModelDef.metrics``) are example-weighted means. Models without an
  ``accuracy`` metric report ``nan`` accuracy. Training never sees either split. Both evaluate at
  the optimizer's **evaluation parameters** where it has them (Schedule-Free's average, a
  builder's fourth member ``eval_params(opt_state)``, an ``optax.contrib`` Schedule-Free state:
  :func:`harness.train.build.as_train_optimizer`), computed by a compiled (vmapped) function of the
  state (:meth:`~harness.train.program.TrainingProgram.get_eval_params`), with
  ``result.extra["eval_params"] = True``; training, checkpoints (the optimizer state) and
  throughput use the training iterate ``params_fn``.
* **Clock.** ``wall_s`` counts training dispatches only (compile and evaluation excluded), measured
  at each chunk's host sync; rows inside a chunk are interpolated linearly. ``result.extra["time"]``
  is the unit's time budget in seconds (:mod:`harness.core.budget`): ``compile``, ``train``
  (dispatches), ``eval`` (evaluations, their compile excluded) and ``throughput`` (the protocol, its
  compile included), each the unit's seconds divided by its number of trials (a vmapped batch shares one
  clock; the trials' figures sum to the batch's).
* **Divergence** (:mod:`harness.train.track`). The first non-finite train loss, or the first train
  loss above
  ``spec.divergence_loss_factor`` (default 100) × the trial's initial train loss (step 1's, computed
  on the initial parameters; the rule applies only when that is finite and > 0), ends the trial:
  status ``"diverged"``, ``diverged_step`` = that step (1-based: the step whose update used that
  loss), ``reason`` says which rule fired; its row is kept. The same rules on each later validation
  loss (against the step-0 one) end it at the evaluation's step: only there does the blow-up of a
  trial's last update show. Never raises for it. Other exceptions
  propagate. The same check runs per member in a vmapped batch.
* **Early stopping** (:mod:`harness.core.rungs`): a trial whose spec has an
  ``early_stop`` rule is also evaluated at each of its rung steps; after each rung's evaluation it
  records its rung value and asks the ``gate`` the caller passed (the execute layer's, built from
  the sweep's rung board: dependency injection, this layer never imports it) whether to go on. A
  trial the gate stops ends there: status ``"stopped"``, ``stopped_step`` the rung, ``reason`` the
  gate's, its curves up to the rung, no test evaluation; ``result.rungs`` holds every rung value
  it reached. Without a gate the rungs are recorded and nothing stops.
* **Convergence.** ``steps_to_target``/``seconds_to_target`` = the first validation evaluation whose
  metric (``valid/loss``, ``valid/accuracy`` or ``valid/<name>``) reaches ``spec.target``
  (``None`` = not reached), after training started: the step-0 evaluation (at initialisation) is
  not counted, as AlgoPerf's runner first evaluates after an update (never a time of 0).
* **Batching.** :func:`run_trials_batched` trains trials sharing ``spec.batch_key()`` (they differ in
  seed and/or ``optimizer.step_size``) as one ``jax.vmap``-ed program. Trial *i* equals
  :func:`run_trial` of it alone to float32 rounding: tested as ``rtol=1e-4, atol=1e-5`` on every
  curve value for every registered optimizer. Diverged members stop being recorded at their step;
  the batch stops when all have diverged.
* **Devices** (``spec.devices``/``spec.shard``, :mod:`harness.train.parallel`): on one device (the
  default) nothing below changes. On D > 1 devices a 1-D mesh of the first D visible devices:
  ``shard: batch`` jits the chunk with state and data replicated (``P()``) and each gathered batch
  constrained to ``P("batch")``, evaluation batches (``min(M, EVAL_BATCH)`` rounded down to a
  multiple of D) likewise, the remainder replicated; ``shard: trials`` splits a vmapped batch's
  state (leading axis T, padded up to a multiple of D with copies of the last trial, dropped) as
  ``P("trials")``. Curves equal the one-device ones to float32 rounding (tested at ``rtol=atol=1e-5``).
  ``result.extra`` gets ``mesh`` (``"batch=4"``), ``num_devices`` and
  ``padded_trials``. Raises ``ValueError`` when the devices are too few or B % D != 0.
* **Compiled programs are cached** (:mod:`harness.train.program`) in the process (the last 16 of
  each kind): parameter init
  (compiled for a batch of 1: stax parameters do not depend on the batch size) and evaluation per
  (model, model hparams, dtype, dataset object); the K-step chunk per that plus (batch size,
  optimizer and its non-step-size hparams, schedule, steps, vmapped width). So the seeds and step
  sizes of a sweep run one after another compile once; ``compile_seconds`` is the compile time a
  call actually spent (0.0 when everything was cached). The optimizer's own ``init_fn`` runs
  eagerly.
* **Update rules.** :class:`TrialLoop` is the one loop (evaluation points, rungs, checkpoints,
  progress, the test split); what updates the state is an :class:`UpdateRule`: the compiled
  K-step chunk (:class:`~harness.train.program_rule.ProgramRule`), or for an AlgoPerf submission
  (``spec.optimizer_api == "algoperf"``) :class:`~harness.train.algoperf.runner.AlgoPerfRule`, one
  ``data_selection`` → ``update_params`` step per chunk (checkpoints offered after every step) on
  the same initial parameters, data order, evaluation, divergence and target rules; never vmapped.
* **Throughput** (``measure_perf``, :mod:`harness.train.perf`): :func:`harness.train.timing.measure`
  of the single-trial one-step function on a fixed batch (state donated), once per
  ``(spec.perf_key(), device kind)`` (plus the resolved device count on a mesh) through
  ``perf_cache``; on a mesh the sharded step is timed. FLOPs are cross-checked against
  ``3 × flops_per_example × batch_size``, the step time against the unit's training clock
  (the median over its dispatches of seconds per step, CPU seconds for a CPU figure; re-measured
  beside the task's programs, then ``perf.suspect``: :mod:`harness.train.perf`).

Curve steps are 1-based update counts for train rows (``train_loss[j]`` is the loss of the batch
that update ``train_step[j]`` used, computed before that update) and update counts for eval rows.
Same seed and machine give identical curves (wall-clock columns aside).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from harness.core import interrupt, watchdog
from harness.core.spec import TrialResult, TrialSpec
from harness.data.sources import Dataset, load_dataset
from harness.train import batching, compile_cache
from harness.train.checkpoint import TrainCheckpoints
from harness.train.perf import TrainClock, measure_trial_perf
from harness.train.program_rule import ProgramRule
from harness.train.track import TrialTrack, eval_points

__all__ = ["Gate", "TrialLoop", "UpdateRule", "run_trial", "run_trials_batched", "should_batch"]

#: ``gate(spec, rung step, rung value) -> reason to stop, or None to go on`` (early stopping).
Gate = Callable[[TrialSpec, int, float], "str | None"]


class UpdateRule(Protocol):
    """The seam between the loop and what updates the state: a compiled program
    (:class:`~harness.train.program_rule.ProgramRule`) or an AlgoPerf submission
    (:class:`~harness.train.algoperf.runner.AlgoPerfRule`). ``compile_s`` counts its compile seconds;
    ``max_chunk`` caps the steps of one :meth:`run` (``None``: ``spec.steps_per_dispatch``)."""

    compile_s: float
    max_chunk: int | None

    def run(self, step: int, n: int, next_n: int) -> tuple[np.ndarray, float] | None:
        """``n`` updates from ``step``: train losses ``(T, n)`` (before each update) and the seconds
        counted; ``None`` when training is complete (nothing updated)."""

    def before_eval(self, step: int) -> None:
        """Called before each validation evaluation."""

    def evaluate(self, split: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``(loss (T,), {metric: (T,)})`` of the current state on ``"valid"`` or ``"test"``."""

    def on_eval(self, step: int, loss: float, metrics: dict[str, float]) -> None:
        """Called with each validation result (the first trial's)."""

    def checkpoint_state(self) -> Any:
        """The state a checkpoint saves (the template it restores into)."""

    def params_fn(self, state: Any) -> Any:
        """The training parameters of ``state``."""

    def restore(self, state: Any, step: int, wall: float) -> None:
        """Continue from a restored ``state`` at ``step``, ``wall`` seconds."""

    def resumed(self, tracks: Sequence[TrialTrack]) -> None:
        """Called once the tracks were restored from a checkpoint."""


class TrialLoop:
    """One work unit's life (one trial, or ``T`` trials under ``jax.vmap``): steps, the wall clock,
    the per-trial tracks, evaluation points, rungs, checkpoints and progress, around ``rule``.

    Each method does one step of :meth:`train`; together they are the method of the module docstring."""

    def __init__(self, specs: Sequence[TrialSpec], rule: UpdateRule, checkpoints: TrainCheckpoints | None,
                 tracks: list[TrialTrack] | None = None):
        self.specs, self.spec0, self.rule, self.ck = specs, specs[0], rule, checkpoints
        self.step, self.wall = 0, 0.0
        self.eval_s = 0.0  # this invocation's evaluation seconds (their compile excluded)
        self.tracks = tracks if tracks is not None else [TrialTrack(s) for s in specs]

    @property
    def active(self) -> bool:
        return any(tr.active for tr in self.tracks)

    def _evaluate(self, split: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        t0, c0 = time.perf_counter(), self.rule.compile_s
        with watchdog.dispatch("evaluation", self.step):
            out = self.rule.evaluate(split)
        self.eval_s += time.perf_counter() - t0 - (self.rule.compile_s - c0)  # its compile is compile_s's
        return out

    def record_eval(self) -> None:
        """Evaluate the validation split now and add the row to every active trial."""
        self.rule.before_eval(self.step)
        loss, mets = self._evaluate("valid")
        for j, tr in enumerate(self.tracks):
            if tr.active:
                tr.add_eval(self.step, self.wall, float(loss[j]), {k: float(v[j]) for k, v in mets.items()})
        self.rule.on_eval(self.step, float(loss[0]), {k: float(v[0]) for k, v in mets.items()})

    def record_test(self) -> None:
        """The test split, once, after the last step, for the trials that did not diverge."""
        if all(tr.diverged_step is not None or tr.stopped_step is not None for tr in self.tracks):
            return
        loss, mets = self._evaluate("test")
        for j, tr in enumerate(self.tracks):
            if tr.diverged_step is None and tr.stopped_step is None:
                tr.test_loss = float(loss[j])
                tr.test_metrics = {k: float(v[j]) for k, v in mets.items()}

    def run_chunk(self, n: int, next_n: int = 0) -> bool:
        """``n`` updates; their train rows go to the active trials. False: the rule declared
        training complete (nothing was updated)."""
        with watchdog.dispatch("training chunk", self.step):
            out = self.rule.run(self.step, n, next_n)
        if out is None:
            return False
        losses, dt = out
        for j, tr in enumerate(self.tracks):
            if tr.active:
                tr.add_train(self.step, self.wall, dt, losses[j])
        self.step += n
        self.wall += dt
        return True

    def resume(self) -> bool:
        """Resume from the unit's newest checkpoint (``done`` returned: nothing left to train), else
        record the evaluation at step 0."""
        rule = self.rule
        got = self.ck.restore(rule.checkpoint_state(), self.tracks, rule.params_fn) if self.ck else None
        if got is None:
            self.record_eval()
            return False
        state, self.step, self.wall, done = got
        rule.restore(state, self.step, self.wall)
        rule.resumed(self.tracks)
        return done

    def at_rung(self, gate: Gate | None) -> None:
        """After the evaluation at ``self.step``: each active trial with a rung there records its
        rung value and ends when ``gate`` says so."""
        for tr in self.tracks:
            if tr.active and self.step in tr.rung_steps():
                v = tr.record_rung(self.step)
                why = gate(tr.spec, self.step, v) if gate is not None else None
                if why:
                    tr.stop(self.step, why)

    def _offer(self, done: bool | None = None) -> None:
        if self.ck is not None:
            kw = {} if done is None else {"done": done}
            self.ck.after_chunk(self.step, self.wall, self.rule.checkpoint_state(), self.tracks,
                                self.rule.params_fn, **kw)

    def train(self, on_progress: Callable[[int, int], None] | None, gate: Gate | None = None) -> None:
        """Chunks of at most ``K`` steps that end at every evaluation point (rung steps included),
        an evaluation at each point, the rung decisions, checkpoints at chunk ends; stops early
        when every trial has diverged or been stopped, or when the rule says training is complete
        (then one last evaluation unless this step has one)."""
        steps, K = self.spec0.steps, self.spec0.steps_per_dispatch
        if K < 1:
            raise ValueError(f"steps_per_dispatch must be >= 1, got {K}")
        cap = self.rule.max_chunk or K
        done, complete = self.resume(), False
        rungs = sorted({r for tr in self.tracks for r in tr.rung_steps()})
        for seg_end in [] if done else eval_points(steps, self.spec0.eval_every, rungs):
            if seg_end <= self.step:  # resumed past it
                continue
            while self.step < seg_end:
                n = min(K, cap, seg_end - self.step)
                if not self.run_chunk(n, min(K, cap, steps - self.step - n)):
                    complete = True
                    break
                interrupt.check()  # a Ctrl-C lost in a garbage-collection callback (sweep only)
                if on_progress is not None and (n == K or self.step % K == 0 or self.step == seg_end):
                    on_progress(self.step, steps)
                if not self.active:
                    break
                if self.step < seg_end:
                    self._offer()
            if complete or not self.active:
                break
            self.record_eval()
            self.at_rung(gate)
            self._offer(done=self.step >= steps or not self.active)
            if not self.active:
                break
        evals = self.tracks[0].curves.eval_step
        if complete and self.active and not (evals and evals[-1] == self.step):
            self.record_eval()
        if self.ck is not None:
            rule = self.rule
            self.ck.finish(self.step, self.wall, rule.checkpoint_state(), self.tracks, rule.params_fn)


def _check_batch(specs: Sequence[TrialSpec]) -> None:
    if not specs:
        raise ValueError("no trials to run")
    odd = batching.batch_mismatch(specs)
    if odd is not None:
        raise ValueError(f"trial {odd.trial_id} differs from {specs[0].trial_id} in more than seed "
                         "and optimizer.step_size; it cannot share a batch")


def _checkpoint_extra(ck: TrainCheckpoints | None) -> dict[str, Any]:
    """``extra["checkpoint"]``: from which step the unit resumed, how many it wrote, their seconds."""
    if ck is None:
        return {}
    return {"checkpoint": {"resumed_from_step": ck.resumed_from, "saves": ck.saves,
                           "save_s": ck.save_seconds}}


def _train(specs: Sequence[TrialSpec], batched: bool, dataset: Dataset | None, perf_cache: dict | None,
           measure_perf: bool, on_progress: Callable[[int, int], None] | None,
           checkpoints: TrainCheckpoints | None = None, gate: Gate | None = None) -> list[TrialResult]:
    _check_batch(specs)
    cache0 = compile_cache.cache_counts()
    spec0 = specs[0]
    ds = dataset if dataset is not None else load_dataset(spec0.dataset, **spec0.hparams("dataset"))
    rule = ProgramRule(specs, batched, ds)
    run = TrialLoop(specs, rule, checkpoints)
    try:
        run.train(on_progress, gate)
    finally:
        rule.close()
    run.record_test()
    clock = TrainClock(run.wall, run.step, rule.width or 1, rule.dispatch_step_s,  # checks the step time
                       rule.dispatch_cpu_s)
    t_perf = time.perf_counter()
    with watchdog.dispatch("throughput timing", run.step):
        perf = measure_trial_perf(rule.prog, spec0, perf_cache, clock) if measure_perf else None
    perf_s = time.perf_counter() - t_perf if measure_perf else 0.0
    # the unit's clocks, divided between its trials (harness.core.budget): their sum is the unit's
    n = len(specs)
    times = {"compile": rule.compile_s / n, "train": rule.train_s / n, "eval": run.eval_s / n,
             "throughput": perf_s / n}
    cache = compile_cache.cache_counts() - cache0
    # no counts without a cache: "0 compiled" would read as "everything loaded"
    counts = {"compile_cache": {"hits": cache.hits, "misses": cache.misses}} if compile_cache.active() else {}
    clipped = rule.clipped_fractions(run.step, len(run.tracks))

    def extra(f: float | None) -> dict[str, Any]:  # a fresh dict per trial
        return {**rule.extra(batched), **_checkpoint_extra(checkpoints), **rule.extra_after(), **counts,
                "time": dict(times), **({"clipped_fraction": f} if f is not None else {})}

    return [tr.result(perf=perf, compile_s=rule.compile_s, extra=extra(f))
            for tr, f in zip(run.tracks, clipped, strict=True)]


def _train_algoperf(spec: TrialSpec, dataset: Dataset | None, perf_cache: dict | None, measure_perf: bool,
                    on_progress: Callable[[int, int], None] | None, checkpoints: TrainCheckpoints | None,
                    gate: Gate | None) -> TrialResult:
    from harness.train.algoperf.runner import AlgoPerfRule

    ds = dataset if dataset is not None else load_dataset(spec.dataset, **spec.hparams("dataset"))
    rule = AlgoPerfRule(spec, ds)
    run = TrialLoop([spec], rule, checkpoints, tracks=[rule.track])
    run.train(on_progress, gate)
    run.record_test()
    return rule.result(run.tracks[0], checkpoints, perf_cache, measure_perf)


# --------------------------------------------------------------------------------------------------
# public API


def run_trial(spec: TrialSpec, *, dataset: Dataset | None = None, perf_cache: dict | None = None,
              measure_perf: bool = True, on_progress: Callable[[int, int], None] | None = None,
              checkpoints: TrainCheckpoints | None = None, gate: Gate | None = None) -> TrialResult:
    """Train one trial (see the module docstring for the method).

    Args:
      spec: the trial.
      dataset: the loaded dataset (default: ``load_dataset(spec.dataset, **dataset_hparams)``).
      perf_cache: ``{(spec.perf_key(), device kind): PerfResult}``, read and filled, so throughput is
        measured once per distinct (model, optimizer, batch shape, dtype, device).
      measure_perf: time the step with :mod:`harness.train.timing` (``result.perf``); ``False`` skips it.
      on_progress: called ``on_progress(steps_done, total_steps)`` after every chunk.
      checkpoints: a :class:`harness.train.checkpoint.TrainCheckpoints` (e.g. a
        :class:`~harness.train.checkpoint.UnitCheckpoints`) for this trial (``None``: none):
        training resumes from its newest checkpoint and saves at its cadence, only at chunk ends;
        ``result.extra["checkpoint"]`` says from which step it resumed and how many it wrote.
      gate: the early-stopping decision at a rung (:data:`Gate`; module docstring), for a trial
        with an ``early_stop`` rule; ``None``: its rungs are recorded, nothing stops.

    Returns:
      ``TrialResult`` with ``status`` ``"finished"``, ``"diverged"`` or ``"stopped"``; curves hold
      Python floats/ints.

    Raises:
      KeyError: unknown model/optimizer/schedule/dataset name. Any exception from building or
        training propagates (the caller records the trial as failed).
    """
    if spec.optimizer_api == "algoperf":  # an AlgoPerf submission: its update rule, one step a chunk
        return _train_algoperf(spec, dataset, perf_cache, measure_perf, on_progress, checkpoints, gate)
    return _train([spec], False, dataset, perf_cache, measure_perf, on_progress, checkpoints, gate)[0]


def run_trials_batched(specs: list[TrialSpec], *, dataset: Dataset | None = None,
                       perf_cache: dict | None = None, measure_perf: bool = True,
                       on_progress: Callable[[int, int], None] | None = None,
                       checkpoints: TrainCheckpoints | None = None, gate: Gate | None = None
                       ) -> list[TrialResult]:
    """Train trials sharing ``spec.batch_key()`` as one ``jax.vmap``-ed program.

    Result ``i`` equals ``run_trial(specs[i])`` within float32 rounding (tested at ``rtol=1e-4,
    atol=1e-5``), except wall-clock values and ``perf`` (shared, measured for the single-trial step).

    Args:
      specs: the trials; AlgoPerf submissions among several train one after another (by
        :func:`run_trial`, without ``checkpoints`` or ``gate``, and without the batch-key check).
      dataset, perf_cache, measure_perf, on_progress: as :func:`run_trial`'s, for every trial.
      checkpoints, gate: as :func:`run_trial`'s, for the batch as one program.

    Returns:
      one ``TrialResult`` per spec, in the order of ``specs``.

    Raises:
      ValueError: the specs do not share a batch key (or the list is empty).
    """
    if len(specs) > 1 and any(s.optimizer_api == "algoperf" for s in specs):
        # AlgoPerf submissions are never vmapped: one after another (a unit's checkpoints are for
        # one program, so none here)
        return [run_trial(s, dataset=dataset, perf_cache=perf_cache, measure_perf=measure_perf,
                          on_progress=on_progress) for s in specs]
    if len(specs) == 1:
        return [run_trial(specs[0], dataset=dataset, perf_cache=perf_cache, measure_perf=measure_perf,
                          on_progress=on_progress, checkpoints=checkpoints, gate=gate)]
    return _train(list(specs), True, dataset, perf_cache, measure_perf, on_progress, checkpoints, gate)


def should_batch(specs: list[TrialSpec]) -> bool:
    """Whether to train ``specs`` with :func:`run_trials_batched` rather than one by one.

    Decided by measurement, per (program, number of trials, device kind), in
    :func:`harness.train.batching.decide`: the vmapped chunk of the T trials against T single-trial
    chunks, compile excluded, interleaved, cached in ``$HARNESS_CACHE_DIR/batching.json``; batch
    when it is at least 1.05x faster (why measured: docs/decisions.md).
    Fewer than 2 trials or specs that cannot share a batch: False; large models, and groups whose
    vmap could save less training time than compiling the vmapped chunk to measure it would cost,
    are not measured (False). ``HARNESS_BATCH=on|off`` overrides the measurement (never for
    incompatible specs). The worker and :func:`harness.plan.units.group_units` call it through
    this module (tests replace it here).
    """
    return batching.decide(specs).batch
