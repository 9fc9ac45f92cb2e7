"""What a sweep learns about one trial: :class:`TrialOutcome`, built by one constructor per source.

Every outcome of the harness comes from one of these constructors, so that a trial reads the same
whichever way it was reached:

- :meth:`TrialOutcome.from_result`: a trial trained in this invocation (a :class:`TrialResult`);
- :meth:`TrialOutcome.from_run`: a trial that already has a run in the store (skipped);
- :meth:`TrialOutcome.from_spool`: a trained result kept in the local spool (skipped, spooled);
- :meth:`TrialOutcome.failed` (:func:`failed_unit` for a whole unit): a unit that could not run
  at all (a worker process died, Ray gave up); nothing is in the store for it;
- :meth:`TrialOutcome.deferred_to_other`: another invocation on this machine holds the trial's claim.

Also :func:`run_name` and :func:`config_label`, a trial's readable names, and :func:`task_key` and
:func:`config_key`, how the summary groups trials into tasks and configurations. Standard library
only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from harness.core import names
from harness.core.clock import clock_seconds
from harness.core.conditions import flops_note
from harness.core.finite import finite
from harness.core.selection_rule import LM_MARKER, best_of
from harness.core.spec import TrialResult, TrialSpec


def run_name(spec: TrialSpec) -> str:
    """Readable run name, e.g. ``mlp-adam-cosine-lr0.001-s0``."""
    parts = [spec.model, spec.optimizer, spec.schedule]
    lr = spec.hparams("optimizer").get("step_size")
    if lr is not None:
        parts.append(f"lr{lr:g}" if isinstance(lr, int | float) else f"lr{lr}")
    parts.append(f"s{spec.seed}")
    return "-".join(str(p) for p in parts)


def config_label(spec: TrialSpec, exact: bool = False, task: bool = True) -> str:
    """The trial's configuration without its seed, e.g. ``cosine step_size=0.1 width=64 bs=64``
    (floats to 6 significant digits; ``exact``: every digit, ``step_size=0.1000004``). ``task=False``:
    the optimizer configuration alone, ``cosine step_size=0.1``, without the model's
    hyperparameters and the batch size, which belong to the task (:func:`task_params`): what the
    summary prints in a task's table."""
    bits = [spec.schedule]
    for which in ("optimizer", "schedule", "model") if task else ("optimizer", "schedule"):
        for k, v in spec.hparams(which).items():  # type: ignore[arg-type]
            bits.append(f"{k}={v:g}" if isinstance(v, float) and not exact else f"{k}={v}")
    if task:
        bits.append(f"bs={spec.batch_size}")
    return " ".join(bits)


def task_params(spec: TrialSpec) -> dict[str, str]:
    """The params of ``spec`` that define its task (:func:`harness.core.names.is_task_param`:
    ``model.width``, ``train.batch_size``, ``target.value``, ...), as MLflow stores them (its own
    values, :meth:`TrialSpec.flat_params`, and ``target.mode``; not the builders' defaults)."""
    out = {k: v for k, v in spec.flat_params().items() if names.is_task_param(k)}
    if spec.target is not None:
        out[names.PARAM_TARGET_MODE] = spec.target.mode
    return out


#: Lines JAX appends after the exception line of a traceback it filtered: never the reason.
_JAX_NOTICES = ("For simplicity, JAX has removed its internal frames", "-" * 20)


def reason_line(text: str, limit: int = 500) -> str:
    """The exception line of a traceback ``text``, at most ``limit`` characters (skipping the
    notice JAX appends after a filtered traceback and its dashed separator). A message of several
    lines gives its first two, joined: the last line of JAX's scan error ("Revise the function so
    that all output types match ...") named neither the leaf nor the shapes, its second does. Text
    that is not a traceback (why a trial diverged) gives its last line."""
    lines = [ln for ln in text.strip().splitlines()
             if ln.strip() and not ln.startswith(_JAX_NOTICES)]
    start = None  # where the last exception's message starts: after its last frame
    for i, ln in enumerate(lines):
        if ln.startswith(("Traceback (most recent call last)", "  File ")):
            start = i + 1
    if start is None:
        return (lines or [""])[-1][:limit]
    while start < len(lines) - 1 and lines[start].startswith("    "):  # the frame's source, ^^^ marks
        start += 1
    return " ".join(ln.strip() for ln in lines[start:start + 2])[:limit]



