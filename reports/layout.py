"""Layout helpers shared by every figure and the HTML page: short labels, figure size, vector output.

* :func:`task_labels` / :func:`label_table`: each task (model + dataset + task-defining params, the
  frame's ``task`` column) gets a short label such as ``mlp · digits`` for figures and terminal
  tables; the report prints the table that maps each label back to the full configuration.
* :func:`new_figure`: a constrained-layout ``Figure`` (Agg canvas, seaborn style) whose width is the
  report's page width (:data:`PAGE_WIDTH_IN`), so every figure fills the page at the same text size.
* :func:`svg_markup`, :func:`pdf_bytes`: vector output; the SVG is ready to inline in HTML (ids
  prefixed per figure so two figures never share an id, no XML prolog, scales to its container).
* :func:`drawn_texts` / :func:`layout_problems`: the bounding boxes of every text matplotlib's
  renderer actually draws, and which of them overlap or leave the figure (what the layout test
  asserts is empty for every figure).
"""

from __future__ import annotations

import io
import re
from contextlib import contextmanager

import numpy as np
import pandas as pd

from harness.core.names import is_task_param

#: Width of every report figure in inches; at :data:`DPI` this is the page's content width in CSS px.
PAGE_WIDTH_IN = 12.0
#: Resolution figures are laid out at (matplotlib points → CSS px: 100 / 72).
DPI = 100
#: At most this many facet columns side by side; more tasks wrap onto further rows.
MAX_COLUMNS = 4
#: A short label longer than this is replaced by a numbered one (``mlp · digits #2``).
MAX_LABEL_CHARS = 30
SEP = " · "


def _sns():
    import seaborn as sns

    return sns


# ---------------------------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------------------------
def _summary_rows(frame: pd.DataFrame) -> pd.DataFrame:
    s = frame[frame["row"] == "summary"] if "row" in frame else frame
    return s.drop_duplicates("task")


def task_labels(frame: pd.DataFrame) -> dict[str, str]:
    """Full task name (the frame's ``task`` column) → short label, one-to-one.

    The label is ``model · dataset``; tasks that share both get the values that tell them apart
    (``mlp · digits · width=64``) when that stays within :data:`MAX_LABEL_CHARS`, else a number in
    the order of their full names (``mlp · digits #2``). Deterministic: the same frame always gives
    the same labels.
    """
    s = _summary_rows(frame)
    if s.empty:
        return {}
    out: dict[str, str] = {}
    base = {t: f"{m}{SEP}{d}" for t, m, d in zip(s["task"], s["model"], s["dataset"], strict=True)}
    groups: dict[str, list[str]] = {}
    for t, b in base.items():
        groups.setdefault(b, []).append(t)
    for b, tasks in groups.items():
        tasks = sorted(tasks)
        if len(tasks) == 1:
            out[tasks[0]] = b
            continue
        # full names look like "mlp / digits (width=64, depth=2)": the bracket holds what varies
        bits = {t: _bracket(t) for t in tasks}
        cand = {t: f"{b}{SEP}{bits[t]}" if bits[t] else b for t in tasks}
        if len(set(cand.values())) == len(tasks) and all(len(c) <= MAX_LABEL_CHARS for c in cand.values()):
            out.update(cand)
        else:
            out.update({t: f"{b} #{i + 1}" for i, t in enumerate(tasks)})
    return out


def _bracket(task: str) -> str:
    m = re.search(r"\((.*)\)\s*$", task)
    return m.group(1) if m else ""


def label_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per task: ``label``, ``model``, ``dataset`` and ``configuration`` (every model,
    dataset, training and target parameter of the task, :func:`harness.core.names.is_task_param`,
    ``name=value`` joined by ``, ``; a value that differs between a task's trials is listed with
    all its values)."""
    s = frame[frame["row"] == "summary"] if "row" in frame else frame
    labels = task_labels(frame)
    rows = []
    for task, g in s.groupby("task", sort=True):
        parts = []
        for c in sorted(c for c in g.columns if c.startswith("params.")):
            name = c[len("params.") :]
            if not is_task_param(name):
                continue
            vals = sorted(g[c].dropna().astype(str).unique())
            if vals:
                parts.append(f"{name}={'|'.join(vals)}")
        rows.append(
            {
                "label": labels.get(task, task),
                "model": g["model"].iloc[0],
                "dataset": g["dataset"].iloc[0],
                "configuration": ", ".join(parts) or "(no parameters logged)",
                "task": task,
            }
        )
    return pd.DataFrame(rows, columns=["label", "model", "dataset", "configuration", "task"])


def with_labels(frame: pd.DataFrame, labels: dict[str, str] | None = None) -> pd.DataFrame:
    """``frame`` with a ``label`` column: the short label of each row's ``task`` (``labels`` as
    :func:`task_labels` gives them; by default computed from ``frame`` itself, which then needs the
    ``model`` and ``dataset`` columns)."""
    labels = task_labels(frame) if labels is None else labels
    return frame.assign(label=frame["task"].map(labels).fillna(frame["task"]))


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------
def grid_shape(n_panels: int, max_columns: int = MAX_COLUMNS) -> tuple[int, int]:
    """(rows, columns) for ``n_panels`` facets: one row up to ``max_columns``, then wrapped."""
    n = max(1, n_panels)
    ncols = min(n, max_columns)
    return -(-n // ncols), ncols


def new_figure(nrows: int, ncols: int, height: float, width: float = PAGE_WIDTH_IN, **subplots_kw):
    """A ``(Figure, axes[nrows, ncols])`` pair: constrained layout, Agg canvas, seaborn
    ``whitegrid`` style at a font size that reads at the page width. ``height`` in inches."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    sns = _sns()
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.9):
        fig = Figure(figsize=(width, height), layout="constrained", dpi=DPI)
        FigureCanvasAgg(fig)
        axes = fig.subplots(nrows, ncols, squeeze=False, **subplots_kw)
    fig.get_layout_engine().set(w_pad=0.06, h_pad=0.06, wspace=0.04, hspace=0.06)
    return fig, axes


