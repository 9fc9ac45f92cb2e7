"""A bounded, strict YAML loader for sweep configs: size, UTF-8, duplicate keys, aliases, nesting.

Configs are user input and may be hostile (huge, malformed, malicious). :func:`load_yaml_file`
reads one file and returns plain Python data (dicts, lists, str, int, float, bool, None, dates), or
raises :class:`YamlConfigError` whose ``lines`` are ``FILE: message`` strings that name the file
and, where known, the line. Compared with ``yaml.safe_load`` it:

- refuses files over :data:`MAX_FILE_BYTES` (1 MiB; ``experiments/quickstart.yaml`` is ~1 KiB)
  without reading them whole, and files that are not UTF-8 (the message gives the byte offset);
- rejects a **duplicate key** in any mapping, naming the key and both line numbers (PyYAML keeps the
  last one silently). Keys brought in by a YAML merge (``<<: *base``) may be overridden, as YAML
  intends;
- bounds **aliases**: at most :data:`MAX_ALIASES` alias uses, and the document's size with every
  alias expanded at most :data:`MAX_EXPANDED_NODES` nodes (a "billion laughs" of 9 levels of 9
  aliases expands to 9^9 nodes and is rejected after reading ~100 nodes);
- bounds **nesting** at :data:`MAX_DEPTH` levels (PyYAML recurses once per level and would otherwise
  die with ``RecursionError``; libyaml stops at 1,000 levels);
- parses with libyaml (``yaml.CSafeLoader``) when PyYAML has it, ~100x faster than the pure-Python
  scanner on a large file (a 1 MiB file parses in milliseconds), and checks the composed node graph
  (:func:`check_graph`) before constructing any Python object;
- reads YAML 1.2 floats: ``3e-3``, ``1E5`` and ``-2.5e+3`` are floats (YAML 1.1, PyYAML's
  default, requires a dot, so ``3e-3`` is the string ``'3e-3'`` there). Everything else resolves as in
  ``yaml.safe_load`` (YAML 1.1 booleans ``yes``/``no``/``on``/``off`` included).

Error messages echo a user's value with :func:`harness.core.echo.short_repr` (at most 200
characters).

No jax, pydantic or MLflow import: this runs before anything else.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from harness.core.echo import short_repr

#: Largest config file accepted, in bytes.
MAX_FILE_BYTES = 1 << 20
#: Most alias uses (``*name``) in one document.
MAX_ALIASES = 1000
#: Most nodes (scalars, lists, mappings) in the document with every alias expanded.
MAX_EXPANDED_NODES = 100_000
#: Deepest nesting of lists/mappings.
MAX_DEPTH = 50


class YamlConfigError(ValueError):
    """The file cannot be read as a safe YAML document. ``lines``: ``FILE: message`` strings."""

    def __init__(self, lines: list[str]):
        self.lines = list(lines)
        super().__init__("\n".join(self.lines))


class _Limit(yaml.YAMLError):
    """A bound of this loader was exceeded, or a duplicate key was found."""


# YAML 1.2 floats with an exponent: 1e3, 1.5e3, 2.5e0, 1.e3, .5e1 (1.1's float resolver wants the
# exponent signed, 1.5e+3, and took 1.5e3 for a string; plain 1.5 it already reads).
_FLOAT12 = re.compile(r"^[-+]?([0-9][0-9_]*(\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$")

# libyaml's parser (C) when PyYAML was built with it: ~100x faster than the pure-Python scanner
# on a large file; both resolve tags through the Python resolver and build nodes the same way.
_BASE = getattr(yaml, "CSafeLoader", None) if getattr(yaml, "__with_libyaml__", False) else None


def _make_loader(base: type) -> type:
    class Loader(base):  # type: ignore[misc, valid-type]
        """``base`` (a safe loader) with duplicate-key rejection and YAML 1.2 floats."""

        def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict:
            if isinstance(node, MappingNode):
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, ScalarNode):
                        continue  # merged keys may be overridden; unhashable keys: PyYAML's error
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.get(key)
                    except TypeError:
                        continue
                    line = key_node.start_mark.line + 1
                    if first is not None:
                        raise _Limit(f"line {line}: duplicate key {short_repr(key)} (first at line "
                                     f"{first}); a mapping may give each key once")
                    seen[key] = line
            return super().construct_mapping(node, deep=deep)

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT12, list("-+0123456789."))
    return Loader


_PY_LOADER = _make_loader(yaml.SafeLoader)
_C_LOADER = _make_loader(_BASE) if _BASE is not None else None


def _kids(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [x for pair in node.value for x in pair]
    return []


#: The tags a config's values may have: YAML 1.2's core schema (and ``<<`` merge keys). Others
#: (``!!binary``, ``!!set``, ``!!timestamp``, ``!!omap``, ...) would be silently coerced.
CORE_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in
                      ("str", "int", "float", "bool", "null", "seq", "map", "merge"))


def check_graph(root: Node) -> None:
    """Bounds on a composed document, before anything is constructed: no node contains itself (a
    recursive alias), at most :data:`MAX_ALIASES` alias uses (references to a node after its
    first), at most :data:`MAX_EXPANDED_NODES` nodes with aliases expanded, at most
    :data:`MAX_DEPTH` levels; every tag one of :data:`CORE_TAGS`. Iterative and memoised:
    O(distinct nodes + references).

    Raises:
      _Limit: which bound, with a line number where one helps.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_: set[int] = set()  # on the current path from the root
    seen: set[int] = {id(root)}
    aliases = 0
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        kids = _kids(node)
        if done:
            open_.discard(id(node))
            size[id(node)] = min(1 + sum(size[id(k)] for k in kids), MAX_EXPANDED_NODES + 1)
            depth[id(node)] = 1 + max((depth[id(k)] for k in kids), default=0)
            continue
        if id(node) in size or id(node) in open_:
            continue
        _check_tag(node)
        open_.add(id(node))
        stack.append((node, True))
        for k in kids:
            if id(k) in open_:
                raise _Limit(f"line {k.start_mark.line + 1}: a recursive alias (a value that "
                             f"contains itself)")
            if id(k) in seen:
                aliases += 1
                if aliases > MAX_ALIASES:
                    raise _Limit(f"line {k.start_mark.line + 1}: more than {MAX_ALIASES} alias uses "
                                 f"(*name); write the values out or use fewer aliases")
            seen.add(id(k))
            if id(k) not in size:
                stack.append((k, False))
    if size[id(root)] > MAX_EXPANDED_NODES:
        raise _Limit(f"the document has more than {MAX_EXPANDED_NODES:,} values once its aliases "
                     f"are expanded (an alias bomb?); write a smaller config")
    if depth[id(root)] > MAX_DEPTH:
        node, level = root, 1
        while level <= MAX_DEPTH:
            node = max(_kids(node), key=lambda k: depth[id(k)])
            level += 1
        raise _Limit(f"line {node.start_mark.line + 1}: nested more than {MAX_DEPTH} levels deep")


