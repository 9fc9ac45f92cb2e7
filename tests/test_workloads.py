"""The workloads registry: names, config entries, expansion into trials, MLflow tags, ``list``."""

from __future__ import annotations

import pytest
import yaml
from mlflow import MlflowClient
from test_sequences import bigram_mlp

from harness.config.load import ConfigError, default_registries, load_config, parse_config
from harness.config.workloads import WORKLOADS, Workload, get_workload
from harness.orchestrate.run import expand, run_sweep
from harness.tracking.client import search_all

SHIPPED = {"mnist1d_mlp", "mnist1d_cnn", "digits_cnn", "cifar10_resnet18", "cifar10_vit",
           "markov_lm_transformer", "lm1b_transformer"}


def test_registry_ships_the_workloads():
    assert set(WORKLOADS) >= SHIPPED
    reg = default_registries()
    for w in WORKLOADS.values():
        assert w.metric in ("valid/accuracy", "valid/loss") and w.target_source
        assert w.target_mode == ("max" if w.metric.endswith("accuracy") else "min")
        assert w.dataset in reg.datasets or w.dataset.startswith("tfds:")
        assert w.needs_data_dir == w.dataset.startswith("tfds:")
    assert get_workload("cifar10_resnet18").target == 0.85  # AlgoPerf's validation target
    assert get_workload("cifar10_resnet18").augment == {"crop_pad": 4, "flip": True}
    # the Markov target is the exact floor of the default chain + 0.08 nats (test_sequences pins it)
    assert get_workload("markov_lm_transformer").target == pytest.approx(1.874714 + 0.08, abs=1e-4)
    with pytest.raises(KeyError, match=r"unknown workload 'mnist1d_cn'; .*did you mean 'mnist1d_cnn'"):
        get_workload("mnist1d_cn")


def _write(tmp_path, **cfg):
    p = tmp_path / "w.yaml"
    cfg.setdefault("optimizers", [{"name": "adam", "hparams": {"step_size": 1.0e-3}}])
    p.write_text(yaml.safe_dump({"name": "wl", **cfg}))
    return p


def test_config_workloads_expand(tmp_path):
    cfg = load_config(_write(tmp_path, workloads=[
        "mnist1d_cnn", {"name": "digits_cnn", "model_hparams": {"width": [8, 16]}}],
        dtype=["float32", "bfloat16"], seeds=2))
    specs = expand(cfg)
    assert len(specs) == (1 + 2) * 2 * 2  # (mnist1d_cnn + digits_cnn × 2 widths) × dtypes × seeds
    m = [s for s in specs if s.workload == "mnist1d_cnn"]
    w = WORKLOADS["mnist1d_cnn"]
    assert {(s.model, s.dataset, s.steps, s.batch_size, s.eval_every) for s in m} == {
        (w.model, w.dataset, w.steps, w.batch_size, w.eval_every)}
    assert dict(m[0].model_hparams) == dict(w.model_hparams)
    assert {s.dtype for s in m} == {"float32", "bfloat16"}
    assert m[0].target.value == w.target and m[0].target.mode == "max"
    d = [s for s in specs if s.workload == "digits_cnn"]
    assert sorted({dict(s.model_hparams)["width"] for s in d}) == [8, 16]
    assert m[0].to_dict()["workload"] == "mnist1d_cnn"
    assert m[0].flat_params()["workload"] == "mnist1d_cnn"
    # CIFAR: augmentation from the workload, no data needed to expand
    (c,) = expand(parse_config(yaml.safe_load(_write(tmp_path, workloads=["cifar10_resnet18"]).read_text())))
    assert dict(c.augment) == {"crop_pad": 4, "flip": True} and c.dataset == "tfds:cifar10"
    # without a grid of its own, the config's budget and batch size override the workload's
    (q,) = expand(load_config(_write(tmp_path, workloads=["mnist1d_cnn"], budget={"steps": 7},
                                     batch_size=32, targets={"mnist1d_cnn": {"metric": "valid/loss",
                                                                             "value": 1.0}})))
    assert (q.steps, q.batch_size, q.target.metric, q.target.value) == (7, 32, "valid/loss", 1.0)


def test_config_workload_errors(tmp_path):
    with pytest.raises(ConfigError) as ei:
        load_config(_write(tmp_path, workloads=["mnist1d_cn", {"name": "digits_cnn",
                                                               "model_hparams": {"widht": 8}}]))
    lines = ei.value.errors
    assert any(": workloads[0].name: unknown workload 'mnist1d_cn'" in ln and "did you mean 'mnist1d_cnn'"
               in ln for ln in lines), lines
    assert any(": workloads[1].model_hparams.widht: unknown hyperparameter of model 'cnn'" in ln
               and "did you mean 'width'" in ln for ln in lines), lines
    with pytest.raises(ConfigError, match="give 'models' and 'datasets' and 'budget' \\(or 'workloads'"):
        load_config(_write(tmp_path))
    with pytest.raises(ConfigError, match="augment: unknown augment hyperparameter"):
        load_config(_write(tmp_path, workloads=["digits_cnn"], augment={"rotate": 1}))


