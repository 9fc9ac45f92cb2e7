"""AlgoPerf's own JAX baselines, unchanged, through ``python -m harness sweep``.

Opt-in: set ``ALGOPERF_DIR`` to a checkout of ``mlcommons/algorithmic-efficiency`` (read at
2c90454, September 2025); without it every test here is skipped. Nothing of AlgoPerf is copied into
this project: the sweeps name the checkout's files in their ``source:`` and ``search_space:``, and
run with the checkout on ``PYTHONPATH`` (Adafactor's and Shampoo's submissions import their
neighbours as ``algorithms.archived_paper_baselines...``; AlgoPerf's own ``algoperf`` package found
there imports torch, so without torch the harness's stand-ins are used, with a warning).

* ``jax_nadamw_full_budget.py`` (external tuning) at its fixed point 3 (label smoothing 0, dropout
  0) against the built-in ``nadamw`` with ``warmup_cosine_decay`` at the mapped hyperparameters on
  ``mnist1d_mlp`` (2,000 steps): equal to float32 rounding through step 400, then the two drift
  apart as any two float32 runs of this training do: their largest difference is no more than
  three times what a one-ulp change of the built-in's own learning rate makes (measured here:
  validation loss 1.9e-3 relative for both, validation accuracy 0.01 for both);
* the five baselines written for AlgoPerf's jit API train on ``digits_cnn``;
* the four archived baselines written for the pmap API, and the self-tuning NAdamW, fail their
  trial for the reasons ``docs/your-optimizer.md`` gives.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

ALGOPERF = os.environ.get("ALGOPERF_DIR", "")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not ALGOPERF, reason="set ALGOPERF_DIR to a checkout of mlcommons/algorithmic-efficiency")]

NADAMW = "baselines/external_tuning/jax_nadamw_full_budget.py"
#: AlgoPerf's external-tuning NAdamW baseline's fixed point 3 (its tuning_search_space.json).
POINT3 = {"dropout_rate": 0.0, "label_smoothing": 0.0, "learning_rate": 0.001308209823469072,
          "one_minus_beta1": 0.02686663061, "beta2": 0.9981232922116359,
          "weight_decay": 0.16375311233774334, "warmup_factor": 0.1}


def _algo(path: str) -> str:
    return str(Path(ALGOPERF) / "algorithms" / path)


def _sweep(tmp_path: Path, cfg: dict) -> subprocess.CompletedProcess:
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PYTHONPATH"] = os.pathsep.join([ALGOPERF, *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "harness", "sweep", str(p)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1800)


def _runs(tmp_path: Path, experiment: str) -> list[dict]:
    """The sweep's trial runs: ``{"tags", "params"}`` and, for a trial that trained, its
    ``curves.csv`` as ``"train"``, ``"valid"`` and ``"valid_acc"`` arrays."""
    from mlflow.tracking import MlflowClient

    from harness.tracking.client import search_all

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    out = []
    for run in search_all(client, exp.experiment_id):
        tags = run.data.tags
        if tags.get("harness.kind") != "trial":
            continue
        got = {"tags": tags, "params": run.data.params}
        if tags.get("status") != "failed":
            dst = tmp_path / run.info.run_id
            dst.mkdir(exist_ok=True)
            local = client.download_artifacts(run.info.run_id, "curves.csv", str(dst))
            rows = list(csv.DictReader(Path(local).read_text().splitlines()))
            got.update({key: np.array([float(x[col]) for x in rows if x["split"] == split])
                        for key, split, col in (("train", "train", "loss"), ("valid", "valid", "loss"),
                                                ("valid_acc", "valid", "accuracy"))})
        out.append(got)
    return out


def _rel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a - b) / np.abs(b)


def test_nadamw_baseline_agrees_with_the_builtin_nadamw(tmp_path):
    lr = POINT3["learning_rate"]
    lr_ulp = float(np.nextafter(np.float32(lr), np.float32(1)))  # the next float32 up
    r = _sweep(tmp_path, {
        # mnist1d_mlp's model, data and budget as a grid (a workloads: config takes no include: entries)
        "name": "nadamw_parity", "models": [{"name": "mlp", "hparams": {"width": 256, "depth": 2}}],
        "datasets": [{"name": "mnist1d", "hparams": {"validation_fraction": 0.1}}], "batch_size": 128,
        "budget": {"steps": 2000}, "eval_every": 200, "seeds": [0], "measure_perf": False,
        "optimizers": [{"name": "ap_nadamw", "hparams": POINT3,
                        "source": f"algoperf:{_algo(NADAMW)}"}],
        "include": [{"optimizers": [{"name": "nadamw", "hparams": {
                         "step_size": [lr, lr_ulp], "b1": 1 - POINT3["one_minus_beta1"],
                         "b2": POINT3["beta2"], "weight_decay": POINT3["weight_decay"]}}],
                     "schedules": [{"name": "warmup_cosine_decay", "hparams": {"warmup_steps": 200}}]}]})
    assert r.returncode == 0, r.stdout + r.stderr
    runs = _runs(tmp_path, "nadamw_parity")
    (ap,) = [x for x in runs if x["tags"]["optimizer"] == "ap_nadamw"]
    native = {float(x["params"]["optimizer.step_size"]): x
              for x in runs if x["tags"]["optimizer"] == "nadamw"}
    base, ulp = native[min(native)], native[max(native)]
    assert len(native) == 2 and min(native) == pytest.approx(lr, rel=1e-12)
    assert len(ap["train"]) == len(base["train"]) == 2000 and len(ap["valid"]) == 11
    assert ap["valid"][0] == base["valid"][0]
    assert _rel(ap["train"][:400], base["train"][:400]).max() < 1e-6  # float32 rounding
    # floors: float32 rounding for the losses, 5 of the 400 validation examples for the accuracy
    for key, diff, floor in (("valid", _rel, 1e-5), ("train", _rel, 1e-5),
                             ("valid_acc", lambda a, b: np.abs(a - b), 5 / 400)):
        got, noise = diff(ap[key], base[key]).max(), diff(ulp[key], base[key]).max()
        assert got <= max(3 * noise, floor), (key, got, noise)
    assert abs(ap["valid_acc"][-1] - base["valid_acc"][-1]) <= 0.02


#: The baselines written for AlgoPerf's jit API (v0.6), each at one point of its search space.
JIT_ERA = {
    "ap_nadamw_full_budget": (NADAMW, POINT3),
    "ap_adamw": ("archived_paper_baselines/adamw/jax/submission.py",
                 {"learning_rate": 0.0082, "one_minus_beta1": 0.031, "beta2": 0.999, "warmup_factor": 0.05,
                  "weight_decay": 0.021, "label_smoothing": 0.1, "dropout_rate": 0.0}),
    "ap_nadamw": ("archived_paper_baselines/nadamw/jax/submission.py",
                  {"learning_rate": 0.0082, "one_minus_beta1": 0.0062, "beta2": 0.999, "warmup_factor": 0.05,
                   "weight_decay": 0.021, "label_smoothing": 0.1, "dropout_rate": 0.0}),
    "ap_momentum": ("archived_paper_baselines/momentum/jax/submission.py",
                    {"learning_rate": 0.063, "one_minus_beta1": 0.134, "warmup_factor": 0.05,
                     "weight_decay": 6.5e-6, "label_smoothing": 0.2, "dropout_rate": 0.0,
                     "decay_steps_factor": 0.9, "end_factor": 0.001}),
    "ap_nesterov": ("archived_paper_baselines/nesterov/jax/submission.py",
                    {"learning_rate": 0.063, "one_minus_beta1": 0.134, "warmup_factor": 0.05,
                     "weight_decay": 6.5e-6, "label_smoothing": 0.2, "dropout_rate": 0.0,
                     "decay_steps_factor": 0.9, "end_factor": 0.001}),
}


def test_the_jit_api_baselines_train_unchanged(tmp_path):
    r = _sweep(tmp_path, {"name": "jit_era", "workloads": ["digits_cnn"], "seeds": [0],
                          "measure_perf": False,
                          "optimizers": [{"name": n, "source": f"algoperf:{_algo(p)}", "hparams": hp}
                                         for n, (p, hp) in JIT_ERA.items()]})
    assert r.returncode == 0, r.stdout + r.stderr
    runs = {x["tags"]["optimizer"]: x for x in _runs(tmp_path, "jit_era")}
    assert sorted(runs) == sorted(JIT_ERA)
    for name, run in runs.items():
        assert run["tags"]["status"] == "finished", name
        assert run["valid_acc"][-1] >= 0.95, (name, run["valid_acc"][-1])


#: The baselines that cannot run, and the end of the reason their trial fails with.
CANNOT = {
    "ap_lamb": ("archived_paper_baselines/lamb/jax/submission.py", "IndexError: tuple index out of range"),
    "ap_sam": ("archived_paper_baselines/sam/jax/submission.py", "IndexError: tuple index out of range"),
    "ap_adafactor": ("archived_paper_baselines/adafactor/jax/submission.py",
                     "IndexError: tuple index out of range"),
    "ap_shampoo": ("archived_paper_baselines/shampoo/jax/submission.py",
                   "IndexError: tuple index out of range"),
    "ap_nadamw_self_tuning": ("baselines/self_tuning/jax_nadamw_full_budget.py",
                              "AttributeError: 'dict' object has no attribute 'dropout_rate'"),
}


def test_the_pmap_api_baselines_and_the_self_tuning_nadamw_fail_their_trials(tmp_path):
    hp = {"learning_rate": 0.002, "one_minus_beta1": 0.1, "beta2": 0.999, "warmup_factor": 0.05,
          "weight_decay": 0.01, "label_smoothing": 0.1, "dropout_rate": 0.0}
    own = {"ap_sam": {**hp, "rho": 0.05}, "ap_adafactor": {k: v for k, v in hp.items() if k != "beta2"},
           "ap_nadamw_self_tuning": {}}
    r = _sweep(tmp_path, {"name": "cannot", "workloads": ["mnist1d_mlp"], "seeds": [0],
                          "measure_perf": False,
                          "optimizers": [{"name": n, "source": f"algoperf:{_algo(p)}",
                                          "hparams": own.get(n, hp)} for n, (p, _) in CANNOT.items()]})
    # exit 1, not 2: they pass the pre-flight (their imports and API are AlgoPerf's), then fail
    assert r.returncode == 1, r.stdout + r.stderr
    runs = {x["tags"]["optimizer"]: x for x in _runs(tmp_path, "cannot")}
    assert sorted(runs) == sorted(CANNOT)
    for name, run in runs.items():
        assert run["tags"]["status"] == "failed", name
        assert CANNOT[name][1] in run["tags"]["harness.reason"], (name, run["tags"]["harness.reason"])
