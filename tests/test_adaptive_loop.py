"""The adaptive sweep's loop: :mod:`harness.orchestrate.adaptive` on the seam of
:mod:`harness.orchestrate.searchers`, driven by a small data-dependent searcher registered for the test.

Checked on real sweeps (digits, a small MLP, 10 steps, SQLite): a fixed config is not adaptive and
keeps its trials; the rounds train what the searcher proposes, one round at a time, under one parent
run whose ``search.json`` and ``trials.json`` say what was proposed; a re-run trains nothing;
``only`` never loops forever; and a sweep SIGKILLed between rounds (a real ``python`` subprocess)
re-runs to exactly the trials and order of an uninterrupted sweep, each trial FINISHED once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from subproc import with_hooks
from sweep_store import finished_ids, kill_when_finished, start_sweep

import harness  # XLA's pool pinned as in every test process; harness.results
from harness.config.load import load_config
from harness.orchestrate import searchers
from harness.orchestrate.searchers import FixedSearcher, Searcher, searcher_for
from harness.plan.expansion import expand

#: The test's searcher, in a file so that a subprocess can register it too.
CHAIN = textwrap.dedent('''
    from harness.orchestrate import searchers
    from harness.orchestrate.searchers import Searcher

    class Chain(Searcher):
        """Proposes one candidate at a time; the next is chosen from the last result (its valid
        accuracy's 4th decimal), so the path depends on what was trained; stops after 4."""
        method = "optuna"

        def path(self, seen):
            out, i = [], 0
            trials = self.cell.trials
            while len(out) < 4:
                s = trials[i % len(trials)]
                if s.trial_id in [t.trial_id for t in out]:
                    i += 1
                    continue
                out.append(s)
                o = seen.get(s.trial_id)
                if o is None:
                    return out, False
                acc = o.final_valid_accuracy or 0.0
                i = int(round(acc * 10000)) % len(trials)
            return out, True

        def propose(self, seen):
            out, _ = self.path(seen)
            return [s for s in out if s.trial_id not in seen][:1]

        def describe(self, seen):
            out, done = self.path(seen)
            return {**super().describe(seen), "path": [s.trial_id for s in out], "done": done}

    searchers._REGISTRY["optuna"] = Chain
''')


def _config(tmp_path: Path, name: str = "loop") -> Path:
    cfg = {"name": name, "datasets": ["digits"], "seeds": [0], "batch_size": 64,
           "models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}],
           "optimizers": [{"name": "momentum", "hparams": {"step_size": {"log_uniform": [0.01, 1.0]}}}],
           "schedules": ["constant"], "budget": {"steps": 10}, "eval_every": 5,
           "measure_perf": False, "search": {"method": "optuna", "trials": 8}}
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


@pytest.fixture
def chain(tmp_path, monkeypatch):
    (tmp_path / "chain_searcher.py").write_text(CHAIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    # The real searcher is registered, and recorded for the undo, before the file's import
    # overwrites it: recorded after, the undo would leave Chain as "optuna" for the next tests.
    monkeypatch.setitem(searchers._REGISTRY, "optuna", searchers.searcher_class("optuna"))
    import chain_searcher
    importlib.reload(chain_searcher)
    return chain_searcher.Chain


def test_a_fixed_config_is_not_adaptive_and_keeps_its_trials():
    cfg = load_config("experiments/quickstart.yaml")
    whole = expand(cfg)
    search = searcher_for(whole, cfg.selection.by)
    assert not search.adaptive
    assert all(isinstance(s, FixedSearcher) for s in search.searchers)
    assert [s.trial_id for s in search.candidates()] == [s.trial_id for s in whole]
    assert [s.trial_id for s in search.propose({})] == [s.trial_id for s in whole]


def test_rounds_train_what_the_searcher_proposes_and_log_it(tmp_path, chain):
    from mlflow.tracking import MlflowClient

    from harness.orchestrate.run import run_sweep

    uri = f"sqlite:///{tmp_path}/m.db"
    seen_order: list[str] = []
    observe = chain.observe
    chain.observe = lambda self, o: (seen_order.append(o.trial_id), observe(self, o))[-1]
    try:
        s = run_sweep(_config(tmp_path), tracking_uri=uri, quiet=True)
    finally:
        chain.observe = observe
    ids = [o.trial_id for o in s.outcomes]
    assert len(ids) == 4 and len(set(ids)) == 4
    assert seen_order == ids  # observed as each arrived, in training order
    assert finished_ids(tmp_path / "m.db") == ids  # one FINISHED run each, trained round by round
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("loop")
    parents = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'parent'")
    assert len(parents) == 1  # one parent run for every round
    rid = parents[0].info.run_id
    described = json.loads(Path(client.download_artifacts(rid, "search.json", str(tmp_path))).read_text())
    assert described[0]["path"] == ids and described[0]["done"] is True
    assert described[0]["method"] == "optuna" and described[0]["trials"] == 4
    listed = json.loads(Path(client.download_artifacts(rid, "trials.json", str(tmp_path))).read_text())
    assert [t["trial_id"] for t in listed] == ids
    # a re-run: every proposal is in the store, nothing is trained and no parent run is made
    again = run_sweep(_config(tmp_path), tracking_uri=uri, quiet=True)
    assert [o.trial_id for o in again.outcomes] == ids and all(o.skipped for o in again.outcomes)
    assert again.search[0]["path"] == ids  # the summary of a re-run still describes the search
    assert len(client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'parent'")) == 1


def test_only_cannot_make_the_loop_spin(tmp_path, chain):
    """``only`` leaves the searcher's proposal out: the round is empty, the search stops there."""
    from harness.orchestrate.run import run_sweep

    s = run_sweep(_config(tmp_path), tracking_uri=f"sqlite:///{tmp_path}/m.db", quiet=True,
                  only={"seed": "0", "optimizer": "momentum"})
    assert len(s.outcomes) == 4
    with pytest.raises(Exception, match="only: seed=1: no trial"):
        run_sweep(_config(tmp_path), tracking_uri=f"sqlite:///{tmp_path}/m.db", quiet=True,
                  only={"seed": "1"})


def test_a_searcher_that_proposes_what_it_saw_ends(tmp_path, monkeypatch):
    """Proposals already in ``seen`` are dropped: a searcher that keeps returning them ends."""
    from harness.orchestrate.run import run_sweep

    class Stubborn(Searcher):
        method = "optuna"

        def propose(self, seen):
            return list(self.cell.trials[:2])

    monkeypatch.setitem(searchers._REGISTRY, "optuna", Stubborn)
    s = run_sweep(_config(tmp_path), tracking_uri=f"sqlite:///{tmp_path}/m.db", quiet=True)
    assert len(s.outcomes) == 2


@pytest.mark.slow
def test_a_sweep_killed_between_rounds_replays_the_same_path(tmp_path):
    """Uninterrupted in one store; in another, SIGKILLed once two trials are FINISHED and run again:
    the same trials in the same order, each FINISHED once."""
    (tmp_path / "chain_searcher.py").write_text(CHAIN)
    (tmp_path / "go.py").write_text(textwrap.dedent('''
        import sys
        import chain_searcher  # registers the searcher
        from harness.orchestrate.run import run_sweep
        run_sweep(sys.argv[1], tracking_uri=sys.argv[2], quiet=True)
    '''))
    cfg = _config(tmp_path)
    env = with_hooks({**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()])},
                     HARNESS_TEST_CHUNK_SLEEP_S="0.4")

    def go(db: str) -> subprocess.Popen:
        return start_sweep([sys.executable, str(tmp_path / "go.py"), str(cfg), f"sqlite:///{db}"],
                           tmp_path, env)

    ref = go(str(tmp_path / "ref.db"))
    killed_db = tmp_path / "k.db"
    n_at_kill = kill_when_finished(go(str(killed_db)), killed_db, 2)
    assert 2 <= n_at_kill < 4
    again = go(str(killed_db))
    assert again.wait(timeout=600) == 0, again.stderr.read()
    assert ref.wait(timeout=600) == 0, ref.stderr.read()
    ref_ids = finished_ids(tmp_path / "ref.db")
    got = finished_ids(killed_db)
    assert len(ref_ids) == 4
    assert got == ref_ids  # the same path, and no trial FINISHED twice


def test_a_trial_the_expansion_did_not_make_is_tagged_with_its_method(tmp_path, monkeypatch):
    """A searcher's own point (Cell.make: step size 0.123, not one of the sequence's) trains, and
    its run carries the tag harness.search of its cell's method, as the candidates' do."""
    from mlflow.tracking import MlflowClient

    from harness.orchestrate.run import run_sweep

    class Maker(Searcher):
        method = "optuna"

        def propose(self, seen):
            return [self.cell.make({"optimizer.step_size": 0.123}, self.cell.seeds[0])]

    monkeypatch.setitem(searchers._REGISTRY, "optuna", Maker)
    uri = f"sqlite:///{tmp_path}/m.db"
    s = run_sweep(_config(tmp_path), tracking_uri=uri, quiet=True)
    assert len(s.outcomes) == 1 and s.outcomes[0].status == "finished"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("loop")
    (run,) = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'trial'")
    assert run.data.params["optimizer.step_size"] == "0.123"
    assert run.data.tags["harness.search"] == "optuna"
    assert "harness.search_index" not in run.data.tags  # not a point of the sequence


def test_tuning_against_compute_follows_the_searchs_own_path(tmp_path, chain):
    """The report's compute axis: for an adaptive search, its trials in the order they
    ended, 10 steps each added up, the best final validation accuracy so far."""
    from harness.orchestrate.run import run_sweep
    from reports.compute_curves import compute_curves
    from reports.figures import FIGURES

    uri = f"sqlite:///{tmp_path}/m.db"
    s = run_sweep(_config(tmp_path), tracking_uri=uri, quiet=True)
    accs = [o.final_valid_accuracy for o in s.outcomes]
    frame = harness.results("loop", tracking_uri=uri).frame
    cc = compute_curves(frame)
    assert list(cc["kind"]) == ["path"] * 4 and list(cc["method"]) == ["optuna"] * 4
    assert list(cc["steps"]) == [10.0, 20.0, 30.0, 40.0]
    best = [max(accs[: i + 1]) for i in range(4)]
    assert cc["valid"].tolist() == pytest.approx(best, abs=1e-12)
    spec = next(f for f in FIGURES if f.key == "tuning_compute")
    fig = spec.build(frame)
    assert fig is not None and fig.axes[0].get_xscale() == "log"
    fig.canvas.draw()
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    shown = {t.get_text() for t in ax.get_xticklabels() if t.get_text() and lo <= t.get_position()[0] <= hi}
    assert {"10", "20"} <= shown, shown  # 1, 2, 5 of a decade on a narrow axis (it showed one tick)


def test_steps_to_reach_the_value_every_method_reached_by_hand():
    """Hand-made curves: momentum's three methods end at 0.90, 0.95 and 0.93, so the common value
    is 0.90; asha reaches it at 30 steps (0.92 there), coordinate descent at 40, the fixed plan at
    its last point, 60. A loss (mode min) takes the largest final instead. An optimizer tuned one
    way has no row."""
    import pandas as pd

    from reports.compute_curves import COLUMNS, steps_to_reach

    def rows(opt, method, pts, mode="max"):
        return [{"task": "t", "optimizer": opt, "method": method, "kind": "path", "steps": s,
                 "valid": v, "metric": "m", "mode": mode} for s, v in pts]

    cc = pd.DataFrame(rows("momentum", "quasirandom", [(20, 0.5), (40, 0.8), (60, 0.9)])
                      + rows("momentum", "asha", [(10, 0.6), (30, 0.92), (70, 0.95)])
                      + rows("momentum", "coordinate_descent", [(20, 0.7), (40, 0.91), (80, 0.93)])
                      + rows("adam", "quasirandom", [(10, 0.9)])
                      + rows("lossy", "asha", [(10, 2.0), (20, 1.0)], "min")
                      + rows("lossy", "quasirandom", [(30, 1.5), (90, 1.2)], "min"), columns=COLUMNS)
    t = steps_to_reach(cc)
    assert t[["optimizer", "method", "value", "steps", "final"]].values.tolist() == [
        ["lossy", "asha", 1.2, 20.0, 1.0], ["lossy", "quasirandom", 1.2, 90.0, 1.2],
        ["momentum", "asha", 0.9, 30.0, 0.95], ["momentum", "coordinate_descent", 0.9, 40.0, 0.93],
        ["momentum", "quasirandom", 0.9, 60.0, 0.9]]


def test_one_optimizer_tuned_by_two_methods_gets_a_curve_each(tmp_path, chain):
    """``experiments/adaptive.yaml``'s shape: momentum tuned by a quasi-random plan (4
    configurations) and by an adaptive search (the chain, as ``optuna``, 4 trials) in one sweep.
    Each method is its own curve: the path over the search's trials, the fixed plan's expectation
    over its own 4 configurations only (k = 4: their best), and the caption says the steps each
    spent to the value both reached; the figure has momentum's panel with a line per method."""
    from harness.orchestrate.run import run_sweep
    from reports.compute_curves import compute_curves, reach_words, steps_to_reach
    from reports.figures import FIGURES

    p = _config(tmp_path, "two")
    cfg = yaml.safe_load(p.read_text())
    hp = cfg["optimizers"][0]["hparams"]
    cfg["optimizers"] = [{"name": "momentum", "hparams": hp,
                          "search": {"method": "quasirandom", "trials": 4, "seed": 0}},
                         {"name": "momentum", "hparams": hp, "search": {"seed": 1}}]
    p.write_text(yaml.safe_dump(cfg))
    uri = f"sqlite:///{tmp_path}/m.db"
    s = run_sweep(p, tracking_uri=uri, quiet=True)
    frame = harness.results("two", tracking_uri=uri).frame
    search = dict(zip(frame["trial_id"], frame["search"], strict=False))
    acc = {o.trial_id: o.final_valid_accuracy for o in s.outcomes}
    fixed = [a for t, a in acc.items() if search[t] == "quasirandom"]
    chained = [a for t, a in acc.items() if search[t] == "optuna"]
    assert len(fixed) == 4 and len(chained) == 4
    cc = compute_curves(frame)
    q, o = cc[cc["method"] == "quasirandom"], cc[cc["method"] == "optuna"]
    assert list(q["kind"]) == ["expected"] * 4 and list(q["steps"]) == [10.0, 20.0, 30.0, 40.0]
    assert q["valid"].iloc[-1] == pytest.approx(max(fixed), abs=1e-12)  # its own best, not the chain's
    assert list(o["kind"]) == ["path"] * 4 and o["valid"].iloc[-1] == pytest.approx(max(chained), abs=1e-12)
    t = steps_to_reach(cc)
    common = min(max(fixed), max(chained))
    assert t["value"].tolist() == pytest.approx([common] * 2, abs=1e-12)
    for r in t.itertuples():
        curve = cc[cc["method"] == r.method]
        assert r.steps == curve[curve["valid"] >= common]["steps"].min()
    words = reach_words(frame)
    assert words.startswith(" Training steps each method spent until it first reached the best value that "
                            f"every method of the optimizer reached: momentum ({common:.4g}): ")
    spec = next(f for f in FIGURES if f.key == "tuning_compute")
    assert spec.caption(frame).endswith(words)
    fig = spec.build(frame)
    ax = fig.axes[0]
    assert ax.get_title().endswith(": momentum")
    assert sorted((ln.get_label(), ln.get_linestyle()) for ln in ax.get_lines()) == [
        ("momentum (optuna)", ":"), ("momentum (quasirandom)", "--")]


def test_experiments_adaptive_tunes_each_optimizer_three_ways_on_one_budget():
    """``experiments/adaptive.yaml``: 4 optimizers on one task, each a cell of each of
    quasi-random search, ASHA and coordinate descent, every cell with the same compute (16 x 90
    steps) and ASHA's configurations not the quasi-random ones (another search seed)."""
    from harness.plan.cells import cells_of

    trials = expand(load_config(Path(__file__).resolve().parents[1] / "experiments" / "adaptive.yaml"))
    cells = cells_of(trials)
    methods = ["quasirandom", "asha", "coordinate_descent"]
    assert [(c.optimizer, c.search.method) for c in cells] == [
        (o, m) for o in ("momentum", "nesterov", "adam", "adamw") for m in methods]
    assert {(c.search.trials, c.trials[0].steps) for c in cells} == {(16, 90)}
    by = {(c.optimizer, c.search.method): {s.optimizer_hparams for s in c.trials} for c in cells}
    assert all(not by[(o, "quasirandom")] & by[(o, "asha")] for o in ("momentum", "adam"))
