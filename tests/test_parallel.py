"""Data-parallel and trial-parallel training (harness.parallel) on 4 forced CPU devices.

JAX fixes its device count when it initialises, so the multi-device checks run in **one**
subprocess started with ``XLA_FLAGS=--xla_force_host_platform_device_count=4`` (one JAX start, one
set of compiles): :data:`CHECKS` trains the digits MLP on 1 and on 4 devices, a trial-parallel batch
and each of its trials alone, and runs ``python -m harness sweep`` (as ``runpy`` of
``harness.__main__``) on a ``parallelism: {devices: 4}`` config into a SQLite MLflow store, whose
trial measures the sharded step's throughput; it prints one JSON object that the tests read.

Tolerance: "equal to float32 rounding" is ``|a - b| <= ATOL + RTOL·|b|`` on every curve value
(train loss per step, validation loss and accuracy per evaluation, test loss and accuracy) with
``RTOL = ATOL = 1e-5``; the tests also assert the largest difference is <= 1e-6. Measured here:
2.4e-7 (one float32 ulp of a loss near 2) for the data-parallel MLP and the trial-parallel batch.
The same check for a small CNN (convolutions batch-sharded; also 2.4e-7) lives in
``tests/benchmarks/test_bench_parallel.py``: its compiles (~18 s of CPU here) do not fit this
file's time budget (~45 s).

The config-level checks (the divisibility message, the device-count error, both before any MLflow
write) run in this process with ``harness.train.parallel.visible_devices`` patched to 4 (2) devices.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.load import ConfigError, parse_config
from harness.core.spec import TrialSpec
from harness.train import parallel

ROOT = Path(__file__).resolve().parents[1]
RTOL = ATOL = 1e-5

CHECKS = r'''
import json, os, runpy, sys
import numpy as np
import jax
from harness.train import loop as trainer
from harness.train import program
from harness.data.sources import load_dataset
from harness.core.spec import TrialSpec

out = {"devices": jax.device_count()}
ds = load_dataset("digits")


def mk(**kw):
    base = dict(sweep="t", model="mlp", optimizer="adam", schedule="constant", dataset="digits",
                seed=0, steps=12, batch_size=32, eval_every=6, steps_per_dispatch=6,
                model_hparams={"width": 16, "depth": 1}, optimizer_hparams={"step_size": 0.01})
    base.update(kw)
    return TrialSpec.make(**base)


def curves(r):
    c = r.curves
    return {"train": c.train_loss, "vloss": c.eval_loss, "vacc": c.eval_accuracy,
            "test": [r.test_loss, r.test_accuracy], "steps": c.train_step}


def shardings(exe):
    """The compiled chunk's state shardings, in and out, and on how many devices."""
    ins = jax.tree_util.tree_leaves(exe.input_shardings[0][0])
    outs = jax.tree_util.tree_leaves(exe.output_shardings[0])
    return sorted({str(s.spec) for s in ins}), sorted({str(s.spec) for s in outs}), \
        sorted({len(s.device_set) for s in ins})


seen = []
program.INSPECT_BATCH = lambda s: seen.append(str(s.spec))
one = trainer.run_trial(mk(), dataset=ds, measure_perf=False)
four = trainer.run_trial(mk(devices=4), dataset=ds, measure_perf=False)
out["mlp"] = {"one": curves(one), "four": curves(four), "extra": four.extra}
prog = next(pr for k, pr in program.PROGRAMS.items() if k[0] == "mlp")
chunk = next(exe for key, exe in prog.compiled.items() if key[2] is not None)
out["chunk_shardings"] = shardings(chunk)
out["batch_sharding_seen"] = sorted(set(seen))

# trial-parallel: 3 trials (seeds x step sizes) on 4 devices (padded to 4), each vs alone
specs = [mk(seed=s, optimizer_hparams={"step_size": lr}, devices=4, shard="trials")
         for s, lr in ((0, 0.01), (1, 0.01), (0, 0.05))]
batch = trainer.run_trials_batched(specs, dataset=ds, measure_perf=False)
alone = [trainer.run_trial(mk(seed=s.seed, optimizer_hparams=s.hparams("optimizer")), dataset=ds,
                           measure_perf=False) for s in specs]
