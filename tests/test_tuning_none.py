"""``tuning: none`` (AlgoPerf's self-tuning track): an optimizer entry that runs one configuration.

Config acceptance and rejection (exact messages), expansion (one configuration × seeds, other trial
ids unchanged, budgets and the dry run), the ``harness.tuning`` tag in MLflow after a real sweep,
and the report: a horizontal line at the self-tuning optimizer's value on the tuning-curve panel.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.config.errors import ConfigError
from harness.config.load import load_config
from harness.core import names as N
from harness.plan.expansion import budgets, expand, search_tags, unequal_budgets

PRODIGY = {"name": "prodigy", "tuning": "none", "hparams": {"step_size": 1.0}}


def _errors(write_sweep, **overrides) -> list[str]:
    path = write_sweep(**overrides)
    with pytest.raises(ConfigError) as ei:
        expand(load_config(path), file=str(path))
    return [e.replace(str(path), "F") for e in ei.value.errors]


# --------------------------------------------------------------------------- config


def test_tuning_none_is_read_from_yaml_text(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: t\nmodels: [mlp]\ndatasets: [digits]\nbudget: {steps: 10}\nseeds: 3\n"
                 "optimizers:\n  - {name: prodigy, tuning: none, hparams: {step_size: 1.0, eps: 1.0e-6}}\n"
                 "  - {name: adam, hparams: {step_size: [0.001, 0.01]}}\n")
    cfg = load_config(p)
    assert [c.tuning for c in cfg.optimizers] == ["none", None]
    specs = expand(cfg)
    own = [s for s in specs if s.optimizer == "prodigy"]
    assert [(s.seed, s.hparams("optimizer")) for s in own] == [
        (seed, {"step_size": 1.0, "eps": 1e-6}) for seed in (0, 1, 2)]


def test_tuning_none_rejections(write_sweep):
    assert _errors(write_sweep, optimizers=[
        {"name": "sgd", "hparams": {"step_size": 0.1}},
        {"name": "prodigy", "tuning": "none", "hparams": {"step_size": [0.5, 1.0]}},
        {"name": "adam", "tuning": "none", "hparams": {"step_size": {"log_uniform": [1e-4, 1e-2]}}},
        {"name": "prodigy", "tuning": "none", "hparams": {"step_size": 1.0}, "search": {"trials": 4}},
        {"name": "prodigy", "tuning": "none"}]) == [
        "F: optimizers[4].hparams: tuning: none runs 'prodigy' with its defaults, but it has no default "
        "step_size; fix one here (hparams: {step_size: ...})",
        "F: optimizers[1].hparams.step_size: tuning: none runs one configuration; a grid here would "
        "tune it",
        "F: optimizers[2].hparams.step_size: tuning: none runs one configuration; a distribution here "
        "would tune it",
        "F: optimizers[3].search: tuning: none runs one configuration; a search override would tune it "
        "(remove one of the two)"]
    assert _errors(write_sweep, models=[{"name": "mlp", "tuning": "none"}],
                   include=[{"schedules": [{"name": "constant", "tuning": "none"}]}]) == [
        "F: models[0].tuning: only optimizer entries take tuning: none (the optimizer then runs with "
        "its defaults)",
        "F: include[0].schedules[0].tuning: only optimizer entries take tuning: none (the optimizer "
        "then runs with its defaults)"]
    assert _errors(write_sweep, optimizers=[{**PRODIGY, "tuning": "auto"}]) == [
        "F: optimizers[0].tuning: expected none (the optimizer runs one configuration, its defaults) "
        "or no tuning key, got 'auto'"]
    # one configuration per task: two schedules would tune it (caught when the trials are formed)
    assert _errors(write_sweep, optimizers=[PRODIGY], schedules=["constant", "cosine_decay"]) == [
        "F: optimizers[0].tuning: tuning: none runs one configuration per task, but digits · mlp "
        "(width=16, depth=1) gives it 2 (they differ in schedule); pair it with one schedule, batch "
        "size and fixed model (an include entry, or an exclude rule)"]


def test_one_value_list_and_a_user_default_step_size_are_one_configuration(write_sweep, tmp_path):
    src = tmp_path / "mine.py"
    src.write_text("from optimizers import sgd\n\ndef my_sgd(step_size=0.05):\n    return sgd(step_size)\n")
    cfg = load_config(write_sweep(optimizers=[
        {"name": "mine", "source": f"{src}:my_sgd", "tuning": "none"},
        {"name": "prodigy", "tuning": "none", "hparams": {"step_size": [1.0]}}]))
    specs = expand(cfg)
    assert sorted((s.optimizer, s.seed) for s in specs) == [("mine", 0), ("mine", 1), ("prodigy", 0),
                                                            ("prodigy", 1)]


# --------------------------------------------------------------------------- expansion


def test_expansion_budgets_tags_and_unchanged_ids(write_sweep):
    tuned = [{"name": "adam", "hparams": {"step_size": {"log_uniform": [1e-4, 1e-1]}}},
             {"name": "sgd", "hparams": {"step_size": [0.1, 0.3]}}]
    without = expand(load_config(write_sweep("a.yaml", search={"trials": 3}, optimizers=tuned)))
    with_own = expand(load_config(write_sweep("b.yaml", search={"trials": 3}, optimizers=[*tuned, PRODIGY])))
    assert [s.trial_id for s in with_own if s.optimizer != "prodigy"] == [s.trial_id for s in without]
    own = [s for s in with_own if s.optimizer == "prodigy"]
    assert [(s.seed, s.hparams("optimizer")) for s in own] == [(0, {"step_size": 1.0}),
                                                               (1, {"step_size": 1.0})]
    # the label is not part of a trial's identity: the same entry without it is the same trial
    plain = expand(load_config(write_sweep("c.yaml", optimizers=[{"name": "prodigy",
                                                                  "hparams": {"step_size": 1.0}}])))
    assert [s.trial_id for s in plain] == [s.trial_id for s in own]
    task = "digits · mlp (width=16, depth=1)"
    assert budgets(with_own) == {task: {"adam": 3, "sgd": 2}}
    assert budgets(with_own, self_tuning=True) == {task: {"prodigy": 1}}
    tags = search_tags(with_own)
    assert [tags[s.trial_id] for s in own] == [{N.TAG_TUNING: "none"}] * 2
    assert all(N.TAG_TUNING not in tags.get(s.trial_id, {}) for s in with_own if s.optimizer != "prodigy")
    # equal budgets among the tuned optimizers: no warning for the one self-tuning configuration
    eq = expand(load_config(write_sweep("d.yaml", optimizers=[
        {"name": "sgd", "hparams": {"step_size": [0.1, 0.3]}}, PRODIGY])))
    assert unequal_budgets(eq) == []
    assert len(unequal_budgets(with_own)) == 1 and "prodigy" not in unequal_budgets(with_own)[0]


def test_a_trial_both_kinds_of_entry_yield_says_so(write_sweep):
    specs = expand(load_config(write_sweep(optimizers=[
        {"name": "adam", "tuning": "none", "hparams": {"step_size": 0.01}},
        {"name": "adam", "hparams": {"step_size": [0.01, 0.1]}}])))
    assert len(specs) == 4
    tags = search_tags(specs)
    assert {s.hparams("optimizer")["step_size"]: tags.get(s.trial_id, {}).get(N.TAG_TUNING)
            for s in specs} == {0.01: "none,tuned", 0.1: None}
    task = "digits · mlp (width=16, depth=1)"
    assert budgets(specs) == {task: {"adam": 2}} and budgets(specs, self_tuning=True) == {task: {"adam": 1}}


def test_dry_run_shows_the_self_tuning_budget(write_sweep, tmp_path, monkeypatch):
    from rich.console import Console

    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    console = Console(record=True, width=200)
    run_sweep(write_sweep(optimizers=[{"name": "sgd", "hparams": {"step_size": [0.1, 0.3]}}, PRODIGY]),
              tracking_uri=f"sqlite:///{tmp_path / 'none.db'}", dry_run=True, console=console)
    text = console.export_text()
    rows = [" ".join(ln.replace("│", " ").split()) for ln in text.splitlines() if "digits · mlp" in ln]
    assert "digits · mlp (width=16, depth=1) sgd 2" in rows
    assert "digits · mlp (width=16, depth=1) prodigy 1 (tuning: none)" in rows
    assert "unequal tuning budgets" not in text
    assert not (tmp_path / "none.db").exists()


# --------------------------------------------------------------------------- a real sweep and its report


def test_real_sweep_tags_the_runs_and_the_report_draws_a_horizontal_line(write_sweep, tracking_uri,
                                                                          tmp_path, monkeypatch):
    from mlflow import MlflowClient

    from harness.orchestrate.run import run_sweep
    from reports import figures as F
    from reports import frame as RF
    from reports import interactive as I
    from reports import protocol as P

    monkeypatch.chdir(tmp_path)
    cfg = write_sweep(name="selftune", optimizers=[
        {"name": "sgd", "hparams": {"step_size": [0.03, 0.1, 0.3]}}, PRODIGY])
    summary = run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    assert summary.counts()["finished"] == 8
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name("selftune")
    runs = c.search_runs([exp.experiment_id], "tags.`harness.kind` = 'trial'")
    assert sorted((r.data.tags["optimizer"], r.data.tags.get(N.TAG_TUNING)) for r in runs) == [
        ("prodigy", "none")] * 2 + [("sgd", None)] * 6

    frame = RF.load_frame("selftune", tracking_uri=tracking_uri)
    s = RF.summaries(frame)
    assert set(s.loc[s["optimizer"] == "prodigy", "tuning"]) == {"none"}
    assert set(s.loc[s["optimizer"] == "prodigy", "config"]) == {"prodigy (self-tuning)"}
    assert not s.loc[s["optimizer"] == "sgd", "config"].str.contains("self-tuning").any()
    lb = F.leaderboard(frame).set_index("Optimizer")
    assert lb.loc["prodigy", "Best configuration"] == "prodigy (self-tuning)"
    # the seed mean of prodigy's final validation accuracy (the task's objective: an accuracy target)
    own = s[s["optimizer"] == "prodigy"]
    want_valid = float(own[N.M_FINAL_ACC].mean())
    want_test = float(own[N.M_TEST_ACC].mean())
    tc = P.tuning_curves(frame)
    row = tc[tc["self_tuning"]]
    assert row[["optimizer", "label", "k", "n_configs"]].values.tolist() == [
        ["prodigy", "prodigy (self-tuning)", 1, 1]]
    assert row["valid"].iloc[0] == pytest.approx(want_valid, abs=1e-12)
    assert tc.loc[~tc["self_tuning"], "optimizer"].unique().tolist() == ["sgd"]
    assert tc.loc[~tc["self_tuning"], "k"].tolist() == [1, 2, 3]

    fig = F.tuning_figure(frame)
    ax = next(a for a in fig.axes if a.get_visible())
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    valid = lines["prodigy (self-tuning)"]
    assert list(valid.get_ydata()) == pytest.approx([want_valid, want_valid], abs=1e-12)
    assert list(valid.get_xdata()) == [0, 1]  # axes coordinates: across every k
    assert valid.get_linestyle() == "-"
    test = lines["prodigy (self-tuning): test"]
    assert list(test.get_ydata()) == pytest.approx([want_test, want_test], abs=1e-12)
    assert test.get_linestyle() == "--"
    assert ax.get_xlim()[0] <= 1 and ax.get_xlim()[1] >= 3  # the tuned curve's k = 1..3 are in view
    legend_texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "prodigy (self-tuning)" in legend_texts and "prodigy" not in legend_texts

    spec = I.tuning_curves_spec(frame)
    I.compile_check(spec)
    legends = [layer["encoding"]["color"].get("legend") for layer in spec["spec"]["layer"]]
    assert None not in legends  # one layer's legend None would drop the colour legend of all
    assert "prodigy" in legends[0]["labelExpr"] and "(self-tuning)" in legends[0]["labelExpr"]
    rule = spec["spec"]["layer"][-1]
    assert rule["mark"]["type"] == "rule" and "x" not in rule["encoding"]
    rows = [r for r in spec["data"]["values"] if r["self_tuning"]]
    got = {(r["line"], r["curve"]): r["value"] for r in rows}
    assert got == pytest.approx({("prodigy (self-tuning)", "validation (selects)"): want_valid,
                                 ("prodigy (self-tuning)", "test of the selected"): want_test})
    assert np.isfinite(want_valid) and want_valid != want_test
    csv = P.csv_rows(frame)
    curve_rows = csv[csv["row"] == "tuning_curve"]
    assert curve_rows.loc[curve_rows["tuning.self_tuning"].eq(True), "optimizer"].tolist() == ["prodigy"]
    assert curve_rows["tuning.self_tuning"].eq(False).sum() == 3  # sgd, k = 1..3
