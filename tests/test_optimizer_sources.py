"""Bring your own optimizer: an optimizer entry's ``source`` (a file, a module, Optax, AlgoPerf).

Real files, real sweeps into a real SQLite store, real subprocesses; no mocks."""

from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from harness.cli import app
from harness.config.errors import ConfigError
from harness.config.load import load_config
from harness.orchestrate.run import run_sweep
from harness.plan.expansion import expand
from harness.tracking.client import search_all
from harness.train.loop import run_trial

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]

MY_OPTS = textwrap.dedent('''
    """A user's optimizers, outside the project."""
    import jax.numpy as jnp

    from optimizers import make_schedule, optimizer


    @optimizer
    def my_momentum(step_size, mass: float = 0.9):
        """Heavy ball: v = mass * v + g; x = x - lr * v."""
        lr = make_schedule(step_size)

        def init(x):
            return x, jnp.zeros_like(x)

        def update(i, g, state):
            x, v = state
            v = mass * v + g
            return x - lr(i) * v, v

        return init, update, lambda state: state[0]


    def raises(step_size):
        raise RuntimeError("no optimizer today")


    def returns_int(step_size):
        return 3


    def returns_pair(step_size):
        return (lambda x: x, lambda i, g, x: x)


    @optimizer
    def update_raises(step_size):
        def update(i, g, x):
            raise KeyError("boom")

        return (lambda x: x), update, (lambda x: x)


    def no_step_size(lr, b1=0.9):
        return None


    @optimizer
    def needs_matrices(step_size):
        """Fails on a bias vector: its update multiplies by the transpose (x @ x.T)."""
        def init(x):
            return x

        def update(i, g, x):
            return x - step_size * (g @ x.T @ x)

        return init, update, lambda x: x
''')


def _write(tmp_path: Path, optimizers: list, extra: str = "", **over) -> Path:
    (tmp_path / "my_opts.py").write_text(MY_OPTS + extra)
    import yaml

    cfg = {"name": "byo", "models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}],
           "optimizers": optimizers, "datasets": ["digits"], "seeds": [0], "batch_size": 32,
           "budget": {"steps": 30}, "eval_every": 10, "steps_per_dispatch": 10, "measure_perf": False,
           **over}
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return p


def _trial_runs(uri: str, name: str):
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(name)
    return c, [r for r in search_all(c, exp.experiment_id) if r.data.tags.get("harness.kind") == "trial"]


def _errors(path: Path, preflight: bool = False) -> list[str]:
    with pytest.raises(ConfigError) as e:
        cfg = load_config(path)
        if preflight:
            from harness.orchestrate.preflight import preflight as pf

            pf(cfg, str(path))
    return e.value.errors


