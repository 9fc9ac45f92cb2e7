"""Every name the harness writes to MLflow and ``reports`` reads back: tags, params, metrics, artifacts.

One home for each name, so that a logged metric is added in one place and read back under the same
spelling. Runs logged before the three-split protocol (train / validation / test) hold ``eval/*``
metrics and ``final/eval_*`` summaries; :func:`canonical_metric` and :data:`LEGACY_METRICS` are the one
rule that reads them as ``valid/*``. Standard library only.
"""

from __future__ import annotations

# -- tags of every run the harness creates ----------------------------------------------------------
TAG_TRIAL_ID = "harness.trial_id"
TAG_SWEEP = "harness.sweep"
TAG_SWEEP_ID = "harness.sweep_id"
TAG_KIND = "harness.kind"  # "parent" or "trial"
KIND_PARENT = "parent"
KIND_TRIAL = "trial"
TAG_PARENT_RUN = "mlflow.parentRunId"
TAG_OWNER = "harness.owner"  # "host:pid" of the process that created the run
TAG_OWNER_START = "harness.owner_start"  # "<boot id>:<start time in clock ticks>" (pid reuse)
TAG_HEARTBEAT = "harness.heartbeat"  # epoch seconds of the owner's last sign of life (parent runs)
TAG_KILLED_REASON = "harness.killed_reason"
TAG_DUPLICATE_OF = "harness.duplicate_of"
TAG_SPOOLED = "harness.spooled"
TAG_RESUMED_FROM_STEP = "harness.resumed_from_step"
#: The search methods of a run's trials, comma-joined (a parent's: every cell's).
TAG_SEARCH = "harness.search"
#: The values of :data:`TAG_SEARCH` that are a fixed plan: every trial is known before any trains
#: (:mod:`harness.config.search`; any other method is adaptive).
FIXED_METHODS = ("quasirandom", "random", "grid")


def is_adaptive_search(methods: str | None) -> bool:
    """Whether a run's :data:`TAG_SEARCH` value (methods, comma-joined) names an adaptive method:
    one not in :data:`FIXED_METHODS` (its trials are proposed as results arrive)."""
    return bool(set(filter(None, (methods or "").split(","))) - set(FIXED_METHODS))
