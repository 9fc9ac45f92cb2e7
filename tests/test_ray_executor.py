"""The Ray executor's checks that need no cluster: addresses, tracking stores, arguments.

The cluster tests (a real ``ray start --head`` and a real ``mlflow server``) are in
``tests/test_ray_cluster.py``.
"""

from __future__ import annotations

import pytest

from harness.core.outcome import failed_unit
from harness.core.spec import TrialSpec
from harness.execute import ray_executor as rx
from harness.execute.ray_executor import (
    RayExecutor,
    RayTrackingError,
    address_is_local,
    check_cluster,
    check_tracking_store,
    store_is_machine_local,
)


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
    from harness.core.context import RunContext

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
    out = failed_unit(specs, "WorkerCrashedError: boom")
    assert [o.trial_id for o in out] == [s.trial_id for s in specs]
    assert {o.status for o in out} == {"failed"}
    assert out[1].seed == 1 and out[0].reason == "WorkerCrashedError: boom"


# --------------------------------------------------------------------------------------------------
# The driver loop against a scripted stand-in for the `ray` module (the real cluster is exercised in
# tests/test_ray_cluster.py; failures that Ray gives up on are hard to provoke there).


class _RayError(Exception):
    pass


class _TaskError(_RayError):
    pass


class _Cancelled(_RayError):
    pass


class _Ref:
    def __init__(self, result):
        self.result = result


class _FakeRay:
    """``script[first trial id]`` = what each submission of that unit returns (a list of outcomes,
    or an exception instance to raise from ``ray.get``)."""

    class exceptions:
        RayError = _RayError
        RayTaskError = _TaskError
        TaskCancelledError = _Cancelled

    def __init__(self, script):
        self.script = {k: list(v) for k, v in script.items()}
        self.submitted: list[tuple[str, dict]] = []

    def put(self, x):
        return x

    def remote(self, fn=None, **decorator_opts):
        if fn is None:  # ray.remote(max_calls=1)(fn)
            return lambda f: self.remote(f, **decorator_opts)
        self.decorator_opts = decorator_opts
        ray = self

        class Remote:
            def options(self, **opts):
                self.opts = opts
                return self

            def remote(self, unit, ctx):
                tid = unit[0].trial_id
                ray.submitted.append((tid, self.opts))
                return _Ref(ray.script[tid].pop(0))

        return Remote()

    def wait(self, refs, num_returns, timeout):
        return refs[:1], refs[1:]

    def get(self, ref):
        if isinstance(ref.result, BaseException):
            raise ref.result
        return ref.result

    def cancel(self, ref, force=False):
        pass


def _spec(seed):
    return TrialSpec.make(sweep="s", model="mlp", optimizer="sgd", schedule="constant",
                          dataset="digits", seed=seed, steps=2, batch_size=8, eval_every=2)


def test_driver_resubmits_after_ray_gives_up_and_reports_every_trial_once():
    from harness.core.context import RunContext
    from harness.core.outcome import TrialOutcome

    a, b, c = _spec(0), _spec(1), _spec(2)
    ok = lambda *ss: [TrialOutcome(trial_id=s.trial_id, status="finished") for s in ss]  # noqa: E731
    script = {
        a.trial_id: [_RayError("WorkerCrashedError"), _RayError("NodeDiedError"), ok(a)],  # 3rd try works
        b.trial_id: [ok(b, c)],  # a vmapped pair
    }
    ray = _FakeRay(script)
    ex = RayExecutor(address="127.0.0.1:1", cpus_per_trial=2, gpus_per_trial=0.5, max_retries=4,
                     resubmits=2)
    ctx = RunContext(tracking_uri="sqlite:////tmp/x.db", experiment_id="1", parent_run_id="p",
                     sweep_id="x", sweep="s")
    calls: list[list] = []
    reported = ex._drive(ray, [[a], [b, c]], ctx, calls.append)
    assert reported == {a.trial_id, b.trial_id, c.trial_id}
    assert [[o.trial_id for o in batch] for batch in calls] == [[b.trial_id, c.trial_id], [a.trial_id]]
    assert ex.submissions == {0: 3, 1: 1}
    opts = ray.submitted[0][1]
    assert opts["num_cpus"] == 2.0 and opts["num_gpus"] == 0.5 and opts["max_retries"] == 4
    assert opts["retry_exceptions"] is False and opts["name"] == f"harness-unit:{a.trial_id}"
    assert opts["runtime_env"] == {"env_vars": {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}}
    assert ray.decorator_opts == {"max_calls": 1}  # a GPU task's worker never serves another task


