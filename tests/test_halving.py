"""Synchronous successive halving (:mod:`harness.orchestrate.halving`): the bracket's size from
the compute budget, whole-rung promotions on hand-made results, purity, the gate's ``stop_at``, and a
real sweep whose stored runs follow the rounds (stopped at their rung, the survivors trained again
to the next, the last round plain full-budget trials)."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
import yaml
from mlflow.tracking import MlflowClient

import harness  # XLA's pool pinned as in every test process; harness.sweep
from harness.config.load import load_config
from harness.core.outcome import TrialOutcome
from harness.core.rungs import RungBoard, rule_of
from harness.orchestrate.halving import SuccessiveHalving, bracket_cost, survivors
from harness.orchestrate.searchers import SweepSearch
from harness.plan.expansion import expand


def _config(tmp_path: Path, search: dict, steps: int = 90, name: str = "sh") -> Path:
    cfg = {"name": name, "datasets": ["digits"], "seeds": [0], "batch_size": 64,
           "models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}],
           "optimizers": [{"name": "sgd", "hparams": {"step_size": {"log_uniform": [0.001, 1.0]}}}],
           "schedules": ["constant"], "budget": {"steps": steps}, "eval_every": 30,
           "steps_per_dispatch": 3, "target": {"metric": "valid/accuracy", "value": 0.9},
           "measure_perf": False, "batching": "off", "search": search}
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _searcher(tmp_path, search, **kw) -> SuccessiveHalving:
    ss = SweepSearch(expand(load_config(_config(tmp_path, search, **kw))), "final")
    (s,) = ss.searchers
    assert isinstance(s, SuccessiveHalving)
    return s


def _done(spec, value: float, status: str = "stopped", step: int | None = None) -> TrialOutcome:
    o = TrialOutcome.of_spec(spec, status)
    r = rule_of(spec.early_stop)
    o.stopped_step = r.get("stop_at") if status == "stopped" else None
    o.rungs = {r["stop_at"]: value} if "stop_at" in r else {}
    o.final_valid_accuracy = value
    return o


def test_the_brackets_cost_and_size():
    assert survivors(9, 3) == 3 and survivors(2, 3) == 1 and survivors(0, 3) == 1
    assert bracket_cost(9, [10, 30, 90], 3, 1) == 9 * 10 + 3 * 30 + 1 * 90 == 270
    assert bracket_cost(9, [10, 30, 90], 3, 2) == 540


def test_whole_rung_promotions_on_hand_made_results(tmp_path):
    """trials 3 x 90 steps = 270: n = 9 (9x10 + 3x30 + 1x90 = 270; 10 configurations cost 280)."""
    s = _searcher(tmp_path, {"method": "successive_halving", "trials": 3, "min_steps": 10, "eta": 3})
    assert (s.levels, s.budget, s.n, s.max_steps()) == ([10, 30, 90], 270, 9, 270)
    assert s.max_trials() == 9 + 3 + 1  # a new trial per round: 9 to 10 steps, 3 to 30, 1 to 90
    seen: dict[str, TrialOutcome] = {}
    first = s.propose(seen)
    assert len(first) == 9 and all(rule_of(t.early_stop)["stop_at"] == 10 for t in first)
    assert [t.trial_id for t in first[:3]] == [t.trial_id for t in s.candidates()[:3]]
    values = [0.5, 0.9, 0.2, 0.7, 0.9, 0.1, 0.3, 0.6, 0.8]  # top 3: k=1, 4 (tie: earlier), 8
    for t, v in zip(first[:8], values, strict=False):
        seen[t.trial_id] = _done(t, v)
    assert [t.trial_id for t in s.propose(seen)] == [first[8].trial_id]  # the rung waits for all
    seen[first[8].trial_id] = _done(first[8], values[8])
    second = s.propose(seen)
    assert [int(s.board.tags[t.trial_id]["harness.search_index"]) for t in second] == [1, 4, 8]
    assert all(rule_of(t.early_stop)["stop_at"] == 30 for t in second)
    for t, v in zip(second, [0.91, 0.95, 0.93], strict=True):
        seen[t.trial_id] = _done(t, v)
    (third,) = s.propose(seen)
    assert third.early_stop == () and s.board.tags[third.trial_id]["harness.search_index"] == "4"
    assert fresh_proposal(tmp_path, seen) == [third.trial_id]  # a fresh searcher: the same
    seen[third.trial_id] = _done(third, 0.97, status="finished")
    assert s.propose(seen) == []
    d = s.describe(seen)
    assert [(r["step"], r["configurations"], r["went_on"]) for r in d["rounds"]] == \
        [(10, 9, 3), (30, 3, 1), (90, 1, 0)]
    assert d["steps_spent"] == 270 and d["done"] and d["stopped"] == 9 + 3
    assert d["full_budget"][0]["rungs"] == {"10": 0.9, "30": 0.95}


def fresh_proposal(tmp_path, seen) -> list[str]:
    """What a searcher built anew from the same config proposes on ``seen`` (a re-run's)."""
    (tmp_path / "again").mkdir(exist_ok=True)
    s = _searcher(tmp_path / "again", {"method": "successive_halving", "trials": 3, "min_steps": 10,
                                       "eta": 3})
    return [t.trial_id for t in s.propose(seen)]


def test_the_gate_stops_at_stop_at_whatever_the_peers():
    board = RungBoard()
    rule = {"stop_at": 30, "eta": 3, "mode": "max"}
    assert "successive halving's round ends here" in board.decide("t", rule, 30, 0.99)
    assert board.decide("t", rule, 10, 0.99) is None


def test_a_real_bracket_follows_its_rounds(tmp_path):
    """trials 2 x 27 steps = 54: levels 3, 9, 27; n = 5 (5x3 + 1x9 + 1x27 = 51); the stored runs:
    five stopped at step 3, the best of them stopped at 9, then the same configuration plain to 27."""
    from mlflow.tracking import MlflowClient

    p = _config(tmp_path, {"method": "successive_halving", "trials": 2, "min_steps": 3, "eta": 3},
                steps=27)
    uri = f"sqlite:///{tmp_path}/m.db"
    run = harness.sweep(p, tracking_uri=uri, quiet=True)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("sh")
    runs = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'trial'",
                              order_by=["attributes.start_time ASC"])
    assert [r.info.status for r in runs] == ["FINISHED"] * 7
    stops = [r.data.tags.get("harness.stopped_at_step") for r in runs]
    assert stops == ["3"] * 5 + ["9", None]
    rung3 = {int(r.data.tags["harness.search_index"]): json.loads(r.data.tags["harness.rungs"])["3"]
             for r in runs[:5]}
    best = min(rung3, key=lambda k: (-rung3[k], k))  # the top 1 of 5 by valid accuracy at step 3
    assert [r.data.tags["harness.search_index"] for r in runs[5:]] == [str(best)] * 2
    assert runs[6].data.params["optimizer.step_size"] == runs[5].data.params["optimizer.step_size"]
    assert [r.data.tags["status"] for r in runs] == ["stopped"] * 6 + ["finished"]
    assert run.counts["failed"] == 0
    again = harness.sweep(p, tracking_uri=uri, quiet=True)  # a re-run trains nothing
    assert again.counts["skipped"] == 7
    # the promoted configuration's three rounds are one seed (they were counted as 3 seeds, 1/3
    # finished): its last round, the plain trial, is the configuration's seed
    from reports.protocol import config_values
    from reports.selection import best_configs

    frame = run.results().frame
    cv = config_values(frame).set_index("config_id")
    won = frame[frame["trial_id"] == runs[6].data.tags["harness.trial_id"]]["config_id"].iloc[0]
    assert (cv["n_seeds"] == 1).all() and len(cv) == 5
    final = runs[6].data.metrics["final/valid_accuracy"]
    assert (cv.loc[won, "n_finished"], cv.loc[won, "valid"]) == (1, final)
    assert best_configs(frame)[["config_id", "n_seeds", "n_finished"]].values.tolist() == [[won, 1, 1]]
    from harness.orchestrate import summary as terminal  # the summary table the command line prints

    (row,) = terminal.best_configs(run.summary.outcomes)
    assert (row["n"], row["value"]) == (1, final)


