"""Search spaces and sampling (harness/search.py): value mappings computed by hand, the sequences'
prefix stability and reproducibility, quasi-random vs random discrepancy, every bad-space message,
expansion of distributions crossed with grid axes, the dry-run output, and a real sweep on SQLite whose
search grows from 2 to 4 trials and trains only the 2 new configurations."""

from __future__ import annotations

import io
import math
import re

import numpy as np
import pytest
from mlflow import MlflowClient

from harness.config import search
from harness.config.load import ConfigError, load_config
from harness.config.search import Distribution, Search, parse_distribution, sample, unit_points
from harness.config.values import hparam_values
from harness.orchestrate.run import expand, run_sweep
from harness.tracking.client import search_all


def _errors(write_sweep, **overrides) -> list[str]:
    path = write_sweep(**overrides)
    with pytest.raises(ConfigError) as ei:
        load_config(path)
    return [e.replace(str(path), "F") for e in ei.value.errors]


def _adam(hp, **kw):
    return [{"name": "adam", "hparams": hp, **kw}]


# --------------------------------------------------------------------------- mappings


def test_log_uniform_maps_endpoints_and_decades():
    d = parse_distribution({"log_uniform": [1.0e-4, 1.0e-1]})
    assert d == Distribution("log_uniform", (1e-4, 0.1))
    assert d.map(0.0) == 1e-4 and d.map(1.0) == 0.1
    assert d.map(1 / 3) == 0.001                 # one decade of three
    assert d.map(0.5) == 0.00316228              # 10**-2.5, 6 significant digits
    assert d.map(0.999999) == 0.0999993
    assert d.map(-1.0) == 1e-4 and d.map(2.0) == 0.1  # clipped


def test_uniform_int_uniform_and_choice_mappings():
    u = parse_distribution({"uniform": [0.8, 0.99]})
    assert (u.map(0.0), u.map(0.5), u.map(1.0)) == (0.8, 0.895, 0.99)
    i = parse_distribution({"int_uniform": [1, 3]})
    # each integer gets a third of [0, 1)
    assert [i.map(x) for x in (0.0, 0.3333, 0.3334, 0.6666, 0.6667, 0.9999, 1.0)] == [1, 1, 2, 2, 3, 3, 3]
    assert all(type(i.map(x)) is int for x in (0.0, 0.5))
    grid = np.arange(3000) / 3000  # int_uniform covers every integer equally
    vals = [parse_distribution({"int_uniform": [-2, 2]}).map(x) for x in grid]
    assert {v: vals.count(v) for v in range(-2, 3)} == {-2: 600, -1: 600, 0: 600, 1: 600, 2: 600}
    c = parse_distribution({"choice": ["relu", "tanh", "gelu"]})
    assert [c.map(x) for x in (0.0, 0.33, 0.34, 0.66, 0.67, 0.99)] == [
        "relu", "relu", "tanh", "tanh", "gelu", "gelu"]
    lists = parse_distribution({"choice": [[64, 64], [128]]})
    a = lists.map(0.0)
    a.append(1)  # a copy: the option itself is untouched
    assert lists.map(0.0) == [64, 64]
    assert hparam_values({"log_uniform": [1.0e-3, 1.0]}) == [Distribution("log_uniform", (1e-3, 1.0))]


def test_unit_points_are_the_scipy_sequences():
    from scipy.stats import qmc

    got = unit_points("quasirandom", 8, 3, 5)
    want = qmc.Halton(3, scramble=True, rng=np.random.default_rng(5)).random(8)
    assert got.shape == (8, 3) and got.tobytes() == want.tobytes()
    # pinned first points (a scipy whose scrambling changed would give new trial ids: see search.py)
    assert unit_points("quasirandom", 2, 2, 0).tolist() == [
        [0.7072248356860283, 0.46907967033587605], [0.20722483568602834, 0.8024130036692094]]
    assert unit_points("random", 2, 2, 0).tolist() == [
        [0.6369616873214543, 0.2697867137638703], [0.04097352393619469, 0.016527635528529094]]
    with pytest.raises(ValueError, match="method 'grid' does not sample"):
        unit_points("grid", 4, 2, 0)


