"""Comparison reports: MLflow runs → tidy DataFrame → seaborn figures → one self-contained HTML file.

Public API:

* :func:`make_report` — what ``python -m harness report`` calls.
* :func:`load_frame` — the tidy frame of one sweep (see :mod:`reports.frame`).
* :func:`reports.results.results` (``harness.results``) — a sweep's results as tidy numeric
  tables for notebooks and papers (``docs/python-api.md``); a local SQLite store is read by
  :mod:`reports.snapshot`, the tables are :mod:`reports.tidy`'s.

Submodules, low to high: :mod:`reports.runs` (reading MLflow), :mod:`reports.labels` (task and
configuration labels), :mod:`reports.frame` (the tidy frame), :mod:`reports.objectives` (what
"better" means per task), :mod:`reports.selection` (best configuration per optimizer and task),
:mod:`reports.protocol` (selection on validation, test headline, tuning curves, tuned
time-to-result, intervals and paired comparisons), :mod:`reports.scoring` (performance profiles,
AlgoPerf's score), :mod:`reports.ranks` (shared ranks), :mod:`reports.compare` (``--baseline``
regression flags), :mod:`reports.leaderboard`, :mod:`reports.layout` and :mod:`reports.style`
(labels, sizes and look of figures), the figure families ``reports.fig_*``,
:mod:`reports.interactive` (Vega-Lite views), :mod:`reports.figures` (the report's figures, each a
view of the frame) and :mod:`reports.html` (the Jinja2 page). Every MLflow name is
:mod:`harness.core.names`'; ``reports`` imports nothing of ``harness`` but ``harness.core``, and
nothing of ``harness`` imports ``reports`` but the CLI. Heavy imports (mlflow, matplotlib, seaborn)
happen on first use, never at ``import reports``; the trainer is never imported.
"""

from __future__ import annotations

import pathlib
import re
import warnings

import pandas as pd

from harness.core.clock import CLOCKS, DEFAULT_CLOCK
from harness.core.names import TAG_SELECT_BY, TAG_SWEEP_ID
from harness.core.reached import parse_target
from harness.core.selection_rule import SELECT_BY
from reports import runs as mlruns
from reports import stats
from reports.batch_flags import observed_elsewhere
from reports.compare import compare
from reports.frame import SELECT_BY_ATTR, SWEEP_TIME_ATTR, load_frame, load_sweep, summaries
from reports.leaderboard import leaderboard
from reports.objectives import objective
from reports.protocol import SCORING, SCORING_ATTR, TUNING_DRAWS, TUNING_DRAWS_ATTR, csv_rows
from reports.report_clock import use_clock
from reports.retarget import retarget
from reports.safe_cells import spreadsheet_safe
from reports.selection import select_by as select_of
from reports.snapshot import snapshot_or_client

__all__ = ["load_frame", "make_report"]


def _default_output(experiment: str, sweep_id: str) -> pathlib.Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{experiment}-{sweep_id}")
    return pathlib.Path.cwd() / f"report-{safe}.html"


