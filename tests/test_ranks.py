"""reports.ranks: the leaderboard's shared ranks on hand-built frames. Found by a new
user: adam and momentum reached the target at the same step on both seeds, and wall-clock jitter
(0.402 s and 0.182 s for momentum's 150 steps) ranked adam first."""

from __future__ import annotations

import math

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
    assert lb["_shared_rank"].to_dict() == {"adam": "1=", "momentum": "1=", "sgd": "3"}
    assert lb.loc["adam", "Rank"] == "1=" and lb.loc["sgd", "Rank"] == "3"
    assert lb.loc["momentum", "Rank"].startswith("1= · ")  # the seeds that would separate it from adam
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
            "those reaching it at the same median steps (the same evaluation) and the same per-step cost "
            "are a tie on time, ordered "
            "by seeds finished, then the validation metric") in said


def test_equal_results_share_a_rank_whoever_leads_their_group():
    # the attacking helper's sweep: momentum and sgd (mass 0) equal in steps (100) and accuracies;
    # adam leads (steps 50 and 100, seconds overlapping momentum's), sgd's seconds are apart from
    # adam's: measured from adam alone, sgd ranked "3" beside momentum's "1="
    f = _frame({"adam": [0.0062, 0.0125], "momentum": [0.0106, 0.0106], "sgd": [0.0203, 0.0203]},
               steps={"adam": 75, "momentum": 100, "sgd": 100})
    f[N.M_FINAL_ACC] = [0.972, 0.969, 0.930, 0.920, 0.930, 0.920]
    assert _labels(f) == {"adam": "1=", "momentum": "1=", "sgd": "1="}


def test_a_ties_rows_follow_the_time_shown():
    """Within "1=" a row reading 0.80 s stood above one reading 0.54 s (both reached the
    target at the same steps: a tie on time, which the final metric orders)."""
    f = _frame({"adam": [0.80, 0.80], "momentum": [0.54, 0.54]}, steps={"adam": 50, "momentum": 50})
    f[N.M_FINAL_ACC] = [0.975, 0.972, 0.970, 0.976]  # adam's mean 0.9735 above momentum's 0.973
    lb = leaderboard(f)
    assert list(lb["Optimizer"]) == ["momentum", "adam"]  # 0.54 s above 0.80 s
    assert list(lb["_rank"]) == [2, 1]  # the strict order (by the metric) is kept apart
    assert [float(c.split(" [")[0]) for c in lb["Time to target (s, median)"]] == [0.54, 0.80]
    # the power line: the rule compares their validation values (the same steps), and says so
    assert lb["Rank"].iloc[0] == "1="
    assert lb["Rank"].iloc[1].startswith("1= · ") and lb["Rank"].iloc[1].endswith(
        "seeds would separate (on the validation value)")
    r = R.shared_ranks(f).set_index("optimizer")
    assert r.loc["adam", "order"] == 2 and r.loc["adam", "separation_on"] == "validation value"
    # differences (adam - momentum) 0.005 and -0.004: mean 0.0005, SD 0.006364, effect 0.0786;
    # the rule's power first reaches 0.8 beyond 100 seeds
    assert r.loc["adam", "separation"] == "> 100 seeds would separate"