@pytest.mark.parametrize("method", ["quasirandom", "random"])
def test_prefix_stable_and_reproducible_from_the_seed(method):
    for d in (1, 2, 5):
        long = unit_points(method, 32, d, 7)
        assert unit_points(method, 16, d, 7).tobytes() == long[:16].tobytes()  # bit for bit
        assert unit_points(method, 1, d, 7).tobytes() == long[:1].tobytes()
        assert unit_points(method, 32, d, 7).tobytes() == long.tobytes()
        assert not np.array_equal(unit_points(method, 32, d, 8), long)
    dists = [parse_distribution({"log_uniform": [1e-4, 1.0]}), parse_distribution({"choice": [1, 2, 3]})]
    pts32 = sample(dists, Search(method, 32, 3))
    assert sample(dists, Search(method, 16, 3)) == pts32[:16]
    assert len(set(pts32)) == 32


def test_quasirandom_has_lower_discrepancy_than_random_on_average():
    from scipy.stats import qmc

    for n in (16, 32, 64):
        q = [qmc.discrepancy(unit_points("quasirandom", n, 2, s)) for s in range(10)]
        r = [qmc.discrepancy(unit_points("random", n, 2, s)) for s in range(10)]
        assert np.mean(q) < np.mean(r) / 3, (n, np.mean(q), np.mean(r))


# --------------------------------------------------------------------------- bad spaces


@pytest.mark.parametrize("hp, msg", [
    ({"step_size": {"log_uniform": [0, 0.1]}},
     "optimizers[0].hparams.step_size: log_uniform needs lo > 0 (it samples on a log scale), got [0, 0.1]"),
    ({"step_size": {"log_uniform": [-1.0, 0.1]}},
     "optimizers[0].hparams.step_size: log_uniform needs lo > 0 (it samples on a log scale), "
     "got [-1.0, 0.1]"),
    ({"step_size": {"log_uniform": [0.1, 0.1]}},
     "optimizers[0].hparams.step_size: log_uniform needs lo < hi, got [0.1, 0.1]"),
    ({"step_size": 0.1, "b1": {"uniform": [0.9, 0.8]}},
     "optimizers[0].hparams.b1: uniform needs lo < hi, got [0.9, 0.8]"),
    ({"step_size": 0.1, "b1": {"choice": []}},
     "optimizers[0].hparams.b1: choice must be a non-empty list of options, got []"),
    ({"step_size": 0.1, "b1": {"uniform": [0.9]}},
     "optimizers[0].hparams.b1: uniform must be [lo, hi] (two numbers), got [0.9]"),
    ({"step_size": {"uniform": [0.0, 0.1]}},
     "optimizers[0].hparams.step_size: must be > 0, got 0.0 (a bound of {uniform: [0.0, 0.1]})"),
    ({"step_size": 0.1, "b1": {"choice": [0.9, "x"]}},
     "optimizers[0].hparams.b1: expected a number, got 'x' (an option of {choice: [0.9, 'x']})"),
    ({"step_size": 0.1, "b1": {"foo": 1}},
     "optimizers[0].hparams.b1: a mapping value must be {log_grid: [low, high, num]}, {value: X} or a "
     "distribution ({log_uniform: [lo, hi]}, {uniform: [lo, hi]}, {int_uniform: [lo, hi]}, "
     "{choice: [...]}), got {'foo': 1}"),
])
def test_bad_distribution_messages(write_sweep, hp, msg):
    assert _errors(write_sweep, optimizers=_adam(hp), search={"trials": 4}) == [f"F: {msg}"]


