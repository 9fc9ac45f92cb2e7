"""Hostile configs: mutated variants of ``experiments/quickstart.yaml``, each of
which must be rejected by ``run_sweep`` before the MLflow store is touched, in bounded time and
memory, with one ``FILE: KEY.PATH: message`` line per problem that names the key.

Every case runs in-process under ``tracemalloc`` and an interval-timer guard; ``prepare_store`` and
``client_for`` are replaced by functions that fail the test if called, and no ``mlflow.db`` may
appear. A handful run through the real CLI in a subprocess (exit code 2, no traceback, no store).
The measured figures (cases, slowest case, largest peak) are printed by the last test.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml

from harness.config.limits import DEFAULT_MAX_TRIALS
from harness.config.load import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "experiments" / "quickstart.yaml"
BASE = yaml.safe_load(QUICKSTART.read_text())

#: Per-case bounds (in-process, tracemalloc on).
MAX_SECONDS = 10.0
MAX_PEAK_BYTES = 64 << 20

_STATS: list[tuple[str, float, int]] = []
_DROP = object()


def _cfg(**changes) -> dict:
    d = dict(BASE)
    for k, v in changes.items():
        if v is _DROP:
            d.pop(k, None)
        else:
            d[k] = v
    return d


def _text(**changes) -> str:
    return yaml.safe_dump(_cfg(**changes), sort_keys=False, allow_unicode=True, width=10**9)


def _opt(**hp) -> list:
    return [{"name": "sgd", "hparams": {"step_size": 0.1, **hp}}]


def _bomb(levels: int = 9, width: int = 9, where: str = "description") -> str:
    """A "billion laughs": ``levels`` anchors of ``width`` aliases of the previous one."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    body = _text(**{where: _DROP})
    return "\n".join(lines) + "\n" + body + f"{where}: *a{levels - 1}\n"


#: (case id, file content (str or bytes), a substring the rejection must contain: the key path and
#: usually the message)
CASES: list[tuple[str, str | bytes, str]] = []


def case(cid: str, content: str | bytes, key: str) -> None:
    CASES.append((cid, content, key))


Q = QUICKSTART.read_text()

# --- plan size, checked before expansion --------------------------------------------------------
case("plan-seeds-1e6", _text(seeds=1_000_000), "seeds: 1,000,000 seeds alone exceed the limit")
case("plan-seeds-1e12", _text(seeds=10**12), "seeds: 1,000,000,000,000 seeds alone")
case("plan-log-grid-1e9", _text(optimizers=[{"name": "adam", "hparams": {
    "step_size": {"log_grid": [1e-5, 1.0, 1_000_000_000]}}}]),
    "optimizers[0].hparams.step_size: the sweep would expand to 8,000,000,000 trials")
case("plan-log-grid-and-seeds", _text(seeds=1_000_000, optimizers=[{"name": "adam", "hparams": {
    "step_size": {"log_grid": [1e-5, 1.0, 1_000_000_000]}}}]), "seeds")
case("plan-product-1e6", _text(models=[{"name": "mlp", "hparams": {
    "width": list(range(1, 101)), "depth": list(range(1, 101))}}], seeds=100),
    "the sweep would expand to 6,000,000 trials")
case("plan-include", _text(include=[{"seeds": list(range(11_000))}]), "include[0].seeds")
case("plan-batch-list", _text(batch_size=list(range(1, 3001))), "batch_size: the sweep would expand")
case("plan-zip-still-big", _text(models=[{"name": "mlp", "hparams": {
    "width": list(range(1, 3001)), "depth": list(range(1, 3001))}, "zip": [["width", "depth"]]}]),
    "models[0].hparams.")
case("plan-search-trials", _text(search={"method": "quasirandom", "trials": 10**12}, optimizers=[
    {"name": "sgd", "hparams": {"step_size": {"log_uniform": [1e-3, 1.0]}}}]),
    "search.trials: the sweep would expand to 8,000,000,000,000 trials")
case("plan-entry-search-trials", _text(search={"method": "random", "trials": 4}, optimizers=[
    {"name": "sgd", "hparams": {"step_size": {"log_uniform": [1e-3, 1.0]}}, "search": {"trials": 10**9}}]),
    "optimizers[0].search.trials: the sweep would expand")
case("plan-log-grid-huge-num", _text(optimizers=[{"name": "sgd", "hparams": {
    "step_size": {"log_grid": [1e-3, 1.0, 1e300]}}}]), "optimizers[0].hparams.step_size")

# --- YAML: duplicate keys, aliases, nesting, syntax ---------------------------------------------
case("dup-top-budget", Q + "budget: {steps: 5}\n", "duplicate key 'budget' (first at line 17)")
case("dup-nested-hparam", Q.replace("{width: 64, depth: 2}", "{width: 64, depth: 2, width: 8}"),
     "duplicate key 'width'")
case("dup-target-value", Q.replace("value: 0.9}", "value: 0.9, value: 0.5}"), "duplicate key 'value'")
case("dup-block-mapping", Q.replace("name: quickstart\n", "name: quickstart\nname: other\n"),
     "line 5: duplicate key 'name' (first at line 4)")
case("bomb-description", _bomb(), "alias bomb")
case("bomb-seeds", _bomb(where="seeds"), "alias bomb")
case("bomb-dict", "a0: &a0 {x: 1, y: 2, z: 3, w: 4, v: 5, u: 6, t: 7, s: 8, r: 9}\n"
     + "".join(f"a{i}: &a{i} {{" + ", ".join(f"k{j}: *a{i - 1}" for j in range(9)) + "}\n"
               for i in range(1, 9)) + _text(description=_DROP) + "description: *a8\n",
     "alias bomb")
case("bomb-wide", "a: &a [" + ", ".join(["1"] * 200) + "]\n" + Q.replace(
    "seeds: 2", "seeds: [" + ", ".join(["*a"] * 999) + "]"), "alias bomb")
case("bomb-many-aliases", "a: &a 1\n" + Q.replace(
    "seeds: 2", "seeds: [" + ", ".join(["*a"] * 1500) + "]"), "more than 1000 alias uses")
case("alias-recursive", "a: &a [*a]\n" + Q, "recursive alias")
case("alias-undefined", Q.replace("seeds: 2", "seeds: *nope"), "undefined alias")
case("deep-nesting-list", Q + "exclude: " + "[" * 5000 + "]" * 5000 + "\n", "nest")
case("deep-nesting-map", Q.replace("budget: {steps: 400}", "budget: " + "{a: " * 200 + "1" + "}" * 200),
     "nested more than 50")
