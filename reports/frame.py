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
``final/eval_*``: their values are read into the ``valid/*`` / ``final/valid_*`` columns
(:data:`harness.core.names.LEGACY_METRICS`), their ``test/*`` columns stay ``NaN``, and their column
``protocol`` is :data:`PROTOCOL_ONE_SPLIT` (``"selected and reported on one split"``) instead of
:data:`PROTOCOL_THREE_SPLITS`.

Every row carries the trial's identity (``trial_id``, ``run_id``, ``model``, ``optimizer``, …,
``seed``, ``status``), derived labels (``task``, ``config``, ``config_id``: :mod:`reports.labels`),
``tuning`` (the tag ``harness.tuning``: ``"none"`` for a trial of a ``tuning: none`` optimizer entry,
the self-tuning track; ``None`` for a tuned one), ``source_hash`` (the tag ``optimizer.source_hash``
of a user's optimizer: which version of its code the trial ran; ``None`` for a built-in),
``perf_suspect`` (the tag ``perf.suspect``: why
its measured step time is not trusted; ``None`` when it is),
its target, its environment tags, and every MLflow param as a ``params.<name>`` column (strings, as
stored). A ladder's trial also carries its rung's run tags as columns named as the tags
(:data:`harness.core.ladder.TAGS`): ``ladder.rung``, ``ladder.params`` (``N``), ``ladder.tokens``
(``D``) as ``Int64``; ``ladder.tokens_per_param``, ``ladder.flops`` as ``float64``; ``ladder.size``,
``ladder.baseline``, ``ladder.transfer`` as text; the columns are there only when some trial of the
sweep is a ladder's (``<NA>``/``None`` on its other rows). Metric values are exactly the floats MLflow holds.

Reading MLflow is :mod:`reports.runs`; every tag, param and metric name is
:mod:`harness.core.names`'. Conventions: ``docs/architecture.md`` ("MLflow conventions").
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.core import ladder as lt
from harness.core.names import (
    BITS_PER_BYTE,
    ENV_TAGS,
    LEGACY_METRICS,
    M_BEST_ACC,
    M_BEST_LOSS,
    M_FINAL_ACC,
    M_FINAL_LOSS,
    M_TEST_ACC,
    M_TEST_LOSS,
    M_TIME,
    M_VALID_ACC,
    M_VALID_LOSS,
    PARAM_BATCH_SIZE,
    PARAM_SCORING,
    PARAM_SEED,
    PARAM_STEP_SIZE,
    PARAM_STEPS,
    PARAM_TARGET_METRIC,
    PARAM_TARGET_MODE,
    PARAM_TARGET_VALUE,
    PREFIX_VALID,
    TAG_AUDIT_OF,
    TAG_BATCH,
    TAG_BATCHING,
    TAG_DATASET,
    TAG_DIVERGED_STEP,
    TAG_MESH,
    TAG_MODEL,
    TAG_OPTIMIZER,
    TAG_OPTIMIZER_SOURCE_HASH,
    TAG_PARENT_RUN,
    TAG_PERF_SUSPECT,
    TAG_REASON,
    TAG_SCHEDULE,
    TAG_SCORING,
    TAG_SEARCH,
    TAG_SEARCH_SPACE,
    TAG_SEED,
    TAG_SELECT_BY,
    TAG_STATUS,
    TAG_STATUS_REASON,
    TAG_SWEEP,
    TAG_SWEEP_ID,
    TAG_TIME,
    TAG_TRIAL_ID,
    TAG_TUNING,
    TIME_PARTS,
    canonical_metric,
)
from harness.core.names import CURVE_METRICS as CURVE_METRICS  # the report's columns, one home
from harness.core.names import SUMMARY_METRICS as SUMMARY_METRICS
from harness.core.selection_rule import LM_MARKER, best_of
from reports import runs as mlruns
from reports.labels import add_labels
from reports.search_report import read_search

#: Summary column: a language model's validation bits per byte at its last evaluation (the latest
#: ``valid/bits_per_byte``; ``NaN`` where the tokenizer's bytes per token are unknown).
FINAL_BPB = "final/valid_bits_per_byte"
#: Column ``protocol``: how a trial's numbers may be read.
PROTOCOL_THREE_SPLITS = "selected on validation, reported on test"
PROTOCOL_ONE_SPLIT = "selected and reported on one split"
#: Tags read, in order, for the reason shown beside a trial that did not finish.
REASON_TAGS = (TAG_REASON, TAG_STATUS_REASON)

#: ``stopped``: an early-stopping rule ended the trial at a rung (a FINISHED run whose
#: ``status`` tag says so): counted apart, never selected (selection reads ``finished`` trials).
STATUSES = ("finished", "diverged", "failed", "running", "stopped")
#: ``frame.attrs[SELECT_BY_ATTR]``: the selection objective the report's views select by
#: (:mod:`harness.core.selection_rule`): the sweep's latest parent run's tag ``harness.select_by``
#: (:func:`load_sweep`), overridden by ``report --select-by``.
SELECT_BY_ATTR = "select_by"
#: ``frame.attrs`` keys of the sweep's tuned-time rule (``scoring:``, ``report --scoring``;
#: :func:`reports.protocol.scoring`) and of the clock its config asked for (``time:``; ``report
#: --time`` overrides it, :func:`reports.report_clock.use_clock`), read like :data:`SELECT_BY_ATTR`.
SCORING_ATTR = "scoring"
SWEEP_TIME_ATTR = "sweep_time"
#: Each setting's tag on a parent run (:func:`sweep_settings`) and its ``frame.attrs`` key.
SETTINGS = {TAG_SELECT_BY: SELECT_BY_ATTR, TAG_SCORING: SCORING_ATTR, TAG_TIME: SWEEP_TIME_ATTR}


def sweep_settings(parents: list) -> dict[str, str]:
    """How the sweep asked to be ranked, as ``frame.attrs`` (:data:`SETTINGS`): each setting's tag
    on its latest parent run (the latest invocation's config; a re-run that trains nothing updates
    it). A sweep from before the ``harness.scoring`` tag has its rule as the ``scoring`` param;
    a setting no parent records is left out (the views use their default)."""
    out = {}
    for tag, attr in SETTINGS.items():
        if parents and parents[-1].data.tags.get(tag):
            out[attr] = parents[-1].data.tags[tag]
    if SCORING_ATTR not in out:
        for parent in reversed(parents):
            if rule := parent.data.params.get(PARAM_SCORING):
                out[SCORING_ATTR] = rule
                break
    return out

#: ``frame.attrs[SWEEP_BUDGET_ATTR]``: the sweep's own time budget, ``{part: seconds}`` over
#: :data:`harness.core.names.TIME_PARTS` (start-up, pre-flight and the batching decision included),
#: summed over its parent runs (one per invocation; :func:`sweep_budget`); absent for a sweep whose
#: parents logged none (from before the sweep's time budget was logged).
SWEEP_BUDGET_ATTR = "sweep_budget"


#: ``frame.attrs[SWEEP_BUDGET_PARENTS_ATTR]``: the run ids of the parents :func:`sweep_budget`
#: summed (the invocations the whole sweep's bar is made of).
SWEEP_BUDGET_PARENTS_ATTR = "sweep_budget_parents"


def budget_parents(parents: list) -> list[str]:
    """The run ids of the ``parents`` that logged a time budget (``time/<part>_s``)."""
    return [p.info.run_id for p in parents if any(M_TIME[k] in p.data.metrics for k in TIME_PARTS)]


def sweep_budget(parents: list) -> dict[str, float]:
    """``{part: seconds}`` of the parents' ``time/<part>_s`` metrics, summed over the parents that
    logged any (their parts add up to each one's ``sweep/wall_s``); ``{}`` when none did."""
    logged = [p.data.metrics for p in parents if any(M_TIME[k] in p.data.metrics for k in TIME_PARTS)]
    return {k: float(sum(m.get(M_TIME[k], 0.0) for m in logged)) for k in TIME_PARTS} if logged else {}


#: Identity columns of every row, in order.
ID_COLUMNS = (
    "row", "experiment", "sweep", "sweep_id", "trial_id", "run_id", "parent_run_id", "attempts",
    "run_status", "status", "reason", "model", "optimizer", "schedule", "dataset", "seed", "task",
    "config", "config_id", "tuning", "search", "audit_of", "batching", "batch", "source_hash",
    "search_space", "step_size",
    "batch_size", "train_steps",
    "target_metric", "target_value", "target_mode", "language_model", "tokens_per_step", "protocol", "mesh",
    "perf_suspect",
    *ENV_TAGS,
    *lt.TAGS, "start_time",
    "end_time", "step",
)
#: The ladder tags (:mod:`harness.core.ladder`) that are numbers: ``Int64`` (rung index,
#: parameters ``N``, tokens ``D``) and ``float64`` (tokens per parameter, estimated FLOPs); the
#: others (``ladder.size``, ``ladder.baseline``, ``ladder.transfer``) stay text.
LADDER_INTS = (lt.TAG_RUNG, lt.TAG_PARAMS, lt.TAG_TOKENS)
LADDER_FLOATS = (lt.TAG_RATIO, lt.TAG_FLOPS)


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
    #: the latest parent's ``search.json`` (an adaptive sweep's searches, :mod:`reports.search_report`)
    search: list[dict[str, Any]] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# One trial run → its identity and metrics
# ---------------------------------------------------------------------------------------------
def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _int_or_na(v: Any):
    x = _num(v)
    return int(x) if math.isfinite(x) and float(x).is_integer() else pd.NA


def _status(run) -> str:
    """The trial's status as the report shows it, from the run :func:`reports.runs.select_trial_runs`
    chose (FINISHED or FAILED; a trial with only RUNNING or KILLED runs is pending, left out): a
    FINISHED run's ``status`` tag (``finished`` without one), else ``failed``."""
    if run.info.status != "FINISHED":
        return "failed"
    tag = (run.data.tags.get(TAG_STATUS) or "").strip().lower()
    return tag if tag in STATUSES else "finished"


def target_mode(metric: str | None, mode: str | None) -> str:
    """``mode`` when it is ``"min"`` or ``"max"``, else inferred from the metric's name: ``"min"``
    for a loss, ``"max"`` for anything else (accuracy)."""
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


def stored_name(metrics: dict[str, float], key: str) -> str | None:
    """The name under which a run's ``metrics`` hold ``key``: ``key`` itself, else its name of
    before the three-split protocol (:data:`harness.core.names.LEGACY_METRICS`), else ``None``."""
    if key in metrics:
        return key
    for old, new in LEGACY_METRICS.items():
        if new == key and old in metrics:
            return old
    return None


def _metric(run, key: str) -> float:
    """The run's latest value of ``key`` (under its legacy name on a run of before the
    three-split protocol); NaN when absent."""
    name = stored_name(run.data.metrics, key)
    return math.nan if name is None else float(run.data.metrics[name])


def _protocol(run) -> str:
    m = run.data.metrics
    new = (M_VALID_LOSS, M_VALID_ACC, M_FINAL_ACC, M_FINAL_LOSS, M_TEST_ACC, M_TEST_LOSS)
    if any(k in m for k in LEGACY_METRICS) and not any(k in m for k in new):
        return PROTOCOL_ONE_SPLIT
    return PROTOCOL_THREE_SPLITS


def _trial_identity(run, attempts: int, experiment: str) -> dict[str, Any]:
    """One trial run's columns: who it is, what it trained, how it ended, its tags and params."""
    tags, params = run.data.tags, run.data.params
    ident = {**_trial_names(run, attempts, experiment), **_trial_tags(run)}
    for t in ENV_TAGS:
        ident[t] = tags.get(t)
    if tags.get(lt.TAG_RUNG) is not None:  # a ladder's trial: its rung as columns
        for t in lt.TAGS:
            ident[t] = tags.get(t)
    for k, v in params.items():
        ident[f"params.{k}"] = v
    return ident


def _trial_names(run, attempts: int, experiment: str) -> dict[str, Any]:
    """A trial run's identity, status and training setup (:func:`_trial_identity`'s first columns)."""
    tags, params = run.data.tags, run.data.params
    seed = tags.get(TAG_SEED, params.get(PARAM_SEED))
    target_metric = params.get(PARAM_TARGET_METRIC)
    if target_metric:
        target_metric = canonical_metric(target_metric)
    # model/optimizer/schedule/dataset: tags; runs of before those tags hold params of the same names
    return {
        "experiment": experiment,
        "sweep": tags.get(TAG_SWEEP, experiment),
        "sweep_id": tags.get(TAG_SWEEP_ID),
        "trial_id": tags[TAG_TRIAL_ID],
        "run_id": run.info.run_id,
        "parent_run_id": tags.get(TAG_PARENT_RUN),
        "attempts": attempts,
        "run_status": run.info.status,
        "status": _status(run),
        "reason": _reason(tags),
        "model": tags.get(TAG_MODEL, params.get(TAG_MODEL, "?")),
        "optimizer": tags.get(TAG_OPTIMIZER, params.get(TAG_OPTIMIZER, "?")),
        "schedule": tags.get(TAG_SCHEDULE, params.get(TAG_SCHEDULE, "")),
        "dataset": tags.get(TAG_DATASET, params.get(TAG_DATASET, "?")),
        "seed": _int_or_na(seed),
        "step_size": _num(params.get(PARAM_STEP_SIZE)),
        "batch_size": _int_or_na(params.get(PARAM_BATCH_SIZE)),
        "train_steps": _int_or_na(params.get(PARAM_STEPS)),
        "target_metric": target_metric,
        "target_value": _num(params.get(PARAM_TARGET_VALUE)),
        "target_mode": target_mode(target_metric, params.get(PARAM_TARGET_MODE)) if target_metric else None,
    }


def _trial_tags(run) -> dict[str, Any]:
    """A trial run's protocol, search, batching and timing columns (after :func:`_trial_names`')."""
    tags = run.data.tags
    return {
        # a sequence task's run: without a target it ranks by loss (core.selection_rule.ranking_metric)
        "language_model": LM_MARKER in run.data.metrics,
        "protocol": _protocol(run),
        "mesh": tags.get(TAG_MESH),
        "perf_suspect": tags.get(TAG_PERF_SUSPECT),  # why its step time is not trusted
        "tuning": tags.get(TAG_TUNING),
        # the search method that proposed it (a grid's trials have no tag)
        "search": tags.get(TAG_SEARCH) or "grid",
        # an early-stopping search's audit: a stopped trial trained to the end (it stands for its
        # twin's seed: tuning_rows)
        "audit_of": tags.get(TAG_AUDIT_OF),
        # how it trained (vmapped or alone, and why) and its vmapped batch's trial ids
        "batching": tags.get(TAG_BATCHING),
        "batch": tags.get(TAG_BATCH),
        # a user's optimizer (source:): the digest of the code its factory depends on, in its trial id
        "source_hash": tags.get(TAG_OPTIMIZER_SOURCE_HASH),
        "search_space": tags.get(TAG_SEARCH_SPACE),
        # epoch ms here; made datetimes for every trial at once (build_frame: 1,000 runs in ms)
        "start_time": run.info.start_time or None,
        "end_time": run.info.end_time or None,
    }


# ---------------------------------------------------------------------------------------------
# Trial runs → the tidy frame
# ---------------------------------------------------------------------------------------------
def build_frame(client, runs: Sequence, experiment: str) -> pd.DataFrame:
    """The tidy frame (see the module docstring) of the trial runs ``runs`` (children of a sweep).

    Runs without a ``harness.trial_id`` tag are ignored. Metric histories are read with
    ``client.get_metric_history`` for the curve metrics each run actually holds, sorted by step.
    """
    chosen = _chosen(runs)
    if not chosen:
        return pd.DataFrame(columns=[*ID_COLUMNS, *CURVE_METRICS, *SUMMARY_METRICS])
    summary = _summary_rows(chosen, experiment)
    per_trial = _histories(client, chosen)
    _fill_best(summary, per_trial)
    c = _curve_rows(summary, per_trial)
    frame = pd.concat([c, summary], ignore_index=True) if c is not None else summary
    return _tidy(frame)


def _chosen(runs: Sequence) -> list[tuple]:
    """``(run, attempts)`` of each trial id among ``runs`` (:func:`reports.runs.select_trial_runs`);
    runs without a ``harness.trial_id`` tag are left out."""
    return list(mlruns.select_trial_runs([r for r in runs if r.data.tags.get(TAG_TRIAL_ID)]).values())


def summary_rows(runs: Sequence, experiment: str) -> pd.DataFrame:
    """The summary rows (no curves, no metric histories read) of the trial runs ``runs``: one per
    trial id, chosen as :func:`build_frame` chooses; empty when none carries a trial id."""
    chosen = _chosen(runs)
    return _summary_rows(chosen, experiment) if chosen else pd.DataFrame(columns=ID_COLUMNS)


def _summary_rows(chosen: list[tuple], experiment: str) -> pd.DataFrame:
    """One summary row per trial (``chosen``: ``(run, attempts)`` pairs): identity, labels and
    summary metrics, a finished trial's missing final value taken from its validation curve."""
    summary = pd.DataFrame([_trial_identity(run, n, experiment) for run, n in chosen])
    for t in ("start_time", "end_time"):
        summary[t] = pd.to_datetime(summary[t].astype("float64"), unit="ms", utc=True)
    summary["row"] = "summary"
    summary["step"] = pd.array([pd.NA] * len(summary), dtype="Int64")
    for m in SUMMARY_METRICS:
        summary[m] = [_metric(run, m) for run, _ in chosen]
    summary["tokens_per_step"] = tokens_per_step(summary)
    # a language model's last validation bits per byte (logged where bytes per token are known)
    summary[FINAL_BPB] = [run.data.metrics.get(PREFIX_VALID + BITS_PER_BYTE, math.nan) for run, _ in chosen]
    # A finished trial without final/* metrics: MLflow's latest value of the validation curve (the
    # value at the largest step) is its final value.
    for final, curve in ((M_FINAL_ACC, M_VALID_ACC), (M_FINAL_LOSS, M_VALID_LOSS)):
        latest = [_metric(run, curve) for run, _ in chosen]
        fill = summary[final].isna() & (summary["status"] == "finished")
        summary.loc[fill, final] = pd.Series(latest, index=summary.index)[fill]
    return add_labels(summary)


#: The dataset param a language model's context length is logged under.
SEQ_LEN_PARAM = "params.dataset.seq_len"


def tokens_per_step(s: pd.DataFrame) -> pd.Series:
    """Tokens one optimizer step consumes, per summary row of a language model (column
    ``tokens_per_step``): a ladder's ``ladder.tokens`` / ``train.steps``, else ``train.batch_size`` ×
    ``dataset.seq_len``; ``NaN`` for any other task or where neither is logged.

    Args:
      s: summary rows (``language_model`` and ``params.*`` columns, as MLflow stores them).
    Returns:
      a ``float64`` Series on ``s``'s index.
    """
    def num(col: str) -> pd.Series:
        return pd.to_numeric(s[col], errors="coerce").astype("float64") if col in s \
            else pd.Series(np.nan, index=s.index)

    lm = s["language_model"].fillna(False).astype(bool) if "language_model" in s \
        else pd.Series(False, index=s.index)
    per = num(f"params.{PARAM_BATCH_SIZE}") * num(SEQ_LEN_PARAM)
    if lt.TAG_TOKENS in s:
        ladder = num(lt.TAG_TOKENS) / num(f"params.{PARAM_STEPS}")
        per = ladder.where(ladder.notna(), per)
    return per.where(lm).astype("float64")


def _histories(client, chosen: list[tuple]) -> dict[int, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Trial index → curve metric → ``(steps, values)``, for the curve metrics each run holds."""
    jobs = []  # (trial index, run id, the name MLflow holds, the column it fills)
    for i, (run, _) in enumerate(chosen):
        for key in CURVE_METRICS:
            name = stored_name(run.data.metrics, key)
            if name is not None:
                jobs.append((i, run.info.run_id, name, key))
    hists = mlruns.metric_histories(client, [(rid, name) for _i, rid, name, _key in jobs])
    per_trial: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for (i, _rid, _stored, key), h in zip(jobs, hists, strict=True):
        per_trial.setdefault(i, {})[key] = h
    return per_trial


def _fill_best(summary: pd.DataFrame, per_trial: dict) -> None:
    """A finished trial without best/* metrics (logged before them): its validation curve's best
    evaluation (the same rule as the logged value: harness.core.selection_rule.best_of); in place."""
    for best, curve, higher in ((M_BEST_ACC, M_VALID_ACC, True), (M_BEST_LOSS, M_VALID_LOSS, False)):
        for i, metrics in per_trial.items():
            if curve in metrics and math.isnan(summary.at[i, best]) and summary.at[i, "status"] == "finished":
                b = best_of(list(metrics[curve][1]), higher)
                summary.at[i, best] = math.nan if b is None else b


def _curve_rows(summary: pd.DataFrame, per_trial: dict) -> pd.DataFrame | None:
    """One curve row per (trial, logged step) with the trial's identity columns; ``None`` without
    curves."""
    if not per_trial:
        return None
    ident_cols = [c for c in summary.columns
                  if c not in SUMMARY_METRICS and c not in ("row", "step", FINAL_BPB)]
    # every trial's steps and values as arrays, one frame of them all (a frame per trial: 1,000 frames)
    columns: dict[str, list[np.ndarray]] = {"_trial": [], "step": [], **{key: [] for key in CURVE_METRICS}}
    for i, metrics in per_trial.items():
        steps = np.unique(np.concatenate([s for s, _ in metrics.values()]))
        columns["_trial"].append(np.full(len(steps), i))
        columns["step"].append(steps)
        for key in CURVE_METRICS:
            s, v = metrics.get(key, (np.zeros(0, np.int64), np.zeros(0)))
            col = np.full(len(steps), np.nan)
            col[np.searchsorted(steps, s)] = v
            columns[key].append(col)
    c = pd.DataFrame({k: np.concatenate(v) for k, v in columns.items()})
    c = c.join(summary[ident_cols], on="_trial").drop(columns="_trial")
    c["row"] = "curve"
    c["step"] = c["step"].astype("Int64")
    return c


def _tidy(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame's columns in their order and dtypes (a ladder's tags as numbers), its rows sorted
    by task, optimizer, configuration, seed, trial, curve before summary, step."""
    for key in CURVE_METRICS:
        if key not in frame:
            frame[key] = np.nan
    lead = [c for c in ID_COLUMNS if c in frame.columns]
    rest = [*CURVE_METRICS, *SUMMARY_METRICS, *([FINAL_BPB] if FINAL_BPB in frame else [])]
    pcols = sorted(c for c in frame.columns if c.startswith("params."))
    frame = frame[lead + rest + pcols]
    frame["step"] = frame["step"].astype("Int64")
    frame["seed"] = frame["seed"].astype("Int64")
    for t in (t for t in lt.TAGS if t in frame):  # a ladder's tags: numbers as numbers
        if t in LADDER_INTS or t in LADDER_FLOATS:
            num = pd.to_numeric(frame[t], errors="coerce")
            frame[t] = num.astype("Int64") if t in LADDER_INTS else num.astype("float64")
        else:
            frame[t] = frame[t].astype(object).where(frame[t].notna(), None)
    order = {"curve": 0, "summary": 1}
    return frame.sort_values(
        ["task", "optimizer", "config", "seed", "trial_id", "row", "step"],
        key=lambda s: s.map(order) if s.name == "row" else s,
        na_position="last",
        kind="stable",
    ).reset_index(drop=True)


def load_sweep(
    experiment: str, sweep_id: str | None = None, tracking_uri: str | None = None, *, client=None
) -> SweepData:
    """Read one sweep of ``experiment`` (the latest one when ``sweep_id`` is None).

    Raises:
      ValueError: no such experiment (with the closest name), or no run with that sweep id
        (listing the sweep ids the experiment holds).
    """
    client = client or mlruns.mlflow_client(tracking_uri)
    exp = mlruns.get_experiment(client, experiment)
    if sweep_id is None:
        sweep_id = mlruns.latest_sweep_id(client, exp.experiment_id, experiment)
    runs = mlruns.sweep_runs(client, exp.experiment_id, sweep_id)
    if not runs:
        known = mlruns.known_sweep_ids(client, exp.experiment_id)
        raise ValueError(
            f"experiment {experiment!r} has no run with {TAG_SWEEP_ID} = {sweep_id!r}; "
            f"sweep ids there: {known}"
        )
    parents = [r for r in runs if mlruns.is_parent(r)]
    runs = runs + mlruns.carried_over_runs(client, exp.experiment_id, parents, runs)
    frame = build_frame(client, runs, experiment)
    frame.attrs.update(
        experiment=experiment, sweep_id=sweep_id, parent_run_ids=[p.info.run_id for p in parents]
    )
    frame.attrs.update(sweep_settings(parents))
    if budget := sweep_budget(parents):
        frame.attrs[SWEEP_BUDGET_ATTR] = budget
        frame.attrs[SWEEP_BUDGET_PARENTS_ATTR] = budget_parents(parents)
    return SweepData(
        experiment=experiment,
        experiment_id=exp.experiment_id,
        sweep_id=sweep_id,
        frame=frame,
        parents=parents,
        config_yaml=mlruns.config_yaml(client, parents),
        tracking_uri=str(client.tracking_uri if hasattr(client, "tracking_uri") else ""),
        search=read_search(client, parents),
    )


def load_frame(experiment: str, sweep_id: str | None = None, tracking_uri: str | None = None) -> pd.DataFrame:
    """The tidy frame of one sweep of ``experiment``.

    Args:
      experiment: the MLflow experiment (the sweep's ``name``).
      sweep_id: the ``harness.sweep_id`` tag; ``None``: the experiment's latest sweep.
      tracking_uri: the store (``None``: ``MLFLOW_TRACKING_URI``, else MLflow's default).

    Returns:
      a DataFrame: one row per trial and logged step (``row == "curve"``) plus one per trial
      (``row == "summary"``) with the perf and convergence metrics (module docstring);
      ``frame.attrs`` holds ``experiment``, ``sweep_id`` and ``parent_run_ids``.

    Raises:
      ValueError: unknown experiment or sweep id (the message lists what exists).
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
    copy. Frames are treated as immutable once loaded: every view here only reads them; a view may
    read the frame's ``attrs`` (the selection objective, :data:`SELECT_BY_ATTR`), which are part of
    the key, so a frame whose objective is changed is not served the old selection."""

    @functools.wraps(fn)
    def view(frame: pd.DataFrame) -> pd.DataFrame:
        key = (fn.__qualname__, id(frame), repr(sorted(frame.attrs.items())))
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


def tuning_rows(s: pd.DataFrame, audits: bool = True) -> pd.DataFrame:
    """The summary rows selection and seed counts read, one row per configuration and seed
    (:func:`_last_rounds`): an early-stopping search's audit trial (``audit_of``: a stopped trial
    trained to the end) stands for its stopped twin's seed, so a configuration an audit trained to
    the end competes like any other fully trained one; ``audits=False``: without them (what early
    stopping alone would have selected). Returned without the
    frame's ``attrs`` (read them from the frame): pandas deep-copies them into every slice, and the
    per-configuration loops over these rows make hundreds of thousands of slices."""
    out = s if audits or "audit_of" not in s else s[s["audit_of"].isna()].reset_index(drop=True)
    out = _last_rounds(out)
    out = out.copy(deep=False) if out is s else out
    out.attrs = {}
    return out


def _last_rounds(s: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, optimizer, configuration, seed): successive halving trains a promoted
    configuration again to each round's rung under another trial id, and those restarts were
    counted as seeds (``1/3 seeds finished`` for one seed). Of several rows, a trial that was not
    stopped wins, else the last to end (the latest round)."""
    key = ["task", "optimizer", "config_id", "seed"]
    if s.empty or not set(key) <= set(s) or not s.duplicated(key).any():
        return s
    order = s.assign(_stopped=(s["status"] == "stopped")).sort_values(
        ["_stopped", "end_time"], ascending=[True, False], kind="stable", na_position="last")
    keep = order.drop_duplicates(key).index
    return s.loc[sorted(keep)].reset_index(drop=True)


def curves(frame: pd.DataFrame) -> pd.DataFrame:
    """The step rows (``row == "curve"``)."""
    return frame[frame["row"] == "curve"].reset_index(drop=True)


def trusted(s: pd.DataFrame) -> pd.Series:
    """Which summary rows' measured step time is trusted: no ``perf.suspect`` tag (a step time that
    disagreed with the trial's own training clock is left out of what compares step times)."""
    return s["perf_suspect"].isna() if "perf_suspect" in s else pd.Series(True, index=s.index)