def test_bad_search_and_placement_messages(write_sweep):
    assert _errors(write_sweep, search={"trials": 0}) == ["F: search.trials: must be >= 1, got 0"]
    assert _errors(write_sweep, optimizers=_adam({"step_size": 0.1}, search={"trials": 0})) == [
        "F: optimizers[0].search.trials: must be >= 1, got 0"]
    assert _errors(write_sweep, search={"method": "quasirandm", "trials": 3}) == [
        "F: search.method: unknown method 'quasirandm'; valid: quasirandom, random, grid, asha, "
        "successive_halving, hyperband, coordinate_descent, optuna (did you mean 'quasirandom'?)"]
    assert _errors(write_sweep, search={"method": "sobol", "trials": 3}) == [
        "F: search.method: unknown method 'sobol'; valid: quasirandom, random, grid, asha, "
        "successive_halving, hyperband, coordinate_descent, optuna"]
    assert _errors(write_sweep, search={"method": "grid", "trials": 3}) == [
        "F: search.trials: method grid has no trials (its grid points are the budget); remove trials, "
        "or use method quasirandom or random"]
    lr = {"step_size": {"log_uniform": [1.0e-3, 0.1]}}
    assert _errors(write_sweep, search={"method": "grid"}, optimizers=_adam(lr)) == [
        "F: optimizers[0].hparams.step_size: {log_uniform: [0.001, 0.1]} is a distribution, but "
        "search.method is grid: pick a sampling method (search: {method: quasirandom, trials: N}), or "
        "write a grid (a list or {log_grid: [lo, hi, num]})"]
    assert _errors(write_sweep, optimizers=_adam(lr)) == [
        "F: optimizers[0].hparams.step_size: a distribution needs search.trials: add search: "
        "{method: quasirandom, trials: N} at the top level (or on the optimizer entry)"]
    # a model distribution under an optimizer whose own search is grid
    assert _errors(write_sweep, search={"trials": 2},
                   models=[{"name": "mlp", "hparams": {"depth": {"int_uniform": [1, 2]}}}],
                   optimizers=[{"name": "sgd", "hparams": {"step_size": 0.1}},
                               {"name": "sgd", "hparams": {"step_size": 0.2}, "search": {"method": "grid"}}]
                   ) == ["F: models[0].hparams.depth: {int_uniform: [1, 2]} is a distribution, but "
                         "search.method is grid (with optimizers[1]): pick a sampling method (search: "
                         "{method: quasirandom, trials: N}), or write a grid (a list or "
                         "{log_grid: [lo, hi, num]})"]
    assert _errors(write_sweep, search={"trials": 2}, models=[{"name": "mlp", "search": {"trials": 3}}]) == [
        "F: models[0].search: only optimizer entries may override search (each optimizer's budget is "
        "set there)"]
    assert _errors(write_sweep, search={"trials": 2},
                   optimizers=_adam({**lr, "b1": [0.8, 0.9]}, zip=[["step_size", "b1"]])) == [
        "F: optimizers[0].zip[0]: 'step_size' is a distribution; only grid axes (lists, log_grid) can "
        "be zipped"]


def test_an_option_its_inherited_method_does_not_take_is_refused(write_sweep):
    """A search block without ``method`` was never checked: ``search: {trials: 4, eta: 3}`` trained
    a quasi-random plan with eta ignored, and an entry's ``{eta: 3}`` under a top-level coordinate
    descent was accepted. Its options are checked against the method its cells get."""
    lr = {"step_size": {"log_uniform": [1.0e-3, 0.1]}}
    assert _errors(write_sweep, search={"trials": 4, "eta": 3}, optimizers=_adam(lr)) == [
        "F: search: eta applies to method asha or successive_halving or hyperband, not quasirandom "
        "(the default method: set search.method)"]
    assert _errors(write_sweep, search={"method": "coordinate_descent"},
                   optimizers=_adam({"step_size": [0.01, 0.1]}, search={"eta": 3, "sampler": "tpe"})) == [
        "F: optimizers[0].search: eta applies to method asha or successive_halving or hyperband, not "
        "coordinate_descent (the top level's search.method)",
        "F: optimizers[0].search: sampler applies to method optuna or asha or successive_halving or "
        "hyperband, not coordinate_descent (the top level's search.method)"]
    assert _errors(write_sweep, search={"method": "asha", "trials": 4},
                   optimizers=_adam(lr, search={"sampler": "tpe"})) == [
        "F: optimizers[0].search: sampler tpe does not apply to method asha (the top level's "
        "search.method); valid: quasirandom, random"]
    # brackets are hyperband's only (asha and successive_halving took them and ignored them)
    assert _errors(write_sweep, search={"method": "asha", "trials": 4, "brackets": 3},
                   optimizers=_adam(lr)) == [
        "F: search: brackets applies to method hyperband, not asha"]
    # an entry's own method: the top level's options of another method are not its own (dropped)
    cfg = load_config(write_sweep(search={"method": "asha", "trials": 4, "eta": 3},
                                  optimizers=_adam(lr, search={"method": "optuna"})))
    assert cfg.optimizers[0].search.method == "optuna"


