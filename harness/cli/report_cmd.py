"""``report``: write the HTML comparison report (and its CSV) of a sweep from what MLflow holds."""

from __future__ import annotations

import typer

from harness.cli.shared import URI_HELP, err, one_of
from harness.core.clock import CLOCKS
from harness.core.names import SCORING_RULES
from harness.core.redact import mask_uri
from harness.core.selection_rule import SELECT_BY

EPILOG = """\b
Examples:
  python -m harness report --experiment quickstart     # latest sweep
  python -m harness report -e quickstart -o quickstart.html
  python -m harness report -e mnist1d --sweep 1a2b3c4d5e6f \\
      --baseline 0f9e8d7c6b5a
  python -m harness report -e quickstart --format tex -o board.tex
  python -m harness report -e quickstart --format csv -o tables/
  python -m harness report -e lm --target valid/loss=1.9  # another target
\b
--format html (default) writes one self-contained HTML file (vector
figures, interactive curves, downloads) and the tidy CSV beside it,
prints both paths, and logs both to the parent runs whose trials it
shows. md and tex write the leaderboard as a Markdown or LaTeX table;
csv and parquet write one file per row kind (trials, curves,
leaderboard, tuning_curves, tuned_times) into a folder. Only html is
logged to MLflow."""

#: ``report --format``: the HTML report, the leaderboard as Markdown or LaTeX, the tables as files.
FORMATS = ("html", "md", "tex", "csv", "parquet")


TUNING_DRAWS = ("without-replacement", "with-replacement")


def _choice(valid) -> dict:
    """The typer.Option arguments of an option whose value is one of ``valid``."""
    return {"parser": one_of(*valid), "metavar": "|".join(valid)}


#: ``report``'s options with long help, each its own ``typer.Option``.
TUNING_CURVES = typer.Option(
    "without-replacement", "--tuning-curves", **_choice(TUNING_DRAWS),
    help="How a tuning curve draws k of an optimizer's N configurations: without-replacement "
    "(k-subsets: 'had I run only k of them') or with-replacement (Dodge et al. 2019's formula "
    "and code: k i.i.d. draws). The figure's caption says which.")
SCORING = typer.Option(
    None, "--scoring", **_choice(SCORING_RULES),
    help="Tuned time-to-result rule: harness (the fastest configuration's median over seeds) or "
    "algoperf (AlgoPerf's: per seed the fastest configuration, median over seeds, the 4x cap, "
    "the score over tau in [1, 4]). Default: the sweep config's `scoring:` (else harness).")
SELECT = typer.Option(
    None, "--select-by", **_choice(SELECT_BY),
    help="How each optimizer's best configuration is selected on validation: time_to_target "
    "(most seeds reaching the target, then fewest steps), final (best mean final validation "
    "metric) or best (best mean of the best validation value during training). Default: the "
    "sweep's own (its config's selection.by, recorded on its parent run).")
TIME = typer.Option(
    None, "--time", **_choice(CLOCKS),
    help="The clock time to target is ranked on: modeled (steps to target x the program's step "
    "time measured before training: CPU time of one XLA thread on a CPU, the median of at least "
    "10 interleaved rounds with its 95% interval, which the rank rule carries; a "
    "task with an AlgoPerf submission ranks on its FLOP cost) or measured (the "
    "wall-clock each trial logged). Default: the sweep config's `time:` (else modeled). The "
    "leaderboard says which.")
STATS_BASELINE = typer.Option(
    None, "--stats-baseline", metavar="OPTIMIZER",
    help="The optimizer the across-task statistics compare with (probability of improvement, "
    "IQM of normalised scores). Default: adam, else adamw, else the first by name.")
TARGET = typer.Option(
    None, "--target", metavar="METRIC=VALUE",
    help="Read steps and time to this target, e.g. valid/loss=1.9 or valid/accuracy=0.95, off the "
    "stored validation curves (training's rule: the first evaluation after step 0 that reaches "
    "it): the leaderboard, selection, target claims and figures use it; nothing is trained. "
    "Default: the sweep's own target. A metric the runs do not log: one line, exit 2.")
