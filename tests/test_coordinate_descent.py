"""Coordinate descent with a certificate (:mod:`harness.orchestrate.coordinate`) on hand-made
outcomes whose optimum is known, without training anything.

The bowl: ``optimizer.b1`` in ``[0.8, 0.85, 0.9, 0.95, 0.99]`` (index ``i``) and
``optimizer.step_size`` in ``[0.001, 0.003, 0.01, 0.03]`` (index ``j``), validation accuracy
``0.9 - 0.01 f`` with ``f = x^2 + xy + y^2``, ``x = i - 3``, ``y = j - 2`` (seed 1 gets +0.001), so
the optimum is ``(0.95, 0.01)``, inside the grid. adamw's default b1 0.9 is index 2 and step_size
has no default (middle: index 1), so the start is ``(0.9, 0.003)``, ``f = 3``. Pass 1 on b1 (``y =
-1``, ``f = x^2 - x + 1``): 13, 7, 3, 1, 1 for ``x = -3..1``: a tie of 0.95 and 0.99, the lower
index wins: move to 0.95. On step_size (``x = 0``, ``f = y^2``): 4, 1, 0, 1: move to 0.01. Pass 2
moves nothing: converged; its b1 line is new (4 configurations), its step_size line is pass 1's
(reused, nothing proposed). Every neighbour has ``f = 1``: certified.
"""

from __future__ import annotations

import itertools
import json
import math

import pytest
from conftest import make_spec

from harness.config.errors import ConfigError
from harness.config.load import load_config
from harness.config.search import Search
from harness.core.outcome import TrialOutcome
from harness.orchestrate.coordinate import DEFAULT_PASSES, CoordinateDescent, closest_index
from harness.orchestrate.searchers import searcher_for
from harness.plan.cells import Cell
from harness.plan.expansion import expand

B1 = [0.8, 0.85, 0.9, 0.95, 0.99]
LR = [0.001, 0.003, 0.01, 0.03]
KEY = "digits · mlp | optimizers[0] | schedules[0] | batch 32"


def _f(b1: float, lr: float) -> float:
    x, y = B1.index(b1) - 3, LR.index(lr) - 2
    return x * x + x * y + y * y


def _cell(seeds=(0, 1), **search) -> Cell:
    trials = [make_spec(optimizer="adamw", seed=seed, optimizer_hparams={"b1": b1, "step_size": lr})
              for b1, lr in itertools.product(B1, LR) for seed in seeds]
    srch = Search("coordinate_descent", **search)
    return Cell(KEY, "digits · mlp", "adamw", srch, (), trials, tuple(seeds))


def _outcome(s) -> TrialOutcome:
    o = TrialOutcome.of_spec(s, "finished")
    hp = s.hparams("optimizer")
    o.final_valid_accuracy = 0.9 - 0.01 * _f(hp["b1"], hp["step_size"]) + 0.001 * s.seed
    return o


def _run(cd: CoordinateDescent, seen: dict | None = None) -> tuple[list[list[str]], dict]:
    """The loop's contract by hand: propose, train what is new, until nothing new is proposed."""
    seen = dict(seen or {})
    rounds: list[list[str]] = []
    while True:
        new = [s for s in cd.propose(seen) if s.trial_id not in seen]
        if not new:
            return rounds, seen
        assert len({s.trial_id for s in new}) == len(new)
        rounds.append([s.trial_id for s in new])
        for s in new:
            seen[s.trial_id] = _outcome(s)


def _ids(cell: Cell, points) -> list[str]:
    return [s.trial_id for b1, lr in points for s in cell.trials
            if s.hparams("optimizer") == {"b1": b1, "step_size": lr}]


