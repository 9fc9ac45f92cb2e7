"""The Ray executor's checks that need no cluster: addresses, tracking stores, arguments.

The cluster tests (a real ``ray start --head`` and a real ``mlflow server``) are in
``tests/test_ray_cluster.py``.
"""

from __future__ import annotations

import pytest

from harness import ray_executor as rx
from harness.ray_executor import (
    RayExecutor,
    RayTrackingError,
    address_is_local,
    check_cluster,
    check_tracking_store,
    store_is_machine_local,
)
from harness.spec import TrialSpec


@pytest.mark.parametrize(
    ("address", "local"),
    [
        (None, True),
        ("", True),
        ("local", True),
        ("127.0.0.1:6379", True),
        ("127.0.1.1:6379", True),
        ("localhost:6379", True),
        ("ray://127.0.0.1:10001", True),
        ("ray://localhost:10001", True),
        ("[::1]:6379", True),
        ("auto", False),
        ("10.0.0.5:6379", False),
        ("ray://head.example.org:10001", False),
        ("raycluster-kuberay-head-svc.default.svc.cluster.local:6379", False),
        ("192.0.2.2:6379", False),
    ],
)
def test_address_is_local(address, local):
    assert address_is_local(address) is local


@pytest.mark.parametrize(
    ("uri", "local"),
    [
        (None, True),
        ("sqlite:////tmp/x/mlflow.db", True),
        ("sqlite:///mlflow.db", True),
        ("file:///tmp/mlruns", True),
        ("/tmp/mlruns", True),
        ("http://127.0.0.1:5000", True),
        ("http://localhost:5000", True),
        ("https://0.0.0.0:5000", True),
        ("http://mlflow.internal:5000", False),
        ("https://10.0.0.7", False),
        ("postgresql://mlflow:pw@db:5432/mlflow", False),
        ("mysql+pymysql://u:p@db/mlflow", False),
        ("databricks", False),
    ],
)
def test_store_is_machine_local(uri, local):
    assert (store_is_machine_local(uri) is not None) is local


def test_sqlite_with_remote_cluster_is_refused_with_the_fix_in_the_message():
    with pytest.raises(RayTrackingError) as ei:
        check_tracking_store("sqlite:////work/x/mlflow.db", "10.0.0.5:6379")
    msg = str(ei.value)
    assert "'10.0.0.5:6379'" in msg
    assert "SQLite store 'sqlite:////work/x/mlflow.db'" in msg
    assert "--tracking-uri http://HOST:5000" in msg
    assert "docs/ray.md" in msg
    with pytest.raises(RayTrackingError, match="loopback"):
        check_tracking_store("http://127.0.0.1:5000", "auto")


def test_shared_stores_and_local_heads_are_allowed():
    check_tracking_store("sqlite:////tmp/m.db", "127.0.0.1:6379")  # single-machine head
    check_tracking_store("sqlite:////tmp/m.db", None)  # in-process local Ray
    check_tracking_store("http://mlflow.internal:5000", "10.0.0.5:6379")
    check_tracking_store("http://127.0.0.1:5000", "127.0.0.1:6379")


def test_check_cluster_needs_one_node_on_this_machine_for_a_local_store():
    one_here = [{"Alive": True, "NodeManagerAddress": "127.0.0.1"}]
    dead_other = [{"Alive": False, "NodeManagerAddress": "10.9.9.9"}]
    check_cluster(one_here + dead_other, "sqlite:////tmp/m.db", "127.0.0.1:1")
    two = [*one_here, {"Alive": True, "NodeManagerAddress": "10.9.9.9"}]
    with pytest.raises(RayTrackingError, match=r"2 alive node\(s\) \(10\.9\.9\.9, 127\.0\.0\.1\)"):
        check_cluster(two, "sqlite:////tmp/m.db", "127.0.0.1:1")
    with pytest.raises(RayTrackingError, match="1 alive node"):
        check_cluster([{"Alive": True, "NodeManagerAddress": "10.9.9.9"}], "sqlite:////tmp/m.db", "x")
    check_cluster(two, "http://mlflow.internal:5000", "10.0.0.5:6379")  # a shared store: any cluster


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"cpus_per_trial": -1}, ">= 0"),
        ({"cpus_per_trial": 0, "gpus_per_trial": 0}, "some resource"),
        ({"max_retries": -1}, ">= 0"),
        ({"resubmits": -2}, ">= 0"),
    ],
)
def test_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        RayExecutor(**kw)


def test_fractional_gpu_turns_off_jax_preallocation():
    assert RayExecutor(gpus_per_trial=0.25)._task_env() == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert RayExecutor(gpus_per_trial=1)._task_env() == {}
    assert RayExecutor()._task_env() == {}


def test_refusal_happens_before_ray_is_touched(monkeypatch):
    """A remote address with a SQLite store: nothing connects, nothing runs, on_done is not called."""
    from harness.worker import RunContext

    touched = []
    monkeypatch.setattr(RayExecutor, "_connect", lambda self, ray: touched.append(1))
    spec = TrialSpec.make(sweep="s", model="mlp", optimizer="sgd", schedule="constant",
                          dataset="digits", seed=0, steps=2, batch_size=8, eval_every=2)
    ctx = RunContext(tracking_uri="sqlite:////tmp/never.db", experiment_id="1", parent_run_id="p",
                     sweep_id="x", sweep="s")
    done: list = []
    with pytest.raises(RayTrackingError):
        RayExecutor(address="10.0.0.5:6379").run([[spec]], ctx, done.append)
    assert touched == [] and done == []


def test_failed_outcomes_name_every_trial_of_the_unit():
    specs = [TrialSpec.make(sweep="s", model="mlp", optimizer="sgd", schedule="constant",
                            dataset="digits", seed=k, steps=2, batch_size=8, eval_every=2) for k in (0, 1)]
    out = rx._failed_outcomes(specs, "WorkerCrashedError: boom")
    assert [o.trial_id for o in out] == [s.trial_id for s in specs]
    assert {o.status for o in out} == {"failed"}
    assert out[1].seed == 1 and out[0].reason == "WorkerCrashedError: boom"
