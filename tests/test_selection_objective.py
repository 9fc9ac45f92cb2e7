"""The selection objective: ``selection: {by: final | best | time_to_target}`` in the
config, ``report --select-by``; one rule (:func:`harness.core.selection_rule.selection_key`) for the
report's and the end-of-sweep summary's selection, and every view says which."""

from __future__ import annotations

import io
import math

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from harness.cli import app
from harness.core import names as N
from harness.core.outcome import TrialOutcome
from harness.core.selection_rule import selection_key
from harness.orchestrate.summary import SweepSummary, best_configs, print_summary
from reports import frame as RF
from reports import protocol as P
from reports import selection as RS
from reports.figures import leaderboard

runner = CliRunner()

#: The digits MLP with sgd that a new user saw: cosine reaches valid/accuracy 0.9 first
#: (125 steps against 150) but ends lower (0.946 against 0.969); "warmup" reaches it last and ends
#: lowest, but its best evaluation during training (0.975) is the highest. adam reaches the target
#: fastest and ends at 0.955. config → (steps to target, seconds, final, best) per seed 0 and 1.
DIGITS_SGD = {
    ("sgd", "constant"): ((150, 0.12, 0.968, 0.969), (150, 0.12, 0.970, 0.971)),
    ("sgd", "cosine"): ((125, 0.10, 0.945, 0.950), (125, 0.10, 0.947, 0.952)),
    ("sgd", "warmup"): ((175, 0.14, 0.929, 0.974), (175, 0.14, 0.931, 0.976)),
    ("adam", "constant"): ((100, 0.05, 0.954, 0.956), (100, 0.05, 0.956, 0.958)),
}


def _outcomes() -> list[TrialOutcome]:
    out = []
    for (opt, sched), seeds in DIGITS_SGD.items():
        for seed, (steps, secs, final, best) in enumerate(seeds):
            out.append(TrialOutcome(
                trial_id=f"{opt}-{sched}-{seed}", status="finished", model="mlp", optimizer=opt,
                schedule=sched, dataset="digits", seed=seed, config=f"{sched} lr=0.1",
                final_valid_accuracy=final, final_valid_loss=1 - final, best_valid_accuracy=best,
                best_valid_loss=1 - best, test_accuracy=final - 0.01, test_loss=1.01 - final,
                steps_to_target=steps, seconds_to_target=secs))
    return out


def _frame(outcomes: list[TrialOutcome], by: str | None = None) -> pd.DataFrame:
    """The report's summary rows of ``outcomes`` (what :func:`reports.frame.build_frame` reads back
    from MLflow), selecting by ``by`` (``None``: as a sweep that recorded no objective)."""
    f = pd.DataFrame([{
        "row": "summary", "task": f"{o.model} / {o.dataset}", "model": o.model, "dataset": o.dataset,
        "optimizer": o.optimizer, "config_id": o.config, "config": o.config, "status": o.status,
        "seed": o.seed, N.M_SECONDS_TO_TARGET: o.seconds_to_target, N.M_STEPS_TO_TARGET: o.steps_to_target,
        N.M_FINAL_ACC: o.final_valid_accuracy, N.M_FINAL_LOSS: o.final_valid_loss,
        N.M_BEST_ACC: o.best_valid_accuracy, N.M_BEST_LOSS: o.best_valid_loss,
        N.M_TEST_ACC: o.test_accuracy, N.M_TEST_LOSS: o.test_loss, N.M_STEP_MS: 1.0,
        "protocol": RF.PROTOCOL_THREE_SPLITS, "target_metric": "valid/accuracy", "target_mode": "max",
        "target_value": 0.9} for o in outcomes])
    if by is not None:
        f.attrs[RF.SELECT_BY_ATTR] = by
    return f