def test_distribution_on_unknown_or_discrete_hyperparameters(write_sweep):
    assert _errors(write_sweep, search={"trials": 2},
                   optimizers=_adam({"step_size": 0.1, "beta": {"uniform": [0.1, 0.2]}})) == [
        "F: optimizers[0].hparams.beta: unknown hyperparameter of optimizer 'adam'; valid: step_size, "
        "b1, b2, eps"]

    def model(hp):
        return _errors(write_sweep, search={"trials": 2}, models=[{"name": "mlp", "hparams": hp}])

    assert model({"depth": {"uniform": [1, 3]}}) == [
        "F: models[0].hparams.depth: depth is discrete (an int): use {int_uniform: [lo, hi]} or "
        "{choice: [...]}, not uniform"]
    assert model({"depth": {"log_uniform": [1, 3]}}) == [
        "F: models[0].hparams.depth: depth is discrete (an int): use {int_uniform: [lo, hi]} or "
        "{choice: [...]}, not log_uniform"]
    assert model({"activation": {"uniform": [0, 1]}}) == [
        "F: models[0].hparams.activation: activation is discrete: use {choice: [...]}, not uniform"]
    assert model({"activation": {"int_uniform": [0, 1]}}) == [
        "F: models[0].hparams.activation: activation takes no integers: use {choice: [...]}, not "
        "int_uniform"]
    assert model({"depth": {"int_uniform": [1, 2.5]}}) == [
        "F: models[0].hparams.depth: int_uniform needs integer bounds, got [1, 2.5]"]
    load_config(write_sweep(search={"trials": 2}, models=[
        {"name": "mlp", "hparams": {"activation": {"choice": ["relu", "tanh"]},
                                    "depth": {"int_uniform": [1, 3]}, "dropout": {"uniform": [0.0, 0.5]}}}]))
    assert _errors(write_sweep, search={"trials": 2}, datasets=[
        {"name": "digits", "hparams": {"validation_fraction": {"uniform": [0.1, 0.2]}}}]) == [
        "F: datasets[0].hparams.validation_fraction: a dataset's hyperparameters cannot be sampled "
        "(distributions are for models, optimizers and schedules); use a value or a list, got "
        "{uniform: [0.1, 0.2]}"]


def test_bad_space_cli_exit_2_and_nothing_written(tmp_path, write_sweep):
    import subprocess
    import sys

    path = write_sweep(search={"trials": 4}, optimizers=_adam({"step_size": {"log_uniform": [0, 1]}}))
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", str(path)], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 2
    assert (f"{path}: optimizers[0].hparams.step_size: log_uniform needs lo > 0 (it samples on a log "
            f"scale), got [0, 1]") in r.stderr
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


# --------------------------------------------------------------------------- expansion


