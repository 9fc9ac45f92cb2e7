"""One self-contained HTML file from a sweep's frame, figures and tables (Jinja2).

Figures are inline SVG (vector: sharp at any zoom and in print), each with downloads of its own
(SVG, PDF and the CSV slice it was drawn from, as ``data:`` links); the convergence and tuning
figures also have an interactive Vega-Lite view (:mod:`reports.interactive`) whose JavaScript is
inlined. The leaderboard and the trials table sort (click a header) and filter (type in the box)
with a small inline script. Styles and scripts are inline and a Content-Security-Policy
(``default-src 'none'``; scripts and styles inline only, images only ``data:``) forbids any network
access, so the file opens the same offline, from an e-mail or from an MLflow artifact.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import platform
from importlib import metadata
from typing import Any

import pandas as pd

from harness.core.names import (
    ENV_TAGS,
    M_FINAL_ACC,
    M_FINAL_LOSS,
    M_SECONDS_TO_TARGET,
    M_STEP_MS,
    M_TEST_ACC,
    M_TEST_LOSS,
    TAG_CONFIG_COMMIT,
    TAG_GIT_COMMIT,
    TAG_HARNESS_COMMIT,
)
from harness.core.ties import power_words
from reports.batch_flags import batching_flags
from reports.claim_table import claim_rows
from reports.early_stop import audit_rows
from reports.equal_tokens import equal_token_rows
from reports.figures import FIGURES
from reports.frame import STATUSES, SweepData, summaries
from reports.interactive import vega_bundle
from reports.layout import label_table, pdf_bytes, svg_markup, task_labels, with_labels
from reports.leaderboard import shared_columns
from reports.objectives import objective, objectives_differ, target_words
from reports.report_clock import clock_note
from reports.runs import unfinished_words
from reports.safe_cells import spreadsheet_safe
from reports.scoring import denominator_note, score_note
from reports.search_report import certificate_rows
from reports.selection import audit_changes, boundary_warnings, selection_caption, selection_sentence
from reports.selection import objective_words as selected_on
from reports.stats import across_tasks, stats_note

TEMPLATE = "report.html.j2"


def _env():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("reports", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


def data_uri(payload: bytes, mime: str) -> str:
    """``data:<mime>;base64,…`` for ``payload``."""
    return f"data:{mime};base64," + base64.b64encode(payload).decode("ascii")


def _script_json(obj: Any) -> str:
    """JSON safe inside ``<script type="application/json">`` (no ``</`` can close the element)."""
    import json

    return json.dumps(obj, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


def figure_items(frame: pd.DataFrame, stem: str) -> list[dict[str, Any]]:
    """Every figure of :data:`reports.figures.FIGURES` ready for the template: ``svg`` (inline
    markup) or ``message`` (a sentence instead of a figure) or neither (``empty``), the downloads
    (``pdf``/``csv`` data URIs and file names) and ``vl`` (interactive spec as JSON, or None)."""
    labels = task_labels(frame)
    items = []
    for spec in FIGURES:
        fid = spec.key.replace("_", "-")
        item: dict[str, Any] = {
            "id": fid,
            "key": spec.key,
            "title": spec.title,
            "caption": spec.caption(frame) if callable(spec.caption) else spec.caption,
            "empty": spec.empty,
            "svg": None,
            "message": None,
            "downloads": [],
            "vl": None,
            "ylog": False,
        }
        result = spec.build(frame)
        if result is None and spec.optional:  # e.g. a ladder's scaling, on a sweep without one
            continue
        if isinstance(result, str):
            item["message"] = result
        elif result is not None:
            item["svg"] = svg_markup(result, fid)
            item["downloads"].append({"kind": "SVG", "name": f"{stem}-{spec.key}.svg", "href": None})
            item["downloads"].append(
                {"kind": "PDF", "name": f"{stem}-{spec.key}.pdf",
                 "href": data_uri(pdf_bytes(result), "application/pdf")}
            )
            result.clear()
        if spec.data is not None and (item["svg"] or item["message"]):
            table = spec.data(frame)
            if len(table) and "task" in table:
                table = with_labels(table, labels)
                table.insert(0, "label", table.pop("label"))
            if len(table):
                item["downloads"].append(
                    {"kind": "CSV", "name": f"{stem}-{spec.key}.csv",
                     "href": data_uri(spreadsheet_safe(table).to_csv(index=False).encode("utf-8"),
                                     "text/csv;charset=utf-8")}
                )
        if spec.interactive is not None and item["svg"]:
            vl = spec.interactive(frame)
            item["vl"] = _script_json(vl) if vl else None
            item["ylog"] = bool(vl and vl.get("usermeta", {}).get("ylog"))
        items.append(item)
    return items


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _values(s: pd.Series) -> str:
    vc = s.dropna().astype(str).value_counts()
    if vc.empty:
        return "not logged"
    if len(vc) == 1:
        return vc.index[0]
    return "; ".join(f"{v} ({n} trials)" for v, n in vc.items())


def _fmt_time(t: Any) -> str:
    return "—" if t is None or pd.isna(t) else pd.Timestamp(t).strftime("%Y-%m-%d %H:%M:%S UTC")


def _safe_uri(uri: str) -> str:
    """The tracking URI without credentials or an ``http(s)://`` scheme (the report links nowhere)."""
    from urllib.parse import urlsplit

    if not uri:
        return "the default store"
    parts = urlsplit(uri)
    if parts.scheme in ("http", "https"):
        return f"the MLflow server at {parts.hostname}" + (f":{parts.port}" if parts.port else "")
    if parts.password or parts.username:
        return f"{parts.scheme} store at {parts.hostname}{parts.path}"
    return uri


