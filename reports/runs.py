"""Reading a sweep's runs from MLflow: paging, parents, the sweep id, metric histories, artifacts.

Everything here talks to an ``MlflowClient`` and returns MLflow's own objects (``Run``, lists of
``Metric``) or plain arrays; :mod:`reports.frame` turns them into the tidy frame. Every tag, param,
metric and artifact name is :mod:`harness.core.names`' (the layout ``harness.tracking`` writes;
``docs/architecture.md``, "MLflow conventions"). ``mlflow`` is imported on first use.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from harness.core.artifact_text import artifact_text
from harness.core.filters import literal, tag_is
from harness.core.names import (
    ARTIFACT_CONFIG,
    ARTIFACT_TRIALS,
    KIND_PARENT,
    TAG_KIND,
    TAG_PARENT_RUN,
    TAG_SEARCH,
    TAG_SWEEP_ID,
    TAG_TRIAL_ID,
    is_adaptive_search,
)

#: Runs per ``search_runs`` page (MLflow's server maximum is 50,000; its default 1,000).
PAGE_SIZE = 1000
#: Threads that read metric histories (I/O bound; helps most against a remote server).
HISTORY_THREADS = 8
#: Environment variable of MLflow's artifact download progress bar (switched off while reading).


def mlflow_client(tracking_uri: str | None):
    """An ``MlflowClient`` of ``tracking_uri`` (``None``: MLflow's default store)."""
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def unfinished_words(parents: Sequence, shown: int) -> str:
    """What a report of a sweep that is not over says above its numbers (``""`` for one that is):
    a fixed sweep whose parents' ``n_trials`` (the config's plan) exceeds the ``shown`` trials
    with a result, "407 of the sweep's 1,000 trials have a result; 593 are still to run ...";
    an adaptive one whose last invocation did not finish, that its search is not over
    (``status`` says so too).
    ``parents``: the sweep's parent runs, oldest first."""
    if not parents:
        return ""
    last = parents[-1]
    state = last.info.status
    again = "run the sweep again to finish it (`python -m harness status` tells whether one is running)"
    if is_adaptive_search(last.data.tags.get(TAG_SEARCH)):  # its trials are proposed as results arrive
        if state == "FINISHED":  # (one that ran --only part of it: its user chose so)
            return ""
        return f"The sweep's adaptive search is not over (its last invocation is {state}): {again}."
    planned = max((int(p.data.params.get("n_trials") or 0) for p in parents), default=0)
    if planned <= shown:
        return ""
    return (f"{shown:,} of the sweep's {planned:,} trials have a result; {planned - shown:,} are still "
            f"to run (its last invocation is {state}): {again}.")


def quote(v: str) -> str:
    """``v`` as a string literal of MLflow's search syntax (:func:`harness.core.filters.literal`).

    Raises:
      ValueError: ``v`` holds a backslash, or both kinds of quote.
    """
    return literal(v)


def search_all_runs(
    client, experiment_ids: Sequence[str], filter_string: str = "", page_size: int | None = None
) -> list:
    """Every active run matching ``filter_string``, reading ``search_runs`` page by page.

    MLflow returns at most ``max_results`` runs per call and a ``token`` for the next page; this
    follows the tokens until none is left, so a sweep of more than 1,000 runs is read in full.
    Runs come oldest first (``start_time`` ascending, then run id).
    """
    runs: list = []
    token = None
    while True:
        page = client.search_runs(
            list(experiment_ids),
            filter_string,
            run_view_type=_active_only(client),
            max_results=page_size or PAGE_SIZE,
            order_by=["attributes.start_time ASC"],
            page_token=token,
        )
        runs.extend(page)
        token = getattr(page, "token", None)
        if not token:
            return runs


def _active_only(client):
    """MLflow's ``ViewType.ACTIVE_ONLY``; a :class:`reports.snapshot.StoreSnapshot` reads active runs
    only and takes ``None`` (MLflow is not imported for it)."""
    if getattr(client, "active_only", False):
        return None
    from mlflow.entities import ViewType

    return ViewType.ACTIVE_ONLY


def sweep_runs(client, experiment_id: str, sweep_id: str) -> list:
    """Every active run of the experiment tagged with ``sweep_id`` (parents and trials), oldest first."""
    try:
        flt = tag_is(TAG_SWEEP_ID, sweep_id)
    except ValueError:  # no filter says it, and no sweep id holds a backslash or both quotes
        return []
    return search_all_runs(client, [experiment_id], flt)


def experiment_of_sweep(client, sweep_id: str) -> str | None:
    """The name of the first experiment (in MLflow's order) holding a run tagged with ``sweep_id``."""
    try:
        flt = tag_is(TAG_SWEEP_ID, sweep_id)
    except ValueError:  # as in sweep_runs
        return None
    for exp in client.search_experiments():
        if len(client.search_runs([exp.experiment_id], flt, max_results=1)):
            return exp.name
    return None


def get_experiment(client, name: str):
    """The MLflow experiment called ``name``.

    Raises:
      ValueError: no such experiment (the message names the closest name and lists them all).
    """
    exp = client.get_experiment_by_name(name)
    if exp is None:
        names = [e.name for e in client.search_experiments()]
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)  # as harness.core.builders does
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"no MLflow experiment named {name!r}{hint}; "
            f"experiments in this store: {sorted(names)}"
        )
    return exp