out["trials"] = {"batch": [curves(r) for r in batch], "alone": [curves(r) for r in alone],
                 "extra": batch[0].extra}
prog = next(pr for k, pr in program.PROGRAMS.items() if k[0] == "mlp")
exe = next(exe for key, exe in prog.compiled.items() if key[2] is not None and key[2][0] == "trials")
out["trials_shardings"] = shardings(exe)

# data-parallel and vmapped: 2 seeds as one unit, each evaluation batch split over the 4 devices
pair = [mk(seed=s, devices=4) for s in (0, 1)]
try:
    vb = trainer.run_trials_batched(pair, dataset=ds, measure_perf=False)
    out["batch_vmapped"] = {"batch": [curves(r) for r in vb],
                            "alone": [curves(trainer.run_trial(sp, dataset=ds, measure_perf=False))
                                      for sp in pair]}
except Exception as e:
    out["batch_vmapped"] = {"error": f"{type(e).__name__}: {e}"}

# end to end: python -m harness sweep with parallelism: {devices: 4} into SQLite
work = sys.argv[1]
cfg = os.path.join(work, "par.yaml")
with open(cfg, "w") as f:
    f.write("name: par_e2e\nmodels: [{name: mlp, hparams: {width: 16, depth: 1}}]\n"
            "optimizers: [{name: adam, hparams: {step_size: 0.01}}]\ndatasets: [digits]\n"
            "batch_size: 32\nbudget: {steps: 12}\neval_every: 6\nsteps_per_dispatch: 6\n"
            "parallelism: {devices: 4}\n")
uri = "sqlite:///" + os.path.join(work, "mlflow.db")
sys.argv = ["harness", "sweep", cfg, "--tracking-uri", uri, "--quiet"]
try:
    runpy.run_module("harness", run_name="__main__")
except SystemExit as e:
    out["sweep_exit"] = e.code
from mlflow import MlflowClient
client = MlflowClient(uri)
exp = client.get_experiment_by_name("par_e2e")
runs = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("harness.kind") == "trial"]
from harness.execute import training
(p,) = training.PERF_CACHE.values()  # the sweep's one throughput measurement
out["perf"] = {k: getattr(p, k) for k in ("num_devices", "examples_per_sec",
               "examples_per_sec_per_device", "mesh", "flops_per_step", "flops_per_step_analytic",
               "peak_flops", "utilization", "device_kind")}
out["sweep"] = [{"metrics": r.data.metrics, "tags": r.data.tags, "params": r.data.params,
                 "status": r.info.status} for r in runs]
