"""Shared pytest fixtures.

- ``tracking_uri``: a fresh SQLite MLflow store in the test's tmp dir (schema created lazily).
- ``mlflow_server``: one real ``mlflow server`` per test session on 127.0.0.1 (SQLite backend,
  ``--workers 1``, job execution off), yielding its ``http://`` URI; stopped with SIGTERM.
- ``write_sweep``: writes a small sweep YAML into tmp_path from keyword overrides.
- ``fake_trainer``: replaces ``harness.train.loop.run_trial``/``run_trials_batched`` with a cheap
  deterministic stand-in (see :func:`fake_result`), for tests of the runner rather than of training.
- every test (autouse) starts with an empty process throughput cache, as a new sweep process does,
  and ends with SIGINT's and SIGTERM's handlers as it found them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

# XLA's CPU pool at one thread, as a user's sweep has it (harness.core.xla_threads): imported before
# any test computes, so in-process timing and every subprocess (NPROC inherited) see the same pool.
import harness  # noqa: F401

# --------------------------------------------------------------------------- session-wide settings

# One persistent XLA compilation cache per test process (per xdist worker), inherited by every
# subprocess the tests start (sweeps, --jobs workers, Ray workers): a program compiled once is
# loaded, not recompiled, by the next test or re-run that builds the same program. Results are the
# same executables, so bit-identity checks are unaffected; compile times stay > 0 (a load).
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    import tempfile

    _JAX_CACHE = tempfile.mkdtemp(prefix="harness-tests-jax-cache-")
    os.environ.update({"JAX_COMPILATION_CACHE_DIR": _JAX_CACHE,
                       "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                       "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"})
else:
    _JAX_CACHE = None

# Trial batching is decided by a measurement (harness.batching) whose outcome depends on the
# machine's load: the suite fixes it to what the old CPU rule gave (auto = sequential), so unit
# structures, checkpoint layouts and timings stay deterministic. Tests of the decision unset it.
os.environ.setdefault("HARNESS_BATCH", "never")

# Compile time, not run time, is most of this suite on 2 CPU cores: a tiny MLP with dropout took
# 2.5 s to compile at XLA's default LLVM optimisation level and 1.4 s at level 0 (vmapped: 6.1 s and
# 1.7 s); tests/test_zoo.py ran in 157 s and 65 s. The level changes how fast the compiled loops
# run, not what they compute (no fast-math either way), and every parity and bit-identity check
# compares two programs compiled alike. The benchmarks (``--benchmark-only``) keep the default:
# they measure speed. HARNESS_TEST_XLA_OPT=default keeps it for the unit tests too.
_XLA_FAST_COMPILE = "--xla_backend_optimization_level=0"


def pytest_configure(config):
    benchmarks = config.getoption("benchmark_only", False) or any(
        "benchmarks" in str(a) for a in config.args)
    flags = os.environ.get("XLA_FLAGS", "")
    if not benchmarks and os.environ.get("HARNESS_TEST_XLA_OPT") != "default" \
            and "xla_backend_optimization_level" not in flags:
        # before any test imports JAX (XLA reads the flags when its backend starts); inherited by
        # every sweep, --jobs worker and Ray worker the tests start
        os.environ["XLA_FLAGS"] = f"{flags} {_XLA_FAST_COMPILE}".strip()


#: Test files that take minutes (kill/re-run cycles, a Ray head, real sweeps), in this order, spread
#: over the first half of the run (:func:`pytest_collection_modifyitems`): with ``-n 2 --dist
#: loadfile --no-loadscope-reorder`` none is the run's tail (xdist's default reorder sends files with
#: the most tests first: the one-test, 4-minute kill file came last and ran alone at the end, 1,066 s
#: instead of about 850 s), and they do not all start together at the beginning, where a user saw
#: the fault and Ray files fail side by side on a busy machine.
HEAVY_FIRST = ("test_checkpoint_kill.py", "test_ray_cluster.py", "test_faults_store.py",
               "test_report_layout.py", "test_zoo.py", "test_trainer.py", "test_reports.py",
               "test_sweep.py", "test_checkpoint.py")


def heavy_spread(files: list[str]) -> list[str]:
    """``files`` (test file paths in collection order) with the :data:`HEAVY_FIRST` ones, in that
    order, each followed by an equal share of the others, so that the heavy files fill the first
    half of the run one after another: ``heavy_spread(["a", "b", "c", "d", "test_zoo.py"])`` is
    ``["test_zoo.py", "a", "b", "c", "d"]``; with two heavy files and 8 others, each heavy file is
    followed by 2 others, then the remaining 4."""
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    heavy = sorted((f for f in files if Path(f).name in rank), key=lambda f: rank[Path(f).name])
    rest = [f for f in files if Path(f).name not in rank]
    # the benchmarks are skipped in a test run (--benchmark-skip): as spacers they would take no
    # time, and the kill and Ray files would start together after all; they go last
    rest = [f for f in rest if "benchmarks" not in Path(f).parts] + \
           [f for f in rest if "benchmarks" in Path(f).parts]
    gap = len(rest) // (2 * len(heavy)) if heavy else 0
    out: list[str] = []
    for i, h in enumerate(heavy):
        out += [h, *rest[i * gap:(i + 1) * gap]]
    return out + rest[len(heavy) * gap:]


def pytest_collection_modifyitems(config, items):
    files = heavy_spread(list(dict.fromkeys(str(item.fspath) for item in items)))
    rank = {f: i for i, f in enumerate(files)}
    items.sort(key=lambda item: rank[str(item.fspath)])  # stable within a file


def pytest_unconfigure(config):
    if _JAX_CACHE is not None and not hasattr(config, "workerinput"):
        import shutil

        shutil.rmtree(_JAX_CACHE, ignore_errors=True)

# --------------------------------------------------------------------------- MLflow stores


@pytest.fixture(autouse=True)
def _fresh_throughput_cache(monkeypatch):
    """Each test starts with this process's throughput measurements empty, as a new sweep process
    does: ``harness.execute.training.PERF_CACHE`` is process-wide, so a sweep that an earlier test
    ran on the same xdist worker (same model, optimizer and budget) made a later test's sweep skip
    the measurement it counts. A test's own sweeps still share it."""
    training = sys.modules.get("harness.execute.training")
    if training is not None:
        monkeypatch.setattr(training, "PERF_CACHE", {})
    yield


