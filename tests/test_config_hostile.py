"""The config loader's own promises beyond rejection: what is accepted and how
(YAML 1.2 floats, merges, canonical numbers, stable ids), and exact messages."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
import yaml

from harness.config.limits import plan_size
from harness.config.load import ConfigError, load_config, parse_config
from harness.config.yamlsafe import YamlConfigError, load_yaml_text
from harness.core.echo import MAX_ECHO, short_repr
from harness.plan.expansion import expand, sweep_id_of

ROOT = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_yaml_12_floats_and_11_rest():
    assert load_yaml_text("a: 3e-3\nb: 1E5\nc: -2.5e+3\nd: 1.0e-3\ne: 10\nf: .inf\ng: yes\nh: 3e\n") == {
        "a": 0.003, "b": 100000.0, "c": -2500.0, "d": 0.001, "e": 10, "f": float("inf"), "g": True,
        "h": "3e"}


def test_duplicate_keys_name_both_lines_and_merges_may_override():
    with pytest.raises(YamlConfigError) as ei:
        load_yaml_text("a: 1\nb:\n  x: 1\n  x: 2\n", "f.yaml")
    assert ei.value.lines == ["f.yaml: line 4: duplicate key 'x' (first at line 3); a mapping may "
                              "give each key once"]
    assert load_yaml_text("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n") == {
        "base": {"x": 1, "y": 2}, "c": {"x": 3, "y": 2}}


def test_aliases_within_bounds_are_fine():
    assert load_yaml_text("a: &x [1]\nb: [*x, [*x, *x]]\n") == {"a": [1], "b": [[1], [[1], [1]]]}


def test_short_repr_is_bounded_and_cheap():
    assert short_repr("abc") == "'abc'"
    long = short_repr("x" * 10**7)
    assert len(long) <= MAX_ECHO and long.endswith("xxx' (10,000,000 characters)") and "..." in long
    nested = [[list(range(1000))] * 1000] * 1000  # 10^9 elements if fully printed
    t0 = time.perf_counter()
    assert len(short_repr(nested)) <= MAX_ECHO
    assert time.perf_counter() - t0 < 0.5


def test_3e_3_is_accepted_as_a_float(tmp_path):
    text = (ROOT / "experiments" / "quickstart.yaml").read_text().replace("0.003", "3e-3")
    cfg = load_config(_write(tmp_path, text))
    assert cfg.optimizers[2].hparams == {"step_size": 0.003}


def test_int_and_float_step_size_are_one_trial(tmp_path):
    base = (ROOT / "experiments" / "quickstart.yaml").read_text()
    ids = []
    for v in ("1000", "1000.0", "1e3", "1.0e+3"):
        cfg = load_config(_write(tmp_path, base.replace("step_size: 0.1}", f"step_size: {v}}}")))
        assert cfg.optimizers[0].hparams["step_size"] == 1000.0
        assert type(cfg.optimizers[0].hparams["step_size"]) is float
        ids.append(sorted(s.trial_id for s in expand(cfg, n_train=lambda n, h: 1437)))
    assert ids[0] == ids[1] == ids[2] == ids[3]
    # ints of int-typed hyperparameters stay ints; float-typed ones (momentum's mass) become floats
    cfg = load_config(_write(tmp_path, base.replace("mass: 0.9", "mass: 1")))
    assert cfg.models[0].hparams == {"width": 64, "depth": 2}
    assert cfg.optimizers[1].hparams == {"step_size": 0.03, "mass": 1.0}


def test_existing_experiment_ids_unchanged():
    """Sweep ids computed with main's code without this change (at a1dc6e4, after the splits; before
    them the same held: e59f1e554034, d37b27e67c92, 90b3c0c4b5fe): float-valued configs keep their
    ids and the default divergence factor is not part of them. (``mnist1d.yaml`` is not pinned: that
    experiment was rewritten since, so its trials legitimately changed.) Since the target left the
    trial id, those ids are the trials' ``legacy_trial_id`` (quickstart has a target; throughput,
    without one, keeps its ids)."""
    want = {"quickstart": ("b1b760e03731", "7a5529a520b26a44", "d0f584bc7f64", "b316b3a5dac4ff4e"),
            "throughput": ("075df9babbeb", "ad4332fe8502ddc7", "075df9babbeb", "ad4332fe8502ddc7")}
    for name, (legacy_sweep, legacy_first, sweep_id, first) in want.items():
        cfg = load_config(ROOT / "experiments" / f"{name}.yaml")
        specs = expand(cfg, n_train=lambda n, h: 4000)
        blob = json.dumps([cfg.name, sorted(s.legacy_trial_id for s in specs)])  # sweep_id_of's rule
        assert (hashlib.sha256(blob.encode()).hexdigest()[:12], specs[0].legacy_trial_id) == \
            (legacy_sweep, legacy_first), name
        assert (sweep_id_of(cfg.name, specs), specs[0].trial_id) == (sweep_id, first), name


def test_plan_size_is_arithmetic(tmp_path):
    text = (ROOT / "experiments" / "quickstart.yaml").read_text().replace(
        "{step_size: 0.003}", "{step_size: {log_grid: [1.0e-5, 1.0, 1000000000]}}").replace(
        "seeds: 2", "seeds: 1000000")
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as ei:
        load_config(_write(tmp_path, text))
    assert time.perf_counter() - t0 < 5
    assert ei.value.errors == [
        f"{tmp_path / 'c.yaml'}: seeds: 1,000,000 seeds alone exceed the limit of 10,000 trials; use "
        f"fewer, or raise the limit with `python -m harness sweep --max-trials N`"]
    cfg = load_config(ROOT / "experiments" / "quickstart.yaml")
    assert plan_size(cfg)[0] == 24 == len(expand(cfg, n_train=lambda n, h: 1437))


def test_divergence_key_reaches_the_spec(tmp_path):
    base = (ROOT / "experiments" / "quickstart.yaml").read_text()
    cfg = load_config(_write(tmp_path, base + "divergence: {loss_factor: 1.0e+3}\n"))
    assert {s.divergence_loss_factor for s in expand(cfg, n_train=lambda n, h: 1437)} == {1000.0}
    cfg = load_config(_write(tmp_path, base + "divergence: {loss_factor: null}\n"))
    assert {s.divergence_loss_factor for s in expand(cfg, n_train=lambda n, h: 1437)} == {None}


def test_error_lines_are_capped(tmp_path):
    base = (ROOT / "experiments" / "quickstart.yaml").read_text()
    bad = "seeds: [" + ", ".join(["x"] * 500) + "]"
    with pytest.raises(ConfigError) as ei:
        load_config(_write(tmp_path, base.replace("seeds: 2", bad)))
    assert len(ei.value.errors) == 51
    assert ei.value.errors[-1] == f"{tmp_path / 'c.yaml'}: ... and 450 more problems"


def test_plan_size_counts_search_trials():
    base = yaml.safe_load((ROOT / "experiments" / "quickstart.yaml").read_text())
    base["search"] = {"method": "quasirandom", "trials": 5}
    base["optimizers"] = [
        {"name": "sgd", "hparams": {"step_size": {"log_uniform": [1e-3, 1.0]}}},
        {"name": "adam", "hparams": {"step_size": [0.1, 0.01]}},
        {"name": "momentum", "hparams": {"step_size": {"log_uniform": [1e-3, 1.0]}, "mass": [0.8, 0.9]},
         "search": {"trials": 7}}]
    cfg = parse_config(base, "x")
    # 2 models x 2 schedules x 2 seeds x (sgd 5 + adam 2 + momentum 2 x 7)
    assert plan_size(cfg)[0] == 8 * (5 + 2 + 14) == len(expand(cfg, n_train=lambda n, h: 1437))


@pytest.mark.parametrize("where, search", [
    ("search.trials", {"trials": True}),
    ("search.seed", {"method": "random", "trials": 4, "seed": True}),
    ("optimizers[0].search.trials", None),
])
def test_search_trials_and_seed_are_never_booleans(where, search):
    # `trials: true` / `seed: true` were accepted as 1, though no number is ever a boolean
    base = yaml.safe_load((ROOT / "experiments" / "quickstart.yaml").read_text())
    if search is None:
        base["optimizers"][0]["search"] = {"trials": True}
    else:
        base["search"] = search
    with pytest.raises(ConfigError) as ei:
        parse_config(base, "x")
    assert ei.value.errors == [f"x: {where}: expected an integer, not a boolean (got True)"]


def test_description_errors_are_reported_under_description():
    # the description validator raised its error as a "name" error
    from pydantic import ValidationError

    from harness.config import SweepConfig

    base = yaml.safe_load((ROOT / "experiments" / "quickstart.yaml").read_text())
    base["description"] = "x" * 9000
    with pytest.raises(ValidationError) as ei:
        SweepConfig.model_validate(base)
    assert [(e["loc"], e["type"]) for e in ei.value.errors()] == [(("description",), "description")]
    with pytest.raises(ConfigError) as ei:
        parse_config(base, "x")
    assert ei.value.errors == ["x: description: 9,000 characters; at most 8,000"]


_DTYPES = "Input should be 'auto', 'float32', 'bfloat16', 'float16' or 'float64' (got 'float8')"


@pytest.mark.parametrize("value, line", [("[float8]", f"dtype[0]: {_DTYPES}"),
                                         ("float8", f"dtype: {_DTYPES}")])
def test_a_union_field_names_the_users_key_path_once(tmp_path, value, line):
    """``dtype`` is a name or a list of names: one line at the key the user wrote, no pydantic
    member tags (``dtype.list[literal[...]]``) and no line for the member it was not meant as."""
    base = (ROOT / "experiments" / "quickstart.yaml").read_text()
    with pytest.raises(ConfigError) as ei:
        load_config(_write(tmp_path, base + f"dtype: {value}\n"))
    assert ei.value.errors == [f"{tmp_path / 'c.yaml'}: {line}"]


def test_nan_is_not_a_number_field(tmp_path):
    base = (ROOT / "experiments" / "quickstart.yaml").read_text()
    with pytest.raises(ConfigError) as ei:
        load_config(_write(tmp_path, base + "source_timeout_s: .nan\n"))
    assert ei.value.errors == [f"{tmp_path / 'c.yaml'}: source_timeout_s: must be a finite number, not "
                               f".nan (YAML's not-a-number) (got nan)"]