#: The environment section's words for a tag of :data:`harness.core.names.ENV_TAGS` (others: the
#: tag's name with spaces).
ENV_LABELS = {
    TAG_HARNESS_COMMIT: "harness git commit (its installed checkout)",
    TAG_CONFIG_COMMIT: "config folder's git commit",
    TAG_GIT_COMMIT: "git commit (working directory, runs before harness_commit)",
}


def environment(data: SweepData) -> list[tuple[str, str]]:
    """(label, value) pairs: versions, device and the two git commits (the harness's own, from
    where it is installed, and the config folder's) from the trials' tags, else from the parent
    runs'; dates, and the report's tools. ``git_commit`` (the working directory's, recorded by runs
    from before the two) is shown only where a run holds it."""
    s = summaries(data.frame)
    env = []
    for t in ENV_TAGS:
        vals = s[t] if t in s else pd.Series(dtype=object)
        if vals.isna().all() and t in (TAG_HARNESS_COMMIT, TAG_CONFIG_COMMIT):
            vals = pd.Series([p.data.tags.get(t) for p in data.parents], dtype=object)
        if t == TAG_GIT_COMMIT and vals.isna().all():
            continue
        env.append((ENV_LABELS.get(t, t.replace("_", " ")), _values(vals)))
    starts = [
        pd.to_datetime(p.info.start_time, unit="ms", utc=True) for p in data.parents if p.info.start_time
    ]
    ends = [pd.to_datetime(p.info.end_time, unit="ms", utc=True) for p in data.parents if p.info.end_time]
    env += [
        ("sweep started", _fmt_time(min(starts) if starts else s["start_time"].min() if len(s) else None)),
        ("sweep ended", _fmt_time(max(ends) if ends else s["end_time"].max() if len(s) else None)),
        ("first trial started", _fmt_time(s["start_time"].min() if len(s) else None)),
        ("last trial ended", _fmt_time(s["end_time"].max() if len(s) else None)),
        ("parent runs", ", ".join(p.info.run_id for p in data.parents) or "none"),
        (
            "report tools",
            f"python {platform.python_version()}, mlflow {_version('mlflow')}, pandas "
            f"{pd.__version__}, seaborn {_version('seaborn')}, matplotlib {_version('matplotlib')}",
        ),
    ]
    return env


