"""Workloads defined in a config (``define_workloads:``, inline or in a file the config names) and a
``gpt`` ladder on token shards: the ladder runs end to end on tiny generated shards (and a second run
trains nothing); every bad input is one line with its key path, exit 2, and no store."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import harness
from harness.config.errors import ConfigError
from harness.config.load import load_config

ROOT = Path(__file__).resolve().parents[1]
SIZES = [{"width": 8, "depth": 1, "num_heads": 2}, {"width": 16, "depth": 1, "num_heads": 2}]


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """A shard folder of an order-1 Markov stream over 16 tokens: 100,000 training, 2,000 validation."""
    from harness.data.shards import write_shard

    d = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(0)
    cum = rng.dirichlet(np.full(16, 0.3), size=16).cumsum(1)
    x, u = np.zeros(102_000, np.uint16), rng.random(102_000)
    for i in range(1, x.size):
        x[i] = min(int(np.searchsorted(cum[x[i - 1]], u[i])), 15)
    write_shard(d / "m_train.bin", x[:100_000])
    write_shard(d / "m_val.bin", x[100_000:])
    return d


def _definition(shards: Path, **over) -> dict:
    return {"dataset": {"name": f"tokens:{shards}", "hparams": {"seq_len": 16, "test_tokens": 1024}},
            "model": {"name": "gpt", "hparams": {"width": 8, "depth": 1, "num_heads": 2}},
            "loss": "cross_entropy", "batch_size": 8, "budget": {"tokens_per_param": 2},
            "eval_every": 10, "target": {"metric": "valid/loss", "value": 2.5}, **over}


def _ladder_cfg(shards: Path, **ladder) -> dict:
    return {"name": "toy_ladder", "seeds": [0], "measure_perf": False, "selection": {"by": "final"},
            "define_workloads": {"toy_gpt": _definition(shards)},
            "optimizers": [{"name": "adamw", "hparams": {"step_size": 0.01}}],
            "ladder": {"workload": "toy_gpt", "sizes": SIZES, "tokens_per_param": [20], "baseline": "adamw",
                       "evals": 2, **ladder}}


def test_a_gpt_ladder_on_token_shards_runs_and_a_second_run_trains_nothing(shards, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = harness.sweep(_ladder_cfg(shards), tracking_uri=uri, quiet=True, batching="off")
    assert first.counts["finished"] == 2 and first.counts["skipped"] == 0, first.counts
    from harness.config.ladder_parts import model_counts

    frame = first.results().trials
    for size in SIZES:  # steps = round(20 N / (batch T)): N counted from the model's init
        n, t, _, _ = model_counts("gpt", json.dumps(size, sort_keys=True), f"tokens:{shards}",
                                  json.dumps({"seq_len": 16, "test_tokens": 1024}, sort_keys=True))
        row = frame[frame["model.width"] == size["width"]]
        assert len(row) == 1 and t == 16 and int(row["ladder.params"].iloc[0]) == n, row.T
        assert int(row["train_steps"].iloc[0]) == round(20 * n / (8 * 16)), row.T
        assert int(row["ladder.tokens"].iloc[0]) == int(row["train_steps"].iloc[0]) * 8 * 16
    again = harness.sweep(_ladder_cfg(shards), tracking_uri=uri, quiet=True, batching="off")
    assert again.counts["skipped"] == 2 == again.counts["finished"], again.counts  # none trained again
    assert sorted(again.trial_ids) == sorted(first.trial_ids)
    assert sorted(again.results().trials["run_id"]) == sorted(frame["run_id"])  # no new run stored


def test_a_definition_in_a_named_file_is_a_workload_as_any_other(shards, tmp_path):
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump({"toy_gpt": _definition(shards)}))
    cfg = {"name": "w", "define_workloads": "wl.yaml", "workloads": ["toy_gpt"],
           "optimizers": [{"name": "adam", "hparams": {"step_size": 0.01}}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    run = harness.sweep(str(tmp_path / "c.yaml"), dry_run=True, quiet=True)
    assert len(run.trial_ids) == 1
    from harness.plan.expansion import expand

    (spec,) = expand(load_config(tmp_path / "c.yaml"))
    assert (spec.workload, spec.model, spec.batch_size, spec.eval_every) == ("toy_gpt", "gpt", 8, 10)
    assert spec.target.value == 2.5 and spec.dataset == f"tokens:{shards}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "harness", "list", "workloads", "toy_gpt", "--config",
                        str(tmp_path / "c.yaml")], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "loss: cross_entropy" in p.stdout and "2 tokens per param x 8" in p.stdout


def _one_line(cfg: dict, tmp_path: Path) -> str:
    with pytest.raises(ConfigError) as e:
        harness.sweep(cfg, dry_run=True, quiet=True, tracking_uri=f"sqlite:///{tmp_path / 'm.db'}")
    assert len(e.value.errors) == 1, e.value.errors
    assert not (tmp_path / "m.db").exists()
    return e.value.errors[0]


def test_bad_definitions_are_one_line_with_their_key_path(shards, tmp_path):
    def with_def(**over):
        d = _definition(shards, **over)
        for k in [k for k, v in over.items() if v is None]:
            del d[k]
        return {"name": "w", "define_workloads": {"toy": d}, "workloads": ["toy"],
                "optimizers": [{"name": "adam", "hparams": {"step_size": 0.01}}]}

    line = _one_line(with_def(loss=None), tmp_path)
    assert line.startswith("<dict>: define_workloads.toy.loss: ") and "required" in line.lower(), line
    line = _one_line(with_def(model={"name": "gpt3"}), tmp_path)
    assert line.startswith("<dict>: define_workloads.toy.model") and "unknown model 'gpt3'" in line, line
    line = _one_line(with_def(dataset={"name": "no_such_set"}), tmp_path)
    assert line.startswith("<dict>: define_workloads.toy.dataset") and "no_such_set" in line, line
    line = _one_line(with_def(model={"name": "mine", "source": "no_such_file.py:net"}), tmp_path)
    assert line.startswith("<dict>: define_workloads.toy.model.source: "), line
    assert _one_line(with_def(loss="mse"), tmp_path) == (
        "<dict>: define_workloads.toy.loss: a sequence dataset trains on cross_entropy, got mse")
    assert _one_line(with_def(budget={"tokens": 500_000}), tmp_path) == (
        "<dict>: define_workloads.toy.budget: 3,906 steps of 8 x 16 tokens are 499,968 tokens, more than "
        "the 98,960 training tokens of tokens:" + str(shards) + ": lower the budget, or give budget.steps "
        "to repeat data")
    line = _one_line(with_def(budget={"tokens": 100}), tmp_path)
    assert line.startswith("<dict>: define_workloads.toy.budget.tokens: 100 tokens are less than one"), line
    cfg = with_def()
    cfg["define_workloads"]["mnist1d_mlp"] = cfg["define_workloads"].pop("toy")
    cfg["workloads"] = ["mnist1d_mlp"]
    assert _one_line(cfg, tmp_path) == ("<dict>: define_workloads.mnist1d_mlp: 'mnist1d_mlp' is a "
                                        "built-in workload; give yours a name of its own")
    cfg = with_def()
    cfg["workloads"] = ["tyo"]
    line = _one_line(cfg, tmp_path)
    assert line.startswith("<dict>: workloads[0].name: unknown workload 'tyo'") and "toy" in line, line


def test_bad_ladders_on_shards_are_one_line_exit_2_and_no_store(shards, tmp_path):
    line = _one_line(_ladder_cfg(shards, sizes=[{"width": 8, "depth": 1, "num_heads": 3}]), tmp_path)
    assert line.startswith("ladder.sizes[0]: gpt (width=8, depth=1, num_heads=3): "), line
    line = _one_line(_ladder_cfg(shards, tokens_per_param=[0.05]), tmp_path)  # 57 tokens: 0 steps
    assert line.startswith("ladder.tokens_per_param[0]: 0.05 tokens per parameter on ladder.sizes[0]"), line
    assert "under one step of 8 x 16 = 128 tokens" in line
    line = _one_line(_ladder_cfg(shards, tokens_per_param=[20, 30]), tmp_path)  # 30 x 3,808 > 98,9xx
    assert line.startswith("ladder.tokens_per_param[1]: 30 tokens per parameter on ladder.sizes[1]"), line
    assert "more than the 98,9" in line and "training tokens the dataset holds" in line
    cfg = tmp_path / "lad.yaml"
    cfg.write_text(yaml.safe_dump(_ladder_cfg(shards, tokens_per_param=[100])))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "harness", "sweep", str(cfg)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr
    assert "ladder.tokens_per_param[0]: 100 tokens per parameter" in p.stderr.strip().splitlines()[-1]
    assert sorted(os.listdir(tmp_path)) == ["lad.yaml"]  # no store written


def test_a_definition_with_a_sourced_model_trains_and_stores_its_source(tmp_path):
    shutil.copy(ROOT / "experiments" / "my_nets.py", tmp_path / "my_nets.py")
    cfg = {"name": "src_wl", "measure_perf": False, "workloads": ["digits_mine"],
           "optimizers": [{"name": "adam", "hparams": {"step_size": 0.01}}],
           "define_workloads": {"digits_mine": {
               "dataset": {"name": "digits"}, "model": {"name": "mine", "source": "my_nets.py:tiny_mlp",
                                                         "hparams": {"width": 16}},
               "loss": "cross_entropy", "batch_size": 32, "budget": {"steps": 20}, "eval_every": 10,
               "target": {"metric": "valid/accuracy", "value": 0.5}}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    from harness.plan.expansion import expand

    (spec,) = expand(load_config(tmp_path / "c.yaml"))
    assert spec.model == "mine" and spec.model_source_ref[2] == "tiny_mlp" and spec.model_source_hash
    run = harness.sweep(str(tmp_path / "c.yaml"), tracking_uri=f"sqlite:///{tmp_path / 'm.db'}", quiet=True)
    assert run.counts["finished"] == 1 and run.trial_ids == [spec.trial_id], run.counts
    del cfg["workloads"]
    cfg["ladder"] = {"workload": "digits_mine", "sizes": [{"width": 8}, {"width": 16}], "tokens_per_param": 1,
                     "baseline": "adam"}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError) as e:
        harness.sweep(str(tmp_path / "c.yaml"), dry_run=True, quiet=True)
    assert e.value.errors == ["ladder.workload: a ladder sizes a registered model (models.zoo); "
                              "digits_mine's model 'mine' has a source"]
