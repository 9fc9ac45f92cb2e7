"""Early stopping without a sweep: the rung schedule and the stop rule on hand-made
values (:mod:`harness.core.rungs`), the ASHA searcher's proposals from hand-made
:class:`TrialOutcome` objects (:mod:`harness.orchestrate.asha`), and the trainer's gate through
:func:`harness.train.loop.run_trial` on a real trial (digits, a small MLP)."""

from __future__ import annotations

import dataclasses
import math
import pickle
from pathlib import Path

import pytest
import yaml

import harness  # noqa: F401  (XLA's pool pinned as in every test process)
from harness.config.load import load_config
from harness.core.outcome import TrialOutcome
from harness.core.rungs import RungBoard, continues, default_min_steps, rule_of, rung_steps, rung_value
from harness.core.spec import TrialSpec
from harness.orchestrate.asha import AshaSearcher
from harness.orchestrate.searchers import SweepSearch
from harness.plan.expansion import expand
from harness.train.track import eval_points

# -------------------------------------------------------------------------- the rung schedule


def test_rung_steps_are_min_steps_times_powers_of_eta_below_the_budget():
    assert rung_steps(10, 3, 90) == [10, 30]  # 90 is the budget: the top rung, nothing decided
    assert rung_steps(10, 3, 91) == [10, 30, 90]
    assert rung_steps(10, 3, 90, bracket=1) == [30]
    assert rung_steps(10, 3, 90, bracket=2) == []
    assert rung_steps(1, 2, 20) == [1, 2, 4, 8, 16]
    assert default_min_steps(300) == 12 and rung_steps(12, 3, 300) == [12, 36, 108]
    assert default_min_steps(400) == 15  # ceil(400 / 27)
    assert default_min_steps(10) == 1
    with pytest.raises(ValueError, match="need min_steps >= 1, eta >= 2"):
        rung_steps(10, 1, 90)


def test_eval_points_include_the_rungs():
    assert eval_points(90, 30) == [30, 60, 90]
    assert eval_points(90, 30, [10, 30]) == [10, 30, 60, 90]
    assert eval_points(90, 30, [10, 90, 200]) == [10, 30, 60, 90]


# -------------------------------------------------------------------------- the stop rule


def test_continues_keeps_the_top_ceil_n_over_eta_of_the_earlier_peers_and_itself():
    # n = 1: the first trial always continues
    assert continues(0.1, 0, {}, 3, "max")
    # n = 2, top ceil(2/3) = 1: it must beat trial 0
    assert continues(0.6, 1, {0: 0.5}, 3, "max")
    assert not continues(0.4, 1, {0: 0.5}, 3, "max")
    # n = 3, top 1: 0.9 holds it
    assert not continues(0.5, 2, {0: 0.9, 1: 0.4}, 3, "max")
    # n = 4, top 2: 0.9 then 0.6 (continues), 0.45 is third (stops)
    assert continues(0.6, 3, {0: 0.9, 1: 0.4, 2: 0.5}, 3, "max")
    assert not continues(0.45, 3, {0: 0.9, 1: 0.4, 2: 0.5}, 3, "max")
    # eta 2, n = 4, top 2
    assert continues(0.45, 3, {0: 0.9, 1: 0.4, 2: 0.5}, 2, "max") is False
    assert continues(0.55, 3, {0: 0.9, 1: 0.4, 2: 0.5}, 2, "max") is True


def test_continues_ties_go_to_the_earlier_index_and_nan_ranks_last():
    assert not continues(0.5, 1, {0: 0.5}, 3, "max")  # equal: trial 0 wins
    assert continues(0.5, 0, {}, 3, "max")
    assert not continues(math.nan, 1, {0: 0.1}, 3, "max")
    assert continues(0.1, 1, {0: math.nan}, 3, "max")
    # peers with a larger index never count (they ran after, in proposal order)
    assert continues(0.5, 1, {0: 0.1, 2: 0.99, 3: 0.98}, 3, "max")


def test_continues_with_mode_min_ranks_the_smaller_loss_first():
    assert continues(0.2, 1, {0: 0.3}, 3, "min")
    assert not continues(0.4, 1, {0: 0.3}, 3, "min")