def test_expansion_crosses_grid_axes_with_the_sampled_points(write_sweep):
    cfg = load_config(write_sweep(
        search={"method": "quasirandom", "trials": 3, "seed": 4}, seeds=2,
        models=[{"name": "mlp", "hparams": {"width": [8, 16], "depth": 1}}],
        optimizers=[*_adam({"step_size": {"log_uniform": [1.0e-4, 1.0e-1]}, "b1": {"uniform": [0.8, 0.9]}}),
                    {"name": "sgd", "hparams": {"step_size": {"log_uniform": [1.0e-2, 1.0]}},
                     "search": {"method": "random", "trials": 2}}]))
    specs = expand(cfg)
    u = unit_points("quasirandom", 3, 2, 4)
    lr = parse_distribution({"log_uniform": [1e-4, 0.1]})
    b1 = parse_distribution({"uniform": [0.8, 0.9]})
    adam = [s for s in specs if s.optimizer == "adam"]
    assert len(adam) == 2 * 3 * 2 and len(specs) == 2 * 3 * 2 + 2 * 2 * 2  # width × trials × seeds
    # for each width: point k's seeds side by side, k in order, the same points for every width
    rows = [(s.hparams("model")["width"], s.hparams("optimizer")["step_size"], s.hparams("optimizer")["b1"],
             s.seed) for s in adam]
    want = [(w, lr.map(u[k, 0]), b1.map(u[k, 1]), seed) for w in (8, 16) for k in range(3) for seed in (0, 1)]
    assert rows == want
    o = specs.origins[adam[2].trial_id]
    assert (o.method, o.index, o.sampled) == ("quasirandom", 1, ("optimizer.step_size", "optimizer.b1"))
    assert o.paths == {"models": "models[0]", "optimizers": "optimizers[0]", "schedules": "schedules[0]",
                       "datasets": "datasets[0]"}
    sgd = [s for s in specs if s.optimizer == "sgd"]
    ur = unit_points("random", 2, 1, 4)
    lr2 = parse_distribution({"log_uniform": [1e-2, 1.0]})
    assert [s.hparams("optimizer")["step_size"] for s in sgd[:4]] == [
        lr2.map(ur[0, 0]), lr2.map(ur[0, 0]), lr2.map(ur[1, 0]), lr2.map(ur[1, 0])]
    assert specs.origins[sgd[0].trial_id].method == "random"
    from harness.plan.expansion import budgets, search_tags, unequal_budgets

    assert budgets(specs) == {"digits · mlp (width=8, depth=1)": {"adam": 3, "sgd": 2},
                              "digits · mlp (width=16, depth=1)": {"adam": 3, "sgd": 2}}
    assert unequal_budgets(specs)[0] == (
        "warning: unequal tuning budgets on digits · mlp (width=8, depth=1): adam 3, sgd 2 configurations; "
        "a comparison favours the optimizer tuned more (set search.trials per optimizer entry to "
        "equalise)")
    assert search_tags(specs)[adam[2].trial_id] == {
        "harness.search": "quasirandom", "harness.search_index": "1",
        # the ranges, for the boundary warnings
        "harness.search_space": '{"optimizer.b1":["uniform",0.8,0.9],'
                                '"optimizer.step_size":["log_uniform",0.0001,0.1]}'}


def test_expansion_prefix_stable_trial_ids_and_model_dims(write_sweep):
    def specs(trials):
        return expand(load_config(write_sweep(
            search={"trials": trials, "seed": 1},
            models=[{"name": "mlp", "hparams": {"width": 8, "depth": {"int_uniform": [1, 3]},
                                                "activation": {"choice": ["relu", "tanh"]}}}],
            optimizers=_adam({"step_size": {"log_uniform": [1.0e-4, 1.0e-1]}}))))

    s16, s32 = specs(16), specs(32)
    assert len(s16) == 32 and len(s32) == 64
    assert [s.trial_id for s in s32[:32]] == [s.trial_id for s in s16]
    assert [s.to_dict() for s in s32[:32]] == [s.to_dict() for s in s16]
    # three dimensions in the sequence: model's (in key order), then the optimizer's
    o = s32.origins[s32[0].trial_id]
    assert o.sampled == ("model.depth", "model.activation", "optimizer.step_size")
    u = unit_points("quasirandom", 32, 3, 1)
    assert [(s.hparams("model")["depth"], s.hparams("model")["activation"]) for s in s32[::2]] == [
        (1 + math.floor(u[k, 0] * 3), ["relu", "tanh"][int(u[k, 1] * 2)]) for k in range(32)]
    assert {s.hparams("model")["depth"] for s in s32} == {1, 2, 3}


def test_exclude_rules_match_sampled_values(write_sweep):
    cfg = load_config(write_sweep(search={"trials": 4},
                                  optimizers=_adam({"step_size": 0.01, "b1": {"choice": [0.8, 0.9]}}),
                                  exclude=[{"optimizer.b1": 0.9}]))
    assert {s.hparams("optimizer")["b1"] for s in expand(cfg)} == {0.8}


