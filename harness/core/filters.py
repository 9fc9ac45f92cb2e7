"""MLflow search filters built from checked values, never from pasted text: the ids a user types
are checked against their form, every other value is written as one string literal (or refused).

MLflow's filter grammar strips a literal's outer quotes and unescapes nothing, so a value holding
``'`` is written in double quotes, and one holding both quotes or a backslash cannot be written.
Standard library only.
"""

from __future__ import annotations

import re

__all__ = ["BadIdError", "check_sweep_id", "check_trial_id", "literal", "tag_is"]

_TRIAL_ID = re.compile(r"[0-9a-f]{16}")
_SWEEP_ID = re.compile(r"[0-9a-f]{12}")


class BadIdError(ValueError):
    """A trial or sweep id that does not have an id's form (checked before any query)."""


def _check(value: object, form: re.Pattern, what: str, digits: int, where: str) -> str:
    text = value.strip().lower() if isinstance(value, str) else ""
    if not form.fullmatch(text):
        raise BadIdError(f"{value!r} is not a {what}: {digits} hexadecimal digits (0-9, a-f), as {where} "
                         f"shows them")
    return text


def check_trial_id(value: object) -> str:
    """``value`` as a trial id (``harness.trial_id``), lower-cased.

    Raises:
      BadIdError: not 16 hexadecimal digits.
    """
    return _check(value, _TRIAL_ID, "trial id", 16, "the report's trials table")


def check_sweep_id(value: object) -> str:
    """``value`` as a sweep id (``harness.sweep_id``), lower-cased.

    Raises:
      BadIdError: not 12 hexadecimal digits.
    """
    return _check(value, _SWEEP_ID, "sweep id", 12, "`python -m harness status`")


def literal(value: str) -> str:
    """``value`` as one string literal of MLflow's filter grammar: ``'value'``, or ``"value"`` when
    it holds ``'``.

    Raises:
      ValueError: it holds a backslash, or both ``'`` and ``"`` (no literal of the grammar says it).
    """
    text = str(value)
    if "\\" not in text and "'" not in text:
        return f"'{text}'"
    if "\\" not in text and '"' not in text:
        return f'"{text}"'
    raise ValueError(f"{text!r} cannot be searched for in MLflow: a filter's string cannot hold a "
                     f"backslash, or both kinds of quote")


def tag_is(key: str, value: str) -> str:
    """The filter ``tags.`key` = <literal(value)>`` (``key``: one of :mod:`harness.core.names`'s).

    Raises:
      ValueError: ``value`` cannot be written as a literal (:func:`literal`).
    """
    return f"tags.`{key}` = {literal(value)}"