def test_the_summary_line_gives_the_audits_verdict(tmp_path):
    """A successive-halving sweep with ``audit: 2``: its summary line ends with how many audited
    stopped trials would have won (an audit's final validation accuracy above every configuration
    trained to the budget), as ASHA's does; it had no audit clause, only the report did."""
    p = _config(tmp_path, {"method": "successive_halving", "trials": 2, "min_steps": 3, "eta": 3,
                           "audit": 2}, steps=27)
    run = harness.sweep(p, tracking_uri=f"sqlite:///{tmp_path}/m.db", quiet=True)
    (d,) = run.summary.search
    done = [a for a in d["audits"] if a["status"] == "finished"]
    best = max(f["final_valid_accuracy"] for f in d["full_budget"])
    won = sum(a["final_valid_accuracy"] > best for a in done)
    assert len(done) == 2
    assert d["words"].endswith(f"steps spent (restarts included); audit: {won} of 2 stopped trials "
                               f"trained to the end would have won")


@pytest.mark.slow
def test_jobs_workers_are_kept_across_the_rounds_and_gone_at_the_end(tmp_path):
    """The same bracket with ``jobs=2``: its three rounds run on the same two worker processes
    (before, each round spawned two fresh ones, six in all, as ``run`` outside a
    session still does), the halving stores what it stores in-process, and once the sweep returns
    no worker process is left."""
    from harness.execute.executors import ProcessExecutor

    p = _config(tmp_path, {"method": "successive_halving", "trials": 2, "min_steps": 3, "eta": 3},
                steps=27)
    uri = f"sqlite:///{tmp_path}/m.db"
    def children() -> set[int]:  # this process's live children (a session's mlflow server among them)
        return {c.pid for c in psutil.Process().children()
                if c.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(c.cmdline())}

    before = children()
    ex = ProcessExecutor(jobs=2)
    run = harness.sweep(p, tracking_uri=uri, quiet=True, executor_obj=ex)
    assert run.counts["failed"] == 0
    assert ex.started == 2
    assert children() - before == set()
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("sh")
    runs = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'trial'")
    assert sorted(r.data.tags.get("harness.stopped_at_step") or "-" for r in runs) == \
        ["-"] + ["3"] * 5 + ["9"]
    assert len({r.data.tags["harness.trial_id"] for r in runs}) == 7