def test_rung_value_final_and_best():
    steps, vals = [0, 10, 30], [0.1, 0.7, 0.6]
    assert rung_value({"value": "final"}, steps, vals, 30) == 0.6
    assert rung_value({"value": "best", "mode": "max"}, steps, vals, 30) == 0.7
    assert rung_value({"value": "best", "mode": "min"}, steps, vals, 30) == 0.1
    assert math.isnan(rung_value({"value": "final"}, steps, vals, 20))


def test_the_board_decides_from_its_groups_and_a_copy_is_not_live():
    b = RungBoard()
    for k, v in enumerate([0.5, 0.8, 0.3]):
        b.add(f"t{k}", "g", k)
        b.record(f"t{k}", {10: v})
    b.add("other", "h", 0)
    b.record("other", {10: 0.99})  # another group: never a peer
    b.add("t3", "g", 3)
    rule = {"eta": 3, "mode": "max", "metric": "valid/accuracy"}
    assert b.decide("t3", rule, 10, 0.6) is None  # n = 4, top 2: 0.8, 0.6
    why = b.decide("t3", rule, 10, 0.4)
    assert why == "rung 10: valid/accuracy 0.4 not in the top 2 of 4 (eta 3)"
    assert b.decide("t3", rule, 30, 0.0) is None  # nobody else reached rung 30: n = 1
    assert b.decide("unknown", rule, 10, 0.0) is None
    c = pickle.loads(pickle.dumps(b))
    assert b.live and not c.live and c.values == b.values and c.groups == b.groups


def test_joined_boards_share_their_entries():
    a, b = RungBoard(), RungBoard()
    a.add("x", "g", 0)
    assert a.join(b) is a
    b.add("y", "g", 1)
    b.record("y", {10: 1.0})
    assert a.groups == {"x": ("g", 0), "y": ("g", 1)} and a.values == {"y": {10: 1.0}}


# -------------------------------------------------------------------------- the spec


def _spec(**kw) -> TrialSpec:
    base = dict(sweep="s", model="mlp", optimizer="sgd", schedule="constant", dataset="digits", seed=0,
                steps=90, batch_size=64, eval_every=30, model_hparams={"width": 16, "depth": 1},
                optimizer_hparams={"step_size": 0.1})
    return TrialSpec.make(**{**base, **kw})


def test_early_stop_is_omitted_at_its_default_and_part_of_the_id_otherwise():
    plain = _spec()
    assert "early_stop" not in plain.to_dict()
    rule = {"method": "asha", "eta": 3, "rungs": [10, 30], "bracket": 0}
    es = _spec(early_stop=rule)
    assert es.to_dict()["early_stop"] == {"bracket": 0, "eta": 3, "method": "asha", "rungs": [10, 30]}
    assert es.trial_id != plain.trial_id
    assert dataclasses.replace(es, early_stop=()).trial_id == plain.trial_id
    assert TrialSpec.from_dict(es.to_dict()) == es
    assert rule_of(es.early_stop)["rungs"] == [10, 30]
    # never vmapped: two early-stop trials differing only in seed have different batch keys
    assert es.batch_key() != dataclasses.replace(es, seed=1).batch_key()
    assert plain.batch_key() == dataclasses.replace(plain, seed=1).batch_key()


# -------------------------------------------------------------------------- the searcher


def _config(tmp_path: Path, search: dict, seeds=(0,), steps: int = 90, name: str = "asha") -> Path:
    cfg = {"name": name, "datasets": ["digits"], "seeds": list(seeds), "batch_size": 64,
           "models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}],
           "optimizers": [{"name": "sgd", "hparams": {"step_size": {"log_uniform": [0.001, 1.0]}}}],
           "schedules": ["constant"], "budget": {"steps": steps}, "eval_every": 30,
           "steps_per_dispatch": 10, "target": {"metric": "valid/accuracy", "value": 0.9},
           "measure_perf": False, "batching": "off", "search": search}
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _searcher(tmp_path, search, **kw) -> AshaSearcher:
    whole = expand(load_config(_config(tmp_path, search, **kw)))
    ss = SweepSearch(whole, "final")
    assert ss.adaptive and len(ss.searchers) == 1
    return ss.searchers[0]