def test_the_bowl_path_moves_and_certificate():
    cell = _cell()
    cd = CoordinateDescent(cell, "final")
    assert cd.names == ["optimizer.b1", "optimizer.step_size"]
    assert cd.start == (2, 1) and cd.passes == DEFAULT_PASSES == 3
    rounds, seen = _run(cd)
    # start; pass 1 b1 (4 others); pass 1 step_size (3 others); pass 2 b1 (4 new); pass 2
    # step_size: every value trained in pass 1, nothing proposed
    assert rounds == [_ids(cell, [(0.9, 0.003)]),
                      _ids(cell, [(b, 0.003) for b in (0.8, 0.85, 0.95, 0.99)]),
                      _ids(cell, [(0.95, lr) for lr in (0.001, 0.01, 0.03)]),
                      _ids(cell, [(b, 0.01) for b in (0.8, 0.85, 0.9, 0.99)])]
    assert sum(map(len, rounds)) == 24 == len(seen)  # 12 configurations x 2 seeds, none twice
    d = cd.describe(seen)
    json.dumps(d)  # JSON-able as it is logged
    assert d["start"]["values"] == {"optimizer.b1": 0.9, "optimizer.step_size": 0.003}
    assert d["start"]["rule"] == {"optimizer.b1": "closest to the default 0.9",
                                  "optimizer.step_size": "middle of the grid"}
    moves = [(p["pass"], p["axis"], p["from"], p["chosen"], p["moved"]) for p in d["path"]]
    assert moves == [(1, "optimizer.b1", 0.9, 0.95, True), (1, "optimizer.step_size", 0.003, 0.01, True),
                     (2, "optimizer.b1", 0.95, 0.95, False), (2, "optimizer.step_size", 0.01, 0.01, False)]
    first = d["path"][0]
    assert [t["value"] for t in first["tried"]] == B1
    assert [round(t["objective"]["value"], 6) for t in first["tried"]] == [
        0.7705, 0.8305, 0.8705, 0.8905, 0.8905]
    assert d["stop"] == "converged" and d["passes_done"] == 2
    assert d["stop_words"] == "converged: pass 2 moved nothing"
    assert d["selected"]["values"] == {"optimizer.b1": 0.95, "optimizer.step_size": 0.01}
    assert math.isclose(d["selected"]["objective"]["value"], 0.9005)
    assert d["trials"] == 24 and d["steps_spent"] == 24 * 20 and d["budget_steps"] is None
    cert = d["certificate"]
    assert cert["certified"] is True
    assert cert["words"] == "certified: all 4 neighbours trained, none better"
    assert [(n["axis"], n["value"], n["step"], n["trained"], n["better"]) for n in cert["neighbours"]] == [
        ("optimizer.b1", 0.9, -1, True, False), ("optimizer.b1", 0.99, 1, True, False),
        ("optimizer.step_size", 0.003, -1, True, False), ("optimizer.step_size", 0.03, 1, True, False)]
    assert all(math.isclose(n["objective"]["value"], 0.8905) for n in cert["neighbours"])


def test_propose_is_a_pure_function_of_seen():
    """At every point of an uninterrupted run, a fresh searcher given that prefix of the history
    (in any order) proposes what the run proposed; a finished run proposes nothing."""
    cell = _cell()
    rounds, seen = _run(CoordinateDescent(cell, "final"))
    done: dict = {}
    for r in rounds:
        fresh = CoordinateDescent(cell, "final")
        got = [s.trial_id for s in fresh.propose(dict(reversed(done.items()))) if s.trial_id not in done]
        assert got == r
        assert got == [s.trial_id for s in fresh.propose(done) if s.trial_id not in done]  # again
        done.update({t: seen[t] for t in r})
    assert CoordinateDescent(cell, "final").propose(seen) == []
    # a round half trained (killed mid-round): the same round, less what is done
    half = {**{t: seen[t] for r in rounds[:2] for t in r}, rounds[2][0]: seen[rounds[2][0]]}
    assert [s.trial_id for s in CoordinateDescent(cell, "final").propose(half)
            if s.trial_id not in half] == rounds[2][1:]


def test_trained_configurations_are_reused_never_proposed():
    """Two configurations an earlier sweep trained (same trial ids) are never proposed again; the
    path is the same and 4 trials fewer are trained."""
    cell = _cell()
    _, ref_seen = _run(CoordinateDescent(cell, "final"))
    earlier = {t: _outcome(s) for s in cell.trials
               if (t := s.trial_id) in _ids(cell, [(0.8, 0.003), (0.95, 0.03)])}
    rounds, seen = _run(CoordinateDescent(cell, "final"), earlier)
    proposed = [t for r in rounds for t in r]
    assert not set(proposed) & set(earlier)
    assert len(proposed) == 20 and set(seen) == set(ref_seen)
    assert (CoordinateDescent(cell, "final").describe(seen)["path"]
            == CoordinateDescent(cell, "final").describe(ref_seen)["path"])


