"""``harness.results(experiment)``: a sweep's results as tidy pandas DataFrames, for notebooks.

:func:`results` reads the store once (a local SQLite store through :mod:`reports.snapshot`, in one
read transaction; anything else through ``MlflowClient``) and returns a :class:`Results`, whose
tables are computed on first use and kept:

- ``.trials``: one row per current trial (:func:`reports.tidy.trials_table`);
- ``.curves``: every logged curve value, long format (:func:`reports.tidy.curves_table`);
- ``.leaderboard``: the report's leaderboard as numbers (:class:`reports.tidy.Leaderboard`:
  ``.to_latex()``, ``.to_markdown()``);
- ``.tuning_curves`` and ``.tuned_times``: the protocol's tables (:mod:`reports.protocol`);
- ``.equal_tokens``: final validation loss at each budget beside time to target
  (:mod:`reports.equal_tokens`);
- ``.search``: each coordinate descent's selected configuration and certificate
  (:func:`reports.search_report.search_table`, from the latest parent run's ``search.json``);
- ``.figure(key)``: one of the report's figures (:data:`reports.figures.FIGURES`) as a matplotlib
  ``Figure``;
- ``.to_csv(folder)`` / ``.to_parquet(folder)``: one file per row kind.

**Current trials.** By default the trials of one sweep: the experiment's latest (its latest parent
run's ``harness.sweep_id``), or ``sweep=ID``, with the trials its parents' ``trials.json`` name
that an earlier invocation trained under another sweep id (as the report reads them). A changed
optimizer file gives new trial ids, so the latest sweep holds the trials of each source's latest
version; trials of older versions in the experiment are left out and listed in
``.older_versions`` (and said in the notebook view). ``versions="all"`` takes every trial of the
experiment instead, whatever sweep trained it. Either way an optimizer whose trials ran several
versions of its source is one optimizer per version (``my_adam@1a2b3c4d``,
:func:`reports.tidy.split_versions`): versions are never averaged together.
"""

from __future__ import annotations

import functools
import html
import os
from pathlib import Path
from typing import Any

import pandas as pd

from harness.core.clock import CLOCKS, DEFAULT_CLOCK
from harness.core.names import (
    ENV_TAGS,
    KIND_TRIAL,
    TAG_KIND,
    TAG_OPTIMIZER,
    TAG_OPTIMIZER_SOURCE_HASH,
    TAG_TRIAL_ID,
)
from harness.core.reached import parse_target
from harness.core.selection_rule import SELECT_BY
from harness.core.spec import Target
from reports import runs as mlruns
from reports.frame import (
    SELECT_BY_ATTR,
    SWEEP_BUDGET_ATTR,
    SWEEP_BUDGET_PARENTS_ATTR,
    SWEEP_TIME_ATTR,
    build_frame,
    load_sweep,
    sweep_settings,
)
from reports.objectives import objective
from reports.protocol import SCORING, SCORING_ATTR, TUNING_DRAWS, TUNING_DRAWS_ATTR
from reports.retarget import retarget
from reports.search_report import read_search, search_table
from reports.snapshot import local_sqlite_path, snapshot_or_client
from reports.tidy import (
    Leaderboard,
    curves_table,
    leaderboard_table,
    split_versions,
    trials_table,
    tuned_time_table,
    tuning_table,
)

__all__ = ["TABLES", "VERSIONS", "Results", "results"]

#: ``results(versions=...)``: the current trials (module docstring), or every trial of the experiment.
VERSIONS = ("current", "all")
#: ``frame.attrs`` no table reads (the time budget figure's and the parents'): left off the ranked frame.
UNRANKED_ATTRS = (SWEEP_BUDGET_ATTR, SWEEP_BUDGET_PARENTS_ATTR, "parent_run_ids")
#: The row kinds :meth:`Results.to_csv` writes, one file each (``<kind>.csv``).
TABLES = ("trials", "curves", "leaderboard", "tuning_curves", "tuned_times")