def _out(spec: TrialSpec, status: str, step: int | None = None, rungs: dict | None = None) -> TrialOutcome:
    o = TrialOutcome.of_spec(spec, status)
    o.stopped_step = step if status == "stopped" else None
    o.rungs = rungs or {}
    return o


def test_the_searcher_settings_and_first_proposals(tmp_path):
    s = _searcher(tmp_path, {"method": "asha", "trials": 4, "min_steps": 10, "eta": 3, "audit": 1},
                  seeds=(0, 1))
    assert (s.eta, s.min_steps, s.brackets, s.budget) == (3, 10, 1, 4 * 2 * 90)
    first = s.propose({})
    # every config pending counts 2 x 90: configurations 0..3, both seeds, seeds fastest
    assert len(first) == 8 and [t.seed for t in first] == [0, 1] * 4
    assert [t.trial_id for t in first] == [t.trial_id for t in s.candidates()]
    rule = rule_of(first[0].early_stop)
    assert rule == {"method": "asha", "eta": 3, "min_steps": 10, "bracket": 0, "rungs": [10, 30],
                    "metric": "valid/accuracy", "mode": "max", "value": "final"}
    # the candidates are the expansion's trials with the rule
    assert [dataclasses.replace(t, early_stop=()).trial_id for t in first] == \
        [t.trial_id for t in s.cell.trials]
    assert s.max_steps() == 720 - 1 + 180 + 90
    # at most: configurations at 2 seeds x 10 steps (each stopped at the first rung) while under
    # the 720 steps: 36 configurations, 72 trials, plus 1 audit (the candidates are 8 of them)
    assert s.max_trials() == 36 * 2 + 1 and len(s.candidates()) == 8
    # the board knows each trial's group and index (per seed)
    g0, k0 = s.board.groups[first[0].trial_id]
    g1, _ = s.board.groups[first[1].trial_id]
    assert k0 == 0 and g0.endswith("bracket 0 | seed 0") and g1.endswith("bracket 0 | seed 1")


def test_proposals_follow_the_steps_spent(tmp_path):
    """Budget 4 x 90 = 360 steps: configurations 0..3 spend 10 + 10 + 90 + 30 = 140; 4 and 5 pending
    count 90 each (320 < 360), 6 makes 410: proposed are 4, 5 and 6, from the sequence beyond the
    candidates."""
    s = _searcher(tmp_path, {"method": "asha", "trials": 4, "min_steps": 10, "eta": 3})
    first = s.propose({})
    assert len(first) == 4
    outs = [_out(first[0], "stopped", 10, {10: 0.2}), _out(first[1], "stopped", 10, {10: 0.1}),
            _out(first[2], "finished", None, {10: 0.5, 30: 0.7}),
            _out(first[3], "stopped", 30, {10: 0.6, 30: 0.5})]
    seen = {o.trial_id: o for o in outs}
    nxt = s.propose(seen)
    assert [s.board.groups[t.trial_id][1] for t in nxt] == [4, 5, 6]
    # 4 and 5 stop at 10, 6 finishes: 140 + 20 + 90 = 250 < 360, so 7 (and 8) come next
    seen |= {nxt[0].trial_id: _out(nxt[0], "stopped", 10), nxt[1].trial_id: _out(nxt[1], "stopped", 10),
             nxt[2].trial_id: _out(nxt[2], "finished")}
    assert [s.board.groups[t.trial_id][1] for t in s.propose(seen)] == [7, 8]
    assert s.describe(seen)["steps_spent"] == 250


def test_steps_spent_stay_within_the_stated_bound_whatever_order_two_workers_end_trials_in(tmp_path):
    """``--jobs 2`` ends trials in any order (measured on experiments/asha.yaml: 750 and 790 of 720
    steps, which the summary stated without a bound). Two simulated workers take the proposed
    trials and end them in a random order, each stopped at a random rung or finished, the searcher
    asked again after each: the steps spent pass the budget, never :meth:`max_steps`, and the
    summary line says that bound."""
    import random

    s = _searcher(tmp_path, {"method": "asha", "trials": 4, "min_steps": 10, "eta": 3}, seeds=(0, 1))
    most = s.max_steps()
    assert most == 720 - 1 + 2 * 90
    over = 0
    for trial in range(30):
        rng = random.Random(trial)
        seen: dict = {}
        running: list = []
        while True:
            todo = [t for t in s.propose(seen) if t.trial_id not in seen and t not in running]
            running += todo[:2 - len(running)]
            if not running:
                break
            t = running.pop(rng.randrange(len(running)))
            stop = rng.choice([10, 30, None])
            seen[t.trial_id] = _out(t, "stopped", stop) if stop else _out(t, "finished")
        d = s.describe(seen)
        assert d["steps_spent"] <= most and len(d["words"]) < 200, (trial, d["steps_spent"])
        if d["steps_spent"] > 720:
            over += 1
            assert d["words"].endswith(f"of 720 steps spent (at most {most}: the last configuration "
                                       f"proposed trains to the end)"), d["words"]
    assert over > 0  # the bound is what holds, not the budget


