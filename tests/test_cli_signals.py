"""A sweep stopped by a signal inside a longer process (a ``CliRunner``, a notebook) leaves that
process's SIGINT and SIGTERM handlers as they were; only the command line's own process, which ends
with the command, ignores a second signal while it exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from typer.testing import CliRunner

from harness.cli import app

runner = CliRunner()


def test_a_stopped_sweep_in_a_longer_process_leaves_its_signal_handlers(tmp_path, write_sweep, tracking_uri,
                                                                       fake_trainer, monkeypatch):
    """The stopped sweep set both to SIG_IGN for good: every process that process started later
    inherited them ignored (a suite's later sweep subprocess ran on 60 s past its SIGTERM)."""
    from conftest import fake_result

    import harness.train.loop as trainer

    monkeypatch.chdir(tmp_path)
    calls = []

    def run_trial(spec, **kw):
        calls.append(spec.trial_id)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return fake_result(spec)

    monkeypatch.setattr(trainer, "run_trial", run_trial)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    r = runner.invoke(app, ["sweep", str(write_sweep(seeds=[0, 1, 2])), "--tracking-uri", tracking_uri])
    after = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    assert r.exit_code == 130, r.output
    assert after == before
    child = subprocess.run([sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGTERM) "
                            "is signal.SIG_IGN)"], capture_output=True, text=True, check=True)
    assert child.stdout.strip() == str(before[signal.SIGTERM] is signal.SIG_IGN)  # a later sweep's


def test_the_command_lines_process_ignores_a_second_signal_as_it_exits(tmp_path):
    """The process of ``python -m harness`` still ignores signals once its sweep stopped: its
    interpreter's exit runs with SIGINT and SIGTERM ignored."""
    code = textwrap.dedent(f"""
        import atexit, signal, sys
        import harness.orchestrate.run as run
        from harness.cli import main

        def stopped(*a, **k):
            raise run.SweepInterrupted(0, 3, int(signal.SIGTERM))

        run.run_sweep = stopped
        atexit.register(lambda: print("at exit, ignored:", signal.getsignal(signal.SIGTERM) is signal.SIG_IGN,
                                      signal.getsignal(signal.SIGINT) is signal.SIG_IGN, file=sys.stderr))
        sys.argv = ["harness", "sweep", {str(tmp_path / "c.yaml")!r}]
        main()
    """)
    (tmp_path / "c.yaml").write_text("name: x\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert p.returncode == 143, p.stderr
    assert "at exit, ignored: True True" in p.stderr, p.stderr
