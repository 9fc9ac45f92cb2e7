"""Config errors: :class:`ConfigError` and the rewording of pydantic's errors into its lines.

Every problem of a config is one line ``FILE: KEY.PATH: message`` (the valid choices and a "did you
mean" where one is close); :class:`ConfigError` carries them all (at most 50 lines of at most 1,000
characters). :func:`format_pydantic` turns a pydantic ``ValidationError`` of the schema
(:mod:`harness.config.schema`) into such lines: an unknown key names the valid keys, a section that
must be a mapping says so, a user's value is echoed in at most 200 characters
(:func:`harness.core.echo.short_repr`).
"""

from __future__ import annotations

import re
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from harness.core.builders import did_you_mean
from harness.core.echo import short_repr

__all__ = ["ConfigError", "UsageError", "format_pydantic", "key_path_of", "key_text", "loc_path"]

#: Error types whose message already says what was given (no ``(got ...)`` appended).
#: A pydantic union member's tag in an error location: ``literal[...]``, ``list[...]``, ``int``.
_TAG = re.compile(r"^(?:[a-z][a-z-]*\[.*|int|float|str|bool|none|dict|list)$")
_SELF_EXPLAINED = ("empty_axis", "budget", "rule", "zip", "seeds", "batch_size", "name", "description",
                   "tracking_uri", "target", "search", "workloads")


class ConfigError(ValueError):
    """An invalid sweep config. ``errors`` holds one ``FILE: KEY.PATH: message`` line per problem;
    ``str(err)`` is those lines joined with newlines."""

    #: At most this many lines are kept (a last line says how many more there were) ...
    MAX_LINES = 50
    #: ... each cut to this many characters.
    MAX_LINE_CHARS = 1000

    def __init__(self, errors: list[str]):
        lines = [e if len(e) <= self.MAX_LINE_CHARS else e[: self.MAX_LINE_CHARS - 3] + "..."
                 for e in errors[: self.MAX_LINES]]
        if len(errors) > self.MAX_LINES:
            head = errors[0].split(": ", 1)[0] + ": " if ": " in errors[0] else ""
            lines.append(f"{head}... and {len(errors) - self.MAX_LINES:,} more problems")
        self.errors = lines
        self._more = len(errors) > self.MAX_LINES
        super().__init__("\n".join(self.errors))

    @property
    def key_paths(self) -> list[str | None]:
        """The config key path each problem line is about (``optimizers[0].hparams.step_size``,
        ``<top>``), in line order; ``None`` for a line that names no key (a file that cannot be
        read). The "... and N more problems" line is left out."""
        lines = self.errors[:-1] if self._more else self.errors
        return [key_path_of(line) for line in lines]

    @property
    def key_path(self) -> str | None:
        """The first problem's key path (:attr:`key_paths`), ``None`` when no line names one."""
        return next((k for k in self.key_paths if k), None)


class UsageError(ConfigError):
    """An option given beside the config that the harness cannot use (``tracking_uri``, ``executor``,
    ``jobs``, ``only``): one line, and the key path it is about (the config key or option of that
    name). A :class:`ConfigError`, so a caller catches one type; the command line prints it as
    ``error: LINE`` (exit 2)."""

    def __init__(self, line: str, key_path: str):
        super().__init__([line])
        self._key_path = key_path

    @property
    def key_paths(self) -> list[str | None]:
        return [self._key_path]


#: A key path at the start of a segment of an error line: ``<top>``, ``name``, ``a.b[0].c``.
_KEY_PATH = re.compile(r"<top>|[A-Za-z_][\w-]*(?:\[\d+\])*(?:\.[^\s.:\[\]()]+(?:\[\d+\])*)*")


def _is_file_label(seg: str) -> bool:
    """Whether the first segment of an error line is the config's file (or ``<config>``/``<dict>``)."""
    return seg != "<top>" and (("/" in seg or "\\" in seg) or seg.endswith((".yaml", ".yml", ".json"))
                               or (seg.startswith("<") and seg.endswith(">")))


def key_path_of(line: str) -> str | None:
    """The key path of one ``FILE: KEY.PATH: message`` line (``FILE: `` may be absent), or ``None``."""
    segs = line.split(": ")
    if len(segs) > 1 and _is_file_label(segs[0]):
        segs = segs[1:]
    if len(segs) < 2:
        return None
    m = _KEY_PATH.match(segs[0])  # the whole segment, or the key and a bracketed note after it
    if m is None or not (m.end() == len(segs[0]) or segs[0][m.end():].startswith(" (")):
        return None
    return m.group(0)


def key_text(k: Any, limit: int = 60) -> str:
    """A user's mapping key for a message or key path, cut to ``limit`` characters."""
    k = str(k) if not isinstance(k, str) else k
    return k if len(k) <= limit else k[: limit - 3] + "..."