# --------------------------------------------------------------------------- dry run and a real sweep


def test_dry_run_prints_points_and_budgets(tmp_path, write_sweep, monkeypatch):
    from rich.console import Console

    monkeypatch.chdir(tmp_path)
    cfg = write_sweep(search={"trials": 3, "seed": 0}, seeds=[0],
                      optimizers=[*_adam({"step_size": {"log_uniform": [1.0e-3, 1.0e-1]},
                                          "b1": {"uniform": [0.8, 0.95]}}),
                                  {"name": "sgd", "hparams": {"step_size": {"log_uniform": [1.0e-2, 1.0]}},
                                   "search": {"trials": 2}}])
    buf = io.StringIO()
    run_sweep(cfg, dry_run=True, console=Console(file=buf, width=200))
    out = buf.getvalue()
    assert not (tmp_path / "mlflow.db").exists()
    lines = [ln.strip() for ln in out.splitlines()]
    assert ("quasirandom points of adam (optimizers[0]) · constant on digits · mlp (width=16, depth=1):"
            in lines)
    rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in out.splitlines() if ln.startswith("│")]
    assert ["k", "optimizer.step_size", "optimizer.b1"] in [
        [c.strip() for c in ln.split("┃")[1:-1]] for ln in out.splitlines() if ln.startswith("┃")]
    # u = (0.70722..., 0.46907...), (0.20722..., 0.80241...), (0.95722..., 0.13574...)
    assert ["0", "0.0259687", "0.870362"] in rows and ["1", "0.00259687", "0.920362"] in rows
    assert ["2", "0.0821201", "0.820362"] in rows
    assert ["0", "0.259687"] in rows and ["1", "0.0259687"] in rows  # sgd: the same first coordinates
    assert ["digits · mlp (width=16, depth=1)", "adam", "3"] in rows
    assert ["digits · mlp (width=16, depth=1)", "sgd", "2"] in rows
    assert ("warning: unequal tuning budgets on digits · mlp (width=16, depth=1): adam 3, sgd 2 "
            "configurations; a comparison favours the optimizer tuned more (set search.trials per "
            "optimizer entry to equalise)") in out.replace("\n", " ")


def test_growing_the_search_trains_only_the_new_points(tmp_path, write_sweep, tracking_uri, monkeypatch):
    """A real tiny sweep on SQLite: 2 quasi-random trials, then 4: the first 2 are skipped as
    FINISHED (same trial ids), only 2 are trained, and the report of the grown sweep has all 4."""
    monkeypatch.chdir(tmp_path)
    over = dict(seeds=[0], budget={"steps": 10}, eval_every=10, steps_per_dispatch=10, batching="off",
                models=[{"name": "mlp", "hparams": {"width": 8, "depth": 1}}],
                optimizers=[{"name": "sgd", "hparams": {"step_size": {"log_uniform": [1.0e-2, 1.0]}}}])
    first = run_sweep(write_sweep(search={"trials": 2}, **over), tracking_uri=tracking_uri, quiet=True)
    assert first.counts() == {"finished": 2, "diverged": 0, "failed": 0, "skipped": 0}
    grown = run_sweep(write_sweep(search={"trials": 4}, **over), tracking_uri=tracking_uri, quiet=True)
    assert grown.counts() == {"finished": 4, "diverged": 0, "failed": 0, "skipped": 2}
    assert grown.sweep_id != first.sweep_id
    assert {o.trial_id for o in grown.outcomes if o.skipped} == {o.trial_id for o in first.outcomes}
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name("tiny")
    trials = [r for r in search_all(c, exp.experiment_id)
              if r.data.tags.get("harness.kind") == "trial"]
    assert len(trials) == 4 and all(r.info.status == "FINISHED" for r in trials)  # 2 + 2, none twice
    parents = sorted((r for r in search_all(c, exp.experiment_id)
                      if r.data.tags.get("harness.kind") == "parent"), key=lambda r: r.info.start_time)
    assert [p.data.tags[search.SEARCH_TAG] for p in parents] == ["quasirandom", "quasirandom"]
    assert [p.data.params["search.trials"] for p in parents] == ["2", "4"]
    assert [p.data.params["n_skipped"] for p in parents] == ["0", "2"]
    lr = parse_distribution({"log_uniform": [1e-2, 1.0]})
    u = unit_points("quasirandom", 4, 1, 0)
    by_index = {int(r.data.tags[search.SEARCH_INDEX_TAG]): r for r in trials}
    assert sorted(by_index) == [0, 1, 2, 3]
    for k, r in by_index.items():
        assert r.data.tags[search.SEARCH_TAG] == "quasirandom"
        assert float(r.data.params["optimizer.step_size"]) == lr.map(u[k, 0])
        assert r.data.tags["harness.sweep_id"] == (first.sweep_id if k < 2 else grown.sweep_id)
    from reports.frame import load_sweep

    data = load_sweep("tiny", grown.sweep_id, tracking_uri)
    assert sorted(data.frame["trial_id"].unique()) == sorted(r.data.tags["harness.trial_id"] for r in trials)


