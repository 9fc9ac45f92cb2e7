"""The command line: fast --help without heavy imports, list, dry-run plan, status."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.tracking.client import prepare_store

runner = CliRunner()


def without_stages(output: str) -> str:
    """``output`` without the lines that say a sweep's stages on a pipe (``sweep: checking ...``,
    :class:`harness.orchestrate.progress.StageLine`): the error messages and the results."""
    from harness.orchestrate.progress import PIPE_PREFIX

    return "".join(ln for ln in output.splitlines(keepends=True) if not ln.startswith(PIPE_PREFIX))


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # rich tables unwrapped


def test_help_lists_commands_without_importing_jax_or_mlflow():
    code = ("import sys; from harness.cli import app; import typer.main as m; "
            "cmd = m.get_command(app); print(sorted(cmd.commands)); "
            "print([k for k in ('jax', 'mlflow', 'pydantic', 'yaml') if k in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = r.stdout.splitlines()
    assert lines[0] == "['data', 'list', 'report', 'reproduce', 'status', 'sweep', 'ui']"
    assert lines[1] == "[]"
    r = subprocess.run([sys.executable, "-m", "harness", "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "sweep" in r.stdout and "status" in r.stdout


def test_list_shows_hyperparameters_and_defaults():
    r = runner.invoke(app, ["list", "optimizers"], terminal_width=250)
    assert r.exit_code == 0, r.output
    assert "momentum" in r.output and "step_size, mass=0.9" in r.output
    r = runner.invoke(app, ["list", "models"], terminal_width=250)
    assert "width=256, depth=2, activation='relu', dropout=0.0" in r.output
    r = runner.invoke(app, ["list", "optimiser"])
    assert r.exit_code == 2 and "did you mean 'optimizers'?" in r.output


def test_dry_run_plan_then_status(tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = write_sweep(seeds=[0, 1, 2])
    r = runner.invoke(app, ["sweep", str(cfg), "--dry-run", "--tracking-uri", tracking_uri])
    assert r.exit_code == 0, r.output
    assert "3 trials, 0 done (skipped), 3 to run" in r.output
    assert not (tmp_path / "mlflow.db").exists()  # a dry run creates no store
    fake_trainer["diverge_for"] = (2,)
    fake_trainer["raise_for"] = (1,)
    r = runner.invoke(app, ["sweep", str(cfg), "--tracking-uri", tracking_uri])
    assert r.exit_code == 1, r.output  # a failed trial → exit status 1
    assert "best configuration per task and optimizer" in r.output
    from harness.orchestrate.run import python_command

    assert f"{python_command()} -m harness ui --experiment tiny" in r.output
    r = runner.invoke(app, ["sweep", str(cfg), "--dry-run", "--tracking-uri", tracking_uri])
    assert "3 trials, 2 done (skipped), 1 to run" in r.output and "re-run (failed before)" in r.output
    r = runner.invoke(app, ["status", str(cfg), "--tracking-uri", tracking_uri], terminal_width=250)
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if "tiny" in line and "│" in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    # sweep, sweep_id, trials, finished, diverged, failed, pending
    assert cells[2:7] == ["3", "1", "1", "1", "0"]
    r = runner.invoke(app, ["status", "--tracking-uri", tracking_uri], terminal_width=250)
    assert r.exit_code == 0 and "tiny" in r.output


@pytest.mark.server
def test_ui_serves_the_store_and_stops_on_sigterm(tmp_path, tracking_uri):
    import json
    import signal
    import socket
    import time
    import urllib.request

    from harness.tracking.client import get_or_create_experiment, prepare_store

    c = prepare_store(tracking_uri)
    exp_id = get_or_create_experiment(c, "ui_exp", tracking_uri)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    errf = open(tmp_path / "ui.err", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "harness", "ui", "--experiment", "ui_exp", "--port",
                             str(port), "--tracking-uri", tracking_uri], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=errf, text=True)
    try:
        first = proc.stdout.readline()
        # the runs view in "Model training" mode (not MLflow 3's GenAI mode), in chart
        # mode, with the shared grouped view
        assert re.fullmatch(rf"MLflow UI: http://127\.0\.0\.1:{port}/#/experiments/{exp_id}/runs"
                            r"\?workflowType=machine_learning&compareRunsMode=CHART"
                            r"&viewStateShareKey=[0-9a-f]{32}\n", first), first
        tags = c.get_experiment(exp_id).tags
        assert tags["mlflow.experimentKind"] == "custom_model_development"
        key = first.rsplit("=", 1)[1].strip()
        view = json.loads(tags[f"mlflow.sharedViewState.{key}"])
        assert view["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "optimizer"}]
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(base + "/health", timeout=1):
                    break
            except OSError:
                time.sleep(0.5)
        url = base + "/ajax-api/2.0/mlflow/experiments/get-by-name?experiment_name=ui_exp"
        with urllib.request.urlopen(url, timeout=10) as r:
            assert json.load(r)["experiment"]["experiment_id"] == exp_id
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        errf.close()
    with pytest.raises(OSError):  # the server went away with it
        urllib.request.urlopen(base + "/health", timeout=2)
    # no noise before the URL: MLflow's registry note and Starlette's deprecation
    err_text = (tmp_path / "ui.err").read_text()
    assert "Registry store URI not provided" not in err_text and "Deprecat" not in err_text, err_text


def test_report_is_wired_to_make_report(tmp_path, tracking_uri, monkeypatch):
    import reports

    seen = {}

    def fake(experiment, sweep_id, output, baseline, tracking_uri, tuning_draws, scoring, select_by,
             time_clock, stats_baseline, immutable, target):
        seen.update(experiment=experiment, sweep_id=sweep_id, output=output, baseline=baseline,
                    tracking_uri=tracking_uri, tuning_draws=tuning_draws, scoring=scoring,
                    select_by=select_by, time_clock=time_clock, stats_baseline=stats_baseline,
                    immutable=immutable, target=target)
        (tmp_path / "r.html").write_text("x" * 2_100_000)
        (tmp_path / "r.csv.gz").write_text("row\n")
        return tmp_path / "r.html"

    monkeypatch.setattr(reports, "make_report", fake)
    prepare_store(tracking_uri)  # report reads an existing store
    r = runner.invoke(app, ["report", "--experiment", "q", "--sweep", "abc", "-o", "x.html", "--baseline",
                            "def", "--tracking-uri", tracking_uri])
    assert r.exit_code == 0, r.output
    assert seen == {"experiment": "q", "sweep_id": "abc", "output": "x.html", "baseline": "def",
                    "tracking_uri": tracking_uri, "tuning_draws": "without-replacement", "scoring": None,
                    "select_by": None, "time_clock": None,  # None: the sweep's rule, objective and clock
                    "stats_baseline": None,  # None: adam, else adamw, else the first
                    "immutable": False,  # a store SQLite opens where it is: read as usual, logged to
                    "target": None}  # None: each trial's own target
    assert r.output.strip().splitlines()[-3:] == [  # every file it wrote
        f"report: {tmp_path / 'r.html'} (2.1 MB, one self-contained HTML file)",
        f"data:   {tmp_path / 'r.csv.gz'} (the tidy table behind every figure, gzip CSV)",
        "The HTML is also logged to the sweep's parent run(s) in MLflow, under reports/."]

    def missing(*a, **kw):
        raise LookupError("no experiment 'q'")

    monkeypatch.setattr(reports, "make_report", missing)
    r = runner.invoke(app, ["report", "--experiment", "q", "--tracking-uri", tracking_uri])
    assert r.exit_code == 2 and "error: no experiment 'q'" in r.output


def _no_store(tmp_path):
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


@pytest.mark.parametrize("dry", [True, False])
def test_preflight_rejects_unbuildable_trials_before_mlflow(tmp_path, write_sweep, monkeypatch, dry):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = write_sweep(models=[{"name": "mlp", "hparams": {"width": 16, "dropout": 1.0}}],
                      optimizers=[{"name": "adam", "hparams": {"step_size": 0.1, "b1": 1.5}},
                                  {"name": "sgd", "hparams": {"step_size": 0.1}}],
                      schedules=["constant", {"name": "warmup_cosine_decay",
                                              "hparams": {"warmup_steps": 100}}],
                      batch_size=[32, 5000])
    r = runner.invoke(app, ["sweep", str(cfg)] + (["--dry-run"] if dry else []))
    assert r.exit_code == 2, r.output
    lines = without_stages(r.output).splitlines()
    assert lines[0] == "invalid sweep config:"
    assert f"{cfg}: models[0].hparams.dropout: model 'mlp' (dropout=1.0, width=16) on dataset 'digits' " \
           "with input shape (8, 8, 1): mlp: dropout is the drop probability and must be in [0, 1), " \
           "got 1.0" in lines
    assert f"{cfg}: optimizers[0].hparams.b1: optimizer 'adam' (b1=1.5, step_size=0.1): b1 must be in " \
           "[0, 1), got 1.5" in lines
    assert f"{cfg}: batch_size: 5000 exceeds the 1150 training examples of dataset 'digits'" in lines
    assert f"{cfg}: schedules[1].hparams.warmup_steps: schedule 'warmup_cosine_decay' (warmup_steps=100, " \
           "total_steps=40) with optimizer 'sgd': warmup_cosine_decay: total_steps (40) must exceed " \
           "warmup_steps (100)" in lines
    assert len(lines) == 5, r.output  # each problem once (not per dataset, schedule or trial)
    _no_store(tmp_path)


def test_preflight_reports_every_problem_of_an_entry(tmp_path, write_sweep, monkeypatch):
    """A builder stops at its first problem; the pre-flight reports each one, on its own
    line with its key path (before: the first only, one line per entry)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = write_sweep(models=[{"name": "mlp", "hparams": {"width": -5, "depth": -1, "activation": "nope"}}],
                      optimizers=[{"name": "adam", "hparams": {"step_size": 0.1, "b1": 1.5, "b2": -1.0}}])
    r = runner.invoke(app, ["sweep", str(cfg), "--dry-run"])
    assert r.exit_code == 2, r.output
    m = f"{cfg}: models[0].hparams.%s: model 'mlp' (activation='nope', depth=-1, width=-5) on dataset " \
        f"'digits' with input shape (8, 8, 1): %s"
    o = f"{cfg}: optimizers[0].hparams.%s: optimizer 'adam' (b1=1.5, b2=-1.0, step_size=0.1): %s"
    assert without_stages(r.output).splitlines() == [
        "invalid sweep config:",
        m % ("width", "mlp: width must be positive, got -5"),
        m % ("depth", "mlp: depth must be >= 0, got -1"),
        m % ("activation", "unknown activation 'nope'; choose one of ['elu', 'gelu', 'leaky_relu', "
                           "'relu', 'selu', 'sigmoid', 'softplus', 'tanh']"),
        o % ("b1", "b1 must be in [0, 1), got 1.5"),
        o % ("b2", "b2 must be in [0, 1), got -1.0")], r.output
    _no_store(tmp_path)


