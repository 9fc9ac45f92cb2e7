"""Every sweep-config block of the README, docs/usage.md, docs/your-optimizer.md and
docs/adaptive-sweeps.md loads (the README's workloads example once named a bare ``lion``, which
needs a step size, and was refused).

A block with a ``name`` is a whole config; one without is a fragment, completed with an MLP on
digits. Blocks are loaded from a copy of ``experiments/``, so a ``source``
relative to the config finds ``my_opts.py`` and ``submissions/`` as the docs say. A block naming a
module that is only an illustration (``mypkg``) is left out."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from harness.config.load import load_config

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/usage.md", "docs/your-optimizer.md", "docs/adaptive-sweeps.md")


def _blocks() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for i, m in enumerate(re.finditer(r"```yaml\n(.*?)```", text, re.S)):
            if "mypkg" not in m.group(1):
                out.append((f"{doc}#{i}", m.group(1)))
    return out


@pytest.mark.parametrize("where,block", _blocks(), ids=[w for w, _ in _blocks()])
def test_every_config_block_of_the_docs_loads(tmp_path, where, block):
    exp = tmp_path / "experiments"
    shutil.copytree(ROOT / "experiments", exp)
    data = yaml.safe_load(block)
    if "name" not in data:
        data = {"name": "doc", "models": ["mlp"], "datasets": ["digits"], "budget": {"steps": 10}, **data}
        if "search" not in data and "log_uniform" in block:
            data["search"] = {"trials": 2}
    p = exp / "doc.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    load_config(p)
