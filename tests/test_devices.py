"""Device assignment for ``--jobs N`` and Ray (:mod:`harness.devices`): the planner's table, the
memory rules, the worker's guard, and one real ``--jobs 2`` sweep on 4 forced CPU devices."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from harness.execute import devices
from harness.execute.devices import DevicePlanError, plan_devices, ray_task_env, worker_env

#: A dataset that costs nothing to make (``digits`` imports scikit-learn in every process: ~4 s each).
TINY_DATA = {"name": "synthetic", "hparams": {"num_examples": 64, "num_valid": 32, "num_test": 32,
                                              "input_shape": {"value": [8]}, "num_classes": 2}}
P = "XLA_PYTHON_CLIENT_PREALLOCATE"
CVD = "CUDA_VISIBLE_DEVICES"
HDI = "HARNESS_DEVICE_IDS"


# --------------------------------------------------------------------------- the planner's table

PLANS = [
    # (devices, platform, jobs, per trial, user's visibility list) -> envs, shared, notes
    pytest.param(4, "cpu", 2, 1, None,
                 [{HDI: "0"}, {HDI: "1"}], False,
                 ["cpu:2,3 unused (2 workers × 1 device per trial on 4 cpu devices)."], id="cpu-4dev-2jobs"),
    pytest.param(4, "cpu", 4, 1, None,
                 [{HDI: "0"}, {HDI: "1"}, {HDI: "2"}, {HDI: "3"}], False, [], id="cpu-one-each"),
    pytest.param(4, "cpu", 2, 2, None,
                 [{HDI: "0,1"}, {HDI: "2,3"}], False, [], id="cpu-2-per-trial"),
    pytest.param(4, "gpu", 2, 2, "4,5,6,7",
                 [{CVD: "4,5"}, {CVD: "6,7"}], False, [], id="cuda-splits-the-users-list"),
    pytest.param(2, "cuda", 3, 1, None,
                 [{CVD: "0", P: "false"}, {CVD: "1"}, {CVD: "0", P: "false"}], True,
                 ["--jobs 3 > 2 cuda devices: workers share devices (cuda:0: workers 0, 2); workers on a "
                  "shared GPU allocate memory on demand (XLA_PYTHON_CLIENT_PREALLOCATE=false) instead of "
                  "preallocating 75 % each."], id="cuda-3jobs-2gpus"),
    pytest.param(1, "cuda", 2, 1, None,
                 [{CVD: "0", P: "false"}, {CVD: "0", P: "false"}], True,
                 ["--jobs 2 > 1 cuda device: workers share devices (cuda:0: workers 0, 1); workers on a "
                  "shared GPU allocate memory on demand (XLA_PYTHON_CLIENT_PREALLOCATE=false) instead of "
                  "preallocating 75 % each."], id="cuda-one-gpu-shared"),
    pytest.param(1, "cpu", 2, 1, None,
                 [{HDI: "0"}, {HDI: "0"}], True,
                 ["--jobs 2 > 1 cpu device: workers share devices (cpu:0: workers 0, 1)."], id="cpu-shared"),
    pytest.param(2, "rocm", 2, 1, None,
                 [{"HIP_VISIBLE_DEVICES": "0"}, {"HIP_VISIBLE_DEVICES": "1"}], False, [], id="rocm"),
    pytest.param(8, "tpu", 1, "all", None, [{}], False, [], id="tpu-one-process"),
]


@pytest.mark.parametrize(("n", "platform", "jobs", "per", "visible", "envs", "shared", "notes"), PLANS)
def test_plan_table(n, platform, jobs, per, visible, envs, shared, notes):
    plan = plan_devices(n, platform, jobs, per, visible)
    assert [dict(e) for e in plan.envs] == envs
    assert plan.shared is shared
    assert list(plan.notes) == notes


def test_plan_describe():
    plan = plan_devices(4, "cpu", 2, 1)
    assert plan.describe() == ("worker 0 cpu:0, worker 1 cpu:1. cpu:2,3 unused (2 workers × 1 device "
                               "per trial on 4 cpu devices).")


ERRORS = [
    pytest.param(4, "cpu", 3, 2,
                 "--jobs 3 with 2 devices per trial (parallelism.devices) needs 6 devices, but this host "
                 "has 4 cpu devices; data-parallel trials do not share devices (they would slow each other "
                 "down and compete for memory): use --jobs 2 or parallelism: {devices: 1}", id="too-many"),
    pytest.param(4, "cuda", 2, "all",
                 "--jobs 2 with 4 devices per trial (parallelism.devices) needs 8 devices, but this host "
                 "has 4 cuda devices; data-parallel trials do not share devices (they would slow each "
                 "other down and compete for memory): use --jobs 1 or parallelism: {devices: 2}", id="all"),
    pytest.param(4, "cpu", 1, 8,
                 "a trial wants 8 devices (parallelism.devices) but this host has 4 cpu device(s): use "
                 "parallelism: {devices: 4} or fewer (on CPU, XLA_FLAGS="
                 "--xla_force_host_platform_device_count=N makes N host devices)", id="wider-than-host"),
    pytest.param(4, "tpu", 2, 1,
                 "--jobs 2 on a TPU host: a TPU chip can be opened by one process only, and the harness "
                 "does not split a TPU host between processes; use --jobs 1 and train each trial "
                 "data-parallel over the chips (parallelism: {devices: all})", id="tpu-jobs"),
    pytest.param(4, "cpu", 2, 0, "devices per trial must be a positive integer or 'all', got 0", id="zero"),
]


@pytest.mark.parametrize(("n", "platform", "jobs", "per", "message"), ERRORS)
def test_plan_errors(n, platform, jobs, per, message):
    with pytest.raises(DevicePlanError) as e:
        plan_devices(n, platform, jobs, per)
    assert str(e.value) == message


# --------------------------------------------------------------------------- memory and Ray


def test_the_users_memory_settings_win_in_workers():
    shared = {CVD: "0", P: "false"}
    assert worker_env(shared, parent_env={}) == shared
    assert worker_env(shared, parent_env={P: "true", "XLA_CLIENT_MEM_FRACTION": ".3"}) == {CVD: "0"}
    assert worker_env({HDI: "1"}, parent_env={HDI: "0,1"}) == {HDI: "1"}  # the list was split


@pytest.mark.parametrize(("gpus", "user", "env"), [
    (0.25, {}, {P: "false"}),  # 4 tasks per GPU
    (0.5, {P: "true"}, {}),  # the user's choice (with a memory fraction, say)
    (1, {}, {}),  # a whole GPU per task: JAX's default preallocation
    (2, {}, {}),
    (0, {}, {}),
])
def test_ray_gpus_per_trial_maps_onto_the_same_memory_rule(gpus, user, env):
    assert ray_task_env(gpus, parent_env=user) == env


def test_ray_refuses_a_gpu_count_it_cannot_schedule_before_anything_runs():
    from harness.execute.ray_executor import RayExecutor

    with pytest.raises(DevicePlanError) as e:
        RayExecutor(gpus_per_trial=1.5)
    assert str(e.value) == ("--gpus-per-trial 1.5: above 1 it must be a whole number of GPUs (Ray shares a "
                            "GPU only by fractions below 1); use 1 or 2")


# --------------------------------------------------------------------------- parent and worker


def test_parent_backend_starts_without_preallocation_and_the_workers_inherit_the_users_env(monkeypatch):
    monkeypatch.delenv(P, raising=False)
    monkeypatch.setattr(devices, "_backends_initialised", lambda: False)
    with devices.parent_off_devices():
        assert os.environ[P] == "false"
    assert P not in os.environ
    monkeypatch.setenv(P, "true")  # the user's setting is left alone
    with devices.parent_off_devices():
        assert os.environ[P] == "true"
    assert os.environ[P] == "true"


def test_worker_env_after_the_backend_started_is_refused():
    import jax

    jax.devices()
    with pytest.raises(RuntimeError, match="before its device environment"):
        devices.apply_worker_env({HDI: "1"})
    assert os.environ.get(HDI) is None


def test_tags_name_host_level_gpu_ids(monkeypatch):
    client = SimpleNamespace(platform_version="PJRT C API\ncuda 12080")
    devs = [SimpleNamespace(platform="gpu", id=i, client=client) for i in range(2)]
    monkeypatch.setenv(CVD, "4,6")
    assert devices.describe_devices(devs) == "cuda:4,6"
    monkeypatch.delenv(CVD)
    assert devices.describe_devices(devs) == "cuda:0,1"
    assert devices.describe_devices([SimpleNamespace(platform="cpu", id=2)]) == "cpu:2"


@pytest.mark.parametrize(("executor", "ids", "message"), [
    ("process", None, r"^a trial wants 99 devices \(parallelism.devices\) but this host has 1 cpu"),
    ("inprocess", "7", r"^HARNESS_DEVICE_IDS='7' names devices \[7\] but this process has 1 \(cpu\)"),
    ("inprocess", "0,0", r"^HARNESS_DEVICE_IDS='0,0' names device 0 more than once: list each device "
                         r"once, e.g\. HARNESS_DEVICE_IDS=0$"),
    ("inprocess", "abc", r"^HARNESS_DEVICE_IDS='abc' is not a comma-separated list of device indices: "
                         r"this process has 1 \(cpu\), use indices 0\.\.0, e\.g\. HARNESS_DEVICE_IDS=0$"),
    # set and empty meant every device, where an empty CUDA_VISIBLE_DEVICES means none
    ("inprocess", " ", r"^HARNESS_DEVICE_IDS is set but empty, which names no device \(as an empty "
                       r"CUDA_VISIBLE_DEVICES hides every GPU\): unset it to use all 1 \(cpu\)"),
])
@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_devices_that_do_not_fit_are_refused_before_the_store_is_created(executor, ids, message, dry_run,
                                                                       write_sweep, tmp_path, monkeypatch):
    """A dry run refuses what the run would refuse (it once printed a plan for HARNESS_DEVICE_IDS=7)."""
    import jax

    from harness.execute.executors import InProcessExecutor, ProcessExecutor
    from harness.orchestrate.run import run_sweep

    if len(jax.devices()) != 1:
        pytest.skip("the messages assume the test process's one CPU device")
    if ids:
        monkeypatch.setenv(HDI, ids)
    ex = ProcessExecutor(jobs=2, devices_per_trial=99) if executor == "process" else InProcessExecutor()
    db = tmp_path / "store.db"
    with pytest.raises(ValueError, match=message):
        run_sweep(write_sweep(datasets=[TINY_DATA]), tracking_uri=f"sqlite:///{db}", quiet=True,
                  executor_obj=ex, dry_run=dry_run)
    assert not db.exists()


def test_jobs_help_mentions_device_assignment():
    from typer.testing import CliRunner

    from harness.cli import app

    out = " ".join(CliRunner().invoke(app, ["sweep", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "each on its own device(s)" in out and "CUDA_VISIBLE_DEVICES" in out


# --------------------------------------------------------------------------- a real --jobs 2 sweep


@pytest.mark.slow
def test_jobs_2_on_4_forced_cpu_devices_gives_each_worker_its_own_device(tmp_path):
    """The suite's real ``--jobs 2`` sweep (process executor, real trainer, through the CLI), and its
    device assignment: disjoint devices, set in each worker before it imported JAX."""
    from mlflow import MlflowClient

    cfg = {"name": "devs", "models": [{"name": "mlp", "hparams": {"width": 8, "depth": 1}}],
           "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}}], "schedules": ["constant"],
           "datasets": [TINY_DATA], "seeds": [0, 1, 2, 3], "batch_size": 32, "budget": {"steps": 4},
           "eval_every": 4, "steps_per_dispatch": 4, "measure_perf": False, "batching": "off"}
    path = tmp_path / "devs.yaml"
    path.write_text(yaml.safe_dump(cfg))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", HDI, CVD, P) and not k.startswith("PYTEST")}
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])  # this checkout's harness
    t0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", str(path), "--jobs", "2",
                        "--tracking-uri", uri], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    t1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"sweep --jobs 2: {t1.ru_utime + t1.ru_stime - t0.ru_utime - t0.ru_stime:.1f} s CPU")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "devices: worker 0 cpu:0, worker 1 cpu:1. cpu:2,3 unused" in r.stdout
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name("devs").experiment_id
    runs = c.search_runs([exp], "tags.`harness.kind` = 'trial'")
    assert len(runs) == 4 and {x.info.status for x in runs} == {"FINISHED"}
    assert sorted(x.data.tags["seed"] for x in runs) == ["0", "1", "2", "3"]
    (parent,) = c.search_runs([exp], "tags.`harness.kind` = 'parent'")
    assert parent.data.params["executor"] == "process" and parent.data.params["jobs"] == "2"
    by_worker: dict[str, set[str]] = {}
    for x in runs:
        t = x.data.tags
        dev = t["harness.devices"]
        assert dev in ("cpu:0", "cpu:1")
        # the worker's environment named its device, and was in place before the worker imported jax
        assert t["harness.device_env"] == f"HARNESS_DEVICE_IDS={dev.split(':')[1]}"
        assert t["harness.device_env_set"] == "before-jax-import"
        by_worker.setdefault(t["harness.trained_by"], set()).add(dev)
    assert len(by_worker) == 2 and all(len(d) == 1 for d in by_worker.values())  # one device each
    # trained by the two workers, written by the sweep's own process
    assert {x.data.tags["harness.owner"] for x in runs} == {parent.data.tags["harness.owner"]}
    a, b = by_worker.values()
    assert a.isdisjoint(b)
