"""The optimization-track workloads: ``experiments/nanogpt_track3.yaml`` dry-runs on generated shards
with its step's FLOPs, memory and H100 time (hand-computed here), smoke-runs a few steps
(``--max-steps``: new trial ids, the schedule over the full budget, said in the summary), refuses its
bad values with one line naming the key path before any store is written, and the CPU proxy
``experiments/nanogpt_proxy.yaml`` plans the recipe it states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import harness
from harness.cli import app
from harness.config.errors import UsageError
from harness.data.shards import write_shard

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
TRACK3 = ROOT / "experiments" / "nanogpt_track3.yaml"


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """A FineWeb-like folder: GPT-2 format shards of random ids below 50,257; 540,000 training tokens
    (512 windows of 1,025 and a held-out test part), 4,100 validation tokens."""
    d = tmp_path_factory.mktemp("fineweb10B")
    rng = np.random.default_rng(0)
    write_shard(d / "fineweb_train_000001.bin", rng.integers(0, 50257, 540_000).astype(np.uint16))
    write_shard(d / "fineweb_val_000000.bin", rng.integers(0, 50257, 4_100).astype(np.uint16))
    return d


def track3(shards: Path, **over) -> dict:
    """The track-3 config as written, on ``shards`` with 2,048 validation tokens (not 10,485,760)."""
    cfg = yaml.safe_load(TRACK3.read_text())
    cfg["datasets"][0]["name"] = f"tokens:{shards}"
    cfg["datasets"][0]["hparams"]["valid_tokens"] = 2048
    cfg.update(over)
    return cfg


def write(tmp_path: Path, cfg: dict) -> Path:
    p = tmp_path / "track3.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def test_track3_yaml_states_the_track(shards, tmp_path):
    """The setting of modded-nanogpt's train_gpt_simple.py; its dry run's step cost, by hand:
    matmul weights per token N = 12·(4·768² + 2·768·3072) + 768·50304 = 123,568,128; attention
    12·12·1024·768/2 = 56,623,104; 6N + attention = 798,031,872 FLOPs/token × 524,288 tokens =
    4.184e14 FLOPs; / (989.4e12 × 0.4) = 1,057 ms. Activations of a micro-batch of 64:
    12·1024·64·(34·768 + 5·6·1024) + 64·1024·50304·4 bytes = 53.91 GiB."""
    cfg = yaml.safe_load(TRACK3.read_text())
    m = cfg["models"][0]["hparams"]
    assert (m["width"], m["depth"], m["num_heads"]) == (768, 12, 6)
    assert (m["attn_scale"], m["logit_softcap"]) == (0.12, 15)
    d = cfg["datasets"][0]["hparams"]
    assert (d["seq_len"], d["vocab_size"], d["valid_tokens"]) == (1024, 50304, 10_485_760)
    assert cfg["batch_size"] * d["seq_len"] == 524_288 and cfg["target"]["value"] == 3.28
    # upstream's conventions: its Muon, summed loss, sequential shards; the track's claim rules over 10 seeds
    assert cfg["optimizers"][0]["hparams"]["convention"] == "modded_nanogpt" and d["order"] == "sequential"
    assert cfg["loss_reduction"] == "sum" and cfg["seeds"] == 10
    assert cfg["target"]["claim"] == {"margin": 0.004, "single_run": 3.276}
    r = runner.invoke(app, ["sweep", str(write(tmp_path, track3(shards))), "--dry-run",
                            "--tracking-uri", f"sqlite:///{tmp_path}/m.db"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())  # the step cost is prose, wrapped to the console's width
    line = flat[flat.index("step cost of gpt · muon"):].split("step cost of", 2)[1]
    assert "batch 512, 524,288 tokens): 4.18e+14 FLOPs" in line
    assert "activations 53.91 GiB)" in line and "1057 ms on 1 H100 SXM" in line
    assert "assumed MFU of 40%" in line
    assert not (tmp_path / "m.db").exists()  # a dry run writes no store


def test_track3_adamw_yaml_plans_upstreams_groups(shards, tmp_path):
    """The AdamW baseline: the auxiliary groups at b1 0.8 (their own hparams), the blocks at 0.9,
    warm-up (i + 1) / 250, torch's initialisation; it dry-runs on the generated shards."""
    cfg = yaml.safe_load((ROOT / "experiments" / "nanogpt_track3_adamw.yaml").read_text())
    cfg["datasets"][0]["name"] = f"tokens:{shards}"
    cfg["datasets"][0]["hparams"]["valid_tokens"] = 2048
    assert [g["hparams"] for g in cfg["param_groups"]] == [{"b1": 0.8}] * 3
    assert cfg["optimizers"][0]["hparams"]["b1"] == 0.9 and cfg["models"][0]["hparams"]["init"] == "torch"
    assert cfg["schedules"][0]["hparams"]["warmup_offset"] == 1 and cfg["loss_reduction"] == "sum"
    r = runner.invoke(app, ["sweep", str(write(tmp_path, cfg)), "--dry-run",
                            "--tracking-uri", f"sqlite:///{tmp_path}/m.db"])
    assert r.exit_code == 0, r.output
    assert "step cost of gpt · adamw" in " ".join(r.output.split())