def _vega_js() -> str:
    return vega_bundle().replace("</script", "<\\/script")


def _trial_rows(s: pd.DataFrame, labels: dict[str, str]) -> list[dict[str, Any]]:
    """One row per trial for the sortable trials table (display strings)."""
    def num(v: Any, fmt: str) -> str:
        return "" if v is None or pd.isna(v) else format(float(v), fmt)

    rows = []
    for _i, r in s.sort_values(["task", "optimizer", "config", "seed"]).iterrows():
        rows.append(
            {
                "task": labels.get(r["task"], r["task"]),
                "optimizer": r["optimizer"],
                "config": r["config"],
                "seed": "" if pd.isna(r["seed"]) else str(r["seed"]),
                "status": r["status"],
                "acc": num(r[M_FINAL_ACC], ".4f"),
                "loss": num(r[M_FINAL_LOSS], ".4f"),
                "test": num(r[M_TEST_ACC], ".4f") if M_TEST_ACC in r else "",
                "test_loss": num(r[M_TEST_LOSS], ".4f") if M_TEST_LOSS in r else "",
                "ttt": num(r[M_SECONDS_TO_TARGET], ".3g"),
                "ms": num(r[M_STEP_MS], ".3g"),
                "reason": r["reason"] if isinstance(r["reason"], str) else "",
                "trial_id": r["trial_id"],
                "source_hash": r["source_hash"] if isinstance(r.get("source_hash"), str) else "",
            }
        )
    return rows


def across_rows(frame: pd.DataFrame, labels: dict[str, str] | None = None) -> tuple[list[dict], str]:
    """The across-task table's rows (:func:`reports.stats.across_tasks`: IQM of normalised scores and
    probability of improvement over the baseline optimizer, each with its 95% stratified bootstrap
    interval) and the sentence under it; ``([], "")`` with fewer than two optimizers. Task names in
    the sentence are their short ``labels``."""
    s = summaries(frame)
    if s.empty or s["optimizer"].nunique() < 2:
        return [], ""
    table = across_tasks(frame)
    if table.empty:
        return [], ""

    def cell(x: float, lo: float, hi: float) -> str:
        if not math.isfinite(x):
            return "—"
        return f"{x:.2f} [{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) else f"{x:.2f} (one run per task)"

    rows = []
    table = table.sort_values(["iqm", "optimizer"], ascending=[False, True], na_position="last")
    for r in table.itertuples():
        poi = "— (the baseline)" if r.optimizer == r.baseline else cell(r.poi, r.poi_lo, r.poi_hi)
        rows.append({"optimizer": r.optimizer, "iqm": cell(r.iqm, r.iqm_lo, r.iqm_hi), "poi": poi,
                     "tasks": r.n_tasks, "runs": r.n_runs, "baseline": r.baseline})
    note = stats_note(frame)
    for task, label in (labels or {}).items():
        note = note.replace(task, label)
    return rows, note


