"""Pretraining recipe keys under hostile input: a token budget below one step and a parameter group
with no rule are refused in one line naming the key, instead of training something else."""

from __future__ import annotations

import pytest
from test_token_budget import _cfg

from harness.config.errors import ConfigError
from harness.config.load import parse_config
from harness.plan.expansion import expand

#: markov_lm's window (tokens per example) at the default hyperparameters; batch 16.
T = 32


@pytest.mark.parametrize("budget, line", [
    ({"tokens": 100}, "F: budget.tokens: 100 tokens are less than one step (batch_size 16 x 32 tokens per "
                      "example = 512); give at least that"),
    ({"tokens": 511}, "F: budget.tokens: 511 tokens are less than one step"),
    ({"tokens_per_param": 0.01}, "F: budget.tokens_per_param: 0.01 x 1,416 parameters: 14 tokens are less "
                                 "than one step (batch_size 16 x 32 tokens per example = 512)"),
])
def test_a_token_budget_below_one_step_is_refused(budget, line):
    with pytest.raises(ConfigError) as e:
        expand(parse_config(_cfg(budget)), file="F")
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith(line), e.value.errors


def test_one_step_of_tokens_trains_one_step():
    (spec,) = expand(parse_config(_cfg({"tokens": 16 * T})))
    assert spec.steps == 1


@pytest.mark.parametrize("rules", [[], [1], None, "", ["head", ""]])
def test_a_parameter_group_without_a_rule_is_refused(rules):
    cfg = _cfg({"steps": 2}, param_groups=[{"rules": rules, "step_size_scale": 0.5}])
    with pytest.raises(ConfigError) as e:
        parse_config(cfg, "F")
    want = "F: param_groups[0].rules: expected a rule or a non-empty list of rules"
    assert len(e.value.errors) == 1 and e.value.errors[0].startswith(want), e.value.errors