TAG_SEARCH_INDEX = "harness.search_index"
#: A sweep parent run's selection objective (``selection: {by: ...}``, one of
#: :data:`harness.core.selection_rule.SELECT_BY`); the report reads the latest parent's.
TAG_SELECT_BY = "harness.select_by"
#: A sweep parent run's tuned time-to-result rule (``scoring:``, one of :data:`SCORING_RULES`) and
#: the clock time to target ranks on (``time:``, one of :data:`harness.core.clock.CLOCKS`): tags,
#: like :data:`TAG_SELECT_BY`, which a re-run that trains nothing updates; the report reads the
#: latest parent's (:func:`reports.frame.sweep_settings`).
TAG_SCORING = "harness.scoring"
TAG_TIME = "harness.time"
#: A sampled trial's search ranges, JSON (:func:`harness.core.boundary.space_tag`).
TAG_SEARCH_SPACE = "harness.search_space"
#: A trial of an optimizer entry with ``tuning: none`` (AlgoPerf's self-tuning track: the optimizer
#: runs one configuration, its defaults): :data:`TUNING_NONE`, or :data:`TUNING_NONE_AND_TUNED` when
#: an entry that tunes yields the same trial too. Absent on every other trial; not in the trial id.
TAG_TUNING = "harness.tuning"
TUNING_NONE = "none"
TUNING_NONE_AND_TUNED = "none,tuned"
TAG_MESH = "harness.mesh"
TAG_DEVICES = "harness.devices"
TAG_DEVICE_ENV = "harness.device_env"
TAG_DEVICE_ENV_SET = "harness.device_env_set"
#: ``host:pid`` of the process that trained the trial (a ``--jobs`` worker, a Ray worker; the run's
#: ``harness.owner`` is the process that wrote it, the sweep's own under ``--jobs``).
TAG_TRAINED_BY = "harness.trained_by"
TAG_BATCHING = "harness.batching"
#: The trial ids (sorted, comma-separated) of the vmapped batch a trial was trained in; absent for a
#: trial trained alone. ``reproduce`` trains the same batch again (:mod:`harness.orchestrate.reproduce`).
TAG_BATCH = "harness.batch"
PARAM_SCORING = "scoring"  # also a param (the MLflow UI's table); sweeps from before TAG_SCORING have only it
SCORING_RULES = ("harness", "algoperf")  # reports.protocol: the harness's own (the default), AlgoPerf's
TAG_REASON = "harness.reason"
TAG_STATUS_REASON = "status_reason"  # the whole reason (failed: traceback); harness.reason: its last line
TAG_DIVERGED_STEP = "diverged_step"  # the step at which a diverged trial stopped
#: Early stopping (:mod:`harness.core.rungs`): the rung step at which a stopped trial
#: ended, why, its rung values as JSON ``{"step": value}``, and the stopped twin an ``audit`` trial
#: (the same configuration trained to the end) checks; the bracket and the peer group of a trial.
TAG_STOPPED_STEP = "harness.stopped_at_step"
TAG_STOP_REASON = "harness.stop_reason"
TAG_RUNGS = "harness.rungs"
TAG_AUDIT_OF = "harness.audit_of"
TAG_BRACKET = "harness.bracket"
TAG_RUNG_GROUP = "harness.rung_group"
# -- tags of a trial run: what it trained -----------------------------------------------------------
TAG_STATUS = "status"  # "finished" / "diverged" / "stopped" / "failed"
TAG_MODEL = "model"
TAG_OPTIMIZER = "optimizer"
TAG_SCHEDULE = "schedule"
TAG_DATASET = "dataset"
TAG_SEED = "seed"
TAG_WORKLOAD = "workload"
#: A user's optimizer (``source:``): the source as written, its digest (in the trial id: the code
#: the factory depends on, :func:`harness.core.source.code_digest`), the whole file's SHA-256
#: (provenance: the exact text that ran; file sources only), how the trainer ran it (``factory``: a
#: builder's optimizer in the compiled loop; ``algoperf``: a submission's own per-step loop) and
#: whether it evaluated at ``eval_params`` (``true``).
TAG_OPTIMIZER_SOURCE = "optimizer.source"
TAG_OPTIMIZER_SOURCE_HASH = "optimizer.source_hash"
TAG_OPTIMIZER_SOURCE_FILE_HASH = "optimizer.source_file_hash"
TAG_OPTIMIZER_API = "optimizer.api"
TAG_MODEL_SOURCE = "model.source"
TAG_MODEL_SOURCE_HASH = "model.source_hash"
TAG_MODEL_SOURCE_FILE_HASH = "model.source_file_hash"
TAG_EVAL_PARAMS = "optimizer.eval_params"
#: An AlgoPerf submission's trial: the batch size it trained with, and who decided it
#: (``submission``: its get_batch_size knew the workload; ``workload``: the config's batch_size).
TAG_ALGOPERF_BATCH_SIZE = "algoperf.batch_size"
TAG_ALGOPERF_BATCH_SIZE_SOURCE = "algoperf.batch_size_source"
TAG_ALGOPERF_WORKLOAD = "algoperf.workload_name"
#: Provenance: the git commit (``+dirty``) of the checkout the running harness is
#: imported from (``unknown``: not a git checkout) and of the folder holding the sweep's config
#: (``+untracked``: the config is not in it). Runs from before them hold ``git_commit``: the working
#: directory's commit.
TAG_HARNESS_COMMIT = "harness_commit"
TAG_CONFIG_COMMIT = "config_commit"
#: The threads of XLA's CPU intra-op pool the trial computed on (:mod:`harness.core.xla_threads`):
#: ``1`` by default; it changes CPU step times and can change a reduction's bits. Absent on an
#: accelerator and on runs from before it.
TAG_XLA_CPU_THREADS = "xla_cpu_threads"
#: Environment tags (any may be absent on old runs).
ENV_TAGS = ("jax_version", "jaxlib_version", "harness_version", "device_kind", TAG_HARNESS_COMMIT,
            TAG_CONFIG_COMMIT, "git_commit", TAG_XLA_CPU_THREADS)

# -- params -----------------------------------------------------------------------------------------
PARAM_STEP_SIZE = "optimizer.step_size"
PARAM_DATASET_DIGEST = "dataset.digest"  # a dataset kind's content digest (TrialSpec.dataset_digest)
PARAM_BATCH_SIZE = "train.batch_size"
PARAM_STEPS = "train.steps"
PARAM_SEED = "train.seed"
PARAM_STEPS_PER_DISPATCH = "train.steps_per_dispatch"
PARAM_TARGET_METRIC = "target.metric"
PARAM_TARGET_VALUE = "target.value"
PARAM_TARGET_MODE = "target.mode"  # optional; inferred from the metric's name when absent
#: Param prefixes that define an optimizer configuration, and the names under them that do not (they
#: vary across the seeds and the packing of one configuration).
CONFIG_PARAM_PREFIXES = ("optimizer.", "schedule.")
NON_CONFIG_PARAMS = (PARAM_SEED, PARAM_STEPS_PER_DISPATCH)