def _parsed_target(target: str | Target | None) -> Target | None:
    """:func:`results`' ``target`` as a :class:`Target` (``None`` stays ``None``).

    Raises:
      TypeError: neither a string nor a Target. ValueError: not ``METRIC=VALUE``.
    """
    if target is None or isinstance(target, Target):
        return target
    if not isinstance(target, str):
        raise TypeError(f"results(): target must be 'METRIC=VALUE' (a string) or a Target, got "
                        f"{type(target).__name__} {target!r}")
    return parse_target(target)


def _read_frame(client: Any, exp: Any, experiment: str, sweep: str | None, versions: str,
                target: Target | None) -> tuple[pd.DataFrame, str | None, Any]:
    """The trials' frame :func:`results` reads (the sweep's, or with ``versions="all"`` the whole
    experiment's), retargeted to ``target`` when given; with its sweep id and searches."""
    if versions == "current":
        data = load_sweep(experiment, sweep, client=client)
        frame, sweep_id, searches = data.frame, data.sweep_id, data.search
    else:
        frame, searches = _experiment_frame(client, exp, experiment)
        sweep_id = None
    if target is not None:
        frame = retarget(frame, target)
    return frame, sweep_id, searches


def results(experiment: str, *, sweep: str | None = None, tracking_uri: str | None = None,
            versions: str = "current", clock: str | None = None, select_by: str | None = None,
            scoring: str | None = None, tuning_draws: str | None = None, immutable: bool = False,
            target: str | Target | None = None) -> Results:
    """The results of one sweep of ``experiment`` (the MLflow experiment = the sweep's ``name``).

    Args:
      experiment: the experiment's name.
      sweep: a sweep id (``harness.sweep_id``); ``None``: the experiment's latest sweep.
      tracking_uri: the store (``None``: ``MLFLOW_TRACKING_URI``, else ``./mlflow.db``).
      versions: ``"current"`` (the sweep's trials) or ``"all"`` (every trial of the experiment).
      clock: the clock time to target is ranked on, ``"modeled"`` or ``"measured"``
        (:mod:`reports.report_clock`); ``None``: the sweep's own (its config's ``time:``).
      select_by: how each optimizer's best configuration is selected on validation
        (``time_to_target``, ``final``, ``best``); ``None``: the sweep's own.
      scoring: the tuned time-to-result rule of ``.tuned_times`` (``harness``, ``algoperf``;
        :mod:`reports.protocol`); ``None``: the sweep's own.
      tuning_draws: how ``.tuning_curves`` draws k configurations (default ``without-replacement``).
      immutable: read the local SQLite store with ``immutable=1``: for a store SQLite cannot open
        where it is (a folder that is not writable), right only while nobody writes it
        (:mod:`reports.snapshot`).
      target: the target steps and times to target, selection and the leaderboard are read for,
        ``"valid/loss=1.9"`` or a :class:`harness.core.spec.Target`, recomputed from the stored
        validation curves (:mod:`reports.retarget`; nothing is trained); ``None``: the sweep's own.

    Returns:
      a :class:`Results` (its tables as DataFrames, and the report's figures).

    Raises:
      ValueError: no store at a local SQLite path (none is created), an unknown experiment or
        sweep id (naming those the store holds), an unknown ``versions``, ``clock`` or
        ``select_by``, or ``sweep`` together with ``versions="all"``; a ``target`` that is not
        ``METRIC=VALUE`` or whose metric the runs do not log (one line).
      TypeError: ``experiment`` is not a string, ``target`` neither a string nor a Target.
    """
    _check_arguments(experiment, sweep, tracking_uri, versions, (clock, select_by, scoring, tuning_draws))
    target = _parsed_target(target)  # its syntax, before anything is read
    client = snapshot_or_client(tracking_uri, experiment, immutable=immutable)
    exp = mlruns.get_experiment(client, experiment)
    frame, sweep_id, searches = _read_frame(client, exp, experiment, sweep, versions, target)
    overrides = ((SELECT_BY_ATTR, select_by), (SCORING_ATTR, scoring), (TUNING_DRAWS_ATTR, tuning_draws))
    frame.attrs.update({attr: value for attr, value in overrides if value is not None})
    older = _older_versions(client, exp.experiment_id, frame) if versions == "current" else _no_older()
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"
    out = Results(experiment, sweep_id, uri, versions, split_versions(frame),
                  clock or frame.attrs.get(SWEEP_TIME_ATTR) or DEFAULT_CLOCK, older, searches)
    if hasattr(client, "close"):
        client.close()
    return out