def test_a_file_optimizer_trains_like_the_builtin_it_reimplements_and_mlflow_records_its_source(
        tmp_path, tracking_uri, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = _write(tmp_path, [{"name": "my_momentum", "source": "my_opts.py:my_momentum",
                             "hparams": {"step_size": 0.05, "mass": 0.8}},
                            {"name": "momentum", "hparams": {"step_size": 0.05, "mass": 0.8}}])
    summary = run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    assert summary.counts()["finished"] == 2
    c, runs = _trial_runs(tracking_uri, "byo")
    by = {r.data.tags["optimizer"]: r for r in runs}
    mine, builtin = by["my_momentum"], by["momentum"]
    from harness.core.source import code_digest

    text = (tmp_path / "my_opts.py").read_text()
    assert mine.data.tags["optimizer.source"] == "my_opts.py:my_momentum"
    assert mine.data.tags["optimizer.source_hash"] == code_digest(text, ["my_momentum"])  # identity
    assert mine.data.tags["optimizer.source_file_hash"] == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert mine.data.tags["optimizer.api"] == "factory"
    assert "optimizer.source" not in builtin.data.tags
    assert mine.data.params["optimizer.mass"] == "0.8" and mine.data.params["optimizer.source"] == \
        "my_opts.py:my_momentum"
    art = Path(c.download_artifacts(mine.info.run_id, "source/my_opts.py", str(tmp_path / "dl")))
    assert art.read_text() == (tmp_path / "my_opts.py").read_text()
    # the same update rule as the built-in heavy ball: the same validation curve (float32 rounding)
    curve = {k: [m.value for m in c.get_metric_history(r.info.run_id, "valid/loss")] for k, r in by.items()}
    assert len(curve["my_momentum"]) == 4
    np.testing.assert_allclose(curve["my_momentum"], curve["momentum"], rtol=1e-6)


def test_editing_the_file_retrains_only_its_trials(tmp_path, tracking_uri, monkeypatch):
    monkeypatch.chdir(tmp_path)
    opts = [{"name": "my_momentum", "source": "my_opts.py:my_momentum", "hparams": {"step_size": 0.05}},
            {"name": "sgd", "hparams": {"step_size": 0.1}}]
    cfg = _write(tmp_path, opts)
    first = [s.trial_id for s in expand(load_config(cfg))]
    assert run_sweep(cfg, tracking_uri=tracking_uri, quiet=True).counts()["finished"] == 2
    again = run_sweep(cfg, tracking_uri=tracking_uri, quiet=True).counts()
    assert again["skipped"] == 2  # nothing changed: nothing re-trains
    _write(tmp_path, opts, extra="\n# a comment changes nothing\n")
    assert [s.trial_id for s in expand(load_config(cfg))] == first
    (tmp_path / "my_opts.py").write_text(MY_OPTS.replace("v = mass * v + g", "v = mass * v + 1.0 * g"))
    second = [s.trial_id for s in expand(load_config(cfg))]
    assert first[1] == second[1] and first[0] != second[0]  # only the edited source's trial changed
    counts = run_sweep(cfg, tracking_uri=tracking_uri, quiet=True).counts()
    assert counts["finished"] == 2 and counts["skipped"] == 1  # one trained, one skipped as FINISHED
    _, runs = _trial_runs(tracking_uri, "byo")
    assert sorted(r.data.tags["optimizer"] for r in runs) == ["my_momentum", "my_momentum", "sgd"]


def test_optax_source_is_bit_identical_to_the_registered_optax_twin(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = _write(tmp_path, [{"name": "oadam", "source": "optax:adam",
                             "hparams": {"step_size": 0.01, "b1": 0.8}},
                            {"name": "optax_adam", "hparams": {"step_size": 0.01, "b1": 0.8}}],
                 schedules=[{"name": "warmup_cosine_decay", "hparams": {"warmup_steps": 5}}])
    a, b = (run_trial(s) for s in expand(load_config(cfg)))
    assert a.spec.optimizer_source == "optax:adam" and a.status == b.status == "finished"
    assert a.curves.eval_loss == b.curves.eval_loss and a.curves.train_loss == b.curves.train_loss


def test_the_worker_runs_the_shipped_text_without_the_file(tmp_path, monkeypatch):
    """A trial carries its file's text: a process elsewhere (a Ray worker on another machine)
    trains it after the file is gone, with the same curve."""
    monkeypatch.chdir(tmp_path)
    cfg = _write(tmp_path, [{"name": "my_momentum", "source": "my_opts.py:my_momentum",
                             "hparams": {"step_size": 0.05}}])
    spec = expand(load_config(cfg))[0]
    here = run_trial(spec)
    (tmp_path / "spec.pkl").write_bytes(pickle.dumps(spec))
    (tmp_path / "my_opts.py").unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("import pickle, sys; from harness.train.loop import run_trial; "
            f"r = run_trial(pickle.load(open({str(tmp_path / 'spec.pkl')!r}, 'rb'))); "
            "print(repr(r.curves.eval_loss))")
    r = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr[-2000:]
    assert eval(r.stdout.strip().splitlines()[-1]) == here.curves.eval_loss


def test_hyperparameters_are_read_from_the_signature_like_a_builtins(tmp_path):
    cfg = _write(tmp_path, [{"name": "my_momentum", "source": "my_opts.py:my_momentum",
                             "hparams": {"step_size": 0.1, "mas": 0.5}},
                            {"name": "sf", "source": "optax.contrib:schedule_free_adamw",
                             "hparams": {"step_size": {"log_uniform": [1e-4, 1e-2]}, "b1": "x"}}],
                 search={"trials": 2})
    lines = _errors(cfg)
    assert lines == [
        f"{cfg}: optimizers[0].hparams.mas: unknown hyperparameter of optimizer 'my_momentum'; "
        "valid: step_size, mass (did you mean 'mass'?)",
        f"{cfg}: optimizers[1].hparams.b1: expected a number, got 'x'",
    ]


@pytest.mark.parametrize("source,message", [
    ("my_optz.py:my_momentum", "source 'my_optz.py:my_momentum': no such file: {tmp}/my_optz.py (a path "
                               "is relative to the config file's folder)"),
    ("my_opts.py:my_momentun", "source 'my_opts.py:my_momentun': my_opts.py has no 'my_momentun' "
                               "(did you mean 'my_momentum'?)"),
    ("my_opts.py:raises", "source 'my_opts.py:raises': raises(step_size=0.1) raised RuntimeError: no "
                          "optimizer today"),
    ("my_opts.py:returns_int", "source 'my_opts.py:returns_int': returns_int returned int; expected an "
                               "(init_fun, update_fun, get_params) triple, a 4-tuple (init_fun, "
                               "update_fun, get_params, eval_params) or an optax GradientTransformation"),
    ("my_opts.py:returns_pair", "source 'my_opts.py:returns_pair': returns_pair returned a 2-tuple; "
                                "expected an (init_fun, update_fun, get_params) triple, a 4-tuple "
                                "(init_fun, update_fun, get_params, eval_params) or an optax "
                                "GradientTransformation"),
    ("my_opts.py:no_step_size", "source 'my_opts.py:no_step_size': no_step_size(lr, b1) takes no "
                                "step_size (or learning_rate): the harness passes each trial's step "
                                "size (or its schedule) as that argument"),
    ("no_such_pkg.opts:make", "source 'no_such_pkg.opts:make': no module named 'no_such_pkg.opts' (is "
                              "it installed, or on PYTHONPATH?)"),
    ("optax:adamm", "source 'optax:adamm': module 'optax' has no 'adamm' (did you mean 'adam'?)"),
    ("my_opts.py", "source 'my_opts.py': expected PATH.py:FUNCTION, package.module:FUNCTION, "
                   "optax:NAME, optax.contrib:NAME or algoperf:PATH.py"),
    ("algoperf:my_opts.py", "source 'algoperf:my_opts.py': my_opts.py is not an AlgoPerf submission: "
                            "it defines no get_batch_size, init_optimizer_state, update_params, "
                            "data_selection (AlgoPerf's JAX API needs get_batch_size, "
                            "init_optimizer_state, update_params, data_selection)"),
])
def test_a_bad_source_is_one_line_with_file_and_key_path(tmp_path, source, message):
    cfg = _write(tmp_path, [{"name": "mine", "source": source, "hparams": {"step_size": 0.1}}])
    assert _errors(cfg) == [f"{cfg}: optimizers[0].source: {message.format(tmp=tmp_path)}"]


def test_a_file_that_raises_on_import_names_its_line(tmp_path):
    (tmp_path / "broken.py").write_text("import math\n\nx = 1 / 0\n")
    cfg = _write(tmp_path, [{"name": "mine", "source": "broken.py:f", "hparams": {"step_size": 0.1}}])
    assert _errors(cfg) == [f"{cfg}: optimizers[0].source: source 'broken.py:f': running broken.py "
                            "raised ZeroDivisionError: division by zero (line 3)"]


def test_names_and_kinds_of_sourced_entries(tmp_path):
    cfg = _write(tmp_path, [{"name": "adam", "source": "optax:adam", "hparams": {"step_size": 0.1}},
                            {"name": "mine", "source": "optax:adam", "hparams": {"step_size": 0.1}},
                            {"name": "mine", "source": "optax:sgd", "hparams": {"step_size": 0.1}}])
    assert _errors(cfg) == [
        f"{cfg}: optimizers[0].source: 'adam' is a built-in optimizer; give your source entry a name "
        "of its own (e.g. 'my_adam')",
        f"{cfg}: optimizers[2].source: entries named 'mine' have different sources ('optax:adam', "
        "'optax:sgd'); name them apart"]
    cfg = _write(tmp_path, [{"name": "sgd", "hparams": {"step_size": 0.1}}],
                 schedules=[{"name": "constant", "source": "my_opts.py:my_momentum"}])
    assert _errors(cfg) == [f"{cfg}: schedules[0].source: only optimizer and model entries take a source"]


def test_an_algoperf_submission_in_a_grid_with_a_schedule_is_refused_on_its_source(tmp_path):
    """The submission schedules its own step size: with a schedule in its grid, one line on its
    source; the same submission in an include entry of its own with the constant schedule loads."""
    sub = ROOT / "experiments" / "submissions" / "nadamw.py"
    (tmp_path / "nadamw.py").write_text(sub.read_text())
    entry = {"name": "ap", "source": "algoperf:nadamw.py", "hparams": {"learning_rate": 1e-3}}
    cfg = _write(tmp_path, [entry], schedules=["constant", "cosine_decay"])
    assert _errors(cfg) == [f"{cfg}: optimizers[0].source: an AlgoPerf submission schedules its own step "
                            "size; this grid also has schedules constant, cosine_decay: give the "
                            "submission an include: entry of its own with schedules: [constant]"]
    cfg = _write(tmp_path, [{"name": "sgd", "hparams": {"step_size": 0.1}}], schedules=["cosine_decay"],
                 include=[{"optimizers": [entry], "schedules": ["constant"]}])
    assert {s.optimizer_api for s in expand(load_config(cfg))} == {"triple", "algoperf"}


def test_preflight_traces_a_sourced_update_on_the_models_parameters(tmp_path):
    cfg = _write(tmp_path, [{"name": "mine", "source": "my_opts.py:needs_matrices",
                             "hparams": {"step_size": 0.1}}])
    lines = _errors(cfg, preflight=True)
    assert len(lines) == 1 and lines[0].startswith(
        f"{cfg}: optimizers[0].hparams: optimizer 'mine' (step_size=0.1): matmul input operand")


def test_an_update_that_raises_is_named_by_its_exception_type(tmp_path):
    cfg = _write(tmp_path, [{"name": "mine", "source": "my_opts.py:update_raises",
                             "hparams": {"step_size": 0.1}}])
    assert _errors(cfg, preflight=True) == [
        f"{cfg}: optimizers[0].hparams: optimizer 'mine' (step_size=0.1): KeyError: boom"]


def test_cli_exits_2_before_any_write_for_each_bad_source(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for source in ("missing.py:f", "my_opts.py:nope", "optax:nope", "algoperf:missing.py",
                   "my_opts.py:needs_matrices"):
        cfg = _write(tmp_path, [{"name": "mine", "source": source, "hparams": {"step_size": 0.1}}])
        r = runner.invoke(app, ["sweep", str(cfg)])
        assert r.exit_code == 2, (source, r.output)
        assert "optimizers[0]" in r.output and "Traceback" not in r.output
        assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def test_list_optimizers_optax_shows_every_optax_optimizer_as_a_source():
    r = runner.invoke(app, ["list", "optimizers", "--optax"], terminal_width=250)
    assert r.exit_code == 0, r.output
    assert "optax:adam " in r.output and "optax.contrib:muon" in r.output
    assert "optax.contrib:schedule_free_adamw" in r.output
    line = next(x for x in r.output.splitlines() if "optax:adam " in x)
    assert "step_size, b1=0.9" in line and "learning_rate" not in line
    r = runner.invoke(app, ["list", "models", "--optax"])
    assert r.exit_code == 2 and "--optax lists optimizers" in r.output


def test_an_algoperf_search_space_file_becomes_the_entrys_hyperparameters(tmp_path):
    import json

    sub = ROOT / "experiments" / "submissions" / "nadamw.py"
    (tmp_path / "nadamw.py").write_text(sub.read_text())
    (tmp_path / "space.json").write_text(json.dumps({
        "learning_rate": {"min": 1e-3, "max": 1e-2, "scaling": "log"},
        "beta2": {"feasible_points": [0.999]}, "warmup_factor": {"feasible_points": [0.05, 0.1]}}))
    cfg = _write(tmp_path, [{"name": "ap", "source": "algoperf:nadamw.py", "search_space": "space.json",
                             "hparams": {"beta2": 0.99, "one_minus_beta1": 0.1, "weight_decay": 0.0}}],
                 search={"trials": 3})
    specs = expand(load_config(cfg))
    assert len(specs) == 3 and {s.optimizer_api for s in specs} == {"algoperf"}
    for s in specs:
        hp = s.hparams("optimizer")
        assert 1e-3 <= hp["learning_rate"] <= 1e-2 and hp["beta2"] == 0.99  # the entry's own value wins
        assert hp["warmup_factor"] in (0.05, 0.1)
    # AlgoPerf's list of fixed points: one zipped grid
    (tmp_path / "space.json").write_text(json.dumps([
        {"learning_rate": 1e-3, "one_minus_beta1": 0.1, "beta2": 0.99, "weight_decay": 0.0,
         "warmup_factor": 0.1},
        {"learning_rate": 3e-3, "one_minus_beta1": 0.05, "beta2": 0.999, "weight_decay": 0.01,
         "warmup_factor": 0.05}]))
    cfg = _write(tmp_path, [{"name": "ap", "source": "algoperf:nadamw.py", "search_space": "space.json"}])
    got = sorted((s.hparams("optimizer")["learning_rate"], s.hparams("optimizer")["beta2"])
                 for s in expand(load_config(cfg)))
    assert got == [(1e-3, 0.99), (3e-3, 0.999)]
    cfg = _write(tmp_path, [{"name": "ap", "source": "algoperf:nadamw.py", "search_space": "nope.json"}])
    assert _errors(cfg) == [f"{cfg}: optimizers[0].search_space: no such file: {tmp_path}/nope.json (a "
                            "path is relative to the config file's folder)"]
    cfg = _write(tmp_path, [{"name": "ap", "source": "algoperf:nadamw.py",
                             "hparams": {"learning_rate": 0.1}}], schedules=["constant", "cosine_decay"])
    assert _errors(cfg) == [f"{cfg}: optimizers[0].source: an AlgoPerf submission schedules its own step "
                            "size; this grid also has schedules constant, cosine_decay: give the "
                            "submission an include: entry of its own with schedules: [constant]"]


BAD = textwrap.dedent('''
    import sys

    import optax

    NOTCALL = 3


    class Klass:
        def __init__(self, step_size):
            pass


    def exits(step_size):
        raise SystemExit(0)


    def tree_change(step_size):
        return (lambda p: (p, 0.0), lambda i, g, s: {"p": s[0]},
                lambda s: s[0] if isinstance(s, tuple) else s["p"])


    def scalar_only(step_size, mass: float = 0.9):
        return optax.sgd(step_size * 1.0, momentum=mass)


    def reshapes(step_size):
        import jax
        return (lambda p: (p, 0.0), lambda i, g, s: (jax.tree.map(lambda x: x.reshape(-1), s[0]), s[1]),
                lambda s: s[0])


    def casts(step_size):
        import jax
        return (lambda p: (p, 0.0), lambda i, g, s: (jax.tree.map(lambda x: x.astype("int32"), s[0]), s[1]),
                lambda s: s[0])
''')


@pytest.mark.parametrize("source,message", [
    ("bad.py:exits", "source 'bad.py:exits': exits(step_size=0.1) raised SystemExit: 0"),
    ("bad.py:NOTCALL", "source 'bad.py:NOTCALL': 'NOTCALL' in bad.py is an int, not a function returning "
                       "an optimizer"),
    ("bad.py:Klass", "source 'bad.py:Klass': 'Klass' in bad.py is a class, not a function returning an "
                     "optimizer"),
    ("exit0.py:f", "source 'exit0.py:f': running exit0.py raised SystemExit: 0 (line 1)"),
    ("syntax.py:f", "source 'syntax.py:f': running syntax.py raised SyntaxError: invalid syntax "
                    "(syntax.py, line 1)"),
    ("../../etc/passwd:f", "source '../../etc/passwd:f': '../../etc/passwd' is not a .py file (a file "
                           "source ends in .py); "
                           "expected PATH.py:FUNCTION, package.module:FUNCTION, optax:NAME, "
                           "optax.contrib:NAME or algoperf:PATH.py"),
])
def test_what_the_breaker_found_is_one_line_and_never_ends_the_sweep(tmp_path, source, message):
    """A sys.exit() in a file or factory used to end the sweep silently with exit 0."""
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "exit0.py").write_text("import sys; sys.exit(0)\ndef f(step_size):\n    pass\n")
    (tmp_path / "syntax.py").write_text("def f(:\n")
    cfg = _write(tmp_path, [{"name": "mine", "source": source, "hparams": {"step_size": 0.1}}])
    assert _errors(cfg) == [f"{cfg}: optimizers[0].source: {message}"]


def test_preflight_rejects_an_update_that_changes_the_state_structure(tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    cfg = _write(tmp_path, [{"name": "mine", "source": "bad.py:tree_change", "hparams": {"step_size": 0.1}}])
    (line,) = _errors(cfg, preflight=True)
    assert line.startswith(f"{cfg}: optimizers[0].hparams: optimizer 'mine' (step_size=0.1): update_fun "
                           "returned a state of another structure than init_fun's: ")


@pytest.mark.parametrize("fn,leaf", [("reshapes", "float32[1024]"), ("casts", "int32[64, 16]")])
def test_preflight_rejects_an_update_that_changes_a_state_leafs_shape_or_dtype(tmp_path, fn, leaf):
    """Pre-flight checked the state's tree structure only: an update that reshaped or cast a leaf
    was found by the trainer's scan, mid-sweep, and the trial's reason was JAX's last line,
    "Revise the function so that all output types match ..." (the attack's F4)."""
    (tmp_path / "bad.py").write_text(BAD)
    cfg = _write(tmp_path, [{"name": "mine", "source": f"bad.py:{fn}", "hparams": {"step_size": 0.1}}])
    (line,) = _errors(cfg, preflight=True)
    assert line == (f"{cfg}: optimizers[0].hparams: optimizer 'mine' (step_size=0.1): update_fun returned a "
                    f"state whose leaf [0][1][0] is {leaf} where init_fun's is float32[64, 16]: the trainer "
                    f"carries the state from step to step, so each leaf must keep its shape and dtype")


def test_a_factory_that_cannot_take_a_schedule_is_blamed_once_on_its_source(tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    cfg = _write(tmp_path, [{"name": "mine", "source": "bad.py:scalar_only",
                             "hparams": {"step_size": [0.01, 0.02]}}])
    assert _errors(cfg, preflight=True) == [
        f"{cfg}: optimizers[0].source: optimizer 'mine' (bad.py:scalar_only) with schedule 'constant': "
        "unsupported operand type(s) for *: 'function' and 'float' (with a schedule the factory's "
        "step_size is a function i -> step size: optimizers.make_schedule(step_size) takes both)"]


def test_an_error_about_a_search_space_hyperparameter_names_the_search_space(tmp_path):
    import json

    (tmp_path / "nadamw.py").write_text((ROOT / "experiments" / "submissions" / "nadamw.py").read_text())
    (tmp_path / "space.json").write_text(json.dumps({"learning_rate": {"min": 1e-3, "max": 1e-2,
                                                                       "scaling": "log"}}))
    cfg = _write(tmp_path, [{"name": "ap", "source": "algoperf:nadamw.py", "search_space": "space.json"}])
    (line,) = _errors(cfg)
    assert line.startswith(f"{cfg}: optimizers[0].search_space (learning_rate from space.json): a "
                           "distribution needs search.trials")


def test_the_reason_of_a_failed_trial_is_the_exception_not_jaxs_notice():
    from harness.core.outcome import reason_line

    tb = ("Traceback (most recent call last):\n  File \"x.py\", line 1\nTypeError: scan body function "
          "carry input and carry output must have the same pytree structure\n--------------------\n"
          "For simplicity, JAX has removed its internal frames from the traceback of the following "
          "exception. Set JAX_TRACEBACK_FILTERING=off to include these.\n")
    assert reason_line(tb) == ("TypeError: scan body function carry input and carry output must have "
                               "the same pytree structure")
    assert reason_line("ValueError: x\n") == "ValueError: x"
    # a message of several lines: its first two, where JAX's scan error names the leaf (its last
    # line, "Revise the function ...", was the reason before)
    tb = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n    y = g()\n        ^^^\n"
          "TypeError: scan body function carry input and carry output must have equal types, but they "
          "differ:\n\n  * the input carry component state[0] has type float32[8,10] but the corresponding "
          "output carry component has type float32[80], so the shapes do not match\n\nRevise the function "
          "so that all output types match the corresponding input types.\n")
    assert reason_line(tb) == (
        "TypeError: scan body function carry input and carry output must have equal types, but they "
        "differ: * the input carry component state[0] has type float32[8,10] but the corresponding "
        "output carry component has type float32[80], so the shapes do not match")
    assert reason_line("diverged: loss 3e+30 at step 12\n") == "diverged: loss 3e+30 at step 12"


SLOW_TRACE = '''
import os, time


def slow(step_size):
    def init(p):
        return p

    def update(i, g, s):
        open(os.environ["SLOW_TRACE_MARK"], "w").close()
        time.sleep(60)
        return s

    return init, update, lambda s: s
'''


def test_sigterm_while_a_users_optimizer_is_traced_stops_the_sweep_and_blames_no_one(tmp_path):
    """Found by the review of the SIGTERM change: a SIGTERM landing in a user's code run under
    ``core.source.bounded`` (the pre-flight's trace of a ``source:`` optimizer, every AlgoPerf
    ``update_params``) was taken for that code raising KeyboardInterrupt: "invalid sweep config:
    ... tracing one update of 'slow' raised KeyboardInterrupt", exit 2 (in training, a trial written
    FAILED). Now the sweep stops, exit 143, and says so; Ctrl-C there already did."""
    import signal
    import time

    (tmp_path / "slow_opt.py").write_text(SLOW_TRACE)
    cfg = _write(tmp_path, [{"name": "mine", "source": "slow_opt.py:slow", "hparams": {"step_size": 0.1}}])
    mark = tmp_path / "tracing"
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "SLOW_TRACE_MARK": str(mark)}
    # SIGTERM at its default in the sweep whatever this process had (conftest puts it back): a SIG_IGN
    # here is inherited, and a sweep leaves an ignored signal alone (it slept the 60 s out)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    p = subprocess.Popen([sys.executable, "-m", "harness", "sweep", str(cfg), "--tracking-uri",
                          f"sqlite:///{tmp_path}/m.db"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.time()
        while not mark.exists() and time.time() - t0 < 120:
            assert p.poll() is None, p.communicate()
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        _, errs = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, errs
    assert errs.strip().splitlines()[-1] == ("stopped by SIGTERM before training started; run the same "
                                             "command again"), errs
    assert "KeyboardInterrupt" not in errs and "invalid sweep config" not in errs
