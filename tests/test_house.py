"""The house rules a maintainer can carry, checked on the tree.

Functions of the four packages (``harness``, ``reports``, ``models``, ``optimizers``; a nested
function counts on its own and inside its parent) are at most 100 lines, and at most 20 are over 50;
module names are unique across the four packages (``__init__``/``__main__`` aside); no file of the
project points at an issue thread ("issue 34"); no ``HARNESS_TEST_`` hook lives in ``harness/``.
The two documents' sizes are :mod:`tests.test_docs_size`'s.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "reports", "models", "optimizers")
MAX_FUNCTION_LINES = 100
LONG_FUNCTION_LINES = 50
MAX_LONG_FUNCTIONS = 20
#: "issue 54", "issue #54", "issue-35", "issues 22 and 32"
ISSUE_REF = re.compile(r"\bissues?[\s#-]*\d+", re.IGNORECASE)
#: Where the project's own text lives (code, configs, CI, docs).
TEXT_GLOBS = ("harness/**/*.py", "reports/**/*.py", "models/**/*.py", "optimizers/**/*.py",
              "tests/**/*.py", "tests/**/*.sh", "experiments/**/*.yaml", "experiments/**/*.py",
              ".ci/*", "pyproject.toml", "README.md", "docs/*.md")
#: This file names the pattern it forbids.
SELF = Path(__file__).resolve()


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts)


def function_lengths(path: Path, root: Path = ROOT) -> list[tuple[str, int]]:
    """``(path:line:name, lines)`` for every function and method in ``path``, nested ones included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rel = path.relative_to(root)
    return [(f"{rel}:{n.lineno}:{n.name}", n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _all_lengths() -> list[tuple[str, int]]:
    return [fl for p in _modules() for fl in function_lengths(p)]


def test_no_function_is_over_100_lines():
    over = sorted(((n, w) for w, n in _all_lengths() if n > MAX_FUNCTION_LINES), reverse=True)
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (make them named steps): {over}"


def test_at_most_20_functions_are_over_50_lines():
    long = sorted(((n, w) for w, n in _all_lengths() if n > LONG_FUNCTION_LINES), reverse=True)
    assert len(long) <= MAX_LONG_FUNCTIONS, (
        f"{len(long)} functions over {LONG_FUNCTION_LINES} lines (at most {MAX_LONG_FUNCTIONS}): {long}")


def test_module_names_are_unique_across_the_packages():
    seen: dict[str, list[str]] = defaultdict(list)
    for p in _modules():
        if p.stem not in ("__init__", "__main__"):
            seen[p.stem].append(str(p.relative_to(ROOT)))
    twice = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not twice, f"module names used twice (name each for what it owns): {twice}"


def issue_ref_lines(text: str) -> list[int]:
    """The line numbers where an issue reference starts, one wrapped over two lines included."""
    return [text.count("\n", 0, m.start()) + 1 for m in ISSUE_REF.finditer(text)]


def test_no_file_points_at_an_issue_thread():
    found = []
    for pattern in TEXT_GLOBS:
        for p in sorted(ROOT.glob(pattern)):
            if p.resolve() == SELF or not p.is_file() or "__pycache__" in p.parts:
                continue
            found += [f"{p.relative_to(ROOT)}:{i}" for i in issue_ref_lines(
                p.read_text(encoding="utf-8", errors="replace"))]
    assert not found, f"{len(found)} lines point at issue threads a clone does not hold: {found[:40]}"


def test_no_test_hook_lives_in_the_harness():
    found = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "harness").rglob("*.py"))
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if "HARNESS_TEST_" in line]
    assert not found, f"test hooks in production code (move them to tests/): {found}"


def test_the_checks_catch_what_they_forbid(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n" + "    x = 1\n" * 101 + "\n\ndef g():\n    def h():\n        pass\n")
    lengths = {w.rsplit(":", 1)[1]: n for w, n in function_lengths(src, tmp_path)}
    assert lengths == {"f": 102, "g": 3, "h": 2}
    assert ISSUE_REF.search("see Issue #34") and ISSUE_REF.search("issues 22 and 32")
    assert ISSUE_REF.search("the issue-35 fix")
    assert not ISSUE_REF.search("an issue with 3 seeds")
    assert issue_ref_lines('"""Read\n    once (issue\n    35 §2)."""\n# issue 7\n') == [2, 4]