case("yaml-syntax", Q.replace("seeds: 2", "seeds: [2"), "not valid YAML: line")
case("yaml-tab-indent", Q.replace("  - {name: cnn", "\t- {name: cnn"), "not valid YAML")
case("yaml-python-tag", Q.replace("seeds: 2", "seeds: !!python/object/apply:os.system [echo hi]"),
     "a !!python/object/apply:os.system value; a config holds strings, numbers")
# non-core tags were silently coerced (name: !!binary aGVsbG8= became the sweep "hello")
case("yaml-binary-tag", Q.replace("name: quickstart", "name: !!binary aGVsbG8="), "a !!binary value")
case("yaml-set-tag", Q.replace("seeds: 2", "seeds: !!set {1, 2}"), "a !!set value")
case("yaml-omap-tag", Q.replace("seeds: 2", "seeds: !!omap [{a: 1}]"), "a !!omap value")
case("yaml-timestamp", Q.replace("seeds: 2", "seeds: 2020-01-01"), "a !!timestamp value")
case("yaml-local-tag", Q.replace("seeds: 2", "seeds: !mine 2"), "a !mine value")
case("yaml-unhashable-key", Q + "? [a, b]\n: 1\n", "unhashable key")
case("yaml-multi-doc", Q + "---\nname: two\n", "not valid YAML")

# --- file: encoding, size, junk -----------------------------------------------------------------
case("non-utf8-latin1", Q.replace("description: MLP", "description: caf\u00e9 MLP").encode("latin-1"),
     "not UTF-8 text: byte 0x")
case("non-utf8-utf16", Q.encode("utf-16"), "not UTF-8 text")
_rng = random.Random(12)
case("binary-junk", bytes(_rng.randrange(256) for _ in range(4096)), ": ")
case("binary-nul", Q.replace("seeds: 2", "seeds: 2\x00").encode(), "not valid YAML")
case("too-large", Q + "# " + "x" * (1 << 20) + "\n", "larger than 1,048,576 bytes")
case("empty-file", "", "<top>: a sweep config must be a mapping")
case("top-scalar", "42\n", "<top>: a sweep config must be a mapping")
case("top-list", "- a\n- b\n", "<top>: a sweep config must be a mapping")

# --- booleans are not numbers -------------------------------------------------------------------
case("bool-eval-every", _text(eval_every=True), "eval_every: expected an integer, not a boolean")
case("bool-steps", _text(budget={"steps": True}), "budget.steps: expected an integer, not a boolean")
case("bool-epochs", _text(budget={"epochs": True}), "budget.epochs: expected a number, not a boolean")
case("bool-seeds", _text(seeds=True), "seeds")
case("bool-seed-in-list", _text(seeds=[0, True]), "seeds[1]: expected an integer, not a boolean")
case("bool-batch-size", _text(batch_size=False), "batch_size")
case("bool-steps-per-dispatch", _text(steps_per_dispatch=True), "steps_per_dispatch")
case("bool-jobs", _text(jobs=True), "jobs: expected an integer, not a boolean")
case("bool-target-value", _text(target={"metric": "eval/accuracy", "value": True}), "target.value")
case("bool-step-size", _text(optimizers=[{"name": "sgd", "hparams": {"step_size": True}}]),
     "optimizers[0].hparams.step_size: expected a number, got True")
case("bool-width", _text(models=[{"name": "mlp", "hparams": {"width": True}}]),
     "models[0].hparams.width: expected int, got True")
case("int-measure-perf", _text(measure_perf=1), "measure_perf")
case("str-measure-perf", _text(measure_perf="yes"), "measure_perf")
case("bool-divergence", _text(divergence={"loss_factor": True}), "divergence.loss_factor")

# --- exclude / include keys ---------------------------------------------------------------------
case("exclude-misspelt-hparam", _text(exclude=[{"model.widht": 64}]),
     "exclude[0].model.widht: 'widht' is not a hyperparameter of the models of this sweep")
case("exclude-misspelt-opt-hparam", _text(exclude=[{"optimizer.step_siz": 0.1}]),
     "(did you mean 'step_size'?)")
case("exclude-unset-hparam", _text(exclude=[{"model.activation": "tanh"}]),
     "exclude[0].model.activation: no model entry of this sweep sets 'activation'")
case("exclude-unknown-key", _text(exclude=[{"modle": "mlp"}]), "unknown rule key 'modle'")
case("exclude-unknown-model", _text(exclude=[{"model": "mlpp"}]), "exclude[0].model: unknown model 'mlpp'")
case("exclude-dict-value", _text(exclude=[{"seed": {"a": 1}}]), "exclude[0].seed: a rule value is a scalar")
case("exclude-not-list", _text(exclude={"model": "cnn"}), "exclude")
case("exclude-everything", _text(exclude=[{"seed": [0, 1]}]), "no trials left")
case("include-unknown-key", _text(include=[{"modles": ["mlp"]}]), "include[0].modles: unknown key")
case("include-bad-model", _text(include=[{"models": ["resnett"]}]), "include[0].models[0].name")
case("include-bad-hparam", _text(include=[{"models": [{"name": "mlp", "hparams": {"widht": 3}}]}]),
     "include[0].models[0].hparams.widht")
case("zip-unknown-axis", _text(zip=[["models", "optimisers"]]), "zip: unknown axis 'optimisers'")
case("zip-unequal", _text(zip=[["models", "optimizers"]]), "zip")

# --- targets ------------------------------------------------------------------------------------
case("target-nan", _text(target={"metric": "valid/accuracy", "value": math.nan}),
     "target.value: must be a finite number")
case("target-inf", _text(target={"metric": "valid/loss", "value": math.inf}),
     "target.value: must be a finite")
case("target-neg-inf", _text(target={"metric": "eval/loss", "value": -math.inf}), "target.value")
case("target-acc-above-1", _text(target={"metric": "valid/accuracy", "value": 1.5}),
     "target.value: an accuracy target must be within [0, 1]")
case("target-acc-negative", _text(target={"metric": "eval/accuracy", "value": -0.1}), "within [0, 1]")
case("target-acc-percent", _text(target={"metric": "eval/accuracy", "value": 90}), "within [0, 1]")
case("target-loss-negative", _text(target={"metric": "valid/loss", "value": -1}),
     "target.value: a loss target must be >= 0 (cross-entropy and squared error never go below 0), got -1")
case("target-loss-mode-max", _text(target={"metric": "valid/loss", "value": 0.5, "mode": "max"}),
     "target.mode: valid/loss is reached going down: mode min (or leave mode out), got max")
case("target-acc-mode-min", _text(target={"metric": "valid/accuracy", "value": 0.5, "mode": "min"}),
     "target.mode: valid/accuracy is reached going up: mode max (or leave mode out), got min")
case("target-string", _text(target={"metric": "eval/accuracy", "value": "high"}), "target.value")
case("target-metric", _text(target={"metric": "eval/acc", "value": 0.9}), "target.metric")
case("targets-nan", _text(targets={"digits": {"metric": "eval/accuracy", "value": math.nan}}),
     "targets.digits.value")
