"""MLflow runs of one sweep → one tidy :class:`pandas.DataFrame`.

The frame has two kinds of rows, told apart by the column ``row``:

* ``row == "curve"``: one row per trial and logged step, with the step-wise metrics
  (``train/loss``, ``valid/loss``, ``valid/accuracy``, ``time/wall_s``) as columns; a metric not
  logged at that step is ``NaN``.
* ``row == "summary"``: exactly one row per trial (also for failed trials that logged nothing),
  with the single-valued metrics (``perf/*``, ``convergence/*``, ``final/valid_*``, and the test
  split's ``test/loss``, ``test/accuracy``); ``step`` is ``<NA>``.

Splits. Runs of the three-split protocol evaluate validation during training (``valid/*``: what
targets, selection and ranking read) and test once at the end (``test/*``: the number reported
for the validation-selected configuration). Runs logged before it hold only ``eval/*`` and
``final/eval_*``: their values are read into the ``valid/*`` / ``final/valid_*`` columns, their
``test/*`` columns stay ``NaN``, and their column ``protocol`` is :data:`PROTOCOL_ONE_SPLIT`
(``"selected and reported on one split"``) instead of :data:`PROTOCOL_THREE_SPLITS`.

Every row carries the trial's identity (``trial_id``, ``run_id``, ``model``, ``optimizer``, …,
``seed``, ``status``), derived labels (``task``, ``config``, ``config_id``), its target, its
environment tags, and every MLflow param as a ``params.<name>`` column (strings, as stored).
Metric values are exactly the floats MLflow holds.

All MLflow tag, param and metric names the reports read are the constants below: change them here.
Conventions: ``docs/architecture.md`` ("MLflow conventions").
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

# ---------------------------------------------------------------------------------------------
# Names (the one place to adjust them)
# ---------------------------------------------------------------------------------------------
TAG_TRIAL_ID = "harness.trial_id"
TAG_SWEEP = "harness.sweep"
TAG_SWEEP_ID = "harness.sweep_id"
TAG_ROLE = "harness.role"
ROLE_PARENT = "parent"
#: A run is a sweep's parent when any of these tags has the value ``parent`` (``harness.kind`` is
#: what ``harness.tracking`` writes; ``harness.role`` the name in the reports' brief).
PARENT_ROLE_TAGS = (TAG_ROLE, "harness.kind")
TAG_PARENT_RUN_ID = "mlflow.parentRunId"
TAG_STATUS = "status"
TAG_REASON = "harness.reason"  # optional: why a trial failed or diverged
#: Tags read, in order, for the reason shown beside a trial that did not finish.
REASON_TAGS = (TAG_REASON, "status_reason")
TAG_DIVERGED_STEP = "diverged_step"
TAG_MODEL = "model"
TAG_OPTIMIZER = "optimizer"
TAG_SCHEDULE = "schedule"
TAG_DATASET = "dataset"
TAG_SEED = "seed"
#: Environment tags, shown in the report's "Environment" section (any may be absent).
ENV_TAGS = ("jax_version", "jaxlib_version", "harness_version", "device_kind", "git_commit")

PARAM_STEP_SIZE = "optimizer.step_size"
PARAM_BATCH_SIZE = "train.batch_size"
PARAM_STEPS = "train.steps"
PARAM_SEED = "train.seed"
PARAM_TARGET_METRIC = "target.metric"
PARAM_TARGET_VALUE = "target.value"
PARAM_TARGET_MODE = "target.mode"  # optional; inferred from the metric's name when absent
#: Param prefixes that define the task a trial trains (``train.seed`` excluded).
TASK_PARAM_PREFIXES = ("model.", "dataset.", "train.", "target.")
#: Param prefixes that define an optimizer configuration.
CONFIG_PARAM_PREFIXES = ("optimizer.", "schedule.")
#: Param names that are neither task nor configuration (vary across seeds / packing only).
NON_CONFIG_PARAMS = (PARAM_SEED, "train.steps_per_dispatch")

M_TRAIN_LOSS = "train/loss"
M_VALID_LOSS = "valid/loss"
M_VALID_ACC = "valid/accuracy"
#: The periodic evaluation, on the validation split (names kept for the figures).
M_EVAL_LOSS = M_VALID_LOSS
M_EVAL_ACC = M_VALID_ACC
M_WALL_S = "time/wall_s"
#: Metrics logged with a step: read in full with their history.
CURVE_METRICS = (M_TRAIN_LOSS, M_VALID_LOSS, M_VALID_ACC, M_WALL_S)
#: Names of runs logged before the three-split protocol → the column they are read into.
LEGACY_CURVE_METRICS = {"eval/loss": M_VALID_LOSS, "eval/accuracy": M_VALID_ACC}

M_STEP_MS = "perf/step_time_ms"
M_STEP_MS_P10 = "perf/step_time_ms_p10"
M_STEP_MS_P90 = "perf/step_time_ms_p90"
M_EXAMPLES_PER_S = "perf/examples_per_sec"
M_COMPILE_S = "perf/compile_s"
M_FLOPS = "perf/flops_per_step"
M_UTIL = "perf/utilization"
#: Throughput per device and the device count of the timed step (runs from before parallelism: NaN).
M_EXAMPLES_PER_S_PER_DEVICE = "perf/examples_per_sec_per_device"
M_NUM_DEVICES = "perf/num_devices"
#: Tag: the mesh a trial trained on (``"batch=4"``), read into the ``mesh`` column (None: one device).
TAG_MESH = "harness.mesh"
M_STEPS_TO_TARGET = "convergence/steps_to_target"
M_SECONDS_TO_TARGET = "convergence/seconds_to_target"
M_FINAL_LOSS = "final/valid_loss"
M_FINAL_ACC = "final/valid_accuracy"
M_TEST_LOSS = "test/loss"
M_TEST_ACC = "test/accuracy"
#: Summary names of runs logged before the three-split protocol → their column.
LEGACY_SUMMARY_METRICS = {"final/eval_loss": M_FINAL_LOSS, "final/eval_accuracy": M_FINAL_ACC}
#: Column ``protocol``: how a trial's numbers may be read.
PROTOCOL_THREE_SPLITS = "selected on validation, reported on test"
PROTOCOL_ONE_SPLIT = "selected and reported on one split"
#: On datasets with a known loss floor (markov_lm): final validation loss − floor (nats).
M_FINAL_GAP = "final/valid_nats_above_entropy"
#: Single-valued metrics: their latest value goes into the trial's summary row.
SUMMARY_METRICS = (
    M_STEP_MS,
    M_STEP_MS_P10,
    M_STEP_MS_P90,
    M_EXAMPLES_PER_S,
    M_COMPILE_S,
    M_FLOPS,
    M_UTIL,
    M_EXAMPLES_PER_S_PER_DEVICE,
    M_NUM_DEVICES,
    M_STEPS_TO_TARGET,
    M_SECONDS_TO_TARGET,
    M_FINAL_LOSS,
    M_FINAL_ACC,
    M_TEST_LOSS,
    M_TEST_ACC,
    M_FINAL_GAP,
)
#: Which final (validation) metric a target metric is judged by; ``eval/*`` targets are old
#: spellings of ``valid/*``.
FINAL_OF = {M_VALID_ACC: M_FINAL_ACC, M_VALID_LOSS: M_FINAL_LOSS, "eval/accuracy": M_FINAL_ACC,
            "eval/loss": M_FINAL_LOSS}
#: The test metric reported for a final validation metric.
TEST_OF = {M_FINAL_ACC: M_TEST_ACC, M_FINAL_LOSS: M_TEST_LOSS}

ARTIFACT_CONFIG = "config.yaml"
ARTIFACT_TRIALS = "trials.json"  # the parent run's list of the sweep's trials ({"trial_id": ...})
#: Runs per ``search_runs`` page (MLflow's server maximum is 50,000; its default 1,000).
PAGE_SIZE = 1000
#: Threads that read metric histories (I/O bound; helps most against a remote server).
HISTORY_THREADS = 8

STATUSES = ("finished", "diverged", "failed", "running")

#: Identity columns of every row, in order.
ID_COLUMNS = (
    "row",
    "experiment",
    "sweep",
    "sweep_id",
    "trial_id",
    "run_id",
    "parent_run_id",
    "attempts",
    "run_status",
    "status",
    "reason",
    "model",
    "optimizer",
    "schedule",
    "dataset",
    "seed",
    "task",
    "config",
    "config_id",
    "step_size",
    "batch_size",
    "train_steps",
    "target_metric",
    "target_value",
    "target_mode",
    "protocol",
    "mesh",
    *ENV_TAGS,
    "start_time",
    "end_time",
    "step",
)


@dataclass
class SweepData:
    """What :func:`load_sweep` read: the tidy ``frame`` plus the sweep's parent runs.

    ``parents`` is a list of ``mlflow.entities.Run`` (oldest first; a resumed sweep has several);
    ``config_yaml`` the text of the latest parent's ``config.yaml`` artifact (``None`` if absent).
    """

    experiment: str
    experiment_id: str
    sweep_id: str
    frame: pd.DataFrame
    parents: list[Any] = field(default_factory=list)
    config_yaml: str | None = None
    tracking_uri: str = ""


# ---------------------------------------------------------------------------------------------
# Reading MLflow
# ---------------------------------------------------------------------------------------------
def _client(tracking_uri: str | None):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def _quote(v: str) -> str:
    return "'" + str(v).replace("'", "\\'") + "'"


def search_all_runs(
    client, experiment_ids: Sequence[str], filter_string: str = "", page_size: int | None = None
) -> list:
    """Every active run matching ``filter_string``, reading ``search_runs`` page by page.

    MLflow returns at most ``max_results`` runs per call and a ``token`` for the next page; this
    follows the tokens until none is left, so a sweep of more than 1,000 runs is read in full.
    Runs come oldest first (``start_time`` ascending, then run id).
    """
    from mlflow.entities import ViewType

    runs: list = []
    token = None
    while True:
        page = client.search_runs(
            list(experiment_ids),
            filter_string,
            run_view_type=ViewType.ACTIVE_ONLY,
            max_results=page_size or PAGE_SIZE,
            order_by=["attributes.start_time ASC"],
            page_token=token,
        )
        runs.extend(page)
        token = getattr(page, "token", None)
        if not token:
            return runs


def _experiment(client, name: str):
    exp = client.get_experiment_by_name(name)
    if exp is None:
        import difflib

        names = [e.name for e in client.search_experiments()]
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)  # as harness.registry does
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"no MLflow experiment named {name!r}{hint}; "
            f"experiments in this store: {sorted(names)}"
        )
    return exp


def _parent_filters() -> list[str]:
    return [f"tags.`{t}` = {_quote(ROLE_PARENT)}" for t in PARENT_ROLE_TAGS]


def _is_parent(run) -> bool:
    tags = run.data.tags
    if any(tags.get(t) == ROLE_PARENT for t in PARENT_ROLE_TAGS):
        return True
    return not tags.get(TAG_TRIAL_ID) and not tags.get(TAG_PARENT_RUN_ID)


def _latest_sweep_id(client, experiment_id: str, experiment: str) -> str:
    for flt in [*_parent_filters(), f"tags.`{TAG_SWEEP_ID}` != ''"]:
        page = client.search_runs(
            [experiment_id], flt, max_results=1, order_by=["attributes.start_time DESC"]
        )
        for run in page:
            sid = run.data.tags.get(TAG_SWEEP_ID)
            if sid:
                return sid
    raise ValueError(f"experiment {experiment!r} has no run tagged {TAG_SWEEP_ID!r}: nothing to report")


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _int_or_na(v: Any):
    x = _num(v)
    return int(x) if math.isfinite(x) and float(x).is_integer() else pd.NA


def _status(run) -> str:
    tag = (run.data.tags.get(TAG_STATUS) or "").strip().lower()
    if tag in STATUSES:
        return tag
    st = run.info.status
    if st == "FINISHED":
        return "finished"
    if st in ("RUNNING", "SCHEDULED"):
        return "running"
    return "failed"


def _select_trial_runs(children: Iterable) -> dict[str, tuple[Any, int]]:
    """trial_id → (the run the report uses, number of runs of that trial).

    The latest FINISHED run of a trial wins; a trial with none uses its latest run (shown failed).
    """
    by_trial: dict[str, list] = {}
    for run in children:
        by_trial.setdefault(run.data.tags[TAG_TRIAL_ID], []).append(run)
    out = {}
    for tid, runs in by_trial.items():
        runs.sort(key=lambda r: (r.info.start_time or 0, r.info.run_id))
        finished = [r for r in runs if r.info.status == "FINISHED"]
        out[tid] = ((finished or runs)[-1], len(runs))
    return out


def _history(client, run_id: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    hist = client.get_metric_history(run_id, key)
    if not hist:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    # Same step logged twice: the later timestamp wins (sort is stable on step, then timestamp).
    hist = sorted(hist, key=lambda m: (m.step, m.timestamp))
    steps = np.array([m.step for m in hist], np.int64)
    vals = np.array([m.value for m in hist], np.float64)
    last = np.r_[steps[1:] != steps[:-1], True]
    return steps[last], vals[last]


def _target_mode(metric: str, mode: str | None) -> str:
    if mode in ("min", "max"):
        return mode
    return "min" if "loss" in (metric or "") else "max"


def _reason(tags: dict[str, str]) -> str:
    for t in REASON_TAGS:
        if tags.get(t):
            return tags[t].strip().splitlines()[-1][:300]
    if tags.get(TAG_DIVERGED_STEP):
        return f"diverged at step {tags[TAG_DIVERGED_STEP]}"
    return ""


def _metric(run, key: str) -> float:
    """The run's latest value of ``key``; for the ``valid``/``final`` names, the legacy name's when
    the run has only that (a run from before the three-split protocol)."""
    m = run.data.metrics
    if key in m:
        return float(m[key])
    for old, new in (*LEGACY_CURVE_METRICS.items(), *LEGACY_SUMMARY_METRICS.items()):
        if new == key and old in m:
            return float(m[old])
    return math.nan


def _protocol(run) -> str:
    m = run.data.metrics
    new = (*CURVE_METRICS[1:3], M_FINAL_ACC, M_FINAL_LOSS, M_TEST_ACC, M_TEST_LOSS)
    old = (*LEGACY_CURVE_METRICS, *LEGACY_SUMMARY_METRICS)
    if any(k in m for k in old) and not any(k in m for k in new):
        return PROTOCOL_ONE_SPLIT
    return PROTOCOL_THREE_SPLITS


def _trial_identity(run, attempts: int, experiment: str) -> dict[str, Any]:
    tags, params = run.data.tags, run.data.params
    seed = tags.get(TAG_SEED, params.get(PARAM_SEED))
    target_metric = params.get(PARAM_TARGET_METRIC)
    if target_metric and target_metric.startswith("eval/"):
        target_metric = "valid/" + target_metric[len("eval/"):]
    ident: dict[str, Any] = {
        "experiment": experiment,
        "sweep": tags.get(TAG_SWEEP, experiment),
        "sweep_id": tags.get(TAG_SWEEP_ID),
        "trial_id": tags[TAG_TRIAL_ID],
        "run_id": run.info.run_id,
        "parent_run_id": tags.get(TAG_PARENT_RUN_ID),
        "attempts": attempts,
        "run_status": run.info.status,
        "status": _status(run),
        "reason": _reason(tags),
        "model": tags.get(TAG_MODEL, params.get("model", "?")),
        "optimizer": tags.get(TAG_OPTIMIZER, params.get("optimizer", "?")),
        "schedule": tags.get(TAG_SCHEDULE, params.get("schedule", "")),
        "dataset": tags.get(TAG_DATASET, params.get("dataset", "?")),
        "seed": _int_or_na(seed),
        "step_size": _num(params.get(PARAM_STEP_SIZE)),
        "batch_size": _int_or_na(params.get(PARAM_BATCH_SIZE)),
        "train_steps": _int_or_na(params.get(PARAM_STEPS)),
        "target_metric": target_metric,
        "target_value": _num(params.get(PARAM_TARGET_VALUE)),
        "target_mode": _target_mode(target_metric, params.get(PARAM_TARGET_MODE)) if target_metric else None,
        "protocol": _protocol(run),
        "mesh": tags.get(TAG_MESH),
        "start_time": pd.to_datetime(run.info.start_time, unit="ms", utc=True)
        if run.info.start_time
        else pd.NaT,
        "end_time": pd.to_datetime(run.info.end_time, unit="ms", utc=True) if run.info.end_time else pd.NaT,
    }
    for t in ENV_TAGS:
        ident[t] = tags.get(t)
    for k, v in params.items():
        ident[f"params.{k}"] = v
    return ident


def _varying(params: pd.DataFrame, cols: list[str]) -> list[str]:
    return [c for c in cols if params[c].astype("string").fillna("<absent>").nunique() > 1]


def _add_labels(summary: pd.DataFrame) -> pd.DataFrame:
    """Add ``task``, ``config_id`` and ``config`` (human-readable) to one-row-per-trial ``summary``."""
    pcols = sorted(c for c in summary.columns if c.startswith("params."))
    names = {c: c[len("params.") :] for c in pcols}
    task_cols = [
        c for c in pcols if names[c].startswith(TASK_PARAM_PREFIXES) and names[c] not in NON_CONFIG_PARAMS
    ]
    conf_cols = [
        c for c in pcols if names[c].startswith(CONFIG_PARAM_PREFIXES) and names[c] not in NON_CONFIG_PARAMS
    ]

    def label(df: pd.DataFrame, cols: list[str], head: pd.Series) -> pd.Series:
        var = _varying(df, cols)
        out = head.copy()
        for i in df.index:
            bits = [f"{names[c].split('.', 1)[1]}={df.at[i, c]}" for c in var if pd.notna(df.at[i, c])]
            if bits:
                out[i] = f"{out[i]} ({', '.join(bits)})"
        return out

    summary = summary.copy()
    summary["task"] = label(summary, task_cols, summary["model"] + " / " + summary["dataset"])
    summary["config"] = summary["optimizer"]
    summary["config_id"] = ""
    for _opt, idx in summary.groupby("optimizer", sort=False).groups.items():
        df = summary.loc[idx]
        head = df["optimizer"].copy()
        if df["schedule"].nunique() > 1:
            head = head + " · " + df["schedule"]
        summary.loc[idx, "config"] = label(df, conf_cols, head)
    for i in summary.index:
        key = "|".join(
            [summary.at[i, "optimizer"], str(summary.at[i, "schedule"])]
            + [f"{names[c]}={summary.at[i, c]}" for c in conf_cols if pd.notna(summary.at[i, c])]
        )
        summary.at[i, "config_id"] = hashlib.sha256(key.encode()).hexdigest()[:12]
    return summary


def build_frame(client, runs: Sequence, experiment: str) -> pd.DataFrame:
    """The tidy frame (see the module docstring) of the trial runs ``runs`` (children of a sweep).

    Runs without a ``harness.trial_id`` tag are ignored. Metric histories are read with
    ``client.get_metric_history`` for the curve metrics each run actually holds, sorted by step.
    """
    children = [r for r in runs if r.data.tags.get(TAG_TRIAL_ID)]
    chosen = _select_trial_runs(children)
    idents = [_trial_identity(run, n, experiment) for run, n in chosen.values()]
    if not idents:
        return pd.DataFrame(columns=[*ID_COLUMNS, *CURVE_METRICS, *SUMMARY_METRICS])
    summary = pd.DataFrame(idents)
    summary["row"] = "summary"
    summary["step"] = pd.array([pd.NA] * len(summary), dtype="Int64")
    for m in SUMMARY_METRICS:
        summary[m] = [_metric(run, m) for run, _ in chosen.values()]
    # A finished trial without final/* metrics: MLflow's latest value of the validation curve (the
    # value at the largest step) is its final value.
    for final, curve in ((M_FINAL_ACC, M_EVAL_ACC), (M_FINAL_LOSS, M_EVAL_LOSS)):
        latest = [_metric(run, curve) for run, _ in chosen.values()]
        fill = summary[final].isna() & (summary["status"] == "finished")
        summary.loc[fill, final] = pd.Series(latest, index=summary.index)[fill]
    summary = _add_labels(summary)

    legacy_of = {new: old for old, new in LEGACY_CURVE_METRICS.items()}
    jobs = []  # (trial index, run id, the name MLflow holds, the column it fills)
    for i, (run, _) in enumerate(chosen.values()):
        for key in CURVE_METRICS:
            if key in run.data.metrics:
                jobs.append((i, run.info.run_id, key, key))
            elif legacy_of.get(key) in run.data.metrics:
                jobs.append((i, run.info.run_id, legacy_of[key], key))
    with ThreadPoolExecutor(max_workers=max(1, min(HISTORY_THREADS, len(jobs)))) as pool:
        hists = list(pool.map(lambda j: _history(client, j[1], j[2]), jobs))
    per_trial: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for (i, _rid, _stored, key), h in zip(jobs, hists, strict=True):
        per_trial.setdefault(i, {})[key] = h
    curve_parts = []
    ident_cols = [c for c in summary.columns if c not in SUMMARY_METRICS and c not in ("row", "step")]
    for i, metrics in per_trial.items():
        steps = np.unique(np.concatenate([s for s, _ in metrics.values()]))
        part = {"_trial": np.full(len(steps), i), "step": steps}
        for key in CURVE_METRICS:
            s, v = metrics.get(key, (np.zeros(0, np.int64), np.zeros(0)))
            col = np.full(len(steps), np.nan)
            col[np.searchsorted(steps, s)] = v
            part[key] = col
        curve_parts.append(pd.DataFrame(part))
    if curve_parts:
        c = pd.concat(curve_parts, ignore_index=True)
        c = c.join(summary[ident_cols], on="_trial").drop(columns="_trial")
        c["row"] = "curve"
        c["step"] = c["step"].astype("Int64")
        curve_parts = [c]
    frame = pd.concat([*curve_parts, summary], ignore_index=True) if curve_parts else summary
    for key in CURVE_METRICS:
        if key not in frame:
            frame[key] = np.nan
    lead = [c for c in ID_COLUMNS if c in frame.columns]
    rest = [*CURVE_METRICS, *SUMMARY_METRICS]
    pcols = sorted(c for c in frame.columns if c.startswith("params."))
    frame = frame[lead + rest + pcols]
    frame["step"] = frame["step"].astype("Int64")
    frame["seed"] = frame["seed"].astype("Int64")
    order = {"curve": 0, "summary": 1}
    frame = frame.sort_values(
        ["task", "optimizer", "config", "seed", "trial_id", "row", "step"],
        key=lambda s: s.map(order) if s.name == "row" else s,
        na_position="last",
        kind="stable",
    ).reset_index(drop=True)
    return frame


def load_sweep(
    experiment: str, sweep_id: str | None = None, tracking_uri: str | None = None, *, client=None
) -> SweepData:
    """Read one sweep of ``experiment`` (the latest one when ``sweep_id`` is None).

    Raises:
      ValueError: no such experiment (with the closest name), or no run with that sweep id
        (listing the sweep ids the experiment holds).
    """
    client = client or _client(tracking_uri)
    exp = _experiment(client, experiment)
    if sweep_id is None:
        sweep_id = _latest_sweep_id(client, exp.experiment_id, experiment)
    runs = search_all_runs(client, [exp.experiment_id], f"tags.`{TAG_SWEEP_ID}` = {_quote(sweep_id)}")
    if not runs:
        known = sorted(
            {
                r.data.tags.get(TAG_SWEEP_ID)
                for flt in _parent_filters()
                for r in search_all_runs(client, [exp.experiment_id], flt)
            }
            - {None}
        )
        raise ValueError(
            f"experiment {experiment!r} has no run with {TAG_SWEEP_ID} = {sweep_id!r}; "
            f"sweep ids there: {known}"
        )
    parents = [r for r in runs if _is_parent(r)]
    runs = runs + _carried_over_runs(client, exp.experiment_id, parents, runs)
    frame = build_frame(client, runs, experiment)
    frame.attrs.update(
        experiment=experiment, sweep_id=sweep_id, parent_run_ids=[p.info.run_id for p in parents]
    )
    return SweepData(
        experiment=experiment,
        experiment_id=exp.experiment_id,
        sweep_id=sweep_id,
        frame=frame,
        parents=parents,
        config_yaml=_config_yaml(client, parents),
        tracking_uri=str(client.tracking_uri if hasattr(client, "tracking_uri") else ""),
    )


def _download_text(client, run_id: str, artifact: str) -> str | None:
    import os
    import tempfile

    quiet = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = client.download_artifacts(run_id, artifact, tmp)
            with open(path, encoding="utf-8") as f:
                return f.read()
    except Exception:  # absent artifact, unreachable store
        return None
    finally:
        if quiet is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = quiet


def _carried_over_runs(client, experiment_id: str, parents: Sequence, runs: Sequence) -> list:
    """FINISHED trial runs that belong to this sweep but carry another ``harness.sweep_id``: a sweep
    whose search grew (``trials`` 16 → 32) has a new sweep id, and skips the trials an earlier
    invocation finished (same ``trial_id``). The sweep's trials are read from its parent runs'
    ``trials.json``; of several FINISHED runs of one trial the earliest is taken."""
    import json

    want: set[str] = set()
    for p in parents:
        text = _download_text(client, p.info.run_id, ARTIFACT_TRIALS)
        try:
            want |= {str(t["trial_id"]) for t in json.loads(text or "[]")}
        except (ValueError, TypeError, KeyError):
            continue
    want -= {r.data.tags.get(TAG_TRIAL_ID) for r in runs if r.info.status == "FINISHED"}
    if not want:
        return []
    best: dict[str, Any] = {}
    for r in search_all_runs(client, [experiment_id], "attributes.status = 'FINISHED'"):
        tid = r.data.tags.get(TAG_TRIAL_ID)
        if tid in want and (tid not in best or r.info.start_time < best[tid].info.start_time):
            best[tid] = r
    return list(best.values())


def _config_yaml(client, parents: Sequence) -> str | None:
    import os
    import tempfile

    for run in reversed(parents):
        quiet = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
        os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
        try:
            with tempfile.TemporaryDirectory() as tmp:
                path = client.download_artifacts(run.info.run_id, ARTIFACT_CONFIG, tmp)
                with open(path, encoding="utf-8") as f:
                    return f.read()
        except Exception:  # absent artifact, unreachable store: the report says "not logged"
            continue
        finally:
            if quiet is None:
                os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
            else:
                os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = quiet
    return None


def load_frame(experiment: str, sweep_id: str | None = None, tracking_uri: str | None = None) -> pd.DataFrame:
    """The tidy frame of one sweep (the latest when ``sweep_id`` is None); see the module docstring.

    ``frame.attrs`` holds ``experiment``, ``sweep_id`` and ``parent_run_ids``.
    """
    return load_sweep(experiment, sweep_id, tracking_uri).frame


# ---------------------------------------------------------------------------------------------
# Views shared by figures, tables and the baseline comparison
# ---------------------------------------------------------------------------------------------
_MEMO: dict[tuple, tuple[Any, pd.DataFrame]] = {}


def per_frame(fn):
    """Memoise a view ``fn(frame) -> DataFrame`` per frame object: a report asks for the same
    view (best configurations, configuration values) from a dozen figures and tables, and each
    costs a pass over every row. Keyed by the frame's identity (checked through a weak reference,
    so a new frame at a recycled address is never served an old result); a caller gets its own
    copy. Frames are treated as immutable once loaded: every view here only reads them."""
    import functools
    import weakref

    @functools.wraps(fn)
    def view(frame: pd.DataFrame) -> pd.DataFrame:
        key = (fn.__qualname__, id(frame))
        hit = _MEMO.get(key)
        if hit is not None and hit[0]() is frame:
            return hit[1].copy()
        out = fn(frame)
        for k in [k for k, (ref, _) in _MEMO.items() if ref() is None]:
            del _MEMO[k]  # frames that are gone
        _MEMO[key] = (weakref.ref(frame), out)
        return out.copy()

    return view


def summaries(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per trial (the ``summary`` rows)."""
    return frame[frame["row"] == "summary"].reset_index(drop=True)


