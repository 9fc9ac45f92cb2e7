"""The records that flow through a sweep: :class:`TrialSpec` in, :class:`TrialResult` out.

Plain frozen dataclasses with no jax import, so that the CLI, the executors and the reports can use
them cheaply. A trial's identity is :attr:`TrialSpec.trial_id`, a hash of its canonical JSON; it is
stored in MLflow as the tag ``harness.trial_id`` and is what resume keys on.

Metric names (the three-split protocol): periodic evaluation is on the validation split
(``valid/loss``, ``valid/accuracy``, ``valid/<name>``), the test split is evaluated once at the end
(``test/*``); a target's metric is a ``valid/*`` name (``eval/*``, the name before the protocol, is
accepted and means ``valid/*``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.core.freeze import freeze
from harness.core.names import PARAM_DATASET_DIGEST, canonical_metric

Status = Literal["finished", "diverged", "failed", "stopped"]

#: Part of every trial's identity hash (not of :meth:`TrialSpec.to_dict`): trials of the
#: three-split protocol train on a smaller training part and evaluate on validation, so their
#: results differ from those of the same config before it, and so do their ids (a re-run trains
#: them anew rather than skipping them as FINISHED with old two-split numbers).
PROTOCOL = "train/valid/test"


def _thaw(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_thaw(x) for x in v]
    return v


@dataclass(frozen=True)
class Target:
    """A convergence target on the validation split: ``metric`` (``valid/accuracy``,
    ``valid/loss`` or ``valid/<name>``) reaching ``value``. ``eval/*`` is stored as ``valid/*``
    (:func:`canonical_metric`), so both spellings are the same target.

    ``mode`` is ``"max"`` when larger is better (accuracy) and ``"min"`` when smaller is (loss).
    """

    metric: str = "valid/accuracy"
    value: float = 0.9
    mode: Literal["max", "min"] = "max"

    def __post_init__(self) -> None:
        object.__setattr__(self, "metric", canonical_metric(self.metric))

    def reached(self, x: float) -> bool:
        if not math.isfinite(x):
            return False
        return x >= self.value if self.mode == "max" else x <= self.value


@dataclass(frozen=True)
class TrialSpec:
    """Everything that determines one trial's result. Hashable and canonical.

    Hyperparameter mappings are stored as sorted tuples of ``(name, value)`` pairs; use
    :meth:`make` to build one from plain dicts and :meth:`hparams` to read them back.

    Attributes:
      sweep: the sweep's name (the MLflow experiment).
      model, optimizer, schedule, dataset: registry names.
      *_hparams: keyword arguments for the registry builders.
      seed: PRNG seed (int) for init, data order and dropout.
      steps: training budget in optimizer steps.
      batch_size: examples per step.
      eval_every: evaluate on the whole validation split every this many steps (and at the end);
        the test split is evaluated once, at the end.
      steps_per_dispatch: K, the number of steps fused into one ``lax.scan`` dispatch.
      target: convergence target, or ``None``.
      dtype: parameter/compute dtype name (``"float32"``).
      divergence_loss_factor: the trial diverges when a train loss exceeds this multiple of its
        initial (first step's) train loss; ``None``: only a non-finite loss counts. Omitted from
        :meth:`to_dict` (hence from ``trial_id``) at its default, 100.0.
      dtype: compute dtype name (``"float32"``; ``"bfloat16"``/``"float16"`` are mixed precision:
        parameters, optimizer state and loss stay float32).
      augment: in-graph image augmentation hyperparameters (:mod:`harness.augment`; ``()`` = none).
      workload: the :mod:`harness.workloads` name this trial was expanded from (``""`` = none).
      devices: how many of the process's visible devices (:func:`harness.execute.devices.visible_devices`)
        the trial trains on: an int >= 1, or ``"all"`` (resolved when it trains). 1 = one device,
        no mesh.
      shard: what is split over those devices: ``"batch"`` (data-parallel: each step's batch is
        sharded, state replicated) or ``"trials"`` (a vmapped batch of trials is sharded along its
        trial axis). Ignored when ``devices`` resolves to 1.
      optimizer_source: the optimizer entry's ``source`` as written (``"my_opts.py:my_adam"``;
        ``""`` = a registered optimizer), see :mod:`harness.core.source`.
      optimizer_source_hash: the source's digest (:func:`harness.core.source.code_digest`: the code
        the factory depends on, docstrings, comments and formatting left out; or package and
        version): part of ``trial_id``, so changing what the factory runs re-trains.
      optimizer_source_ref: ``(kind, target, function, digest, code)`` of the source, shipped with
        the trial to the worker that trains it (the file's text included); never in
        :meth:`to_dict`, equality or ``trial_id``.
      dataset_digest: the content digest of the data the trial reads (a dataset kind's,
        :mod:`harness.data.kinds`; ``""``, omitted from :meth:`to_dict`, where the name and
        hyperparameters say it all): part of ``trial_id``, so rewritten data re-trains.
      model_source, model_source_hash, model_source_ref: as the ``optimizer_source*`` fields, for
        a model entry's ``source`` (a factory returning a stax pair, a Flax module or a ModelDef:
        :mod:`harness.config.model_sources`); the hash is part of ``trial_id``.
      early_stop: the early-stopping rule of a trial an adaptive search may stop at its rungs
        (:mod:`harness.core.rungs`: method, eta, bracket, rungs, metric, mode, value), as sorted
        ``(name, value)`` pairs; ``()`` (the default, omitted from :meth:`to_dict`) for a trial that
        trains its whole budget. Part of ``trial_id``: a stopped trial is never confused with a
        full-budget trial of the same configuration. Such a trial never shares a vmapped unit
        (:meth:`batch_key` is its own): a stopped member would save no compute.

      recipe: the update step's recipe keys (:mod:`harness.train.recipe`): ``grad_clip`` (global
        norm), ``grad_accum`` (micro-batches per update), ``param_groups`` and ``loss_reduction``
        (``sum`` only), as sorted pairs; ``()`` (the default, omitted from :meth:`to_dict`): none.
      claim: the target's claim rules (:mod:`harness.core.claim_rules`: ``margin``, ``single_run``)
        as sorted pairs, logged as ``claim.*`` params; never in ``trial_id`` (``()``, the default,
        omitted from :meth:`to_dict`): they judge results, they change none.

    ``augment`` and ``workload`` are left out of :meth:`to_dict` (hence of ``trial_id``) at their
    defaults, so trials from before them keep their ids. ``devices`` and ``shard`` are in
    :meth:`to_dict` when not at their defaults (so ``trial.json`` records them) but **never in
    ``trial_id``**: a trial's curves on D devices equal its one-device curves to float32 rounding
    (tested), so re-running a sweep on more devices skips trials already FINISHED instead of
    training them again. They are in :meth:`perf_key` (throughput does depend on them) and in
    :meth:`batch_key`.
    """

    sweep: str
    model: str
    optimizer: str
    schedule: str
    dataset: str
    seed: int
    steps: int
    batch_size: int
    eval_every: int
    steps_per_dispatch: int = 50
    model_hparams: tuple[tuple[str, Any], ...] = ()
    optimizer_hparams: tuple[tuple[str, Any], ...] = ()
    schedule_hparams: tuple[tuple[str, Any], ...] = ()
    dataset_hparams: tuple[tuple[str, Any], ...] = ()
    target: Target | None = None
    dtype: str = "float32"
    augment: tuple[tuple[str, Any], ...] = ()
    workload: str = ""
    divergence_loss_factor: float | None = 100.0
    devices: int | str = 1
    shard: Literal["batch", "trials"] = "batch"
    optimizer_source: str = ""
    optimizer_source_hash: str = ""
    early_stop: tuple[tuple[str, Any], ...] = ()
    dataset_digest: str = ""
    model_source: str = ""
    model_source_hash: str = ""
    recipe: tuple[tuple[str, Any], ...] = ()
    claim: tuple[tuple[str, Any], ...] = ()
    optimizer_source_ref: tuple = field(default=(), compare=False, repr=False)
    model_source_ref: tuple = field(default=(), compare=False, repr=False)

    @classmethod
    def make(cls, **kw: Any) -> TrialSpec:
        """Build from plain dicts for the ``*_hparams`` fields (and a dict for ``target``)."""
        for k in ("model_hparams", "optimizer_hparams", "schedule_hparams", "dataset_hparams",
                  "augment", "early_stop", "recipe", "claim"):
            if k in kw:
                kw[k] = freeze(kw[k])
        if isinstance(kw.get("target"), Mapping):
            kw["target"] = Target(**kw["target"])
        return cls(**kw)

    def hparams(self, which: Literal["model", "optimizer", "schedule", "dataset"]) -> dict[str, Any]:
        """The hyperparameters of one component as a plain dict."""
        return {k: _thaw(v) for k, v in getattr(self, f"{which}_hparams")}

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON-able dict (hyperparameters as dicts)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
             if f.name not in NOT_IN_DICT}
        for k in ("model", "optimizer", "schedule", "dataset"):
            d[f"{k}_hparams"] = self.hparams(k)  # type: ignore[arg-type]
        d["target"] = dataclasses.asdict(self.target) if self.target else None
        d["augment"] = {k: _thaw(v) for k, v in self.augment}
        d["early_stop"] = {k: _thaw(v) for k, v in self.early_stop}
        d["recipe"] = {k: _thaw(v) for k, v in self.recipe}
        d["claim"] = {k: _thaw(v) for k, v in self.claim}
        for k, default in _OMIT_AT_DEFAULT.items():
            if d[k] == default:
                del d[k]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrialSpec:
        return cls.make(**dict(d))

    @functools.cached_property
    def trial_id(self) -> str:
        """16 hex digits of the SHA-256 of the canonical JSON (sorted keys) of :meth:`to_dict`
        without the :data:`NOT_IN_IDENTITY` fields (``devices``, ``shard``, ``claim``), with ``target`` as
        ``None`` (:meth:`target_in_identity`), plus ``{"protocol": PROTOCOL}``. Computed once per
        spec (a frozen dataclass): planning asks for each id many times.

        The target is read from the stored validation curve when results are read (``report
        --target``), so moving it trains nothing: a trial without a target and the same trial with
        one share an id. What the target changes in training stays in the id: an early-stopping
        rule carries its own metric and value (``early_stop``), and an AlgoPerf submission, which
        can read the target while it trains, keeps it (:meth:`target_in_identity`)."""
        return self._id_hash(with_target=self.target_in_identity)

    @functools.cached_property
    def legacy_trial_id(self) -> str:
        """The id this trial had when every target was part of the identity (stores written
        before the target left it): resume accepts a FINISHED run under either id. Equals
        :attr:`trial_id` for a trial without a target or one whose target stays in it."""
        return self._id_hash(with_target=True)

    @property
    def target_in_identity(self) -> bool:
        """Whether the target is part of :attr:`trial_id`: only for an AlgoPerf submission (its
        ``update_params`` sees ``validation_goal_reached`` and the workload's target value, so
        the target may change what it trains)."""
        return self.optimizer_api == "algoperf"

    def _id_hash(self, *, with_target: bool) -> str:
        d = {k: v for k, v in self.to_dict().items() if k not in NOT_IN_IDENTITY}
        if not with_target:
            d["target"] = None
        blob = json.dumps({**d, "protocol": PROTOCOL}, sort_keys=True,
                          separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def schedule_steps(self) -> int:
        """The steps the schedule spans (its ``total_steps``): ``steps``, or a smoke run's full budget
        (the recipe's ``schedule_steps``, :mod:`harness.orchestrate.smoke`)."""
        return int(dict(self.recipe).get("schedule_steps", self.steps))

    @property
    def optimizer_api(self) -> str:
        """``"algoperf"`` for an AlgoPerf submission (its own per-step loop), else ``"triple"``."""
        return "algoperf" if self.optimizer_source.startswith("algoperf:") else "triple"

    def flat_params(self) -> dict[str, str]:
        """MLflow params, flattened with dots: ``optimizer.step_size``, ``model.width``, ``train.steps``."""
        out: dict[str, str] = {}
        for k in ("model", "optimizer", "schedule", "dataset"):
            out[k] = getattr(self, k)
            for name, v in self.hparams(k).items():  # type: ignore[arg-type]
                out[f"{k}.{name}"] = str(v)
        for k in ("seed", "steps", "batch_size", "eval_every", "steps_per_dispatch", "dtype"):
            out[f"train.{k}"] = str(getattr(self, k))
        out["train.divergence_loss_factor"] = str(self.divergence_loss_factor)
        for name, v in self.augment:
            out[f"augment.{name}"] = str(v)
        for name, v in self.recipe:
            out[f"train.{name}"] = str(v)
        if self.workload:
            out["workload"] = self.workload
        if self.optimizer_source:
            out["optimizer.source"] = self.optimizer_source
        if self.dataset_digest:
            out[PARAM_DATASET_DIGEST] = self.dataset_digest
        if self.model_source:
            out["model.source"] = self.model_source
        if self.devices != 1:
            out["parallelism.devices"] = str(self.devices)
            out["parallelism.shard"] = self.shard
        if self.target:
            out["target.metric"] = self.target.metric
            out["target.value"] = str(self.target.value)
        for name, v in self.claim:
            out[f"claim.{name}"] = str(v)
        return out

    def batch_key(self) -> tuple:
        """Trials with equal keys differ only in seed and/or ``optimizer.step_size``: they may be
        trained together under ``jax.vmap``."""
        opt = tuple((k, v) for k, v in self.optimizer_hparams if k != "step_size")
        alone = (("early_stop", self.trial_id),) if self.early_stop else ()  # never vmapped
        return (
            self.sweep, self.model, self.model_hparams, self.optimizer, opt, self.schedule,
            self.schedule_hparams, self.dataset, self.dataset_hparams, self.steps, self.batch_size,
            self.eval_every, self.steps_per_dispatch, self.target, self.dtype, self.augment,
            self.workload, self.devices, self.shard, self.optimizer_source, self.optimizer_source_hash,
            self.dataset_digest, self.model_source_hash, self.recipe, *alone,
        )

    def perf_key(self) -> tuple:
        """Throughput is measured once per (model, optimizer, batch shape, dtype) on a device: the
        values of the optimizer's float hyperparameters (step size, betas, weight decay, ...) do
        not change the cost of a step, so a search over them measures each optimizer once; its
        int/bool/str hyperparameters (which may change the computation) stay in the key. So do
        ``devices`` and ``shard`` (the trainer's perf cache key adds the resolved device count,
        since ``"all"`` depends on the process)."""
        opt = tuple((k, v) for k, v in self.optimizer_hparams
                    if k != "step_size" and not isinstance(v, float))
        return (self.model, self.model_hparams, self.optimizer, opt, self.dataset,
                self.dataset_hparams, self.batch_size, self.dtype, self.augment, self.devices,
                self.shard) + ((self.optimizer_source_hash,) if self.optimizer_source_hash else ()) \
            + ((self.model_source_hash,) if self.model_source_hash else ()) \
            + ((self.recipe,) if self.recipe else ())


#: TrialSpec fields left out of ``to_dict`` (and ``trial_id``) when they equal these defaults.
_OMIT_AT_DEFAULT: dict[str, Any] = {"augment": {}, "workload": "", "divergence_loss_factor": 100.0,
                                     "devices": 1, "shard": "batch", "optimizer_source": "",
                                     "optimizer_source_hash": "", "early_stop": {}, "model_source": "",
                                     "model_source_hash": "", "dataset_digest": "",
                                     "recipe": {}, "claim": {}}
#: TrialSpec fields never in ``to_dict`` (the shipped source text: the hash stands for it).
NOT_IN_DICT = ("optimizer_source_ref", "model_source_ref")
#: TrialSpec fields never part of ``trial_id`` (see the class docstring: results equal to float32
#: rounding whatever their value, so a change of them must not re-train finished trials).
NOT_IN_IDENTITY = ("devices", "shard", "claim")


@dataclass
class Curves:
    """Per-trial curves. Train rows are one per step (loss is the mean over the step's batch);
    eval rows one per evaluation **of the validation split** (logged as ``valid/loss``,
    ``valid/accuracy`` and ``valid/<name>`` for each ``eval_metrics`` name). ``wall_s`` is seconds
    since training started (compile excluded). Non-finite values are kept here as ``nan``; the
    tracker never logs them as metrics."""

    train_step: list[int] = field(default_factory=list)
    train_wall_s: list[float] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    eval_step: list[int] = field(default_factory=list)
    eval_wall_s: list[float] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    eval_accuracy: list[float] = field(default_factory=list)
    #: The model's other metrics at the eval rows, ``{name: [value per eval row]}``.
    eval_metrics: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class PerfResult:
    """Throughput of one compiled training step (see :mod:`harness.timing` for the method).

    Units: seconds for ``compile_s``, milliseconds for step times, examples/s, FLOPs per step,
    FLOP/s for ``peak_flops``; ``utilization`` is a fraction in [0, 1] (achieved / measured peak).
    ``None`` where a quantity cannot be measured (e.g. XLA's cost analysis returned nothing).

    On a mesh of ``num_devices`` devices every figure is for the **whole mesh**: ``examples_per_sec``
    is the total (``examples_per_sec_per_device`` = total / devices), ``flops_per_step`` the FLOPs
    all devices execute per step, ``peak_flops`` the measured one-device peak × devices, so
    ``utilization`` is the mesh's achieved fraction of its combined peak.
    """

    compile_s: float
    step_time_ms: float  # median
    step_time_ms_p10: float
    step_time_ms_p90: float
    examples_per_sec: float
    flops_per_step: float | None = None
    flops_per_step_analytic: float | None = None
    peak_flops: float | None = None
    utilization: float | None = None
    timed_steps: int = 0
    warmup_steps: int = 0
    device_kind: str = ""
    #: the compute dtype the step ran in; ``peak_flops`` is the measured peak of that dtype
    dtype: str = "float32"
    #: devices the timed step ran on (its mesh size); 1 for a one-device step
    num_devices: int = 1
    #: ``examples_per_sec / num_devices``
    examples_per_sec_per_device: float | None = None
    #: the mesh, ``"AXIS=SIZE"`` (``"batch=4"``, ``"trials=4"``); ``""`` for a one-device step
    mesh: str = ""
    #: IQR / median of the timed calls (:func:`harness.train.timing.relative_spread`)
    spread: float | None = None
    #: measured again because the first figure disagreed with the trial's training clock
    remeasured: bool = False
    #: a trial carries this figure already (checked against its clock): every later trial of the
    #: program gets the same figure, never a re-measured one (:mod:`harness.train.perf`)
    checked: bool = False
    #: why this step time is flagged (it disagreed > 2x with the trial's own training clock and was
    #: measured again, interleaved with its task's programs; logged as the tag ``perf.suspect``; the
    #: trial still ranks on ``modeled_step_ms``, see :mod:`harness.core.clock`); ``""`` when not
    suspect: str = ""
    #: median CPU milliseconds per step over the timed blocks, summed over the threads doing the
    #: step's work (the process's CPU less its other Python threads':
    #: :func:`harness.train.timing.work_cpu_s`); ``None`` when not measured
    step_cpu_ms: float | None = None
    #: the per-step milliseconds the modeled clock multiplies by steps to target: ``step_cpu_ms`` on a
    #: CPU device, ``step_time_ms`` on an accelerator (:func:`harness.train.timing.perf_result`);
    #: after a re-measure, the re-measured figure in the interleaved stage's frame
    #: (:mod:`harness.train.perf`); ``None`` when the step was not timed by the harness
    modeled_step_ms: float | None = None
    #: the 95% interval of ``modeled_step_ms`` from its timed rounds (ms; ``None``: not measured)
    modeled_step_ms_lo: float | None = None
    modeled_step_ms_hi: float | None = None


@dataclass
class TrialResult:
    """What training one trial produced.

    ``status`` is ``finished`` (trained to budget), ``diverged`` (a non-finite loss stopped it at
    ``diverged_step``), ``stopped`` (an early-stopping rule ended it at rung ``stopped_step``;
    ``reason`` says why) or ``failed`` (an exception; ``reason`` holds the traceback text).
    ``rungs`` is ``{rung step: value}`` of a trial with an ``early_stop`` rule (the rungs it reached).
    ``steps_to_target``/``seconds_to_target`` are ``None`` when the target was not reached (both
    on validation). ``final_valid_*`` are the last validation evaluation; ``test_*`` the one
    evaluation of the test split after the last step (``None`` for a diverged or failed trial);
    ``test_metrics`` holds the model's other metrics on test, ``{name: value}``.
    """

    spec: TrialSpec
    status: Status
    curves: Curves = field(default_factory=Curves)
    perf: PerfResult | None = None
    reason: str = ""
    diverged_step: int | None = None
    stopped_step: int | None = None
    rungs: dict[int, float] = field(default_factory=dict)
    steps_to_target: int | None = None
    seconds_to_target: float | None = None
    final_valid_loss: float | None = None
    final_valid_accuracy: float | None = None
    test_loss: float | None = None
    test_accuracy: float | None = None
    test_metrics: dict[str, float] = field(default_factory=dict)
    train_seconds: float = 0.0
    compile_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