def test_a_failed_trial_is_not_a_result():
    """A failed trial (no FINISHED run: the next invocation trains it again) keeps its round
    pending; a diverged one is a result (its seed counts as not finished)."""
    cell = _cell()
    cd = CoordinateDescent(cell, "final")
    start = cd.propose({})
    seen = {s.trial_id: _outcome(s) for s in start}
    failed = TrialOutcome.of_spec(start[1], "failed")
    assert cd.propose({**seen, start[1].trial_id: failed}) == start
    diverged = TrialOutcome.of_spec(start[1], "diverged")
    nxt = cd.propose({**seen, start[1].trial_id: diverged})
    assert len(nxt) == 8 and not {s.trial_id for s in nxt} & {s.trial_id for s in start}


def test_the_pass_budget_runs_out_before_a_certificate():
    cell = _cell(passes=1)
    cd = CoordinateDescent(cell, "final")
    rounds, seen = _run(cd)
    assert [len(r) for r in rounds] == [2, 8, 6]
    d = cd.describe(seen)
    assert d["stop"] == "passes" and d["passes_done"] == 1
    assert d["stop_words"] == "pass budget spent: 1 passes, the last one moved"
    assert d["selected"]["values"] == {"optimizer.b1": 0.95, "optimizer.step_size": 0.01}
    cert = d["certificate"]
    assert cert["certified"] is False
    assert cert["words"] == "not certified: pass budget spent; 2 of 4 neighbours trained"
    assert [(n["value"], n["trained"]) for n in cert["neighbours"]] == [
        (0.9, False), (0.99, False), (0.003, True), (0.03, True)]


def test_the_compute_budget_is_trials_times_seeds_times_steps():
    """``trials: 3``: 3 configurations x 2 seeds x 20 steps = 120 steps: the start and the first two
    values of b1 (worse: no move), then the budget is spent."""
    cell = _cell(trials=3)
    cd = CoordinateDescent(cell, "final")
    assert cd.budget == 120 and cd.max_steps() == 120
    assert cd.max_trials() == 120 // 20  # the budget pays for 6 trials of 20 steps
    rounds, seen = _run(cd)
    assert rounds == [_ids(cell, [(0.9, 0.003)]), _ids(cell, [(0.8, 0.003), (0.85, 0.003)])]
    d = cd.describe(seen)
    assert d["stop"] == "budget" and d["steps_spent"] == 120
    assert d["path"][0]["complete"] is False and d["path"][0]["moved"] is False
    assert d["stop_words"] == "compute budget spent: 120 of 120 steps used; the next round did not fit"
    assert d["certificate"]["words"] == "not certified: compute budget spent; 1 of 4 neighbours trained"
    # without a budget: at most the start and every other value of each axis in each pass
    assert CoordinateDescent(_cell(), "final").max_steps() == min(20, 1 + 3 * (4 + 3)) * 2 * 20
    assert CoordinateDescent(_cell(), "final").max_trials() == min(20, 1 + 3 * (4 + 3)) * 2


def test_time_to_target_orders_by_seeds_reaching_then_steps():
    """The sweep's default rule: a configuration whose seeds reach the target in fewer steps wins
    over one with a better final accuracy."""
    cell = _cell(seeds=(0,))
    fast = _ids(cell, [(0.8, 0.003)])[0]

    def outcome(s):
        o = _outcome(s)
        if s.trial_id == fast:
            o.steps_to_target, o.seconds_to_target = 10, 1.0
        return o

    seen: dict = {}
    cd = CoordinateDescent(cell)
    for _ in range(3):
        seen.update({s.trial_id: outcome(s) for s in cd.propose(seen)})
    d = cd.describe(seen)
    assert d["path"][0]["chosen"] == 0.8
    assert d["path"][0]["objective"] == {"metric": "valid/accuracy", "value": pytest.approx(0.77),
                                         "reached": 1, "finished": 1, "seeds": 1, "steps_to_target": 10}