def test_readme_config_example_is_valid_and_budgets_are_equal(tmp_path):
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    block = readme.split("```yaml\nname: my-sweep", 1)[1].split("```", 1)[0]
    p = tmp_path / "readme.yaml"
    p.write_text("name: my-sweep" + block)
    specs = expand(load_config(p))
    from harness.plan.expansion import budgets, unequal_budgets

    assert budgets(specs) == {f"digits · mlp (width={w})": {"adam": 32, "momentum": 32} for w in (64, 256)}
    assert unequal_budgets(specs) == [] and len(specs) == 2 * 2 * 32 * 3


def test_include_subgrids_are_sampled_with_their_own_entry_paths(write_sweep):
    cfg = load_config(write_sweep(
        search={"trials": 2}, seeds=[0],
        include=[{"optimizers": [{"name": "sgd", "hparams": {"step_size": {"log_uniform": [1.0e-2, 1.0]}},
                                  "search": {"trials": 3, "method": "random"}}]}]))
    specs = expand(cfg)
    assert len(specs) == 1 + 3  # the top level's fixed sgd, and the include's 3 random points
    o = [specs.origins[s.trial_id] for s in specs]
    assert [(x.paths["optimizers"], x.method, x.index) for x in o] == [
        ("optimizers[0]", None, None), ("include[0].optimizers[0]", "random", 0),
        ("include[0].optimizers[0]", "random", 1), ("include[0].optimizers[0]", "random", 2)]


def test_two_entries_whose_searches_make_the_same_trials_are_refused(write_sweep):
    """An ASHA entry beside a quasi-random one over the same ranges with the same search seed made
    the same trials: they were merged into the first entry's, and the ASHA search silently had no
    configurations (its row was missing from the dry run). With another seed both search."""
    hp = {"step_size": {"log_uniform": [1.0e-3, 1.0]}}
    asha = {"method": "asha", "min_steps": 10, "eta": 3}
    same = dict(search={"method": "quasirandom", "trials": 4, "seed": 0}, seeds=[0], budget={"steps": 30},
                optimizers=[{"name": "sgd", "hparams": hp}, {"name": "sgd", "hparams": hp, "search": asha}])
    with pytest.raises(ConfigError) as ei:
        expand(load_config(write_sweep(**same)))
    (msg,) = ei.value.errors
    assert re.fullmatch(r"<config>: optimizers\[1\] \(search asha\) makes the same trials as optimizers\[0\] "
                        r"\(search quasirandom\) on digits · mlp \(.*\), so it would search nothing of its "
                        r"own: give one of them another search seed \(search: \{seed: 1\}\), range or grid",
                        msg)
    same["optimizers"][1]["search"] = {**asha, "seed": 1}
    specs = expand(load_config(write_sweep(**same)))
    methods = [specs.origins[s.trial_id].search.method for s in specs]
    assert methods.count("quasirandom") == 4 and methods.count("asha") == 4
    # two fixed plans that share a trial stay one trial, as before (a trial is a trial)
    fixed = dict(same, optimizers=[{"name": "sgd", "hparams": {"step_size": [0.1, 0.3]}},
                                   {"name": "sgd", "hparams": {"step_size": [0.3, 1.0]}}])
    assert len(expand(load_config(write_sweep(**fixed)))) == 3


