"""Start-up: a sweep says what it does before it imports JAX or MLflow, and each
command imports only what it needs. Behavioural, not timed: the order of events and ``sys.modules``
in a real ``python -m harness`` subprocess (the seconds are in ``tests/benchmarks/test_bench_startup.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from subproc import run_in_pty

HEAVY = ("jax", "mlflow", "pandas", "matplotlib", "sklearn", "scipy", "alembic")

#: Runs the command line with two spies: the modules loaded when the sweep's first stage is said
#: (:class:`harness.orchestrate.progress.StageLine`) and when the first byte reaches stdout or stderr
#: (which stream, and its text without a terminal's controls); written as JSON to argv[1] at exit.
PROBE = """\
import atexit, json, re, sys
HEAVY = HEAVY_NAMES
out, events = sys.argv[1], {}
def loaded():
    return [m for m in HEAVY if m in sys.modules]
class Spy:
    def __init__(self, name, inner):
        self._name, self._inner = name, inner
    def write(self, s):
        text = re.sub(r"\x1b\\[[0-9;?]*[A-Za-z]|[\\r\\x1b]", "", s).strip()  # a terminal's controls
        if text and "first_write" not in events:
            events["first_write"] = {"stream": self._name, "text": text[:200], "loaded": loaded()}
        return self._inner.write(s)
    def __getattr__(self, k):
        return getattr(self._inner, k)
sys.stdout, sys.stderr = Spy("stdout", sys.stdout), Spy("stderr", sys.stderr)
import harness.orchestrate.progress as progress
real_stage = progress.StageLine.stage
def stage(self, name, text):
    events.setdefault("first_stage", {"name": name, "loaded": loaded()})
    return real_stage(self, name, text)
