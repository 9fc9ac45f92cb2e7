"""Fault suite for the store: kills during store creation, half-migrated and
unusable stores, concurrent invocations, a tracking server that goes away, an unwritable folder.

Invocations run as real processes forked from one forkserver that has imported MLflow, JAX and the
harness once (``_procs``), so eight of them cost seconds, not eight interpreter start-ups. Their
trainer is ``conftest.fake_result`` (a deterministic stand-in) that also appends each trained trial
id to a file, so "trained once" is counted across processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing as mp
import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from subproc import HOOKS

from harness.core.names import TAG_HEARTBEAT, TAG_KILLED_REASON, TAG_OWNER
from harness.tracking import store, store_build, store_state
from harness.tracking.client import get_or_create_experiment, prepare_store, search_all
from harness.tracking.liveness import hostname, kill_stale

pytestmark = pytest.mark.slow

TESTS = str(Path(__file__).parent)
_PRELOAD = ["mlflow", "mlflow.store.tracking.sqlalchemy_store", "alembic.command", "jax", "harness.cli",
            "harness.orchestrate", "harness.execute.worker", "harness.tracking.store", "harness.trainer",
            "harness.data"]


@pytest.fixture(scope="module")
def procs():
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


# --------------------------------------------------------------------------- child bodies


def _redirect(log: str | None) -> None:
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)


def _child_create(db: str, env: dict, log: str | None = None) -> None:
    """Create the store ``db`` with :func:`harness.tracking.store.ensure_sqlite_store`."""
    _redirect(log)
    os.environ.update(env)
    sys.path.insert(0, str(HOOKS))
    import harness_test_hooks

    harness_test_hooks.install(env)  # the store modules are loaded: patched now
    os.chdir(Path(db).parent)
    store.ensure_sqlite_store(db)


def _child_plain_mlflow(db: str, kill_at: int) -> None:
    """Create ``db`` in place with MLflow's own code (what a pre-fix harness or `mlflow ui` did),
    SIGKILLed before its ``kill_at``-th SQL statement."""
    import sqlalchemy
    from mlflow.store.db import utils

    engine = utils.create_sqlalchemy_engine(f"sqlite:///{db}")
    n = [0]

    @sqlalchemy.event.listens_for(engine, "before_cursor_execute")
    def _count(*_):
        n[0] += 1
        if n[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    utils._initialize_tables(engine)


def _child_cli(args: list[str], env: dict, log: str, calls: str, sleep_s: float = 0.0,
               gates: dict | None = None, go: str | None = None) -> None:
    """``python -m harness ARGS`` with the fake trainer; ``gates`` maps a seed to a file that must
    exist before that seed trains; ``go`` a file to wait for before starting (a common start)."""
    _redirect(log)
    os.environ.update(env)
    os.chdir(Path(log).parent)
    sys.path.insert(0, TESTS)
    from conftest import fake_result

    import harness.train.loop as trainer

    def run_trial(spec, **_):
        gate = (gates or {}).get(spec.seed)
        while gate and not os.path.exists(gate):
            time.sleep(0.05)
        with open(calls, "a") as f:
            f.write(f"{spec.trial_id} {os.getpid()}\n")
        return fake_result(spec, sleep=sleep_s)

    trainer.run_trial = run_trial
    trainer.run_trials_batched = lambda specs, **kw: [run_trial(s) for s in specs]
    trainer.should_batch = lambda specs: False
    import harness.orchestrate.run as sweep

    def start_parent(*a, **kw):  # LOG.parent exists iff this invocation opened a parent run
        run_id = real_start_parent(*a, **kw)
        Path(log).with_suffix(".parent").write_text(f"{run_id} {os.getpid()}")
        return run_id

    real_start_parent, sweep.start_parent = sweep.start_parent, start_parent
    while go and not os.path.exists(go):
        time.sleep(0.01)
    from harness.cli import main

    sys.argv = ["harness", *args]
    main()


def _child_reader(uri: str, stop: str, log: str) -> None:
    """Poll the store with MLflow (as a user's script or the UI would) until ``stop`` exists."""
    _redirect(log)
    from mlflow import MlflowClient

    db = Path(uri[len("sqlite:///"):])
    n = 0
    while not os.path.exists(stop):
        if db.exists():
            c = MlflowClient(uri)
            for e in c.search_experiments():
                c.search_runs([e.experiment_id], max_results=50)
            n += 1
        time.sleep(0.1)
    print(f"reader polls: {n}")


def _start(procs, target, *args, **kwargs):
    p = procs.Process(target=target, args=args, kwargs=kwargs)
    p.start()
    return p


# --------------------------------------------------------------------------- helpers


def _sweep_yaml(tmp_path: Path, name="tiny", seeds=(0, 1), fname: str | None = None, **over) -> Path:
    sys.path.insert(0, TESTS)
    from conftest import TINY_SWEEP

    cfg = {**TINY_SWEEP, "name": name, "seeds": list(seeds), **over}
    p = tmp_path / (fname or f"{name}.yaml")
    p.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return p


def _runs(uri: str, name: str):
    from mlflow import MlflowClient

    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(name)
    runs = search_all(c, exp.experiment_id)
    return ([r for r in runs if r.data.tags.get("harness.kind") == "trial"],
            [r for r in runs if r.data.tags.get("harness.kind") == "parent"])


def _finished_once(trials, n: int) -> bool:
    fin = [r.data.tags["harness.trial_id"] for r in trials if r.info.status == "FINISHED"]
    return len(fin) == len(set(fin)) == n


def _calls(path: Path) -> list[str]:
    return path.read_text().split("\n")[:-1] if path.exists() else []


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _rerun_in_process(tmp_path, cfg, uri, fake_trainer):
    from harness.orchestrate.run import run_sweep

    s = run_sweep(cfg, tracking_uri=uri, quiet=True)
    return s.counts()


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One cache (schema template, datasets) for the module's tests and their children."""
    return tmp_path_factory.mktemp("harness_cache")


@pytest.fixture
def env_base(tmp_path, monkeypatch, shared_cache):
    """Environment for children and this process: the module's cache, a spool of the test's own."""
    env = {"HARNESS_CACHE_DIR": str(shared_cache), "HARNESS_SPOOL_DIR": str(tmp_path / "spool"),
           "MLFLOW_LOGGING_LEVEL": "WARNING"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return env


# --------------------------------------------------------------------------- 1. creation


def test_sigkill_at_20_points_during_store_creation_then_rerun(tmp_path, procs, env_base, fake_trainer,
                                                               monkeypatch):
    """20 SIGKILLs at exact points of the creation of a new store (``HARNESS_TEST_KILL_AT``), each
    followed by a sweep on the same path: 12 spread over MLflow's migrations into the temporary file
    beside the store, 3 over the build of the cached schema template, and the 5 stages around the
    lock and the link."""
    monkeypatch.chdir(tmp_path)
    cfg = _sweep_yaml(tmp_path)
    store_build.migrate(tmp_path / "count.db")
    n_stmt = store_build.LAST_MIGRATION[0]
    assert n_stmt > 100
    store.ensure_sqlite_store(tmp_path / "warm.db")  # the template for the re-runs (this process)
    no_tpl = {**env_base, "HARNESS_STORE_TEMPLATE": "0"}
    points = [("migrate", {**no_tpl, "HARNESS_TEST_KILL_AT": f"stmt:{1 + i * (n_stmt - 1) // 11}"})
              for i in range(12)]
    points += [("template", {**env_base, "HARNESS_CACHE_DIR": str(tmp_path / f"cold{i}"),
                             "HARNESS_TEST_KILL_AT": f"stmt:{(i + 1) * n_stmt // 4}"}) for i in range(3)]
    points += [(stage, {**env_base, "HARNESS_TEST_KILL_AT": stage})
               for stage in ("locked", "built", "before_link", "linked", "unlocked")]
    after = {"missing": 0, "ready": 0}
    for k, (where, env) in enumerate(points):
        db = tmp_path / f"k{k}" / "mlflow.db"
        db.parent.mkdir()
        child = _start(procs, _child_create, str(db), env)
        child.join(120)
        assert child.exitcode == -signal.SIGKILL, (k, where, child.exitcode)  # killed there, not done
        st = store_state.inspect_file(db)
        assert st.kind in after, (k, where, st)  # never half-migrated
        after[st.kind] += 1
        uri = f"sqlite:///{db}"
        if where == "template":  # the re-run builds the template again, past the killed build's leftovers
            monkeypatch.setenv("HARNESS_CACHE_DIR", env["HARNESS_CACHE_DIR"])
        assert _rerun_in_process(tmp_path, cfg, uri, fake_trainer)["finished"] == 2, (k, where)
        if where == "template":
            assert store_state.inspect_file(store_build.template_path()).kind == "ready"
            monkeypatch.setenv("HARNESS_CACHE_DIR", env_base["HARNESS_CACHE_DIR"])
        trials, _ = _runs(uri, "tiny")
        assert _finished_once(trials, 2), (k, where)
        assert store_state.inspect_file(db).kind == "ready"
        assert not list(store_state.side_dir(db).glob("creating-*")), (k, where)
    assert sum(after.values()) == 20 and after["ready"] == 2  # killed after the link: "linked", "unlocked"
    print(f"20/20 kills during creation ({n_stmt} statements): store after the kill missing "
          f"{after['missing']}, complete {after['ready']}, half-migrated 0; 20/20 re-runs usable, 40/40 "
          f"trials FINISHED once")


def test_half_migrated_store_is_repaired_before_any_trial(tmp_path, procs, env_base, fake_trainer,
                                                          monkeypatch, capsys):
    """MLflow itself killed at 4 points while creating a store in place (the old way): the next sweep
    backs it up, repairs it and runs; each re-run store is usable and holds every trial once."""
    monkeypatch.chdir(tmp_path)
    cfg = _sweep_yaml(tmp_path)
    store_build.migrate(tmp_path / "count.db")
    n_stmt = store_build.LAST_MIGRATION[0]
    kinds = []
    for k in range(4):
        db = tmp_path / f"h{k}" / "mlflow.db"
        db.parent.mkdir()
        child = _start(procs, _child_plain_mlflow, str(db), (k + 1) * n_stmt // 5)
        child.join(120)
        assert child.exitcode == -signal.SIGKILL
        st = store_state.inspect_file(db)
        kinds.append(st.kind)
        uri = f"sqlite:///{db}"
        counts = _rerun_in_process(tmp_path, cfg, uri, fake_trainer)
        assert counts["finished"] == 2, (k, st)
        trials, _ = _runs(uri, "tiny")
        assert _finished_once(trials, 2)
        if st.kind in ("behind", "unversioned"):
            assert list(db.parent.glob("mlflow.db.backup-*")), k
    err = capsys.readouterr().err
    half = sum(k in ("behind", "unversioned") for k in kinds)
    assert half == 4, kinds  # every kill left a half-migrated file
    assert err.count("repaired the MLflow store") == half
    print(f"half-migrated stores: {kinds}; {half}/{half} repaired with a backup, 4/4 re-runs FINISHED once")


def test_repair_refuses_to_drop_data_in_one_line(tmp_path, env_base):
    """A store at an old revision whose upgrade fails and whose rows would not fit the new schema is
    reported in one line and left byte-identical (a backup copy is made first)."""
    db = tmp_path / "mlflow.db"
    store.ensure_sqlite_store(db)
    con = sqlite3.connect(db)
    con.execute("alter table experiments add column legacy_note text")
    con.execute("insert into experiments (name, artifact_location, lifecycle_stage, legacy_note, workspace) "
                "values ('e', '/tmp/x', 'active', 'keep me', 'default')")
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    head = store_state.schema_head()
    old = ScriptDirectory.from_config(_get_alembic_config("")).get_revision(head).down_revision
    con.execute("update alembic_version set version_num = ?", (old,))
    con.commit()
    con.close()
    before = _sha(db)
    with pytest.raises(store_state.StoreError) as ei:
        store.ensure_sqlite_store(db)
    msg = str(ei.value)
    assert "\n" not in msg and "could not be repaired" in msg and "column experiments.legacy_note" in msg
    assert "the file was left untouched" in msg and _sha(db) == before
    assert list(tmp_path.glob("mlflow.db.backup-*"))


def _corrupt(kind: str, db: Path) -> None:
    data = db.read_bytes()
    if kind == "truncated":
        db.write_bytes(data[: len(data) // 2])
    elif kind == "random":
        db.write_bytes(random.Random(0).randbytes(len(data)))
    elif kind == "malformed":  # garbage over pages in the middle, header intact
        mid = len(data) // 2 - len(data) // 2 % 4096
        db.write_bytes(data[:mid] + b"\xa5" * 8192 + data[mid + 8192:])
    elif kind == "foreign":
        db.unlink()
        con = sqlite3.connect(db)
        con.execute("create table notes (x)")
        con.commit()
        con.close()


@pytest.mark.parametrize("kind", ["truncated", "random", "malformed", "foreign"])
def test_unusable_store_is_one_line_exit_3_untouched(tmp_path, env_base, fake_trainer, monkeypatch, kind):
    from test_cli import without_stages
    from typer.testing import CliRunner

    from harness.cli import app

    monkeypatch.chdir(tmp_path)
    cfg = _sweep_yaml(tmp_path)
    db = tmp_path / "mlflow.db"
    assert _rerun_in_process(tmp_path, cfg, f"sqlite:///{db}", fake_trainer)["finished"] == 2
    _corrupt(kind, db)
    before = _sha(db)
    for args in (["status"], ["sweep", str(cfg)], ["report", "-e", "tiny"]):
        res = CliRunner().invoke(app, args)
        # a pre-flight that lasted over PIPE_AFTER_S says its stage first (progress on stderr, CI: 2 cores)
        lines = [ln for ln in without_stages(res.output).splitlines() if ln.strip()]
        assert res.exit_code == 3, (args, res.output)
        assert len(lines) == 1 and "the file was left untouched" in lines[0], (args, res.output)
        assert str(db) in lines[0]
    assert _sha(db) == before
    assert len(fake_trainer["calls"]) == 2  # nothing trained after the first sweep


# --------------------------------------------------------------------------- 2. concurrency


@pytest.mark.parametrize("n,existing", [(4, False), (8, False), (4, True), (8, True)])
def test_concurrent_invocations_each_trial_finished_and_trained_once(tmp_path, procs, env_base, n, existing):
    """N invocations of one 4-trial sweep started at the same moment (plus a reader polling the store
    with MLflow): every invocation exits 0, every trial has one FINISHED run and was trained once,
    no run is KILLED or tagged a duplicate, every parent ends FINISHED, and every invocation that
    trained opened one parent (one that started after the rest had finished trains nothing and opens
    none: under load in CI one did, and the old count of n parents failed)."""
    cfg = _sweep_yaml(tmp_path, seeds=range(4))
    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    calls, go, stop = tmp_path / "calls.txt", tmp_path / "go", tmp_path / "stop"
    if existing:  # a store with the experiment and one trial done by an earlier invocation
        pre = _sweep_yaml(tmp_path, seeds=[0], fname="pre.yaml")
        p = _start(procs, _child_cli, ["sweep", str(pre), "-q", "--tracking-uri", uri], env_base,
                   str(tmp_path / "pre.log"),
                   str(tmp_path / "pre_calls.txt"))
        p.join(120)
        assert p.exitcode == 0, (tmp_path / "pre.log").read_text()[-2000:]
    reader = _start(procs, _child_reader, uri, str(stop), str(tmp_path / "reader.log"))
    kids = [_start(procs, _child_cli, ["sweep", str(cfg), "-q", "--tracking-uri", uri], env_base,
                   str(tmp_path / f"inv{i}.log"), str(calls), 0.3, None, str(go)) for i in range(n)]
    time.sleep(0.5)
    go.touch()
    for k in kids:
        k.join(240)
    stop.touch()
    reader.join(30)
    logs = {i: (tmp_path / f"inv{i}.log").read_text() for i in range(n)}
    assert [k.exitcode for k in kids] == [0] * n, logs
    assert reader.exitcode == 0, (tmp_path / "reader.log").read_text()[-3000:]
    trials, parents = _runs(uri, "tiny")
    assert _finished_once(trials, 4)
    assert not [r for r in trials if r.info.status != "FINISHED"]  # nothing KILLED, FAILED, RUNNING
    assert not [r for r in trials if "harness.duplicate_of" in r.data.tags]
    # An invocation opens a parent run unless it started after the others had trained everything
    # (then it trains nothing and opens none): one parent per invocation that had work, no more.
    opened = dict(reversed((tmp_path / f"inv{i}.parent").read_text().split()) for i in range(n)
                  if (tmp_path / f"inv{i}.parent").exists())  # pid -> parent run id
    assert opened, "no invocation opened a parent run"
    ids = sorted(opened.values())
    assert sorted(p.info.run_id for p in parents if p.info.run_id in opened.values()) == ids
    assert len(parents) == len(opened) + existing and all(p.info.status == "FINISHED" for p in parents)
    trained = [ln.split() for ln in _calls(calls)]
    expect = 3 if existing else 4
    assert len(trained) == len({t for t, _ in trained}) == expect, trained
    pids = {pid for _, pid in trained}
    assert pids <= set(opened), "an invocation trained without opening a parent run"
    print(f"{n} invocations on a {'existing' if existing else 'new'} store: {n}/{n} exit 0, 4/4 trials "
          f"FINISHED once, {len(trained)} trainings for {expect} trials by {len(pids)} invocations, "
          f"{len(opened)} parent runs, 0 KILLED, 0 duplicates")


# --------------------------------------------------------------------------- 3. liveness


def test_kill_stale_spares_live_owners_and_finished_runs(tmp_path, env_base):
    """Only RUNNING runs whose owner is gone are marked KILLED: not a live process's run, not a
    FINISHED run; a remote owner counts as gone only when its heartbeat is old."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    c = prepare_store(uri)
    exp = get_or_create_experiment(c, "live", uri)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = hostname()
    now = time.time()
    owners = {"live": {TAG_OWNER: f"{host}:{sleeper.pid}"},
              "dead": {TAG_OWNER: f"{host}:{dead.pid}"},
              "remote_fresh": {TAG_OWNER: "elsewhere:1", TAG_HEARTBEAT: str(int(now - 5))},
              "remote_old": {TAG_OWNER: "elsewhere:2", TAG_HEARTBEAT: str(int(now - 900))},
              "legacy": {}}
    ids = {k: c.create_run(exp, tags={"harness.kind": "parent", **t}).info.run_id for k, t in owners.items()}
    fin = c.create_run(exp, tags={"harness.kind": "parent", **owners["dead"]}).info.run_id
    c.set_terminated(fin, "FINISHED")
    try:
        runs = search_all(c, exp)
        assert kill_stale(c, runs) == 3
        status = {k: MlflowClient(uri).get_run(r).info.status for k, r in ids.items()}
        assert status == {"live": "RUNNING", "dead": "KILLED", "remote_fresh": "RUNNING",
                          "remote_old": "KILLED", "legacy": "KILLED"}
        assert c.get_run(fin).info.status == "FINISHED"
        assert c.get_run(ids["dead"]).data.tags[TAG_KILLED_REASON] == \
            f"process {host}:{dead.pid} is gone"
    finally:
        sleeper.kill()
        sleeper.wait()


# --------------------------------------------------------------------------- 4. outages


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(d: Path, port: int):
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    env.pop("MLFLOW_TRACKING_URI", None)
    log = open(d / "server.log", "a")  # noqa: SIM115 - closed by the caller's process exit
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{d / 'srv.db'}",
         "--default-artifact-root", str(d / "art"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], cwd=d, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, (d / "server.log").read_text()[-2000:]
        with contextlib.suppress(OSError), urllib.request.urlopen(uri + "/health", timeout=1) as r:
            if r.status == 200:
                return proc
        time.sleep(0.3)
    raise RuntimeError("mlflow server did not start")


def _stop_server(proc) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _wait_for(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)

def _finished_trials(uri: str, name: str = "tiny") -> int | None:
    """FINISHED trial runs of sweep ``name`` on the server ``uri`` (``None`` while it does not answer)."""
    from mlflow import MlflowClient

    with contextlib.suppress(Exception):
        exp = MlflowClient(uri).get_experiment_by_name(name)
        q = "attributes.status = 'FINISHED' and tags.`harness.kind` = 'trial'"
        return 0 if exp is None else len(MlflowClient(uri).search_runs([exp.experiment_id], q))
    return None



@pytest.mark.server
def test_server_down_longer_than_retries_then_back(tmp_path, procs, env_base):
    """A real `mlflow server` stopped after the first trial and restarted after two more trained:
    the sweep keeps training, spools the two results, says the store is down, writes them when the
    server answers, ends 0 with a one-line account; every trial FINISHED once, trained once."""
    from harness.tracking import spool

    d = tmp_path / "srv"
    d.mkdir()
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    server = _start_server(d, port)
    cfg = _sweep_yaml(tmp_path, seeds=range(4))
    calls, down, up = tmp_path / "calls.txt", tmp_path / "down", tmp_path / "up"
    log = tmp_path / "sweep.log"
    t0 = time.monotonic()
    kid = _start(procs, _child_cli, ["sweep", str(cfg), "--tracking-uri", uri], env_base, str(log),
                 str(calls), 0.2, {1: str(down), 3: str(up)})
    try:
        _wait_for(lambda: _finished_trials(uri) == 1, 120, "the first trial reached the server")
        _stop_server(server)
        t_down = time.monotonic()
        down.touch()
        _wait_for(lambda: len(spool.entries(uri)) == 2, 120, "two results spooled while down")
        server = _start_server(d, port)
        down_s = time.monotonic() - t_down
        up.touch()
        kid.join(180)
        out = log.read_text()
        assert kid.exitcode == 0, out[-3000:]
        trials, parents = _runs(uri, "tiny")
    finally:
        with contextlib.suppress(ProcessLookupError):
            _stop_server(server)
        if kid.is_alive():
            kid.kill()
    assert "the store is unreachable" in out and "Traceback" not in out
    # seeds 1 and 2 trained while it was down; seed 3's result is spooled too when it comes within
    # PROBE_S of the last failed probe (the store is not tried again sooner), and written with them
    assert re.search(r"[23] results were kept in the local spool while the store was unreachable; all were "
                     r"written", out), out[-2000:]
    assert _finished_once(trials, 4) and len(trials) == 4
    trained = [ln.split()[0] for ln in _calls(calls)]
    assert len(trained) == len(set(trained)) == 4 and spool.entries(uri) == []
    assert [p.info.status for p in parents] == ["FINISHED"]
    print(f"server down {down_s:.0f} s (retries give up after ~7 s): 2 results spooled, 2/2 written on "
          f"its return, 4/4 trials FINISHED once, 4 trainings, 0 lost; sweep {time.monotonic() - t0:.0f} s")


@pytest.mark.server
def test_summary_counts_spooled_results_apart_from_the_store(tmp_path, procs, env_base):
    """A real `mlflow server` stopped after the first trial and not restarted: the
    summary counted every trained trial "finished" although three were only in the local spool. It
    says 1 finished, 3 finished and spooled (not yet in the store), and the command that writes
    them; that command, once the server is back, writes them."""
    from harness.tracking import spool

    d = tmp_path / "srv"
    d.mkdir()
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    server = _start_server(d, port)
    cfg = _sweep_yaml(tmp_path, seeds=range(4))
    calls, down = tmp_path / "calls.txt", tmp_path / "down"
    log, log2 = tmp_path / "sweep.log", tmp_path / "again.log"
    kid = _start(procs, _child_cli, ["sweep", str(cfg), "--tracking-uri", uri], env_base, str(log),
                 str(calls), 0.2, {1: str(down)})
    try:
        _wait_for(lambda: _finished_trials(uri) == 1, 120, "the first trial reached the server")
        _stop_server(server)
        down.touch()
        kid.join(300)
        out = log.read_text()
        assert kid.exitcode == 3, out[-3000:]
        assert len(spool.entries(uri)) == 3
        server = _start_server(d, port)
        again = _start(procs, _child_cli, ["sweep", str(cfg), "--tracking-uri", uri], env_base, str(log2),
                       str(calls))
        again.join(180)
        out2 = log2.read_text()
        assert again.exitcode == 0, out2[-3000:]
        trials, _ = _runs(uri, "tiny")
    finally:
        with contextlib.suppress(ProcessLookupError):
            _stop_server(server)
        for k in (kid, locals().get("again")):
            if k is not None and k.is_alive():
                k.kill()
    flat = " ".join(out.split())  # the table's title may wrap
    assert "1 finished, 3 finished and spooled (not yet in the store), 0 diverged, 0 failed, 0 from " \
           "earlier runs" in flat, out[-3000:]
    hint = re.compile(rf"3 spooled results are not yet in the store: run `\S+ -m harness sweep "
                      rf"{re.escape(str(cfg))} --tracking-uri {re.escape(uri)}` when it answers to "
                      rf"write them")
    assert any(hint.fullmatch(ln) for ln in out.splitlines()), out[-3000:]
    assert "4 finished" not in flat and "Traceback" not in out
    assert "3 results kept in the local spool by an earlier run were written to the store" in out2
    assert _finished_once(trials, 4) and spool.entries(uri) == []
    assert len(_calls(calls)) == 4  # the second invocation trained nothing


def _chattr(flag: str, path: Path) -> None:
    subprocess.run(["chattr", "-R", flag, str(path)], check=True, capture_output=True)


def _immutable_works(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.write_text("x")
    try:
        if subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode != 0:
            return False
        try:
            probe.write_text("y")
            return False
        except OSError:
            return True
    finally:
        subprocess.run(["chattr", "-i", str(probe)], capture_output=True)


def test_store_folder_unwritable_mid_sweep(tmp_path, procs, env_base, fake_trainer, monkeypatch):
    """The SQLite store's folder made immutable (``chattr -R +i``: root ignores file modes) after the
    first trial: the sweep trains on, spools 3 results, ends exit 3 with one line; the folder made
    writable again, `status` shows the dead parent, the next sweep writes the spool (nothing trained
    again) and marks that parent KILLED."""
    if not _immutable_works(tmp_path):
        pytest.skip("chattr +i does not stop writes here")
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.tracking import spool

    folder = tmp_path / "store"
    folder.mkdir()
    db = folder / "mlflow.db"
    uri = f"sqlite:///{db}"
    cfg = _sweep_yaml(tmp_path, seeds=range(4))
    calls, locked = tmp_path / "calls.txt", tmp_path / "locked"
    log = tmp_path / "sweep.log"
    kid = _start(procs, _child_cli, ["sweep", str(cfg), "--tracking-uri", uri], env_base, str(log),
                 str(calls), 0.2, {1: str(locked)})
    try:
        def first_written() -> bool:
            with contextlib.suppress(sqlite3.Error), \
                    sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
                return con.execute("select count(*) from runs where status = 'FINISHED' and "
                                   "run_uuid in (select run_uuid from tags where key = "
                                   "'harness.kind' and value = 'trial')").fetchone()[0] == 1
            return False

        _wait_for(first_written, 120, "the first trial was written")
        time.sleep(0.3)
        _chattr("+i", folder)
        locked.touch()
        kid.join(180)
    finally:
        _chattr("-i", folder)
    out = log.read_text()
    assert kid.exitcode == 3, out[-3000:]
    assert "Traceback" not in out and len(out.splitlines()) < 50, out[-3000:]  # a table per task
    account = [ln for ln in out.splitlines() if "results spooled at" in ln]
    assert account == [f"3 results spooled at {spool.spool_dir(uri)}; they will be written on the next "
                       f"run (the store: {account[0].split('(the store: ', 1)[1]}"], out[-2000:]
    assert len(spool.entries(uri)) == 3
    res = CliRunner().invoke(app, ["status", "--tracking-uri", uri])
    assert "(RUNNING, but process" in res.output and "is gone;" in res.output, res.output
    assert "marks it KILLED" in res.output, res.output
    assert "3 trained results are in the local spool" in res.output.replace("\n", "")
    from harness.orchestrate.run import run_sweep

    s = run_sweep(cfg, tracking_uri=uri, quiet=True)
    assert s.counts()["skipped"] == 4 and fake_trainer["calls"] == []
    trials, parents = _runs(uri, "tiny")
    assert _finished_once(trials, 4) and spool.entries(uri) == []
    dead = [p for p in parents if p.info.status == "KILLED"]
    assert len(dead) == 1 and "is gone" in dead[0].data.tags[TAG_KILLED_REASON]
    assert len(_calls(calls)) == 4
    print("folder unwritable mid-sweep: exit 3, 1 account line, 3 results spooled; next run wrote 3/3, "
          "0 trained again, 4/4 FINISHED once, dead parent KILLED")


def test_a_skipped_write_does_not_nest_the_stores_error():
    """While the store was down, the progress line read "store unreachable (the store is
    unreachable (the store is unreachable (the stor)": each skipped write wrapped
    the last error and recorded it again."""
    import harness.execute.writing as writing
    from harness.execute.writing import skipped_write_error
    from harness.tracking.health import StoreHealth
    from harness.tracking.store_errors import one_line

    h = StoreHealth()
    h.failed(RuntimeError("sqlite3.OperationalError: database is locked"))
    saved, writing.HEALTH = writing.HEALTH, h
    try:
        for _ in range(3):
            h.failed(skipped_write_error())
    finally:
        writing.HEALTH = saved
    assert h.error == "sqlite3.OperationalError: database is locked"
    assert one_line(RuntimeError(h.error)) == h.error