def curves(frame: pd.DataFrame) -> pd.DataFrame:
    """The step rows (``row == "curve"``)."""
    return frame[frame["row"] == "curve"].reset_index(drop=True)


@dataclass(frozen=True)
class Objective:
    """What "better" means in a sweep: ``final`` column to rank by and its direction."""

    final: str
    mode: str  # "max" or "min"
    target_metric: str | None
    target_value: float

    @property
    def label(self) -> str:
        return {M_FINAL_ACC: "final validation accuracy", M_FINAL_LOSS: "final validation loss"}.get(
            self.final, self.final
        )

    @property
    def test(self) -> str:
        """The test column reported for this objective (``test/accuracy`` or ``test/loss``)."""
        return TEST_OF.get(self.final, M_TEST_ACC if self.mode == "max" else M_TEST_LOSS)


def objective(frame: pd.DataFrame, task: str | None = None) -> Objective:
    """The objective of ``task`` (default: of the whole sweep): its (most common) target's final
    metric, else final accuracy, else loss.

    Tasks of one sweep may differ (``workloads: [markov_lm_transformer, mnist1d_cnn]``: a
    ``valid/loss`` target and a ``valid/accuracy`` one), so everything that selects, ranks or
    reports one task's configurations asks for that task's objective; the sweep-wide one only
    labels what is shared (:func:`objectives_differ` says when it cannot)."""
    s = summaries(frame)
    if task is not None:
        s = s[s["task"] == task]
    tm = s["target_metric"].dropna()
    if len(tm):
        metric = tm.mode().iloc[0]
        rows = s[s["target_metric"] == metric]
        mode = (
            rows["target_mode"].dropna().iloc[0]
            if rows["target_mode"].notna().any()
            else _target_mode(metric, None)
        )
        value = float(rows["target_value"].median())
        return Objective(
            FINAL_OF.get(metric, M_FINAL_ACC if mode == "max" else M_FINAL_LOSS), mode, metric, value
        )
    if s[M_FINAL_ACC].notna().any():
        return Objective(M_FINAL_ACC, "max", None, math.nan)
    return Objective(M_FINAL_LOSS, "min", None, math.nan)