def test_an_entry_with_a_refused_key_still_reports_its_builders_problems(tmp_path, write_sweep,
                                                                         monkeypatch):
    """A fresh user's attack: ``step_size: -1, b1: 2.0, bogus: 3`` gave the step_size and bogus
    lines only: the config checks refused the entry, so its builder never ran and ``b1: 2.0`` was
    only reported once it was the sole problem. Now the builder runs with the refused keys at their
    defaults (a stand-in step size) and reports the rest."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = write_sweep(optimizers=[{"name": "adam", "hparams": {"step_size": -1, "b1": 2.0, "b2": -1,
                                                              "bogus": 3}}])
    r = runner.invoke(app, ["sweep", str(cfg), "--dry-run"])
    assert r.exit_code == 2, r.output
    lines = without_stages(r.output).splitlines()
    assert lines[0] == "invalid sweep config:"
    assert f"{cfg}: optimizers[0].hparams.step_size: must be > 0, got -1" in lines
    assert f"{cfg}: optimizers[0].hparams.b1: b1 must be in [0, 1), got 2.0" in lines
    assert f"{cfg}: optimizers[0].hparams.b2: b2 must be in [0, 1), got -1" in lines
    assert any(ln.startswith(f"{cfg}: optimizers[0].hparams.bogus: unknown hyperparameter") for ln in lines)
    assert len(lines) == 5, r.output
    _no_store(tmp_path)


def test_preflight_tfds_not_prepared_fails_at_once(tmp_path, write_sweep, monkeypatch):
    pytest.importorskip("tensorflow_datasets")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    empty = tmp_path / "tfds_empty"
    cfg = write_sweep(datasets=[{"name": "tfds:mnist", "hparams": {"data_dir": str(empty)}}])
    r = runner.invoke(app, ["sweep", str(cfg)])
    assert r.exit_code == 2, r.output
    from harness.data.tfds_source import prepare_hint

    assert f"{cfg}: datasets[0].name: {prepare_hint('mnist', str(empty))}" in r.output
    _no_store(tmp_path)


def test_executor_ray_without_ray_is_one_line_exit_2_before_mlflow(tmp_path, write_sweep, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    r = runner.invoke(app, ["sweep", str(write_sweep()), "--executor", "ray"])
    assert r.exit_code == 2, r.output
    assert without_stages(r.output).strip() == ('error: the Ray executor needs Ray, which is not installed: '
                                'pip install -e ".[ray]" (ray[default]==2.60.0)')
    _no_store(tmp_path)


def test_unknown_executor_rejected_in_dry_run(tmp_path, write_sweep, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["sweep", str(write_sweep()), "--executor", "foo", "--dry-run"])
    assert r.exit_code == 2, r.output
    assert without_stages(r.output).strip() == \
        "error: unknown executor 'foo'; valid choices: inprocess, process, ray"
    _no_store(tmp_path)


def test_sweep_with_no_trials_left_is_an_error(tmp_path, write_sweep, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = write_sweep(exclude=[{"model": "mlp"}])
    r = runner.invoke(app, ["sweep", str(cfg)])
    assert r.exit_code == 2, r.output
    assert without_stages(r.output).splitlines() == ["invalid sweep config:",
                                     f"{cfg}: exclude: no trials left after include/exclude"]
    _no_store(tmp_path)


def test_ui_port_in_use_exits_2_before_starting(tmp_path, tracking_uri):
    import socket

    prepare_store(tracking_uri)  # ui serves an existing store

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = runner.invoke(app, ["ui", "--port", str(port), "--tracking-uri", tracking_uri])
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines()[-1] == (
        f"error: cannot serve the UI on 127.0.0.1:{port}: address already in use; "
        f"choose another port, e.g. --port {port + 1}")
    assert "MLflow UI:" not in r.output


def _parent_run(uri: str, name: str, sweep_id: str) -> None:
    from harness.core.names import TAG_KIND, TAG_SWEEP_ID
    from harness.tracking.client import get_or_create_experiment, prepare_store

    c = prepare_store(uri)
    exp_id = get_or_create_experiment(c, name, uri)
    run = c.create_run(exp_id, tags={TAG_KIND: "parent", TAG_SWEEP_ID: sweep_id},
                       run_name="sweep-20260101-000000")
    c.set_terminated(run.info.run_id)


def test_status_unknown_experiment_and_untruncated_ids(tmp_path, tracking_uri, monkeypatch):
    name, sid = "a_rather_long_sweep_name_mnist1d_all_optimizers", "0123456789ab"
    _parent_run(tracking_uri, name, sid)
    r = runner.invoke(app, ["status", "-e", "a_rather_long_sweep_name_mnist1d_all_optimiser",
                            "--tracking-uri", tracking_uri])
    assert r.exit_code == 2, r.output
    assert r.output.strip() == (
        f"error: no experiment 'a_rather_long_sweep_name_mnist1d_all_optimiser' in {tracking_uri}; "
        f"experiments: {name}, Default (did you mean '{name}'?)")
    monkeypatch.setenv("COLUMNS", "80")
    r = runner.invoke(app, ["status", "--tracking-uri", tracking_uri])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()  # 80 columns: a block per sweep (tests/test_cli_narrow.py)
    assert lines[lines.index(name) + 1] == f"  sweep_id: {sid}" and "…" not in r.output


def test_status_of_an_experiment_without_sweeps_says_so(tracking_uri):
    import mlflow

    mlflow.MlflowClient(tracking_uri).create_experiment("empty")
    r = runner.invoke(app, ["status", "-e", "empty", "--tracking-uri", tracking_uri])
    assert r.exit_code == 0, r.output
    assert " ".join(r.output.split()) == ("no sweeps in experiment 'empty' yet: a sweep's runs appear here "
                                          "once 'python -m harness sweep CONFIG' has opened it")


def test_ctrl_c_prints_progress_and_exits_130(tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    from conftest import fake_result

    import harness.train.loop as trainer

    monkeypatch.chdir(tmp_path)
    calls = []

    def run_trial(spec, **kw):
        calls.append(spec.trial_id)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return fake_result(spec)

    monkeypatch.setattr(trainer, "run_trial", run_trial)
    cfg = write_sweep(seeds=[0, 1, 2, 3])
    r = runner.invoke(app, ["sweep", str(cfg), "--tracking-uri", tracking_uri])
    assert r.exit_code == 130, r.output
    assert r.output.strip().splitlines()[-1] == \
        "interrupted: 2/4 trials done; run the same command again to resume"
    from mlflow import MlflowClient

    c = MlflowClient(tracking_uri)
    parents = c.search_runs([c.get_experiment_by_name("tiny").experiment_id],
                            "tags.`harness.kind` = 'parent'")
    assert [p.info.status for p in parents] == ["KILLED"]


def test_list_descriptions_are_plain_sentences():
    """``list`` showed raw reST (":func:`optimizers.core.adam`.") for the registry's thin factories."""
    import optimizers
    from harness.cli.list_cmd import describe

    assert describe(optimizers.OPTIMIZERS["adam"]) == "Adam (Kingma & Ba 2015, arXiv:1412.6980)."
    assert describe(optimizers.OPTIMIZERS["sgd"]) == "Stochastic gradient descent: x <- x - lr * g."
    for name, b in optimizers.OPTIMIZERS.items():
        d = describe(b)
        assert ":func:" not in d and "``" not in d and d.endswith("."), (name, d)


