"""``status``: per sweep in a store, its trials finished / diverged / failed / pending and the state
of its last parent run; a sweep superseded by a newer version of its config (the same name, other
trials: another sweep id) says so, and which sweep id superseded it (:func:`superseded`)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import typer

from harness.cli.shared import URI_HELP, err, exit_no_experiment
from harness.core.names import (
    KIND_PARENT,
    TAG_HEARTBEAT,
    TAG_KIND,
    TAG_OWNER,
    TAG_OWNER_START,
    TAG_PARENT_RUN,
    TAG_SEARCH,
    TAG_STATUS,
    TAG_SWEEP_ID,
    TAG_TRIAL_ID,
    is_adaptive_search,
)
from harness.core.redact import mask_uri


def status(
    config: Path | None = typer.Argument(None, help="A sweep config: count its pending trials exactly."),
    experiment: str | None = typer.Option(None, "--experiment", "-e", help="Only this sweep name."),
    tracking_uri: str | None = typer.Option(None, "--tracking-uri", help=URI_HELP),
) -> None:
    """Per sweep: finished / diverged / failed / pending trials."""
    from harness.tracking.client import by_trial, search_all
    from harness.tracking.store_errors import TrackingUnavailableError
    from harness.tracking.uris import resolve_tracking_uri

    # reading a parent's trials.json is not worth a progress bar on stderr per sweep
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    uri = resolve_tracking_uri(tracking_uri)
    expected: dict[str, set[str]] = {}
    adaptive_sid: str | None = None  # the sweep id of a given adaptive config
    names: list[str] | None = [experiment] if experiment else None
    if config is not None:
        uri, expected, adaptive_sid, name = _config_sweep(config, tracking_uri)
        names = [name]
    try:
        client = _reader(uri, names[0] if names else None)
    except TrackingUnavailableError as e:
        err(f"error: {e}")
        raise typer.Exit(3) from None
    exps = [client.get_experiment_by_name(n) for n in names] if names else client.search_experiments()
    if experiment and config is None and exps[0] is None:
        exit_no_experiment(client, experiment, uri)
    rows: list[tuple[str, ...]] = []
    for exp in exps:
        if exp is None:
            continue
        # one read of the experiment's runs: its parents and its trials apart
        runs = search_all(client, exp.experiment_id)
        parents = [r for r in runs if r.data.tags.get(TAG_KIND) == KIND_PARENT]
        sweep_ids = _sweep_ids(parents, expected, adaptive_sid)
        current = next(iter(expected), adaptive_sid)
        newer = superseded({sid: d["last"] for sid, d in sweep_ids.items()}, current)
        trials = by_trial(runs)
        rows += [_sweep_row(client, exp.name, sid, d, trials, expected, newer)
                 for sid, d in sweep_ids.items()]
    if not rows:
        from harness.orchestrate.tables import stdout_console

        where = f"experiment {names[0]!r}" if names else mask_uri(uri)
        stdout_console().print(f"no sweeps in {where} yet: a sweep's runs appear here once "
                               f"'python -m harness sweep CONFIG' has opened it", soft_wrap=True)
        return
    _print_status(uri, rows)


def _config_sweep(config: Path, tracking_uri: str | None
                  ) -> tuple[str, dict[str, set[str]], str | None, str]:
    """What sweep config ``config`` expects: its store's URI, ``{sweep_id: trial ids}`` of a fixed
    sweep (empty for an adaptive one), an adaptive one's sweep id (else ``None``) and its name.

    Raises:
      typer.Exit: 2, after one ``invalid sweep config`` message, when the config does not load.
    """
    from harness.config.errors import ConfigError
    from harness.config.load import load_config
    from harness.orchestrate.run import expand, sweep_id_of
    from harness.tracking.uris import resolve_tracking_uri

    try:
        cfg = load_config(config)
    except ConfigError as e:
        err(f"invalid sweep config:\n{e}")
        raise typer.Exit(2) from None
    uri = resolve_tracking_uri(tracking_uri, cfg.tracking_uri)
    specs = expand(cfg)
    try:  # an adaptive search's sweep id hashes its candidates, as the sweep computes it
        from harness.orchestrate.searchers import searcher_for

        search = searcher_for(specs, cfg.selection.by)
    except ConfigError as e:
        err(f"invalid sweep config:\n{e}")
        raise typer.Exit(2) from None
    if search.adaptive:  # its trials are the store's to say: they are proposed as results arrive
        return uri, {}, sweep_id_of(cfg.name, search.candidates()), cfg.name
    return uri, {sweep_id_of(cfg.name, specs): {s.trial_id for s in specs}}, None, cfg.name


def _sweep_ids(parents: list, expected: dict[str, set[str]], adaptive_sid: str | None) -> dict[str, dict]:
    """``{sweep_id: {"n": its most trials, "last": its latest parent run or None}}`` of one
    experiment's parent runs, with the expected sweep ids not run yet."""
    sweep_ids: dict[str, dict] = {}
    for p in sorted(parents, key=lambda r: r.info.start_time):
        sid = p.data.tags.get(TAG_SWEEP_ID, "?")
        d = sweep_ids.setdefault(sid, {"n": 0, "last": p})
        d["last"] = p
        d["n"] = max(d["n"], int(p.data.params.get("n_trials", 0) or 0))
    for sid in expected:
        sweep_ids.setdefault(sid, {"n": len(expected[sid]), "last": None})
    if adaptive_sid is not None:
        sweep_ids.setdefault(adaptive_sid, {"n": 0, "last": None})
    return sweep_ids