def render(
    data: SweepData,
    figures: list[dict[str, Any]] | None,
    leaderboard: pd.DataFrame,
    comparison: pd.DataFrame | None = None,
    baseline_id: str | None = None,
    csv_name: str = "report.csv",
    elsewhere: pd.DataFrame | None = None,
) -> str:
    """The report's HTML text.

    ``figures`` is :func:`figure_items` of the frame (``None`` builds them here, named after
    ``csv_name``); ``leaderboard`` is :func:`reports.figures.leaderboard` of the frame;
    ``elsewhere`` the store's other runs of its trials (:func:`reports.batch_flags.observed_elsewhere`).
    """
    frame = data.frame
    s = summaries(frame)
    if figures is None:
        figures = figure_items(frame, csv_name.split(".", 1)[0])
    labels = task_labels(frame)
    parts = _search_parts(data, labels)
    board = _leaderboard_vars(leaderboard, labels)
    across, across_note = across_rows(frame, labels)
    status_table, not_finished = _status_tables(s, labels)
    return _env().get_template(TEMPLATE).render(
        **_header_vars(data, s, labels),
        sections=_sections(figures, comparison, baseline_id, parts),
        **board,
        across=across,
        across_note=across_note,
        boundary=boundary_warnings(frame, labels),
        tasks=label_table(frame).to_dict("records"),
        trials=_trial_rows(s, labels),
        figures=figures,
        vega_js=_vega_js() if any(f["vl"] for f in figures) else None,
        **_comparison_vars(comparison, baseline_id),
        statuses=STATUSES,
        status_table=status_table,
        not_finished=not_finished,
        batching_flags=batching_flags(frame, labels, elsewhere),
        **parts,
        audit_changes=audit_changes(frame, labels) if parts["early_stops"] else [],
        config_yaml=data.config_yaml,
        common_params=_common_params(s),
        environment=environment(data),
        tracking_uri=_safe_uri(data.tracking_uri),
        csv_name=csv_name,
        harness_version=harness_version(),
    )


def _leaderboard_vars(leaderboard: pd.DataFrame, labels: dict[str, str]) -> dict[str, Any]:
    """The template's leaderboard table, whether it shows ties (``a · b`` ranks) and their words."""
    lb = _leaderboard_table(leaderboard, labels)
    return {"leaderboard": lb, "ties_shown": lb is not None and any(" · " in r["Rank"] for r in lb["rows"]),
            "tie_words": power_words()}


def _search_parts(data: SweepData, labels: dict[str, str]) -> dict[str, list]:
    """The optional sections' rows: coordinate descent's certificates, ASHA / Hyperband's early
    stops, target claims."""
    search = getattr(data, "search", [])
    return {"tuning_paths": certificate_rows(search), "early_stops": audit_rows(search),
            "claims": claim_rows(data.frame, labels), "equal_tokens": equal_token_rows(data.frame, labels)}


def _header_vars(data: SweepData, s: pd.DataFrame, labels: dict[str, str]) -> dict[str, Any]:
    """The template's variables of the page's header: the sweep, what selects, what ranks, counts."""
    frame = data.frame
    objective_words, header = _objective_words(frame, s, labels)
    counts = s["status"].value_counts()
    return {
        "experiment": data.experiment,
        "sweep_id": data.sweep_id,
        "n_invocations": len(data.parents),
        "objective": header,
        "selection": selection_sentence(frame, objective_words),
        "selected_by": selection_caption(frame),
        "time_clock": clock_note(frame),
        "score_note": score_note(frame),
        "denominator_note": denominator_note(frame),
        "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "n_trials": len(s),
        "unfinished": unfinished_words(data.parents, len(s)),
        "status_counts": [(st, int(counts.get(st, 0))) for st in STATUSES if counts.get(st, 0)],
        "n_tasks": s["task"].nunique(),
        "n_optimizers": s["optimizer"].nunique(),
    }


def _objective_words(frame: pd.DataFrame, s: pd.DataFrame, labels: dict[str, str]) -> tuple[str, str]:
    """``(objective, header)``: what selects (with its target) and what the header says, per task
    when the tasks' objectives differ."""
    def words(o):
        return o.label + (f" (target {target_words(o)})" if target_words(o) else "")

    if not objectives_differ(frame):
        return words(objective(frame)), selected_on(frame)
    tasks = sorted(s["task"].unique())  # workloads with different targets: each task's, by its label
    own = "each task's own: "
    return (own + "; ".join(f"{labels.get(t, t)}: {words(objective(frame, t))}" for t in tasks),
            own + "; ".join(f"{labels.get(t, t)}: {selected_on(frame, t)}" for t in tasks))