def hide_unused(axes: np.ndarray, n_used: int) -> None:
    """Turn off the facets past the first ``n_used`` (row-major) of a wrapped grid."""
    for ax in axes.ravel()[n_used:]:
        ax.set_visible(False)


_ID = re.compile(r'\bid="([^"]+)"')


def svg_markup(fig, prefix: str) -> str:
    """The figure as an ``<svg>`` element to inline in HTML: no XML prolog or DOCTYPE, every ``id``
    (and reference to it) prefixed with ``prefix-`` so several figures can share a page, and sized
    by CSS (``width:100%``, ``height:auto``, the original size kept as the ``viewBox``)."""
    buf = io.StringIO()
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": prefix, "svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    ids = set(_ID.findall(text))
    for i in sorted(ids, key=len, reverse=True):
        text = text.replace(f'id="{i}"', f'id="{prefix}-{i}"')
        text = text.replace(f"#{i})", f"#{prefix}-{i})").replace(f'"#{i}"', f'"#{prefix}-{i}"')
    text = re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1 class="fig"', text, count=1)
    return text


def pdf_bytes(fig) -> bytes:
    """The figure as a one-page PDF (no creation date, so the same figure gives the same bytes)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="pdf", metadata={"CreationDate": None, "Creator": None, "Producer": None})
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# Layout checks
# ---------------------------------------------------------------------------------------------
@contextmanager
def _recording_texts(out: list):
    from matplotlib.text import Text

    orig = Text.draw

    def draw(self, renderer):
        orig(self, renderer)
        if self.get_visible() and self.get_text().strip() and self.get_alpha() != 0:
            out.append((self, self.get_window_extent(renderer)))

    Text.draw = draw
    try:
        yield
    finally:
        Text.draw = orig


def drawn_texts(fig) -> list[tuple[str, object]]:
    """``(text, bbox)`` of every text artist the renderer draws (titles, labels, tick labels,
    legends, annotations), bboxes in display pixels; invisible and empty texts are left out."""
    got: list = []
    with _recording_texts(got):
        fig.canvas.draw()
    return [(t.get_text(), bb) for t, bb in got]


def layout_problems(fig, tolerance_px: float = 0.5) -> list[str]:
    """What is wrong with the figure's text layout: pairs of drawn texts whose bounding boxes
    intersect (by more than ``tolerance_px`` on both axes) and texts that extend past the figure's
    edge. An empty list is a clean layout."""
    texts = drawn_texts(fig)
    fb = fig.bbox
    problems = []
    for text, bb in texts:
        if (
            bb.x0 < fb.x0 - tolerance_px
            or bb.y0 < fb.y0 - tolerance_px
            or bb.x1 > fb.x1 + tolerance_px
            or bb.y1 > fb.y1 + tolerance_px
        ):
            problems.append(f"{text!r} leaves the figure ({_fmt(bb)} outside {_fmt(fb)})")
    for i, (ta, a) in enumerate(texts):
        for tb, b in texts[i + 1 :]:
            ox = min(a.x1, b.x1) - max(a.x0, b.x0)
            oy = min(a.y1, b.y1) - max(a.y0, b.y0)
            if ox > tolerance_px and oy > tolerance_px:
                problems.append(f"{ta!r} overlaps {tb!r} ({_fmt(a)} ∩ {_fmt(b)})")
    return problems


def _fmt(bb) -> str:
    return f"[{bb.x0:.0f},{bb.y0:.0f}–{bb.x1:.0f},{bb.y1:.0f}]"