def test_the_sequence_beyond_the_candidates_is_the_same_sequence(tmp_path):
    """Point k >= trials is the sampled sequence's point k: the searcher of trials: 4 makes, for
    configurations 4..7, exactly the candidates of trials: 8 (same ids)."""
    s4 = _searcher(tmp_path, {"method": "asha", "trials": 4}, name="a4")
    s8 = _searcher(tmp_path, {"method": "asha", "trials": 8}, name="a4")
    ids4 = [t.trial_id for k in range(8) for t in s4.trials_of(k)]
    ids8 = [t.trial_id for k in range(8) for t in s8.trials_of(k)]
    assert ids4 == ids8


def test_audits_come_once_every_trial_ended_first_stopped_in_index_order(tmp_path):
    s = _searcher(tmp_path, {"method": "asha", "trials": 2, "min_steps": 10, "audit": 2})
    # budget 180: 0 stops at 10, 1 finishes (100), 2 stops at 30 (130), 3 stops at 10 (140), 4...
    specs = [s.trials_of(k)[0] for k in range(8)]
    outs = [_out(specs[0], "stopped", 10, {10: 0.3}), _out(specs[1], "finished", None, {10: 0.5, 30: 0.6}),
            _out(specs[2], "stopped", 30, {10: 0.6, 30: 0.5}), _out(specs[3], "stopped", 10, {10: 0.1})]
    seen = {o.trial_id: o for o in outs}
    assert [s.board.groups[t.trial_id][1] for t in s.propose(seen)] == [4]  # 140 < 180; no audit yet
    seen[specs[4].trial_id] = _out(specs[4], "finished")  # 230 >= 180: the search is over
    audits = s.propose(seen)
    assert [a.trial_id for a in audits] == [dataclasses.replace(specs[k], early_stop=()).trial_id
                                           for k in (0, 2)]
    assert all(a.early_stop == () for a in audits)
    assert s.board.tags[audits[0].trial_id]["harness.audit_of"] == specs[0].trial_id
    seen[audits[0].trial_id] = _out(audits[0], "finished")
    d = s.describe(seen)
    assert d["stopped"] == 3 and d["steps_spent"] == 230 and d["audit_steps"] == 90
    assert d["words"] == ("stopped 3 of 5 trials (step 10: 2, step 30: 1); 230 of 180 steps spent (at most "
                          "269: the last configuration proposed trains to the end)")
    # with values: the audited trial (0.95) beats the promoted ones (0.9, 0.8): it would have won
    for t, v in ((specs[1], 0.9), (specs[4], 0.8), (audits[0], 0.95)):
        seen[t.trial_id].final_valid_accuracy = v
    assert s.describe(seen)["words"].endswith("; audit: 1 of 1 stopped trials trained to the end would "
                                              "have won")
    assert [a["stopped_twin"] for a in d["audits"]] == [specs[0].trial_id, specs[2].trial_id]
    assert [a["status"] for a in d["audits"]] == ["finished", "pending"]
    assert d["brackets"][0]["rungs"] == [{"step": 10, "reached": 4, "stopped": 2, "continued": 2},
                                         {"step": 30, "reached": 2, "stopped": 1, "continued": 1}]


