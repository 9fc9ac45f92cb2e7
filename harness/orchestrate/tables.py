"""Terminal tables that never lose a cell's content: :func:`print_table` prints a rich table as a
table where its cells fit (wrapped at words), and otherwise (a narrow terminal: 80 columns) as
records, one block per row with ``column: value`` lines that wrap instead of truncating. Used by
every table the command line prints (the sweep's plan and summary, ``status``). Also the width the
command line lays its output out for (:func:`output_width`: ``COLUMNS``, else the terminal's, else
80) and its stdout console (:func:`stdout_console`: no trailing spaces on a pipe)."""

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
    """A rich console on stdout, :func:`output_width` columns wide; not on a terminal (a pipe, a
    file) without trailing spaces on any line (:class:`NoTrailingSpaces`)."""
    from rich.console import Console

    width = output_width()
    if Console(stderr=False).is_terminal:
        return Console(stderr=False, width=width)
    return Console(file=NoTrailingSpaces(), width=width)


def output_width(stream: str = "stdout") -> int:
    """The width what the command line prints is laid out for: ``COLUMNS`` when it is set (a
    positive number); else the terminal's width when ``stream`` (``"stdout"``/``"stderr"``) is a
    terminal; else 80 (a pipe or a file, whatever stdin is)."""
    import os
    import sys

    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    f = getattr(sys, stream, None)
    try:
        if f is not None and f.isatty():
            return os.get_terminal_size(f.fileno()).columns or 80
    except (OSError, ValueError, AttributeError):
        pass
    return 80


class NoTrailingSpaces:
    """A text stream that writes to the current ``sys.stdout`` (looked up at each write, so that a
    test's captured stdout gets it) with the spaces at the end of each line dropped: a rich table
    pads its cells to the column's width, which a pipe or a log keeps as trailing spaces. Spaces at
    the end of a write wait for the next one (dropped if it starts a new line)."""

    def __init__(self) -> None:
        self._held = ""

    @staticmethod
    def _out():
        import sys

        return sys.stdout

    def write(self, text: str) -> int:
        n = len(text)
        text = self._held + text
        lines = text.split("\n")
        last = lines[-1].rstrip(" ")
        self._held = lines[-1][len(last):]
        self._out().write("\n".join([*(ln.rstrip(" ") for ln in lines[:-1]), last]))
        return n

    def flush(self) -> None:
        self._out().flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._out().fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._out(), "encoding", None) or "utf-8"