def is_config_param(name: str) -> bool:
    """Whether the param ``name`` (``optimizer.step_size``) defines the optimizer configuration."""
    return name.startswith(CONFIG_PARAM_PREFIXES) and name not in NON_CONFIG_PARAMS


#: Param prefixes that define the task a trial trains (its model's, dataset's, training's and
#: target's params: ``model.width``, ``train.batch_size``), less :data:`NON_CONFIG_PARAMS` (the seed
#: and the packing vary within one task). The one rule of what a task is: the report's ``task``
#: (:func:`reports.labels.add_labels`) and the sweep summary's (:mod:`harness.orchestrate.tasks`) are both
#: the model and dataset plus the task params that vary in the sweep.
TASK_PARAM_PREFIXES = ("model.", "dataset.", "train.", "target.")


def is_task_param(name: str) -> bool:
    """Whether the param ``name`` (``model.width``; no ``params.`` prefix) defines the task."""
    return name.startswith(TASK_PARAM_PREFIXES) and name not in NON_CONFIG_PARAMS


def with_params(head: str, bits: list[str]) -> str:
    """A label: ``head`` and the ``name=value`` bits that tell it apart, ``mlp / digits (width=16)``
    (``head`` alone without bits); the report's ``task`` and ``config`` and the summary's task
    titles are written so."""
    return f"{head} ({', '.join(bits)})" if bits else head


def config_id(optimizer: str, schedule: str, params: dict[str, str]) -> str:
    """A configuration's identity: 12 hex digits of the SHA-256 of its optimizer, schedule and
    configuration params (:func:`is_config_param`; values as MLflow stores them, ``str`` of each,
    so exact: ``0.1000001`` and ``0.1000004`` are two). The report's ``config_id`` (over a run's
    params) and the sweep summary's grouping (over a trial's own) both come from here."""
    import hashlib

    key = "|".join([optimizer, str(schedule)] + [f"{n}={params[n]}" for n in sorted(params)
                                                 if is_config_param(n) and params[n] is not None])
    return hashlib.sha256(key.encode()).hexdigest()[:12]

# -- metrics ----------------------------------------------------------------------------------------
M_TRAIN_LOSS = "train/loss"
#: The fraction of a trial's updates whose gradient ``grad_clip`` clipped (logged at its last step).
M_CLIPPED_FRACTION = "train/clipped_fraction"
M_VALID_LOSS = "valid/loss"
M_VALID_ACC = "valid/accuracy"
M_WALL_S = "time/wall_s"
M_TEST_LOSS = "test/loss"
M_TEST_ACC = "test/accuracy"
M_FINAL_LOSS = "final/valid_loss"
M_FINAL_ACC = "final/valid_accuracy"
M_FINAL_GAP = "final/valid_nats_above_entropy"
#: The best validation value of the trial's evaluations (accuracy: the highest, loss: the lowest),
#: what ``selection: {by: best}`` reads (:func:`harness.core.selection_rule.best_of`).
M_BEST_LOSS = "best/valid_loss"
M_BEST_ACC = "best/valid_accuracy"
M_STEP_MS = "perf/step_time_ms"
M_STEP_MS_P10 = "perf/step_time_ms_p10"
M_STEP_MS_P90 = "perf/step_time_ms_p90"
M_EXAMPLES_PER_S = "perf/examples_per_sec"
M_EXAMPLES_PER_S_PER_DEVICE = "perf/examples_per_sec_per_device"
M_NUM_DEVICES = "perf/num_devices"
M_COMPILE_S = "perf/compile_s"
#: Seconds the trial's own programs took to compile (or to load from the persistent cache):
#: training chunks, evaluation, evaluation parameters (its share of its batch's: the batch's seconds
#: divided by its number of trials; on the parent run, the sweep's sum).
M_TIME_COMPILE_S = "time/compile_s"
#: Where a sweep's wall-clock went (:mod:`harness.core.budget`), one metric per part,
#: logged once on the parent run and on each trial's run (the trial's share of its unit; the sweep-level
#: parts ``startup``, ``preflight`` and ``batching`` only on the parent). ``time/compile_s`` is one of
#: them: the trial's share of its batch's compile (or load) seconds.
TIME_PARTS = ("startup", "preflight", "compile", "train", "eval", "throughput", "batching", "tracking",
              "other")
