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
    """Column widths at which ``table`` prints on ``console`` without cutting a cell; ``None`` when
    there are none. Every ``no_wrap`` column is as wide as its widest cell; the others, at best as
    wide as their widest cell (only a header wraps), else as their longest word (cells wrap at
    words); the room left goes to the columns that need the least more to be whole."""
    from rich.cells import cell_len

    def words(lines: list[str]) -> list[int]:
        return [cell_len(w) for ln in lines for w in ln.split()]

    heads = [_plain(c.header).splitlines() or [""] for c in table.columns]
    cells = [[ln for x in c.cells for ln in _plain(x).splitlines() or [""]] for c in table.columns]
    widest = [max(map(cell_len, h + c), default=0) for h, c in zip(heads, cells, strict=True)]
    unbounded = console.options.update_width(1 << 20)  # the table at its own widths
    budget = console.width - (console.measure(table, options=unbounded).maximum - sum(widest))
    whole_cells = [w if col.no_wrap else max([*words(h), *map(cell_len, c)], default=0)
                   for col, h, c, w in zip(table.columns, heads, cells, widest, strict=True)]
    any_word = [w if col.no_wrap else max(words(h + c), default=0)
                for col, h, c, w in zip(table.columns, heads, cells, widest, strict=True)]
    for least in (whole_cells, any_word):
        room = budget - sum(least)
        if room < 0:
            continue
        widths = list(least)
        order = sorted(range(len(widths)), key=lambda i: widest[i] - least[i])  # smallest needs first
        for n_left, i in zip(range(len(order), 0, -1), order, strict=True):
            extra = min(widest[i] - least[i], room // n_left)
            widths[i] += extra
            room -= extra
        return widths
    return None


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