def _check_arguments(experiment, sweep: str | None, tracking_uri: str | None, versions: str,
                     options: tuple) -> None:
    """Raise :func:`results`' ``TypeError``/``ValueError`` for a bad argument before anything is
    read; ``options`` is ``(clock, select_by, scoring, tuning_draws)``."""
    clock, select_by, scoring, tuning_draws = options
    if not isinstance(experiment, str):  # results(5) failed inside difflib's did-you-mean
        raise TypeError(f"results(): experiment must be the sweep's name (a string), got "
                        f"{type(experiment).__name__} {experiment!r}")
    if versions not in VERSIONS:
        raise ValueError(f"versions must be one of {', '.join(VERSIONS)}; got {versions!r}")
    for name, value, allowed in (("clock", clock, CLOCKS), ("select_by", select_by, SELECT_BY),
                                 ("scoring", scoring, SCORING), ("tuning_draws", tuning_draws, TUNING_DRAWS)):
        if value is not None and value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    if sweep is not None and versions == "all":
        raise ValueError("versions='all' reads every trial of the experiment; leave sweep=None")
    path = local_sqlite_path(tracking_uri)
    if path is not None and not os.path.isfile(path):  # never create an empty store by reading
        raise ValueError(f"no MLflow store at {os.path.abspath(path)} (tracking_uri "
                         f"{tracking_uri or 'default: ./mlflow.db'})")


def _experiment_frame(client, exp, experiment: str) -> tuple[pd.DataFrame, list]:
    """``versions="all"``: the frame of every trial of the experiment and its searches."""
    runs = mlruns.search_all_runs(client, [exp.experiment_id])
    frame = build_frame(client, runs, experiment)
    parents = [r for r in runs if mlruns.is_parent(r)]
    frame.attrs.update(experiment=experiment, sweep_id=None, parent_run_ids=[p.info.run_id for p in parents])
    frame.attrs.update(sweep_settings(parents))
    return frame, read_search(client, parents)


def _no_older() -> pd.DataFrame:
    return pd.DataFrame({"optimizer": pd.Series(dtype="str"), "source_version": pd.Series(dtype="str"),
                         "trials": pd.Series(dtype="int64")})


def _older_versions(client, experiment_id: str, frame: pd.DataFrame) -> pd.DataFrame:
    """The trials of the experiment that ran another version of a current optimizer's source than
    the current trials do: one row per (optimizer, source_version) with its number of trials."""
    s = frame[frame["row"] == "summary"] if len(frame) else frame
    if s.empty or "source_hash" not in s or s["source_hash"].isna().all():
        return _no_older()
    current = s.groupby("optimizer")["source_hash"].agg(lambda v: set(v.dropna()))
    current = current[current.map(bool)]
    shown = set(s["trial_id"])
    counts: dict[tuple[str, str], set[str]] = {}
    trial_runs = f"tags.`{TAG_KIND}` = {mlruns.quote(KIND_TRIAL)}"
    for r in mlruns.search_all_runs(client, [experiment_id], trial_runs):
        tags = r.data.tags
        opt, h, tid = tags.get(TAG_OPTIMIZER), tags.get(TAG_OPTIMIZER_SOURCE_HASH), tags.get(TAG_TRIAL_ID)
        if opt in current.index and h and h not in current[opt] and tid not in shown:
            counts.setdefault((opt, h), set()).add(tid)
    if not counts:
        return _no_older()
    return pd.DataFrame([{"optimizer": o, "source_version": h, "trials": len(t)}
                         for (o, h), t in sorted(counts.items())]).astype(
        {"optimizer": "str", "source_version": "str", "trials": "int64"})