def test_hyperband_assigns_brackets_round_robin(tmp_path):
    s = _searcher(tmp_path, {"method": "hyperband", "trials": 6, "min_steps": 10, "eta": 3})
    assert s.brackets == 3  # rungs 10, 30 in bracket 0: brackets 0, 1 and 2 (no rung)
    rules = [rule_of(s.trials_of(k)[0].early_stop) for k in range(6)]
    assert [r["bracket"] for r in rules] == [0, 1, 2, 0, 1, 2]
    assert [r["rungs"] for r in rules[:3]] == [[10, 30], [30], []]
    s2 = _searcher(tmp_path, {"method": "hyperband", "trials": 6, "min_steps": 10, "brackets": 2},
                   name="hb2")
    assert [rule_of(s2.trials_of(k)[0].early_stop)["bracket"] for k in range(4)] == [0, 1, 0, 1]
    sh = _searcher(tmp_path, {"method": "successive_halving", "trials": 3}, name="sh")
    assert sh.brackets == 1 and sh.min_steps == default_min_steps(90) == 4
    assert sh.describe({})["synchronous"] is True  # harness.orchestrate.halving (tests/test_halving.py)


# -------------------------------------------------------------------------- the trainer's gate


def test_the_gate_stops_a_real_trial_at_its_rung():
    from harness.train.loop import run_trial

    rule = {"method": "asha", "eta": 3, "bracket": 0, "rungs": [10, 30], "metric": "valid/accuracy",
            "mode": "max", "value": "final"}
    spec = _spec(early_stop=rule, steps_per_dispatch=10)
    asked = []

    def gate(s, step, value):
        asked.append((s.trial_id, step, value))
        return "enough" if step == 30 else None

    res = run_trial(spec, measure_perf=False, gate=gate)
    c = res.curves
    assert res.status == "stopped" and res.stopped_step == 30 and res.reason == "enough"
    assert c.eval_step == [0, 10, 30] and c.train_step[-1] == 30 and len(c.train_loss) == 30
    assert res.rungs == {10: c.eval_accuracy[1], 30: c.eval_accuracy[2]}
    assert asked == [(spec.trial_id, 10, c.eval_accuracy[1]), (spec.trial_id, 30, c.eval_accuracy[2])]
    assert res.test_loss is None and res.test_accuracy is None
    # without a gate: the same curve up to 30 (same seed), trained to the end, rungs recorded
    full = run_trial(spec, measure_perf=False)
    assert full.status == "finished" and full.curves.eval_step == [0, 10, 30, 60, 90]
    assert full.curves.eval_accuracy[:3] == c.eval_accuracy and full.rungs == res.rungs
    assert full.test_loss is not None
    o = TrialOutcome.from_result(res)
    assert o.status == "stopped" and o.stopped_step == 30 and o.rungs == res.rungs
    assert o.reason == "stopped at step 30: enough"


def test_a_spooled_result_keeps_its_rung_board_tags(tmp_path):
    """A trial the store did not take is spooled without the board (not JSON), but with the tags
    the board gave its run (search index, rung group, audit_of): the replayed run keeps them. Before,
    only ``RunContext.trial_tags`` was spooled, and an audit trial replayed from the spool lost
    ``harness.audit_of`` (and with it: counted as one more seed)."""
    from conftest import fake_result, make_spec

    from harness.core.context import RunContext
    from harness.execute.writing import spool_result

    spec = make_spec()
    board = RungBoard()
    board.tags[spec.trial_id] = {"harness.audit_of": "abc", "harness.search_index": "3"}
    ctx = RunContext(tracking_uri=f"sqlite:///{tmp_path}/m.db", experiment_id="1", parent_run_id="p",
                     sweep_id="s", sweep="t", trial_tags={spec.trial_id: {"harness.search": "asha"}},
                     rung_board=board)
    assert ctx.tags_of(spec.trial_id) == {"harness.search": "asha", "harness.audit_of": "abc",
                                          "harness.search_index": "3"}
    entry = spool_result(fake_result(spec), 0, ctx, None, OSError("the store is down"))
    assert entry["ctx"]["rung_board"] is None
    assert entry["ctx"]["trial_tags"] == {spec.trial_id: ctx.tags_of(spec.trial_id)}
    assert RunContext(**entry["ctx"]).tags_of(spec.trial_id)["harness.audit_of"] == "abc"