def loc_path(loc: tuple) -> str:
    """A pydantic location as a key path: ``("optimizers", 0, "hparams")`` → ``optimizers[0].hparams``
    (``<top>`` for the empty location)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + key_text(part)
    return out or "<top>"


def _model_at(root: type[BaseModel], loc: tuple) -> type[BaseModel]:
    """The pydantic model class that holds the mapping at ``loc`` below ``root`` (for unknown-key
    messages)."""
    cls: type[BaseModel] = root
    for part in loc:
        if isinstance(part, int) or part not in cls.model_fields:
            continue
        ann = cls.model_fields[part].annotation
        stack = [ann]
        while stack:
            a = stack.pop()
            if isinstance(a, type) and issubclass(a, BaseModel):
                cls = a
                break
            stack.extend(typing.get_args(a))
    return cls


def _is_tag(part: Any) -> bool:
    """Whether a pydantic location part names a union member or validator (``literal['a','b']``,
    ``list[int]``, ``function-after``), not a key the user wrote."""
    return isinstance(part, str) and (part.startswith("function-") or bool(_TAG.match(part)))


def _union_errors(errors: list[dict]) -> list[dict]:
    """``errors`` with union-member tags dropped from each location and, where a union's members
    all failed at one key, only the member errors that got past the type check (the deepest): a
    list ``dtype: [float8]`` is told about its element, not also that it is not a string."""
    groups: dict[tuple, list[dict]] = {}
    for e in errors:
        raw = tuple(e["loc"])
        cut = next((i for i, p in enumerate(raw) if _is_tag(p)), len(raw))
        loc = tuple(p for p in raw if not _is_tag(p))
        groups.setdefault((raw[:cut], cut < len(raw)), []).append({**e, "loc": loc})
    out = []
    for (_, union), group in groups.items():
        if union and len(group) > 1:
            typed = [e for e in group if not e["type"].endswith("_type")] or group
            deepest = max(len(e["loc"]) for e in typed)
            group = [e for e in typed if len(e["loc"]) == deepest]
        seen = set()
        for e in group:
            if (e["loc"], e["msg"]) not in seen:
                seen.add((e["loc"], e["msg"]))
                out.append(e)
    return out


def format_pydantic(err: ValidationError, file: str, root: type[BaseModel]) -> list[str]:
    """One ``FILE: KEY.PATH: message`` line per error of ``err``, raised validating ``root`` (the
    schema's :class:`~harness.config.schema.SweepConfig`)."""
    lines = []
    for e in _union_errors(err.errors()):
        loc = e["loc"]
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            valid = list(_model_at(root, loc[:-1]).model_fields)
            key = str(loc[-1])
            msg = (f"unknown key {short_repr(key, 80)}; valid keys: {', '.join(valid)}"
                   f"{did_you_mean(key[:200], valid)}")
        elif e["type"] in ("bad_grid", "empty_axis") and "key" in (e.get("ctx") or {}):
            loc = (*loc, e["ctx"]["key"])
            msg = msg.split(": ", 1)[1]
        elif (e["type"] == "invalid_key" and loc) or loc[-1:] == ("[key]",):  # YAML read the key as a
            key, loc = e["input"], loc[:-2] if loc[-1] == "[key]" else loc[:-1]  # number, bool or null
            kind = {bool: "a boolean (yes, no, on, off, true, false)", type(None): "null (~ or null)"}.get(
                type(key), "a number")
            msg = (f"the key {short_repr(key, 80)} is {kind} in YAML, not a name; remove it, or quote "
                   f"it if it is meant as a name")
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif e["type"] == "model_type":  # a section that must be a mapping: say so, and its keys
            keys = ", ".join(_model_at(root, loc).model_fields)
            msg = f"expected a mapping with keys {keys}, got {short_repr(e['input'])}"
        elif loc in (("batch_size",), ("seeds",)) and e["type"] == "list_type":
            what = "an int or a list of ints" if loc == ("batch_size",) else \
                "an int (a count) or a list of ints"
            msg = f"expected {what}, got {short_repr(e['input'])}"
        elif loc == ("targets",) and e["type"] == "dict_type":
            msg = (f"expected a mapping {{DATASET: {{metric, value}}}}, e.g. targets: {{digits: "
                   f"{{metric: valid/accuracy, value: 0.9}}}} (use 'target' for one target for all "
                   f"datasets), got {short_repr(e['input'])}")
        elif e["type"] == "target" and msg.split(": ", 1)[0] in ("value", "mode"):
            key, msg = msg.split(": ", 1)
            loc = (*loc, key)
        elif e["type"] not in _SELF_EXPLAINED \
                and f"got {short_repr(e['input'])}" not in msg:  # a message that names it already
            msg = f"{msg} (got {short_repr(e['input'])})"
        lines.append(f"{file}: {loc_path(loc)}: {msg}")
    return lines