class Results:
    """One sweep's results (module docstring); made by :func:`results`.

    Attributes:
      experiment, sweep_id (``None`` with ``versions="all"``), tracking_uri, versions, clock.
      frame: the report's tidy frame as loaded (``row`` ``curve`` and ``summary``;
        :mod:`reports.frame`), optimizers split by source version.
      older_versions: trials of older source versions left out (``optimizer``,
        ``source_version``, ``trials``); empty with ``versions="all"``.
      search_records: the latest parent run's ``search.json`` (an adaptive sweep's searches).
    """

    def __init__(self, experiment: str, sweep_id: str | None, tracking_uri: str, versions: str,
                 frame: pd.DataFrame, clock: str, older_versions: pd.DataFrame,
                 search_records: list | None = None):
        self.experiment, self.sweep_id, self.tracking_uri = experiment, sweep_id, tracking_uri
        self.versions, self.frame, self.clock, self.older_versions = versions, frame, clock, older_versions
        self.search_records = list(search_records or [])

    # ------------------------------------------------------------------------------- the frames
    @functools.cached_property
    def _ranked(self) -> pd.DataFrame:
        """The summary rows on the report's clock: what the leaderboard and protocol tables read."""
        from reports.report_clock import use_clock

        # what these views read: no params.* or environment columns (100 text columns a trial,
        # copied at every selection), attrs without the time budget (deep-copied at every one)
        keep = [c for c in self.frame.columns if not c.startswith("params.") and c not in ENV_TAGS]
        s = self.frame.loc[self.frame["row"] == "summary", keep].reset_index(drop=True)
        # text as Python objects: the views select rows group by group, and taking rows of
        # pyarrow-backed text columns costs more than the rest of a selection (the same numbers)
        s = s.astype({c: object for c in s.columns if str(s[c].dtype) == "str"})
        s.attrs = {k: v for k, v in self.frame.attrs.items() if k not in UNRANKED_ATTRS}
        return use_clock(s, self.clock)

    @functools.cached_property
    def _drawn(self) -> pd.DataFrame:
        """The whole frame on the report's clock: what the figures draw."""
        from reports.report_clock import use_clock

        return use_clock(self.frame, self.clock)

    @functools.cached_property
    def trials(self) -> pd.DataFrame:
        """One row per trial (:func:`reports.tidy.trials_table`; ``docs/python-api.md``)."""
        return trials_table(self.frame, self._ranked, self.clock)

    @functools.cached_property
    def curves(self) -> pd.DataFrame:
        """Every logged curve value, long format (:func:`reports.tidy.curves_table`)."""
        return curves_table(self.frame)

    @functools.cached_property
    def leaderboard(self) -> Leaderboard:
        """The leaderboard's numbers (:class:`reports.tidy.Leaderboard`)."""
        has_target = len(self._ranked) > 0 and objective(self._ranked).target_metric is not None
        return leaderboard_table(self._ranked, has_target)

    @functools.cached_property
    def tuning_curves(self) -> pd.DataFrame:
        """Expected best validation (and the selected configuration's test) value after k
        configurations, per task and optimizer (:func:`reports.protocol.tuning_curves`)."""
        return tuning_table(self._ranked)

    @functools.cached_property
    def search(self) -> pd.DataFrame:
        """Each optimizer's coordinate descent and its certificate (:func:`reports.search_report.
        search_table`, from the latest parent run's ``search.json``); empty for other sweeps."""
        return search_table(self.search_records)

    @functools.cached_property
    def equal_tokens(self) -> pd.DataFrame:
        """Each optimizer's final validation loss (perplexity, bits per byte) at its budget, its
        interval across seeds and its paired difference to the baseline
        (:func:`reports.equal_tokens.equal_token_table`, on the report's clock's selection)."""
        from reports.equal_tokens import equal_token_table

        return equal_token_table(self._drawn)

    @functools.cached_property
    def tuned_times(self) -> pd.DataFrame:
        """Tuned time-to-result per task and optimizer (:func:`reports.protocol.tuned_time_to_result`)."""
        return tuned_time_table(self._ranked)

    # ------------------------------------------------------------------------------- figures
    @property
    def figure_keys(self) -> list[str]:
        """The keys of the report's figures (:data:`reports.figures.FIGURES`)."""
        from reports.figures import FIGURES

        return [spec.key for spec in FIGURES]

    def figure(self, key: str):
        """The report's figure ``key`` (one of :attr:`figure_keys`) as a ``matplotlib.figure.Figure``
        drawn from these results (on their clock); ``None`` where the sweep holds no data for it,
        a sentence (``str``) where the report shows one instead.

        Raises:
          KeyError: an unknown key (the message lists the keys).
        """
        from reports.figures import FIGURES

        for spec in FIGURES:
            if spec.key == key:
                return spec.build(self._drawn)
        raise KeyError(f"no figure {key!r}; figures: {', '.join(self.figure_keys)}")

    # ------------------------------------------------------------------------------- export
    def tables(self) -> dict[str, pd.DataFrame]:
        """Every table by row kind (:data:`TABLES`)."""
        return {kind: pd.DataFrame(getattr(self, kind)) for kind in TABLES}

    def to_csv(self, folder: str | Path) -> dict[str, Path]:
        """Write one CSV per row kind (``trials.csv``, ``curves.csv``, ``leaderboard.csv``,
        ``tuning_curves.csv``, ``tuned_times.csv``) into ``folder`` (made if absent); every column
        holds one type, so ``pandas.read_csv`` reads each back without a mixed-type warning; a text
        cell a spreadsheet would run as a formula gets a leading ``'``
        (:func:`reports.safe_cells.spreadsheet_safe`). Returns the paths by kind."""
        from reports.safe_cells import spreadsheet_safe

        return self._write(folder, "csv", lambda df, p: spreadsheet_safe(df).to_csv(p, index=False))

    def to_parquet(self, folder: str | Path) -> dict[str, Path]:
        """As :meth:`to_csv`, as Parquet files (``<kind>.parquet``, dtypes kept exactly)."""
        return self._write(folder, "parquet", lambda df, p: df.to_parquet(p, index=False))

    def _write(self, folder: str | Path, suffix: str, write) -> dict[str, Path]:
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        paths = {}
        for kind, df in self.tables().items():
            paths[kind] = out / f"{kind}.{suffix}"
            write(df, paths[kind])
        return paths

    # ------------------------------------------------------------------------------- display
    def _headline(self) -> str:
        n = self.frame[self.frame["row"] == "summary"]["status"].value_counts() if len(self.frame) else {}
        counts = ", ".join(f"{v} {k}" for k, v in n.items()) or "no trials"
        which = f"sweep {self.sweep_id}" if self.sweep_id else "every trial of the experiment"
        return f"{self.experiment}: {which}; {counts}; time to target on the {self.clock} clock"

    def _older_note(self) -> str:
        if self.older_versions.empty:
            return ""
        parts = [f"{o} ({len(g)} older version{'s' * (len(g) > 1)}, {int(g['trials'].sum())} trials)"
                 for o, g in self.older_versions.groupby("optimizer")]
        return (f"Older source versions left out: {', '.join(parts)}; "
                f"results(..., versions='all') includes them, one optimizer per version.")

    def __repr__(self) -> str:
        lines = [self._headline()]
        if len(self.leaderboard):
            lines.append(self.leaderboard.to_markdown())
        if note := self._older_note():
            lines.append(note)
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """The notebook view: the headline, the leaderboard's formatted table and its caption."""
        board = self.leaderboard
        parts = [f"<p><b>{html.escape(self._headline())}</b></p>"]
        if len(board):
            parts.append(board.table().to_html(index=False, escape=True))
            parts.append(f"<p><small>{html.escape(board.caption())}</small></p>")
        if note := self._older_note():
            parts.append(f"<p>{html.escape(note)}</p>")
        return "\n".join(parts)