def test_closest_index_on_a_log_scale():
    assert closest_index([0.001, 0.01, 0.1], 0.004) == 1  # |log 0.4| < |log 4|
    assert closest_index([0.001, 0.01, 0.1], 0.003) == 0  # |log 3| < |log 0.3|
    assert closest_index([0.001, 0.01, 0.1], 0.0032) == 1
    assert closest_index([-1.0, 0.0, 1.0], 0.4) == 1
    assert closest_index(["relu", "gelu"], "gelu") == 1 and closest_index(["relu"], "tanh") is None


# --------------------------------------------------------------------------- config errors


def _cd_config(write_sweep, optimizer_hparams, **search):
    return write_sweep(optimizers=[{"name": "adamw", "hparams": optimizer_hparams}],
                       search={"method": "coordinate_descent", **search})


def test_a_distribution_is_a_config_error(write_sweep):
    path = _cd_config(write_sweep, {"step_size": {"log_uniform": [0.001, 0.1]}, "b1": [0.9, 0.95]})
    with pytest.raises(ConfigError) as ei:
        load_config(path)
    assert [e.replace(str(path), "F") for e in ei.value.errors] == [
        "F: optimizers[0].hparams.step_size: {log_uniform: [0.001, 0.1]} is a distribution, but "
        "search.method is coordinate_descent, which moves along grid axes: write a grid (a list or "
        "{log_grid: [lo, hi, num]})"]


def test_a_start_off_the_grid_is_a_config_error(write_sweep):
    path = _cd_config(write_sweep, {"step_size": {"log_grid": [0.001, 0.1, 3]}, "b1": [0.9, 0.95]},
                      start={"step_size": 0.003, "model.width": 16, "b1": 0.95})
    cfg = load_config(path)
    with pytest.raises(ConfigError) as ei:
        searcher_for(expand(cfg), cfg.selection.by)
    task = "adamw on digits · mlp (width=16, depth=1)"
    assert ei.value.errors == [  # in the order of the start's keys (sorted)
        f"optimizers[0]: search.start.model.width: model.width is not a grid axis of {task} (its axes: "
        f"optimizer.b1, optimizer.step_size); a start is given only for a hyperparameter with a list "
        f"or log_grid",
        f"optimizers[0]: search.start.step_size: 0.003 is not on the grid of optimizer.step_size "
        f"[0.001, 0.01, 0.1] ({task}); start at one of its values"]


def test_a_given_start_is_taken(write_sweep):
    path = _cd_config(write_sweep, {"step_size": {"log_grid": [0.001, 0.1, 3]}, "b1": [0.9, 0.95]},
                      start={"step_size": 0.1, "optimizer.b1": 0.95}, passes=2)
    cfg = load_config(path)
    (cd,) = searcher_for(expand(cfg), cfg.selection.by).searchers
    assert isinstance(cd, CoordinateDescent) and cd.passes == 2
    assert cd.start == (1, 2) and set(cd.start_rule.values()) == {"given"}
    first = cd.propose({})
    assert [(s.seed, s.hparams("optimizer")) for s in first] == [
        (0, {"b1": 0.95, "step_size": 0.1}), (1, {"b1": 0.95, "step_size": 0.1})]


def _descend(cell: Cell, override: dict) -> dict:
    """The descent run to its end on the bowl, with the accuracies of ``override`` ((b1, lr) ->
    accuracy at seed 0; seed 1 adds 0.001, as the bowl) instead; its ``describe``."""
    ids = {t: pt for pt in override for t in _ids(cell, [pt])}
    cd = CoordinateDescent(cell, "final")
    seen: dict = {}
    while new := [s for s in cd.propose(seen) if s.trial_id not in seen]:
        for s in new:
            o = _outcome(s)
            if s.trial_id in ids:
                o.final_valid_accuracy = override[ids[s.trial_id]] + 0.001 * s.seed
            seen[s.trial_id] = o
    return cd.describe(seen)