def objectives_differ(frame: pd.DataFrame) -> bool:
    """Whether the sweep's tasks rank by different final metrics (e.g. one loss target, one
    accuracy target): then a shared column or axis must name each task's metric."""
    tasks = summaries(frame)["task"].dropna().unique()
    return len({objective(frame, t).final for t in tasks}) > 1


def task_objective_values(frame: pd.DataFrame, rows: pd.DataFrame) -> pd.Series:
    """Each row's final validation value of its own task's objective metric (the column it ranks
    by): ``rows`` are rows of :func:`summaries`; NaN where absent."""
    out = pd.Series(np.nan, index=rows.index, dtype=float)
    for task, g in rows.groupby("task", sort=False):
        out.loc[g.index] = g[objective(frame, task).final].astype(float)
    return out


def target_words(obj: Objective) -> str:
    """``valid/accuracy ≥ 0.85`` for an objective with a target, else ``""``."""
    if not obj.target_metric or not math.isfinite(obj.target_value):
        return ""
    return f"{obj.target_metric} {'≥' if obj.mode == 'max' else '≤'} {obj.target_value:g}"


def objective_label(frame: pd.DataFrame) -> str:
    """The axis title for every task's objective: the sweep's (``final validation accuracy``),
    or, when tasks differ (:func:`objectives_differ`), one that says each panel is its task's."""
    if objectives_differ(frame):
        return "final validation metric (each task's target: loss or accuracy)"
    return objective(frame).label


