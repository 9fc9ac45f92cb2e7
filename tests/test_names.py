"""``harness.core.names`` binds each name once: a second binding silently replaces the first (and its
comment), so the module read one value where its reader saw two definitions (``TAG_STATUS_REASON``
and ``TAG_DIVERGED_STEP`` were each defined twice)."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

import harness.core.names as names


def test_every_name_is_bound_once():
    tree = ast.parse(Path(names.__file__).read_text())
    bound = collections.Counter(
        t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name))
    assert [n for n, k in bound.items() if k > 1] == []
    assert names.TAG_STATUS_REASON == "status_reason" and names.TAG_DIVERGED_STEP == "diverged_step"
