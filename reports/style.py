"""The look every report figure shares: one colour and one marker per optimizer, the legend above
the panels and inside the figure, log axes with plain numbers, PNG output.

Colours are Okabe and Ito's eight (*Color Universal Design*, 2002: told apart with every common
colour-vision deficiency), in an order that keeps the first seven clear of each other and of the
grey of reference lines; every optimizer also gets a marker of its own (:data:`MARKERS`), so ten
or more optimizers stay apart where colours repeat (colour i mod 8, marker i mod 10: unique up to
40). The same optimizer gets the same colour and marker in every static figure and interactive
view of a report (:func:`palette`, :func:`markers`, :func:`vega_shapes`).

Figures are drawn on ``matplotlib.figure.Figure`` objects with an Agg canvas
(:func:`reports.layout.new_figure`: no pyplot, no global backend switch), so every figure module is
safe to call from notebooks, threads and headless machines.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from reports.frame import summaries

#: Okabe and Ito's colour-blind-safe colours: blue, orange, bluish green, vermillion, reddish
#: purple, sky blue, black, yellow (the palest last: it reads worst on white).
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
#: One marker per optimizer, matplotlib's name and Vega's ``shape`` for it (the interactive views'
#: points): circle, square, triangle up, diamond, triangle down, plus, x, star, hexagon, pentagon.
#: Never ``>`` (the time figures' hollow ▷ means "not reached").
MARKERS = (
    ("o", "circle"),
    ("s", "square"),
    ("^", "triangle-up"),
    ("D", "diamond"),
    ("v", "triangle-down"),
    ("P", "cross"),
    ("X", "M-0.7,-1L0,-0.3L0.7,-1L1,-0.7L0.3,0L1,0.7L0.7,1L0,0.3L-0.7,1L-1,0.7L-0.3,0L-1,-0.7Z"),
    ("*", "M0,-1L0.235,-0.324L0.951,-0.309L0.38,0.124L0.588,0.809L0,0.4L-0.588,0.809L-0.38,0.124"
          "L-0.951,-0.309L-0.235,-0.324Z"),
    ("h", "M0,-1L0.866,-0.5L0.866,0.5L0,1L-0.866,0.5L-0.866,-0.5Z"),
    ("p", "M0,-1L0.951,-0.309L0.588,0.809L-0.588,0.809L-0.951,-0.309Z"),
)
#: Lines and words that are no optimizer (targets, "validation (selects)", "a seed ends"): a grey
#: that no colour of :data:`OKABE_ITO` is mistaken for.
NEUTRAL = "0.45"


def optimizers(frame: pd.DataFrame) -> list[str]:
    """The frame's optimizers, sorted: the order colours and markers are handed out in."""
    return sorted(summaries(frame)["optimizer"].dropna().unique())


def palette(frame: pd.DataFrame) -> dict[str, str]:
    """One colour per optimizer (``#rrggbb``; :data:`OKABE_ITO` in the sorted optimizers' order,
    repeating after eight, where :func:`markers` still tells them apart), the same in every figure
    and interactive view of the report."""
    return {o: OKABE_ITO[i % len(OKABE_ITO)] for i, o in enumerate(optimizers(frame))}


def palette_hex(frame: pd.DataFrame) -> dict[str, str]:
    """:func:`palette` as ``#rrggbb`` strings: the interactive views' colours, so an optimizer has
    the same colour in the static figures and in the page's interactive versions."""
    from matplotlib.colors import to_hex

    return {o: to_hex(c) for o, c in palette(frame).items()}


def markers(frame: pd.DataFrame) -> dict[str, str]:
    """One matplotlib marker per optimizer (:data:`MARKERS`, in the order of :func:`palette`)."""
    return {o: MARKERS[i % len(MARKERS)][0] for i, o in enumerate(optimizers(frame))}


def vega_shapes(frame: pd.DataFrame) -> dict[str, str]:
    """:func:`markers` as Vega-Lite ``shape`` values (the interactive views' points)."""
    return {o: MARKERS[i % len(MARKERS)][1] for i, o in enumerate(optimizers(frame))}


def optimizer_handles(pal: dict[str, str], marks: dict[str, str] | None = None) -> list[Line2D]:
    """A legend key per optimizer of ``pal``: its colour, and its marker when ``marks`` names one."""
    marks = marks or {}
    return [Line2D([], [], color=c, lw=2.2, marker=marks.get(o, ""), ms=6, label=o) for o, c in pal.items()]


#: A legend's horizontal margin inside the figure, in pixels on each side.
LEGEND_MARGIN_PX = 6.0


def fit_legend(fig: Figure, handles: list, title: str | None = None, max_columns: int = 6, **kw):
    """A legend above the panels (``loc="outside upper center"``) with as many columns as fit the
    figure's width, at most ``max_columns``: a legend wider than the figure is not shrunk by the
    layout, it is cut at both edges. Measured with the figure's
    renderer before the figure is drawn; one column when nothing wider fits."""
    renderer = fig.canvas.get_renderer()
    room = fig.bbox.width - 2 * LEGEND_MARGIN_PX
    leg = None
    for ncols in range(max(1, min(len(handles), max_columns)), 0, -1):
        if leg is not None:
            leg.remove()
        leg = fig.legend(handles=handles, loc="outside upper center", ncols=ncols, frameon=False,
                         title=title, title_fontsize=11 if title else None, **kw)
        if leg.get_window_extent(renderer).width <= room:
            break
    return leg


def legend(fig: Figure, pal: dict, extra: list | None = None, title: str | None = None,
           marks: dict[str, str] | None = None) -> None:
    """The figure's legend above the panels: a key per optimizer of ``pal`` (with its marker from
    ``marks``), then ``extra``; ``title`` (a one-task figure's task label) is the legend's own
    title: a separate ``suptitle`` collides with an "outside" legend of two rows. Never wider than
    the figure (:func:`fit_legend`)."""
    fit_legend(fig, optimizer_handles(pal, marks) + (extra or []), title=title)


def log_y(ax, lo: float, hi: float) -> None:
    """Log y axis with plain numbers (0.2, 0.5, 1, 2) instead of 2×10⁰; minor ticks labelled only
    when the data span less than about one and a half decades."""
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    if hi / lo < 30:
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
        ax.yaxis.set_minor_formatter(plain)
    else:
        ax.yaxis.set_minor_formatter(NullFormatter())


def count_text(x: float) -> str:
    """A count as an axis label: ``800``, ``4k``, ``20k``, ``1.2M``, ``3B`` (3 significant digits at
    most, trailing zeros dropped)."""
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def log_count_x(ax) -> None:
    """Log x axis of counts (parameters, steps) labelled as :func:`count_text`: 1, 2 and 5 of each
    decade on an axis spanning at most 1.5 decades, 1 and 3 up to 2.5, else decades only (decades
    alone label one tick of a narrow axis); call it after the data are drawn (it reads the limits)."""
    ax.set_xscale("log")
    lo, hi = ax.get_xlim()
    decades = float(np.log10(hi / lo)) if lo > 0 and hi > lo else 1.0
    subs = (1.0, 2.0, 5.0) if decades <= 1.5 else (1.0, 3.0) if decades <= 2.5 else (1.0,)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: count_text(x)))
    ax.xaxis.set_minor_formatter(NullFormatter())


def png_bytes(fig: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (no metadata, so no URL of matplotlib is embedded)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()
