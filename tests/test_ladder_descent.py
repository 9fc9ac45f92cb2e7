"""Coordinate descent across a ladder's rungs: each optimizer is
tuned at every rung, rung ``r``'s descent starting from the configuration rung ``r - 1``'s selected.

A real sweep (the Markov LM Transformer at two widths, adamw over three step sizes, 20 and 61
steps): rung 1's descent starts once rung 0's has ended, from rung 0's optimum (its ``search.json``
says so), and every rung-1 trial starts after every rung-0 trial ended.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

import harness  # XLA's pool pinned as in every test process
from harness.config.load import load_config
from harness.orchestrate.preflight import preflight
from harness.orchestrate.searchers import searcher_for

T = 32  # markov_lm's window


def _config(tmp_path: Path) -> Path:
    cfg = {"name": "ladder_cd", "seeds": [0], "batch_size": 16, "measure_perf": False,
           "steps_per_dispatch": 10, "batching": "off",
           "search": {"method": "coordinate_descent"},
           "optimizers": [{"name": "adamw", "hparams": {"step_size": [0.001, 0.003, 0.01]}}],
           "ladder": {"workload": "markov_lm_transformer", "baseline": "adamw",
                      "sizes": [{"width": 8, "depth": 1, "num_heads": 2},
                                {"width": 16, "depth": 1, "num_heads": 2}],
                      # rung 0 (1,416 parameters, tests/test_ladder.py) trains 20 steps
                      "tokens_per_param": [20 * 16 * T / 1416]}}
    p = tmp_path / "ladder_cd.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def test_rung_one_starts_from_rung_zeros_optimum(tmp_path):
    from mlflow.tracking import MlflowClient

    path = _config(tmp_path)
    cfg = load_config(path)
    search = searcher_for(preflight(cfg, str(path)), cfg.selection.by)
    cds = sorted(search.searchers, key=lambda s: s.cell.origin.ladder.index)
    assert [s.cell.origin.ladder.index for s in cds] == [0, 1]
    assert cds[0].previous is None and cds[1].previous is cds[0]
    assert cds[1].propose({}) == []  # nothing until rung 0's descent has ended

    uri = f"sqlite:///{tmp_path}/m.db"
    s = harness.sweep(path, tracking_uri=uri, quiet=True)
    assert s.counts["failed"] == 0
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("ladder_cd")
    (parent,) = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'parent'")
    described = json.loads(Path(client.download_artifacts(parent.info.run_id, "search.json",
                                                          str(tmp_path))).read_text())
    assert len(described) == 2, [d["task"] for d in described]
    rung0, rung1 = sorted(described, key=lambda d: "width=16" in d["task"])
    assert "width=8" in rung0["task"] and "width=16" in rung1["task"]
    assert rung0["stop"] == "converged" and rung1["stop"] == "converged"
    best0 = rung0["selected"]["values"]["optimizer.step_size"]
    assert rung1["start"]["values"] == {"optimizer.step_size": best0}
    assert rung1["start"]["rule"] == {"optimizer.step_size": f"the optimum of rung 0 ({best0!r})"}
    runs = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'trial'")
    widths = {r.info.run_id: r.data.tags["ladder.rung"] for r in runs}
    last0 = max(r.info.end_time for r in runs if widths[r.info.run_id] == "0")
    first1 = min(r.info.start_time for r in runs if widths[r.info.run_id] == "1")
    assert last0 <= first1  # the rungs were tuned in order
    assert all(r.info.status == "FINISHED" for r in runs)
    assert len({r.data.tags["harness.trial_id"] for r in runs}) == len(runs)  # none twice