@pytest.mark.parametrize("by, sgd, value, ranks", [
    ("time_to_target", "cosine lr=0.1", 0.946, {"adam": 1, "sgd": 2}),  # today's rule
    ("final", "constant lr=0.1", 0.969, {"sgd": 1, "adam": 2}),
    ("best", "warmup lr=0.1", 0.975, {"sgd": 1, "adam": 2}),
])
def test_each_objective_selects_its_configuration_in_the_report_and_the_summary(by, sgd, value, ranks):
    outcomes = _outcomes()
    rows = {r["optimizer"]: r for r in best_configs(outcomes, by)}
    assert rows["sgd"]["config"] == sgd
    assert rows["sgd"]["value"] == pytest.approx(value)  # the value it was selected on
    assert rows["adam"]["config"] == "constant lr=0.1"
    best = RS.best_configs(_frame(outcomes, by)).set_index("optimizer")
    assert best.loc["sgd", "config"] == sgd  # the report selects the same configuration
    assert best["rank"].to_dict() == ranks  # and ranks optimizers by the same objective
    lb = leaderboard(_frame(outcomes, by)).set_index("Optimizer")
    # the leaderboard writes ranks as labels ("2", or "2=" when shared: reports.ranks)
    assert lb.loc["sgd", "Best configuration"] == sgd
    assert lb["Rank"].to_dict() == {k: str(v) for k, v in ranks.items()}
    best_col = "Best validation value during training (selects)"
    if by == "best":  # the value it was selected on, beside the final one
        assert lb.loc["sgd", best_col] == "0.9750 [0.9740, 0.9760]"
        assert lb.loc["sgd", "Validation accuracy"] == "0.9300 [0.9290, 0.9310]"
    else:
        assert best_col not in lb


def test_the_default_selects_as_before_the_objective_existed():
    """No ``selection`` in the config, no tag on the parent run: time to target, as before."""
    outcomes = _outcomes()
    assert best_configs(outcomes) == best_configs(outcomes, "time_to_target")
    assert {r["optimizer"]: r["config"] for r in best_configs(outcomes)} == \
        {"sgd": "cosine lr=0.1", "adam": "constant lr=0.1"}
    assert RS.select_by(_frame(outcomes)) == "time_to_target"
    assert RS.best_configs(_frame(outcomes)).set_index("optimizer").loc["sgd", "config"] == "cosine lr=0.1"
    # the key of every configuration is the one of before: explicit time_to_target == the default
    args = [(3, 100, 3, 0.80, True, 9.0, "z"), (2, 50, 3, 0.99, True, 0.1, "a"),
            (2, None, 2, None, True, None, "a"), (0, None, 1, 0.1, False, None, "a")]
    for a in args:
        assert selection_key(*a) == selection_key(*a, by="time_to_target") == (
            -a[0], math.inf if a[1] is None else a[1], -a[2],
            math.inf if a[3] is None else (-1 if a[4] else 1) * a[3],
            math.inf if a[5] is None else a[5], a[6])


def test_final_and_best_order_finished_then_value_never_seconds_before_the_metric():
    key = selection_key
    ranked = [
        key(0, None, 3, 0.90, True, None, "z"),  # most seeds finished (none reached)
        key(3, 100, 2, 0.99, True, 0.1, "a"),    # fewer finished, despite reaching and the value
        key(3, 100, 2, 0.98, True, 0.1, "a"),    # worse value
        key(2, 50, 2, 0.98, True, 0.1, "a"),     # fewer reached
        key(2, 60, 2, 0.98, True, 0.1, "a"),     # more steps
        key(2, 60, 2, 0.98, True, 0.2, "a"),     # slower in seconds
        key(2, 60, 2, 0.98, True, 0.2, "b"),     # the name
    ]
    for by in ("final", "best"):
        keys = [key(*k_args, by=by) for k_args in _args(ranked)]
        assert sorted(keys) == keys and len(set(keys)) == len(keys), by
    assert key(0, None, 1, 0.1, False, None, "a", by="final") < key(0, None, 1, 0.2, False, None, "a",
                                                                   by="final")  # loss: lower wins
    with pytest.raises(ValueError, match="selection by must be one of time_to_target, final, best; got 'x'"):
        key(0, None, 1, 0.1, False, None, "a", by="x")


def _args(keys):
    """The arguments back from time-to-target keys (to re-key them by another objective)."""
    return [(-k[0], None if k[1] == math.inf else k[1], -k[2], None if k[3] == math.inf else -k[3], True,
             None if k[4] == math.inf else k[4], k[5]) for k in keys]


def test_a_frame_whose_objective_changes_is_not_served_the_old_selection():
    f = _frame(_outcomes())
    assert RS.best_configs(f).set_index("optimizer").loc["sgd", "config"] == "cosine lr=0.1"
    f.attrs[RF.SELECT_BY_ATTR] = "final"  # report --select-by final, on the same (memoised) frame
    assert RS.best_configs(f).set_index("optimizer").loc["sgd", "config"] == "constant lr=0.1"
    f.attrs[RF.SELECT_BY_ATTR] = "fastest"
    with pytest.raises(ValueError, match="got 'fastest'"):
        RS.best_configs(f)


