"""Names a user chose, in the formats a user opens: an optimizer entry named ``a|b``,
``<script>…</script>`` or ``=HYPERLINK(…)`` (a ``source`` entry's name is free text) is one cell of
``report --format md`` and of ``Leaderboard.to_markdown()``, never a live tag; a CSV text cell a
spreadsheet would run as a formula starts with ``'``, numbers stay numbers; a name holding a
control character (a newline would split a row) is refused by the config, before anything is
written.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import TINY_SWEEP

import harness
from reports.safe_cells import markdown_cell, spreadsheet_safe

ROOT = Path(__file__).resolve().parents[1]
PIPE = "a|b"
SCRIPT = "<script>alert(1)</script>"
FORMULA = '=HYPERLINK("http://x.invalid","y")'


def _hostile_cfg() -> dict:
    return {**TINY_SWEEP, "name": "hostile", "seeds": [0], "optimizers": [
        {"name": PIPE, "source": "optax:sgd", "hparams": {"step_size": 0.1}},
        {"name": SCRIPT, "source": "optax:sgd", "hparams": {"step_size": 0.2}},
        {"name": FORMULA, "source": "optax:sgd", "hparams": {"step_size": 0.3}}]}


def _cells(line: str) -> list[str]:
    """A GFM table row split at its unescaped pipes (a ``\\`` escapes the next character)."""
    return [c.strip() for c in re.split(r"(?<!\\)((?:\\\\)*)\|", line)[::2]][1:-1]


def test_hostile_names_are_one_cell_in_markdown_and_inert_in_csv(tmp_path, tracking_uri, fake_trainer):
    assert harness.sweep(_hostile_cfg(), tracking_uri=tracking_uri, quiet=True).counts["finished"] == 3
    out = tmp_path / "board.md"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "harness", "report", "-e", "hostile", "--tracking-uri",
                        tracking_uri, "--format", "md", "-o", str(out)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    table = [ln for ln in out.read_text().splitlines() if ln.startswith("|")]
    for text in (table, harness.results("hostile", tracking_uri=tracking_uri).leaderboard.to_markdown()
                 .splitlines()):
        widths = {len(_cells(ln)) for ln in text}
        assert widths == {len(_cells(text[0]))}, text  # old code: the a|b row had one column more
        joined = "\n".join(text)
        assert "<script>" not in joined and "&lt;script&gt;alert(1)&lt;/script&gt;" in joined
        assert "a\\|b" in joined and len(text) == 5  # header, rule, three rows
    res = harness.results("hostile", tracking_uri=tracking_uri)
    paths = res.to_csv(tmp_path / "csv")
    board = pd.read_csv(paths["leaderboard"])
    assert sorted(board["optimizer"]) == sorted([PIPE, SCRIPT, "'" + FORMULA])  # old: =HYPERLINK(...)
    assert board["test_mean"].dtype == "float64"
    trials = pd.read_csv(paths["trials"])
    assert not trials.map(lambda v: isinstance(v, str) and v.startswith(("=", "+", "-", "@"))).any().any()


def test_spreadsheet_safe_keeps_negative_numbers_numeric_and_markdown_cell_escapes_each_rule():
    df = pd.DataFrame({"delta": [-1.5, 2.0], "name": ["-1+2", "@sum"], "n": [-3, 4], "ok": ["x-y", None],
                       "param": ["-0.5", "+1e-3"]})  # MLflow params: numbers written as text
    safe = spreadsheet_safe(df)
    assert safe["delta"].tolist() == [-1.5, 2.0] and safe["n"].tolist() == [-3, 4]
    assert safe["name"].tolist() == ["'-1+2", "'@sum"] and safe["ok"][0] == "x-y" and pd.isna(safe["ok"][1])
    assert safe["param"].tolist() == ["-0.5", "+1e-3"]
    assert df["name"].tolist() == ["-1+2", "@sum"]  # the caller's frame is not changed
    assert markdown_cell("a\\|b\nc<i>&") == "a\\\\\\|b<br>c&lt;i&gt;&amp;"
    assert markdown_cell(-2.5) == -2.5


@pytest.mark.parametrize("axis,entry", [
    ("optimizers", {"name": "a\nb", "source": "optax:sgd", "hparams": {"step_size": 0.1}}),
    ("models", {"name": "mlp\x1b[31m"})])
def test_a_name_with_a_control_character_is_refused_before_anything_is_written(tmp_path, axis, entry):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(harness.ConfigError) as e:
        harness.sweep({**TINY_SWEEP, axis: [entry]}, tracking_uri=uri, quiet=True)
    assert e.value.key_path == f"{axis}[0].name"
    assert "contains the control or format character U+00" in str(e.value)
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()