case("targets-unknown-dataset", _text(targets={"digts": {"metric": "eval/accuracy", "value": 0.9}}),
     "targets.digts: not a dataset of this sweep")

# --- seeds --------------------------------------------------------------------------------------
case("seed-2-64", _text(seeds=[2**64]), "seeds[0]: Input should be less than 4294967296")
case("seed-2-32", _text(seeds=[0, 2**32]), "seeds[1]")
case("seed-negative", _text(seeds=[-1]), "seeds[0]: Input should be greater than or equal to 0")
case("seed-count-zero", _text(seeds=0), "seeds: an int seed count must be > 0")
case("seed-count-negative", _text(seeds=-3), "seeds")
case("seed-float", _text(seeds=[1.5]), "seeds[0]: expected an integer")
case("seed-string", _text(seeds=["0"]), "seeds[0]: expected an integer (a quoted string")
case("seed-nan", _text(seeds=[math.nan]), "seeds[0]")
case("seed-empty", _text(seeds=[]), "seeds: empty axis")

# --- budgets and cadences -----------------------------------------------------------------------
case("steps-1e30", _text(budget={"steps": 1e30}),
     "budget.steps: Input should be less than or equal to 1000000000")
case("steps-2-31", _text(budget={"steps": 2**31}), "budget.steps")
case("steps-zero", _text(budget={"steps": 0}), "budget.steps: Input should be greater than 0")
case("steps-negative", _text(budget={"steps": -400}), "budget.steps")
case("steps-fraction", _text(budget={"steps": 10.5}), "budget.steps: expected an integer")
case("steps-nan", _text(budget={"steps": math.nan}), "budget.steps")
case("epochs-inf", _text(budget={"epochs": math.inf}), "budget.epochs")
case("epochs-nan", _text(budget={"epochs": math.nan}), "budget.epochs")
case("epochs-1e7", _text(budget={"epochs": 1e7}), "budget.epochs")
case("epochs-derived-steps", _text(budget={"epochs": 1_000_000}, batch_size=1),
     "budget.epochs: 1e+06 epochs")
case("budget-both", _text(budget={"steps": 10, "epochs": 1}), "budget: give exactly one")
case("budget-neither", _text(budget={}), "budget: give exactly one")
case("budget-missing", _text(budget=_DROP), "<top>: give 'budget'")
case("budget-unknown-key", _text(budget={"step": 10}), "budget.step: unknown key 'step'")
case("eval-every-huge", _text(eval_every=10**12), "eval_every")
case("spd-huge", _text(steps_per_dispatch=10**9), "steps_per_dispatch")
case("jobs-huge", _text(jobs=10**6), "jobs")
case("batch-size-huge", _text(batch_size=10**12), "batch_size[0]")
case("batch-size-too-big-for-data", _text(batch_size=100_000), "batch_size: 100000 exceeds the")
case("divergence-factor-below-1", _text(divergence={"loss_factor": 0.5}), "divergence.loss_factor")
case("divergence-unknown-key", _text(divergence={"factor": 10}), "divergence.factor: unknown key")

# --- names and strings against MLflow's limits --------------------------------------------------
case("name-2000", _text(name="n" * 2000), "name: 2,000 characters; at most 200")
case("name-newline", _text(name="quick\nstart"), "name: contains the control or format character U+000A")
case("name-nul", Q.replace("name: quickstart", 'name: "quick\\0start"'), "U+0000")
case("name-bidi", _text(name="quick\u202estart"), "U+202E")
case("name-blank", _text(name="   "), "name: must not be empty")
case("name-empty", _text(name=""), "name")
case("name-bytes", _text(name="\u00e9" * 150), "name: 300 bytes in UTF-8")
case("name-number", _text(name=123), "name")
case("name-list", _text(name=["a"]), "name")
case("description-huge", _text(description="d" * 100_000), "description: 100,000 characters")
case("hparam-value-huge", _text(models=[{"name": "mlp", "hparams": {"activation": "r" * 100_000}}]),
     "models[0].hparams.activation")
case("hparam-literal-huge",
     _text(models=[{"name": "mlp", "hparams": {"width": {"value": list(range(3000))}}}]),
     "models[0].hparams.width")
case("model-name-huge", _text(models=["m" * 500_000]), "models[0].name: not a model name (500,000 characters")
case("hparam-key-huge", _text(models=[{"name": "mlp", "hparams": {"w" * 100_000: 1}}]),
     "models[0].hparams.www")
case("top-key-huge", Q + "? " + "k" * 100_000 + "\n: 1\n", "unknown key 'kkk")

# --- tracking URIs ------------------------------------------------------------------------------
case("uri-bogus", _text(tracking_uri="bogus://nowhere"), "tracking_uri: unsupported scheme 'bogus'")
case("uri-file", _text(tracking_uri="file:///tmp/mlruns"), "tracking_uri: a file store")
case("uri-path", _text(tracking_uri="some/dir"), "tracking_uri: a file store")
case("uri-sqlite-memory", _text(tracking_uri="sqlite://"), "tracking_uri: a SQLite URI needs a file path")
case("uri-http-no-host", _text(tracking_uri="http://"), "tracking_uri: no host")
case("uri-http-bad-port", _text(tracking_uri="http://127.0.0.1:99999"), "tracking_uri: malformed port")
case("uri-newline", _text(tracking_uri="http://a\nb"), "tracking_uri")
case("uri-number", _text(tracking_uri=5000), "tracking_uri")

# --- NaN, negative and huge numbers in hyperparameters ------------------------------------------
case("step-size-nan", _text(optimizers=_opt(step_size=math.nan)), "optimizers[0].hparams.step_size")
case("step-size-inf", _text(optimizers=_opt(step_size=math.inf)), "optimizers[0].hparams.step_size")
case("step-size-negative", _text(optimizers=_opt(step_size=-0.1)), "step_size: must be > 0")
case("step-size-zero", _text(optimizers=_opt(step_size=0)), "step_size: must be > 0")
case("step-size-quoted", Q.replace("step_size: 0.1}", 'step_size: "3e-3"}'),
     "step_size: expected a number, got '3e-3' (a quoted string")
case("step-size-list-nan", _text(optimizers=_opt(step_size=[0.1, math.nan])),
     "optimizers[0].hparams.step_size")
case("mass-nan", _text(optimizers=[{"name": "momentum", "hparams": {"step_size": 0.1, "mass": math.nan}}]),
     "optimizers[0].hparams.mass")
case("width-huge", _text(models=[{"name": "mlp", "hparams": {"width": 2**70}}]),
     "models[0].hparams.width")
