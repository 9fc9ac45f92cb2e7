"""reports.scoring and the two tuned-time rules of reports.protocol: AlgoPerf's rule against a
transcription of AlgoPerf's scoring code on a table with ties, misses and time ratios 4, 4.01, 5
and 8; the config key ``scoring:`` recorded on the parent run, read by the report and overridden by
``report --scoring``."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from harness.core import names as N
from reports import frame as RF
from reports import protocol as P
from reports import scoring as S

INF = math.inf
# (task, optimizer) → per configuration, seconds to target per seed 0, 1, 2 (None: not reached);
# a time written as -t is a trial that reached the target at t seconds and diverged later.
TABLE = {
    # a and b tie (per-seed minima over configurations [1, 1, 1]); c at exactly 4× the fastest
    # stays solved at τ = 4; d at 4.01× is over AlgoPerf's cap
    ("t1", "a"): {"c1": [1, 1, 5], "c2": [3, 1, 1]},
    ("t1", "b"): {"c1": [1, 2, None], "c2": [None, 1, 1]},
    ("t1", "c"): {"c1": [4, 4, 4], "c2": [None, None, None]},
    ("t1", "d"): {"c1": [4.01, 9, 4.01], "c2": [None, 4.01, None]},
    # ratios 5 and 8: over the cap; d misses on every seed
    ("t2", "a"): {"c1": [2, 2, 2], "c2": [3, 3, 3]},
    ("t2", "b"): {"c1": [10, 10, 10], "c2": [None, None, None]},
    ("t2", "c"): {"c1": [16, 16, 20], "c2": [None, None, 16]},
    ("t2", "d"): {"c1": [None, None, None], "c2": [None, None, None]},
    # nobody reaches the target: unsolved for everyone, still in the denominator
    ("t3", "a"): {"c1": [None, None, None]},
    ("t3", "b"): {"c1": [None, None, None]},
    ("t3", "c"): {"c1": [None, None, None]},
    ("t3", "d"): {"c1": [None, None, None]},
    # a: two seeds miss (median over [1, inf, inf] = inf); b: one seed misses (median 3);
    # c: its configurations tie; d's fastest trials diverged after reaching the target (they count)
    ("t4", "a"): {"c1": [1, None, None], "c2": [None, None, None]},
    ("t4", "b"): {"c1": [3, None, None], "c2": [None, 2, None]},
    ("t4", "c"): {"c1": [2, 2, 2], "c2": [2, 2, 2]},
    ("t4", "d"): {"c1": [6, 6, 6], "c2": [-5, -5, None]},
}


def _frame(table=TABLE, rule: str | None = None) -> pd.DataFrame:
    rows = []
    for (task, opt), configs in table.items():
        for cid, times in configs.items():
            for seed, t in enumerate(times):
                rows.append({
                    "row": "summary", "task": task, "optimizer": opt, "config_id": f"{opt}-{cid}",
                    "config": f"{opt} {cid}", "seed": seed,
                    "status": "diverged" if t is not None and t < 0 else "finished",
                    N.M_SECONDS_TO_TARGET: abs(t) if t is not None else None,
                    N.M_STEPS_TO_TARGET: 10 if t is not None else None,
                    N.M_FINAL_ACC: 0.9, N.M_FINAL_LOSS: 0.1, N.M_TEST_ACC: 0.9, N.M_TEST_LOSS: 0.1,
                    N.M_STEP_MS: 1.0, "protocol": RF.PROTOCOL_THREE_SPLITS,
                    "target_metric": "valid/accuracy", "target_mode": "max", "target_value": 0.9})
    f = pd.DataFrame(rows)
    if rule is not None:
        f.attrs[P.SCORING_ATTR] = rule
    return f


def _algoperf_transcription(table=TABLE) -> tuple[pd.DataFrame, pd.Series]:
    """AlgoPerf's ``scoring/performance_profile.py`` and ``score_submissions.py`` as read (written
    here from their definitions, not copied): a study's time is its fastest trial's time to the
    target (``inf`` if no trial reached it); a submission's time on a workload is ``np.median``
    over its studies (``get_workloads_time_to_target``); times ``> 4 ×`` the workload's fastest
    become ``inf``; each time is divided by the workload's fastest with ``df.update(df.div(...))``,
    which leaves a NaN ratio (0/0, inf/inf) as the time itself (``compute_performance_profiles``);
    ρ(τ) = (#workloads with ratio ≤ τ) / #workloads at 100 points of ``np.linspace(1, 4)``; the
    score is ``trapz(ρ, τ) / (4 - 1)`` (``compute_leaderboard_score(normalize=True)``)."""
    studies = {}
    for (task, opt), configs in table.items():
        per_seed = []
        for seed in range(3):
            reached = [abs(ts[seed]) for ts in configs.values() if ts[seed] is not None]
            per_seed.append(min(reached) if reached else np.inf)
        studies.setdefault(opt, {})[task] = np.median(per_seed)
    df = pd.DataFrame(studies).T  # submissions × workloads, as AlgoPerf's
    best = df.min(axis=0)
    df[df.apply(lambda x: x > 4 * best, axis=1)] = np.inf
    with np.errstate(divide="ignore", invalid="ignore"):
        df.update(df.div(df.min(axis=0), axis=1))
    taus = np.linspace(1.0, 4.0, num=100)
    n_workloads = df.shape[1]
    prof = pd.concat([(df <= tau).sum(axis=1) / n_workloads for tau in taus], axis=1)
    trapezoid = getattr(np, "trapezoid", None) or np.trapz
    score = trapezoid(prof.to_numpy(), x=taus, axis=1) / (taus.max() - taus.min())
    return prof.set_axis(taus, axis=1), pd.Series(score, index=prof.index)


def test_algoperf_rule_matches_the_transcription_of_algoperfs_code():
    frame = _frame(rule="algoperf")
    tt = P.tuned_time_to_result(frame).set_index(["task", "optimizer"])["seconds"]
    assert tt.to_dict() == {
        ("t1", "a"): 1.0, ("t1", "b"): 1.0, ("t1", "c"): 4.0, ("t1", "d"): 4.01,
        ("t2", "a"): 2.0, ("t2", "b"): 10.0, ("t2", "c"): 16.0, ("t2", "d"): INF,
        ("t3", "a"): INF, ("t3", "b"): INF, ("t3", "c"): INF, ("t3", "d"): INF,
        ("t4", "a"): INF, ("t4", "b"): 3.0, ("t4", "c"): 2.0, ("t4", "d"): 5.0}
    # the 4× cap: 4 stays, 4.01, 5 and 8 do not
    times = S.profile_times(frame)
    assert times.loc["t1"].tolist() == [1.0, 1.0, 4.0, INF]
    assert times.loc["t2"].tolist() == [2.0, INF, INF, INF]
    prof_want, score_want = _algoperf_transcription()
    prof = S.performance_profile(frame).pivot(index="optimizer", columns="tau", values="rho")
    np.testing.assert_array_equal(prof.columns.to_numpy(), prof_want.columns.to_numpy())
    np.testing.assert_array_equal(prof.to_numpy(), prof_want.loc[prof.index].to_numpy())
    scores = S.algoperf_scores(frame)
    np.testing.assert_allclose(scores.to_numpy(), score_want.loc[scores.index].to_numpy(), rtol=1e-14)
    # by hand (4 tasks, 99 intervals of 3/99): a solves t1 and t2 at ratio 1; c solves t4 at 1 and
    # t1 at exactly 4 (the last half interval: 1/198 of the range); d solves t4 at 2.5 (τ ≥ 2.5
    # from grid point 50 on: 49 whole intervals and half of the one before)
    assert scores["a"] == pytest.approx(0.5, abs=1e-14)
    assert scores["c"] == pytest.approx(0.25 + 0.25 / 198, abs=1e-14)
    assert scores["d"] == pytest.approx(0.25 * 49.5 / 99, abs=1e-14)
    assert scores["b"] == pytest.approx(score_want["b"], abs=1e-14) and 0.25 < scores["b"] < 0.5


def test_harness_rule_is_the_default_and_differs_where_it_says():
    """The harness's rule (the fastest configuration's median over its seeds that reached, a
    configuration counting when at least half its seeds did; no cap): on t4 neither a nor b has a
    configuration that reached on half its seeds, and d's diverged trials do not count (6 s, not 5)."""
    frame = _frame()
    assert P.scoring(frame) == "harness"
    tt = P.tuned_time_to_result(frame).set_index(["task", "optimizer"])["seconds"]
    assert tt[("t4", "a")] == INF and tt[("t4", "b")] == INF and tt[("t4", "d")] == 6.0
    assert tt[("t2", "c")] == 16.0  # 8× the fastest: no cap, the profile keeps it
    assert S.profile_times(frame).loc["t2", "c"] == 16.0
    p = S.performance_profile(frame)
    assert p["tau"].max() == pytest.approx(1.1 * 8)  # its grid runs past the largest ratio
    with pytest.raises(ValueError, match="scoring must be one of harness, algoperf; got 'fastest'"):
        P.tuned_time_to_result(frame, "fastest")