M_TIME_STARTUP_S = "time/startup_s"
M_TIME_PREFLIGHT_S = "time/preflight_s"
M_TIME_TRAIN_S = "time/train_s"
M_TIME_EVAL_S = "time/eval_s"
M_TIME_THROUGHPUT_S = "time/throughput_s"
M_TIME_BATCHING_S = "time/batching_s"
M_TIME_TRACKING_S = "time/tracking_s"
M_TIME_OTHER_S = "time/other_s"
#: Programs of the trial's batch loaded from the persistent compilation cache / compiled because
#: it had no entry (:mod:`harness.train.compile_cache`).
M_CACHE_HITS = "compile/cache_hits"
M_CACHE_MISSES = "compile/cache_misses"
M_FLOPS = "perf/flops_per_step"
M_UTIL = "perf/utilization"
#: Model-FLOPs utilisation as MaxText counts it: the model's analytic FLOPs per step (a zoo model's
#: ``flops_per_example`` × 3 × batch; ``gpt``'s is 6N + causal attention at half) / (median step
#: time × the measured peak). ``perf/utilization`` divides XLA's count (work executed) instead.
M_MFU = "perf/mfu"
#: ``part -> metric`` of :data:`TIME_PARTS` (the one map from a part to its metric's name).
M_TIME = {"startup": M_TIME_STARTUP_S, "preflight": M_TIME_PREFLIGHT_S, "compile": M_TIME_COMPILE_S,
          "train": M_TIME_TRAIN_S, "eval": M_TIME_EVAL_S, "throughput": M_TIME_THROUGHPUT_S,
          "batching": M_TIME_BATCHING_S, "tracking": M_TIME_TRACKING_S, "other": M_TIME_OTHER_S}
#: The parent run's sweep wall-clock the parts add up to (seconds).
M_SWEEP_WALL_S = "sweep/wall_s"
M_STEPS_TO_TARGET = "convergence/steps_to_target"
M_SECONDS_TO_TARGET = "convergence/seconds_to_target"
#: steps_to_target × perf/modeled_step_ms / 1000 (:func:`harness.core.clock.modeled_seconds`); absent
#: when the step was not timed by the harness (an AlgoPerf submission's own jit).
M_MODELED_SECONDS_TO_TARGET = "convergence/modeled_seconds_to_target"
#: steps_to_target × the program's FLOPs per step (XLA's count, else the model's analytic one) / the
#: device's peak FLOP/s
#: (:func:`harness.core.clock.cost_seconds`): the deterministic clock of a task the modeled clock
#: cannot cover.
M_COST_SECONDS_TO_TARGET = "convergence/cost_seconds_to_target"
#: Median CPU milliseconds per step over the timed blocks (:mod:`harness.train.timing`, item 7).
M_STEP_CPU_MS = "perf/step_cpu_ms"
#: The per-step milliseconds the modeled clock multiplies by steps: CPU time on a CPU device,
#: device wall-clock on an accelerator; re-measured beside the task's programs when flagged.
M_MODELED_STEP_MS = "perf/modeled_step_ms"
#: The 95% interval of that figure from its timed rounds (:func:`harness.train.timing.round_figures`):
#: the rank rule separates two programs only when their time difference holds over it.
M_MODELED_STEP_MS_LO = "perf/modeled_step_ms_lo"
M_MODELED_STEP_MS_HI = "perf/modeled_step_ms_hi"
#: IQR / median of the timed calls behind perf/step_time_ms (:mod:`harness.train.timing`).
M_STEP_SPREAD = "perf/step_time_spread"

#: Metrics logged with a step: a report reads them in full with their history.
CURVE_METRICS = (M_TRAIN_LOSS, M_VALID_LOSS, M_VALID_ACC, M_WALL_S)
#: Single-valued metrics: a report puts their latest value into the trial's summary row. A new
#: metric that a report should show is named above and listed here (and logged by
#: :mod:`harness.tracking.trial_run`).
SUMMARY_METRICS = (
    M_STEP_MS, M_STEP_MS_P10, M_STEP_MS_P90, M_EXAMPLES_PER_S, M_COMPILE_S, M_FLOPS, M_UTIL, M_MFU,
    M_EXAMPLES_PER_S_PER_DEVICE, M_NUM_DEVICES, M_STEPS_TO_TARGET, M_SECONDS_TO_TARGET,
    M_FINAL_LOSS, M_FINAL_ACC, M_TEST_LOSS, M_TEST_ACC, M_FINAL_GAP, M_CACHE_HITS,
    M_CACHE_MISSES, M_BEST_LOSS, M_BEST_ACC, *M_TIME.values(), M_MODELED_SECONDS_TO_TARGET, M_STEP_SPREAD,
    M_COST_SECONDS_TO_TARGET, M_STEP_CPU_MS, M_MODELED_STEP_MS, M_MODELED_STEP_MS_LO, M_MODELED_STEP_MS_HI,
)