@pytest.mark.parametrize(("search", "msg"), [
    ({"method": "asha", "min_steps": 500}, "optimizers[0]: search.min_steps: the first rung (500 steps) is "
     "not below the budget's 90 steps, so asha would stop nothing: use min_steps < 90 (default: 90/3^3, "
     "rounded up)"),
    ({"method": "successive_halving", "min_steps": 90}, "optimizers[0]: search.min_steps: the first rung "
     "(90 steps) is not below the budget's 90 steps, so successive_halving would stop nothing: use "
     "min_steps < 90 (default: 90/3^3, rounded up)"),
    ({"method": "hyperband", "min_steps": 10, "brackets": 50}, "optimizers[0]: search.brackets: 50 "
     "brackets, but only 2 have a rung below the budget (90 steps) and one more runs without: at most 3"),
])
def test_settings_that_leave_no_rung_are_refused_before_anything_runs(write_sweep, tmp_path, search, msg):
    """min_steps at or above the budget, or hyperband brackets beyond the last with a rung, ran as
    plain full-budget trials ("stopped 0 of 8") without a word; now a config error naming the
    file, and nothing is written."""
    from harness.config.errors import ConfigError
    from harness.orchestrate.run import run_sweep

    path = write_sweep(optimizers=[{"name": "sgd", "hparams": {"step_size": {"log_uniform": [0.001, 1.0]}}}],
                       budget={"steps": 90}, eval_every=30, seeds=[0],
                       search={"trials": 4, "seed": 0, **search})
    with pytest.raises(ConfigError) as ei:
        run_sweep(path, tracking_uri=f"sqlite:///{tmp_path}/m.db", quiet=True)
    assert ei.value.errors == [f"{path}: {msg}"]
    assert not (tmp_path / "m.db").exists()


def test_a_workers_gate_stops_asking_a_store_that_is_down(monkeypatch):
    """A worker's rung decisions read missing peers from the store; with the store down (a server on
    a closed port) the first read fails and is noted in the process's HEALTH, and the next decisions
    do not ask again (each would wait out the client's retries: a helper measured an ASHA sweep
    with ``--jobs 2`` at 200 s instead of 30 s while its server was down)."""
    import socket

    from mlflow.tracking import MlflowClient

    from harness.core.context import RunContext
    from harness.execute import rung_gate
    from harness.tracking.health import HEALTH

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    calls = []
    real = MlflowClient.search_runs
    monkeypatch.setattr(MlflowClient, "search_runs",
                        lambda self, *a, **k: calls.append(a) or real(self, *a, **k))
    monkeypatch.setattr(HEALTH, "down_since", None)
    monkeypatch.setattr(HEALTH, "error", "")
    monkeypatch.setattr(HEALTH, "last_probe", 0.0)
    board = RungBoard()
    board.groups.update({"a": ("g", 0), "b": ("g", 1), "c": ("g", 2)})
    ctx = RunContext(tracking_uri=f"http://127.0.0.1:{port}", experiment_id="1", parent_run_id="p",
                     sweep_id="s", sweep="t", rung_board=board)
    rung_gate.read_peers(board, ctx, "c")
    assert len(calls) == 1 and HEALTH.down and "127.0.0.1" in HEALTH.error
    for _ in range(5):
        rung_gate.read_peers(board, ctx, "c")
    assert len(calls) == 1  # known down: not asked again within PROBE_S
    assert board.values == {}


def test_the_dry_run_counts_the_trials_the_search_can_train_not_only_its_first(tmp_path, capsys):
    """The dry run used to show only the 3 first configurations as "candidates", while ASHA trains
    configurations until its 3 x 90 = 270 steps are spent: now it also shows the most trials it can
    train (27: each stopped at the 10-step rung), and a real run stays within it."""
    from harness.orchestrate.run import run_sweep

    path = _config(tmp_path, {"method": "asha", "trials": 3, "min_steps": 10, "eta": 3})
    uri = f"sqlite:///{tmp_path}/m.db"
    run_sweep(path, tracking_uri=uri, dry_run=True)
    out = " ".join(capsys.readouterr().out.split())
    assert "the search can train at most 27 trials and spend at most 359 training steps" in out
    s = run_sweep(path, tracking_uri=uri, quiet=True)
    trained = len(s.outcomes)
    assert 3 < trained <= 27