def test_scoring_key_is_recorded_read_by_the_report_and_overridden(tmp_path, write_sweep, tracking_uri,
                                                                     fake_trainer, monkeypatch):
    from mlflow import MlflowClient
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    cfg = write_sweep(name="scored", scoring="algoperf", target={"metric": "valid/accuracy", "value": 0.5})
    run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name("scored")
    (parent,) = c.search_runs([exp.experiment_id], "tags.`harness.kind` = 'parent'")
    assert parent.data.params["scoring"] == "algoperf"
    assert parent.data.tags[N.TAG_SCORING] == "algoperf"
    runner = CliRunner()
    for extra, words, algoperf in (
            ([], "AlgoPerf&#39;s rule (scoring: algoperf)", True),
            (["--scoring", "harness"], "The harness&#39;s rule (scoring: harness, not AlgoPerf&#39;s)",
             False)):
        out = tmp_path / f"r{len(extra)}.html"
        res = runner.invoke(app, ["report", "-e", "scored", "--tracking-uri", tracking_uri, "-o", str(out),
                                  *extra])
        assert res.exit_code == 0, res.output
        html = out.read_text()
        assert words in html
        # one task: no score column; under algoperf the report says why
        assert "AlgoPerf score (all tasks, τ ∈ [1, 4])" not in html
        assert ('<p class="sub" id="score-note">AlgoPerf score left out: the sweep has one task' in html) \
            is algoperf
        rules = set(pd.read_csv(out.with_suffix(".csv.gz")).query("row == 'tuned_time'")["tuning.rule"])
        assert rules == {"algoperf" if algoperf else "harness"}
    res = runner.invoke(app, ["report", "-e", "scored", "--tracking-uri", tracking_uri, "--scoring", "fast"])
    assert res.exit_code == 2 and "'fast' is not one of 'harness', 'algoperf'" in res.output