def test_tuning_curves_follow_the_objective_and_say_which():
    outcomes = _outcomes()
    valid = {by: P.config_values(_frame(outcomes, by)).set_index(["optimizer", "config_id"])
             for by in ("time_to_target", "final", "best")}
    assert valid["best"].loc[("sgd", "warmup lr=0.1"), "valid"] == pytest.approx(0.975)
    assert valid["best"].loc[("sgd", "warmup lr=0.1"), "metric"] == N.M_BEST_ACC
    assert valid["final"].loc[("sgd", "warmup lr=0.1"), "valid"] == pytest.approx(0.930)
    assert valid["time_to_target"].loc[("sgd", "warmup lr=0.1"), "valid"] == pytest.approx(0.930)
    tc = P.tuning_curves(_frame(outcomes, "best"), n_boot=10)
    sgd = tc[tc["optimizer"] == "sgd"].set_index("k")
    assert sgd.loc[3, "valid"] == pytest.approx(0.975)  # all three tried: the best one's best value
    assert RS.tuning_value_words(_frame(outcomes, "best")).startswith(
        "Its validation value is its best evaluation during training")
    assert RS.tuning_value_words(_frame(outcomes)) == (
        "The leaderboard selects by time to target, which gives no validation value to draw: these "
        "curves use each configuration's final validation value (report --select-by final|best "
        "selects on it).")


def test_the_report_and_the_summary_say_which_objective_selected():
    outcomes = _outcomes()
    assert RS.selection_caption(_frame(outcomes, "final")) == "selected on validation by final accuracy"
    assert RS.selection_caption(_frame(outcomes, "best")) == \
        "selected on validation by best accuracy during training"
    assert RS.selection_sentence(_frame(outcomes), "final validation accuracy").startswith(
        "selected on validation by time to target (by seeds reaching the validation target, then "
        "median steps to it, then seeds finished, then final validation accuracy;")
    from rich.console import Console

    for by, title in (("final", "selected on validation by final accuracy"),
                      ("time_to_target", "selected on validation by time to target")):
        buf = io.StringIO()
        print_summary(Console(file=buf, width=250), SweepSummary(
            "digits", "sid", None, None, "sqlite:///x.db", outcomes, 1.0, select_by=by))
        lines = [ln.strip() for ln in buf.getvalue().splitlines()]
        assert lines[:2] == ["digits: best configuration per task and optimizer", title]
        row = next(ln for ln in lines if " sgd " in ln)
        assert ("0.9690" if by == "final" else "0.9460") in row  # the selected one's validation value


def test_best_is_logged_from_the_curve_and_read_back():
    """``best/valid_*`` is the curve's best evaluation (not its last): logged with the trial and
    read by the summary from the result (a stored run: :func:`_old_run_reads_best_from_its_curve`)."""
    from conftest import make_spec

    from harness.core.spec import Curves, TrialResult
    from harness.tracking.trial_run import result_metrics

    c = Curves(eval_step=[0, 10, 20], eval_wall_s=[0.0, 0.1, 0.2], eval_loss=[2.0, 0.4, float("nan")],
               eval_accuracy=[0.1, 0.8, 0.7])
    res = TrialResult(spec=make_spec(), status="finished", curves=c, final_valid_loss=0.5,
                      final_valid_accuracy=0.7)
    logged = {k: v for k, v, _s, _t in result_metrics(res, 0).rows}
    assert logged[N.M_BEST_ACC] == 0.8 and logged[N.M_BEST_LOSS] == 0.4  # the nan is no evaluation
    o = TrialOutcome.from_result(res)
    assert (o.best_valid_accuracy, o.best_valid_loss) == (0.8, 0.4)


def _old_run_reads_best_from_its_curve(client):
    """A run logged before ``best/valid_*`` existed: the report reads its curve's best evaluation;
    the summary (which reads no histories) has none."""
    from conftest import make_spec

    exp = client.create_experiment("old")
    run = client.create_run(exp, tags={N.TAG_TRIAL_ID: "t0", N.TAG_STATUS: "finished", N.TAG_MODEL: "mlp",
                                       N.TAG_OPTIMIZER: "sgd", N.TAG_DATASET: "digits", N.TAG_SEED: "0"})
    for step, acc in ((0, 0.1), (10, 0.8), (20, 0.7)):
        client.log_metric(run.info.run_id, N.M_VALID_ACC, acc, step=step)
    client.set_terminated(run.info.run_id)
    frame = RF.build_frame(client, [client.get_run(run.info.run_id)], "old")
    s = RF.summaries(frame)
    assert s[N.M_BEST_ACC].tolist() == [0.8] and s[N.M_FINAL_ACC].tolist() == [0.7]
    assert TrialOutcome.from_run(make_spec(), client.get_run(run.info.run_id)).best_valid_accuracy is None


