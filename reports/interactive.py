"""Interactive versions of the convergence and tuning figures: Vega-Lite specs, rendered offline.

The seaborn figures stay the static, printable view; these specs add what a page can do: click a
legend entry to show or hide an optimizer, hover for the point's step, value, configuration and
seed, switch the y axis between log and linear, choose the metric and step or seconds on x.

The JavaScript (Vega, Vega-Lite and vega-embed, ~0.9 MB) comes from the installed
``vl-convert-python`` package (:func:`vega_bundle`), so a report embeds it with no network access;
the page's script (``templates/report.html.j2``) embeds each spec and re-embeds it with the other
y scale when the log/linear switch changes (Vega-Lite cannot bind a scale's type to a parameter).

Specs are plain ``dict``s of Vega-Lite v6 JSON (``$schema`` included); :func:`compile_check`
compiles one with vl-convert, which is what the tests use to validate them.
"""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pandas as pd

from harness.core.names import (
    M_FINAL_ACC,
    M_FINAL_LOSS,
    M_TRAIN_LOSS,
    M_VALID_ACC,
    M_VALID_LOSS,
    M_WALL_S,
    canonical_metric,
)
from reports import protocol
from reports.frame import curves, summaries
from reports.layout import PAGE_WIDTH_IN, grid_shape, task_labels
from reports.objectives import (
    METRIC_LABELS,
    objective,
    objective_label,
    objectives_differ,
    task_objective_values,
)
from reports.selection import best_configs
from reports.style import palette_hex, vega_shapes

SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"
#: At most this many points per trial and metric (evenly spaced steps, first and last kept).
MAX_POINTS_PER_CURVE = 80
#: Above this many trials only each optimizer's best configuration is drawn (the file stays small).
MAX_TRIALS_ALL_CONFIGS = 200
#: Pixel width of the whole chart (the page's content width less the y axis and padding).
CHART_PX = int(PAGE_WIDTH_IN * 96) - 20

#: The curve metrics drawn, in order, with their words.
_METRIC_NAMES = {m: METRIC_LABELS[m] for m in (M_TRAIN_LOSS, M_VALID_LOSS, M_VALID_ACC)}
#: The curve whose final value a task's objective ranks by.
_CURVE_OF = {M_FINAL_ACC: M_VALID_ACC, M_FINAL_LOSS: M_VALID_LOSS}
#: The convergence view's first metric choice when the tasks select on different metrics.
EACH_TASKS_OWN = "each task's selection metric"


def selection_curve(frame: pd.DataFrame, task: str | None = None) -> str:
    """The curve metric (``valid/accuracy``, ``valid/loss``) that ``task``'s objective selects on
    (:func:`reports.objectives.objective`), in words."""
    return _METRIC_NAMES[_CURVE_OF.get(objective(frame, task).final, M_VALID_ACC)]


#: The optimizer legend's title (colour and shape share it, so Vega-Lite merges their legends).
LEGEND_TITLE = "optimizer (click to toggle)"


def optimizer_color(frame: pd.DataFrame, **legend) -> dict:
    """The colour encoding of every interactive view: :func:`reports.style.palette` (the static
    figures' colours) as an explicit domain and range, the legend on top."""
    pal = palette_hex(frame)
    return {"field": "optimizer", "type": "nominal",
            "scale": {"domain": list(pal), "range": list(pal.values())},
            "legend": {"title": LEGEND_TITLE, "orient": "top", **legend}}


def optimizer_shape(frame: pd.DataFrame, color: dict) -> dict:
    """The shape encoding of the views' points: :func:`reports.style.vega_shapes` (the static
    figures' markers), with the colour encoding ``color``'s legend (Vega-Lite merges the two)."""
    shapes = vega_shapes(frame)
    return {"field": "optimizer", "type": "nominal",
            "scale": {"domain": list(shapes), "range": list(shapes.values())},
            "legend": dict(color["legend"])}


