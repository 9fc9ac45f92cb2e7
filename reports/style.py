"""The look every report figure shares: one colour per optimizer, the legend above the panels, log
axes with plain numbers, PNG output.

Figures are drawn on ``matplotlib.figure.Figure`` objects with an Agg canvas
(:func:`reports.layout.new_figure`: no pyplot, no global backend switch), so every figure module is
safe to call from notebooks, threads and headless machines.
"""

from __future__ import annotations

import io

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from reports.frame import summaries


def palette(frame: pd.DataFrame) -> dict[str, tuple]:
    """One colour per optimizer (seaborn's colour-blind palette), the same in every figure."""
    import seaborn as sns

    opts = sorted(summaries(frame)["optimizer"].dropna().unique())
    return dict(zip(opts, sns.color_palette("colorblind", max(len(opts), 1)), strict=False))


def palette_hex(frame: pd.DataFrame) -> dict[str, str]:
    """:func:`palette` as ``#rrggbb`` strings: the interactive views' colours, so an optimizer has
    the same colour in the static figures and in the page's interactive versions."""
    from matplotlib.colors import to_hex

    return {o: to_hex(c) for o, c in palette(frame).items()}


def legend(fig: Figure, pal: dict[str, tuple], extra: list | None = None, title: str | None = None) -> None:
    """The figure's legend above the panels; ``title`` (a one-task figure's task label) is the
    legend's own title: a separate ``suptitle`` collides with an "outside" legend of two rows."""
    handles = [Line2D([], [], color=c, lw=2.5, label=o) for o, c in pal.items()] + (extra or [])
    fig.legend(handles=handles, loc="outside upper center", ncols=min(len(handles), 6), frameon=False,
               title=title, title_fontsize=11)


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


def png_bytes(fig: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (no metadata, so no URL of matplotlib is embedded)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()