print("JSON:" + json.dumps(out, default=str))
'''


@pytest.fixture(scope="module")
def forced4(tmp_path_factory):
    """The JSON of :data:`CHECKS`, run once on 4 forced CPU devices."""
    work = tmp_path_factory.mktemp("parallel")
    cache = work / "cache"
    cache.mkdir()
    # a known peak, so that the subprocess does not time a 2048² matmul (utilisation is checked
    # against it)
    (cache / "peak.json").write_text(json.dumps({"cpu:cpu|float32": 1e10}))
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4".strip()
    env = {**os.environ, "XLA_FLAGS": flags,  # (keeps the suite's compile flags, tests/conftest.py)
           "PYTHONPATH": str(ROOT), "HARNESS_CACHE_DIR": str(cache), "MLFLOW_LOGGING_LEVEL": "WARNING"}
    env.pop("HARNESS_DEVICE_IDS", None)
    p = subprocess.run([sys.executable, "-c", CHECKS, str(work)], cwd=work, env=env,
                       capture_output=True, text=True, timeout=600)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("JSON:")), None)
    assert p.returncode == 0 and line, f"rc={p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
    return json.loads(line[5:])


def _max_diff(a: dict, b: dict) -> float:
    """Largest |a - b| over every curve value, asserting the tolerance on each."""
    worst = 0.0
    for k in ("train", "vloss", "vacc", "test"):
        assert len(a[k]) == len(b[k]), k
        for x, y in zip(a[k], b[k], strict=True):
            assert abs(x - y) <= ATOL + RTOL * abs(y), (k, x, y)
            worst = max(worst, abs(x - y))
    assert a["steps"] == b["steps"]
    return worst


def test_forced_devices_present(forced4):
    assert forced4["devices"] == 4


def test_data_parallel_curves_equal_single_device(forced4):
    r = forced4["mlp"]
    worst = _max_diff(r["four"], r["one"])
    assert worst <= 1e-6  # measured: 2.4e-7
    assert r["extra"]["mesh"] == "batch=4" and r["extra"]["num_devices"] == 4
    assert r["one"]["train"][-1] < r["one"]["train"][0]  # it trained


def test_batch_and_state_really_sharded(forced4):
    # the training batch inside the scan, as XLA's partitioner placed it
    assert forced4["batch_sharding_seen"] == ["P('batch',)"]
    # the compiled chunk: state in and out replicated over all 4 devices
    ins, outs, ndev = forced4["chunk_shardings"]
    assert ins == ["P()"] and outs == ["P()"] and ndev == [4]


def test_trial_parallel_trial_i_equals_alone(forced4):
    t = forced4["trials"]
    for b, a in zip(t["batch"], t["alone"], strict=True):
        assert _max_diff(b, a) <= 1e-6
    assert t["extra"]["mesh"] == "trials=4" and t["extra"]["padded_trials"] == 1
    ins, outs, ndev = forced4["trials_shardings"]
    assert ins == ["P('trials',)"] and outs == ["P('trials',)"] and ndev == [4]


def test_data_parallel_vmapped_unit_trains_as_one(forced4):
    """Two seeds vmapped with each batch split over 4 devices: the evaluation program took the
    stacked parameters (it raised ``Incompatible shapes for broadcasting: shapes=[(286, 2, 2),
    (286,)]`` before, and the sweep fell back to one trial at a time); each trial as it trains alone
    on the mesh, to float32 rounding."""
    r = forced4["batch_vmapped"]
    assert "error" not in r, r
    for b, a in zip(r["batch"], r["alone"], strict=True):
        assert _max_diff(b, a) <= 1e-5


def test_perf_per_device_and_whole_mesh(forced4):
    p = forced4["perf"]
    assert p["num_devices"] == 4 and p["mesh"] == "batch=4" and p["device_kind"] == "cpu:cpu"
    assert p["examples_per_sec_per_device"] == pytest.approx(p["examples_per_sec"] / 4)
    # XLA counts one device's partitioned program; the harness reports the whole mesh's FLOPs,
    # which agree with the analytic 3 x forward FLOPs x batch
    assert 0.8 < p["flops_per_step"] / p["flops_per_step_analytic"] < 1.25
    assert p["peak_flops"] == pytest.approx(4 * 1e10)  # the one-device peak x devices
    step_s = 32 / p["examples_per_sec"]
    assert p["utilization"] == pytest.approx(p["flops_per_step"] / step_s / 4e10)


def test_sweep_logs_per_device_throughput_to_mlflow(forced4):
    assert forced4.get("sweep_exit") in (None, 0)
    (run,) = forced4["sweep"]
    m, tags = run["metrics"], run["tags"]
    assert run["status"] == "FINISHED" and tags["status"] == "finished"
    assert tags["harness.mesh"] == "batch=4" and tags["perf.mesh"] == "batch=4"
    assert tags["harness.devices"] == "cpu:0,1,2,3"  # the trial's mesh, not just its first device
    assert m["perf/num_devices"] == 4
    assert m["perf/examples_per_sec_per_device"] == pytest.approx(m["perf/examples_per_sec"] / 4)
    assert run["params"]["parallelism.devices"] == "4" and run["params"]["parallelism.shard"] == "batch"
    # the same trial on one device: the same curves (the trial_id ignores the device count)
    one = TrialSpec.make(sweep="par_e2e", model="mlp", optimizer="adam", schedule="constant",
                         dataset="digits", seed=0, steps=12, batch_size=32, eval_every=6,
                         steps_per_dispatch=6, model_hparams={"width": 16, "depth": 1},
                         optimizer_hparams={"step_size": 0.01})
    assert tags["harness.trial_id"] == one.trial_id


# ---------------------------------------------------------------------------- in this process


def test_batch_problem_message():
    assert parallel.batch_problem(100, 8) == "batch_size 100 does not divide over 8 devices: use 96 or 104"
    assert parallel.batch_problem(3, 4) == "batch_size 3 does not divide over 4 devices: use 4"
    assert parallel.batch_problem(96, 8) is None and parallel.batch_problem(7, 1) is None


def test_trial_identity_ignores_parallelism_perf_key_does_not():
    kw = dict(sweep="s", model="mlp", optimizer="adam", schedule="constant", dataset="digits", seed=0,
              steps=10, batch_size=32, eval_every=5)
    a, b = TrialSpec.make(**kw), TrialSpec.make(**kw, devices=4, shard="trials")
    assert a.trial_id == b.trial_id and a.to_dict() != b.to_dict()
    assert "devices" not in a.to_dict() and b.to_dict()["devices"] == 4
    assert a.perf_key() != b.perf_key() and a.batch_key() != b.batch_key()
    assert "parallelism.devices" not in a.flat_params()


@pytest.mark.parametrize("value, ok", [
    ({"devices": "all"}, "all"), ({"devices": 4, "shard": "trials"}, 4),
    ({"devices": 0}, "c.yaml: parallelism.devices: must be >= 1 (or 'all'), got 0"),
    ({"devices": True}, "c.yaml: parallelism.devices: expected an integer, not a boolean (got True)"),
    ({"devices": "many"}, "c.yaml: parallelism.devices: expected a positive integer or 'all', got 'many'"),
    ({"shard": "model"}, "c.yaml: parallelism.shard: "),
    (4, "c.yaml: parallelism: expected a mapping with keys devices, shard, got 4")])
def test_config_parallelism_schema(tmp_path, value, ok):
    """Each bad value's line names it once (it read "got 0 (got 0)" before)."""
    doc = {"name": "p", "models": ["mlp"], "optimizers": ["adam"], "datasets": ["digits"],
           "budget": {"steps": 10}, "parallelism": value}
    if isinstance(ok, str) and ok.startswith("c.yaml"):
        with pytest.raises(ConfigError) as e:
            parse_config(doc, "c.yaml")
        (line,) = e.value.errors
        assert line.startswith(ok) and line.count("got") == 1, line
    else:
        assert parse_config(doc, "c.yaml").parallelism.devices == ok


def _sweep_cli(tmp_path, write_sweep, monkeypatch, n_visible: int, **cfg):
    import jax
    from typer.testing import CliRunner

    from harness.cli import app

    monkeypatch.setattr(parallel, "visible_devices", lambda: [jax.devices()[0]] * n_visible)
    path = write_sweep(**cfg)
    db = tmp_path / "store" / "mlflow.db"
    res = CliRunner().invoke(app, ["sweep", str(path), "--tracking-uri", f"sqlite:///{db}"])
    return res, db


def test_divisibility_error_before_any_mlflow_write(tmp_path, write_sweep, monkeypatch):
    res, db = _sweep_cli(tmp_path, write_sweep, monkeypatch, 4, batch_size=30,
                         parallelism={"devices": 4})
    assert res.exit_code == 2, res.output
    assert ": batch_size: 30 does not divide over 4 devices: use 28 or 32" in res.output
    assert not db.exists() and not db.parent.exists()


def test_too_many_devices_names_harness_device_ids_when_it_is_the_limit(tmp_path, write_sweep, monkeypatch):
    """With HARNESS_DEVICE_IDS set, the limit is that list, not the host: the message said to
    force more CPU devices, which were already there."""
    monkeypatch.setenv("HARNESS_DEVICE_IDS", "0")
    res, db = _sweep_cli(tmp_path, write_sweep, monkeypatch, 1, batch_size=32,
                         parallelism={"devices": 4})
    assert res.exit_code == 2, res.output
    assert ("parallelism.devices: 4 exceeds the 1 visible device of this process (use 'all' or at most "
            "1; HARNESS_DEVICE_IDS='0' limits this process to them: list more devices there)") \
        in " ".join(res.output.split())
    assert not db.exists()


def test_too_many_devices_error_before_any_mlflow_write(tmp_path, write_sweep, monkeypatch):
    res, db = _sweep_cli(tmp_path, write_sweep, monkeypatch, 2, batch_size=32,
                         parallelism={"devices": 8})
    assert res.exit_code == 2, res.output
    assert ": parallelism.devices: 8 exceeds the 2 visible devices of this process (use 'all' or at most 2;" \
        in res.output
    assert not db.exists()
