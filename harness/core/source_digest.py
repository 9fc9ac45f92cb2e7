"""The digest of a ``source:`` optimizer: the code its factory depends on, not the whole file.

:func:`code_digest` is the rule :mod:`harness.core.source` applies to a user's file (its result
joins the trial id through ``TrialSpec.optimizer_source_hash``): the top-level statements that bind
the factory, every top-level definition they reach (transitively), and the statements that bind
nothing, each as its syntax tree without docstrings, comments or positions. Split from
:mod:`harness.core.source` (its loading and bounds) to keep each module one job. Standard library
only.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from typing import Any

__all__ = ["code_digest"]


def _sha16(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


#: Bumped when :func:`code_digest`'s rule changes (every ``source:`` trial id changes with it).
_DIGEST_RULE = "harness-source-digest-2"
#: Calls that read a module's names by string: code that makes them makes the whole file count.
_DYNAMIC = frozenset({"globals", "vars", "eval", "exec", "__import__"})


def code_digest(code: str, roots: Iterable[str]) -> str:
    """16 hex digits of SHA-256 of the part of ``code`` (a module's text) that the top-level names
    ``roots`` (a factory; an AlgoPerf submission's functions) depend on; see the module docstring.

    The statements kept, in file order: those that bind a root, those that bind a name a kept
    statement uses (transitively), and those that bind no name (their effect runs on import; an
    ``if __name__ == "__main__":`` block, which does not run on import, is left out). Each is its
    syntax tree without docstrings or other constant expression statements, serialised field by
    field without positions (:func:`_canonical`), so comments, docstrings, quotes, blank lines and
    line breaks do not count. The whole file counts when a kept statement calls ``globals``,
    ``vars``, ``eval``, ``exec`` or ``__import__``, or when no statement binds a root (a name made
    some other way). A file that does not parse: SHA-256 of its bytes."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return _sha16(code.encode())
    body = [st for st in _strip_constants(tree).body if not _is_main_guard(st)]
    binds = [_bound_names(st) for st in body]
    uses = [_used_names(st) for st in body]
    wanted = set(roots)
    if not any(b & wanted for b in binds):
        keep = set(range(len(body)))
    else:
        keep = {i for i, b in enumerate(binds) if not b}
        for i in keep:
            wanted |= uses[i]
        grew = True
        while grew:
            grew = False
            for i, b in enumerate(binds):
                if i not in keep and b & wanted:
                    keep.add(i)
                    wanted |= uses[i]
                    grew = True
        if any(uses[i] & _DYNAMIC for i in keep):
            keep = set(range(len(body)))
    parts = [_DIGEST_RULE, *(_canonical(body[i]) for i in sorted(keep))]
    return _sha16("\n".join(parts).encode())


def _strip_constants(tree: ast.Module) -> ast.Module:
    """``tree`` without expression statements that are constants (docstrings, ``...``, bare
    strings), anywhere in it."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                block[:] = [st for st in block
                            if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant))]
    return tree


def _is_main_guard(st: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (no ``else``): code that does not run when the file is loaded
    as a source."""
    t = getattr(st, "test", None)
    return (isinstance(st, ast.If) and not st.orelse and isinstance(t, ast.Compare)
            and isinstance(t.left, ast.Name) and t.left.id == "__name__" and len(t.comparators) == 1
            and isinstance(t.comparators[0], ast.Constant) and t.comparators[0].value == "__main__")


def _bound_names(st: ast.stmt) -> set[str]:
    """The module-level names a top-level statement binds (definitions, assignments, imports, loop
    and ``with`` targets, inside ``if``/``try``/``for``/``with`` blocks too; not inside function or
    class bodies). ``from m import *`` binds unknown names: the empty set (kept as an effect)."""
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            out.add(node.id)
            return
        if isinstance(node, ast.Lambda):
            return
        if isinstance(node, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            return  # comprehension variables are local
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(st)
    return out


def _used_names(st: ast.stmt) -> set[str]:
    """Every name a statement reads or binds anywhere in it (decorators, defaults, annotations,
    nested bodies): a superset of the module-level names it may reach."""
    return {n.id for n in ast.walk(st) if isinstance(n, ast.Name)}


def _canonical(node: Any) -> str:
    """A syntax tree as text: each node's type and its fields, positions left out; fields that are
    ``None`` or empty lists omitted (so a newer Python's new optional fields change nothing), and
    ``Constant.kind`` (the ``u`` of ``u"..."``) ignored."""
    if isinstance(node, ast.AST):
        fields = []
        for name in node._fields:
            if name == "kind" and isinstance(node, ast.Constant):
                continue
            value = getattr(node, name, None)
            if value is None or (isinstance(value, list) and not value):
                continue
            fields.append(f"{name}={_canonical(value)}")
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return f"[{', '.join(_canonical(x) for x in node)}]"
    return repr(node)