def test_an_unknown_scoring_rule_is_a_one_line_config_error(tmp_path, write_sweep):
    from typer.testing import CliRunner

    from harness.cli import app

    cfg = write_sweep(name="scored", scoring="fastest")
    res = CliRunner().invoke(app, ["sweep", str(cfg), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"])
    assert res.exit_code == 2
    assert f"{cfg.name}: scoring: must be one of harness, algoperf, got 'fastest'\n" in res.output


def test_the_algoperf_score_shows_over_two_tasks_or_more_and_one_task_says_why():
    """A profile over one task is degenerate (the score is (4 − r)/3 of one time ratio): the
    leaderboard leaves the column out there and the report says why; over several tasks it shows."""
    from reports.leaderboard import SCORE_COL, leaderboard

    many = _frame(rule="algoperf")
    assert S.shows_score(many) and S.score_note(many) == ""
    assert leaderboard(many).drop_duplicates("Optimizer").set_index("Optimizer")[SCORE_COL].to_dict() == {
        "a": "0.500", "b": f"{S.algoperf_scores(many)['b']:.3f}", "c": "0.251", "d": "0.125"}
    one = _frame({k: v for k, v in TABLE.items() if k[0] == "t1"}, rule="algoperf")
    assert not S.shows_score(one) and SCORE_COL not in leaderboard(one)
    assert S.score_note(one) == S.ONE_TASK_NOTE
    assert S.ONE_TASK_NOTE.startswith("AlgoPerf score left out: the sweep has one task, and over one task")
    assert S.score_note(_frame({k: v for k, v in TABLE.items() if k[0] == "t1"})) == ""  # harness rule


# A time of 0 (a target the initial parameters meet, in a table that records it at 0 s: runs logged
# before harness.train.track counted it at the next evaluation, or another tool's table). Per seed 0,
# 1, 2: x met it at initialisation on every seed; y on two of three; z took 2 s.
ZERO_TABLE = {
    ("t1", "x"): {"c1": [0, 0, 0]},
    ("t1", "y"): {"c1": [0, 0, 5]},
    ("t1", "z"): {"c1": [2, 2, 2]},
    ("t2", "x"): {"c1": [2, 2, 2]},
    ("t2", "y"): {"c1": [1, 1, 1]},
    ("t2", "z"): {"c1": [3, 3, 3]},
}


def test_a_time_of_zero_is_solved_as_algoperfs_update_leaves_it():
    """AlgoPerf's ``compute_performance_profiles`` divides by the fastest with
    ``df.update(df.div(min))``: ``0 / 0`` is NaN, which ``update`` skips, so the time 0 stays (solved
    at every τ); z's 2 s is over 4 × 0 (the cap) and ``2 / 0 = inf``: unsolved. Before, the harness
    divided plainly: 0/0 = NaN, t1 unsolved for everyone, y 0.500 and x 0.336 (not 1.000, 0.836).

    By hand, 100 τ = 1 + 3i/99 and 2 tasks: y solves t1 (time 0) and t2 (ratio 1) at every τ: 1.
    x solves t1 at every τ and t2 (ratio 2) from i = 33 (τ = 2): ρ 0.5 below, 1 from there; the
    trapezoids (each 3/99 wide, divided by 3): (32 × 0.5 + 0.75 + 66 × 1) / 99 = 82.75 / 99. z solves
    only t2 at ratio 3, from i = 66: (0.25 + 33 × 0.5) / 99 = 16.75 / 99."""
    from reports.leaderboard import SCORE_COL, leaderboard
    from reports.selection import best_configs

    frame = _frame(ZERO_TABLE, rule="algoperf")
    tt = P.tuned_time_to_result(frame).set_index(["task", "optimizer"])
    # y's studies: [0, 0, 5] → the median 0; a time of 0 selects its configuration like any other
    assert tt["seconds"].to_dict() == {("t1", "x"): 0.0, ("t1", "y"): 0.0, ("t1", "z"): 2.0,
                                       ("t2", "x"): 2.0, ("t2", "y"): 1.0, ("t2", "z"): 3.0}
    assert tt.loc[("t1", "x"), "config_id"] == "x-c1" and tt.loc[("t1", "y"), "config_id"] == "y-c1"
    assert S.profile_times(frame).loc["t1"].tolist() == [0.0, 0.0, INF]  # z over the cap
    scores = S.algoperf_scores(frame)
    assert scores["y"] == pytest.approx(1.0, abs=1e-14)
    assert scores["x"] == pytest.approx(82.75 / 99, abs=1e-14)
    assert scores["z"] == pytest.approx(16.75 / 99, abs=1e-14)
    prof_want, score_want = _algoperf_transcription(ZERO_TABLE)
    prof = S.performance_profile(frame).pivot(index="optimizer", columns="tau", values="rho")
    np.testing.assert_array_equal(prof.to_numpy(), prof_want.loc[prof.index].to_numpy())
    np.testing.assert_allclose(scores.to_numpy(), score_want.loc[scores.index].to_numpy(), rtol=1e-14)
    lb = leaderboard(frame).drop_duplicates("Optimizer").set_index("Optimizer")[SCORE_COL].to_dict()
    assert lb == {"x": "0.836", "y": "1.000", "z": "0.169"}
    # reached at 0 s counts as reached for selection too (3 seeds of x, 3 of y: 0, 0 and 5 s)
    best = best_configs(frame).set_index(["task", "optimizer"])
    assert best.loc[("t1", "x"), "n_reached"] == 3 and best.loc[("t1", "y"), "n_reached"] == 3
    # the harness's rule: no cap, but 2 / 0 is still inf and 0 / 0 still keeps the 0
    h = _frame(ZERO_TABLE)
    assert S.profile_times(h).loc["t1"].tolist() == [0.0, 0.0, 2.0]
    rho = S.performance_profile(h, taus=[1.0]).set_index("optimizer")["rho"].to_dict()
    assert rho == {"x": 0.5, "y": 1.0, "z": 0.0}