@functools.cache
def vega_bundle() -> str:
    """The JavaScript of vega-embed, Vega-Lite and Vega (globals ``vegaEmbed``, ``vega``,
    ``vegaLite``) from the installed ``vl-convert-python``; no network.

    Raises:
      ImportError: ``vl-convert-python`` is not installed (``pip install -e .`` installs it).
    """
    import vl_convert

    return vl_convert.javascript_bundle()


def compile_check(spec: dict) -> dict:
    """The Vega spec Vega-Lite compiles ``spec`` to (raises ``ValueError`` on an invalid spec)."""
    import vl_convert

    return vl_convert.vegalite_to_vega(spec)


def _thin(g: pd.DataFrame, n: int) -> pd.DataFrame:
    if len(g) <= n:
        return g
    idx = np.unique(np.linspace(0, len(g) - 1, n).round().astype(int))
    return g.iloc[idx]


def _records(df: pd.DataFrame) -> list[dict]:
    out = []
    for rec in df.to_dict("records"):
        out.append(
            {
                k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in rec.items()
                if not (v is pd.NA or v is None)
            }
        )
    return out


def _facet_width(n_tasks: int) -> tuple[int, int]:
    _rows, cols = grid_shape(n_tasks, max_columns=3)
    return cols, max(220, (CHART_PX - 90 * cols) // cols)


def convergence_long(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (trial, metric, logged step): ``task`` (short label), ``optimizer``, ``config``,
    ``seed``, ``trial``, ``best`` (the trial is of its optimizer's best configuration on the task),
    ``metric`` (display name), ``selects`` (the metric is the one its task's objective selects on:
    :func:`selection_curve`), ``step``, ``seconds`` (``time/wall_s`` interpolated at the step) and
    ``value``; at most :data:`MAX_POINTS_PER_CURVE` points per curve."""
    c = curves(frame)
    if c.empty:
        return pd.DataFrame()
    best = best_configs(frame)[["task", "optimizer", "config_id"]].assign(best=True)
    c = c.merge(best, on=["task", "optimizer", "config_id"], how="left")
    c["best"] = c["best"].eq(True)
    if c["trial_id"].nunique() > MAX_TRIALS_ALL_CONFIGS:
        c = c[c["best"]]
    labels = task_labels(frame)
    selects = {t: selection_curve(frame, t) for t in c["task"].unique()}
    parts = []
    for _tid, g in c.groupby("trial_id", sort=True):
        g = g.sort_values("step")
        g = g.assign(seconds=_seconds_at_steps(g))
        for m, name in _METRIC_NAMES.items():
            if m not in g:
                continue
            h = _thin(g[g[m].notna()], MAX_POINTS_PER_CURVE)
            if h.empty:
                continue
            parts.append(
                pd.DataFrame(
                    {
                        "task": h["task"].map(labels).fillna(h["task"]).to_numpy(),
                        "optimizer": h["optimizer"].to_numpy(),
                        "config": h["config"].to_numpy(),
                        "seed": h["seed"].astype("Int64").astype(object).to_numpy(),
                        "trial": h["trial_id"].to_numpy(),
                        "best": h["best"].to_numpy(),
                        "metric": name,
                        "selects": h["task"].map(selects).eq(name).to_numpy(),
                        "step": h["step"].astype(int).to_numpy(),
                        "seconds": np.round(h["seconds"].to_numpy(float), 4),
                        "value": h[m].to_numpy(float),
                    }
                )
            )
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _seconds_at_steps(g: pd.DataFrame) -> np.ndarray:
    """One trial's ``time/wall_s`` interpolated at each of its rows' steps (0 s at step 0; NaN
    outside the logged range or without any)."""
    known = g[["step", M_WALL_S]].dropna()
    steps = g["step"].astype(float).to_numpy()
    if not len(known):
        return np.full(len(g), np.nan)
    xs, ys = known["step"].astype(float).to_numpy(), known[M_WALL_S].to_numpy()
    if xs[0] > 0:
        xs, ys = np.r_[0.0, xs], np.r_[0.0, ys]
    return np.interp(steps, xs, ys, left=np.nan, right=np.nan)


def _legend_toggle() -> dict:
    return {"name": "shown", "select": {"type": "point", "fields": ["optimizer"]}, "bind": "legend"}


def convergence_spec(frame: pd.DataFrame) -> dict | None:
    """Vega-Lite spec: every trial's curve (thin; its optimizer's best configuration bold), one
    panel per task, one colour per optimizer; controls for the metric and for step or seconds on
    x; hover a point for its values; click the legend to toggle optimizers. ``None`` without
    curves."""
    d = convergence_long(frame)
    if d.empty:
        return None
    metrics = [m for m in _METRIC_NAMES.values() if m in set(d["metric"])]
    if objectives_differ(frame):  # open on each task's own metric, then any one for every task
        metrics, default = [EACH_TASKS_OWN, *metrics], EACH_TASKS_OWN
    else:
        default = selection_curve(frame) if selection_curve(frame) in metrics else metrics[-1]
    targets = _target_rows(frame, metrics)
    own = json.dumps(EACH_TASKS_OWN)  # a Vega expression's string literal
    cols, width = _facet_width(d["task"].nunique())
    ylog = "loss" in default  # the y scale it opens with (the report's switch changes it)
    x, y = _convergence_xy(ylog, own)
    layer_enc = {"x": x, "y": y, "color": optimizer_color(frame),
                 "detail": {"field": "trial", "type": "nominal"}}
    return {
        "$schema": SCHEMA,
        # read by the report's log/linear switch: the y scale it starts with
        "usermeta": {"ylog": ylog},
        "data": {"values": _records(d) + targets},
        "params": [
            {"name": "metric", "value": default,
             "bind": {"input": "select", "options": metrics, "name": "metric "}},
            {"name": "xaxis", "value": "step",
             "bind": {"input": "radio", "options": ["step", "seconds"], "name": "x axis "}},
        ],
        "transform": [
            {"filter": f"metric == {own} ? datum.selects : datum.metric == metric"},
            {"calculate": "xaxis == 'step' ? datum.step : datum.seconds", "as": "x"},
            # > 0 added by the log switch; a target row has no x (a rule across the panel)
            {"filter": "(datum.target || isValid(datum.x)) && isValid(datum.value)"},
        ],
        "facet": _convergence_facet(frame, d, own),
        "columns": cols,
        "resolve": {"scale": {"x": "independent", "y": "independent"}},
        "spec": {"width": width, "height": 260, "layer": _convergence_layers(layer_enc, y, bool(targets))},
        "config": {"view": {"stroke": "#dde2ea"}, "axis": {"labelFontSize": 11, "titleFontSize": 12}},
    }


def _convergence_xy(ylog: bool, own: str) -> tuple[dict, dict]:
    """The convergence view's x (step or seconds, as the control says) and y encodings."""
    x = {"field": "x", "type": "quantitative", "axis": {"title": {"expr": "xaxis == 'step' ? "
         "'optimizer step' : 'seconds since the start of training'"}}}
    y = {"field": "value", "type": "quantitative",
         "scale": {"type": "log"} if ylog else {"type": "linear", "zero": False},
         "axis": {"title": {"expr": f"metric == {own} ? {json.dumps(EACH_TASKS_OWN + ' (panel titles)')} "
                                    ": metric"}}}
    return x, y


def _convergence_facet(frame: pd.DataFrame, d: pd.DataFrame, own: str) -> dict:
    """One panel per task, titled with the metric its objective selects on when each task's own
    is shown."""
    own_metric = {t: "" for t in d["task"].unique()}
    for t in summaries(frame)["task"].dropna().unique():
        own_metric[task_labels(frame).get(t, t)] = selection_curve(frame, t)
    return {"field": "task", "type": "nominal", "title": None,
            "header": {"labelFontSize": 13, "labelFontWeight": "bold",
                       "labelExpr": f"metric == {own} ? datum.value + ' — ' + "
                                    f"{json.dumps(own_metric)}[datum.value] : datum.value"}}


def _convergence_layers(layer_enc: dict, y: dict, targets: bool) -> list[dict]:
    """The convergence view's layers: the curves, the hover cells, the hovered point and (with
    ``targets``) each task's target as a dashed rule."""
    tooltip = [
        {"field": "task", "type": "nominal"},
        {"field": "optimizer", "type": "nominal"},
        {"field": "config", "type": "nominal", "title": "configuration"},
        {"field": "seed", "type": "ordinal"},
        {"field": "metric", "type": "nominal"},
        {"field": "step", "type": "quantitative"},
        {"field": "seconds", "type": "quantitative", "format": ".3~g"},
        {"field": "value", "type": "quantitative", "format": ".4~g"},
    ]
    return [
        {
            "params": [_legend_toggle()],
            "transform": [{"filter": "!datum.target"}],
            "mark": {"type": "line", "interpolate": "linear"},
            "encoding": {
                **layer_enc,
                "strokeWidth": {"condition": {"test": "datum.best", "value": 2.2}, "value": 0.8},
                "opacity": {"condition": {"param": "shown", "value": 0.9}, "value": 0.06},
            },
        },
        {
            # the point nearest the pointer (its Voronoi cells); no tooltip here: Vega-Lite
            # 6.4 (vl-convert 1.9) gives a nearest layer's string fields as "undefined"
            "params": [{"name": "hover", "select": {"type": "point", "on": "pointerover",
                                                    "nearest": True, "clear": "pointerout"}}],
            "transform": [{"filter": "!datum.target"}],
            "mark": {"type": "point", "filled": True, "size": 50, "opacity": 0},
            "encoding": layer_enc,
        },
        {
            # drawn over the cells: the nearest point shown, its values on hover
            "transform": [{"filter": "!datum.target"}],
            "mark": {"type": "point", "filled": True, "size": 60},
            "encoding": {**layer_enc,
                         "opacity": {"condition": {"param": "hover", "empty": False, "value": 1}, "value": 0},
                         "tooltip": tooltip},
        },
        *([{
            "transform": [{"filter": "datum.target"}],
            "mark": {"type": "rule", "color": "#4d4d4d", "strokeDash": [5, 3], "strokeWidth": 1.2},
            "encoding": {"y": y, "tooltip": [{"field": "task", "type": "nominal"},
                                             {"field": "metric", "type": "nominal"},
                                             {"field": "value", "type": "quantitative",
                                              "title": "target", "format": "~g"}]},
        }] if targets else []),
    ]


def _target_rows(frame: pd.DataFrame, metrics: list[str]) -> list[dict]:
    """One row per task with a target on a drawn curve metric: ``task`` (label), ``metric``,
    ``selects``, ``target`` (True) and ``value`` (the target): the view's dashed rule."""
    labels, rows = task_labels(frame), []
    for t in sorted(summaries(frame)["task"].dropna().unique()):
        o = objective(frame, t)
        curve = _METRIC_NAMES.get(canonical_metric(o.target_metric)) if o.target_metric else None
        if curve in metrics and math.isfinite(o.target_value):
            rows.append({"task": labels.get(t, t), "metric": curve, "target": True,
                         "selects": curve == selection_curve(frame, t), "value": o.target_value})
    return rows


def tuning_long(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per trial with a step size: ``task`` (short label), ``optimizer``, ``config``,
    ``seed``, ``status``, ``step_size``, ``value`` (the final value of its task's objective metric;
    absent for trials that did not finish) and ``metric`` (that metric, in words)."""
    s = summaries(frame)
    s = s[s["step_size"].notna() & (s["step_size"] > 0)]
    if s.empty:
        return pd.DataFrame()
    labels = task_labels(frame)
    value = task_objective_values(frame, s)  # each task's own target metric
    return pd.DataFrame(
        {
            "task": s["task"].map(labels).fillna(s["task"]).to_numpy(),
            "optimizer": s["optimizer"].to_numpy(),
            "config": s["config"].to_numpy(),
            "seed": s["seed"].astype("Int64").astype(object).to_numpy(),
            "status": s["status"].to_numpy(),
            "step_size": s["step_size"].to_numpy(float),
            "value": value.where(s["status"] == "finished").to_numpy(float),
            "metric": s["task"].map({t: objective(frame, t).label for t in s["task"].unique()}).to_numpy(),
        }
    )


def _value_facets(d: pd.DataFrame, cols: int, width: int, height: int, layers: list) -> dict:
    """A linear-y Vega-Lite spec of ``layers`` faceted by task (independent y per panel), rows
    without a valid ``value`` filtered out; the report's log switch re-embeds it with a log y."""
    return {
        "$schema": SCHEMA,
        "usermeta": {"ylog": False},
        "data": {"values": _records(d)},
        "transform": [{"filter": "isValid(datum.value)"}],  # > 0 added by the log switch
        "facet": {"field": "task", "type": "nominal", "title": None,
                  "header": {"labelFontSize": 13, "labelFontWeight": "bold"}},
        "columns": cols,
        "resolve": {"scale": {"y": "independent"}},
        "spec": {"width": width, "height": height, "layer": layers},
        "config": {"view": {"stroke": "#dde2ea"}, "axis": {"labelFontSize": 11, "titleFontSize": 12}},
    }


def tuning_spec(frame: pd.DataFrame) -> dict | None:
    """Vega-Lite spec: the final metric of every trial against its step size (log x), one panel
    per task, the median per step size as a line; hover for configuration and seed; click the
    legend to toggle optimizers. ``None`` when no optimizer was run at two step sizes or more."""
    d = tuning_long(frame)
    if d.empty or d.groupby(["task", "optimizer"])["step_size"].nunique().max() < 2:
        return None
    cols, width = _facet_width(d["task"].nunique())
    color = optimizer_color(frame)
    x = {"field": "step_size", "type": "quantitative", "scale": {"type": "log"},
         "axis": {"title": "step size", "format": "~g"}}
    y = {"field": "value", "type": "quantitative", "scale": {"type": "linear", "zero": False},
         "axis": {"title": objective_label(frame)}}
    opacity = {"condition": {"param": "shown", "value": 0.9}, "value": 0.08}
    return _value_facets(d, cols, width, 240, [
                {
                    "params": [_legend_toggle()],
                    "mark": {"type": "line", "point": False},
                    "encoding": {"x": x, "y": {**y, "aggregate": "median"}, "color": color,
                                 "opacity": opacity},
                },
                {
                    "mark": {"type": "point", "filled": True, "size": 45},
                    "encoding": {
                        "x": x, "y": y, "color": color, "shape": optimizer_shape(frame, color),
                        "opacity": opacity,
                        "tooltip": [
                            {"field": "task", "type": "nominal"},
                            {"field": "optimizer", "type": "nominal"},
                            {"field": "config", "type": "nominal", "title": "configuration"},
                            {"field": "seed", "type": "ordinal"},
                            {"field": "step_size", "type": "quantitative", "format": "~g"},
                            {"field": "value", "type": "quantitative", "format": ".4~g",
                             "title": objective_label(frame)},
                            {"field": "metric", "type": "nominal"},
                        ],
                    },
                },
    ])


def tuning_curves_long(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`reports.protocol.tuning_curves` in long form: one row per (task label, optimizer,
    k, curve) with ``curve`` ``"validation (selects)"`` or ``"test of the selected"``, ``value``,
    ``lo``, ``hi`` (the 95% bootstrap band), ``n_configs``, ``metric`` (the column it is of),
    ``self_tuning`` (a ``tuning: none`` configuration's value, drawn at every k) and ``line`` (the
    curve's label: the optimizer, or ``"prodigy (self-tuning)"``)."""
    tc = protocol.tuning_curves(frame)
    if tc.empty:
        return pd.DataFrame()
    labels = task_labels(frame)
    parts = []
    for curve, col, metric in (("validation (selects)", "valid", "metric"),
                               ("test of the selected", "test", "test_metric")):
        part = tc[tc[col].notna()]
        parts.append(pd.DataFrame({
            "task": part["task"].map(labels).fillna(part["task"]).to_numpy(),
            "optimizer": part["optimizer"].to_numpy(), "k": part["k"].to_numpy(int),
            "curve": curve, "value": part[col].to_numpy(float),
            "lo": part[f"{col}_lo"].to_numpy(float), "hi": part[f"{col}_hi"].to_numpy(float),
            "n_configs": part["n_configs"].to_numpy(int),
            "metric": part[metric].to_numpy(),
            "self_tuning": [bool(x) for x in part["self_tuning"]],
            "line": part["label"].to_numpy()}))
    return pd.concat(parts, ignore_index=True)


def tuning_curves_spec(frame: pd.DataFrame) -> dict | None:
    """Vega-Lite spec of the tuning curves (Dodge et al. 2019): expected best validation metric
    after k configurations (solid) and the expected test metric of the one validation selects
    (dashed), one panel per task, each optimizer in the static figure's colour and marker; the
    validation curve's bootstrap band is drawn for the optimizer under the pointer; click the legend
    to toggle optimizers, hover for k, the value and its band. A self-tuning optimizer (``tuning: none``) is
    a horizontal rule at its value across every k. ``None`` without finished configurations."""
    d = tuning_curves_long(frame)
    if d.empty:
        return None
    cols, width = _facet_width(d["task"].nunique())
    color = optimizer_color(frame, symbolOpacity=1)
    # (a layer with legend None drops the merged colour legend of every layer: each keeps it)
    only_own = sorted(set(d.loc[d["self_tuning"], "optimizer"]) - set(d.loc[~d["self_tuning"], "optimizer"]))
    if only_own:  # the legend names a self-tuning optimizer as the static figure does
        color["legend"]["labelExpr"] = (f"indexof({json.dumps(only_own)}, datum.label) >= 0 ? "
                                        f"datum.label + ' (self-tuning)' : datum.label")
    dash = {"field": "curve", "type": "nominal", "scale": {"domain": ["validation (selects)",
                                                                      "test of the selected"],
                                                           "range": [[1, 0], [6, 3]]},
            "legend": {"title": None, "orient": "top"}}
    x, y = _tuning_curves_xy(frame, int(d["k"].max()))
    enc = {"x": x, "y": y, "color": color, "dash": dash,
           "shown": {"condition": {"param": "shown", "value": 0.9}, "value": 0.06}}
    tuned, own = (~d["self_tuning"]).any(), d["self_tuning"].any()
    # a layer whose rows are all filtered out gives an empty scale ("Infinite extent" warnings)
    return _value_facets(d, cols, width, 260, [*(_tuned_layers(frame, enc) if tuned else []),
                                               *([_self_tuning_layer(enc, tuned)] if own else [])])


def _tuning_curves_xy(frame: pd.DataFrame, k_max: int) -> tuple[dict, dict]:
    """The tuning curves' x (whole numbers of configurations, 1 to ``k_max``) and y encodings."""
    # whole budgets only: "tickMinStep" still let Vega put a tick at 1.5, labelled "2" by "d"
    ticks = list(range(1, k_max + 1, max(1, math.ceil(k_max / 12))))
    x = {"field": "k", "type": "quantitative", "scale": {"domain": [1, max(k_max, 2)]},
         "axis": {"title": "configurations tried (k)", "values": ticks, "format": "d"}}
    # one axis title for every facet: with tasks of different metrics it names neither (the
    # tooltip's "metric" says which each point is)
    name = "value (each task's metric)" if objectives_differ(frame) else \
        objective(frame).label.replace("final validation ", "")
    y = {"field": "value", "type": "quantitative", "scale": {"type": "linear", "zero": False},
         "axis": {"title": f"expected {name} of the validation-best"}}
    return x, y


def _tuned_layers(frame: pd.DataFrame, enc: dict) -> list[dict]:
    """The tuned optimizers' layers: the band under the pointer, the curves, the hover cells and
    the points (``enc``: x, y, color, dash and the toggled opacity ``shown``)."""
    x, y, color = enc["x"], enc["y"], enc["color"]
    return [
        {
            # the band of the line under the pointer only (overlapping bands and their edge
            # lines would be a muddle); every band is in the CSV
            "mark": {"type": "area"},
            "encoding": {"x": x, "y": {"field": "lo", "type": "quantitative"},
                         "y2": {"field": "hi"}, "color": color,
                         "opacity": {"condition": {"param": "band", "empty": False, "value": 0.2},
                                     "value": 0},
                         "detail": {"field": "curve", "type": "nominal"}},
            "transform": [{"filter": "datum.curve == 'validation (selects)' && "
                                     "!datum.self_tuning"}],
        },
        {
            "params": [_legend_toggle()],
            "transform": [{"filter": "!datum.self_tuning"}],
            "mark": {"type": "line"},
            "encoding": {"x": x, "y": y, "color": color, "strokeDash": enc["dash"], "opacity": enc["shown"],
                         "detail": {"field": "curve", "type": "nominal"}},
        },
        {
            # the optimizer nearest the pointer (Voronoi cells) shows its band; no tooltip
            # here: Vega-Lite 6.4 (vl-convert 1.9) gives a nearest layer's string fields
            # as "undefined"
            "params": [{"name": "band", "select": {"type": "point", "fields": ["optimizer"],
                                                   "on": "pointerover", "clear": "pointerout",
                                                   "nearest": True}}],
            "transform": [{"filter": "!datum.self_tuning"}],
            "mark": {"type": "point", "size": 45, "opacity": 0},
            "encoding": {"x": x, "y": y, "color": color},  # every layer keeps the legend
        },
        _tuned_points(frame, enc),
    ]


def _tuned_points(frame: pd.DataFrame, enc: dict) -> dict:
    """The tuned optimizers' points, over the hover cells: each one's marker, its values on hover."""
    return {
        "transform": [{"filter": "!datum.self_tuning"}],
        "mark": {"type": "point", "filled": True, "size": 45},
        "encoding": {
            "x": enc["x"], "y": enc["y"], "color": enc["color"],
            "shape": optimizer_shape(frame, enc["color"]), "opacity": enc["shown"],
            "tooltip": [
                {"field": "task", "type": "nominal"},
                {"field": "optimizer", "type": "nominal"},
                {"field": "curve", "type": "nominal"},
                {"field": "k", "type": "quantitative", "title": "configurations (k)"},
                {"field": "n_configs", "type": "quantitative", "title": "of N"},
                {"field": "value", "type": "quantitative", "format": ".4~g"},
                {"field": "metric", "type": "nominal"},
                {"field": "lo", "type": "quantitative", "format": ".4~g", "title": "band low (95%)"},
                {"field": "hi", "type": "quantitative", "format": ".4~g", "title": "band high (95%)"},
            ],
        },
    }


def _self_tuning_layer(enc: dict, tuned: bool) -> dict:
    """The self-tuning optimizers' layer: a rule at each one's value across every k."""
    return {
        **({} if tuned else {"params": [_legend_toggle()]}),
        "mark": {"type": "rule", "strokeWidth": 2},
        "transform": [{"filter": "datum.self_tuning"}],
        "encoding": {
            "y": enc["y"], "color": enc["color"], "strokeDash": enc["dash"], "opacity": enc["shown"],
            "tooltip": [
                {"field": "task", "type": "nominal"},
                {"field": "line", "type": "nominal", "title": "optimizer"},
                {"field": "curve", "type": "nominal"},
                {"field": "value", "type": "quantitative", "format": ".4~g", "title": "value at every k"},
                {"field": "metric", "type": "nominal"},
            ],
        },
    }