def selection_key(reached: int, median_steps: float | None, finished: int, value: float | None,
                  higher_is_better: bool, median_seconds: float | None, config: str) -> tuple:
    """The order in which one optimizer's configurations are selected: the smallest key wins.

    First difference decides: more seeds that ``reached`` the target; lower ``median_steps`` to
    target; more seeds ``finished``; better validation ``value`` (mean final metric; higher when
    ``higher_is_better``); lower ``median_seconds`` to target; the ``config`` name. ``None`` (no
    seed reached / no value) sorts last. The one rule :func:`best_configs` and the sweep's summary
    table (``harness.summary``) both apply, so both always select the same configuration.
    """
    inf = math.inf
    return (-int(reached), inf if median_steps is None else float(median_steps), -int(finished),
            inf if value is None else (-1.0 if higher_is_better else 1.0) * float(value),
            inf if median_seconds is None else float(median_seconds), str(config))


@per_frame
def best_configs(frame: pd.DataFrame) -> pd.DataFrame:
    """The best configuration of each optimizer on each task, one row per (task, optimizer).

    Selection among one optimizer's configurations (first difference decides): more seeds that
    reached the target; lower median ``convergence/steps_to_target`` over the seeds that reached
    it (one optimizer's steps all cost the same, so steps measure its speed without the
    wall-clock's noise); more seeds that finished (not diverged/failed); better mean of the
    objective's final metric over finished seeds; then lower median seconds to target, then
    ``config_id``. Identical per-trial results therefore always select the same configuration.
    Columns: ``task, optimizer, config_id, config, n_seeds, n_finished, n_reached, rank``
    (``rank`` 1 = best optimizer on the task: more seeds reaching the target, then lower median
    **seconds** to target, since optimizers' steps cost different times, then more finished, then
    the final metric).
    """
    s = summaries(frame)
    if s.empty:
        return pd.DataFrame(
            columns=["task", "optimizer", "config_id", "config", "n_seeds", "n_finished", "n_reached", "rank"]
        )
    objs = {t: objective(frame, t) for t in s["task"].unique()}  # each task selects on its own metric
    rows = []
    for (task, opt, cid), g in s.groupby(["task", "optimizer", "config_id"], sort=True):
        obj = objs[task]
        sign = -1.0 if obj.mode == "max" else 1.0
        fin = g[g["status"] == "finished"]
        reached = fin[M_SECONDS_TO_TARGET].notna() | fin[M_STEPS_TO_TARGET].notna()
        ttt = fin.loc[fin[M_SECONDS_TO_TARGET].notna(), M_SECONDS_TO_TARGET]
        steps = fin.loc[fin[M_STEPS_TO_TARGET].notna(), M_STEPS_TO_TARGET]
        final = fin[obj.final].dropna()
        secs = float(ttt.median()) if len(ttt) else math.inf
        metric = sign * float(final.mean()) if len(final) else math.inf
        rows.append(
            {
                "task": task,
                "optimizer": opt,
                "config_id": cid,
                "config": g["config"].iloc[0],
                "n_seeds": len(g),
                "n_finished": len(fin),
                "n_reached": int(reached.sum()),
                "_key": selection_key(int(reached.sum()), float(steps.median()) if len(steps) else None,
                                      len(fin), float(final.mean()) if len(final) else None,
                                      obj.mode == "max", float(ttt.median()) if len(ttt) else None, str(cid)),
                "_rank_key": (-int(reached.sum()), secs, -len(fin), metric, str(opt)),
            }
        )
    allc = pd.DataFrame(rows).sort_values("_key", kind="stable")
    best = allc.groupby(["task", "optimizer"], sort=False).head(1).copy()
    best["rank"] = best.groupby("task")["_rank_key"].rank(method="first").astype(int)
    return best.drop(columns=["_key", "_rank_key"]).sort_values(["task", "rank"]).reset_index(drop=True)


def mean_ci(values: Iterable[float], level: float = 0.95) -> tuple[float, float, int]:
    """Mean, half-width of the two-sided Student-t confidence interval at ``level``, and n.

    Non-finite values are dropped. Half-width is ``nan`` for n < 2 (no spread to estimate).
    """
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], np.float64)
    n = len(x)
    if n == 0:
        return math.nan, math.nan, 0
    if n == 1:
        return float(x[0]), math.nan, 1
    from scipy import stats

    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return float(x.mean()), half, n