def test_track3_without_shards_says_what_to_prepare(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["sweep", str(TRACK3), "--dry-run"])
    assert r.exit_code == 2
    assert "datasets[0].name: data/fineweb10B: not a folder of token shards (nothing is downloaded" \
        in r.output
    assert "cached_fineweb10B.py" in r.output and not (tmp_path / "mlflow.db").exists()


def test_track3_smoke_run(shards, tmp_path):
    """``--max-steps 2`` of the track-3 recipe (Muon + auxiliary Adam groups, WSD, 8 micro-batches)
    at a CPU size: 2 steps trained, the schedule over the full 3,250, another trial id than the
    full trial's, and the summary says it is a smoke run."""
    cfg = track3(shards, batch_size=16, eval_every=2, steps_per_dispatch=2, measure_perf=False, seeds=[0])
    cfg["models"][0]["hparams"].update(width=32, depth=1, num_heads=2)
    cfg["datasets"][0]["hparams"]["seq_len"] = 32
    p, uri = write(tmp_path, cfg), f"sqlite:///{tmp_path}/m.db"
    full = harness.sweep(str(p), tracking_uri=uri, dry_run=True, quiet=True).trial_ids
    r = runner.invoke(app, ["sweep", str(p), "--max-steps", "2", "--tracking-uri", uri])
    assert r.exit_code == 0, r.output
    assert "smoke run: every trial capped at 2 steps (--max-steps)" in r.output
    assert "new trial ids in experiment nanogpt_track3-smoke, not comparable" in " ".join(r.output.split())
    run = harness.results(tracking_uri=uri, experiment="nanogpt_track3-smoke").trials
    assert len(run) == 1 and run["trial_id"].iloc[0] not in full
    import mlflow

    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("nanogpt_track3-smoke")
    (tr,) = [x for x in client.search_runs([exp.experiment_id]) if "harness.trial_id" in x.data.tags]
    p_ = tr.data.params
    steps = (p_["train.steps"], p_["schedule.total_steps"], p_["train.schedule_steps"])
    assert steps == ("2", "3250", "3250")
    assert p_["train.grad_accum"] == "8" and tr.info.status == "FINISHED"
    assert (p_["optimizer.convention"], p_["train.loss_reduction"]) == ("modded_nanogpt", "sum")
    assert np.isfinite(tr.data.metrics["valid/loss"])


def test_max_steps_refuses_bad_values(shards, tmp_path):
    with pytest.raises(UsageError, match=r"max_steps: must be an integer >= 1, got 0"):
        harness.sweep(track3(shards), dry_run=True, quiet=True, max_steps=0)
    r = runner.invoke(app, ["sweep", str(write(tmp_path, track3(shards))), "--max-steps", "0", "--dry-run"])
    assert r.exit_code == 2


@pytest.mark.parametrize("hp, words", [
    ({"num_heads": 5}, "width 768 must be divisible by num_heads 5"),
    ({"num_heads": 256}, "head dimension width / num_heads = 3 must be even"),
])
def test_track3_bad_model_values(shards, tmp_path, hp, words):
    cfg = track3(shards)
    cfg["models"][0]["hparams"].update(hp)
    r = runner.invoke(app, ["sweep", str(write(tmp_path, cfg)), "--dry-run", "--tracking-uri",
                            f"sqlite:///{tmp_path}/m.db"])
    assert r.exit_code == 2 and "models[0]" in r.output and words in r.output, r.output
    assert "muon_mask" not in r.output  # not a second error: the mask's rules wait for the model
    assert not (tmp_path / "m.db").exists()


def test_track3_context_longer_than_the_data(shards, tmp_path):
    cfg = track3(shards)
    cfg["datasets"][0]["hparams"]["seq_len"] = 4096  # the validation shard holds 4,100 tokens: 2,048 asked
    r = runner.invoke(app, ["sweep", str(write(tmp_path, cfg)), "--dry-run", "--tracking-uri",
                            f"sqlite:///{tmp_path}/m.db"])
    assert r.exit_code == 2 and "datasets[0].hparams" in r.output, r.output
    assert not (tmp_path / "m.db").exists()