@pytest.mark.parametrize("selection, error", [
    ({"by": "fianl"}, "selection.by: must be one of time_to_target, final, best, got 'fianl' "
                      "(did you mean 'final'?)"),
    ({"by": 3}, "selection.by: must be one of time_to_target, final, best, got 3"),
    ({"by": None}, "selection.by: must be one of time_to_target, final, best, got None"),
    ({"by": "final", "how": "x"}, "selection.how: unknown key 'how'; valid keys: by"),
    ("final", "selection: expected a mapping with keys by, got 'final'"),
])
def test_a_bad_selection_is_one_line_naming_the_valid_objectives(selection, error):
    from harness.config.load import ConfigError, parse_config

    base = {"name": "t", "models": ["mlp"], "optimizers": ["sgd"], "datasets": ["digits"],
            "budget": {"steps": 10}}
    assert parse_config(base, "x").selection.by == "time_to_target"
    assert parse_config({**base, "selection": {"by": "best"}}, "x").selection.by == "best"
    with pytest.raises(ConfigError) as ei:
        parse_config({**base, "selection": selection}, "x")
    assert ei.value.errors == [f"x: {error}"]


def test_the_sweep_records_its_objective_and_the_report_follows_or_overrides_it(
        tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    from mlflow.tracking import MlflowClient

    from tests.test_cli import without_stages

    monkeypatch.chdir(tmp_path)
    bad = write_sweep("bad.yaml", selection={"by": "fastest"})
    r = runner.invoke(app, ["sweep", str(bad), "--tracking-uri", tracking_uri])
    assert r.exit_code == 2
    assert without_stages(r.output).splitlines()[-1] == (
        f"{bad}: selection.by: must be one of time_to_target, final, best, got 'fastest'")
    cfg = write_sweep(selection={"by": "final"}, seeds=[0])
    r = runner.invoke(app, ["sweep", str(cfg), "--tracking-uri", tracking_uri], terminal_width=250)
    assert r.exit_code == 0, r.output
    lines = [ln.strip() for ln in without_stages(r.output).splitlines()]
    i = lines.index("tiny: best configuration per task and optimizer")
    assert lines[i + 1] == "selected on validation by final accuracy"
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name("tiny")
    (parent,) = client.search_runs([exp.experiment_id], f"tags.{N.TAG_KIND} = 'parent'")
    assert parent.data.tags[N.TAG_SELECT_BY] == "final"
    (trial,) = client.search_runs([exp.experiment_id], f"tags.{N.TAG_KIND} = 'trial'")
    assert trial.data.metrics[N.M_BEST_ACC] == 0.9  # the fake curve rises to 0.9
    # a re-run that trains nothing opens no parent run: the latest parent takes the new objective
    again = write_sweep(selection={"by": "best"}, seeds=[0])
    r = runner.invoke(app, ["sweep", str(again), "--tracking-uri", tracking_uri], terminal_width=250)
    assert r.exit_code == 0 and "nothing to train, no new parent run" in r.output, r.output
    assert client.get_run(parent.info.run_id).data.tags[N.TAG_SELECT_BY] == "best"
    again = write_sweep(selection={"by": "final"}, seeds=[0])
    r = runner.invoke(app, ["sweep", str(again), "--tracking-uri", tracking_uri], terminal_width=250)
    assert client.get_run(parent.info.run_id).data.tags[N.TAG_SELECT_BY] == "final"
    _old_run_reads_best_from_its_curve(client)

    import reports.html

    monkeypatch.setattr(reports.html, "figure_items", lambda frame, stem: [])  # the text is the point

    def say(args):
        out = tmp_path / "r.html"
        r = runner.invoke(app, ["report", "-e", "tiny", "--tracking-uri", tracking_uri, "-o", str(out),
                                *args])
        assert r.exit_code == 0, r.output
        return out.read_text()

    html = say([])
    assert '<span id="selected-by">selected on validation by final accuracy</span>' in html  # the header
    assert "Best configuration of each optimizer per task, selected on validation by final accuracy (by " \
        "seeds finished" in html
    assert "selected on validation by best accuracy during training (by seeds finished" \
        in say(["--select-by", "best"])
    r = runner.invoke(app, ["report", "-e", "tiny", "--tracking-uri", tracking_uri, "--select-by", "fast"])
    assert r.exit_code == 2 and "'fast' is not one of 'time_to_target', 'final', 'best'" in r.output


def test_config_yaml_docs_name_the_key():
    from harness.config import load

    line = next(ln for ln in load.__doc__.splitlines() if ln.strip().startswith("selection:"))
    assert yaml.safe_load(line.split("#")[0]) == {"selection": {"by": "time_to_target"}}