def _sweep_row(client, exp_name: str, sid: str, d: dict, trials: dict, expected: dict[str, set[str]],
               newer: dict[str, str]) -> tuple[str, ...]:
    """One sweep id's row: name, id, trials, finished, diverged, failed, pending, last run,
    version, stopped (all ``str``)."""
    from harness.tracking.trial_run import trial_state

    last = d["last"]
    adaptive = last is not None and is_adaptive(last)
    open_search = adaptive and search_open(last)
    # the trials that ran under this sweep id, and the sweep's own list of its trials: a
    # fixed sweep's every trial; an adaptive one's those proposed, final once its search is
    # over (a killed one's list may hold candidates it never trains: Optuna's)
    ids = {tid for tid, rs in trials.items() if any(r.data.tags.get(TAG_SWEEP_ID) == sid for r in rs)}
    if sid in expected:
        ids |= expected[sid]
    elif last is not None and not open_search:
        ids |= _listed_trials(client, last, trials) or set()
    c = {"finished": 0, "diverged": 0, "failed": 0, "stopped": 0}
    for tid in ids:  # the one rule for what a trial's runs say (harness.tracking.trial_run)
        state, _ = trial_state(trials.get(tid, []))
        if state in c:
            c[state] += 1
    # an adaptive sweep's n_trials param is its candidates (coordinate descent's: the whole
    # grid, the most it could train), not what it trains
    n = len(ids) if adaptive else max(d["n"], len(ids))
    pending = n - sum(c.values())
    last_s = "—" if last is None else _parent_state(client, last)
    version = f"superseded by {newer[sid]}" if sid in newer else "current"
    pending_s = "? (search not over)" if open_search else str(pending)
    return (exp_name, sid, str(n), str(c["finished"]), str(c["diverged"]), str(c["failed"]),
            pending_s, last_s, version, str(c["stopped"]))


def _print_status(uri: str, rows: list[tuple[str, ...]]) -> None:
    """The table of ``rows`` (:func:`_sweep_row`) on stdout, then the local spool's count if any."""
    from rich.table import Table

    from harness.orchestrate.tables import print_table, stdout_console
    from harness.tracking import spool

    # early stopping: stopped trials are done, counted apart, in a column of their own
    # only where a sweep has some
    stops = any(r[-1] != "0" for r in rows)
    rows = [(*r[:6], *((r[-1],) if stops else ()), *r[6:-1]) for r in rows]
    versions = any(r[-1] != "current" for r in rows)  # the column only where a sweep is superseded
    t = Table(title=f"sweeps in {mask_uri(uri)}")
    for col in ("sweep", "sweep_id", "trials", "finished", "diverged", "failed",
                *(("stopped (early)",) if stops else ()), "pending", "last run",
                *(("version",) if versions else ())):
        # names and ids are never truncated: they are what users copy into other commands
        t.add_column(col, no_wrap=col not in ("last run", "version"), overflow="fold")
    for r in rows:
        t.add_row(*(r if versions else r[:-1]))
    console = stdout_console()
    print_table(console, t)  # a narrow terminal: one block per sweep, nothing cut
    n_spooled = len(spool.entries(uri))
    if n_spooled:
        console.print(f"{n_spooled} trained results are in the local spool {spool.spool_dir(uri)} (the "
                      f"store did not take them); the next sweep on this store writes them", soft_wrap=True)


