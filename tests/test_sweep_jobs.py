"""``--jobs N`` sweeps (the ``process`` executor): worker lifetime and the Ctrl-C count."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.execute.executors import Executor

# Run by the sweep's main process *and* imported (as ``__mp_main__``) by every spawn worker, so the
# workers get the slow fake trainer too; each call first drops a ``started-<pid>`` file.
_JOBS_SCRIPT = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    import harness.train.loop as trainer
    from conftest import fake_result

    def run_trial(spec, **kw):
        Path({marks!r}, f"started-{{os.getpid()}}").touch()
        return fake_result(spec, sleep={sleep})

    trainer.run_trial = run_trial
    trainer.run_trials_batched = lambda specs, **kw: [run_trial(s) for s in specs]
    trainer.should_batch = lambda specs: False

    if __name__ == "__main__":
        from harness.cli import main
        sys.argv = ["harness", "sweep", {cfg!r}, "--tracking-uri", {uri!r}, "--jobs", "2", "-q"]
        main()
""")


def _children(pid: int) -> set[int]:
    try:
        return {int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a re-parented zombie may never be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_workers_exit_when_the_sweep_process_is_sigkilled(tmp_path, write_sweep, tracking_uri):
    cfg = write_sweep(seeds=[0, 1, 2, 3])
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "run.py"
    script.write_text(_JOBS_SCRIPT.format(tests=str(Path(__file__).parent), marks=str(marks), sleep=60,
                                          cfg=str(cfg), uri=tracking_uri))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    kids: set[int] = set()
    try:
        deadline = time.monotonic() + 90
        # Both workers are training (so their initializer ran) once two distinct pids dropped a mark.
        while len(list(marks.iterdir())) < 2:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the two workers never started a trial"
            time.sleep(0.2)
        kids = _children(proc.pid)
        workers = {int(p.name.split("-")[1]) for p in marks.iterdir()}
        assert workers <= kids  # the marks come from the sweep's own worker processes
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 5
        while any(_alive(k) for k in kids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [k for k in kids if _alive(k)], "worker processes outlived the killed sweep"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for k in kids:  # only the processes this test started
            if _alive(k):
                os.kill(k, signal.SIGKILL)


class _InterruptedPool(Executor):
    """Stands in for ``--jobs 2`` hit by Ctrl-C: unit 0 reports its outcome, units 1 and 2 were in
    flight and finish (write their FINISHED runs) while the pool shuts down, but their outcomes never
    reach ``on_done``; then the ``KeyboardInterrupt`` propagates."""

    def __init__(self, **_: object) -> None:
        self.jobs = 2
        self.units: list = []

    def run(self, units, ctx, on_done) -> None:
        from harness.execute.worker import execute_unit

        self.units.extend(units)
        on_done(execute_unit(units[0], ctx))
        for unit in units[1:3]:
            execute_unit(unit, ctx)
        raise KeyboardInterrupt


def test_ctrl_c_count_includes_units_that_finished_during_shutdown(
        tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    from mlflow import MlflowClient
    from typer.testing import CliRunner

    import harness.execute.executors as executors
    from harness.cli import app

    monkeypatch.chdir(tmp_path)
    pools: list[_InterruptedPool] = []

    def factory(**opts: object) -> _InterruptedPool:
        pools.append(_InterruptedPool(**opts))
        return pools[-1]

    monkeypatch.setitem(executors.EXECUTORS, "interrupted", factory)
    cfg = write_sweep(seeds=[0, 1, 2, 3])
    r = CliRunner().invoke(app, ["sweep", str(cfg), "--tracking-uri", tracking_uri,
                                 "--executor", "interrupted", "-q"])
    assert r.exit_code == 130, r.output
    assert [len(u) for u in pools[0].units] == [1, 1, 1, 1]
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name("tiny").experiment_id
    fin = {x.data.tags["harness.trial_id"] for x in c.search_runs(
        [exp], "attributes.status = 'FINISHED' and tags.`harness.kind` = 'trial'")}
    assert fin == {u[0].trial_id for u in pools[0].units[:3]}  # 3 in the store, only 1 reported
    assert r.output.strip().splitlines()[-1] == \
        "interrupted: 3/4 trials done; run the same command again to resume"
    parents = c.search_runs([exp], "tags.`harness.kind` = 'parent'")
    assert [p.info.status for p in parents] == ["KILLED"]
