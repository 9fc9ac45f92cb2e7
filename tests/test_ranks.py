"""reports.ranks: the leaderboard's shared ranks on hand-built frames (issue 22 §6). Found by a new
user: adam and momentum reached the target at the same step on both seeds, and wall-clock jitter
(0.402 s and 0.182 s for momentum's 150 steps) ranked adam first."""

from __future__ import annotations

import pandas as pd

from harness.core import names as N
from reports import frame as RF
from reports import ranks as R
from reports.leaderboard import leaderboard


def _frame(per_opt: dict[str, list[float]], target: bool = True, steps: dict[str, int] | None = None,
           ) -> pd.DataFrame:
    """One task; per optimizer one configuration whose seed ``i`` has value ``per_opt[opt][i]``:
    seconds to the target (``target=True``: every seed reached it, at ``steps[opt]`` steps; by
    default each optimizer at its own count, so the seconds order them), else final validation
    accuracy."""
    rows = []
    steps = steps or {opt: 100 + 50 * i for i, opt in enumerate(per_opt)}
    for opt, values in per_opt.items():
        for seed, v in enumerate(values):
            rows.append({
                "row": "summary", "task": "mlp / digits", "optimizer": opt, "config_id": f"{opt}-0",
                "config": f"{opt} lr=0.1", "seed": seed, "status": "finished",
                N.M_SECONDS_TO_TARGET: v if target else None,
                N.M_STEPS_TO_TARGET: steps[opt] if target else None,
                N.M_FINAL_ACC: 0.9 if target else v, N.M_FINAL_LOSS: 0.1, N.M_TEST_ACC: 0.9,
                N.M_TEST_LOSS: 0.1, N.M_STEP_MS: 1.0, "protocol": RF.PROTOCOL_THREE_SPLITS,
                "target_metric": "valid/accuracy", "target_mode": "max", "target_value": 0.99 if not target
                else 0.9})
    return pd.DataFrame(rows)


def _labels(frame: pd.DataFrame) -> dict[str, str]:
    return R.shared_ranks(frame).set_index("optimizer")["label"].to_dict()


def test_overlapping_min_max_intervals_share_a_rank_disjoint_ones_do_not():
    # momentum's seeds 0.402 s and 0.182 s straddle adam's 0.25 s and 0.3 s
    f = _frame({"adam": [0.25, 0.30], "momentum": [0.402, 0.182], "sgd": [0.9, 1.1]})
    assert _labels(f) == {"adam": "1=", "momentum": "1=", "sgd": "3"}
    lb = leaderboard(f).set_index("Optimizer")
    assert lb["Rank"].to_dict() == {"adam": "1=", "momentum": "1=", "sgd": "3"}
    assert lb["_rank"].to_dict() == {"adam": 1, "momentum": 2, "sgd": 3}  # the strict order stays
    # disjoint: [0.25, 0.30] and [0.31, 0.40] do not touch
    assert _labels(_frame({"adam": [0.25, 0.30], "momentum": [0.31, 0.40]})) == {"adam": "1", "momentum": "2"}
    # a group takes in whoever cannot be told from one of its members: c overlaps b (not a)
    f = _frame({"a": [1.0, 1.2], "b": [1.1, 1.5], "c": [1.3, 1.6]})
    assert _labels(f) == {"a": "1=", "b": "1=", "c": "1="}
    # d is told apart from every member: a group of its own
    f = _frame({"a": [1.0, 1.2], "b": [1.1, 1.5], "c": [1.3, 1.6], "d": [1.7, 1.8]})
    assert _labels(f) == {"a": "1=", "b": "1=", "c": "1=", "d": "4"}


def test_without_a_target_the_final_metric_decides_and_ties_alike():
    f = _frame({"adam": [0.95, 0.97], "sgd": [0.96, 0.98], "lion": [0.90, 0.92]}, target=False)
    assert _labels(f) == {"sgd": "1=", "adam": "1=", "lion": "3"}


def test_five_paired_seeds_use_the_paired_comparison():
    a = [1.0, 1.1, 1.2, 1.3, 1.4]
    # the min–max intervals overlap, but b is 0.2 s slower on every seed: distinguishable
    assert _labels(_frame({"a": a, "b": [x + 0.2 for x in a]})) == {"a": "1", "b": "2"}
    # differences of both signs: the paired interval contains 0, a shared rank
    assert _labels(_frame({"a": a, "b": [1.05, 1.0, 1.3, 1.25, 1.45]})) == {"a": "1=", "b": "1="}


def test_selecting_by_the_final_metric_ties_on_it_not_on_seconds():
    # both reach the target; seconds far apart (a strict order by time), final accuracies overlap
    f = _frame({"adam": [0.1, 0.1], "momentum": [0.5, 0.6]})
    assert _labels(f) == {"adam": "1", "momentum": "2"}  # time to target: told apart
    f[N.M_FINAL_ACC] = [0.95, 0.97, 0.96, 0.98]  # adam's seeds, then momentum's
    f.attrs[RF.SELECT_BY_ATTR] = "final"
    assert _labels(f) == {"momentum": "1=", "adam": "1="}  # by final accuracy: [0.95, 0.97] ∩ [0.96, 0.98]
    f[N.M_FINAL_ACC] = [0.90, 0.91, 0.96, 0.98]
    assert _labels(f) == {"momentum": "1", "adam": "2"}


def test_the_same_steps_to_target_is_a_tie_on_time_the_final_metric_decides():
    # the new user's case: adam and momentum reached the target at step 50 on both seeds; their
    # (modeled) seconds are disjoint only because momentum's step time was measured 2x adam's
    f = _frame({"adam": [0.0091, 0.0091], "momentum": [0.0173, 0.0173], "sgd": [0.05, 0.05]},
               steps={"adam": 50, "momentum": 50, "sgd": 100})
    f[N.M_FINAL_ACC] = [0.9756, 0.9791, 0.9721, 0.9791, 0.9652, 0.9721]
    assert _labels(f) == {"adam": "1=", "momentum": "1=", "sgd": "3"}  # accuracies overlap
    f[N.M_FINAL_ACC] = [0.9756, 0.9791, 0.9621, 0.9691, 0.9652, 0.9721]
    assert _labels(f) == {"adam": "1", "momentum": "2", "sgd": "3"}  # [0.9756, 0.9791] above [0.9621, 0.9691]


def test_the_leaderboard_says_the_tie_rule_it_applies():
    from reports.selection import selection_sentence

    said = selection_sentence(_frame({"adam": [0.1, 0.1]}), "final validation accuracy")
    assert ("optimizers are ranked by seeds reaching the target, then median seconds to it, except that "
            "those reaching it at the same median steps (the same evaluation) are a tie on time, ordered "
            "by seeds finished, then the validation metric") in said


def test_equal_results_share_a_rank_whoever_leads_their_group():
    # the attacking helper's sweep: momentum and sgd (mass 0) equal in steps (100) and accuracies;
    # adam leads (steps 50 and 100, seconds overlapping momentum's), sgd's seconds are apart from
    # adam's: measured from adam alone, sgd ranked "3" beside momentum's "1="
    f = _frame({"adam": [0.0062, 0.0125], "momentum": [0.0106, 0.0106], "sgd": [0.0203, 0.0203]},
               steps={"adam": 75, "momentum": 100, "sgd": 100})
    f[N.M_FINAL_ACC] = [0.972, 0.969, 0.930, 0.920, 0.930, 0.920]
    assert _labels(f) == {"adam": "1=", "momentum": "1=", "sgd": "1="}
