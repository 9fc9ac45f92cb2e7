"""Terminal tables that never lose a cell's content: :func:`print_table` prints a rich table as a
table where its cells fit (wrapped at words), and otherwise (a narrow terminal: 80 columns) as
records, one block per row with ``column: value`` lines that wrap instead of truncating. Used by
every table the command line prints (the sweep's plan and summary, ``status``)."""

from __future__ import annotations

#: Indent of a record's ``column: value`` lines under its first cell.
INDENT = "  "


def _plain(x) -> str:
    from rich.text import Text

    if isinstance(x, Text):
        return x.plain
    return Text.from_markup(x).plain if isinstance(x, str) else str(x)


def fit_widths(console, table) -> list[int] | None:
    """Column widths at which ``table`` prints on ``console`` without cutting a cell: every
    ``no_wrap`` column at its widest cell, every other at least as wide as its longest word, the
    room left shared out up to each column's widest cell; ``None`` when even that does not fit."""
    from rich.cells import cell_len

    lines = [[ln for x in (c.header, *c.cells) for ln in _plain(x).splitlines() or [""]]
             for c in table.columns]
    widest = [max(map(cell_len, ls), default=0) for ls in lines]
    least = [w if c.no_wrap else max((cell_len(word) for ln in ls for word in ln.split()), default=0)
             for c, ls, w in zip(table.columns, lines, widest, strict=True)]
    unbounded = console.options.update_width(1 << 20)  # the table at its own widths
    overhead = console.measure(table, options=unbounded).maximum - sum(widest)
    room = console.width - overhead - sum(least)
    if room < 0:
        return None
    widths = list(least)
    order = sorted(range(len(widths)), key=lambda i: widest[i] - least[i])  # smallest needs first
    for n_left, i in zip(range(len(order), 0, -1), order, strict=True):
        extra = min(widest[i] - least[i], room // n_left)
        widths[i] += extra
        room -= extra
    return widths


def print_table(console, table) -> None:
    """Print ``table`` on ``console``: as a table at :func:`fit_widths` when there are such widths
    (cells wrapped at words); else its title, then per row the first column's cell on its own line
    and each other non-empty cell as ``column: value`` under it (wrapped, long words folded:
    nothing is cut), then its caption."""
    widths = fit_widths(console, table)
    if widths is not None:
        for column, w in zip(table.columns, widths, strict=True):
            column.width, column.overflow = w, "fold"
        console.print(table)
        return
    for line in record_lines(table):
        console.print(line, soft_wrap=False, overflow="fold")


def record_lines(table) -> list:
    """The record layout of ``table`` (rich ``Text`` lines; see :func:`print_table`)."""
    from rich.text import Text

    def text(x) -> Text:
        if isinstance(x, Text):
            return x.copy()
        return Text.from_markup(x) if isinstance(x, str) else Text(str(x))

    columns = list(table.columns)
    cells = [list(c.cells) for c in columns]
    heads = [text(c.header).plain.replace("\n", " ") for c in columns]
    out: list = []
    if table.title:
        out.append(text(table.title))
    for i in range(table.row_count):
        first = text(cells[0][i])
        first.stylize("bold")
        out.append(first)
        for head, col in zip(heads[1:], cells[1:], strict=True):
            value = text(col[i])
            if value.plain.strip():
                line = Text(f"{INDENT}{head}: ")
                line.append_text(value)
                out.append(line)
    if table.caption:
        out.append(text(table.caption))
    return out


def stdout_console():
    """A rich console on stdout: the terminal's width, ``COLUMNS`` when set; 140 columns when
    piped or logged without ``COLUMNS`` (room for ids and commands on one line)."""
    import os

    from rich.console import Console

    console = Console(stderr=False)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(stderr=False, width=140)
    return console
