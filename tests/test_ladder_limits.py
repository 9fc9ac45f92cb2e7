"""A ladder whose rungs ask for more than the harness can do is one line per rung with its key path,
before anything is built: a tokens-per-parameter ratio (or a width) whose step budget passes the
limit names the ratio's key, the size, its parameters and the steps it implies (before: pydantic's
"1 validation error for Budget ... For further information visit https://errors.pydantic.dev"); a
dataset too large for this machine's memory is refused before numpy allocates it (before: numpy's
"Unable to allocate 7.28 TiB")."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import harness
from harness.config.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SIZES = [{"width": 8, "depth": 1, "num_heads": 2}]


def _cfg(**ladder) -> dict:
    return {"name": "lad", "seeds": [0], "batch_size": 16, "measure_perf": False,
            "optimizers": [{"name": "adamw", "hparams": {"step_size": 0.003}}],
            "ladder": {"workload": "markov_lm_transformer", "sizes": SIZES, "tokens_per_param": [2],
                       "baseline": "adamw", **ladder}}


def test_a_ratio_past_the_step_limit_is_one_line_from_the_command_line(tmp_path):
    cfg = tmp_path / "lad.yaml"
    cfg.write_text(yaml.safe_dump(_cfg(tokens_per_param=[2, 1.0e9]), sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "harness", "sweep", str(cfg), "--dry-run"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines()[-1] == (
        "ladder.tokens_per_param[1]: 1e+09 tokens per parameter on ladder.sizes[0] (width=8, depth=1, "
        "num_heads=2: 1,416 parameters) implies 2,765,625,000 steps of 16 x 32 tokens, more than the "
        "1,000,000,000 a budget may have: lower the ratio or the size"), p.stderr
    assert "pydantic" not in p.stderr and "validation error" not in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["lad.yaml"]  # no store written


@pytest.mark.parametrize("ladder, key", [
    ({"sizes": [{"width": 10**9, "depth": 1, "num_heads": 2}]}, "ladder.tokens_per_param[0]"),
    ({"baseline_tokens_per_param": [1.0e9]}, "ladder.baseline_tokens_per_param[0]"),
])
def test_a_width_or_a_baseline_budget_past_the_limit_names_its_key(ladder, key):
    with pytest.raises(ConfigError) as e:
        harness.sweep(_cfg(**ladder), dry_run=True, quiet=True)
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith(f"{key}: "), e.value.errors
    assert "parameters) implies" in e.value.errors[0] and "lower the ratio or the size" in e.value.errors[0]


def test_a_dataset_too_large_for_memory_is_refused_before_allocating():
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as e:
        harness.sweep(_cfg(dataset_hparams={"num_train": 10**12}), dry_run=True, quiet=True)
    (line,) = e.value.errors
    assert line.startswith("ladder.dataset_hparams: ") and "GiB of arrays, more than this machine's" in line
    assert "num_train=1,000,000,000,000" in line and time.perf_counter() - t0 < 60
    from harness.data.sources import markov_lm, synthetic

    for build, kw in ((markov_lm, {"num_train": 10**12}), (synthetic, {"num_examples": 10**12})):
        with pytest.raises(ValueError, match="GiB of arrays, more than this machine's"):
            build(**kw)