def make_report(
    experiment: str,
    sweep_id: str | None = None,
    output: str | None = None,
    baseline: str | None = None,
    tracking_uri: str | None = None,
    tuning_draws: str = "without-replacement",
    scoring: str | None = None,
    select_by: str | None = None,
    time_clock: str | None = None,
    stats_baseline: str | None = None,
    immutable: bool = False,
    target: str | None = None,
) -> pathlib.Path:
    """Write the HTML report of one sweep and the tidy CSV beside it; return the HTML path.

    Args:
      experiment: MLflow experiment (= the sweep's name).
      sweep_id: value of the ``harness.sweep_id`` tag; ``None`` takes the experiment's latest sweep.
      output: HTML path (parents created); default ``./report-<experiment>-<sweep_id>.html``.
        The frame is written beside it, gzip-compressed (:func:`data_path`: suffix ``.csv.gz``).
      baseline: another sweep id (same experiment, else searched in every experiment) to compare
        with; regressions beyond run-to-run spread are flagged (:mod:`reports.compare`).
      tracking_uri: MLflow tracking URI; ``None`` uses MLflow's default (``MLFLOW_TRACKING_URI`` or
        ``sqlite:///mlflow.db`` in the working directory).
      tuning_draws: how the tuning curves draw k of the N configurations:
        ``"without-replacement"`` (k-subsets) or ``"with-replacement"`` (Dodge et al.'s formula);
        :data:`reports.protocol.TUNING_DRAWS`. The caption says which.
      scoring: the tuned time-to-result rule, ``"harness"`` or ``"algoperf"``
        (:data:`reports.protocol.SCORING`); ``None`` takes the sweep's (its latest parent run's
        ``scoring`` param, from the config's ``scoring:``; ``harness`` when absent). The profile's
        caption says which; ``algoperf`` adds AlgoPerf's score to the leaderboard.
      select_by: the selection objective (:data:`harness.core.selection_rule.SELECT_BY`); ``None``
        takes the sweep's own (its latest parent run's tag ``harness.select_by``; default
        ``time_to_target``). The leaderboard's text says which.
      time_clock: the clock time to target is ranked and drawn on (:mod:`reports.report_clock`):
        ``"modeled"`` (steps × the program's median step time) or ``"measured"`` (wall-clock as
        logged); ``None`` takes the sweep's (its config's ``time:``, recorded on its latest parent
        run; ``modeled`` when absent). The leaderboard says which.
      stats_baseline: the optimizer the across-task statistics compare with
        (:func:`reports.stats.baseline_optimizer`; ``None``: adam, else adamw, else the first).
      immutable: the local SQLite store is one SQLite cannot open where it is (its folder not
        writable): it is read with ``immutable=1`` (:mod:`reports.snapshot`) and the report is not
        logged to it.
      target: ``"valid/loss=1.9"``: steps and times to this target, read off the stored validation
        curves (:mod:`reports.retarget`), in place of the sweep's own; ``None``: the sweep's own.

    The HTML is also logged as an artifact under ``reports/`` of every parent run whose trials the
    report shows (:func:`report_parents`); the table is not (it is the store's data again). Where the
    store refuses that (a read-only artifact folder), the report is still returned, with a
    :class:`ReportNotLogged` warning.

    Returns:
      the HTML file's path.

    Raises:
      ValueError: unknown experiment, sweep id, baseline sweep id or stats baseline optimizer.
      ReportNotWrittenError: the report or its table cannot be written at its path.
    """
    from reports.html import figure_items, render  # matplotlib: imported on first use

    _check_options(tuning_draws, scoring, select_by, time_clock)  # before anything is read
    wanted = parse_target(target) if target is not None else None  # its syntax, likewise
    # a local SQLite store is read with sqlite3 (reports.snapshot: every experiment when a baseline
    # may live in another); MLflow's client only writes the HTML back
    client = snapshot_or_client(tracking_uri, None if baseline is not None else experiment,
                                immutable=immutable)
    data = load_sweep(experiment, sweep_id, client=client)  # a ladder's ladder.* tags: its columns
    if wanted is not None:
        data.frame = retarget(data.frame, wanted)
    data.frame.attrs[TUNING_DRAWS_ATTR] = tuning_draws
    _apply_options(data, scoring, select_by, stats_baseline)
    if tracking_uri:
        data.tracking_uri = tracking_uri
    out = pathlib.Path(output) if output else _default_output(experiment, data.sweep_id)
    csv = data_path(out)
    time_clock = time_clock or data.frame.attrs.get(SWEEP_TIME_ATTR) or DEFAULT_CLOCK
    data.frame = _write_table(data.frame, out, csv, time_clock)  # every view below: the report's clock

    figures = figure_items(data.frame, out.stem)

    comparison = None
    if baseline is not None:
        other = _load_baseline(client, experiment, baseline)
        other = retarget(other, wanted) if wanted is not None else other  # both sweeps on one target
        comparison = compare(data.frame, use_clock(other, time_clock))

    others = [e for e in client.search_experiments() if e.name != experiment]
    every = client if baseline is not None or not others else \
        snapshot_or_client(tracking_uri, None, immutable=immutable)  # a snapshot of one experiment
    elsewhere = observed_elsewhere(every, data.frame) if others else None  # the batching flags'
    html = render(data, figures, leaderboard(data.frame), comparison, baseline, csv_name=csv.name,
                  elsewhere=elsewhere)
    try:
        out.write_text(html, encoding="utf-8")
    except OSError as e:
        raise ReportNotWrittenError(out, e) from e
    if not immutable:  # a store SQLite cannot open where it is: MLflow cannot write to it either
        _log_report(out, data, tracking_uri)
    return out


def _check_options(tuning_draws: str, scoring: str | None, select_by: str | None,
                   time_clock: str | None) -> None:
    """Raise ``ValueError`` naming the flag of an option of :func:`make_report` that is not one of
    its values."""
    if tuning_draws not in TUNING_DRAWS:
        raise ValueError(f"--tuning-curves must be one of {', '.join(TUNING_DRAWS)}; got {tuning_draws!r}")
    if scoring is not None and scoring not in SCORING:
        raise ValueError(f"--scoring must be one of {', '.join(SCORING)}; got {scoring!r}")
    if select_by is not None and select_by not in SELECT_BY:
        raise ValueError(f"--select-by must be one of {', '.join(SELECT_BY)}; got {select_by!r}")
    if time_clock is not None and time_clock not in CLOCKS:
        raise ValueError(f"--time must be one of {', '.join(CLOCKS)}; got {time_clock!r}")