def test_the_dry_run_says_early_stopping_trials_train_one_by_one(tmp_path, capsys):
    """``batching: on`` was taken in silence though trials with a stopping rule are never vmapped
    (each has a batch key of its own); the dry run printed no batching and no data-memory line."""
    from harness.orchestrate.run import run_sweep

    path = _config(tmp_path, {"method": "asha", "trials": 3, "min_steps": 10, "eta": 3, "audit": 1})
    path.write_text(path.read_text().replace("batching: 'off'", "batching: 'on'"))
    run_sweep(path, tracking_uri=f"sqlite:///{tmp_path}/m.db", dry_run=True)
    out = " ".join(capsys.readouterr().out.split())
    assert ("batching on: trials with an early-stopping rule (3 of the 3 candidates, and the later "
            "proposals that carry one) train one by one") in out
    assert "and carry no rule (such as audits) are vmapped together" in out
    assert "device memory for data: " in out
    specs = expand(load_config(path))
    one = dataclasses.replace(specs[0], early_stop=(("bracket", 0),))
    assert one.batch_key() != dataclasses.replace(one, seed=1).batch_key()  # never one program


def test_max_trials_bounds_the_trials_an_adaptive_search_proposes(tmp_path):
    """`sweep --max-trials` bounded the expansion only: an ASHA search could train more than the
    limit (found by an attack). Now a search that can train more than the limit (none
    diverging, `max_trials`) is refused before anything runs, and one whose diverged trials leave
    steps for more stops proposing at the limit and says so."""
    from harness.config.errors import ConfigError

    whole = expand(load_config(_config(tmp_path, {"method": "asha", "trials": 4, "min_steps": 10, "eta": 3})))
    most = SweepSearch(whole, "final").max_trials()
    assert list(most.values()) == [36]  # 360 steps at 10 per configuration
    with pytest.raises(ConfigError) as e:
        SweepSearch(whole, "final", trial_limit=35)
    assert str(e.value) == (
        "search: the adaptive search can train up to 36 trials (sgd on digits · mlp (depth=1, width=16):"
        " 36), more than the limit of 35; lower its budget or seeds, or raise the limit with `python -m "
        "harness sweep --max-trials N`")
    # every trial diverges at step 1: the 360 steps would pay for 360 trials; the limit holds at 36
    ss = SweepSearch(whole, "final", trial_limit=36)
    seen: dict[str, TrialOutcome] = {}
    while nxt := ss.propose(seen):
        for t in nxt:
            o = _out(t, "diverged")
            o.diverged_step = 1
            seen[t.trial_id] = o
    assert len(seen) == 36 and ss.capped
    assert ss.describe(seen)[0]["words"].endswith(
        "; the search stopped at --max-trials 36 (trials that diverged left steps for more)")
    unbounded = SweepSearch(whole, "final")
    seen = {}
    while (nxt := unbounded.propose(seen)) and len(seen) < 1000:
        for t in nxt:
            o = _out(t, "diverged")
            o.diverged_step = 1
            seen[t.trial_id] = o
    assert len(seen) > 36 and not unbounded.capped
    # a sweep refuses it before the store is opened, dry run or not
    from harness.orchestrate.run import run_sweep

    for dry in (True, False):
        with pytest.raises(ConfigError, match=r"can train up to 36 trials .* more than the limit of 20;"):
            run_sweep(_config(tmp_path, {"method": "asha", "trials": 4, "min_steps": 10, "eta": 3}),
                      tracking_uri=f"sqlite:///{tmp_path}/m.db", max_trials=20, dry_run=dry)
    assert not (tmp_path / "m.db").exists()


def test_a_count_the_audits_make_too_big_names_search_audit(tmp_path):
    """``search.audit: 10**12`` was refused with "lower its budget or seeds", which named neither
    the key nor the cause: now the line names ``search.audit`` and the most audits that fit."""
    from harness.config.errors import ConfigError

    whole = expand(load_config(_config(tmp_path, {
        "method": "asha", "trials": 4, "min_steps": 10, "eta": 3, "audit": 10**12})))
    with pytest.raises(ConfigError) as e:
        SweepSearch(whole, "final", trial_limit=100)
    assert str(e.value).startswith("search.audit: 1,000,000,000,000 audits (stopped trials trained "
                                   "again) per optimizer and task make the adaptive search able to "
                                   "train up to 1,000,000,000,036 trials")
    assert "lower search.audit (at most 64 fits)" in str(e.value) and e.value.key_path == "search.audit"
    with pytest.raises(ConfigError, match=r"^search: .* lower its budget, seeds or search\.audit,"):
        SweepSearch(whole, "final", trial_limit=30)  # 36 trials without the audits


