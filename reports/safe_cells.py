"""Text cells made safe for the formats a user opens: a Markdown table and a spreadsheet.

A name comes from the user (an optimizer entry's ``name`` with a ``source``, a sweep's name) and
may hold ``|``, ``<script>`` or a leading ``=``: in a Markdown table a ``|`` adds a column and a tag
stays live when rendered; a spreadsheet runs a cell starting with ``=`` as a formula (OWASP's
"CSV injection"). HTML and LaTeX are escaped by their writers.
"""

from __future__ import annotations

import html
import re

import pandas as pd

#: What starts a formula in Excel, LibreOffice and Google Sheets (OWASP's list: ``= + - @``, a tab
#: and a carriage return).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def markdown_cell(value: object) -> object:
    """One Markdown table cell: ``\\`` and ``|`` backslash-escaped, ``& < >`` as HTML entities,
    a line break as ``<br>``, other control characters as spaces; a non-string is returned as is.

    Args:
      value: the cell (any type; only ``str`` is changed).
    Returns:
      The escaped ``str``, or ``value`` unchanged.
    """
    if not isinstance(value, str):
        return value
    text = html.escape(value, quote=False).replace("\\", "\\\\").replace("|", "\\|")
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "<br>")
    return _CONTROL.sub(" ", text)


def markdown_table(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell and column name through :func:`markdown_cell` (a copy)."""
    out = df.map(markdown_cell) if len(df) else df.copy()
    out.columns = [markdown_cell(str(c)) for c in df.columns]
    return out


def _risky(value: object) -> bool:
    """A string a spreadsheet would run: it starts with :data:`FORMULA_STARTS` and is not a number
    written as text (``"-0.5"``, ``"-1e-3"``: an MLflow param's value stays a number)."""
    if not isinstance(value, str) or not value.startswith(FORMULA_STARTS):
        return False
    try:
        float(value)
    except ValueError:
        return True
    return value != value.strip()  # "-1\t" is not what float() read


def spreadsheet_cell(value: object) -> object:
    """A text cell a spreadsheet will not run as a formula: one starting with ``= + - @``, a tab or
    a carriage return (and not a number) gets a leading ``'`` (OWASP); numbers, numbers written as
    text and other text are returned as they are."""
    return "'" + value if _risky(value) else value


def spreadsheet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its text columns' cells through :func:`spreadsheet_cell` (a copy when any
    changed; numeric columns, so negative numbers, untouched). For every CSV the harness writes."""
    text = [c for c in df.columns if df[c].dtype == object or pd.api.types.is_string_dtype(df[c])]
    changed = {c: df[c].map(spreadsheet_cell) for c in text if df[c].map(_risky).any()}
    if not changed:
        return df
    out = df.copy()
    for c, col in changed.items():
        out[c] = col
    return out
