"""The harness from Python: ``harness.sweep`` on a path, a mapping and a
SweepConfig; ``only`` (the same trial ids as the whole config); one exception type with the key
path; ``harness.results`` read back from a real SQLite store: trials, long curves, a numeric
leaderboard and its LaTeX/Markdown, tuning curves, CSV and Parquet per row kind, figures; two
source versions of one optimizer (current only, older listed; ``versions="all"`` one optimizer per
version, never averaged); the sqlite snapshot equals MLflow's client value for value.

The trainer is :func:`conftest.fake_result` (known values: validation accuracy ``0.9 * step /
steps``, test accuracy 0.01 below the last validation value, loss ``1 / (1 + step * lr)``), written
by the sweep's own writer into a real store, so every number below is known in advance.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import TINY_SWEEP, fake_result

import harness

STEPS, EVERY = 40, 20


def _cfg(**kw) -> dict:
    return {**TINY_SWEEP, "name": "api", "optimizers": [
        {"name": "sgd", "hparams": {"step_size": [0.1, 0.3]}},
        {"name": "adam", "hparams": {"step_size": 0.01}}], **kw}


def test_sweep_from_a_mapping_equals_the_same_config_from_a_file(tmp_path, tracking_uri, fake_trainer):
    path = tmp_path / "api.yaml"
    path.write_text(yaml.safe_dump(_cfg()))
    dry = harness.sweep(str(path), tracking_uri=tracking_uri, dry_run=True, quiet=True)
    run = harness.sweep(_cfg(), tracking_uri=tracking_uri, quiet=True)
    assert run.trial_ids == dry.trial_ids and run.sweep_id == dry.sweep_id and len(run.trial_ids) == 6
    assert run.counts == {"finished": 6, "diverged": 0, "failed": 0, "skipped": 0}
    again = harness.sweep(path, tracking_uri=tracking_uri, quiet=True)  # resume: nothing to train
    assert again.counts["skipped"] == 6 and len(fake_trainer["calls"]) == 6
    from harness.config.load import load_config

    cfg = load_config(path)  # a validated SweepConfig object
    assert harness.sweep(cfg, tracking_uri=tracking_uri, dry_run=True, quiet=True).trial_ids == run.trial_ids
    assert harness.orchestrate.run_sweep is harness.orchestrate.run.run_sweep  # the package stays a package


def test_errors_are_one_type_with_the_key_path_and_nothing_is_written(tmp_path, tracking_uri, fake_trainer):
    bad = _cfg(optimizers=[{"name": "sgd", "hparams": {"step_size": -1.0}}])
    with pytest.raises(harness.ConfigError) as e:
        harness.sweep(bad, tracking_uri=tracking_uri, quiet=True)
    assert e.value.key_path == "optimizers[0].hparams.step_size"
    assert str(e.value).startswith("<dict>: optimizers[0].hparams.step_size: ")
    for only, key in (({"optimiser": "sgd"}, "only.optimiser"), ("optimizer=sdg", "only.optimizer"),
                      ({"optimizer": "adam", "seed": 7}, "only.seed")):
        with pytest.raises(harness.ConfigError) as e:
            harness.sweep(_cfg(), tracking_uri=tracking_uri, only=only, quiet=True)
        assert e.value.key_path == key, str(e.value)
    with pytest.raises(harness.ConfigError, match="did you mean 'sgd'") as e:
        harness.sweep(_cfg(), tracking_uri=tracking_uri, only="optimizer=sdg", quiet=True)
    with pytest.raises(harness.ConfigError) as e:
        harness.sweep(_cfg(), tracking_uri="bogus://x", quiet=True)
    assert e.value.key_path == "tracking_uri"
    with pytest.raises(harness.ConfigError) as e:
        harness.sweep(_cfg(), tracking_uri=tracking_uri, executor="slurm", quiet=True)
    assert e.value.key_path == "executor"
    with pytest.raises(harness.ConfigError) as e:
        harness.sweep({**_cfg(), "seeds": [np.int64(0), object()]}, tracking_uri=tracking_uri, quiet=True)
    assert e.value.key_path == "seeds[1]"
    # the options are checked by the config's own fields (before: jobs=0 trained, -3 and 10**6 and
    # batching="bogus" were taken, "two" and 2.5 raised a bare TypeError; a reviewer's findings)
    for kw, message in ((dict(jobs=0), "jobs: Input should be greater than 0; got 0"),
                        (dict(jobs=10**6), "jobs: Input should be less than or equal to 1024; got 1000000"),
                        (dict(jobs="two"), "jobs: expected an integer; got 'two'"),
                        (dict(jobs=2.5), "jobs: expected an integer; got 2.5"),
                        (dict(batching="bogus"),
                         "batching: Input should be 'auto', 'on' or 'off'; got 'bogus'")):
        with pytest.raises(harness.ConfigError) as e:
            harness.sweep(_cfg(), tracking_uri=tracking_uri, quiet=True, **kw)
        assert (e.value.key_path, str(e.value)) == (next(iter(kw)), message)
    with pytest.raises(TypeError, match=r"^harness\.sweep\(\) got an unexpected keyword argument 'foo'; "
                       r"its options: tracking_uri, jobs, "):  # before: SweepOptions.__init__() ...
        harness.sweep(_cfg(), tracking_uri=tracking_uri, foo=1)
    assert fake_trainer["calls"] == [] and not (tmp_path / "mlflow.db").exists()


def test_the_batching_keyword_takes_what_yaml_takes(tracking_uri, capsys):
    """YAML's ``batching: true`` was taken while ``harness.sweep(batching=True)`` was refused ("Input
    should be 'auto', 'on' or 'off'"): a boolean is on/off in both."""
    for given, said in ((True, "on"), (False, "off")):
        harness.sweep(_cfg(), tracking_uri=tracking_uri, batching=given, dry_run=True)
        assert f"batching: {said};" in capsys.readouterr().out