case("width-negative", _text(models=[{"name": "mlp", "hparams": {"width": -5}}]), "models[0].hparams")
case("width-float", _text(models=[{"name": "mlp", "hparams": {"width": 64.5}}]), "models[0].hparams.width")
case("adam-b1-out-of-range", _text(optimizers=[{"name": "adam", "hparams": {"step_size": 0.1, "b1": 1.5}}]),
     "optimizers[0].hparams")
case("log-grid-negative", _text(optimizers=_opt(step_size={"log_grid": [-1, 1, 3]})),
     "optimizers[0].hparams.step_size: log_grid needs 0 < low")
case("log-grid-nan", _text(optimizers=_opt(step_size={"log_grid": [math.nan, 1, 3]})),
     "optimizers[0].hparams.step_size: log_grid must be")
case("log-grid-short", _text(optimizers=_opt(step_size={"log_grid": [0.1, 1]})), "log_grid must be")
case("log-grid-float-num", _text(optimizers=_opt(step_size={"log_grid": [0.1, 1, 2.5]})), "log_grid must be")
case("hparam-unknown-form", _text(optimizers=_opt(step_size={"grid": [0.1]})), "a mapping value must be")
case("hparam-empty-list", _text(optimizers=_opt(step_size=[])), "step_size: empty axis")

# --- unicode ------------------------------------------------------------------------------------
case("unicode-homoglyph-model", _text(models=["\u043cl\u0440"]), "models[0].name: unknown model")
case("unicode-zero-width-key", _text().replace("seeds:", "se\u200beds:"), "unknown key")
case("unicode-fullwidth-digit", _text(budget={"steps": "\uff14\uff10\uff10"}), "budget.steps")
case("unicode-emoji-dataset", _text(datasets=["digits\U0001f600"]), "datasets[0].name")
case("unicode-rtl-schedule", _text(schedules=["\u202econstant"]), "schedules[0].name")

# --- unknown keys -------------------------------------------------------------------------------
case("unknown-top-key", _text(budgett={"steps": 3}), "budgett: unknown key 'budgett'")
case("unknown-component-key", _text(models=[{"name": "mlp", "hparam": {"width": 3}}]),
     "models[0].hparam: unknown key 'hparam'")
case("unknown-target-key", _text(target={"metric": "eval/accuracy", "value": 0.9, "mod": "max"}),
     "target.mod: unknown key")
case("unknown-hparam", _text(models=[{"name": "mlp", "hparams": {"widht": 3}}]),
     "models[0].hparams.widht: unknown hyperparameter")
case("unknown-executor", _text(executor="slurm"), "executor: unknown executor 'slurm'")

# --- wrong types at every key -------------------------------------------------------------------
_WRONG = {
    "name": [None, {"a": 1}],
    "description": [123, ["x"]],
    "models": [5, "mlp", [], [5], [{}], [{"name": 5}], None],
    "optimizers": [{"sgd": 1}, [[]], [{"name": "sgd", "hparams": [1]}]],
    "schedules": [7, [None], [{"name": "constant", "zip": "a"}]],
    "datasets": ["digits", [1.5], []],
    "seeds": ["two", {"n": 2}, [[0]]],
    "batch_size": ["64", [64.5], [[64]], None],
    "budget": [400, "400", [400]],
    "eval_every": ["50", 0, -50, 50.5, [50]],
    "steps_per_dispatch": ["50", 0, 2.5],
    "target": [0.9, "eval/accuracy", [0.9]],
    "targets": [[1], "digits"],
    "batching": ["sometimes", 2, None],
    "dtype": ["float8", 32],
    "jobs": [0, -1, "2", 1.5],
    "zip": ["models", [["models"], "x"]],
    "include": ["all", [5]],
    "exclude": ["cnn", [5]],
    "executor": [5, None],
    "address": [5, ["h"]],
    "divergence": [100, "100", {"loss_factor": "big"}, {"loss_factor": math.inf}],
}
for _key, _bads in _WRONG.items():
    for _i, _bad in enumerate(_bads):
        case(f"type-{_key}-{_i}", _text(**{_key: _bad}), _key)


# --- hostile inputs that a config carries (the rest: tests below) ---------------------
case("uri-memory", _text(tracking_uri="sqlite:///:memory:"), "tracking_uri: ")
case("uri-mode-memory", _text(tracking_uri="sqlite:///file:x?mode=memory&uri=true"),
     "tracking_uri: ")
case("depth-100000", _text(models=[{"name": "mlp", "hparams": {"depth": 100_000}}]),
     "models[0].hparams.depth: model 'mlp' (depth=100000) on dataset 'digits' with input shape (8, 8, 1): "
     "mlp: depth is 100,000; at most 1,000")
case("step-size-1e308", Q.replace("step_size: 0.1}", "step_size: 1.0e308}"),
     "optimizers[0].hparams.step_size: 1e+308 is infinite in float32")
case("step-size-1e-320", Q.replace("step_size: 0.1}", "step_size: 1.0e-320}"),
     "optimizers[0].hparams.step_size: 1e-320 is 0 in float32")
case("width-1e9", _text(models=[{"name": "mlp", "hparams": {"width": 1_000_000_000, "depth": 1}}]),
     "GB of device memory")
case("steps-1.5e-3", Q.replace("steps: 400", "steps: 1.5e-3"), "budget.steps: ")

# --- a second round: an attacker's own ------------------------------------------------------------
# unicode confusables and invisible characters
case("unicode-cyrillic-optimizer", _text(optimizers=[{"name": "\u0455gd", "hparams": {"step_size": 0.1}}]),
     "optimizers[0].name: unknown optimizer")
case("unicode-cyrillic-dataset", _text(datasets=["d\u0456gits"]), "datasets[0].name: unknown dataset")
case("unicode-fullwidth-key", _text().replace("seeds:", "\uff53eeds:"), "unknown key '\uff53eeds'")
case("unicode-nbsp-key", _text().replace("seeds:", "seeds\u00a0:"), "unknown key")
case("unicode-bom-in-name", _text(name="quick\ufeffstart"),
     "name: contains the control or format character U+FEFF")
case("unicode-zwj-name", _text(name="quick\u200dstart"), "U+200D")
case("unicode-tab-in-name", _text(name="quick\tstart"), "U+0009")
case("unicode-lone-surrogate-bytes",
     Q.replace("name: quickstart", "name: quick").encode() + b"\xed\xa0\x80\n",
     "not UTF-8 text")
case("unicode-utf32", Q.encode("utf-32"), "not UTF-8 text")
case("unicode-homoglyph-hparam-key", _text(models=[{"name": "mlp", "hparams": {"w\u0456dth": 8}}]),
     "models[0].hparams.w\u0456dth: unknown hyperparameter")