FORMAT = typer.Option(
    "html", "--format", "-f", **_choice(FORMATS),
    help="html: the report (and its CSV); md or tex: the leaderboard as a Markdown or LaTeX table "
    "(-o FILE, default report-EXPERIMENT-SWEEP.md|.tex); csv or parquet: one file per row kind "
    "(-o FOLDER, default report-EXPERIMENT-SWEEP/).")


def report(
    experiment: str | None = typer.Option(
        None, "--experiment", "-e",
        help="Sweep name (MLflow experiment); may be left out when the store holds one."),
    sweep_id: str | None = typer.Option(None, "--sweep", help="Sweep id (default: the latest)."),
    output: str | None = typer.Option(None, "-o", "--output", help="Output HTML path."),
    baseline: str | None = typer.Option(None, "--baseline", help="Sweep id to compare against."),
    tracking_uri: str | None = typer.Option(None, "--tracking-uri", help=URI_HELP),
    tuning_curves: str = TUNING_CURVES,
    scoring: str | None = SCORING,
    select_by: str | None = SELECT,
    time_clock: str | None = TIME,
    stats_baseline: str | None = STATS_BASELINE,
    fmt: str = FORMAT,
    target: str | None = TARGET,
) -> None:
    """Build one self-contained HTML comparison report from what MLflow holds (or, with --format,
    its tables)."""
    from harness.tracking.uris import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    if target is not None:
        _check_target(target)
    client, snapshot = _open(uri, fmt)
    if experiment is None:  # the store's only sweep, else the names to choose from
        experiment = _only_experiment(client, uri)
    if fmt != "html":
        for flag, value in (("--baseline", baseline), ("--stats-baseline", stats_baseline)):
            if value is not None:
                err(f"error: {flag} is a view of the HTML report; --format {fmt} writes the tables only")
                raise typer.Exit(2)
        _tables(fmt, experiment, sweep_id, output, uri, tuning_curves, scoring, select_by, time_clock,
                snapshot, target)
        return
    _html(experiment, sweep_id, output, baseline, uri, snapshot, tuning_draws=tuning_curves,
          scoring=scoring, select_by=select_by, time_clock=time_clock, stats_baseline=stats_baseline,
          target=target)


def _check_target(target: str) -> None:
    """Exit 2 with one line when ``--target`` is not ``METRIC=VALUE`` (before the store is read)."""
    from harness.core.reached import parse_target

    try:
        parse_target(target)
    except ValueError as e:
        err(f"error: --target: {e}")
        raise typer.Exit(2) from None


def _open(uri: str, fmt: str) -> tuple:
    """The store at ``uri`` and whether it is read as an immutable snapshot (SQLite cannot open it
    where it is: :func:`_snapshot`). Exits 3 when it cannot be opened."""
    from harness.tracking.client import prepare_store
    from harness.tracking.store_errors import SnapshotOnlyError, TrackingUnavailableError

    try:
        return prepare_store(uri, create=False), False
    except SnapshotOnlyError as e:
        return _snapshot(uri, e, fmt)
    except TrackingUnavailableError as e:
        err(f"error: {e}")
        raise typer.Exit(3) from None


def _only_experiment(client, uri: str) -> str:
    """The name of the store's only sweep; exits 2 naming the sweeps when it holds none or several."""
    names = sorted(e.name for e in client.search_experiments() if e.name != "Default")
    if len(names) != 1:
        err(f"error: give the sweep to report with --experiment NAME; {mask_uri(uri)} holds "
            f"{', '.join(names) if names else 'no sweep'}")
        raise typer.Exit(2)
    return names[0]