def test_help_lists_every_command_uncut_and_teaches_with_examples():
    import subprocess
    import sys

    top = subprocess.run([sys.executable, "-m", "harness", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for cmd in ("sweep", "list", "status", "ui", "report", "reproduce"):
        line = next(ln for ln in top.splitlines() if ln.strip().startswith(cmd + " "))
        assert "..." not in line and "…" not in line, line
    assert "Examples:" in top
    for cmd in ("sweep", "report", "reproduce"):
        out = subprocess.run([sys.executable, "-m", "harness", cmd, "--help"], capture_output=True,
                             text=True, check=True).stdout
        assert "Examples:" in out and f"python -m harness {cmd} " in out


def test_read_only_commands_do_not_create_a_store(tmp_path, monkeypatch):
    """``status``/``report``/``ui`` in a directory without ``mlflow.db`` used to create an empty one
    and report 'no experiment'; they now say there is no store and leave the directory alone."""
    from typer.testing import CliRunner

    from harness.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for args in (["status"], ["status", "-e", "nope"], ["report", "-e", "nope"], ["ui"]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 3, (args, res.output)
        assert f"no MLflow store at {tmp_path / 'mlflow.db'}: run a sweep here first" in res.output
    assert list(tmp_path.iterdir()) == []


def test_list_keeps_square_brackets_in_descriptions():
    """rich took ``values[k]`` in the piecewise description for a style tag and dropped ``[k]``."""
    res = runner.invoke(app, ["list", "schedules"], env={"COLUMNS": "250"})
    assert res.exit_code == 0
    assert "schedule(i) = values[k] where k" in res.output


def list_blocks(output: str) -> dict[str, str]:
    """``list KIND``'s entries: name → its block (the lines from its name to the next entry's),
    whitespace normalised so that wrapping does not matter."""
    blocks: dict[str, list[str]] = {}
    cur = None
    for line in output.splitlines()[1:]:  # after the "optimizers (23)" heading
        if line and not line[0].isspace():
            cur = line.split()[0]
            blocks[cur] = []
        if cur is not None:
            blocks[cur].append(line)
    return {k: " ".join(" ".join(v).split()) for k, v in blocks.items()}


def test_list_says_each_thing_once_and_which_inputs_each_model_fits():
    rows = {}
    for kind in ("optimizers", "schedules", "models"):
        res = runner.invoke(app, ["list", kind], env={"COLUMNS": "250"})
        assert res.exit_code == 0, res.output
        rows.update(list_blocks(res.output))
    assert "SGD with heavy-ball momentum (Polyak 1964)." in rows["momentum"]
    assert "(heavy ball)" not in rows["momentum"] and "defaulting" not in rows["nesterov"]
    assert rows["exponential_decay"].count("decay_rate ** (i / decay_steps)") == 1
    assert rows["constant"].count("= step_size") == 1
    assert any("injected by the harness" in r for r in rows.values())  # a remark that adds something
    fits = {name: rows[name].split(" inputs: ")[1] for name in ("cnn", "cnn1d", "mlp", "logreg")}
    assert fits == {"cnn": "(H, W, C)", "cnn1d": "(L,)", "mlp": "(L,) · (H, W, C)",
                    "logreg": "(L,) · (H, W, C)"}


def test_did_you_mean_counts_a_swap_as_one_edit():
    from harness.core.builders import did_you_mean, edit_distance

    assert edit_distance("adma", "adam") == 1 and edit_distance("adma", "adamax") == 2
    opts = ["adagrad", "adam", "adamax", "adamw", "sgd", "momentum", "nesterov"]
    assert did_you_mean("adma", opts) == " (did you mean 'adam'?)"
    assert did_you_mean("momentun", opts) == " (did you mean 'momentum'?)"
    assert did_you_mean("xyz", opts) == ""


def test_2d_model_on_1d_data_points_at_cnn1d():
    from models.zoo import MODELS

    with pytest.raises(ValueError, match=r"got \(40,\); for 1-D data use cnn1d \(or mlp, logreg\)$"):
        MODELS["cnn"](input_shape=(40,), num_classes=10)


def test_readme_and_quickstart_config_agree_on_the_time_and_docs_name_real_schedules():
    from pathlib import Path

    import harness.config.load
    from optimizers import SCHEDULES

    root = Path(__file__).resolve().parents[1]
    readme = " ".join((root / "README.md").read_text().split())
    config = " ".join((root / "experiments" / "quickstart.yaml").read_text().split())
    assert "24 s on an idle machine, 67 s beside 4 cpu-burning processes" in readme.lower()
    assert "24 s on 2 idle cpu cores, 67 s beside 4 cpu burners" in config.lower()
    for line in harness.config.load.__doc__.splitlines():
        m = re.match(r"\s*schedules: \[([^\]]*)\]", line)
        if m:
            assert all(n.strip() in SCHEDULES for n in m.group(1).split(",")), line


def test_an_in_memory_store_is_refused_before_any_work(tmp_path, write_sweep, monkeypatch):
    """``--tracking-uri sqlite:///:memory:`` created a file ./:memory:, trained, said every result
    was written, and kept none."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = write_sweep()
    for uri in ("sqlite:///:memory:", "sqlite:///file:x?mode=memory&uri=true"):
        r = runner.invoke(app, ["sweep", str(cfg), "--tracking-uri", uri])
        assert r.exit_code == 2, r.output
        assert "an in-memory SQLite store keeps nothing once the process ends" in r.output
        assert not (tmp_path / ":memory:").exists() and sorted(p.name for p in tmp_path.iterdir()) == [
            "sweep.yaml"]


def test_a_dangling_symlink_store_is_refused_at_once(tmp_path, write_sweep, monkeypatch):
    """``mlflow.db`` a link to nothing: os.link failed and the sweep waited 600 s silently."""
    import os
    import subprocess
    import sys
    import time

    monkeypatch.chdir(tmp_path)
    cfg = write_sweep()
    os.symlink(tmp_path / "gone" / "x.db", tmp_path / "mlflow.db")
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", str(cfg)], capture_output=True,
                       text=True, timeout=300, cwd=tmp_path, env=env)
    assert r.returncode != 0 and time.monotonic() - t0 < 120
    out = r.stdout + r.stderr
    assert f"{tmp_path / 'mlflow.db'} is a symbolic link to {tmp_path / 'gone' / 'x.db'}, which does not " \
           "exist" in " ".join(out.split()), out[-2000:]
    assert "Traceback" not in out


def test_values_that_would_fail_every_trial_are_refused_before_the_store(tmp_path, write_sweep, monkeypatch):
    """``step_size: 1.0e-320`` (0 in float32), ``width: 1e9`` (out of memory) and ``depth: 100000``
    (a pre-flight that never ended) were accepted; the store was written and every trial failed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = write_sweep(models=[{"name": "mlp", "hparams": {"width": 1_000_000_000, "depth": 1}},
                              {"name": "mlp", "hparams": {"depth": 100_000}}],
                      optimizers=[{"name": "sgd", "hparams": {"step_size": 1.0e-320}},
                                  {"name": "adam", "hparams": {"step_size": 1.0e39}}])
    r = runner.invoke(app, ["sweep", str(cfg)], terminal_width=400)
    assert r.exit_code == 2, r.output
    lines = r.output.splitlines()
    assert any(ln.startswith(f"{cfg}: models[0].hparams: model 'mlp' (depth=1, width=1000000000) on "
                             "dataset 'digits': 75,000,000,010 parameters (300.0 GB); with gradients ")
               and
               "more than the" in ln for ln in lines), r.output
    assert f"{cfg}: models[1].hparams.depth: model 'mlp' (depth=100000) on dataset 'digits' with input " \
           "shape (8, 8, 1): mlp: depth is 100,000; at most 1,000 (a deeper network takes minutes to " \
           "trace before its first step)" in lines
    assert f"{cfg}: optimizers[0].hparams.step_size: 1e-320 is 0 in float32, the dtype training uses " \
           "(its positive range is 1.18e-38 to 3.4e+38)" in lines
    assert f"{cfg}: optimizers[1].hparams.step_size: 1e+39 is infinite in float32, the dtype training " \
           "uses (its positive range is 1.18e-38 to 3.4e+38)" in lines
    _no_store(tmp_path)


def test_an_unprepared_tfds_dataset_is_one_clean_error_without_absl_noise(tmp_path, write_sweep):
    """An unprepared ``tfds:cifar10`` whose version folder exists but is empty printed absl's
    "Variant folder ... has no dataset_info.json" warning before the harness's error."""
    import os
    import subprocess
    import sys

    pytest.importorskip("tensorflow_datasets")
    data = tmp_path / "tfds"
    (data / "mnist" / "3.0.1").mkdir(parents=True)
    cfg = write_sweep(datasets=[{"name": "tfds:mnist", "hparams": {"data_dir": str(data)}}])
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", str(cfg), "--dry-run"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 2
    out = r.stdout + r.stderr
    assert "is not prepared in data_dir" in out and "absl" not in out and "dataset_info.json" not in out


def test_status_of_a_grown_sweep_counts_its_earlier_trials_as_done(tmp_path, write_sweep, tracking_uri,
                                                                   fake_trainer, monkeypatch):
    """After the README's own workflow (raise the seeds, re-run), ``status`` without a config showed
    the grown sweep as "1 finished, 2 pending" where it was 3/3 done: it counted only
    the trials trained under the new sweep id."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert runner.invoke(app, ["sweep", str(write_sweep(seeds=[0, 1])), "--tracking-uri",
                               tracking_uri]).exit_code == 0
    r = runner.invoke(app, ["sweep", str(write_sweep(seeds=[0, 1, 2])), "--tracking-uri", tracking_uri])
    assert r.exit_code == 0 and "2 from earlier runs" in r.output, r.output
    r = runner.invoke(app, ["status", "--tracking-uri", tracking_uri], terminal_width=250)
    rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in r.output.splitlines()
            if "tiny" in ln and "│" in ln]
    # sweep, sweep_id, trials, finished, diverged, failed, pending: the first sweep 2/2, the grown 3/3
    assert sorted(row[2:7] for row in rows) == [["2", "2", "0", "0", "0"], ["3", "3", "0", "0", "0"]], \
        r.output


@pytest.mark.parametrize(("args", "want"), [
    (["report", "-e", "x", "--select-by", "bogus"],
     "Invalid value for '--select-by': 'bogus' is not one of 'time_to_target', 'final', 'best'"),
    (["report", "-e", "x", "--scoring", "AlgoPerf"],
     "Invalid value for '--scoring': 'AlgoPerf' is not one of 'harness', 'algoperf' (did you mean "
     "'algoperf'?)"),
    (["report", "-e", "x", "--time", "modelled"],
     "Invalid value for '--time': 'modelled' is not one of 'modeled', 'measured' (did you mean 'modeled'?)"),
    (["report", "-e", "x", "--tuning-curves", "with"],
     "Invalid value for '--tuning-curves': 'with' is not one of 'without-replacement', 'with-replacement'"),
    (["sweep", "experiments/quickstart.yaml", "--batching", "onn"],
     "Invalid value for '--batching': 'onn' is not one of 'auto', 'on', 'off' (did you mean 'on'?)"),
])
def test_an_option_outside_its_choices_is_a_usage_error_with_did_you_mean(args, want):
    """Every option with a fixed set of values says the valid ones and the closest, exit 2, without
    the "Value error," of typer's Enum conversion (pydantic's wording) that it printed before."""
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    flat = " ".join(res.output.replace("│", " ").split())  # click's box may wrap the message
    assert want in flat, res.output
    assert "Value error" not in res.output


def test_report_without_experiment_takes_the_stores_only_sweep_and_lists_them_otherwise(
        tmp_path, write_sweep, tracking_uri, fake_trainer):
    """``report`` with no ``-e`` was click's "Missing option '--experiment'" even on a store with one
    sweep (the attack's F8): now it reports that one, and names the sweeps when there are several."""
    from harness.orchestrate.run import run_sweep

    run_sweep(write_sweep(name="first"), tracking_uri=tracking_uri, quiet=True)
    out = tmp_path / "one.md"
    r = runner.invoke(app, ["report", "--tracking-uri", tracking_uri, "-f", "md", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"leaderboard: {out} (1 rows, md)") and "| sgd " in out.read_text()
    run_sweep(write_sweep(name="second"), tracking_uri=tracking_uri, quiet=True)
    r = runner.invoke(app, ["report", "--tracking-uri", tracking_uri], terminal_width=250)
    assert r.exit_code == 2
    assert f"error: give the sweep to report with --experiment NAME; {tracking_uri} holds first, second" \
        in " ".join(r.output.split())


def test_report_on_a_store_whose_artifacts_are_read_only_is_written_with_a_warning(
        tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    """Found by an attack: `report` on a store whose artifact folder it cannot write (a
    colleague's, a shared one) wrote the HTML and its table, then died with a 115-line traceback
    and exit 1 while logging the HTML to the parent run. Now it exits 0 and says, in one line,
    that the report was not logged. The failure is real: the parent run's ``reports`` artifact
    folder is a file."""
    from pathlib import Path
    from urllib.parse import urlparse

    import mlflow

    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    s = run_sweep(write_sweep(), tracking_uri=tracking_uri, quiet=True)
    art = Path(urlparse(mlflow.MlflowClient(tracking_uri).get_run(s.parent_run_id).info.artifact_uri).path)
    (art / "reports").write_text("not a folder")
    r = runner.invoke(app, ["report", "-e", "tiny", "--tracking-uri", tracking_uri, "-o", "r.html"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "r.html").stat().st_size > 100_000 and (tmp_path / "r.csv.gz").exists()
    lines = [ln for ln in r.output.splitlines() if ln.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith(
        "warning: the report r.html was written, but not logged to the sweep's parent run in the store (")
    assert "Traceback" not in r.output and "also logged" not in r.output


def test_a_report_whose_logging_fails_for_another_reason_than_the_store_says_so(
        tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    """Found by the review: the read-only-store warning caught every exception, so a programming
    error while logging the report became a warning and exit 0. Only the store's refusals (OSError,
    MlflowException) are a warning; anything else is raised."""
    import mlflow

    import reports
    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    run_sweep(write_sweep(), tracking_uri=tracking_uri, quiet=True)

    def broken(self, *a, **k):
        raise TypeError("a bug")

    monkeypatch.setattr(mlflow.MlflowClient, "log_artifact", broken)
    with pytest.raises(TypeError, match="a bug"):
        reports.make_report("tiny", output=str(tmp_path / "r.html"), tracking_uri=tracking_uri)
