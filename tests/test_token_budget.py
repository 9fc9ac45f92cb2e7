"""budget: {tokens: D} and {tokens_per_param: R} for any sweep, counted as the ladder counts; refusals."""

from __future__ import annotations

import pytest
from test_ladder import T, transformer_params

from harness.config.errors import ConfigError
from harness.config.load import parse_config
from harness.plan.expansion import expand


def _cfg(budget, **kw):
    return {"name": "tok", "seeds": [0], "batch_size": 16, "measure_perf": False,
            "models": [{"name": "transformer_lm", "hparams": {"width": kw.pop("width", 8), "depth": 1,
                                                              "num_heads": 2}}],
            "datasets": [kw.pop("dataset", "markov_lm")],
            "optimizers": [{"name": "adamw", "hparams": {"step_size": 0.003}}], "budget": budget, **kw}


def test_tokens_budget_is_steps_of_batch_times_window():
    # 100,000 tokens / (16 examples x 32 tokens) = 195.3 -> 195 steps
    (spec,) = expand(parse_config(_cfg({"tokens": 100_000})))
    assert spec.steps == round(100_000 / (16 * T)) == 195


def test_tokens_per_param_counts_the_model_as_the_ladder():
    # width 8, depth 1: N = 1,416 (test_ladder's count by hand); 20 tokens/param = 28,320 tokens / 512
    (spec,) = expand(parse_config(_cfg({"tokens_per_param": 20})))
    n = transformer_params(8, 1)
    assert n == 1416 and spec.steps == round(20 * n / (16 * T)) == 55
    grid = _cfg({"tokens_per_param": 20})
    grid["models"][0]["hparams"]["width"] = [8, 16]
    steps = {s.hparams("model")["width"]: s.steps for s in expand(parse_config(grid))}
    assert steps == {8: 55, 16: round(20 * transformer_params(16, 1) / (16 * T))}


@pytest.mark.parametrize("budget, kw, line", [
    ({"tokens": 1000}, {"dataset": "digits", "models": [{"name": "mlp"}]},
     "F: budget.tokens: dataset 'digits' is not a sequence dataset (it has no tokens); give budget.steps "
     "or budget.epochs"),
    ({"tokens": 10**18}, {}, "F: budget.tokens: 1,000,000,000,000,000,000 tokens of dataset 'markov_lm' at "
                             "batch size 16 are 1,953,125,000,000,000 steps; at most 1,000,000,000"),
    ({"tokens": 100, "steps": 3}, {}, "budget: give exactly one of 'steps', 'epochs', 'tokens' or "
                                      "'tokens_per_param'"),
    ({"tokens_per_param": 20}, {"search": {"method": "random", "trials": 2}, "models": [
        {"name": "transformer_lm", "hparams": {"width": {"int_uniform": [8, 16]}, "num_heads": 2}}]},
     "F: budget.tokens_per_param: counts each model's parameters; models[0] samples its hyperparameters "
     "(give them values)"),
])
def test_refusals(budget, kw, line):
    with pytest.raises(ConfigError) as e:
        expand(parse_config(_cfg(budget, **kw)), file="F")
    assert any(line in x for x in e.value.errors), e.value.errors