def _html(experiment: str, sweep_id: str | None, output: str | None, baseline: str | None, uri: str,
          snapshot: bool, **views) -> None:
    """``report --format html``: :func:`reports.make_report` (``views``: its keyword options), then
    the paths written and whether the HTML is logged to MLflow. Exits 2 when it cannot be written."""
    import warnings

    from reports import ReportNotLogged, ReportNotWrittenError, data_path, make_report

    seen: list = []
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", ReportNotLogged)
            path = make_report(experiment, sweep_id, output, baseline, uri, **views, immutable=snapshot)
    except ReportNotWrittenError as e:
        _not_written(e.path, e.reason)
    except (LookupError, ValueError) as e:  # unknown experiment / sweep id, nothing to report
        err(f"error: {e.args[0] if e.args else e}")
        raise typer.Exit(2) from None
    finally:
        for w in seen:  # the others are shown as they would have been, also when the report failed
            if not issubclass(w.category, ReportNotLogged):
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    not_logged = [str(w.message) for w in seen if issubclass(w.category, ReportNotLogged)]
    csv = data_path(path)
    typer.echo(f"report: {path} ({path.stat().st_size / 1e6:.1f} MB, one self-contained HTML file)")
    if csv.exists():
        typer.echo(f"data:   {csv} (the tidy table behind every figure, gzip CSV)")
    if not_logged:
        err(f"warning: {not_logged[0]}")
    elif not snapshot:
        typer.echo("The HTML is also logged to the sweep's parent run(s) in MLflow, under reports/.")


def _snapshot(uri: str, e, fmt: str):
    """``report`` on a store SQLite cannot open where it is (``e``, a SnapshotOnlyError): the
    store read as an immutable snapshot (its experiments; the report reads its runs the same way),
    and the one warning line that says so. Exits 3 when it cannot be read so either."""
    from harness.tracking.store_state import snapshot_warning
    from reports.snapshot import snapshot_or_client

    try:
        client = snapshot_or_client(uri, "", immutable=True)  # "": the experiments, no run
    except ValueError:
        err(f"error: {e}")
        raise typer.Exit(3) from None
    err(f"warning: {snapshot_warning(e.db)}{'; the report is not logged to it' if fmt == 'html' else ''}")
    return client, True


def _not_written(path, reason: str) -> None:
    """Say that the report cannot be written at ``path`` and where to write it instead; exit 2."""
    from pathlib import Path

    instead = Path.home() / Path(path).name
    err(f"error: cannot write {path} ({reason}); write it elsewhere with -o PATH (--output), e.g. "
        f"-o {instead}")
    raise typer.Exit(2)


def _tables(fmt: str, experiment: str, sweep_id: str | None, output: str | None, uri: str, draws: str,
            scoring: str | None, select_by: str | None, clock: str | None, snapshot: bool = False,
            target: str | None = None) -> None:
    """``report --format md|tex|csv|parquet``: :func:`reports.results.results` written out."""
    import re
    from pathlib import Path

    from reports.results import results

    try:
        res = results(experiment, sweep=sweep_id, tracking_uri=uri, clock=clock, select_by=select_by,
                      scoring=scoring, tuning_draws=draws, immutable=snapshot, target=target)
    except (LookupError, ValueError) as e:
        err(f"error: {e.args[0] if e.args else e}")
        raise typer.Exit(2) from None
    default = "report-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{experiment}-{res.sweep_id}")
    if fmt in ("md", "tex"):
        path = Path(output or f"{default}.{fmt}")
        board = res.leaderboard
        text = board.to_markdown() + "\n\n" + board.caption() if fmt == "md" else board.to_latex()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n", encoding="utf-8")
        except OSError as e:
            _not_written(path, f"{e.strerror or e}: {e.filename}" if e.filename else str(e))
        typer.echo(f"leaderboard: {path} ({len(board)} rows, {fmt})")
        return
    try:
        paths = res.to_csv(output or default) if fmt == "csv" else res.to_parquet(output or default)
    except OSError as e:
        _not_written(output or default, f"{e.strerror or e}: {e.filename}" if e.filename else str(e))
    for kind, path in paths.items():
        typer.echo(f"{kind}: {path}")