def test_the_power_line_on_a_tie_of_seconds_is_hand_computed():
    """a: 1.0 s and 1.3 s, b: 1.2 s and 1.4 s (overlapping ranges: "1="). Paired differences
    (b - a) 0.2 and 0.1: mean 0.15, SD 0.0707, effect 2.121. The rule separates at n pairs when
    |t| > 1.96·√((n-1)/n); P(|T_{n-1}(2.121·√n)| > that) at n = 5 (the fewest the paired test uses)
    is 0.995 (scipy.stats.nct), so 5 seeds."""
    from scipy import stats

    f = _frame({"a": [1.0, 1.3], "b": [1.2, 1.4]})
    lb = leaderboard(f)
    assert list(lb["Rank"]) == ["1=", "1= · 5 seeds would separate"]
    effect = 0.15 / math.sqrt(((0.2 - 0.15) ** 2 + (0.1 - 0.15) ** 2) / 1)
    c = stats.norm.ppf(0.975) * math.sqrt(4 / 5)
    assert stats.nct.sf(c, 4, effect * math.sqrt(5)) + stats.nct.cdf(-c, 4, effect * math.sqrt(5)) > 0.8
    # a wider spread: b - a = 0.3 and -0.1 (mean 0.1, SD 0.283, effect 0.354): the first n with the
    # rule's power >= 0.8, searched on scipy's noncentral t
    f = _frame({"a": [1.0, 1.3], "b": [1.3, 1.2]})
    effect = 0.1 / math.sqrt(((0.3 - 0.1) ** 2 + (-0.1 - 0.1) ** 2) / 1)
    n = next(n for n in range(5, 101) if (lambda c, lam: stats.nct.sf(c, n - 1, lam) + stats.nct.cdf(
        -c, n - 1, lam))(stats.norm.ppf(0.975) * math.sqrt((n - 1) / n), effect * math.sqrt(n)) >= 0.8)
    assert list(leaderboard(f)["Rank"]) == ["1=", f"1= · {n} seeds would separate"] and n == 63
    # equal results: no number
    f = _frame({"a": [1.0, 1.3], "b": [1.0, 1.3]}, steps={"a": 100, "b": 150})
    assert list(leaderboard(f)["Rank"]) == ["1=", "1= · no seed count separates equal results"]


def test_the_summary_ranks_ties_and_orders_like_the_leaderboard():
    """harness.orchestrate.summary.ranked_rows on outcomes and reports.ranks on the frame of the same
    trials: the same labels, the same order, the same seeds that would separate."""
    from harness.core.outcome import TrialOutcome
    from harness.orchestrate.summary import ranked_rows

    cases = [
        ({"adam": [0.80, 0.80], "momentum": [0.54, 0.54], "sgd": [2.0, 2.2]},
         {"adam": 50, "momentum": 50, "sgd": 90}, [0.975, 0.972, 0.970, 0.976, 0.95, 0.95]),
        ({"a": [1.0, 1.3], "b": [1.2, 1.4], "c": [1.35, 1.6], "d": [3.0, 3.1]}, None, None),
        ({"a": [1.0, 1.1, 1.2, 1.3, 1.4], "b": [1.05, 1.0, 1.3, 1.25, 1.45]}, None, None),
    ]
    for per_opt, steps, accs in cases:
        f = _frame(per_opt, steps=steps)
        if accs:
            f[N.M_FINAL_ACC] = accs
        s = f[f["row"] == "summary"]
        outcomes = [TrialOutcome(trial_id=f"{r.optimizer}{r.seed}", status="finished", model="mlp",
                                 dataset="digits", optimizer=r.optimizer, config=r.config, seed=int(r.seed),
                                 final_valid_accuracy=r[N.M_FINAL_ACC], test_accuracy=r[N.M_TEST_ACC],
                                 seconds_to_target=r[N.M_SECONDS_TO_TARGET],
                                 modeled_seconds_to_target=r[N.M_SECONDS_TO_TARGET],
                                 steps_to_target=int(r[N.M_STEPS_TO_TARGET]))
                    for _, r in s.iterrows()]
        rows = ranked_rows(outcomes)
        report = R.shared_ranks(f).sort_values("order")
        assert [r["optimizer"] for r in rows] == list(report["optimizer"])
        assert [r["label"] for r in rows] == list(report["label"])
        assert [r["separation"].words if r["separation"] else "" for r in rows] == list(report["separation"])