# NUL bytes where strings go
case("nul-in-key", Q.replace("seeds: 2", '"see\\0ds": 2'), "unknown key")
case("nul-in-model-name", _text(models=["mlp\x00"]), "models[0].name")
case("nul-in-tracking-uri", _text(tracking_uri="sqlite:///x\x00.db"), "tracking_uri")
case("nul-in-hparam-string", _text(models=[{"name": "mlp", "hparams": {"activation": "relu\x00"}}]),
     "models[0].hparams.activation")
# integers beyond every float (10**400)
_HUGE = 10**400
case("huge-int-steps", _text(budget={"steps": _HUGE}), "budget.steps")
case("huge-int-seed", _text(seeds=[_HUGE]), "seeds[0]")
case("huge-int-seed-count", _text(seeds=_HUGE), "seeds")
case("huge-int-width", _text(models=[{"name": "mlp", "hparams": {"width": _HUGE}}]),
     "models[0].hparams.width: 1000")
case("huge-int-width-64-bits", _text(models=[{"name": "mlp", "hparams": {"width": _HUGE}}]),
     "does not fit in 64 bits")
case("huge-int-step-size", _text(optimizers=_opt(step_size=_HUGE)),
     "optimizers[0].hparams.step_size: 1000")
case("huge-int-step-size-list", _text(optimizers=_opt(step_size=[0.1, _HUGE])), "does not fit in 64 bits")
case("huge-int-mass", _text(optimizers=[{"name": "momentum", "hparams": {"step_size": 0.1, "mass": _HUGE}}]),
     "optimizers[0].hparams.mass: 1000000000000000000000000000...00000000000000000000000000000 does not "
     "fit in 64 bits")
case("huge-int-target-value", _text(target={"metric": "valid/loss", "value": _HUGE}), "target.value")
case("huge-int-batch-size", _text(batch_size=_HUGE), "batch_size")
case("huge-int-eval-every", _text(eval_every=_HUGE), "eval_every")
case("huge-int-loss-factor", _text(divergence={"loss_factor": _HUGE}), "divergence.loss_factor")
case("huge-int-epochs", _text(budget={"epochs": _HUGE}), "budget.epochs")
case("huge-int-search-trials", _text(search={"method": "random", "trials": _HUGE}, optimizers=[
    {"name": "sgd", "hparams": {"step_size": {"log_uniform": [1e-3, 1.0]}}}]), "search.trials")
case("huge-int-log-uniform", _text(search={"method": "random", "trials": 2}, optimizers=[
    {"name": "sgd", "hparams": {"step_size": {"log_uniform": [1e-3, _HUGE]}}}]),
    "optimizers[0].hparams.step_size: log_uniform needs finite bounds")
# negative zero
case("negzero-step-size", _text(optimizers=_opt(step_size=-0.0)),
     "optimizers[0].hparams.step_size: must be > 0")
case("negzero-epochs", _text(budget={"epochs": -0.0}), "budget.epochs")
case("negzero-batch-size", _text(batch_size=-0.0), "batch_size")
# NaN in every other numeric key
case("nan-batch-size", _text(batch_size=math.nan), "batch_size")
case("nan-eval-every", _text(eval_every=math.nan), "eval_every")
case("nan-steps-per-dispatch", _text(steps_per_dispatch=math.nan), "steps_per_dispatch")
case("nan-jobs", _text(jobs=math.nan), "jobs")
case("nan-loss-factor", _text(divergence={"loss_factor": math.nan}), "divergence.loss_factor")
case("nan-width", _text(models=[{"name": "mlp", "hparams": {"width": math.nan}}]), "models[0].hparams.width")
case("nan-dropout", _text(models=[{"name": "mlp", "hparams": {"dropout": math.nan}}]),
     "models[0].hparams.dropout")
case("nan-adam-b1", _text(optimizers=[{"name": "adam", "hparams": {"step_size": 0.1, "b1": math.nan}}]),
     "optimizers[0].hparams.b1")
case("nan-adam-eps", _text(optimizers=[{"name": "adam", "hparams": {"step_size": 0.1, "eps": math.nan}}]),
     "optimizers[0].hparams.eps")
case("nan-schedule-hparam",
     _text(schedules=[{"name": "exponential_decay", "hparams": {"decay_rate": math.nan}}]),
     "schedules[0].hparams.decay_rate")
case("nan-log-uniform", _text(search={"method": "random", "trials": 2}, optimizers=[
    {"name": "sgd", "hparams": {"step_size": {"log_uniform": [math.nan, 1.0]}}}]),
    "optimizers[0].hparams.step_size")
case("nan-search-trials", _text(search={"method": "random", "trials": math.nan}, optimizers=[
    {"name": "sgd", "hparams": {"step_size": {"log_uniform": [1e-3, 1.0]}}}]), "search.trials")
case("nan-seed-count", _text(seeds=math.nan), "seeds")
case("inf-width", _text(models=[{"name": "mlp", "hparams": {"width": math.inf}}]), "models[0].hparams.width")
# lists where maps go, maps where scalars go
case("list-budget", _text(budget=[{"steps": 10}]), "budget")
case("list-divergence", _text(divergence=[10]), "divergence")
case("list-search", _text(search=["random"]), "search")
case("list-model-entry-hparams", _text(models=[{"name": "mlp", "hparams": [["width", 3]]}]),
     "models[0].hparams")
case("map-steps", _text(budget={"steps": {"a": 1}}), "budget.steps")
case("map-dtype", _text(dtype={"float32": 1}), "dtype")
case("map-seed-in-list", _text(seeds=[{"a": 1}]), "seeds[0]")
case("map-executor", _text(executor={"ray": 1}), "executor")
case("map-tracking-uri", _text(tracking_uri={"sqlite": "x"}), "tracking_uri")
case("map-model-name", _text(models=[{"name": {"mlp": 1}}]), "models[0].name")
# 10k-element lists
case("list-10k-step-sizes", _text(optimizers=_opt(step_size=[0.001 * (i + 1) for i in range(10_000)])),
     "optimizers[0].hparams.step_size: the sweep would expand")
case("list-10k-models", _text(models=["mlp"] * 10_000), "models")
case("list-10k-datasets", _text(datasets=["digits"] * 10_000), "datasets")
case("list-10k-zip", _text(zip=[["models", "optimizers"]] * 10_000), "zip")
# anchors, aliases and merges
case("anchor-chain-60", "".join(f"a{i}: &a{i} [{'*a' + str(i - 1) if i else 1}]\n" for i in range(60))
     + Q.replace("seeds: 2", "seeds: *a59"), "nested more than 50")
case("merge-scalar", Q.replace("budget: {steps: 400}", "budget: {<<: 5, steps: 400}"),
     "not valid YAML: line 17, column 14: while constructing a mapping expected a mapping or list of "
     "mappings for merging, but found scalar")