def _or_none(x: Any) -> Any:
    return x if finite(x) else None


@dataclass
class TrialOutcome:
    """Picklable summary of one trial for the progress bar, the summary table and ``status``.

    ``status`` is ``finished``, ``diverged``, ``stopped`` (an early-stopping rule ended it at rung
    ``stopped_step``: done, never selected, counted apart) or ``failed``; ``skipped``
    is true when a FINISHED run already existed (nothing was trained). Metrics are ``None`` where
    absent or non-finite:
    ``final_valid_*`` the last validation evaluation (what selection reads), ``test_*`` the test
    split at the end (what the summary reports for the selected configuration). A run logged
    before the three-split protocol has only ``eval/*``: read back as ``final_valid_*``, with
    ``test_*`` ``None``.
    ``seconds_to_target`` in s, ``examples_per_sec`` in examples/s, ``train_seconds``,
    ``tracking_seconds`` and ``wall_seconds`` in s (training dispatches as the trainer counts them,
    MLflow calls for this trial, and the trial's share of its unit's whole wall-clock).
    """

    trial_id: str
    status: str
    run_id: str | None = None
    run_name: str = ""
    model: str = ""
    optimizer: str = ""
    schedule: str = ""
    dataset: str = ""
    seed: int | None = None
    config: str = ""
    #: The configuration's identity (:func:`harness.core.names.config_id` of the spec's own params,
    #: the report's ``config_id`` rule) and ``config`` with every digit (:func:`config_label`):
    #: ``config`` writes ``step_size=0.1`` for 0.1000001 and 0.1000004, two configurations.
    config_id: str = ""
    config_exact: str = ""
    #: The params that define its task (:func:`task_params`; empty for an outcome built without a
    #: spec): trials that differ in one (a model's width, the batch size) are two tasks, each ranked
    #: apart, as in the report (:func:`task_key`).
    task_params: dict[str, str] = field(default_factory=dict)
    final_valid_accuracy: float | None = None
    final_valid_loss: float | None = None
    #: The best validation evaluation during training (``best/valid_*``; ``None`` on a run logged
    #: before that metric existed): what ``selection: {by: best}`` reads.
    best_valid_accuracy: float | None = None
    best_valid_loss: float | None = None
    test_accuracy: float | None = None
    test_loss: float | None = None
    steps_to_target: int | None = None
    seconds_to_target: float | None = None
    #: steps to target × the program's median step time (:mod:`harness.core.clock`); ``None`` when
    #: not reached, or the step not timed by the harness; ``perf_suspect``: why its figure is flagged
    modeled_seconds_to_target: float | None = None
    #: steps to target × FLOPs per step ÷ peak (:func:`harness.core.clock.cost_seconds`)
    cost_seconds_to_target: float | None = None
    #: the program's per-step figure the modeled clock uses (``perf/modeled_step_ms``)
    modeled_step_ms: float | None = None
    #: its 95% interval from the timed rounds (``perf/modeled_step_ms_lo`` / ``_hi``)
    modeled_step_ms_lo: float | None = None
    modeled_step_ms_hi: float | None = None
    #: the device the figure was timed on (``"cpu:cpu"``; tag ``device_kind``); ``""`` when unknown
    device_kind: str = ""
    perf_suspect: str = ""
    #: its initial parameters already met the target (tag ``convergence.target_at_init``)
    target_at_init: bool = False
    examples_per_sec: float | None = None
    train_seconds: float = 0.0
    tracking_seconds: float = 0.0
    wall_seconds: float = 0.0
    reason: str = ""
    skipped: bool = False
    target_metric: str = names.M_VALID_ACC
    #: Whether the trial had a target at all (``False``: "to target" is not "not reached")
    has_target: bool = True
    #: The target's value (None: no target), what a target claim is tested against
    target_value: float | None = None
    #: The target's claim rules (``TrialSpec.claim`` pairs; ``{}``: none asked):
    #: :mod:`harness.core.claim_rules`
    claim: dict[str, Any] = field(default_factory=dict)
    #: A language model's trial (a sequence task; its run logged ``valid/perplexity``): without a
    #: target it ranks by validation loss (:func:`harness.core.selection_rule.ranking_metric`)
    language_model: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    #: Another invocation on this machine holds the trial's claim (it is training or writing it):
    #: nothing was trained here; the sweep comes back to it once the claim is free.
    deferred: bool = False
    #: The result could not be written to the store and is in the local spool (``harness.spool``).
    spooled: bool = False
    #: Where the trial's seconds went (:mod:`harness.core.budget`'s trial parts, ``part -> s``; empty
    #: for a trial not trained here).
    time_parts: dict[str, float] = field(default_factory=dict)
    #: Early stopping (:mod:`harness.core.rungs`): the rung a ``stopped`` trial ended at, and
    #: ``{rung step: value}`` of every rung a trial with an ``early_stop`` rule reached (the run's
    #: ``harness.rungs`` tag read back): what the searcher ranks.
    stopped_step: int | None = None
    #: the step a ``diverged`` trial stopped at (tag ``diverged_step``): the steps it spent
    diverged_step: int | None = None
    rungs: dict[int, float] = field(default_factory=dict)
    #: An early-stopping search's audit trial (a stopped trial trained to the end, outside the
    #: tuning budget): the stopped twin's trial id (tag ``harness.audit_of``), else ``""``. Never
    #: selected, nor counted as one of its configuration's seeds (:mod:`harness.orchestrate.summary`).
    audit_of: str = ""
    #: Conditions the sweep says in one line each, once per optimizer and task
    #: (:mod:`harness.core.conditions`; a trial trained here only).
    notes: list[str] = field(default_factory=list)

    # -- one constructor per source ------------------------------------------------------------

    @classmethod
    def of_spec(cls, spec: TrialSpec, status: str) -> TrialOutcome:
        """The trial's names and ``status``, no metrics (what every other constructor starts from)."""
        return cls(trial_id=spec.trial_id, status=status, run_name=run_name(spec), model=spec.model,
                   optimizer=spec.optimizer, schedule=spec.schedule, dataset=spec.dataset,
                   seed=spec.seed, config=config_label(spec, task=False),
                   config_exact=config_label(spec, exact=True, task=False), task_params=task_params(spec),
                   config_id=names.config_id(spec.optimizer, spec.schedule, spec.flat_params()),
                   target_metric=spec.target.metric if spec.target else names.M_VALID_ACC,
                   has_target=spec.target is not None,
                   target_value=spec.target.value if spec.target else None, claim=dict(spec.claim))

    @classmethod
    def from_result(cls, res: TrialResult, run_id: str | None = None,
                    tracking_s: float = 0.0) -> TrialOutcome:
        """A trial trained here: its result's metrics (non-finite ones ``None``), ``run_id`` (``None``
        while the result is not in the store), ``tracking_s`` s of MLflow calls for it. ``reason``
        is the last line of a failed trial's traceback (≤ 300 characters) or where it diverged."""
        o = cls.of_spec(res.spec, res.status)
        o.run_id = run_id
        o.language_model = "lm" in res.extra
        o.final_valid_accuracy = _or_none(res.final_valid_accuracy)
        o.final_valid_loss = _or_none(res.final_valid_loss)
        o.best_valid_accuracy = best_of(res.curves.eval_accuracy, True)
        o.best_valid_loss = best_of(res.curves.eval_loss, False)
        o.test_accuracy = _or_none(res.test_accuracy)
        o.test_loss = _or_none(res.test_loss)
        o.steps_to_target = res.steps_to_target
        o.seconds_to_target = res.seconds_to_target
        p = res.perf
        o.perf_suspect = p.suspect if p else ""
        o.target_at_init = bool(res.extra.get("target_at_init"))
        o.modeled_seconds_to_target, o.cost_seconds_to_target = clock_seconds(res.steps_to_target, p)
        o.modeled_step_ms = p.modeled_step_ms if p else None
        o.modeled_step_ms_lo = p.modeled_step_ms_lo if p else None
        o.modeled_step_ms_hi = p.modeled_step_ms_hi if p else None
        o.device_kind = p.device_kind if p else ""
        o.examples_per_sec = _or_none(res.perf.examples_per_sec) if res.perf else None
        o.train_seconds = res.train_seconds
        o.tracking_seconds = tracking_s
        o.time_parts = dict(res.extra.get("time") or {})
        if res.extra.get("flops_mismatch"):
            task = res.spec.workload or f"{res.spec.dataset} · {res.spec.model}"
            o.notes.append(flops_note(res.spec.optimizer, task, res.extra["flops_mismatch"]))
        if res.status == "failed":
            o.reason = reason_line(res.reason, 300)
        elif res.diverged_step is not None:
            o.reason = f"diverged at step {res.diverged_step}"
        elif res.stopped_step is not None:
            o.reason = f"stopped at step {res.stopped_step}: {res.reason}"
        o.stopped_step, o.diverged_step = res.stopped_step, res.diverged_step
        o.rungs = {int(k): float(v) for k, v in (res.rungs or {}).items()}
        return o

    @classmethod
    def from_run(cls, spec: TrialSpec, run: Any) -> TrialOutcome:
        """A trial that already has a FINISHED (or FAILED) MLflow ``run``: its latest metric values
        (legacy ``eval/*`` names read as ``valid/*``, :func:`harness.core.names.canonical_metric`)
        and its ``status`` tag; ``skipped`` (nothing was trained for it here)."""
        m = {k: v for k, v in run.data.metrics.items() if names.canonical_metric(k) == k}
        for k, v in run.data.metrics.items():  # today's name wins over a legacy one
            m.setdefault(names.canonical_metric(k), v)
        status = run.data.tags.get(names.TAG_STATUS) or (
            "finished" if run.info.status == "FINISHED" else "failed")
        o = cls.of_spec(spec, status)
        o.run_id = run.info.run_id
        o.language_model = LM_MARKER in m
        o.final_valid_accuracy = m.get(names.M_VALID_ACC)
        o.final_valid_loss = m.get(names.M_VALID_LOSS)
        o.best_valid_accuracy = m.get(names.M_BEST_ACC)
        o.best_valid_loss = m.get(names.M_BEST_LOSS)
        o.test_accuracy = m.get(names.M_TEST_ACC)
        o.test_loss = m.get(names.M_TEST_LOSS)
        steps = m.get(names.M_STEPS_TO_TARGET)
        o.steps_to_target = int(steps) if steps is not None else None
        o.seconds_to_target = m.get(names.M_SECONDS_TO_TARGET)
        o.modeled_seconds_to_target = m.get(names.M_MODELED_SECONDS_TO_TARGET)
        o.cost_seconds_to_target = m.get(names.M_COST_SECONDS_TO_TARGET)
        o.modeled_step_ms = m.get(names.M_MODELED_STEP_MS)
        o.modeled_step_ms_lo = m.get(names.M_MODELED_STEP_MS_LO)
        o.modeled_step_ms_hi = m.get(names.M_MODELED_STEP_MS_HI)
        o.device_kind = run.data.tags.get("device_kind", "")
        o.perf_suspect = run.data.tags.get(names.TAG_PERF_SUSPECT, "")
        o.target_at_init = run.data.tags.get(names.TAG_TARGET_AT_INIT) == "true"
        o.examples_per_sec = m.get(names.M_EXAMPLES_PER_S)
        tags = run.data.tags
        if tags.get(names.TAG_STOPPED_STEP):
            o.stopped_step = int(tags[names.TAG_STOPPED_STEP])
            o.reason = f"stopped at step {o.stopped_step}: {tags.get(names.TAG_STOP_REASON, '')}"
        if tags.get(names.TAG_DIVERGED_STEP):
            o.diverged_step = int(tags[names.TAG_DIVERGED_STEP])
        if tags.get(names.TAG_RUNGS):
            o.rungs = {int(k): float(v) for k, v in json.loads(tags[names.TAG_RUNGS]).items()}
        o.audit_of = tags.get(names.TAG_AUDIT_OF, "")
        o.skipped = True
        return o

    @classmethod
    def from_spool(cls, entry: dict[str, Any]) -> TrialOutcome:
        """A trained result still in the local spool (``entry["result"]``, a :class:`TrialResult`):
        ``skipped`` (not trained again) and ``spooled``."""
        o = cls.from_result(entry["result"])
        o.skipped = o.spooled = True
        return o

    @classmethod
    def failed(cls, spec: TrialSpec, reason: str) -> TrialOutcome:
        """A trial of a unit that could not run (its worker process died, Ray gave up, the task
        raised): ``failed`` with ``reason`` (≤ 300 characters); nothing is in the store for it, so
        the next invocation of the sweep runs it again."""
        o = cls.of_spec(spec, "failed")
        o.reason = reason[:300]
        return o

    @classmethod
    def deferred_to_other(cls, spec: TrialSpec) -> TrialOutcome:
        """Another invocation on this machine holds the trial's claim: ``deferred``, nothing trained."""
        o = cls.of_spec(spec, "deferred")
        o.deferred = True
        return o


