"""Terminal tables that never lose a cell's content: :func:`print_table` prints a rich table as a
table where every cell fits at its full length, and otherwise (a narrow terminal: 80 columns) as
records, one block per row with ``column: value`` lines that wrap instead of truncating. Used by
every table the command line prints (the sweep's plan and summary, ``status``)."""

from __future__ import annotations

#: Indent of a record's ``column: value`` lines under its first cell.
INDENT = "  "


def fits(console, table) -> bool:
    """Whether ``table`` prints on ``console`` with every cell and header on one line at its full
    length (its natural width is at most the console's)."""
    unbounded = console.options.update_width(1 << 20)  # its natural width, not the console's
    return console.measure(table, options=unbounded).maximum <= console.width


def print_table(console, table) -> None:
    """Print ``table`` on ``console``: as is when it :func:`fits`; else its title, then per row the
    first column's cell on its own line and each other non-empty cell as ``column: value`` under it
    (wrapped at words, long words folded: nothing is cut), then its caption."""
    if fits(console, table):
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