progress.StageLine.stage = stage
atexit.register(lambda: json.dump({**events, "at_exit": loaded()}, open(out, "w")))
sys.argv = ["harness", *sys.argv[2:]]
from harness.cli import main
main()
""".replace("HEAVY_NAMES", repr(HEAVY))


def _probe(tmp_path, args, terminal: bool) -> dict:
    """Run ``python -m harness ARGS`` under :data:`PROBE` on a pipe or a pseudo-terminal; its events."""
    out = tmp_path / "events.json"
    cmd = [sys.executable, "-c", PROBE, str(out), *args]
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm", "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    if not terminal:
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
    else:
        rc, written = run_in_pty(cmd, cwd=tmp_path, env=env)
        assert rc == 0, written.decode("utf-8", "replace")
    return json.loads(out.read_text())


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_a_sweep_says_its_first_stage_before_importing_jax_or_mlflow(tmp_path, write_sweep, terminal):
    """The first stage line came after ``import jax`` (3 s of a 4.5 s wait on a cold start): the
    persistent compilation cache was switched on, which imports JAX, before the line was started.
    Now the stage is set before anything heavy is imported; on a terminal it is the first thing
    printed, on a pipe its line follows on stderr (after 0.5 s, whatever the main thread imports),
    before anything on stdout."""
    cfg = write_sweep()
    ev = _probe(tmp_path, ["sweep", str(cfg), "--dry-run", "--tracking-uri",
                           f"sqlite:///{tmp_path / 'x.db'}"], terminal)
    assert ev["first_stage"] == {"name": "config", "loaded": []}
    assert "jax" in ev["at_exit"]  # the spy sees imports: the dry run's pre-flight imported JAX
    first = ev["first_write"]
    if terminal:  # the transient line is printed by the call that sets the stage
        assert first["stream"] == "stdout" and first["loaded"] == [], first
        assert f"checking {cfg}: reading it" in first["text"], first
    else:  # reading the config imports JAX's registries: the stage lasts its 0.5 s
        assert first["stream"] == "stderr", first
        assert first["text"] == f"sweep: checking {cfg}: reading it (nothing is trained or written yet)"



#: What each command may import beyond the command line itself; everything else of :data:`HEAVY`
#: must stay out. MLflow brings pandas and scipy with it (``mlflow.data``); ``list`` reads the
#: registries' signatures, whose modules import JAX.
ALLOWED = {
    "--help": set(),
    "sweep --help": set(),
    "report --help": set(),
    "ui --help": set(),
    "list": {"jax"},
    "list optimizers adam": {"jax"},
    "ui --tracking-uri sqlite:///{tmp}/none.db": set(),  # no store: exits 3 before starting a server
    "status --tracking-uri sqlite:///{tmp}/none.db": set(),
}


@pytest.mark.parametrize("command", list(ALLOWED))
def test_a_command_imports_only_what_it_needs(tmp_path, command):
    """``sys.modules`` after each command, in a fresh process: nothing heavy that it does not use."""
    code = ("import sys\nsys.argv = ['harness', *sys.argv[1:]]\nfrom harness.cli import main\ntry:\n"
            "    main()\nexcept SystemExit as e:\n    print('EXIT', e.code, file=sys.stderr)\nfinally:\n"
            f"    print('LOADED', ','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")
    args = command.format(tmp=tmp_path).split()
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=tmp_path,
                       timeout=300)
    loaded = set(r.stderr.rsplit("LOADED ", 1)[1].strip().split(",")) - {""}
    assert loaded == ALLOWED[command], r.stderr
    assert ("EXIT 3" in r.stderr) == ("none.db" in command), r.stderr  # the missing store is refused


def test_status_imports_neither_mlflow_nor_jax_nor_the_figures(tmp_path, write_sweep, tracking_uri,
                                                               fake_trainer):
    """``status`` on a SQLite store reads it with sqlite3 (3 s at 10,000 trials,
    against about a minute through MLflow): MLflow, JAX, matplotlib and scikit-learn stay out."""
    from harness.orchestrate.run import run_sweep

    run_sweep(write_sweep(), tracking_uri=tracking_uri, quiet=True)
    code = ("import sys\nsys.argv = ['harness', *sys.argv[1:]]\nfrom harness.cli import main\ntry:\n"
            "    main()\nfinally:\n"
            f"    print('LOADED', ','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code, "status", "--tracking-uri", tracking_uri],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300,
                       env={**os.environ, "COLUMNS": "60"})  # one "column: value" block per sweep
    assert r.returncode == 0, r.stderr
    assert "  trials: 2\n  finished: 2\n  diverged: 0\n  failed: 0\n  pending: 0\n" in r.stdout, r.stdout
    loaded = set(r.stderr.rsplit("LOADED ", 1)[1].strip().split(","))
    assert not loaded & {"mlflow", "jax", "matplotlib", "sklearn"}, loaded


def test_on_a_pipe_the_first_stage_counts_from_the_process_start(monkeypatch, capsys):
    """On a pipe a stage was said once it had lasted 0.5 s, so the first line came 0.5 s after
    the imports of the command line (about a second on an idle machine, more on a loaded one).
    The first stage now counts from the process start: a process that has already run that long
    says it at once; later stages, and a sweep run inside a longer process (no start given), keep
    the rule."""
    import io
    import time

    from rich.console import Console

    import harness.orchestrate.progress as progress

    monkeypatch.setattr(progress, "PIPE_AFTER_S", 60.0)
    pipe = Console(file=io.StringIO(), force_terminal=False)
    started = progress.StageLine(pipe, quiet=False, since=time.perf_counter() - 61.0)
    started.stage("config", "checking x.yaml: reading it")
    deadline = time.monotonic() + 30
    while "checking" not in (err := capsys.readouterr().err) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert err == "sweep: checking x.yaml: reading it\n"
    started.stage("datasets", "loading 1 dataset")  # a later stage: its own 60 s
    inside = progress.StageLine(pipe, quiet=False)  # no process start: the stage's own 60 s
    inside.stage("config", "checking y.yaml: reading it")
    time.sleep(0.3)
    started.stop()
    inside.stop()
    assert capsys.readouterr().err == ""


def test_pre_flight_traces_each_optimizer_once_per_model_and_schedule(monkeypatch):
    """The quickstart's pre-flight traced 20 programs: 2 models, and each of 3 optimizers alone
    and with each of 2 schedules on each model. The alone trace only says which of the two failed,
    so it is made only when the build with the schedule fails: 14 programs."""
    from pathlib import Path

    import jax

    from harness.config.load import load_config
    from harness.orchestrate.preflight import preflight

    calls = []
    real = jax.eval_shape
    monkeypatch.setattr(jax, "eval_shape", lambda f, *a, **k: calls.append(f) or real(f, *a, **k))
    cfg_path = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml"
    specs = preflight(load_config(cfg_path), str(cfg_path))
    assert len(specs) == 24
    assert len(calls) == 2 + 2 * 3 * 2