def test_a_tie_is_followed_to_the_better_point_beyond_it():
    """The bowl certifies (0.95, 0.01). Where (0.99, 0.01) ties with it and (0.99, 0.03), one step
    beyond the tie, is better, the descent follows the tie and reaches the better point (before, it
    certified (0.95, 0.01) and never trained (0.99, 0.03)); the certificate lists the tie it
    followed. A tie with nothing better beyond it is followed too, and the descent stops there."""
    cell = _cell()
    d = _descend(cell, {(0.99, 0.01): 0.9, (0.99, 0.03): 0.91})
    assert d["selected"]["values"] == {"optimizer.b1": 0.99, "optimizer.step_size": 0.03}
    assert math.isclose(d["selected"]["objective"]["value"], 0.9105)
    moves = [(p["pass"], p["axis"], p["from"], p["chosen"]) for p in d["path"]]
    assert moves[2:4] == [(2, "optimizer.b1", 0.95, 0.99), (2, "optimizer.step_size", 0.01, 0.03)]
    cert = d["certificate"]
    assert cert["certified"] and cert["followed"] == [{"axis": "optimizer.b1", "from": 0.95, "to": 0.99}]
    assert cert["words"] == ("certified: all 2 neighbours trained, none better; followed the ties "
                             "optimizer.b1 0.95 -> 0.99")
    d = _descend(cell, {(0.99, 0.01): 0.9})
    assert d["selected"]["values"] == {"optimizer.b1": 0.99, "optimizer.step_size": 0.01}
    assert d["stop"] == "converged"
    assert d["certificate"]["words"] == (
        "certified: all 3 neighbours trained, none better (optimizer.b1=0.95 tied with it: the "
        "leaderboard breaks the tie by seconds to target); followed the ties optimizer.b1 0.95 -> 0.99")


def test_the_report_rows_of_a_descent():
    """reports.search_report on the bowl's record: the certificate table, the path, the neighbours."""
    from reports.search_report import certificate_rows, search_table

    cd = CoordinateDescent(_cell(), "final")
    _, seen = _run(cd)
    rec = json.loads(json.dumps(cd.describe(seen)))
    (row,) = certificate_rows([rec, {"method": "quasirandom", "optimizer": "sgd"}])
    assert (row["optimizer"], row["start"], row["selected"], row["passes"], row["trials"], row["steps"]) == (
        "adamw", "b1=0.9 step_size=0.003", "b1=0.95 step_size=0.01", "2 of 3", 24, "480")
    assert row["objective"] == "accuracy 0.9005" and row["certified"]
    assert row["certificate"] == "certified: all 4 neighbours trained, none better"
    assert [(p["pass"], p["axis"], p["move"]) for p in row["path"]] == [
        (0, "start", "accuracy 0.8705"), (1, "b1", "0.9 → 0.95"), (1, "step_size", "0.003 → 0.01"),
        (2, "b1", "stays at 0.95"), (2, "step_size", "stays at 0.01")]
    assert row["path"][1]["tried"] == ("0.8: 0.7705 · 0.85: 0.8305 · 0.9: 0.8705 · ▶0.95: 0.8905 · "
                                       "0.99: 0.8905")
    assert [(n["axis"], n["value"], n["verdict"]) for n in row["neighbours"]] == [
        ("optimizer.b1", "0.9", "not better"), ("optimizer.b1", "0.99", "not better"),
        ("optimizer.step_size", "0.003", "not better"), ("optimizer.step_size", "0.03", "not better")]
    table = search_table([rec])
    cols = ["optimizer", "certified", "passes_done", "stop", "trials", "steps_spent"]
    assert table.loc[0, cols].tolist() == ["adamw", True, 2, "converged", 24, 480]
    assert search_table([]).empty and "certificate" in search_table([]).columns


def test_a_start_off_the_grid_is_refused_by_the_sweep_with_the_file(write_sweep, tmp_path):
    """Through run_sweep (the command line's path) the searcher's error lines name the config file,
    as every other config error does, and nothing is written."""
    from harness.orchestrate.run import run_sweep

    path = _cd_config(write_sweep, {"step_size": {"log_grid": [0.001, 0.1, 3]}},
                      start={"step_size": 0.003})
    with pytest.raises(ConfigError) as ei:
        run_sweep(path, tracking_uri=f"sqlite:///{tmp_path}/m.db", quiet=True)
    assert len(ei.value.errors) == 1
    assert ei.value.errors[0].startswith(f"{path}: optimizers[0]: search.start.step_size: 0.003 is not "
                                         f"on the grid of optimizer.step_size")
    assert not (tmp_path / "m.db").exists()