def test_list_shows_workloads():
    from typer.testing import CliRunner

    from harness.cli import app

    out = CliRunner().invoke(app, ["list", "workloads"], env={"COLUMNS": "100"})
    assert out.exit_code == 0, out.output
    for name in SHIPPED:
        assert name in out.output
    assert "valid/accuracy >= 0.85" in out.output


def test_workload_sweep_tags_and_gap_to_entropy(tmp_path, monkeypatch, tracking_uri):
    """A workload sweep end to end into MLflow: the trials carry the workload (tag, param), and the
    Markov-chain dataset's gap to its loss floor is logged."""
    from models import zoo

    monkeypatch.setitem(zoo.MODELS, "bigram_mlp", bigram_mlp)
    monkeypatch.setitem(WORKLOADS, "markov_tiny", Workload(
        name="markov_tiny", description="test", dataset="markov_lm",
        dataset_hparams={"num_train": 512, "num_valid": 128, "num_test": 128}, model="bigram_mlp",
        model_hparams={"width": 16}, metric="valid/loss", target=3.0,
        target_mode="min", target_source="test", steps=20, batch_size=32, eval_every=10))
    monkeypatch.chdir(tmp_path)
    p = _write(tmp_path, workloads=["markov_tiny"], measure_perf=False,
               optimizers=[{"name": "adam", "hparams": {"step_size": 1.0e-2}}])
    s = run_sweep(p, tracking_uri=tracking_uri, quiet=True)
    assert s.counts()["finished"] == 1
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name("wl")
    (run,) = [r for r in search_all(c, exp.experiment_id)
              if r.data.tags.get("harness.kind") == "trial"]
    assert run.data.tags["workload"] == "markov_tiny" and run.data.params["workload"] == "markov_tiny"
    hist = c.get_metric_history(run.info.run_id, "valid/nats_above_entropy")
    assert [h.step for h in hist] == [0, 10, 20]
    floor = run.data.metrics["dataset/loss_floor"]
    loss = {h.step: h.value for h in c.get_metric_history(run.info.run_id, "eval/loss")} or {
        h.step: h.value for h in c.get_metric_history(run.info.run_id, "valid/loss")}
    assert hist[-1].value == pytest.approx(loss[20] - floor, abs=1e-6)
    assert run.data.metrics["final/valid_nats_above_entropy"] == pytest.approx(hist[-1].value)

    # the report's leaderboard shows the gap to the entropy rate
    from reports import load_frame
    from reports.figures import leaderboard

    lb = leaderboard(load_frame("wl", tracking_uri=tracking_uri))
    assert lb["Gap to entropy rate (nats)"].tolist() == [f"{hist[-1].value:.4g} (1 seed)"]

def test_shipped_experiments_expand():
    """experiments/workloads.yaml: 5 optimizers × 3 quasi-random step sizes × 2 workloads; algoperf_small.yaml
    expands (its data is not prepared here, so only the structure and the expansion are checked)."""
    from pathlib import Path

    from models.zoo import MODELS

    root = Path(__file__).resolve().parents[1] / "experiments"
    gpu = expand(parse_config(yaml.safe_load((root / "algoperf_small.yaml").read_text())))
    assert len(gpu) == 48 and {s.dtype for s in gpu} == {"bfloat16"}
    assert {s.workload for s in gpu} == {"cifar10_resnet18", "cifar10_vit", "lm1b_transformer"}
    if "transformer_lm" not in MODELS:
        pytest.skip("transformer_lm is not in this checkout's zoo yet")
    specs = expand(load_config(root / "workloads.yaml"))
    assert len(specs) == 30
    assert {s.optimizer for s in specs} == {"adam", "adamw", "nadamw", "lion", "momentum"}
    assert {s.workload for s in specs} == {"markov_lm_transformer", "mnist1d_cnn"}
    # the tuning protocol: 3 quasi-random step sizes per optimizer and workload, inside its range
    lo = {"adam": 1e-3, "adamw": 1e-3, "nadamw": 1e-3, "lion": 1e-4, "momentum": 1e-2}
    for opt, low in lo.items():
        for wl in ("markov_lm_transformer", "mnist1d_cnn"):
            lrs = {dict(s.optimizer_hparams)["step_size"] for s in specs
                   if (s.optimizer, s.workload) == (opt, wl)}
            assert len(lrs) == 3 and all(low <= v <= 10 * low for v in lrs), (opt, wl, lrs)