def test_muon_mask_rules_resolve_on_the_whole_model_under_param_groups():
    """The track's Muon baseline: ``muon_mask: hidden_matrices`` with the embedding, head and gains
    in step-size groups. Each group's Muon sees only its own leaves, so the rule is resolved on the
    whole gpt: every hidden matrix takes exactly the ungrouped Muon's step (before, the embedding's
    group raised 'matches no parameter', and the unclaimed group's last matrix counted as the head),
    and the embedding's first AdamW step is 28 x the ungrouped one."""
    import jax
    import jax.numpy as jnp

    from harness.train.build import make_opt_factory
    from harness.train.recipe import group_masks_of, group_optimizer
    from models.zoo import gpt
    from optimizers import OPTIMIZERS, SCHEDULES
    from optimizers.groups import leaf_paths, rule_mask

    model = gpt(input_shape=(8,), num_classes=50, width=16, depth=2, num_heads=2)
    params = model.init(jax.random.key(0), (1, 8))[1]
    groups = [(["embeddings"], 28.0, None), (["head"], 0.16, None), (["norms_and_biases"], 0.6, None)]
    hp = {"muon_mask": "hidden_matrices", "adam_b1": 0.8, "adam_b2": 0.95}

    def make_for(w, k=None):
        h = hp if k is None else group_masks_of(hp, params, groups, k, "muon")
        return make_opt_factory("muon", h, "none", {}, 10, OPTIMIZERS, SCHEDULES)

    grads = jax.tree.map(lambda x: jax.random.normal(jax.random.key(x.size), x.shape), params)
    deltas = []
    for make in (group_optimizer(make_for, groups, per_group=True), make_for(None)):
        opt = make(0.02)
        new = opt.params_fn(opt.update_fn(0, grads, opt.init_fn(params)))
        deltas.append(jax.tree.leaves(jax.tree.map(jnp.subtract, new, params)))
    hidden = jax.tree.leaves(rule_mask(params, "hidden_matrices"))
    paths = leaf_paths(params)
    assert sum(hidden) == 12  # 2 blocks x (q, k, v, out, fc, proj)
    for path, h, g, p in zip(paths, hidden, *deltas, strict=True):
        if h:
            np.testing.assert_allclose(g, p, rtol=1e-6, atol=1e-9, err_msg=path)
    e = paths.index("embed/0")
    np.testing.assert_allclose(deltas[0][e], 28.0 * deltas[1][e], rtol=1e-5)
    with pytest.raises(ValueError, match=r"muon: muon_mask: parameter group rule 'glob:nothing' matches no"):
        group_masks_of({"muon_mask": "glob:nothing"}, params, groups, 0, "muon")


def test_proxy_yaml_plans_the_race_it_states(tmp_path):
    """The CPU proxy on byte-level shards of the project's docs (its licence-text shards stand in):
    AdamW, Muon on the hidden matrices only, SOAP on them too; 14 step sizes x 3 seeds = 42 trials,
    all of one budget, 10 tokens per parameter, under the same WSD schedule."""
    import json

    from harness.config.ladder_parts import model_counts
    from harness.config.load import load_config
    from harness.data.tokenize import tokenize_files
    from harness.plan.expansion import expand

    tokenize_files([ROOT / "docs" / "architecture.md", ROOT / "README.md"], tmp_path / "t", "bytes")
    cfg = yaml.safe_load((ROOT / "experiments" / "nanogpt_proxy.yaml").read_text())
    cfg["datasets"][0]["name"] = f"tokens:{tmp_path / 't'}"
    cfg["datasets"][0]["hparams"]["valid_tokens"] = 2048
    specs = expand(load_config(write(tmp_path, cfg)))
    assert len(specs) == 42 and {s.seed for s in specs} == {0, 1, 2}
    count = {o: sum(s.optimizer == o for s in specs) for o in ("adamw", "muon", "soap")}
    assert count == {"adamw": 15, "muon": 15, "soap": 12}
    masks = {s.optimizer: s.hparams("optimizer").get(f"{s.optimizer}_mask") for s in specs}
    assert masks == {"adamw": None, "muon": "hidden_matrices", "soap": "hidden_matrices"}
    (steps,) = {s.steps for s in specs}
    s = specs[0]
    n = model_counts("gpt", json.dumps(s.hparams("model"), sort_keys=True), s.dataset,
                     json.dumps(s.hparams("dataset"), sort_keys=True))[0]
    assert steps == round(10 * n / (16 * 64))
    schedules = {(s.schedule, s.hparams("schedule")["decay_fraction"]) for s in specs}
    assert schedules == {("warmup_stable_decay", 0.7)}