def test_peers_rung_values_read_from_a_sqlite_store_equal_mlflows(tmp_path, monkeypatch):
    """A decision whose peers trained in another process reads their rung values from the store: on
    a local SQLite store with sqlite3 now (two tags per run; through MLflow's search_runs, which
    builds every tag, param and metric of every run of the group, two ASHA invocations at once took
    8x the time of one: an attack). Both reads give the same board, that of the sweep."""
    import mlflow

    from harness.core.context import RunContext
    from harness.core.rungs import RungBoard
    from harness.execute import rung_gate
    from harness.orchestrate.run import run_sweep

    path = _config(tmp_path, {"method": "asha", "trials": 6, "min_steps": 10, "eta": 3}, seeds=(0, 1))
    uri = f"sqlite:///{tmp_path}/m.db"
    s = run_sweep(path, tracking_uri=uri, quiet=True)
    seen = {o.trial_id: o for o in s.outcomes}
    search = SweepSearch(expand(load_config(path)), "final")
    while [t for t in search.propose(seen) if t.trial_id not in seen]:
        pass
    groups = search.context()["rung_board"].groups  # every proposal's (group, index)
    last = {}
    for tid, (g, k) in groups.items():
        if k >= last.get(g, ("", -1))[1]:
            last[g] = (tid, k)
    exp_id = mlflow.MlflowClient(uri).get_experiment_by_name("asha").experiment_id

    def read() -> dict:
        board = RungBoard()
        board.groups.update(groups)
        ctx = RunContext(tracking_uri=uri, experiment_id=exp_id, parent_run_id="p", sweep_id="s",
                         sweep="asha", rung_board=board)
        for tid, _ in last.values():
            rung_gate.read_peers(board, ctx, tid)
        return board.values

    calls = []
    real = mlflow.MlflowClient.search_runs
    monkeypatch.setattr(mlflow.MlflowClient, "search_runs",
                        lambda self, *a, **k: calls.append(a) or real(self, *a, **k))
    by_sqlite = read()
    assert calls == []  # not one search_runs (before: one per decision)
    monkeypatch.setattr("harness.tracking.uris.sqlite_path", lambda uri: None)  # MLflow's search_runs
    by_mlflow = read()
    assert len(calls) == 2 and len(last) == 2
    assert len(by_sqlite) == len(groups) - 2  # every peer of each group's last trial
    assert by_sqlite == by_mlflow == {t: {int(k): v for k, v in seen[t].rungs.items()} for t in by_sqlite}


def test_the_limits_note_goes_only_to_the_adaptive_searches_lines(tmp_path):
    """Found by the review: once the --max-trials cap was hit, the note "the search stopped at
    --max-trials" was added to every cell's line, a fixed grid's included."""
    asha = {"method": "asha", "trials": 4, "min_steps": 10, "eta": 3}
    cfg = yaml.safe_load(_config(tmp_path, asha).read_text())
    cfg["optimizers"].append({"name": "momentum", "hparams": {"step_size": [0.1, 0.2]},
                              "search": {"method": "grid"}})
    p = tmp_path / "mixed.yaml"
    p.write_text(yaml.safe_dump(cfg))
    ss = SweepSearch(expand(load_config(p)), "final", trial_limit=38)  # ASHA's 36 and the grid's 2
    seen: dict[str, TrialOutcome] = {}
    while nxt := ss.propose(seen):
        for t in nxt:
            o = _out(t, "diverged" if t.optimizer == "sgd" else "finished")
            o.diverged_step = 1 if t.optimizer == "sgd" else None
            seen[t.trial_id] = o
    assert ss.capped and len(seen) == 38
    words = {c.optimizer: d.get("words", "") for c, d in zip(ss.cells, ss.describe(seen), strict=True)}
    assert words["sgd"].endswith("; the search stopped at --max-trials 38 (trials that diverged left steps "
                                 "for more)")
    assert "max-trials" not in words["momentum"]
