"""One self-contained HTML file from a sweep's frame, figures and tables (Jinja2).

Figures are embedded as ``data:image/png;base64`` URIs, styles are inline, and a
Content-Security-Policy (``default-src 'none'; img-src data:``) forbids any network access, so the
file opens the same offline, from an e-mail or from an MLflow artifact.
"""

from __future__ import annotations

import base64
import datetime as dt
import platform
import struct
from importlib import metadata
from typing import Any

import pandas as pd

from reports.frame import ENV_TAGS, STATUSES, SweepData, objective, summaries

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


def data_uri_png(png: bytes) -> str:
    """``data:image/png;base64,…`` for PNG bytes."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _png_size(png: bytes) -> tuple[int, int]:
    return struct.unpack(">II", png[16:24])


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


def environment(data: SweepData) -> list[tuple[str, str]]:
    """(label, value) pairs: versions and device from the trials' tags, dates, and the report's tools."""
    s = summaries(data.frame)
    env = [(t.replace("_", " "), _values(s[t]) if t in s else "not logged") for t in ENV_TAGS]
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


def render(
    data: SweepData,
    pngs: dict[str, bytes | None],
    leaderboard: pd.DataFrame,
    comparison: pd.DataFrame | None = None,
    baseline_id: str | None = None,
    csv_name: str = "report.csv",
) -> str:
    """The report's HTML text.

    ``pngs`` maps each :data:`reports.figures.FIGURES` key to PNG bytes or ``None`` (no data).
    """
    from reports.figures import FIGURES

    frame = data.frame
    s = summaries(frame)
    figures = []
    for spec in FIGURES:
        png = pngs.get(spec.key)
        w, h = _png_size(png) if png else (0, 0)
        figures.append(
            {
                "id": spec.key.replace("_", "-"),
                "title": spec.title,
                "caption": spec.caption,
                "empty": spec.empty,
                "src": data_uri_png(png) if png else None,
                "width": w,
                "height": h,
            }
        )

    sections = [{"id": "leaderboard", "title": "Leaderboard"}]
    sections += [{"id": f["id"], "title": f["title"]} for f in figures]
    if comparison is not None:
        sections.append({"id": "baseline", "title": f"Comparison with baseline {baseline_id}"})
    sections += [
        {"id": "trials", "title": "Trials"},
        {"id": "config", "title": "Sweep configuration"},
        {"id": "environment", "title": "Environment"},
    ]

    lb = None
    if not leaderboard.empty:
        cols = [c for c in leaderboard.columns if not c.startswith("_") and c != "Task"]
        lb = {
            "columns": cols,
            "numeric": {"Rank", "Seeds finished", "Step time (ms, median)"},
            "groups": [
                (task, g[cols].to_dict("records")) for task, g in leaderboard.groupby("Task", sort=True)
            ],
        }

    counts = s["status"].value_counts()
    status_table = []
    for (task, opt), g in s.groupby(["task", "optimizer"], sort=True):
        vc = g["status"].value_counts()
        status_table.append({"task": task, "optimizer": opt, **{st: int(vc.get(st, 0)) for st in STATUSES}})
    nf = s[s["status"] != "finished"].sort_values(["task", "optimizer", "config", "seed"])
    not_finished = (
        nf[["trial_id", "task", "config", "seed", "status", "attempts", "reason"]]
        .astype(object)
        .where(nf[["trial_id", "task", "config", "seed", "status", "attempts", "reason"]].notna(), "")
        .to_dict("records")
    )

    common = []
    for c in sorted(c for c in s.columns if c.startswith("params.")):
        vals = s[c].dropna().astype(str).unique()
        if len(vals) == 1 and s[c].notna().all():
            common.append((c[len("params.") :], vals[0]))

    flagged, comp_rows, comp_cols, n_reg = [], [], [], 0
    if comparison is not None:
        comp_cols = list(comparison.columns)
        comp_rows = comparison.to_dict("records")
        flagged = [r for r in comp_rows if r["flag"] in ("regression", "improvement")]
        n_reg = sum(r["flag"] == "regression" for r in comp_rows)

    obj = objective(frame)
    target = ""
    if obj.target_metric:
        target = f" (target {obj.target_metric} {'≥' if obj.mode == 'max' else '≤'} {obj.target_value:g})"
    return (
        _env()
        .get_template(TEMPLATE)
        .render(
            experiment=data.experiment,
            sweep_id=data.sweep_id,
            n_invocations=len(data.parents),
            objective=obj.label + target,
            generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            n_trials=len(s),
            status_counts=[(st, int(counts.get(st, 0))) for st in STATUSES if counts.get(st, 0)],
            n_tasks=s["task"].nunique(),
            n_optimizers=s["optimizer"].nunique(),
            sections=sections,
            leaderboard=lb,
            figures=figures,
            comparison=comp_rows if comparison is not None else None,
            comparison_columns=comp_cols,
            flagged=flagged,
            n_regressions=n_reg,
            baseline_id=baseline_id,
            statuses=STATUSES,
            status_table=status_table,
            not_finished=not_finished,
            config_yaml=data.config_yaml,
            common_params=common,
            environment=environment(data),
            tracking_uri=_safe_uri(data.tracking_uri),
            csv_name=csv_name,
            harness_version=_harness_version(),
        )
    )


def _harness_version() -> str:
    """The installed distribution's version (read from its metadata, so reports need not import
    ``harness``), or ``"unknown"`` when it is not installed."""
    import importlib.metadata

    try:
        return importlib.metadata.version("jax-train-harness")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