def test_only_runs_part_of_the_config_with_its_trial_ids(tmp_path, tracking_uri, fake_trainer):
    whole = harness.sweep(_cfg(), tracking_uri=tracking_uri, dry_run=True, quiet=True)
    part = harness.sweep(_cfg(), tracking_uri=tracking_uri, only={"optimizer": "sgd", "seed": np.int64(1)},
                         quiet=True)  # a seed as results().trials holds it (numpy): refused before
    assert len(part.trial_ids) == 2 and set(part.trial_ids) <= set(whole.trial_ids)
    assert part.sweep_id == whole.sweep_id and sorted(fake_trainer["calls"]) == sorted(part.trial_ids)
    rest = harness.sweep(_cfg(), tracking_uri=tracking_uri, quiet=True)
    assert rest.counts["skipped"] == 2 and rest.trial_ids == whole.trial_ids
    client = __import__("mlflow").MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name("api")
    parents = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'parent'",
                                 order_by=["attributes.start_time ASC"])
    assert parents[0].data.params["only"] == "optimizer=sgd seed=1"
    path = client.download_artifacts(parents[0].info.run_id, "trials.json", str(tmp_path))
    listed = json.loads(Path(path).read_text())
    assert [t["trial_id"] for t in listed] == whole.trial_ids  # the whole config's trials