case("merge-list-of-scalars", Q.replace("budget: {steps: 400}", "budget: {<<: [1, 2], steps: 400}"),
     "not valid YAML: line 17, column 15: while constructing a mapping expected a mapping for merging")
case("merge-alias-to-list", "l: &l [1]\n" + Q.replace("budget: {steps: 400}", "budget: {<<: *l}"),
     "not valid YAML: line 1, column 8: while constructing a mapping expected a mapping for merging")
case("merge-unknown-key", "b: &b {stepz: 3}\n" + Q.replace("budget: {steps: 400}", "budget: {<<: *b}"),
     "unknown key")
# keys that are numbers, booleans, null
_NAME = "in YAML, not a name; remove it, or quote it if it is meant as a name"
case("key-int-top", Q + "1: x\n", f"<top>: the key 1 is a number {_NAME}")
case("key-bool-top", Q + "yes: 1\n",
     f"<top>: the key True is a boolean (yes, no, on, off, true, false) {_NAME}")
case("key-null-top", Q + "~: 1\n", f"<top>: the key None is null (~ or null) {_NAME}")
case("key-float-hparam", _text(models=[{"name": "mlp", "hparams": {1.5: 3}}]),
     f"models[0].hparams: the key 1.5 is a number {_NAME}")
case("key-int-budget", _text(budget={1: 10}), f"budget: the key 1 is a number {_NAME}")
case("key-bool-hparams", Q.replace("{width: 64, depth: 2}", "{width: 64, on: 2}"),
     "models[0].hparams: the key True is a boolean")
# schedules with absurd parameters
case("sched-warmup-negative",
     _text(schedules=[{"name": "warmup_cosine_decay", "hparams": {"warmup_steps": -5}}]),
     "schedules[0].hparams.warmup_steps")
case("sched-warmup-huge", _text(schedules=[{"name": "warmup_cosine_decay",
                                             "hparams": {"warmup_steps": 10**12}}]), "schedules[0].hparams")
case("sched-decay-negative", _text(schedules=[{"name": "exponential_decay",
                                                "hparams": {"decay_rate": -1.0, "decay_steps": 100}}]),
     "schedules[0].hparams.decay_rate: schedule 'exponential_decay' (decay_rate=-1.0, decay_steps=100.0, "
     "total_steps=400) with optimizer 'sgd': decay_rate must be positive, got -1.0")
case("sched-exp-decay-zero-steps", _text(schedules=[{"name": "exponential_decay", "hparams": {
    "decay_rate": 0.5, "decay_steps": 0}}]), "schedules[0].hparams.decay_steps: schedule 'exponential_decay'")
case("sched-inverse-time-negative", _text(schedules=[{"name": "inverse_time_decay", "hparams": {
    "decay_rate": -2.0, "decay_steps": 10}}]), "decay_rate must be >= 0, got -2.0")
case("sched-polynomial-negative-final", _text(schedules=[{"name": "polynomial_decay", "hparams": {
    "decay_steps": 100, "final_step_size": -0.5}}]), "final_step_size must be >= 0, got -0.5")
case("adam-eps-negative", _text(optimizers=[{"name": "adam", "hparams": {"step_size": 0.1, "eps": -1e-8}}]),
     "optimizers[0].hparams.eps: optimizer 'adam' (eps=-1e-08, step_size=0.1): eps must be >= 0, got -1e-08")
case("rmsprop-gamma-above-1",
     _text(optimizers=[{"name": "rmsprop", "hparams": {"step_size": 0.1, "gamma": 1.5}}]),
     "optimizers[0].hparams.gamma: optimizer 'rmsprop' (gamma=1.5, step_size=0.1): gamma must be in [0, 1)")
case("sched-unknown-hparam", _text(schedules=[{"name": "cosine_decay", "hparams": {"alpah": 0.1}}]),
     "schedules[0].hparams.alpah: unknown hyperparameter")
case("sched-piecewise-garbage", _text(schedules=[{"name": "piecewise", "hparams": {"boundaries": "x"}}]),
     "schedules[0].hparams")
# targets with metrics that do not exist
case("target-metric-test", _text(target={"metric": "test/accuracy", "value": 0.9}), "target.metric")
case("target-metric-empty", _text(target={"metric": "", "value": 0.9}), "target.metric")
case("target-metric-injection", _text(target={"metric": "valid/accuracy' OR 1=1 --", "value": 0.9}),
     "target.metric")
case("target-metric-train", _text(target={"metric": "train/perplexity", "value": 0.9}), "target.metric")
# duplicate entries, ranges, cadences
case("seed-2-31-negative", _text(seeds=[-(2**31)]), "seeds[0]")
case("batch-size-negative", _text(batch_size=-32), "batch_size")
case("batch-size-zero-in-list", _text(batch_size=[32, 0]), "batch_size")
case("eval-every-negative-zero", Q.replace("eval_every: 50", "eval_every: -0"), "eval_every")
case("steps-per-dispatch-negative", _text(steps_per_dispatch=-1), "steps_per_dispatch")
case("jobs-negative-huge", _text(jobs=-(10**400)), "jobs")
# optimizer sources that are not code
case("source-dev-zero",
     _text(optimizers=[{"name": "mine", "source": "/dev/zero:f", "hparams": {"step_size": 0.1}}]),
     "optimizers[0].source")
case("source-etc-passwd", _text(optimizers=[{"name": "mine", "source": "../../../../../../etc/passwd:f",
                                               "hparams": {"step_size": 0.1}}]), "optimizers[0].source")
case("source-directory",
     _text(optimizers=[{"name": "mine", "source": "/tmp:f", "hparams": {"step_size": 0.1}}]),
     "optimizers[0].source")
case("source-proc-self", _text(optimizers=[{"name": "mine", "source": "/proc/self/mem:f",
                                              "hparams": {"step_size": 0.1}}]), "optimizers[0].source")
case("source-empty", _text(optimizers=[{"name": "mine", "source": "", "hparams": {"step_size": 0.1}}]),
     "optimizers[0].source")
# search spaces that are empty or undefined
_S = {"method": "random", "trials": 3}
case("search-log-uniform-reversed", _text(search=_S, optimizers=_opt(step_size={"log_uniform": [1.0, 1e-3]})),
     "optimizers[0].hparams.step_size")
case("search-log-uniform-zero", _text(search=_S, optimizers=_opt(step_size={"log_uniform": [0, 1.0]})),
     "optimizers[0].hparams.step_size")
case("search-log-uniform-negative", _text(search=_S, optimizers=_opt(step_size={"log_uniform": [-1, 1.0]})),
     "optimizers[0].hparams.step_size")