def _apply_options(data, scoring: str | None, select_by: str | None, stats_baseline: str | None) -> None:
    """Record the report's options on the frame's attrs (over the sweep's own), checked against
    the sweep before anything is drawn.

    Raises:
      ValueError: a rule that ranks on time to target for a sweep without a target; an unknown
        stats baseline; a recorded selection objective that is not one.
    """
    if objective(data.frame).target_metric is None:  # what ranks on time to target cannot run
        for flag, value, need, instead in (("--scoring", scoring, "algoperf", "--scoring harness"),
                                           ("--select-by", select_by, "time_to_target",
                                            "--select-by final or best")):
            if value == need:
                raise ValueError(f"{flag} {need} ranks on time to the validation target and sweep "
                                 f"{data.sweep_id} has no target; use {instead}")
    if scoring is not None:  # overrides the sweep's recorded rule (reports.frame.sweep_settings)
        data.frame.attrs[SCORING_ATTR] = scoring
    if select_by is not None:  # overrides the sweep's recorded objective
        data.frame.attrs[SELECT_BY_ATTR] = select_by
    if stats_baseline is not None:  # checked here, before anything is drawn
        data.frame.attrs[stats.BASELINE_ATTR] = stats_baseline
        stats.baseline_optimizer(data.frame)
    try:
        select_of(data.frame)  # a recorded tag that is not an objective: said before anything is drawn
    except ValueError as e:
        raise ValueError(f"the sweep's parent run records {TAG_SELECT_BY} = "
                         f"{data.frame.attrs.get(SELECT_BY_ATTR)!r}, not one of {', '.join(SELECT_BY)}: "
                         f"pass --select-by") from e


def _write_table(frame: pd.DataFrame, out: pathlib.Path, csv: pathlib.Path, time_clock: str) -> pd.DataFrame:
    """Write the tidy frame as MLflow holds it plus the protocol's tables (tuning curves, tuned
    time-to-result, on the report's clock) as extra rows to ``csv``; return the frame on that clock.

    Raises:
      ReportNotWrittenError: ``out``'s folder or ``csv`` cannot be written.
    """
    ranked = use_clock(frame, time_clock)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        spreadsheet_safe(pd.concat([frame, csv_rows(ranked)], ignore_index=True)).to_csv(csv, index=False)
    except OSError as e:
        raise ReportNotWrittenError(out, e) from e
    return ranked


def _log_report(out: pathlib.Path, data, tracking_uri: str | None) -> None:
    """Log the HTML ``out`` under ``reports/`` of :func:`report_parents`; a store that refuses it
    gets a :class:`ReportNotLogged` warning (at :func:`make_report`'s caller)."""
    from mlflow.exceptions import MlflowException

    parents = report_parents(data)
    try:
        writer = mlruns.mlflow_client(tracking_uri) if parents else None
        for parent in parents:  # the HTML only: the table is the store's own data again
            writer.log_artifact(parent, str(out), artifact_path="reports")
    except (OSError, MlflowException) as e:  # artifacts read-only (a colleague's store, a shared one)
        reason = " ".join(str(e).split())[:300] or type(e).__name__
        warnings.warn(ReportNotLogged(f"the report {out} was written, but not logged to the sweep's "
                                      f"parent run in the store ({type(e).__name__}: {reason})"),
                      stacklevel=3)


class ReportNotWrittenError(OSError):
    """:func:`make_report` could not write the report (or its table) at ``path``; ``reason`` says
    why (the operating system's words)."""

    def __init__(self, path: pathlib.Path, e: OSError):
        self.path, self.reason = path, e.strerror or str(e)
        if e.filename and str(e.filename) != str(path):  # e.g. a folder on the way that is a file
            self.reason += f": {e.filename}"
        super().__init__(f"cannot write the report {path} ({self.reason})")


class ReportNotLogged(UserWarning):
    """:func:`make_report` wrote the report but could not log it to the store (e.g. its artifact
    folder is read-only); the report and its table are complete."""


def data_path(html: pathlib.Path) -> pathlib.Path:
    """The tidy table written beside the report ``html``: the same name with ``.csv.gz`` (gzip-
    compressed CSV, which ``pandas.read_csv`` reads as it is; a 10,000-trial sweep's table is
    ~18 MB uncompressed)."""
    return html.with_suffix(".csv.gz")


def report_parents(data) -> list[str]:
    """The parent runs a report is attached to: those whose trial runs the report shows (a trial
    run's ``mlflow.parentRunId``), oldest first. A re-run that trained nothing has no trial in the
    report and gets no copy; a sweep whose trials name no parent falls back to its latest parent."""
    s = summaries(data.frame)
    used = set(s["parent_run_id"].dropna()) if "parent_run_id" in s else set()
    ids = [p.info.run_id for p in data.parents if p.info.run_id in used]
    if not ids and data.parents:
        ids = [data.parents[-1].info.run_id]
    return ids


def _load_baseline(client, experiment: str, baseline: str) -> pd.DataFrame:
    try:
        return load_sweep(experiment, baseline, client=client).frame
    except ValueError:
        pass
    other = mlruns.experiment_of_sweep(client, baseline)
    if other is not None:
        return load_sweep(other, baseline, client=client).frame
    raise ValueError(f"no run in any experiment has {TAG_SWEEP_ID} = {baseline!r} (the --baseline sweep)")