def test_results_are_tidy_numeric_tables_read_back_from_the_store(tmp_path, tracking_uri, fake_trainer):
    run = harness.sweep(_cfg(), tracking_uri=tracking_uri, quiet=True)
    res = run.results()
    t = res.trials
    assert len(t) == 6 and set(t["trial_id"]) == set(run.trial_ids)
    assert t["task"].unique().tolist() == ["mlp · digits"] and t["task_name"].iloc[0] == "mlp / digits"
    for col, dtype in (("seed", "Int64"), ("optimizer.step_size", "float64"), ("model.width", "Int64"),
                       ("test/accuracy", "float64"), ("final/valid_loss", "float64"), ("reached", "bool"),
                       ("seconds_to_target", "float64"), ("start_time", "datetime64[ms, UTC]")):
        assert str(t[col].dtype) == dtype, (col, t[col].dtype)
    row = t[(t["optimizer"] == "sgd") & (t["optimizer.step_size"] == 0.3) & (t["seed"] == 1)].iloc[0]
    assert row["test/accuracy"] == pytest.approx(0.9 - 0.01, abs=1e-12)
    assert row["final/valid_loss"] == 1 / (1 + STEPS * 0.3)
    assert row["convergence/steps_to_target"] == EVERY and row["reached"]

    c = res.curves
    assert list(c.columns) == ["trial_id", "task", "optimizer", "config", "seed", "split", "metric", "step",
                               "seconds", "value"]
    mine = c[c["trial_id"] == row["trial_id"]]
    valid = mine[(mine["split"] == "valid") & (mine["metric"] == "loss")]
    assert valid["step"].tolist() == [0, 20, 40]
    assert valid["value"].tolist() == [1 / (1 + s * 0.3) for s in (0, 20, 40)]
    assert valid["seconds"].tolist() == pytest.approx([0.0, 0.02, 0.04])
    assert mine[mine["split"] == "train"]["step"].tolist() == list(range(1, STEPS + 1))
    test = mine[mine["split"] == "test"].set_index("metric")
    assert test.loc["accuracy", "value"] == pytest.approx(0.89) and test.loc["accuracy", "step"] == STEPS

    lb = res.leaderboard
    assert sorted(lb["optimizer"]) == ["adam", "sgd"] and lb["order"].tolist() == [1, 2]
    assert str(lb["rank"].dtype) == "Int64" and str(lb["test_mean"].dtype) == "float64"
    assert lb["test_mean"].tolist() == pytest.approx([0.89, 0.89])
    assert lb["rank_label"].tolist() == ["1=", "1="] and lb["tied"].all()  # equal results share rank 1
    assert lb["interval"].tolist() == ["min–max", "min–max"] and lb["test_n"].tolist() == [2, 2]
    assert lb["task"].tolist() == ["mlp · digits"] * 2
    tex = lb.to_latex()
    assert "\\begin{tabular}" in tex and "0.8900 [0.8900, 0.8900]" in tex and "step\\_size" in tex
    # "(< 5)" printed as "(¡ 5)" under pdflatex's default encoding (a reviewer's finding)
    assert "<" not in tex and ">" not in tex and "(\\textless{} 5)" in tex
    md = lb.to_markdown()
    assert md.splitlines()[0].startswith("| Rank") and "| 2/2 " in md
    assert "<table" in res._repr_html_() and "sweep " + run.sweep_id in res._repr_html_()

    tc = res.tuning_curves
    sgd = tc[tc["optimizer"] == "sgd"]
    assert sgd["k"].tolist() == [1, 2] and sgd["n_configs"].tolist() == [2, 2]
    assert sgd["valid"].tolist() == pytest.approx([0.9, 0.9])
    fig = res.figure("convergence_steps")
    assert type(fig).__name__ == "Figure" and fig.axes
    with pytest.raises(KeyError, match="convergence_steps"):
        res.figure("nope")