def _sections(figures: list[dict], comparison: pd.DataFrame | None, baseline_id: str | None,
              parts: dict[str, list]) -> list[dict[str, str]]:
    """The page's sections in order (its table of contents): those without content left out."""
    sections = [{"id": "leaderboard", "title": "Leaderboard"}, {"id": "tasks", "title": "Tasks"}]
    sections += [{"id": f["id"], "title": f["title"]} for f in figures]
    if comparison is not None:
        sections.append({"id": "baseline", "title": f"Comparison with baseline {baseline_id}"})
    for key, sid, title in (("tuning_paths", "tuning-paths", "Tuning paths"),
                            ("early_stops", "early-stopping", "Early stopping"),
                            ("claims", "target-claims", "Target claims"),
                            ("equal_tokens", "equal-tokens", "Equal tokens")):
        if parts[key]:
            sections.append({"id": sid, "title": title})
    return [*sections,
            {"id": "trials", "title": "Trials"},
            {"id": "config", "title": "Sweep configuration"},
            {"id": "environment", "title": "Environment"}]


def _leaderboard_table(leaderboard: pd.DataFrame, labels: dict[str, str]) -> dict | None:
    """The leaderboard as the template shows it (columns said once go to the caption); ``None``
    when empty."""
    if leaderboard.empty:
        return None
    shared = shared_columns(leaderboard)  # said once, in the caption
    cols = [c for c in leaderboard.columns if not c.startswith("_") and c not in shared]
    rows = leaderboard.assign(Task=leaderboard["Task"].map(labels).fillna(leaderboard["Task"]))
    return {
        "caption": [(c, "none" if v == "—" else v) for c, v in shared.items()],
        "columns": cols,
        "numeric": {"Rank", "Seeds finished", "Step time (ms, median)"},
        "rows": rows[cols].to_dict("records"),
    }


def _status_tables(s: pd.DataFrame, labels: dict[str, str]) -> tuple[list[dict], list[dict]]:
    """``(status_table, not_finished)``: trials per status for each task and optimizer, and one row
    per trial that did not finish."""
    status_table = []
    for (task, opt), g in s.groupby(["task", "optimizer"], sort=True):
        vc = g["status"].value_counts()
        status_table.append(
            {"task": labels.get(task, task), "optimizer": opt, **{st: int(vc.get(st, 0)) for st in STATUSES}}
        )
    nf = s[s["status"] != "finished"].sort_values(["task", "optimizer", "config", "seed"])
    nf = nf.assign(task=nf["task"].map(labels).fillna(nf["task"]))
    cols = ["trial_id", "task", "config", "seed", "status", "attempts", "reason"]
    return status_table, nf[cols].astype(object).where(nf[cols].notna(), "").to_dict("records")


def _common_params(s: pd.DataFrame) -> list[tuple[str, str]]:
    """``(name, value)`` of every ``params.*`` column that holds one value in every trial."""
    common = []
    for c in sorted(c for c in s.columns if c.startswith("params.")):
        vals = s[c].dropna().astype(str).unique()
        if len(vals) == 1 and s[c].notna().all():
            common.append((c[len("params.") :], vals[0]))
    return common


def _comparison_vars(comparison: pd.DataFrame | None, baseline_id: str | None) -> dict[str, Any]:
    """The template's variables of the ``--baseline`` comparison (rows, flags, regressions)."""
    rows = comparison.to_dict("records") if comparison is not None else []
    return {
        "comparison": rows if comparison is not None else None,
        "comparison_columns": list(comparison.columns) if comparison is not None else [],
        "flagged": [r for r in rows if r["flag"] in ("regression", "improvement")],
        "n_regressions": sum(r["flag"] == "regression" for r in rows),
        "baseline_id": baseline_id,
    }


def harness_version() -> str:
    """The installed distribution's version (read from its metadata, so reports need not import
    ``harness``), or ``"unknown"`` when it is not installed."""
    try:
        return metadata.version("jax-train-harness")
    except metadata.PackageNotFoundError:
        return "unknown"