case("search-uniform-reversed", _text(search=_S, optimizers=[{"name": "momentum", "hparams": {
    "step_size": 0.1, "mass": {"uniform": [0.99, 0.1]}}}]), "optimizers[0].hparams.mass")
case("search-int-uniform-reversed", _text(search=_S, models=[{"name": "mlp", "hparams": {
    "width": {"int_uniform": [64, 8]}}}]), "models[0].hparams.width")
case("search-choice-empty", _text(search=_S, optimizers=_opt(step_size={"choice": []})),
     "optimizers[0].hparams.step_size")
case("search-uniform-equal", _text(search=_S, optimizers=[{"name": "momentum", "hparams": {
    "step_size": 0.1, "mass": {"uniform": [0.5, 0.5]}}}]), "optimizers[0].hparams.mass")
case("search-method-unknown", _text(search={"method": "bayes", "trials": 3}), "search.method")
case("search-trials-zero", _text(search={"method": "random", "trials": 0}, optimizers=_opt(
    step_size={"log_uniform": [1e-3, 1.0]})), "search.trials")
# the file itself
case("file-long-line", Q.replace("description: MLP", "description: " + "x" * 900_000 + " MLP"),
     "description: 900,")
case("file-only-comments", "# nothing\n# here\n", "<top>: a sweep config must be a mapping")
case("file-null-document", "~\n", "<top>: a sweep config must be a mapping")


def _guard(seconds: float, max_bytes: int):
    """Every 50 ms: raise ``TimeoutError`` past ``seconds``, ``MemoryError`` past ``max_bytes``
    traced by ``tracemalloc`` (so a runaway case fails instead of exhausting the shared machine).
    Returns the previous SIGALRM handler."""
    t_end = time.perf_counter() + seconds

    def check(signum, frame):
        if time.perf_counter() > t_end:
            raise TimeoutError(f"case ran over {seconds} s")
        if tracemalloc.is_tracing() and tracemalloc.get_traced_memory()[0] > max_bytes:
            raise MemoryError(f"case holds over {max_bytes / 2**20:.0f} MiB")

    old = signal.signal(signal.SIGALRM, check)
    signal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)
    return old


@pytest.fixture(scope="module")
def warm():
    """Import jax, the registries and the preflight once, outside the measurement, by loading and
    pre-flighting the real quickstart."""
    from harness.orchestrate import run as sweep

    cfg = load_config(QUICKSTART)
    sweep.preflight(cfg, str(QUICKSTART))
    return sweep


@pytest.fixture
def no_store(monkeypatch):
    def touched(*a, **k):
        raise AssertionError("the MLflow store was touched")

    monkeypatch.setattr("harness.orchestrate.run.prepare_store", touched)  # where run_sweep looks it up
    monkeypatch.setattr("harness.tracking.client.prepare_store", touched)
    monkeypatch.setattr("harness.tracking.client.client_for", touched)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def test_case_count_and_categories():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 343  # 228 before a round of hostile inputs
    assert len(ACCEPTED) >= 15 and len({c[0] for c in ACCEPTED}) == len(ACCEPTED)
    for prefix in ("plan-", "dup-", "bomb-", "bool-", "exclude-", "include-", "target-", "seed-",
                   "steps-", "epochs-", "name-", "uri-", "non-utf8-", "deep-nesting-", "unicode-",
                   "type-", "binary-", "unknown-", "depth-", "nul-", "huge-int-", "negzero-", "nan-",
                   "list-", "map-", "anchor-", "merge-", "key-", "sched-", "source-", "search-", "file-"):
        assert any(i.startswith(prefix) for i in ids), prefix


@pytest.mark.parametrize(("cid", "content", "key"), CASES, ids=[c[0] for c in CASES])
def test_hostile_config_rejected_before_any_write(cid, content, key, tmp_path, warm, no_store,
                                                  monkeypatch):
    path = tmp_path / f"{cid}.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracemalloc.start()
    old = _guard(3 * MAX_SECONDS, 8 * MAX_PEAK_BYTES)
    t0 = time.perf_counter()
    try:
        with pytest.raises(ConfigError) as ei:
            warm.run_sweep(path, tracking_uri=uri, quiet=True)
    finally:
        dt = time.perf_counter() - t0
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    _STATS.append((cid, dt, peak))
    lines = ei.value.errors
    assert lines, cid
    for line in lines:
        assert line.startswith(f"{path}: "), line[:300]
        assert "\n" not in line and len(line) <= 1000, line[:300]
    assert len(lines) == len(set(lines)), f"{cid}: a line repeated:\n" + "\n".join(lines)[:2000]
    text = "\n".join(lines)
    assert key in text, f"{cid}: {key!r} not in:\n{text[:2000]}"
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()
    assert dt < MAX_SECONDS, f"{cid}: {dt:.2f} s"
    assert peak < MAX_PEAK_BYTES, f"{cid}: peak {peak / 2**20:.1f} MiB"


#: Hostile-looking configs that are right and must load, with what they load as: (case id, content,
#: {attribute path: value} on the loaded config, or "trials": the pre-flight's trial count).
ACCEPTED: list[tuple[str, str | bytes, dict]] = [
    # a float with an integral value is an integer budget, as people write budgets
    ("steps-1.5e3", Q.replace("steps: 400", "steps: 1.5e3"), {"budget.steps": 1500}),
    ("steps-1e3", Q.replace("steps: 400", "steps: 1e3"), {"budget.steps": 1000}),
    ("step-size-1.0e0", Q.replace("step_size: 0.1}", "step_size: 1.0e0}"),
     {"optimizers[0].hparams.step_size": 1.0}),
    # the name is kept; its artifact folder is made safe (tests/test_tracking.py)
    ("name-dotdot", _text(name=".."), {"name": ".."}),
    # an MLflow tracking URI the harness hands to MLflow (Databricks' own login applies)
    ("uri-databricks", _text(tracking_uri="databricks"), {"tracking_uri": "databricks"}),
    ("file-bom", "\ufeff" + Q, {"name": "quickstart", "trials": 24}),
    ("file-bom-twice", "\ufeff\ufeff" + Q, {"name": "quickstart", "trials": 24}),
    ("file-crlf", Q.replace("\n", "\r\n"), {"name": "quickstart", "budget.steps": 400, "trials": 24}),
    ("file-cr-only", Q.replace("\n", "\r"), {"name": "quickstart", "budget.steps": 400, "trials": 24}),
    ("file-tab-after-colon", Q.replace("seeds: 2", "seeds:\t2"), {"seeds": [0, 1]}),
    ("negzero-loss-target", _text(target={"metric": "valid/loss", "value": -0.0}), {"target.value": 0.0}),
    ("seed-max-uint32", _text(seeds=[2**32 - 1]), {"seeds": [2**32 - 1]}),
    ("unicode-combining-name", _text(name="quickstart\u0301"), {"name": "quickstart\u0301"}),
    # the same entry twice is the same trials once, not twice
    ("dup-optimizer-entries", _text(optimizers=[{"name": "sgd", "hparams": {"step_size": 0.1}}] * 2),
     {"trials": 8}),
    # search with nothing to sample: the grid, as without search
    ("search-no-distribution", _text(search={"method": "random", "trials": 3}), {"trials": 24}),
]