def test_csv_and_parquet_one_file_per_row_kind_with_stable_dtypes(tmp_path, tracking_uri, fake_trainer):
    res = harness.sweep(_cfg(), tracking_uri=tracking_uri, quiet=True).results()
    paths = res.to_csv(tmp_path / "csv")
    assert sorted(p.name for p in paths.values()) == ["curves.csv", "leaderboard.csv", "trials.csv",
                                                       "tuned_times.csv", "tuning_curves.csv"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a mixed-type column would warn (pandas' DtypeWarning)
        back = {k: pd.read_csv(p) for k, p in paths.items()}
    assert back["trials"]["test/accuracy"].tolist() == pytest.approx(res.trials["test/accuracy"].tolist())
    assert back["curves"]["value"].dtype == "float64" and len(back["curves"]) == len(res.curves)
    assert back["leaderboard"]["test_mean"].tolist() == pytest.approx(res.leaderboard["test_mean"].tolist())
    pq = res.to_parquet(tmp_path / "pq")
    pd.testing.assert_frame_equal(pd.read_parquet(pq["curves"]), res.curves)


def test_report_format_writes_the_tables(tmp_path, tracking_uri, fake_trainer, monkeypatch):
    from typer.testing import CliRunner

    from harness.cli import app

    harness.sweep(_cfg(), tracking_uri=tracking_uri, quiet=True)
    runner = CliRunner()
    r = runner.invoke(app, ["report", "-e", "api", "--tracking-uri", tracking_uri, "--format", "tex",
                            "-o", str(tmp_path / "b.tex")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "b.tex").read_text().strip() == harness.results(
        "api", tracking_uri=tracking_uri).leaderboard.to_latex().strip()
    r = runner.invoke(app, ["report", "-e", "api", "--tracking-uri", tracking_uri, "--format", "csv",
                            "-o", str(tmp_path / "t")])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [
        "curves.csv", "leaderboard.csv", "trials.csv", "tuned_times.csv", "tuning_curves.csv"]
    r = runner.invoke(app, ["report", "-e", "api", "--tracking-uri", tracking_uri, "--format", "md",
                            "--baseline", "abc"])
    assert r.exit_code == 2 and "--baseline" in r.output


MY_OPT = """from optimizers import sgd


def same(x):
    return x


def my_sgd(step_size):
    return sgd({expr})
"""


def test_two_source_versions_current_by_default_all_on_request(tmp_path, tracking_uri, monkeypatch):
    """A user's optimizer edited between two sweeps: its trials of both versions are in the store.
    results() shows the current version and lists the older; versions="all" shows both as two
    optimizers, each with its own numbers (v1's test accuracy 0.89, v2's 0.79: never averaged)."""
    import harness.train.loop as trainer

    def run_trial(spec, **kw):  # the fake trainer, 0.1 worse for the second version's code
        res = fake_result(spec)
        if spec.optimizer_source_hash == versions.get("v2"):
            res.test_accuracy -= 0.1
        return res

    versions: dict[str, str] = {}
    monkeypatch.setattr(trainer, "run_trial", run_trial)
    monkeypatch.setattr(trainer, "run_trials_batched", lambda specs, **kw: [run_trial(s) for s in specs])
    monkeypatch.setattr(trainer, "should_batch", lambda specs: False)
    monkeypatch.setattr("harness.execute.training.measure_throughput", lambda units, on_stage=None: 0.0)
    (tmp_path / "my_opts.py").write_text(MY_OPT.format(expr="step_size"))
    cfg = tmp_path / "v.yaml"
    # dispatch_timeout_s: null: the user's optimizer trains in this process, where the fake trainer is
    # (else in a worker process of its own)
    cfg.write_text(yaml.safe_dump(_cfg(name="ver", dispatch_timeout_s=None, optimizers=[
        {"name": "adam", "hparams": {"step_size": 0.01}},
        {"name": "my_sgd", "source": "my_opts.py:my_sgd", "hparams": {"step_size": 0.1}}])))
    first = harness.sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    versions["v1"] = harness.results("ver", tracking_uri=tracking_uri).trials.set_index(
        "optimizer").loc["my_sgd", "source_version"].iloc[0]
    (tmp_path / "my_opts.py").write_text(MY_OPT.format(expr="same(step_size)"))  # what it runs changed
    dry = harness.sweep(cfg, tracking_uri=tracking_uri, dry_run=True, quiet=True)
    new_ids = set(dry.trial_ids) - set(first.trial_ids)
    assert len(new_ids) == 2  # my_sgd's two seeds: new ids; adam's are skipped
    from harness.config.load import load_config
    from harness.orchestrate.preflight import preflight

    versions["v2"] = next(s.optimizer_source_hash for s in preflight(load_config(cfg), str(cfg))
                          if s.optimizer == "my_sgd")
    assert versions["v2"] != versions["v1"]
    harness.sweep(cfg, tracking_uri=tracking_uri, quiet=True)

    now = harness.results("ver", tracking_uri=tracking_uri)
    assert len(now.trials) == 4 and set(now.trials["optimizer"]) == {"adam", "my_sgd"}
    assert set(now.trials.loc[now.trials["optimizer"] == "my_sgd", "source_version"]) == {versions["v2"]}
    assert now.older_versions.to_dict("records") == [
        {"optimizer": "my_sgd", "source_version": versions["v1"], "trials": 2}]
    assert "Older source versions left out: my_sgd (1 older version, 2 trials)" in now._repr_html_()
    board = now.leaderboard.set_index("optimizer")
    assert board.loc["my_sgd", "test_mean"] == pytest.approx(0.79)

    everything = harness.results("ver", versions="all", tracking_uri=tracking_uri)
    v1, v2 = f"my_sgd@{versions['v1'][:8]}", f"my_sgd@{versions['v2'][:8]}"
    assert len(everything.trials) == 6 and everything.older_versions.empty
    board = everything.leaderboard.set_index("optimizer")
    assert sorted(board.index) == sorted(["adam", v1, v2])
    assert board.loc[v1, "test_mean"] == pytest.approx(0.89)
    assert board.loc[v2, "test_mean"] == pytest.approx(0.79)
    assert board.loc[v1, "config"].startswith(v1) and board.loc[v1, "config_id"] != board.loc[v2, "config_id"]
    with pytest.raises(ValueError, match="versions"):
        harness.results("ver", versions="some", tracking_uri=tracking_uri)
    with pytest.raises(ValueError, match=r"no MLflow experiment named 'vre'.*did you mean 'ver'"):
        harness.results("vre", tracking_uri=tracking_uri)
    with pytest.raises(ValueError, match="no MLflow store at"):
        harness.results("ver", tracking_uri=f"sqlite:///{tmp_path}/other.db")
    assert not (tmp_path / "other.db").exists()


def test_the_sqlite_snapshot_reads_what_mlflow_reads(tmp_path, tracking_uri, fake_trainer):
    """reports.frame.load_sweep on the sqlite3 snapshot and on MlflowClient: the same frame, value
    for value (three invocations: one with only, a failed trial, a grown config carried over)."""
    from reports.frame import load_sweep
    from reports.runs import mlflow_client
    from reports.snapshot import StoreSnapshot

    harness.sweep(_cfg(), tracking_uri=tracking_uri, only="optimizer=adam", quiet=True)
    fake_trainer["raise_for"] = (1,)
    harness.sweep(_cfg(), tracking_uri=tracking_uri, quiet=True)
    fake_trainer["raise_for"] = (2,)
    harness.sweep(_cfg(seeds=[0, 1, 2]), tracking_uri=tracking_uri, quiet=True)
    path = tracking_uri[len("sqlite:///"):]
    a = load_sweep("api", client=StoreSnapshot(path, "api"))
    b = load_sweep("api", client=mlflow_client(tracking_uri))
    pd.testing.assert_frame_equal(a.frame, b.frame)
    assert a.frame.attrs == b.frame.attrs and a.config_yaml == b.config_yaml and a.sweep_id == b.sweep_id
    assert a.frame[a.frame["row"] == "summary"]["trial_id"].nunique() == 9
    assert (a.frame["status"] == "failed").any()


def test_sweep_only_on_the_command_line(tmp_path, tracking_uri, fake_trainer):
    from typer.testing import CliRunner

    from harness.cli import app

    path = tmp_path / "api.yaml"
    path.write_text(yaml.safe_dump(_cfg()))
    runner = CliRunner()
    r = runner.invoke(app, ["sweep", str(path), "--tracking-uri", tracking_uri, "--only", "optimizer=sgd",
                            "--only", "seed=0", "-q"])
    assert r.exit_code == 0, r.output
    whole = harness.sweep(path, tracking_uri=tracking_uri, dry_run=True, quiet=True)
    sgd0 = harness.sweep(path, tracking_uri=tracking_uri, only={"optimizer": "sgd", "seed": 0},
                         dry_run=True, quiet=True)
    assert sorted(fake_trainer["calls"]) == sorted(sgd0.trial_ids) and len(sgd0.trial_ids) == 2
    assert whole.counts["skipped"] == 2  # the whole config's plan sees them done
    r = runner.invoke(app, ["sweep", str(path), "--tracking-uri", tracking_uri, "--only", "optimizer=adm"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines()[-1] == (
        f"error: only: optimizer=adm: no trial of {path} has it; its optimizer values: adam, sgd "
        "(did you mean 'adam'?)")


def test_a_quiet_dry_run_prints_nothing_and_gives_the_plan(tmp_path, tracking_uri, capfd):
    """``dry_run=True, quiet=True`` (a notebook asking for the planned trial ids) prints nothing
    (before: the whole plan table, one block per trial); without ``quiet`` the plan is printed."""
    quiet = harness.sweep(_cfg(), tracking_uri=tracking_uri, dry_run=True, quiet=True)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert quiet.dry_run and len(quiet.trial_ids) == 6 and quiet.counts["finished"] == 0
    loud = harness.sweep(_cfg(), tracking_uri=tracking_uri, dry_run=True)
    out, _ = capfd.readouterr()
    assert loud.trial_ids == quiet.trial_ids
    assert all(tid in out for tid in quiet.trial_ids) and "to run: 6 new" in out


def test_a_dry_run_lists_at_most_its_row_limit_and_says_so(tmp_path, tracking_uri, capfd, monkeypatch):
    """A 10,000-trial dry run printed 70,000 lines (10 of its 15 s; the attack's F7: 50,000 trials
    took 75 s): the list stops at ``DRY_RUN_ROWS`` (1,000), here set to 4 of the 6 trials, with a
    line saying so; the counts and the API's trial ids still cover every trial."""
    from harness.orchestrate import progress

    monkeypatch.setattr(progress, "DRY_RUN_ROWS", 4)
    run = harness.sweep(_cfg(), tracking_uri=tracking_uri, dry_run=True)
    out, _ = capfd.readouterr()
    assert [tid in out for tid in run.trial_ids] == [True] * 4 + [False] * 2
    assert "to run: 6 new" in out and len(run.trial_ids) == 6
    assert "(4 of 6 trials are listed, those to run first; the counts cover all; --only AXIS=VALUE lists " \
        "part" in " ".join(out.split())
    # a resumed sweep: the trials still to run come first (the review's F9: the first rows were done)
    harness.sweep(_cfg(), tracking_uri=tracking_uri, only={"optimizer": "sgd"}, quiet=True)
    again = harness.sweep(_cfg(), tracking_uri=tracking_uri, dry_run=True)
    out, _ = capfd.readouterr()
    adam = [tid for tid in again.trial_ids if tid not in {o.trial_id for o in again.summary.outcomes}]
    assert len(adam) == 2 and all(tid in out for tid in adam)


def test_a_trial_run_left_running_is_not_a_finished_result(tmp_path, tracking_uri, fake_trainer):
    """A trial run is created with its result's tags (``status: finished``) and ended after its
    ``log_batch``: a kill in between leaves it RUNNING. ``trial_state`` calls that trial pending and
    the next sweep trains it again; ``results`` used to show it as ``finished`` (the tag won), so the
    leaderboard ranked a result whose write was cut short. Found by an attack."""
    from mlflow import MlflowClient

    run = harness.sweep(_cfg(), tracking_uri=tracking_uri, quiet=True)
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name("api")
    victim = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'trial'")[0]
    assert victim.data.tags["status"] == "finished"
    client.update_run(victim.info.run_id, status="RUNNING")  # the state a kill before set_terminated leaves
    res = run.results()
    t = res.trials.set_index("trial_id")
    tid = victim.data.tags["harness.trial_id"]
    # pending, as status says: not a row, not a seed of the leaderboard (the review's F4: it was a
    # task of its own, "mlp · digits #1", its params never written, ranked 1)
    assert tid not in t.index and len(t) == 5 and (t["status"] == "finished").all()
    assert res.leaderboard["task"].nunique() == 1


def test_the_commands_a_sweep_prints_at_its_end_paste_into_a_shell(tmp_path, fake_trainer, capsys):
    """A sweep named ``my exp [v2]`` printed ``report --experiment my exp  --sweep ...`` (rich ate
    ``[v2]`` as markup, and the shell split the name): the attack's F6. Now the name and the URI are
    shell-quoted and the line is printed as is."""
    import shlex

    uri = f"sqlite:///{tmp_path}/a b.db"
    run = harness.sweep(_cfg(name="my exp [v2]"), tracking_uri=uri)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("HTML report:"))
    argv = shlex.split(line.split(":", 1)[1])
    assert argv[1:] == ["-m", "harness", "report", "--experiment", "my exp [v2]", "--sweep", run.sweep_id,
                        "--tracking-uri", uri]
    ui = next(x for x in out.splitlines() if x.startswith("Open the MLflow UI:"))
    assert shlex.split(ui.split(":", 1)[1])[4:6] == ["--experiment", "my exp [v2]"]


def test_options_of_the_wrong_type_are_usage_errors_before_anything_runs(tmp_path, tracking_uri,
                                                                         fake_trainer):
    """The attack's F5: ``only=5`` and ``tracking_uri=5`` raised a bare ``TypeError`` from deep
    inside, ``max_trials="10"`` compared a str with an int, ``max_trials=0`` blamed the config's
    ``seeds``, and ``dry_run="no"`` / ``compile_cache="off"`` were taken as true."""
    cases = {"only": (5, "only: must be a mapping such as {'optimizer': 'adam'}, a string such as "
                         "'optimizer=adam' or a list of such strings, got int 5"),
             "tracking_uri": (5, "tracking_uri: must be a string such as 'sqlite:///mlflow.db', got int 5"),
             "max_trials": ("10", "max_trials: must be a whole number >= 1, got str '10'"),
             "dry_run": ("no", "dry_run: must be True or False, got str 'no'"),
             "quiet": ("yes", "quiet: must be True or False, got str 'yes'"),
             "compile_cache": ("off", "compile_cache: must be True or False, got str 'off'")}
    for name, (value, message) in cases.items():
        kw = {"tracking_uri": tracking_uri, name: value}
        with pytest.raises(harness.UsageError) as e:
            harness.sweep(_cfg(), **kw)
        assert (e.value.key_path, str(e.value)) == (name, message)
    with pytest.raises(harness.UsageError, match=r"^max_trials: must be a whole number >= 1, got int 0$"):
        harness.sweep(_cfg(), tracking_uri=tracking_uri, max_trials=0)
    # what the old code took stays accepted (the review's F3): the command line's list form of only,
    # NumPy integers and booleans
    run = harness.sweep(_cfg(), tracking_uri=tracking_uri, only=["optimizer=adam", "seed=0"],
                        max_trials=np.int64(50), dry_run=np.bool_(True), quiet=True)
    assert run.dry_run and len(run.trial_ids) == 1
    with pytest.raises(TypeError, match=r"^results\(\): experiment must be the sweep's name \(a string\), "
                                        r"got int 5$"):
        harness.results(5, tracking_uri=tracking_uri)
    assert fake_trainer["calls"] == [] and not (tmp_path / "mlflow.db").exists()
