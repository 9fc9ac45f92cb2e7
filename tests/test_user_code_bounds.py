"""A user's code that never returns, or leaves by a side door.

Every case runs ``python -m harness sweep`` in a subprocess (a timeout on each) on a YAML and an
optimizer file in ``tmp_path``, its working directory (``MLFLOW_TRACKING_URI`` unset: the store
would be ``tmp_path/mlflow.db``):

* **before any write** (the config's ``source_timeout_s: 2``): a file that loops or sleeps at import,
  a factory that loops, an update that loops while traced, ``os._exit(0)`` in the file or the
  factory, ``raise KeyboardInterrupt`` in the factory, a ``BaseException`` subclass raised at
  import, ``os.chdir`` at import, an AlgoPerf submission that loops or calls ``os._exit`` at import:
  exit 2, one line naming ``optimizers[1].source``, no traceback, no ``mlflow.db``/``mlruns``;
* a source named ``json.py``, ``random.py`` or ``optimizers.py`` trains (it shadows nothing);
* **while training**: an AlgoPerf submission whose ``update_params`` loops from its third step
  (``HARNESS_TEST_SUBMISSION_CALL_S=3``): that trial FAILED with the reason, the built-in's trial
  FINISHED, the parent run FINISHED (not RUNNING), exit 1; a file that starts a thread that is not
  a daemon and never ends: the sweep trains, prints its summary and the process ends, exit 0;
  a ``jax.debug.callback`` that raises: the trial FAILED, exit 1, no traceback printed; an update
  whose callback sleeps for ever from step 5 and a model whose ``apply`` calls ``os._exit(0)`` on its
  40th call (``dispatch_timeout_s: 8``): each such trial FAILED with its reason, the built-ins'
  FINISHED, the parent FINISHED, exit 1.

Each failed before the fix (hung until the test's timeout, exit 0 or 130, or a traceback).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from subproc import with_hooks

BASE = {"models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}], "datasets": ["digits"],
        "seeds": [0], "batch_size": 32, "budget": {"steps": 20}, "eval_every": 10,
        "steps_per_dispatch": 10, "measure_perf": False, "source_timeout_s": 2}
BUILTIN = {"name": "sgd", "hparams": {"step_size": 0.1}}

FACTORY = textwrap.dedent('''
    import os
    import sys
    import time

    from optimizers import sgd


    def make(step_size):
        return sgd(step_size)
''')

#: name -> (file text, source, message after "source 'SOURCE': ")
PREFLIGHT = {
    "loops_at_import": (FACTORY + "\nwhile True:\n    pass\n", "x.py:make",
                        "running x.py did not return within 2 s (source_timeout_s: 2; it was at line {n})"),
    "sleeps_at_import": (FACTORY + "\ntime.sleep(10 ** 6)\n", "x.py:make",
                         "running x.py did not return within 2 s (source_timeout_s: 2; it was at line {n})"),
    "factory_loops": (FACTORY + "\n\ndef loops(step_size):\n    while True:\n        pass\n",
                      "x.py:loops", "loops(step_size=0.1) did not return within 2 s "
                      "(source_timeout_s: 2; it was at line {n})"),
    "update_loops_when_traced": (
        FACTORY + textwrap.dedent('''

            def traced_loop(step_size):
                init, update, get = sgd(step_size)

                def update_loops(i, g, state):
                    while True:
                        pass

                return init, update_loops, get
        '''), "x.py:traced_loop",
        "tracing one update of 'mine' did not return within 2 s (source_timeout_s: 2; it was at line {n})"),
    "os_exit_in_file": (FACTORY + "\nos._exit(0)\n", "x.py:make", "running x.py called os._exit(0) "
                        "(line {n}); the sweep goes on only without it"),
    "os_exit_in_factory": (FACTORY + "\n\ndef exits(step_size):\n    os._exit(0)\n", "x.py:exits",
                           "exits(step_size=0.1) called os._exit(0) (line {n}); the sweep goes on "
                           "only without it"),
    "keyboard_interrupt_in_factory": (
        FACTORY + "\n\ndef interrupts(step_size):\n    raise KeyboardInterrupt('from the factory')\n",
        "x.py:interrupts", "interrupts(step_size=0.1) raised KeyboardInterrupt: from the factory (line {n})"),
    "base_exception_at_import": (FACTORY + "\n\nclass Boom(BaseException):\n    pass\n\n\nraise Boom('no')\n",
                                 "x.py:make", "running x.py raised Boom: no (line {n})"),
    "chdir_at_import": (FACTORY + "\nos.chdir('/')\n", "x.py:make",
                        "running x.py changed the working directory to /; the sweep's store and files "
                        "are relative to {cwd}, where it was put back: leave it unchanged"),
}

#: A minimal AlgoPerf submission (no ``prepare_for_eval``); ``update_params`` as given.
SUBMISSION = textwrap.dedent('''
    import os
    import time


    def get_batch_size(workload_name):
        return None


    def init_optimizer_state(workload, model_params, model_state, hyperparameters, rng):
        return None


    def data_selection(workload, input_queue, optimizer_state, current_param_container, model_state,
                       hyperparameters, global_step, rng):
        return next(input_queue)


    def update_params(workload, current_param_container, current_params_types, model_state,
                      hyperparameters, batch, loss_type, optimizer_state, eval_results, global_step,
                      rng):
        if global_step >= 2 and hyperparameters.stuck:
            while True:
                pass
        return optimizer_state, current_param_container, model_state
''')

PREFLIGHT_ALGOPERF = {
    "algoperf_loops_at_import": (SUBMISSION + "\nwhile True:\n    pass\n",
                                 "running x.py did not return within 2 s (source_timeout_s: 2; it was "
                                 "at line {n})"),
    "algoperf_os_exit_at_import": (SUBMISSION + "\nos._exit(0)\n",
                                   "running x.py called os._exit(0) (line {n}); the sweep goes on only "
                                   "without it"),
}


def _sweep(tmp_path: Path, optimizers: list, *, timeout: float = 120, env_extra: dict | None = None,
           **cfg_extra) -> tuple[Path, subprocess.CompletedProcess, float]:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"name": "bounds", **BASE, **cfg_extra, "optimizers": optimizers},
                                  sort_keys=False))
    env = with_hooks({k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, COLUMNS="200",
                     **(env_extra or {}))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", "c.yaml"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=timeout)
    return cfg, r, time.monotonic() - t0


def _line_of(text: str, marker: str) -> int:
    """The last line of ``text`` (as written to the file) that contains ``marker``."""
    return max(i for i, ln in enumerate(text.splitlines(), 1) if marker in ln)


def _refused(tmp_path: Path, r: subprocess.CompletedProcess, *expected: str) -> None:
    """Exit 2, one line that is one of ``expected`` (a loop is interrupted at its ``while`` or its
    body), no traceback, nothing written."""
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    problems = [ln for ln in out.splitlines() if ln.startswith("c.yaml: ")]
    assert len(problems) == 1 and problems[0] in [f"c.yaml: optimizers[1].source: {e}" for e in expected], out
    assert "Traceback" not in out
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


@pytest.mark.parametrize("case", list(PREFLIGHT))
def test_user_code_accidents_are_refused_before_any_write(tmp_path, case):
    text, source, message = PREFLIGHT[case]
    (tmp_path / "x.py").write_text(text)
    marker = {"loops_at_import": "pass", "sleeps_at_import": "sleep(10", "factory_loops": "pass",
              "update_loops_when_traced": "pass", "os_exit_in_file": "_exit", "os_exit_in_factory": "_exit",
              "keyboard_interrupt_in_factory": "raise", "base_exception_at_import": "raise Boom",
              "chdir_at_import": "chdir"}[case]
    n = _line_of(text, marker)
    _, r, _ = _sweep(tmp_path, [BUILTIN, {"name": "mine", "source": source, "hparams": {"step_size": 0.1}}])
    _refused(tmp_path, r, *(f"source {source!r}: {message.format(n=k, cwd=tmp_path)}" for k in (n - 1, n)))


@pytest.mark.parametrize("case", list(PREFLIGHT_ALGOPERF))
def test_algoperf_accidents_at_import_are_refused_before_the_store(tmp_path, case):
    text, message = PREFLIGHT_ALGOPERF[case]
    (tmp_path / "x.py").write_text(text)
    n = _line_of(text, "pass" if "loops" in case else "_exit")
    _, r, _ = _sweep(tmp_path, [BUILTIN, {"name": "mine", "source": "algoperf:x.py",
                                          "hparams": {"stuck": 0}}])
    _refused(tmp_path, r, *(f"source 'algoperf:x.py': {message.format(n=k)}" for k in (n - 1, n)))


@pytest.mark.parametrize("name", ["json", "random", "optimizers"])
def test_a_source_named_like_a_module_the_harness_imports_shadows_nothing(tmp_path, name):
    (tmp_path / f"{name}.py").write_text(FACTORY)
    _, r, _ = _sweep(tmp_path, [{"name": "mine", "source": f"{name}.py:make",
                                 "hparams": {"step_size": 0.1}}])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "Traceback" not in out
    assert _statuses(tmp_path) == {"mine": ["FINISHED"], "parent": ["FINISHED"]}


def _statuses(tmp_path: Path) -> dict[str, list[str]]:
    """``{optimizer tag: [status of each trial run]}``, ``"parent"`` for the parent runs."""
    db = sqlite3.connect(tmp_path / "mlflow.db")
    try:
        rows = db.execute("SELECT r.run_uuid, r.status, "
                          "(SELECT value FROM tags t WHERE t.run_uuid = r.run_uuid AND t.key = 'optimizer') "
                          "FROM runs r").fetchall()
    finally:
        db.close()
    out: dict[str, list[str]] = {}
    for _, status, opt in rows:
        out.setdefault(opt or "parent", []).append(status)
    return out


def test_a_submission_stuck_in_update_params_fails_its_trial_alone(tmp_path):
    (tmp_path / "x.py").write_text(SUBMISSION)
    _, r, _ = _sweep(tmp_path, [{"name": "stuck", "source": "algoperf:x.py", "hparams": {"stuck": 1}},
                                {"name": "fine", "source": "algoperf:x.py", "hparams": {"stuck": 0}},
                                BUILTIN],
                     timeout=240, env_extra={"HARNESS_TEST_SUBMISSION_CALL_S": "3"})
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert _statuses(tmp_path) == {"stuck": ["FAILED"], "fine": ["FINISHED"], "sgd": ["FINISHED"],
                                   "parent": ["FINISHED"]}, out
    assert "AlgoPerf submission x.py: update_params at step 2 did not return within 3 s" in out
    assert "Traceback" not in out


def test_a_thread_left_running_by_the_file_does_not_keep_the_process(tmp_path):
    (tmp_path / "x.py").write_text(FACTORY + textwrap.dedent('''
        import threading


        def _forever():
            while True:
                time.sleep(0.1)


        threading.Thread(target=_forever, daemon=False).start()
    '''))
    # before: the summary printed, then the process waited for the thread (the timeout)
    _, r, _ = _sweep(tmp_path, [{"name": "mine", "source": "x.py:make", "hparams": {"step_size": 0.1}}],
                     timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "best configuration per task and optimizer" in r.stdout, out
    assert _statuses(tmp_path) == {"mine": ["FINISHED"], "parent": ["FINISHED"]}


def test_a_debug_callback_that_raises_fails_the_trial_without_a_traceback(tmp_path):
    (tmp_path / "x.py").write_text(FACTORY + textwrap.dedent('''
        import jax


        def _boom(i):
            raise RuntimeError("the callback refused")


        def calls_back(step_size):
            init, update, get = sgd(step_size)

            def update_cb(i, g, state):
                jax.debug.callback(_boom, i)
                return update(i, g, state)

            return init, update_cb, get
    '''))
    _, r, _ = _sweep(tmp_path, [BUILTIN, {"name": "mine", "source": "x.py:calls_back",
                                          "hparams": {"step_size": 0.1}}], batching="off")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert _statuses(tmp_path) == {"mine": ["FAILED"], "sgd": ["FINISHED"], "parent": ["FINISHED"]}, out
    assert "Traceback" not in out, out


SLEEPS = FACTORY + textwrap.dedent('''
    import jax


    def _maybe_sleep(i):
        if int(i) >= 5:
            time.sleep(10 ** 6)


    def sleepy(step_size):
        init, update, get = sgd(step_size)

        def update_sleeps(i, g, state):
            jax.debug.callback(_maybe_sleep, i)
            return update(i, g, state)

        return init, update_sleeps, get
''')

EXITS = textwrap.dedent('''
    import os

    import jax

    from models import stax

    CALLS = [0]


    def _count(n):
        CALLS[0] += 1
        if CALLS[0] >= 40:
            os._exit(0)


    def exits(*, num_classes, width: int = 8):
        init, apply = stax.serial(stax.Flatten, stax.Dense(width), stax.Relu, stax.Dense(num_classes))

        def apply_counted(params, x, **kw):
            jax.debug.callback(_count, x.shape[0])
            return apply(params, x, **kw)

        return init, apply_counted
''')


def _reasons(tmp_path: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """``{(model, optimizer): (run status, harness.reason)}`` of the trial runs."""
    db = sqlite3.connect(tmp_path / "mlflow.db")
    try:
        rows = db.execute(
            "SELECT r.status, (SELECT value FROM tags t WHERE t.run_uuid = r.run_uuid AND t.key = 'model'), "
            "(SELECT value FROM tags t WHERE t.run_uuid = r.run_uuid AND t.key = 'optimizer'), "
            "(SELECT value FROM tags t WHERE t.run_uuid = r.run_uuid AND t.key = 'harness.reason') "
            "FROM runs r").fetchall()
    finally:
        db.close()
    return {(m or "parent", o or "parent"): (status, reason or "") for status, m, o, reason in rows}


def test_user_code_that_hangs_or_exits_while_training_fails_its_trial_alone(tmp_path):
    # before: the sleeping update hung the sweep for ever (the sgd trial never trained), and the
    # model's os._exit(0) on its 40th call ended the sweep with exit 0, no summary, its parent RUNNING
    (tmp_path / "slow.py").write_text(SLEEPS)
    (tmp_path / "nets.py").write_text(EXITS)
    _, r, _ = _sweep(tmp_path, [BUILTIN, {"name": "sleepy", "source": "slow.py:sleepy",
                                          "hparams": {"step_size": 0.1}}],
                     timeout=300, dispatch_timeout_s=8, budget={"steps": 60}, eval_every=20,
                     models=[{"name": "mlp", "hparams": {"width": 16, "depth": 1}},
                             {"name": "net", "source": "nets.py:exits"}])
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    got = _reasons(tmp_path)
    assert got[("parent", "parent")][0] == "FINISHED", out
    assert got[("mlp", "sgd")] == ("FINISHED", ""), out
    hung = ("FAILED", "hung: its training chunk at step 0 did not return within 8 s (dispatch_timeout_s: 8); "
                      "its worker process was killed (source: slow.py:sleepy)")
    assert got[("mlp", "sleepy")] == hung, out
    assert got[("net", "sleepy")][0] == "FAILED" and got[("net", "sleepy")][1].startswith("hung: "), out
    status, reason = got[("net", "sgd")]
    assert status == "FAILED", out
    assert reason.startswith("worker process died (exit code 0) twice, the last during its training chunk "
                             "at step "), out
    assert "best configuration per task and optimizer" in r.stdout, out
    assert "Traceback" not in out, out