def parent_filter() -> str:
    """The search filter of a sweep's parent runs (tagged ``harness.kind = parent``)."""
    return f"tags.`{TAG_KIND}` = {quote(KIND_PARENT)}"


def is_parent(run) -> bool:
    """Whether ``run`` is a sweep's parent run: tagged so, or (older runs) neither a trial nor a child."""
    tags = run.data.tags
    if tags.get(TAG_KIND) == KIND_PARENT:
        return True
    return not tags.get(TAG_TRIAL_ID) and not tags.get(TAG_PARENT_RUN)


def latest_sweep_id(client, experiment_id: str, experiment: str) -> str:
    """The sweep id of the experiment's latest parent run (else of its latest run with a sweep id).

    Raises:
      ValueError: no run of the experiment has a sweep id.
    """
    for flt in (parent_filter(), f"tags.`{TAG_SWEEP_ID}` != ''"):
        page = client.search_runs(
            [experiment_id], flt, max_results=1, order_by=["attributes.start_time DESC"]
        )
        for run in page:
            sid = run.data.tags.get(TAG_SWEEP_ID)
            if sid:
                return sid
    raise ValueError(f"experiment {experiment!r} has no run tagged {TAG_SWEEP_ID!r}: nothing to report")


def known_sweep_ids(client, experiment_id: str) -> list[str]:
    """The sweep ids of the experiment's parent runs, sorted (for an error message)."""
    runs = search_all_runs(client, [experiment_id], parent_filter())
    return sorted({r.data.tags.get(TAG_SWEEP_ID) for r in runs} - {None})


def select_trial_runs(children: Iterable) -> dict[str, tuple[Any, int]]:
    """trial_id → (the run the report uses, number of runs of that trial).

    The latest FINISHED run of a trial wins; a trial with none uses its latest FAILED run (shown
    failed). A trial with neither, only RUNNING or KILLED runs, is left out: it is pending, as
    :func:`harness.tracking.trial_run.trial_state` and ``status`` say (a trial run is created with
    its result's tags, so a RUNNING one is a write cut short, and the next sweep trains it again;
    shown, it made a task of its own, its params never written, ranked 1).
    """
    by_trial: dict[str, list] = {}
    for run in children:
        by_trial.setdefault(run.data.tags[TAG_TRIAL_ID], []).append(run)
    out = {}
    for tid, runs in by_trial.items():
        runs.sort(key=lambda r: (r.info.start_time or 0, r.info.run_id))
        finished = [r for r in runs if r.info.status == "FINISHED"]
        failed = [r for r in runs if r.info.status == "FAILED"]
        if finished or failed:
            out[tid] = ((finished or failed)[-1], len(runs))
    return out


def metric_history(client, run_id: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps int64, values float64) of one metric of one run, by ascending step; a step logged
    twice keeps its later value (by timestamp)."""
    return _as_arrays(client.get_metric_history(run_id, key))


def _as_arrays(hist: list) -> tuple[np.ndarray, np.ndarray]:
    """:func:`metric_history` of the ``Metric`` list MLflow returned."""
    if not hist:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    # Same step logged twice: the later timestamp wins (sort is stable on step, then timestamp).
    hist = sorted(hist, key=lambda m: (m.step, m.timestamp))
    steps = np.array([m.step for m in hist], np.int64)
    vals = np.array([m.value for m in hist], np.float64)
    last = np.r_[steps[1:] != steps[:-1], True]
    return steps[last], vals[last]


def metric_histories(client, wanted: Sequence[tuple[str, str]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`metric_history` of every ``(run_id, key)`` in ``wanted``, in order, read by up to
    :data:`HISTORY_THREADS` threads; a client that reads histories in bulk
    (``metric_arrays(wanted)``, :class:`reports.snapshot.StoreSnapshot`) gives them so."""
    if (bulk := getattr(client, "metric_arrays", None)) is not None:
        return bulk(wanted)
    with ThreadPoolExecutor(max_workers=max(1, min(HISTORY_THREADS, len(wanted)))) as pool:
        return list(pool.map(lambda w: metric_history(client, w[0], w[1]), wanted))


def download_text(client, run_id: str, artifact: str) -> str | None:
    """The text of one artifact of a run, or ``None`` (:func:`harness.core.artifact_text.artifact_text`)."""
    return artifact_text(client, run_id, artifact)


def config_yaml(client, parents: Sequence) -> str | None:
    """The text of the latest parent run's ``config.yaml`` that can be read (``None``: not logged)."""
    for run in reversed(parents):
        text = download_text(client, run.info.run_id, ARTIFACT_CONFIG)
        if text is not None:
            return text
    return None


def carried_over_runs(client, experiment_id: str, parents: Sequence, runs: Sequence) -> list:
    """FINISHED trial runs that belong to this sweep but carry another ``harness.sweep_id``: a sweep
    whose search grew (``trials`` 16 → 32) has a new sweep id, and skips the trials an earlier
    invocation finished (same ``trial_id``, or its ``legacy_trial_id``). The sweep's trials are read
    from its parent runs' ``trials.json``; of several FINISHED runs of one trial the earliest is taken."""
    want: set[str] = set()
    for p in parents:
        text = download_text(client, p.info.run_id, ARTIFACT_TRIALS)
        try:
            listed = json.loads(text or "[]")
            want |= {str(t["trial_id"]) for t in listed}
            # a trial finished under the id it had while the target was part of it (resume: runs_of)
            want |= {str(t["legacy_trial_id"]) for t in listed if t.get("legacy_trial_id")}
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