def failed_unit(unit: list[TrialSpec], reason: str) -> list[TrialOutcome]:
    """:meth:`TrialOutcome.failed` for every trial of a unit that could not run."""
    return [TrialOutcome.failed(spec, reason) for spec in unit]


def last_rounds(outcomes: list[TrialOutcome]) -> list[TrialOutcome]:
    """One outcome per seed of one configuration's ``outcomes``: successive halving trains a
    promoted configuration again to each round's rung (another trial id, the same seed), which
    counted as more seeds. A trial that was not stopped wins, else the last (the latest round;
    outcomes in the order they ended), as the report's ``reports.frame.tuning_rows``."""
    by_seed: dict[Any, TrialOutcome] = {}
    for o in outcomes:
        seed = o.seed if o.seed is not None else o.trial_id
        prev = by_seed.get(seed)
        if prev is None or prev.status == "stopped":
            by_seed[seed] = o
    return list(by_seed.values())


def task_key(o: TrialOutcome) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """The task ``o`` trains, as the sweep's summary groups trials: its dataset, model and task
    params (:attr:`TrialOutcome.task_params`, sorted). Two trials are one task where the report
    gives them one ``task`` (model / dataset plus the task params that vary: those that do not are
    equal on every trial)."""
    return (o.dataset, o.model, tuple(sorted(o.task_params.items())))


