"""Optuna's search (:mod:`harness.orchestrate.optuna_search`).

On hand-made outcomes (nothing trained): the distribution mapping; ``propose`` as a pure function of
``seen`` (a history prefix gives what the uninterrupted search proposed at that point, for tpe and
cmaes, and for rounds of 2 whose results arrive one at a time); the same sequence from two fresh
searchers with one seed, another with another seed; the value and direction told for a loss target
and an accuracy target; a diverged configuration told as failed; ``gp`` without torch. The bowl:
validation accuracy ``0.95 - 0.05 (log10 lr + 2)^2 - 0.1 (b1 - 0.9)^2 + 0.001 seed``, validation
loss ``(log10 lr + 2)^2 + 0.1 + 0.01 seed``.

On real sweeps (slow; digits, a small MLP, 20 steps, SQLite): a tpe search of 6 configurations,
and the same sweep SIGKILLed mid-way (a real subprocess) and run again: the same proposals, in the
same order, each trial FINISHED once.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import yaml
from conftest import make_spec
from subproc import with_hooks
from sweep_store import finished_ids, kill_when_finished, start_sweep

from harness.config.errors import ConfigError
from harness.config.search import Distribution, Search
from harness.core.outcome import TrialOutcome
from harness.core.spec import Target
from harness.orchestrate.optuna_search import (
    GP_NEEDS_TORCH,
    OptunaSearcher,
    from_optuna,
    to_optuna,
)
from harness.orchestrate.searchers import searcher_class
from harness.plan.cells import Cell

LR = ("optimizer.step_size", Distribution("log_uniform", (1e-4, 1.0)))
B1 = ("optimizer.b1", Distribution("uniform", (0.5, 0.99)))
KEY = "digits · mlp | optimizers[0] | schedules[0] | batch 32"


def _cell(sampler="tpe", seed=0, trials=10, batch=None, seeds=(0, 1), dims=(LR, B1), target=None,
          extra=None) -> Cell:
    hp = {"step_size": 0.01, "b1": 0.9, **(extra or {})}
    tr = [make_spec(seed=s, optimizer_hparams=hp, target=target) for s in seeds]
    srch = Search("optuna", trials=trials, seed=seed, sampler=sampler, batch=batch)
    return Cell(KEY, "digits · mlp", "adam", srch, tuple(dims), tr, tuple(seeds))


def _d(s) -> float:
    return (math.log10(s.hparams("optimizer")["step_size"]) + 2) ** 2


def _outcome(s, status="finished") -> TrialOutcome:
    o = TrialOutcome.of_spec(s, status)
    if status == "finished":
        b1 = s.hparams("optimizer")["b1"]
        o.final_valid_accuracy = 0.95 - 0.05 * _d(s) - 0.1 * (b1 - 0.9) ** 2 + 0.001 * s.seed
        o.final_valid_loss = _d(s) + 0.1 + 0.01 * s.seed
    return o


def _run(se: OptunaSearcher, one_at_a_time=False):
    """The loop's contract by hand: propose, train what is new, until nothing new. Returns the
    proposals (trial ids) of each call and, for each, the ``seen`` it was proposed on."""
    seen: dict[str, TrialOutcome] = {}
    calls: list[tuple[dict, list[str]]] = []
    while True:
        new = [s for s in se.propose(seen) if s.trial_id not in seen]
        calls.append((dict(seen), [s.trial_id for s in new]))
        if not new:
            return calls, seen
        for s in new[:1] if one_at_a_time else new:
            seen[s.trial_id] = _outcome(s)


def _points(se, seen):
    return [p.values for p in se.replay(seen)]


def test_the_distribution_mapping():
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    assert to_optuna(Distribution("log_uniform", (1e-4, 1.0))) == FloatDistribution(1e-4, 1.0, log=True)
    assert to_optuna(Distribution("uniform", (0.5, 0.99))) == FloatDistribution(0.5, 0.99)
    assert to_optuna(Distribution("int_uniform", (1, 4))) == IntDistribution(1, 4)
    assert to_optuna(Distribution("choice", ("a", 2, None))) == CategoricalDistribution(("a", 2, None))
    # lists are not options Optuna can store: searched by index, mapped back to a copy of the option
    pairs = Distribution("choice", ([0.9, 0.99], [0.8, 0.9]))
    assert to_optuna(pairs) == CategoricalDistribution((0, 1))
    assert from_optuna(pairs, 1) == [0.8, 0.9] and from_optuna(pairs, 1) is not pairs.args[1]
    prim = Distribution("choice", ("a", 2, None))  # Optuna proposes the option itself
    assert from_optuna(prim, None) is None and from_optuna(prim, "a") == "a"
    # floats: 6 significant digits, clipped into [lo, hi]; ints stay ints
    lu = Distribution("log_uniform", (1e-4, 1.0))
    assert from_optuna(lu, 0.00123456789) == 0.00123457
    assert from_optuna(Distribution("uniform", (0.1234561, 0.2)), 0.1234562) == 0.1234561  # 0.123456 < lo
    assert from_optuna(Distribution("uniform", (0.1, 0.2999999)), 0.29999985) == 0.2999999  # 0.3 > hi
    assert from_optuna(Distribution("int_uniform", (1, 4)), 3) == 3
    assert type(from_optuna(Distribution("int_uniform", (1, 4)), 3)) is int


def test_a_grid_axis_is_searched_as_a_choice_and_the_budget():
    cell = _cell(dims=(LR,), trials=6, seeds=(0, 1, 2))
    # a grid axis b1 [0.9, 0.99] beside the sampled step size: the candidates differ in it
    cell.trials = [make_spec(seed=s, optimizer_hparams={"step_size": lr, "b1": b1})
                   for b1 in (0.99, 0.9) for lr in (0.01, 0.1) for s in (0, 1, 2)]
    se = OptunaSearcher(cell)
    assert se.space == {"optimizer.step_size": LR[1], "optimizer.b1": Distribution("choice", (0.9, 0.99))}
    assert {p["optimizer.b1"] for p in _points(se, {})} <= {0.9, 0.99}
    assert se.max_steps() == 6 * 20 * 3  # trials x steps x seeds
    assert se.max_trials() == 6 * 3 and len(se.candidates()) == 12  # the dry run's count: not 12
    assert se.candidates() == cell.trials  # the expansion's: pre-flight and the sweep id
    assert searcher_class("optuna") is OptunaSearcher
    assert (se.sampler, se.batch, se.seed) == ("tpe", 1, 0)  # the defaults


@pytest.mark.parametrize("sampler", ["tpe", "cmaes"])
def test_propose_on_a_prefix_is_what_the_uninterrupted_search_proposed(sampler):
    calls, seen = _run(OptunaSearcher(_cell(sampler)))
    assert [len(ids) for _, ids in calls] == [2] * 10 + [0]  # one configuration x 2 seeds a call
    assert len({i for _, ids in calls for i in ids}) == 20
    for prefix, ids in calls:  # a fresh searcher (a re-run after a kill) on that store
        assert [s.trial_id for s in OptunaSearcher(_cell(sampler)).propose(prefix)] == ids
    # a store holding one seed of configuration 3 (killed between its seeds): the other seed
    prefix, ids = calls[3]
    half = {**prefix, ids[0]: seen[ids[0]]}
    assert [s.trial_id for s in OptunaSearcher(_cell(sampler)).propose(half)] == ids[1:]
    d = OptunaSearcher(_cell(sampler)).describe(seen)
    assert d["told"] == 10 and d["done"] and d["failed"] == 0 and d["steps_spent"] == 20 * 20


def test_rounds_of_two_do_not_depend_on_when_their_results_arrive():
    """batch 2: the round's results told together, so the next round is the same whether they
    arrived together or one at a time (or after a kill between them)."""
    together, _ = _run(OptunaSearcher(_cell(batch=2)))
    apart, seen = _run(OptunaSearcher(_cell(batch=2)), one_at_a_time=True)
    assert [len(ids) for _, ids in together] == [4] * 5 + [0]
    order_together = [i for _, ids in together for i in ids]
    order_apart = list(seen)
    assert order_apart == order_together
    assert [ids for _, ids in apart][:4] == [together[0][1], together[0][1][1:], together[0][1][2:],
                                              together[0][1][3:]]


def test_the_same_seed_gives_the_same_sequence_and_another_seed_another():
    _, a = _run(OptunaSearcher(_cell(seed=0)))
    _, b = _run(OptunaSearcher(_cell(seed=0)))
    _, c = _run(OptunaSearcher(_cell(seed=1)))
    assert list(a) == list(b)
    assert _points(OptunaSearcher(_cell(seed=0)), a) == _points(OptunaSearcher(_cell(seed=0)), b)
    assert list(a) != list(c) and not set(a) & set(c)


def test_a_loss_target_is_minimized_and_an_accuracy_target_maximized():
    """Two configurations by hand: step size 0.01 (d = 0) and 0.1 (d = 1), seeds 0 and 1."""
    loss = OptunaSearcher(_cell(trials=2, target=Target("valid/loss", 0.2, "min")), "final")
    acc = OptunaSearcher(_cell(trials=2, target=Target("valid/accuracy", 0.9, "max")), "final")
    assert (loss.direction, acc.direction) == ("minimize", "maximize")
    lo = [_outcome(make_spec(seed=s, optimizer_hparams={"step_size": 0.1, "b1": 0.9})) for s in (0, 1)]
    # loss: mean of 1.1 and 1.11; accuracy: mean of 0.90 and 0.901
    assert loss.objective_value(lo) == 1.105
    assert acc.objective_value(lo) == 0.9005
    # by: best reads best_valid_*
    for o, v in zip(lo, (0.2, 0.3), strict=True):
        o.best_valid_loss = v
    assert OptunaSearcher(loss.cell, "best").objective_value(lo) == 0.25
    # a whole search of 2 configurations: Optuna's best trial is ours, told with its direction
    for se in (loss, acc):
        _, seen = _run(se)
        study, order = se.study(seen)
        vals = [p.value for p in order]
        want = min(vals) if se is loss else max(vals)
        assert study.direction.name == se.direction.upper()
        assert study.best_value == want
        assert [t.value for t in study.trials] == vals
        best = se.describe(seen)["best"]
        assert best["value"] == want and best["k"] == vals.index(want)


@pytest.mark.parametrize("sampler", ["tpe", "cmaes"])
def test_loss_down_and_accuracy_up_are_the_same_search(sampler):
    """With one seed and the step size alone, the bowl's loss is a decreasing function of its
    accuracy (``loss = (0.95 - acc) / 0.05 + 0.1``); TPE and CMA-ES use only the ranks of the told
    values, so minimizing the loss and maximizing the accuracy propose the same points; maximizing
    the loss proposes others."""
    kw = dict(sampler=sampler, trials=20, seeds=(0,), dims=(LR,))
    by_loss = OptunaSearcher(_cell(target=Target("valid/loss", 0.2, "min"), **kw), "final")
    by_acc = OptunaSearcher(_cell(target=Target("valid/accuracy", 0.9, "max"), **kw), "final")
    _, seen_loss = _run(by_loss)
    _, seen_acc = _run(by_acc)
    points = _points(by_acc, seen_acc)  # (trial ids differ: the target is part of a trial)
    assert _points(by_loss, seen_loss) == points and len(points) == 20
    wrong = OptunaSearcher(_cell(target=Target("valid/loss", 0.2, "min"), **kw), "final")
    wrong.direction = "maximize"  # the loss told the wrong way: another search
    _, seen_wrong = _run(wrong)
    assert _points(wrong, seen_wrong) != points


def test_a_diverged_configuration_is_told_as_failed():
    se = OptunaSearcher(_cell(trials=3))
    first = se.propose({})
    seen = {first[0].trial_id: _outcome(first[0]), first[1].trial_id: _outcome(first[1], "diverged")}
    study, order = se.study(seen)
    assert order[0].state == "failed" and order[0].value is None
    assert study.trials[0].state.name == "FAIL"
    assert [p.state for p in order] == ["failed", "pending"]
    nxt = se.propose(seen)  # the search goes on
    assert len(nxt) == 2 and not {s.trial_id for s in nxt} & set(seen)
    d = se.describe(seen)
    assert d["failed"] == 1 and d["best"] is None and d["order"][0]["state"] == "failed"


def test_gp_without_torch_is_a_config_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # not importable, whether installed or not
    assert GP_NEEDS_TORCH == ("search.sampler: gp (Optuna's GPSampler) needs torch, which is not "
                              "installed: pip install torch (the CPU build is enough), or choose "
                              "sampler tpe, cmaes or random")
    with pytest.raises(ConfigError) as e:
        OptunaSearcher(_cell("gp"))
    assert str(e.value) == GP_NEEDS_TORCH


# ---------------------------------------------------------------------------------- real sweeps


def _config(tmp_path: Path, name: str = "opt") -> Path:
    cfg = {"name": name, "datasets": ["digits"], "seeds": [0], "batch_size": 64,
           "models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}],
           "optimizers": [{"name": "momentum", "hparams": {"step_size": {"log_uniform": [0.001, 1.0]}}}],
           "schedules": ["constant"], "budget": {"steps": 20}, "eval_every": 10,
           "measure_perf": False, "selection": {"by": "final"},
           "search": {"method": "optuna", "sampler": "tpe", "trials": 6, "seed": 0}}
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _search_json(uri: str, tmp_path: Path, name: str = "opt") -> list[dict]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    # the invocation that ended (a killed one's parent run stays RUNNING, without search.json)
    (parent,) = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'parent' and "
                                   "attributes.status = 'FINISHED'")
    path = client.download_artifacts(parent.info.run_id, "search.json", str(tmp_path))
    return json.loads(Path(path).read_text())


@pytest.mark.slow
def test_a_tpe_sweep_of_six_and_a_killed_one_propose_the_same(tmp_path):
    """Uninterrupted in one store; in another, SIGKILLed once 2 trials are FINISHED and run again:
    the same 6 configurations in the same order, each trial FINISHED once, the same search.json."""
    (tmp_path / "go.py").write_text(textwrap.dedent('''
        import sys
        from harness.orchestrate.run import run_sweep
        run_sweep(sys.argv[1], tracking_uri=sys.argv[2], quiet=True)
    '''))
    cfg = _config(tmp_path)
    env = with_hooks({**os.environ, "PYTHONPATH": os.getcwd()}, HARNESS_TEST_CHUNK_SLEEP_S="0.4")

    def go(db: Path) -> subprocess.Popen:
        return start_sweep([sys.executable, str(tmp_path / "go.py"), str(cfg), f"sqlite:///{db}"],
                           tmp_path, env)

    ref_db, killed_db = tmp_path / "ref.db", tmp_path / "k.db"
    ref = go(ref_db)
    n_at_kill = kill_when_finished(go(killed_db), killed_db, 2)
    assert 2 <= n_at_kill < 6
    again = go(killed_db)
    assert again.wait(timeout=600) == 0, again.stderr.read()
    assert ref.wait(timeout=600) == 0, ref.stderr.read()
    ref_ids, got = finished_ids(ref_db), finished_ids(killed_db)
    assert len(ref_ids) == 6 and len(set(ref_ids)) == 6
    assert got == ref_ids  # the same proposals in the same order
    assert Counter(got) == Counter({t: 1 for t in ref_ids})  # no trial FINISHED twice
    ref_search = _search_json(f"sqlite:///{ref_db}", tmp_path / "a")
    killed_search = _search_json(f"sqlite:///{killed_db}", tmp_path / "b")
    assert ref_search[0]["sampler"] == "tpe" and ref_search[0]["told"] == 6 and ref_search[0]["done"]
    assert [p["trial_ids"] for p in ref_search[0]["order"]] == [[t] for t in ref_ids]
    assert killed_search[0]["order"] == ref_search[0]["order"]
    assert killed_search[0]["best"] == ref_search[0]["best"]