def _attr(cfg, path: str):
    import re as _re

    obj = cfg
    for part in _re.findall(r"[^.\[\]]+|\[\d+\]", path):
        obj = obj[int(part[1:-1])] if part.startswith("[") else (
            obj[part] if isinstance(obj, dict) else getattr(obj, part))
    return obj


@pytest.mark.parametrize(("cid", "content", "expect"), ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_hostile_looking_config_that_is_right_loads(cid, content, expect, tmp_path, warm):
    path = tmp_path / f"{cid}.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    t0 = time.perf_counter()
    cfg = load_config(path)
    for key, want in expect.items():
        got = len(warm.preflight(cfg, str(path))) if key == "trials" else _attr(cfg, key)
        assert got == want and type(got) is type(want), (cid, key, got)
    assert time.perf_counter() - t0 < MAX_SECONDS


def test_a_schedules_own_problem_is_one_line_not_one_per_optimizer_and_model(tmp_path, warm):
    """The pre-flight builds each schedule with each optimizer (and model): a problem of the schedule
    alone was reported 6 times for quickstart's 2 models x 3 optimizers."""
    p = tmp_path / "s.yaml"
    p.write_text(_text(schedules=[{"name": "exponential_decay", "hparams": {"decay_rate": -1.0,
                                                                            "decay_steps": 100}}]))
    with pytest.raises(ConfigError) as ei:
        warm.preflight(load_config(p), str(p))
    assert ei.value.errors == [
        f"{p}: schedules[0].hparams.decay_rate: schedule 'exponential_decay' (decay_rate=-1.0, "
        f"decay_steps=100.0, total_steps=400) with optimizer 'sgd': decay_rate must be positive, got -1.0"]


def test_missing_file_and_directory_name_the_file(tmp_path):
    for p, msg in ((tmp_path / "nope.yaml", "cannot read: No such file or directory"),
                   (tmp_path, "is a folder; give the path of a YAML file")):
        with pytest.raises(ConfigError) as ei:
            load_config(p)
        assert ei.value.errors == [f"{p}: {msg}"]


def test_bad_tracking_uri_from_cli_and_env_is_a_usage_error(tmp_path, warm, no_store, monkeypatch):
    path = tmp_path / "q.yaml"
    path.write_text(Q)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"^--tracking-uri: unsupported scheme 'bogus'"):
        warm.run_sweep(path, tracking_uri="bogus://nowhere", quiet=True)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "ftp://host/x")
    with pytest.raises(ValueError, match=r"^MLFLOW_TRACKING_URI: unsupported scheme 'ftp'"):
        warm.run_sweep(path, quiet=True)
    assert not (tmp_path / "mlflow.db").exists()


def test_max_trials_raises_the_plan_limit(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text(_text(seeds=DEFAULT_MAX_TRIALS))  # 12 configurations x 10,000 seeds
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert ei.value.errors == [
        f"{p}: seeds: the sweep would expand to 120,000 trials, more than the limit of 10,000; this "
        f"key gives 10,000 values. Shrink the grid, or raise the limit with `python -m harness sweep "
        f"--max-trials N`"]
    cfg = load_config(p, max_trials=120_000)
    assert len(cfg.seeds) == 10_000


_CLI_CASES = ["plan-log-grid-1e9", "bomb-description", "non-utf8-latin1", "dup-top-budget",
              "name-2000", "uri-bogus", "exclude-misspelt-hparam", "bool-eval-every"]

_CLI_SCRIPT = """\
import contextlib, io, json, sys
from harness.cli import app
out = []
for path in sys.argv[1:]:
    err = io.StringIO()
    args = ["sweep", path]
    if path.endswith("/q.yaml"):
        args += ["--tracking-uri", "bogus://x"]
    with contextlib.redirect_stderr(err):
        try:
            app(args)
            code = 0
        except SystemExit as e:
            code = e.code
    out.append([path, code, err.getvalue()])
print(json.dumps(out))
"""


def test_hostile_configs_through_the_cli(tmp_path):
    """The real CLI (typer's ``app``, in one subprocess for all cases so jax is imported once):
    exit 2, ``invalid sweep config:`` then one ``FILE: KEY: message`` line per problem, no
    traceback, no store; a bad ``--tracking-uri`` is one ``error:`` line, exit 2."""
    by_id = {c[0]: c for c in CASES}
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    paths = []
    for cid in _CLI_CASES:
        content = by_id[cid][1]
        p = tmp_path / f"{cid}.yaml"
        p.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        paths.append(str(p))
    q = tmp_path / "q.yaml"
    q.write_text(Q)
    paths.append(str(q))
    r = subprocess.run([sys.executable, "-c", _CLI_SCRIPT, *paths], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads(r.stdout.strip().splitlines()[-1])
    for (path, code, err), cid in zip(results, [*_CLI_CASES, "cli-uri"], strict=True):
        assert code == 2, (cid, code, err[-2000:])
        assert "Traceback" not in err, err[-2000:]
        # a stage that lasted is said on stderr first ("sweep: loading ...", harness.orchestrate.progress)
        lines = [ln for ln in err.strip().splitlines() if not ln.startswith("sweep: ")]
        if cid == "cli-uri":
            assert lines == ["error: --tracking-uri: unsupported scheme 'bogus'; use sqlite:///PATH/"
                             "mlflow.db (a local store), http://HOST:PORT or https://... (an MLflow "
                             "server), or a database URI (postgresql://, mysql://, mssql://)"]
            continue
        assert lines[0] == "invalid sweep config:", (cid, lines[:3])
        assert all(ln.startswith(f"{path}: ") for ln in lines[1:]), (cid, lines)
        assert by_id[cid][2] in err, (cid, err[-2000:])
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def test_zz_report_fuzz_figures():
    """Prints the figures for the closing note (runs after the parametrised cases)."""
    if not _STATS:
        pytest.skip("no fuzz cases ran")
    slow = max(_STATS, key=lambda s: s[1])
    big = max(_STATS, key=lambda s: s[2])
    med = sorted(s[1] for s in _STATS)[len(_STATS) // 2]
    print(f"\nfuzz: {len(_STATS)} cases rejected before any store write; median {med * 1000:.0f} ms; "
          f"slowest {slow[0]} {slow[1] * 1000:.0f} ms; largest traced peak {big[0]} "
          f"{big[2] / 2**20:.1f} MiB")