def config_key(o: TrialOutcome) -> tuple:
    """The configuration ``o`` is one seed of, as the sweep's summary groups trials: its task
    (:func:`task_key`, three items) and optimizer, its ``config_id`` (the report's identity) and its
    exact label. An outcome built without a spec (``config_id`` empty) falls back to its
    ``config``."""
    return (*task_key(o), o.optimizer, o.config_id, o.config_exact or o.config)


def config_labels(outcomes: list[TrialOutcome]) -> dict[tuple, str]:
    """:func:`config_key` → the label the summary prints: ``config``, else (another configuration
    of its task and optimizer has the same ``config``) ``config_exact``, else (that too) with its
    ``config_id`` after it: two configurations never print alike."""
    first: dict[tuple, TrialOutcome] = {}
    for o in outcomes:
        first.setdefault(config_key(o), o)
    out: dict[tuple, str] = {}
    for fmt in (lambda o: o.config, lambda o: o.config_exact or o.config,
                lambda o: f"{o.config_exact or o.config} #{o.config_id}"):
        alike: dict[tuple, int] = {}
        for k, o in first.items():
            alike[(*k[:4], fmt(o))] = alike.get((*k[:4], fmt(o)), 0) + 1
        for k, o in first.items():
            if k not in out and alike[(*k[:4], fmt(o))] == 1:
                out[k] = fmt(o)
    return {k: out.get(k, first[k].config) for k in first}