@pytest.fixture(autouse=True)
def _signal_handlers_kept():
    """SIGINT's and SIGTERM's handlers are put back after each test: a handler a test left behind
    (SIG_IGN) is inherited by every subprocess later tests of the same worker start, whose sweeps
    then ignore the signals those tests send."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, h in before.items():
        if signal.getsignal(s) is not h and h is not None:
            signal.signal(s, h)


@pytest.fixture
def tracking_uri(tmp_path: Path) -> str:
    """``sqlite:///<tmp>/mlflow.db`` (artifacts go to ``<tmp>/mlruns``)."""
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and its live children; 0 once it is gone."""
    import psutil

    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory):
    """A real MLflow tracking server shared by the session; yields its URI."""
    d = tmp_path_factory.mktemp("mlflow_server")
    port = _free_port()
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    env.pop("MLFLOW_TRACKING_URI", None)
    log = open(d / "server.log", "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{d / 'srv.db'}",
         "--default-artifact-root", str(d / "art"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"],
        cwd=d, env=env, stdout=log, stderr=subprocess.STDOUT)
    uri = f"http://127.0.0.1:{port}"
    # The start-up is bounded by the server's own CPU seconds (its process and children, 90 s), not
    # by wall-clock: beside CPU-burning processes and a second test worker a server that needs ~20 s
    # idle got too little CPU to answer within 90 s of wall-clock (3 errors in a CI run beside 2
    # burners); 900 s of wall-clock is the backstop for a server that hangs without computing.
    started = time.monotonic()
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(d / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(uri + "/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            cpu, wall = _tree_cpu_s(proc.pid), time.monotonic() - started
            if cpu > 90 or wall > 900:
                raise RuntimeError(f"mlflow server did not answer /health after {cpu:.0f} s of its CPU "
                                   f"time ({wall:.0f} s of wall-clock)")
            time.sleep(0.5)
        yield uri
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


# --------------------------------------------------------------------------- sweep configs

TINY_SWEEP = {
    "name": "tiny",
    "models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}],
    "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}}],
    "schedules": ["constant"],
    "datasets": ["digits"],
    "seeds": [0, 1],
    "batch_size": 32,
    "budget": {"steps": 40},
    "eval_every": 20,
    "steps_per_dispatch": 20,
    "measure_perf": False,
    "target": {"metric": "valid/accuracy", "value": 0.3},
}


@pytest.fixture
def write_sweep(tmp_path: Path):
    """``write_sweep(name="x", **overrides) -> Path``: a tiny sweep YAML (``TINY_SWEEP`` + overrides)."""

    def write(filename: str = "sweep.yaml", **overrides) -> Path:
        cfg = {**TINY_SWEEP, **overrides}
        p = tmp_path / filename
        p.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return p

    return write


# --------------------------------------------------------------------------- fake trainer


def make_spec(**kw):
    """A small digits-MLP ``TrialSpec`` (20 adam steps, batch 32); ``kw`` overrides any field."""
    from harness.core.spec import TrialSpec

    base = dict(sweep="t", model="mlp", optimizer="adam", schedule="constant", dataset="digits", seed=0,
                steps=20, batch_size=32, eval_every=10, steps_per_dispatch=10,
                model_hparams={"width": 16, "depth": 1}, optimizer_hparams={"step_size": 0.01})
    base.update(kw)
    return TrialSpec.make(**base)


def fake_result(spec, *, sleep: float = 0.0, raise_for: tuple = (), diverge_for: tuple = ()):
    """A deterministic ``TrialResult`` for ``spec``: validation loss 1/(1+step·lr), accuracy rising to
    0.9; test loss 0.01 above and test accuracy 0.01 below the last validation values.

    Raises ``RuntimeError("boom <trial_id>")`` when ``spec.seed`` is in ``raise_for``; diverges at
    step 2 (a ``nan`` loss) when the seed is in ``diverge_for``.
    """
    from harness.core.spec import Curves, TrialResult

    if sleep:
        time.sleep(sleep)
    if spec.seed in raise_for:
        raise RuntimeError(f"boom {spec.trial_id}")
    lr = float(spec.hparams("optimizer").get("step_size", 0.1))
    c = Curves()
    for s in range(1, spec.steps + 1):
        c.train_step.append(s)
        c.train_wall_s.append(s * 1e-3)
        c.train_loss.append(float("nan") if spec.seed in diverge_for and s >= 2 else 1.0 / (1 + s * lr))
        if spec.seed in diverge_for and s >= 2:
            return TrialResult(spec=spec, status="diverged", curves=c, diverged_step=2,
                               reason="non-finite train loss", train_seconds=0.002)
    for s in range(0, spec.steps + 1, spec.eval_every):
        c.eval_step.append(s)
        c.eval_wall_s.append(s * 1e-3)
        c.eval_loss.append(1.0 / (1 + s * lr))
        c.eval_accuracy.append(0.9 * s / spec.steps)
    return TrialResult(spec=spec, status="finished", curves=c, final_valid_loss=c.eval_loss[-1],
                       final_valid_accuracy=c.eval_accuracy[-1], test_loss=c.eval_loss[-1] + 0.01,
                       test_accuracy=c.eval_accuracy[-1] - 0.01, train_seconds=spec.steps * 1e-3,
                       steps_to_target=spec.eval_every, seconds_to_target=spec.eval_every * 1e-3)


@pytest.fixture
def fake_trainer(monkeypatch):
    """Patch the trainer with :func:`fake_result`; returns a dict of options to tweak
    (``sleep``, ``raise_for``, ``diverge_for``) and a ``calls`` list of trained trial ids."""
    import harness.train.loop as trainer

    opts = {"sleep": 0.0, "raise_for": (), "diverge_for": (), "calls": []}

    def run_trial(spec, *, dataset=None, perf_cache=None, measure_perf=True, on_progress=None,
                  checkpoints=None):
        opts["calls"].append(spec.trial_id)
        return fake_result(spec, sleep=opts["sleep"], raise_for=opts["raise_for"],
                           diverge_for=opts["diverge_for"])

    def run_trials_batched(specs, *, dataset=None, perf_cache=None, measure_perf=True, on_progress=None,
                           checkpoints=None):
        return [run_trial(s) for s in specs]

    monkeypatch.setattr(trainer, "run_trial", run_trial)
    monkeypatch.setattr(trainer, "run_trials_batched", run_trials_batched)
    monkeypatch.setattr(trainer, "should_batch", lambda specs: False)
    # nor does the sweep time real programs before training (its interleaved throughput stage)
    monkeypatch.setattr("harness.execute.training.measure_throughput", lambda units, on_stage=None: 0.0)
    # and a user's source trains here too (the fake runs none of its code): not in a worker of its own
    monkeypatch.setattr("harness.execute.isolation.isolated", lambda spec: False)
    return opts