def test_driver_fails_a_unit_after_the_last_resubmission_and_never_retries_its_own_error():
    from harness.core.context import RunContext

    a, b = _spec(0), _spec(1)
    script = {a.trial_id: [_RayError("WorkerCrashedError")] * 2, b.trial_id: [_TaskError("ImportError: x")]}
    ray = _FakeRay(script)
    ex = RayExecutor(address="127.0.0.1:1", resubmits=1, max_retries=3)
    ctx = RunContext(tracking_uri="sqlite:////tmp/x.db", experiment_id="1", parent_run_id="p",
                     sweep_id="x", sweep="s")
    calls: list[list] = []
    ex._drive(ray, [[a], [b]], ctx, calls.append)
    assert ray.decorator_opts == {}  # CPU tasks reuse their worker (it compiles a program once)
    out = {o.trial_id: o for batch in calls for o in batch}
    assert out[a.trial_id].status == "failed"
    assert out[a.trial_id].reason.startswith("Ray could not complete the task after 2 submission(s) "
                                             "with 3 retries each: _RayError: WorkerCrashedError")
    assert out[b.trial_id].status == "failed"
    assert out[b.trial_id].reason == "Ray task raised: ImportError: x"
    assert ex.submissions == {0: 2, 1: 1}  # the unit's own error is not resubmitted


def test_dedupe_keeps_the_earliest_finished_run(tmp_path):
    from harness.core.context import RunContext
    from harness.core.names import TAG_KIND, TAG_TRIAL_ID
    from harness.tracking.client import get_or_create_experiment, prepare_store
    from harness.tracking.dedupe import dedupe_finished_runs

    uri = f"sqlite:///{tmp_path}/m.db"
    client = prepare_store(uri)
    eid = get_or_create_experiment(client, "s", uri)
    tags = {TAG_KIND: "trial", TAG_TRIAL_ID: "t1"}
    r1 = client.create_run(eid, tags=tags, start_time=1000).info.run_id
    r2 = client.create_run(eid, tags=tags, start_time=2000).info.run_id
    r3 = client.create_run(eid, tags={**tags, TAG_TRIAL_ID: "t2"}).info.run_id
    for r in (r1, r2, r3):
        client.set_terminated(r, status="FINISHED")
    ctx = RunContext(tracking_uri=uri, experiment_id=eid, parent_run_id="p", sweep_id="x", sweep="s")
    assert dedupe_finished_runs(ctx.tracking_uri, ctx.experiment_id, {"t1", "t2"}) == {"t1": [r2]}
    assert client.get_run(r1).info.status == "FINISHED" and client.get_run(r3).info.status == "FINISHED"
    assert client.get_run(r2).info.status == "KILLED"
    assert client.get_run(r2).data.tags["harness.duplicate_of"] == r1
    assert dedupe_finished_runs(ctx.tracking_uri, ctx.experiment_id, {"t1", "t2"}) == {}


# --------------------------------------------------------------------------------------------------
# Through the command line


def test_cli_refuses_sqlite_with_a_remote_cluster_before_anything_is_written(write_sweep, tmp_path,
                                                                             monkeypatch):
    from typer.testing import CliRunner

    from harness.cli import app

    cfg = write_sweep()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    res = CliRunner().invoke(app, ["sweep", str(cfg), "--executor", "ray", "--address", "10.255.0.9:6379"])
    assert res.exit_code == 2, res.output
    expected_uri = f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert f"--executor ray --address '10.255.0.9:6379' cannot log to the SQLite store '{expected_uri}'" \
        in " ".join(res.output.split())
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def test_cli_passes_resources_to_the_ray_executor(write_sweep, monkeypatch):
    from typer.testing import CliRunner

    import harness.orchestrate.run
    from harness.cli import app

    seen = {}

    def fake_run_sweep(config, **kw):
        seen.update(kw)
        raise ValueError("stop here")

    monkeypatch.setattr(harness.orchestrate.run, "run_sweep", fake_run_sweep)
    args = ["sweep", str(write_sweep()), "--executor", "ray", "--address", "127.0.0.1:6379",
            "--cpus-per-trial", "2", "--gpus-per-trial", "0.5"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "stop here" in res.output
    assert seen["executor"] == "ray" and seen["address"] == "127.0.0.1:6379"
    assert seen["executor_opts"] == {"cpus_per_trial": 2.0, "gpus_per_trial": 0.5}
    ex = rx.RayExecutor(address=seen["address"], jobs=1, **seen["executor_opts"])
    assert (ex.cpus_per_trial, ex.gpus_per_trial) == (2.0, 0.5)
