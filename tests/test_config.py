"""Sweep config validation (exact messages naming file and key path) and expansion into trials."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from harness.config.load import ConfigError, load_config, parse_config
from harness.config.values import hparam_values
from harness.orchestrate.run import expand, group_units, sweep_id_of


def _load(write_sweep, **overrides):
    return load_config(write_sweep(**overrides))


def _errors(write_sweep, **overrides) -> list[str]:
    path = write_sweep(**overrides)
    with pytest.raises(ConfigError) as ei:
        load_config(path)
    return [e.replace(str(path), "F") for e in ei.value.errors]


def test_unknown_model_names_choices_and_did_you_mean(write_sweep):
    assert _errors(write_sweep, models=["mlpp"]) == [
        "F: models[0].name: unknown model 'mlpp'; valid choices: autoencoder, cnn, cnn1d, gpt, logreg, mlp, "
        "resnet, resnet18, transformer_lm, vit (did you mean 'mlp'?)"]


def test_unknown_optimizer_schedule_dataset_hparam(write_sweep):
    errs = _errors(write_sweep, optimizers=[{"name": "addam", "hparams": {"step_size": 0.1}},
                                            {"name": "momentum", "hparams": {"step_size": 0.1, "mas": 0.9}}],
                   schedules=["cosine"], datasets=["digts", "tfds:MNIST"])
    assert errs[0].startswith(
        "F: optimizers[0].name: unknown optimizer 'addam'; valid choices: adafactor, adagrad, adam,")
    assert errs[0].endswith("(did you mean 'adam'?)")
    assert errs[1] == ("F: optimizers[1].hparams.mas: unknown hyperparameter of optimizer 'momentum'; "
                       "valid: step_size, mass (did you mean 'mass'?)")
    assert errs[2].startswith("F: schedules[0].name: unknown schedule 'cosine'; valid choices: constant,")
    assert errs[3].startswith(
        "F: datasets[0].name: unknown dataset 'digts'; valid choices: digits, markov_lm, mnist1d,")
    assert errs[3].endswith("(did you mean 'digits'?)")
    assert errs[4] == ("F: datasets[1].name: malformed TFDS dataset 'tfds:MNIST'; expected 'tfds:NAME', "
                       "'tfds:NAME/CONFIG' or 'tfds:NAME:1.2.3'")
    assert len(errs) == 5


def test_bad_types(write_sweep):
    errs = _errors(write_sweep, models=[{"name": "mlp", "hparams": {"width": "wide"}}],
                   optimizers=[{"name": "sgd", "hparams": {"step_size": "fast"}}], budget={"steps": "many"})
    assert errs == [
        "F: budget.steps: expected an integer (got 'many')",
    ]
    errs = _errors(write_sweep, models=[{"name": "mlp", "hparams": {"width": "wide"}}],
                   optimizers=[{"name": "sgd", "hparams": {"step_size": "fast"}}])
    assert errs == ["F: models[0].hparams.width: expected int, got 'wide'",
                    "F: optimizers[0].hparams.step_size: expected a number, got 'fast'"]


def test_negative_and_missing_step_size(write_sweep):
    errs = _errors(write_sweep, optimizers=[{"name": "adam", "hparams": {"step_size": [0.1, -0.1]}},
                                            "sgd"])
    assert errs == ["F: optimizers[0].hparams.step_size: must be > 0, got -0.1",
                    "F: optimizers[1].hparams: missing required hyperparameter 'step_size' of optimizer "
                    "'sgd'"]


def test_empty_axes(write_sweep):
    errs = _errors(write_sweep, schedules=[], seeds=[],
                   optimizers=[{"name": "sgd", "hparams": {"step_size": []}}])
    assert errs == ["F: optimizers[0].hparams.step_size: empty axis (needs at least one value)",
                    "F: schedules: empty axis (needs at least one value)",
                    "F: seeds: empty axis (needs at least one value)"]


def test_unknown_keys_top_and_nested(write_sweep):
    errs = _errors(write_sweep, seedz=[1], budget={"step": 10},
                   optimizers=[{"name": "sgd", "hparam": {"step_size": 0.1}}])
    assert errs[0] == ("F: optimizers[0].hparam: unknown key 'hparam'; valid keys: name, hparams, zip, "
                       "search, tuning, source, search_space (did you mean 'hparams'?)")
    assert errs[1] == ("F: budget.step: unknown key 'step'; valid keys: steps, epochs, tokens, "
                       "tokens_per_param (did you mean 'steps'?)")
    assert errs[2].startswith("F: seedz: unknown key 'seedz'; valid keys: name, description, models,")
    assert errs[2].endswith("(did you mean 'seeds'?)")


def test_yaml_and_budget_errors(tmp_path, write_sweep):
    p = tmp_path / "broken.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match=f"^{p}: not valid YAML"):
        load_config(p)
    # a tab: the C parser says "found character that cannot start any token", never "tab" (attack F8)
    p.write_text("name: x\nmodels:\n\t- mlp\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value).endswith("found character that cannot start any token (a tab character there: YAML "
                                 "indents with spaces)")
    for text in ("name: [unclosed\n",  # no tab: no hint
                 'name: t\ndescription: "a\tb" x: [\n'):  # a tab in a string, not the error (review F7)
        p.write_text(text)
        with pytest.raises(ConfigError) as e:
            load_config(p)
        assert "tab" not in str(e.value)
    assert _errors(write_sweep, budget={"steps": 10, "epochs": 1}) == [
        "F: budget: give exactly one of 'steps', 'epochs', 'tokens' or 'tokens_per_param'"]
    assert _errors(write_sweep, budget={"steps": 0}) == [
        "F: budget.steps: Input should be greater than 0 (got 0)"]
    assert _errors(write_sweep, executor="rya") == [
        "F: executor: unknown executor 'rya'; valid choices: inprocess, process, ray (did you mean 'ray'?)"]


def test_invalid_config_cli_logs_nothing(tmp_path, write_sweep):
    path = write_sweep(models=["mlpp"])
    uri = f"sqlite:///{tmp_path / 'never.db'}"
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", str(path), "--tracking-uri", uri],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2
    assert f"{path}: models[0].name: unknown model 'mlpp'" in r.stderr
    assert not (tmp_path / "never.db").exists() and not (tmp_path / "mlflow.db").exists()
    assert not (tmp_path / "mlruns").exists()


def test_hparam_values_forms():
    assert hparam_values(0.1) == [0.1]
    assert hparam_values([1, 2]) == [1, 2]
    assert hparam_values({"value": [64, 64]}) == [[64, 64]]
    assert hparam_values({"log_grid": [1e-3, 1e-1, 3]}) == [0.001, 0.01, 0.1]
    with pytest.raises(ValueError, match="log_grid needs 0 < low <= high"):
        hparam_values({"log_grid": [0, 1, 3]})


def test_expansion_grid_zip_include_exclude(write_sweep):
    cfg = _load(write_sweep,
                models=["mlp", {"name": "cnn", "hparams": {"width": [4, 8]}}],
                optimizers=[{"name": "sgd", "hparams": {"step_size": [0.1, 0.2]}},
                            {"name": "adam", "hparams": {"step_size": [0.01, 0.02], "b1": [0.8, 0.9]},
                             "zip": [["step_size", "b1"]]}],
                seeds=2, exclude=[{"model": "cnn", "model.width": 8, "optimizer": "adam"}],
                include=[{"models": ["logreg"],
                          "optimizers": [{"name": "sgd", "hparams": {"step_size": 1.0}}],
                          "seeds": [5]}])
    specs = expand(cfg)
    # models: mlp, cnn(4), cnn(8) = 3; optimizers: sgd ×2 + adam zipped ×2 = 4; seeds 2 → 24
    # minus cnn(8)×adam×2 seeds×... = 2 adam variants × 2 seeds = 4 → 20; plus 1 included
    assert len(specs) == 21
    assert len({s.trial_id for s in specs}) == 21
    adam = [s for s in specs if s.optimizer == "adam"]
    assert {(s.hparams("optimizer")["step_size"], s.hparams("optimizer")["b1"]) for s in adam} == {
        (0.01, 0.8), (0.02, 0.9)}
    assert not any(s.model == "cnn" and s.hparams("model") == {"width": 8} and s.optimizer == "adam"
                   for s in specs)
    assert specs[-1].model == "logreg" and specs[-1].seed == 5
    # seeds vary fastest; batching groups seed siblings
    assert [s.seed for s in specs[:4]] == [0, 1, 0, 1]
    assert specs[0].steps == 40 and specs[0].eval_every == 20 and specs[0].target.mode == "max"
    assert specs[0].target.metric == "valid/accuracy"
    units = group_units(specs, "on")
    # sgd: step size and seed differ only → one unit of 4 per model; adam: b1 differs → pairs of seeds
    assert sorted(len(u) for u in units) == [1, 2, 2, 2, 2, 4, 4, 4]
    assert len(group_units(specs, "off")) == 21
    assert sweep_id_of(cfg.name, specs) == sweep_id_of(cfg.name, list(reversed(specs)))


def test_top_level_zip_and_epochs(write_sweep):
    cfg = _load(write_sweep, models=["mlp", "logreg"], batch_size=[16, 64], zip=[["models", "batch_size"]],
                budget={"epochs": 2}, seeds=1)
    specs = expand(cfg, n_train=lambda name, hp: 1000)
    assert [(s.model, s.batch_size, s.steps) for s in specs] == [("mlp", 16, 125), ("logreg", 64, 32)]
    with pytest.raises(ConfigError, match="zipped axes"):
        expand(cfg.model_copy(update={"batch_size": [16]}))


def test_parse_config_is_structural_only():
    cfg = parse_config(yaml.safe_load("name: x\nmodels: [nope]\noptimizers: [nope]\ndatasets: [nope]\n"
                                      "budget: {steps: 3}\nbatching: false\n"))
    assert cfg.batching == "off" and cfg.schedules[0].name == "constant" and cfg.seeds == [0]


def test_exclude_rule_values_checked_against_registries(write_sweep):
    errs = _errors(write_sweep, exclude=[{"model": "cnnn"},
                                         {"optimizer": ["sgd", "adamm"], "dataset": "digts"}])
    assert errs[0] == ("F: exclude[0].model: unknown model 'cnnn'; valid choices: autoencoder, cnn, cnn1d, "
                       "gpt, logreg, mlp, resnet, resnet18, transformer_lm, vit (did you mean 'cnn'?)")
    assert errs[1].startswith("F: exclude[1].optimizer: unknown optimizer 'adamm'; "
                              "valid choices: adafactor, adagrad,")
    assert errs[1].endswith("(did you mean 'adam'?)")
    assert errs[2].startswith("F: exclude[1].dataset: unknown dataset 'digts'; valid choices: digits,")
    assert len(errs) == 3


def test_zip_length_error_has_file_prefix(write_sweep):
    path = write_sweep(models=["mlp", "logreg"], batch_size=[16, 32, 64], zip=[["models", "batch_size"]])
    cfg = load_config(path)
    with pytest.raises(ConfigError) as ei:
        expand(cfg, file=str(path))
    assert ei.value.errors == [f"{path}: zip: zipped axes ['models', 'batch_size'] must have equal numbers "
                               "of values, got [2, 3]"]


def test_batch_size_and_targets_messages_say_the_expected_form(write_sweep):
    errs = _errors(write_sweep, batch_size="sixty", targets=[{"metric": "eval/accuracy", "value": 0.5}])
    assert errs == [
        "F: batch_size: expected an int or a list of ints, got 'sixty'",
        "F: targets: expected a mapping {DATASET: {metric, value}}, e.g. targets: {digits: {metric: "
        "valid/accuracy, value: 0.9}} (use 'target' for one target for all datasets), got "
        "[{'metric': 'eval/accuracy', 'value': 0.5}]"]


def test_numbers_written_with_an_unsigned_exponent_are_numbers(tmp_path):
    """YAML 1.1 (PyYAML) wants 1.5e+3; 1.5e3, 1.0e0, 2.5e-1 and 1.0e308 were read as strings and
    refused as "a quoted string". An integer key takes an integral float."""
    from harness.config.yamlsafe import load_yaml_text

    assert load_yaml_text("[1.5e3, 1.0e0, 2.5e0, 1.0e308, .5e1, 1.e3, 1e3, 123, 1_000, '1.5e3']") == \
        [1500.0, 1.0, 2.5, 1.0e308, 5.0, 1000.0, 1000.0, 123, 1000, "1.5e3"]
    p = tmp_path / "a.yaml"
    p.write_text("name: yf\nmodels: [mlp]\noptimizers: [{name: sgd, hparams: {step_size: 1.0e0}}]\n"
                 "datasets: [digits]\nbudget: {steps: 1.5e3}\n"
                 "target: {metric: valid/accuracy, value: 2.5e-1}\n")
    cfg = load_config(p)
    assert cfg.budget.steps == 1500 and cfg.optimizers[0].hparams == {"step_size": 1.0}
    assert cfg.target.value == 0.25
    p.write_text("name: yf\nmodels: [mlp]\noptimizers: [{name: sgd, hparams: {step_size: 0.1}}]\n"
                 "datasets: [digits]\nbudget: {steps: 1.5e-3}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert e.value.errors == [f"{p}: budget.steps: expected an integer (got 0.0015)"]


def test_a_fifo_config_path_is_refused_without_blocking(tmp_path):
    """A FIFO with no writer blocked ``sweep`` in open() forever."""
    import os

    fifo = tmp_path / "sweep.yaml"
    os.mkfifo(fifo)
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", str(fifo), "--dry-run"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert f"{fifo}: not a regular file (a pipe, socket, device or folder)" in r.stdout + r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.yaml"]


def test_a_seed_listed_twice_is_refused(write_sweep):
    """``seeds: [0, 1, 0]`` ran 2 trials per configuration where 3 were asked for, with no word (a
    (configuration, seed) pair is one trial id): the attack's F8. At the top level and in an
    ``include`` entry."""
    assert _errors(write_sweep, seeds=[0, 1, 0]) == [
        "F: seeds: seed 0 is listed twice; a configuration trains once per seed: list each seed once"]
    assert _errors(write_sweep, include=[{"seeds": [3, 3]}]) == [
        "F: include[0].seeds: seed 3 is listed twice; a configuration trains once per seed: list each "
        "seed once"]
    load_config(write_sweep(seeds=[2, 0, 1]))  # distinct, in any order: fine