def is_curve_metric(name: str) -> bool:
    """Whether ``name`` is logged at several steps of a trial (a curve to chart against the step):
    :data:`CURVE_METRICS` and every ``valid/<name>``; every other metric holds one value per trial."""
    return name in CURVE_METRICS or name.startswith(PREFIX_VALID)


#: Metric names of runs logged before the three-split protocol → today's name.
LEGACY_METRICS = {
    "eval/loss": M_VALID_LOSS,
    "eval/accuracy": M_VALID_ACC,
    "final/eval_loss": M_FINAL_LOSS,
    "final/eval_accuracy": M_FINAL_ACC,
}

# -- artifacts ----------------------------------------------------------------------------------------
ARTIFACT_CONFIG = "config.yaml"
ARTIFACT_TRIALS = "trials.json"  # the parent run's list of the sweep's trials ({"trial_id": ...})
ARTIFACT_SEARCH = "search.json"  # an adaptive sweep's parent run: each cell's search
ARTIFACT_TRIAL = "trial.json"
ARTIFACT_CURVES = "curves.csv"
ARTIFACT_TRACEBACK = "traceback.txt"
ARTIFACT_SOURCE_DIR = "source"  # a user optimizer's file (source: PATH.py:FUNCTION, algoperf:PATH.py)


def canonical_metric(name: str) -> str:
    """The current name of a metric: ``eval/x`` → ``valid/x``, ``final/eval_x`` → ``final/valid_x``.

    The one rule for the names of before the three-split protocol; every other name is returned
    unchanged. Example: ``canonical_metric("eval/accuracy") == "valid/accuracy"``.
    """
    if name in LEGACY_METRICS:
        return LEGACY_METRICS[name]
    if name.startswith("eval/"):
        return "valid/" + name[len("eval/"):]
    if name.startswith("final/eval_"):
        return "final/valid_" + name[len("final/eval_"):]
    return name


# -- the trial run's remaining names (added with harness.tracking.trial_run) -------------------------
TAG_GIT_COMMIT = "git_commit"
TAG_PERF_DTYPE = "perf.dtype"  # the dtype whose peak perf/utilization is measured against
TAG_PERF_MESH = "perf.mesh"  # the mesh the timed step ran on
#: Why the trial's measured step time is not trusted: it disagreed by more than 2x with the trial's
#: own training clock, also when measured again (both figures); absent when it is trusted.
TAG_PERF_SUSPECT = "perf.suspect"
#: XLA's FLOP count of the trial's step and the analytic one disagree by more than 2x: both counts
#: (``harness.core.conditions``; the sweep says it in one line per optimizer and task)
TAG_PERF_FLOPS_MISMATCH = "perf.flops_mismatch"
#: ``"true"`` on a trial whose target its initial parameters already met (the step-0 evaluation):
#: not counted; the target is reached at the first later evaluation that meets it (AlgoPerf's
#: runner first evaluates after an update); the summary says the task needs no training
TAG_TARGET_AT_INIT = "convergence.target_at_init"
#: Why a vmapped batch was retried one trial at a time (the batch's exception, one line); set on
#: each trial of that batch.
TAG_BATCH_FALLBACK_REASON = "harness.batch_fallback_reason"
PREFIX_VALID = "valid/"  # + a model's metric name, at every evaluation of the validation split
PREFIX_TEST = "test/"  # + a model's metric name, once at the end, on the test split
M_PEAK_FLOPS = "perf/peak_flops"
PERPLEXITY = "perplexity"  # valid/ and test/: exp(loss per token) of a language model on text
BITS_PER_BYTE = "bits_per_byte"  # valid/ and test/: loss / ln 2 / the tokenizer's bytes per token
M_VALID_GAP = "valid/nats_above_entropy"  # validation loss minus a dataset's known loss floor
M_LOSS_FLOOR = "dataset/loss_floor"
M_ENTROPY_RATE = "dataset/entropy_rate"