# --------------------------------------------------------------------------- boundary warnings


def test_edge_is_measured_on_the_log_scale_for_log_uniform():
    from harness.core.boundary import SearchRange, edge, edge_warning

    r = SearchRange("optimizer.step_size", "log_uniform", 1e-5, 1e-3)
    # log10 position: 8.2e-4 -> 0.957 (top), 2e-5 -> 0.151 (inside), 1.5e-5 -> 0.088 (bottom)
    assert [edge(v, r) for v in (8.2e-4, 2e-5, 1.5e-5, 1e-4)] == ["top", None, "bottom", None]
    lin = SearchRange("optimizer.b1", "uniform", 0.8, 1.0)
    assert [edge(v, lin) for v in (0.985, 0.97, 0.81, "x", float("nan"))] == \
        ["top", None, "bottom", None, None]
    assert edge_warning("lion", r, 8.2e-4, "top") == \
        "lion: best step_size 0.00082 is at the top of [1e-05, 0.001]: widen the range"


def test_summary_warns_when_the_selected_step_size_is_at_the_top_of_its_range(
        tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    """Google's tuning playbook's first check: the fake trainer's validation loss falls
    with the step size, so the largest sampled step size is selected; 16 quasi-random points of one
    dimension put one in each sixteenth of the range, so it lies in the top 10% (log scale)."""
    from rich.console import Console

    monkeypatch.chdir(tmp_path)
    sgd = {"name": "sgd", "hparams": {"step_size": {"log_uniform": [1.0e-4, 1.0e-1]}}}
    cfg = write_sweep(search={"trials": 16, "seed": 0}, seeds=[0],
                      target={"metric": "valid/loss", "value": 10.0},
                      optimizers=[sgd, *_adam({"step_size": [0.001, 0.01]})])
    buf = io.StringIO()
    summary = run_sweep(cfg, tracking_uri=tracking_uri, console=Console(file=buf, width=200))
    best = max(float(re.search(r"step_size=([0-9.e+-]+)", o.config).group(1))
               for o in summary.outcomes if o.optimizer == "sgd")
    assert 10 ** (-1 - 0.3) <= best <= 0.1  # the top 10% of 3 decades
    want = (f"sgd: best step_size {best:.3g} is at the top of [0.0001, 0.1] (mlp · digits): widen the "
            "range")
    assert summary.boundary == [want]  # adam's grid has no range to be at the edge of
    assert f"search range: {want}" in buf.getvalue().replace("\n", " ")
    # the report says the same, under its leaderboard (from the runs' harness.search_space tags)
    from reports import make_report

    html = make_report(summary.name, summary.sweep_id, str(tmp_path / "r.html"), tracking_uri=tracking_uri)
    assert f"<li>{want}</li>" in html.read_text()


def test_adaptive_options_fit_their_method(write_sweep, monkeypatch):
    """An adaptive method's option beside another method, a sampler its method does not take, and
    Optuna's gp without torch are config errors with their key paths."""
    import importlib.util

    assert _errors(write_sweep, search={"method": "coordinate_descent", "eta": 3}) == [
        "F: search: eta applies to method asha or successive_halving or hyperband, not coordinate_descent"]
    assert _errors(write_sweep, search={"method": "optuna", "sampler": "quasirandom", "trials": 3}) == [
        "F: search: sampler quasirandom does not apply to method optuna; valid: tpe, cmaes, gp, random"]
    assert _errors(write_sweep, search={"method": "asha", "eta": 1, "trials": 3}) == [
        "F: search.eta: must be an integer >= 2 (the reduction factor: 1 in eta trials goes on at each "
        "rung), got 1"]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "torch" else real(n, *a))
    assert _errors(write_sweep, search={"method": "optuna", "sampler": "gp", "trials": 3}) == [
        "F: search.sampler: gp (Optuna's GPSampler) needs torch, which is not installed: pip install "
        "torch (the CPU build is enough), or choose sampler tpe, cmaes or random"]