def test_an_optimizer_every_trial_of_which_failed_is_unranked_in_the_summary_and_the_report(
        tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    """Found by an attacking helper: a task's only optimizer, every seed failed, was ranked "1" in
    the sweep's end table and in the report. Now it is "—", with no shared rank, and last: after an
    optimizer whose every seed diverged (a result, ranked), whatever their names' order."""
    import io

    from conftest import fake_result
    from rich.console import Console

    import harness.train.loop as trainer
    from harness.orchestrate.run import run_sweep
    from harness.orchestrate.summary import print_summary, ranked_rows
    from reports.leaderboard import leaderboard_numbers

    def run_trial(spec, **_kw):
        return fake_result(spec, raise_for=(spec.seed,) if spec.optimizer == "adagrad" else (),
                           diverge_for=(spec.seed,) if spec.optimizer == "sgd" else ())

    monkeypatch.setattr(trainer, "run_trial", run_trial)
    monkeypatch.chdir(tmp_path)
    adagrad = [{"name": "adagrad", "hparams": {"step_size": 0.1}}]
    lone = run_sweep(write_sweep(name="lone", optimizers=adagrad), tracking_uri=tracking_uri, quiet=True)
    assert lone.counts()["failed"] == 2
    rows = ranked_rows(lone.outcomes)
    assert [(r["optimizer"], r["rank"], r["label"]) for r in rows] == [("adagrad", 1, "—")]
    out = io.StringIO()
    print_summary(Console(file=out, width=120), lone)
    row = next(line for line in out.getvalue().splitlines() if "adagrad" in line)
    assert row.split()[0] == "—", row
    nums = leaderboard_numbers(RF.load_frame("lone", tracking_uri=tracking_uri))
    assert list(nums["rank_label"]) == ["—"] and nums["rank"].isna().all()

    three = run_sweep(write_sweep(name="three", optimizers=[
        {"name": n, "hparams": {"step_size": 0.1}} for n in ("adagrad", "momentum", "sgd")]),
        tracking_uri=tracking_uri, quiet=True)
    assert three.counts() == {"finished": 2, "diverged": 2, "failed": 2, "skipped": 0}
    summary = [(r["optimizer"], r["label"]) for r in ranked_rows(three.outcomes)]
    assert summary == [("momentum", "1"), ("sgd", "2"), ("adagrad", "—")]
    nums = leaderboard_numbers(RF.load_frame("three", tracking_uri=tracking_uri)).sort_values("order")
    assert list(zip(nums["optimizer"], nums["rank_label"], strict=True)) == summary
    assert list(nums["rank"].astype("Int64")) == [1, 2, pd.NA]


def test_the_summary_and_the_report_break_an_exact_tie_between_configurations_alike(
        tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    """Found by an attack: among thousands of short trials many configurations tie
    exactly (287 validation examples quantise the accuracy), and the summary broke the tie on the
    configuration's name, the report on its config_id hash: they named different best
    configurations (lr=0.0769703 against step_size=0.0812382). Both now take the configuration
    whose smallest trial id is smallest. The fake trainer gives every step size the same results."""
    from harness.orchestrate.run import run_sweep
    from harness.orchestrate.summary import best_configs
    from reports.selection import best_configs as report_best

    monkeypatch.chdir(tmp_path)
    sizes = [0.1, 0.2, 0.3, 0.5, 0.7, 0.9]
    s = run_sweep(write_sweep(name="tie", optimizers=[{"name": "sgd", "hparams": {"step_size": sizes}}]),
                  tracking_uri=tracking_uri, quiet=True)
    assert s.counts()["finished"] == 12
    by_config: dict[str, list[str]] = {}
    for o in s.outcomes:
        by_config.setdefault(o.config, []).append(o.trial_id)
    expected = min(by_config, key=lambda c: min(by_config[c]))
    (summary_row,) = best_configs(s.outcomes)
    assert summary_row["config"] == expected
    frame = RF.load_frame("tie", tracking_uri=tracking_uri)
    (report_row,) = report_best(frame).itertuples()
    rows = frame[(frame["row"] == "summary") & (frame["config_id"] == report_row.config_id)]
    chosen = set(rows["trial_id"])
    assert chosen == set(by_config[expected])


def test_the_summary_keeps_apart_configurations_whose_labels_round_alike(
        tmp_path, write_sweep, tracking_uri, fake_trainer, monkeypatch):
    """Step sizes 0.1000001 and 0.1000004 are two configurations (two trial ids per seed, two
    config_ids in the report), but the summary grouped trials by their label, whose ``:g`` writes
    both as 0.1: it took the four trials for one configuration's two seeds (per seed the first
    trial, here 0.1000001's, whose seed 1 diverged: 1 of 2 finished) while the report selected
    0.1000004, both seeds finished. The summary now groups by the report's configuration identity
    and prints the two apart (more digits where ``:g`` writes them alike)."""
    import io

    from conftest import fake_result
    from rich.console import Console

    import harness.train.loop as trainer
    from harness.orchestrate.run import run_sweep
    from harness.orchestrate.summary import best_configs, print_summary, ranked_rows
    from reports.selection import best_configs as report_best

    def run_trial(spec, **_kw):  # seed 1 of step size 0.1000001 diverges, the rest finish
        lr = spec.hparams("optimizer")["step_size"]
        return fake_result(spec, diverge_for=(1,) if lr == 0.1000001 else ())

    monkeypatch.setattr(trainer, "run_trial", run_trial)
    monkeypatch.chdir(tmp_path)
    s = run_sweep(write_sweep(name="near", optimizers=[{"name": "sgd", "hparams": {
        "step_size": [0.1000001, 0.1000004]}}]), tracking_uri=tracking_uri, quiet=True)
    assert s.counts() == {"finished": 3, "diverged": 1, "failed": 0, "skipped": 0}
    frame = RF.load_frame("near", tracking_uri=tracking_uri)
    (rep,) = report_best(frame).itertuples()
    chosen = frame[(frame["row"] == "summary") & (frame["config_id"] == rep.config_id)]
    assert set(chosen["params.optimizer.step_size"]) == {"0.1000004"}
    (row,) = best_configs(s.outcomes)
    assert (row["n"], row["finished"], row["n_diverged"]) == (rep.n_seeds, rep.n_finished, 0) == (2, 2, 0)
    assert {o.trial_id for o in s.outcomes if o.config_id == row["config_id"]} == set(chosen["trial_id"])
    (ranked,) = ranked_rows(s.outcomes)
    assert (ranked["finished"], ranked["label"]) == (2, "1")
    out = io.StringIO()
    print_summary(Console(file=out, width=120), s)
    line = next(ln for ln in out.getvalue().splitlines() if " sgd " in f" {ln} ")
    assert "lr=0.1000004" in line and "0.1000001" not in line, line


def test_time_to_target_is_the_median_over_seeds_in_the_leaderboard_and_its_numbers():
    """One statistic under one name: the summary prints the seeds' median, and so do the report's
    column and res.leaderboard (the mean of 1, 2 and 6 s would be 3 s)."""
    from reports.leaderboard import TTT_COL, leaderboard_numbers
    from reports.protocol import median_interval

    f = _frame({"adam": [1.0, 2.0, 6.0]})
    lb = leaderboard(f)
    assert lb[TTT_COL].iloc[0].startswith("2.0 [1.0, 6.0]")
    nums = leaderboard_numbers(f)
    assert (nums["seconds_to_target_median"].iloc[0], nums["seconds_to_target_lo"].iloc[0],
            nums["seconds_to_target_hi"].iloc[0]) == (2.0, 1.0, 6.0)
    assert "seconds_to_target_mean" not in nums
    med, lo, hi, n, how = median_interval([5.0, 1.0, 2.0, 3.0, 4.0, float("nan")])
    assert (med, n, how) == (3.0, 5, "bootstrap") and 1.0 <= lo <= 3.0 <= hi <= 5.0


def test_a_tie_in_tuned_time_goes_to_the_leaderboards_configuration():
    """One tie-break: two step sizes tied at 3.97 s; the leaderboard selects the one with the
    better final validation accuracy (the selection rule after steps), and res.tuned_times, which
    took the smaller config_id, now takes the same one, by either scoring rule."""
    from reports.protocol import tuned_time_to_result
    from reports.selection import selection_positions

    rows = []
    for cid, acc in (("a-lr0.1", 0.90), ("b-lr0.03", 0.95)):
        for seed in range(2):
            rows.append({
                "row": "summary", "task": "mlp / digits", "optimizer": "muon", "config_id": cid,
                "config": f"muon {cid}", "seed": seed, "status": "finished", "trial_id": f"{cid}{seed}",
                N.M_SECONDS_TO_TARGET: 3.97, N.M_STEPS_TO_TARGET: 100, N.M_FINAL_ACC: acc,
                N.M_FINAL_LOSS: 0.1, N.M_TEST_ACC: acc, N.M_TEST_LOSS: 0.1, N.M_STEP_MS: 1.0,
                "protocol": RF.PROTOCOL_THREE_SPLITS, "target_metric": "valid/accuracy",
                "target_mode": "max", "target_value": 0.8})
    f = pd.DataFrame(rows)
    assert leaderboard(f)["_config_id"].tolist() == ["b-lr0.03"]
    positions = selection_positions(f).set_index("config_id")["position"].to_dict()
    assert positions == {"b-lr0.03": 0, "a-lr0.1": 1}
    for rule in ("harness", "algoperf"):
        assert tuned_time_to_result(f, rule)["config_id"].tolist() == ["b-lr0.03"], rule