def _check_tag(node: Node) -> None:
    """Raise :class:`_Limit` (with the line) when ``node``'s tag is not one of :data:`CORE_TAGS`."""
    if node.tag not in CORE_TAGS:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!", 1)
        raise _Limit(f"line {node.start_mark.line + 1}: a {tag} value; a config holds strings, "
                     f"numbers, booleans, null, lists and mappings only (quote it to mean the "
                     f"text)")


def load_yaml_text(text: str, file: str = "<config>") -> Any:
    """Parse one YAML document (see the module docstring for the rules).

    Raises:
      YamlConfigError: one ``FILE: ...`` line (syntax error with its line, duplicate key, a bound).
    """
    loader = None
    try:
        loader = (_C_LOADER or _PY_LOADER)(text)
        node = loader.get_single_node()
        if node is None:
            return None
        check_graph(node)
        return loader.construct_document(node)
    except _Limit as e:
        raise YamlConfigError([f"{file}: {e}"]) from None
    except RecursionError:
        raise YamlConfigError([f"{file}: nested too deeply to parse"]) from None
    except yaml.YAMLError as e:
        why = _yaml_error_text(e) + _tab_hint(text, e)
        raise YamlConfigError([f"{file}: not valid YAML: {why}"]) from None
    finally:
        if loader is not None:
            loader.dispose()


def _tab_hint(text: str, e: yaml.YAMLError) -> str:
    """``" (a tab ...)"`` when the line PyYAML stopped at is indented with a tab or has one at the
    error's column (the C parser says "found character that cannot start any token", never "tab"),
    else ``""`` (a tab inside a quoted string earlier on the line is not the problem)."""
    mark = getattr(e, "problem_mark", None)
    lines = text.splitlines()
    if mark is None or not 0 <= mark.line < len(lines):
        return ""
    line = lines[mark.line]
    indent = line[:len(line) - len(line.lstrip(" \t"))]
    if "\t" not in indent and line[mark.column:mark.column + 1] != "\t":
        return ""
    return " (a tab character there: YAML indents with spaces)"


def _yaml_error_text(e: yaml.YAMLError) -> str:
    """PyYAML's message on one line: its line/column, context and problem (no multi-line snippet),
    at most 400 characters."""
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        text = where + " ".join(x for x in (e.context, e.problem) if x)
    else:
        text = str(e).replace('in "<unicode string>", ', "")
    text = " ".join(text.split())
    return text if len(text) <= 400 else text[:397] + "..."


def load_yaml_file(path: str | Path) -> Any:
    """Read ``path`` (UTF-8, at most :data:`MAX_FILE_BYTES`) and parse it with
    :func:`load_yaml_text`.

    Raises:
      YamlConfigError: cannot read, too large, not UTF-8, or not a safe YAML document; every line
        starts with the file's name.
    """
    file = str(path)
    try:
        # a FIFO, socket or device would block open() or read() forever (a FIFO with no writer):
        # open without blocking and refuse anything but a regular file
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise YamlConfigError([f"{file}: not a regular file (a pipe, socket, device or "
                                       f"folder); give the path of a YAML file"])
            raw = f.read(MAX_FILE_BYTES + 1)
    except IsADirectoryError:
        raise YamlConfigError([f"{file}: is a folder; give the path of a YAML file"]) from None
    except OSError as e:
        raise YamlConfigError([f"{file}: cannot read: {e.strerror or e}"]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise YamlConfigError([f"{file}: larger than {MAX_FILE_BYTES:,} bytes; a sweep config is a "
                               f"short file (experiments/quickstart.yaml is about 1 KB)"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise YamlConfigError([f"{file}: not UTF-8 text: byte 0x{raw[e.start]:02x} at offset {e.start} "
                               f"(line {line}) cannot be decoded; save the file as UTF-8"]) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return load_yaml_text(text, file)