#: The tags ``status`` reads (what a trial's runs say, which sweep they belong to, who owns them).
STATUS_TAGS = (TAG_KIND, TAG_SWEEP_ID, TAG_TRIAL_ID, TAG_STATUS, TAG_OWNER, TAG_OWNER_START, TAG_HEARTBEAT,
               TAG_PARENT_RUN, TAG_SEARCH)


def is_adaptive(parent) -> bool:
    """Whether the sweep of the parent run ``parent`` ran an adaptive method (its ``harness.search``
    tag): its trials are proposed as results arrive."""
    return is_adaptive_search(parent.data.tags.get(TAG_SEARCH))


def search_open(parent) -> bool:
    """Whether the adaptive search of the sweep whose last parent run is ``parent`` may still
    propose trials: that invocation did not finish the whole config (its run is not FINISHED, or
    it ran ``--only`` part of it). Its pending count is then unknown: ``status`` says "?"."""
    return is_adaptive(parent) and (parent.info.status != "FINISHED" or bool(parent.data.params.get("only")))


def _reader(uri: str, experiment: str | None):
    """What ``status`` reads the store with: a local SQLite store through a read-only
    :class:`reports.snapshot.StoreSnapshot` of the tags and params it needs (no MLflow import:
    a 10,000-trial store in about a second instead of a minute), any other through MLflow's client.
    A store SQLite cannot open where it is (its folder not writable) is read as an immutable
    snapshot, with one warning line (:func:`harness.tracking.store_state.snapshot_warning`).

    Raises:
      TrackingUnavailableError: the store cannot be opened (one line).
    """
    from harness.tracking.client import prepare_store, ready_sqlite_store
    from harness.tracking.store_errors import SnapshotOnlyError

    try:
        db, snapshot = ready_sqlite_store(uri, create=False), False
    except SnapshotOnlyError as e:
        db, snapshot = e.db, True
    if db is not None:
        from reports.snapshot import StoreSnapshot

        try:
            reader = StoreSnapshot(str(db), experiment, tag_keys=STATUS_TAGS, param_keys=("n_trials", "only"),
                                   metrics=False, immutable=snapshot)
        except (ValueError, OSError, sqlite3.Error):  # not readable so: MLflow says why
            pass
        else:
            if snapshot:
                from harness.tracking.store_state import snapshot_warning

                err(f"warning: {snapshot_warning(db)}")
            return reader
    return prepare_store(uri, create=False)


def superseded(last: dict[str, object], current: str | None = None) -> dict[str, str]:
    """``{sweep_id: the sweep_id that superseded it}`` among the versions of one config (one
    experiment's sweep ids; ``last``: each one's latest parent run, ``None`` for a version not run
    yet): the current version is ``current`` (the config given to ``status``) if given, else the
    one whose latest parent run started last; every other version is superseded by it."""
    if current is None:
        started = {sid: p.info.start_time for sid, p in last.items() if p is not None}
        if not started:
            return {}
        current = max(started, key=lambda sid: started[sid])
    return {sid: current for sid in last if sid != current}


def _listed_trials(client, parent, trials: dict | None = None) -> set[str] | None:
    """The trial ids a parent run lists in its ``trials.json`` (every trial of its sweep, those
    skipped as done under an earlier sweep id included), or ``None`` when it has none. A trial done
    under its ``legacy_trial_id`` (its runs in ``trials``, ``{trial_id: [runs]}``, under that id
    only: a store written while the target was part of the id) is counted under it."""
    import json

    from harness.core.artifact_text import artifact_text
    from harness.core.names import ARTIFACT_TRIALS

    text = artifact_text(client, parent.info.run_id, ARTIFACT_TRIALS)
    try:  # an old parent without the list, or an unreadable one: count by tags
        if text is None:
            return None
        trials = trials or {}
        return {t["legacy_trial_id"] if t.get("legacy_trial_id") in trials and t["trial_id"] not in trials
                else t["trial_id"] for t in json.loads(text)}
    except Exception:
        return None


def _parent_state(client, run) -> str:
    """``name (STATUS)``; for a RUNNING parent also whether its process is alive, e.g.
    ``sweep-... (RUNNING, but its process host:123 is gone; the next sweep marks it KILLED)``."""
    from harness.tracking.liveness import run_liveness

    s = f"{run.info.run_name} ({run.info.status}"
    if run.info.status == "RUNNING":
        state, why = run_liveness(client, run)
        if state == "gone":
            s += f", but {why}; the next sweep marks it KILLED"
        elif state == "alive":
            s += f": {why}"
        else:
            s += f": {why}"
    return s + ")"