def test_an_optimizer_whose_last_round_failed_is_unranked_in_the_summary_as_in_the_report(
        tmp_path, monkeypatch):
    """One configuration per optimizer, three rounds; sgd's last round (its plain full-budget
    trials) raises on both seeds, momentum's finishes. The report selects on each seed's last round
    (``reports.frame.tuning_rows``): sgd has no result, "—". The summary asked whether any of sgd's
    trials had not failed, found the stopped earlier rounds, and ranked it "2" (both ranked "1=" with
    momentum failing too). Both now read the last rounds."""
    import harness.train.loop as trainer
    from harness.orchestrate.summary import ranked_rows
    from reports.frame import load_frame
    from reports.leaderboard import leaderboard_numbers

    real = trainer.run_trial

    def run_trial(spec, **kw):
        if spec.optimizer == "sgd" and not spec.early_stop:  # the last round
            raise RuntimeError("boom in the last round")
        return real(spec, **kw)

    monkeypatch.setattr(trainer, "run_trial", run_trial)
    monkeypatch.setattr(trainer, "should_batch", lambda specs: False)
    cfg = yaml.safe_load(_config(tmp_path, {"method": "successive_halving", "trials": 2, "min_steps": 3,
                                            "eta": 3}, steps=27).read_text())
    cfg.update(seeds=[0, 1], optimizers=[{"name": "sgd", "hparams": {"step_size": 0.1}},
                                         {"name": "momentum", "hparams": {"step_size": 0.1, "mass": 0.9}}])
    p = tmp_path / "sh.yaml"
    p.write_text(yaml.safe_dump(cfg))
    uri = f"sqlite:///{tmp_path}/m.db"
    run = harness.sweep(p, tracking_uri=uri, quiet=True)
    outs = run.summary.outcomes
    assert sorted((o.optimizer, o.status) for o in outs if o.stopped_step is None) == [
        ("momentum", "finished")] * 2 + [("sgd", "failed")] * 2
    assert {o.status for o in outs if o.optimizer == "sgd" and o.stopped_step} == {"stopped"}
    summary = [(r["optimizer"], r["label"]) for r in ranked_rows(outs)]
    nums = leaderboard_numbers(load_frame("sh", tracking_uri=uri)).sort_values("order")
    assert list(zip(nums["optimizer"], nums["rank_label"], strict=True)) == summary == [
        ("momentum", "1"), ("sgd", "—")]
