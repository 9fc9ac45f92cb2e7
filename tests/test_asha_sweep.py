"""Early stopping end to end: real ASHA sweeps (digits, a small MLP, 60 steps, rungs
at 10 and 30, SQLite), and what MLflow stored.

- some trials are stopped: their runs are FINISHED with tag ``status=stopped``, the stop step and
  reason, their rung values, and curves that end at the stop; every decision the store shows is
  the stop rule recomputed from the stored rung values (peers of smaller index, same group);
- the audit trial (a stopped configuration trained to the end, the plain trial id) is there;
- the summary and ``status`` count stopped trials apart; a re-run trains nothing;
- a sweep SIGKILLed three times (a real ``python`` subprocess: between a rung's result and its
  decision, with a trial in training, at a random moment; a checkpoint every 20 steps) and run
  again ends with the same trials, statuses and stop steps as an uninterrupted sweep, each trial
  FINISHED once, and no trial stopped before a kill ever run again.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from subproc import with_hooks
from sweep_store import kill_when_finished, start_sweep, trial_runs

import harness  # XLA's pool pinned as in every test process; harness.results
from harness.core.rungs import continues

RUNGS = (10, 30)


def _config(tmp_path: Path, name: str = "asha_e2e", **search) -> Path:
    cfg = {"name": name, "datasets": ["digits"], "seeds": [0], "batch_size": 64,
           "models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}],
           "optimizers": [{"name": "sgd", "hparams": {"step_size": {"log_uniform": [0.001, 1.0]}}}],
           "schedules": ["constant"], "budget": {"steps": 60}, "eval_every": 30, "steps_per_dispatch": 10,
           "target": {"metric": "valid/accuracy", "value": 0.9}, "measure_perf": False,
           "batching": "off", "checkpoint_every": 20, "selection": {"by": "final"},
           "search": {"method": "asha", "trials": 4, "seed": 0, "min_steps": 10, "eta": 3, "audit": 1,
                      **search}}
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _finished(db: Path) -> list[dict]:
    return [r for r in trial_runs(db) if r["status"] == "FINISHED"]


def _decisions(db: Path) -> dict[str, tuple[str, str | None]]:
    """trial id -> (status tag, stop step tag) of the FINISHED trial runs."""
    return {r["tags"]["harness.trial_id"]: (r["tags"]["status"], r["tags"].get("harness.stopped_at_step"))
            for r in _finished(db)}


def _check_rule(finished: list[dict]) -> int:
    """Every stored decision is the stop rule on the stored rung values; returns the decisions seen."""
    groups: dict[str, dict[int, dict]] = {}
    for r in finished:
        t = r["tags"]
        if "harness.rung_group" in t:
            groups.setdefault(t["harness.rung_group"], {})[int(t["harness.search_index"])] = t
    n = 0
    for members in groups.values():
        vals = {k: {int(s): v for s, v in json.loads(t.get("harness.rungs", "{}")).items()}
                for k, t in members.items()}
        for k, t in members.items():
            stop = t.get("harness.stopped_at_step")
            for r in sorted(vals[k]):
                peers = {j: v[r] for j, v in vals.items() if j < k and r in v}
                assert continues(vals[k][r], k, peers, 3, "max") == (str(r) != stop), (k, r, t)
                n += 1
            if stop is not None:
                assert max(vals[k]) == int(stop)  # no rung after the stop
    return n


def test_a_real_asha_sweep_stops_trials_and_mlflow_keeps_them(tmp_path, monkeypatch):
    import mlflow

    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    db = tmp_path / "m.db"
    uri = f"sqlite:///{db}"
    s = run_sweep(_config(tmp_path), tracking_uri=uri, quiet=True)
    c = s.counts()
    assert c["stopped"] >= 2 and c["finished"] >= 2 and c["failed"] == 0
    assert f"{c['stopped']} stopped early" in s.headline()
    fin = _finished(db)
    assert len(fin) == len(trial_runs(db)) == len(s.outcomes)  # every run FINISHED, one per trial
    client = mlflow.MlflowClient(uri)
    stopped = [r for r in fin if r["tags"]["status"] == "stopped"]
    assert len(stopped) == c["stopped"]
    for r in stopped:
        t, step = r["tags"], int(r["tags"]["harness.stopped_at_step"])
        assert step in RUNGS
        assert t["harness.stop_reason"].startswith(f"rung {step}: valid/accuracy ")
        assert sorted(int(k) for k in json.loads(t["harness.rungs"])) == [x for x in RUNGS if x <= step]
        hist = client.get_metric_history(r["run_id"], "valid/accuracy")
        assert [m.step for m in hist] == [0, 10, 30][:RUNGS.index(step) + 2]  # the curve ends there
        assert json.loads(t["harness.rungs"])[str(step)] == hist[-1].value
        assert max(m.step for m in client.get_metric_history(r["run_id"], "train/loss")) == step
        assert client.get_metric_history(r["run_id"], "test/accuracy") == []  # no test at a stop
    assert _check_rule(fin) >= len(fin)
    # the audit: the first stopped trial (in index order) trained to the end under its plain id
    audit = [r for r in fin if "harness.audit_of" in r["tags"]]
    assert len(audit) == 1 and audit[0]["tags"]["status"] == "finished"
    twin = next(r for r in fin if r["tags"]["harness.trial_id"] == audit[0]["tags"]["harness.audit_of"])
    assert twin["tags"]["status"] == "stopped"
    first_stopped = min(stopped, key=lambda r: int(r["tags"]["harness.search_index"]))
    assert twin is first_stopped
    assert [m.step for m in client.get_metric_history(audit[0]["run_id"], "valid/accuracy")] == [0, 30, 60]
    # search.json: the steps the ASHA trials spent reached the budget (4 x 60) within one trial
    exp = client.get_experiment_by_name("asha_e2e")
    parent = client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'parent'")[0]
    d = json.loads(Path(client.download_artifacts(parent.info.run_id, "search.json", str(tmp_path)))
                   .read_text())[0]
    spent = sum(int(r["tags"].get("harness.stopped_at_step") or 60) for r in fin
                if "harness.rung_group" in r["tags"])
    assert d["steps_spent"] == spent and 240 <= spent < 300 and d["audit_steps"] == 60
    assert d["stopped"] == c["stopped"] and len(d["audits"]) == 1
    assert sum(r["stopped"] for r in d["brackets"][0]["rungs"]) == c["stopped"]
    # status counts them apart
    from typer.testing import CliRunner

    from harness.cli import app

    out = CliRunner().invoke(app, ["status", "--tracking-uri", uri], terminal_width=250)
    assert out.exit_code == 0, out.output
    # one sweep: its fields one a line ("stopped (early): 3"), as a narrow terminal shows them
    cells = dict(line.strip().split(": ", 1) for line in out.output.splitlines()[2:] if ": " in line)
    assert cells["stopped (early)"] == str(c["stopped"]) and cells["finished"] == str(c["finished"])
    assert cells["pending"] == "0" and cells["trials"] == str(len(fin))
    # a re-run trains nothing
    again = run_sweep(_config(tmp_path), tracking_uri=uri, quiet=True)
    assert all(o.skipped for o in again.outcomes) and len(trial_runs(db)) == len(fin)
    assert again.counts()["stopped"] == c["stopped"]
    _check_a_worker_gate_reads_the_store(tmp_path, uri, fin)


def _check_a_worker_gate_reads_the_store(tmp_path: Path, uri: str, fin: list[dict]) -> None:
    """A worker's gate (``--jobs N``: a copy of the board without any rung value), and the sweep's
    own gate whose board lacks them, read the peers' values from the store: on the finished sweep
    each takes every decision the sweep took."""
    import dataclasses
    import pickle

    import mlflow

    from harness.config.load import load_config
    from harness.core.context import RunContext
    from harness.execute.rung_gate import gate_for
    from harness.orchestrate.searchers import SweepSearch
    from harness.plan.expansion import expand

    search = SweepSearch(expand(load_config(_config(tmp_path))), "final")
    asha = search.searchers[0]
    by_index = {int(r["tags"]["harness.search_index"]): r["tags"] for r in fin
                if "harness.rung_group" in r["tags"]}
    specs = {k: asha.trials_of(k)[0] for k in by_index}  # registers every trial on the board
    copy = pickle.loads(pickle.dumps(asha.board))
    copy.values.clear()
    assert not copy.live
    # the sweep's own (live) board without the values of peers another invocation trained at the
    # same time (its claims made this one skip them): read from the store too. Before, a live
    # board never read the store, and such a trial was never stopped.
    asha.board.values.clear()
    assert asha.board.live
    exp = mlflow.MlflowClient(uri).get_experiment_by_name("asha_e2e")
    for board in (copy, asha.board):
        ctx = dataclasses.replace(RunContext(uri, exp.experiment_id, "", "", "asha_e2e"), rung_board=board)
        gate = gate_for(ctx)
        n = 0
        for k, t in sorted(by_index.items()):
            assert specs[k].trial_id == t["harness.trial_id"]
            for r, v in sorted((int(a), b) for a, b in json.loads(t["harness.rungs"]).items()):
                why = gate(specs[k], r, v)
                assert (why is not None) == (t.get("harness.stopped_at_step") == str(r))
                if why is not None:
                    assert why == t["harness.stop_reason"]
                n += 1
        assert n >= len(by_index)


@pytest.mark.slow
def test_a_sweep_killed_mid_training_makes_the_same_decisions(tmp_path):
    """Uninterrupted in one store; in another, SIGKILLed three times: between a rung's result and
    its decision (the gate's test pause), after 5 FINISHED trials (a trial training: 0.15 s per
    10-step chunk) and at a random moment of a run (seeded), then run to the end: the same trials,
    statuses and stop steps; each trial FINISHED once; a trial stopped before a kill has no other run."""
    (tmp_path / "go.py").write_text(textwrap.dedent('''
        import sys
        from harness.orchestrate.run import run_sweep
        run_sweep(sys.argv[1], tracking_uri=sys.argv[2], quiet=True)
    '''))
    cfg = _config(tmp_path)
    env = with_hooks({**os.environ, "PYTHONPATH": os.getcwd()}, HARNESS_TEST_CHUNK_SLEEP_S="0.15")

    def go(db: Path, **extra: str) -> subprocess.Popen:
        return start_sweep([sys.executable, str(tmp_path / "go.py"), str(cfg), f"sqlite:///{db}"],
                           tmp_path, {**env, **extra})

    ref_db, db = tmp_path / "ref.db", tmp_path / "k.db"
    ref = go(ref_db)
    assert ref.wait(timeout=600) == 0, ref.stderr.read()
    stopped_before: set[str] = set()
    # 1: inside the 3rd rung decision (its value computed, nothing decided: the gate waits 0.5 s)
    pause = tmp_path / "pause"
    pause.mkdir()
    p = go(db, HARNESS_TEST_GATE_PAUSE_DIR=str(pause))
    t0 = time.time()
    while len(list(pause.iterdir())) < 3 and time.time() - t0 < 300:
        assert p.poll() is None, p.stderr.read()
        time.sleep(0.02)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=30)
    stopped_before |= {t for t, (st, _) in _decisions(db).items() if st == "stopped"}
    # 2: once 5 trials are FINISHED (one training); 3: at a random moment (seeded) of a run
    assert kill_when_finished(go(db), db, 5) < len(_finished(ref_db))  # killed before the end
    stopped_before |= {t for t, (st, _) in _decisions(db).items() if st == "stopped"}
    p = go(db)
    time.sleep(random.Random(34).uniform(1.0, 6.0))
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=30)
    stopped_before |= {t for t, (st, _) in _decisions(db).items() if st == "stopped"}
    again = go(db)
    assert again.wait(timeout=600) == 0, again.stderr.read()
    assert _decisions(db) == _decisions(ref_db)
    assert any(st == "stopped" for st, _ in _decisions(db).values())
    per_trial = Counter(r["tags"]["harness.trial_id"] for r in _finished(db))
    assert set(per_trial.values()) == {1}  # nothing FINISHED twice
    every = Counter(r["tags"]["harness.trial_id"] for r in trial_runs(db))
    assert stopped_before and all(every[t] == 1 for t in stopped_before)  # never run again
    assert _check_rule(_finished(db)) > 0


def test_a_real_hyperband_sweep_with_two_seeds(tmp_path, monkeypatch):
    """hyperband, 2 seeds: configurations go round-robin to brackets 0 (rungs 10, 30), 1 (rung 30)
    and 2 (no rung); each (bracket, seed) is its own peer group; every stored decision is the rule."""
    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    db = tmp_path / "m.db"
    cfg = _config(tmp_path, name="hb", method="hyperband", audit=0)
    data = yaml.safe_load(cfg.read_text())
    data["seeds"] = [0, 1]
    data["search"]["trials"] = 3
    cfg.write_text(yaml.safe_dump(data))
    s = run_sweep(cfg, tracking_uri=f"sqlite:///{db}", quiet=True)
    fin = _finished(db)
    assert len(fin) == len(s.outcomes) and s.counts()["failed"] == 0
    tags = [r["tags"] for r in fin]
    for t in tags:
        k, b = int(t["harness.search_index"]), int(t["harness.bracket"])
        assert b == k % 3 and t["harness.rung_group"].endswith(f"bracket {b} | seed {t['seed']}")
        rungs = sorted(int(x) for x in json.loads(t.get("harness.rungs", "{}")))
        stop = t.get("harness.stopped_at_step")
        assert rungs == [r for r in [(10, 30), (30,), ()][b] if stop is None or r <= int(stop)]
        if b == 2:
            assert t["status"] == "finished"  # no rung: never stopped
    assert {t["seed"] for t in tags} == {"0", "1"}
    assert _check_rule(fin) > 0
    # budget 3 configurations x 2 seeds x 60 steps = 360: spent reaches it within one configuration
    spent = sum(int(t.get("harness.stopped_at_step") or 60) for t in tags)
    assert 360 <= spent < 360 + 120


def test_asha_stops_the_trials_a_full_run_ranks_last(tmp_path, monkeypatch):
    """The answer known: the same configurations (the sequence is prefix-stable) trained to the end
    by a quasi-random sweep rank them; every configuration in the bottom third of that ranking (but
    configuration 0, which has no earlier peer and always goes on) was stopped by ASHA at its first
    rung (sgd from 0.001 to 1 on digits: the small step sizes have learnt little at step 10)."""
    import mlflow

    from harness.orchestrate.run import run_sweep

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/m.db"
    run_sweep(_config(tmp_path, audit=0), tracking_uri=uri, quiet=True)
    client = mlflow.MlflowClient(uri)

    def trials(name: str) -> list:
        e = client.get_experiment_by_name(name)
        return client.search_runs([e.experiment_id], "tags.`harness.kind` = 'trial'", max_results=1000)

    asha = {r.data.params["optimizer.step_size"]: r.data.tags for r in trials("asha_e2e")}
    n = len(asha)
    full_cfg = _config(tmp_path, name="full")
    data = yaml.safe_load(full_cfg.read_text())
    data["search"] = {"method": "quasirandom", "trials": n, "seed": 0}
    full_cfg.write_text(yaml.safe_dump(data))
    run_sweep(full_cfg, tracking_uri=uri, quiet=True)
    full = {r.data.params["optimizer.step_size"]: r.data.metrics["final/valid_accuracy"]
            for r in trials("full")}
    assert set(full) == set(asha)  # the same n configurations
    ranked = sorted(full, key=full.get)
    worst = [lr for lr in ranked[:n // 3] if asha[lr]["harness.search_index"] != "0"]
    assert worst
    assert all(asha[lr]["status"] == "stopped" and asha[lr]["harness.stopped_at_step"] == "10"
               for lr in worst)


def test_an_audit_trial_competes_in_the_selection_as_its_twins_seed(tmp_path, monkeypatch):
    """audit: 1 trains a stopped configuration to the end: it then competes like any fully trained
    configuration, standing for its stopped twin's seed (not one more seed), in the summary and the
    report alike; where it beats early stopping's pick, it is selected and both say what early
    stopping alone would have picked."""
    from harness.orchestrate.run import run_sweep
    from harness.orchestrate.summary import audit_changes, best_configs
    from reports.frame import summaries
    from reports.selection import audit_changes as report_changes
    from reports.selection import best_configs as report_best
    from reports.selection import select_best
    from reports.stats import run_scores

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/m.db"
    cfg = yaml.safe_load((Path(__file__).parents[1] / "experiments" / "asha.yaml").read_text())
    cfg["optimizers"] = [o for o in cfg["optimizers"] if o["name"] == "sgd"]  # the review's case
    cfg["name"] = "asha_e2e"
    (tmp_path / "asha.yaml").write_text(yaml.safe_dump(cfg))
    s = run_sweep(tmp_path / "asha.yaml", tracking_uri=uri, quiet=True)
    audits = [o for o in s.outcomes if o.audit_of]
    assert len(audits) == 2 and all(a.status == "finished" for a in audits)
    audit = max(audits, key=lambda o: o.final_valid_accuracy)
    twin = next(o for o in s.outcomes if o.trial_id == audit.audit_of)
    assert twin.status == "stopped"
    full = {o.config: o.final_valid_accuracy for o in s.outcomes if o.status == "finished"}
    early = {o.config: v for o in s.outcomes if o.status == "finished" and not o.audit_of
             for v in [o.final_valid_accuracy]}
    (row,) = best_configs(s.outcomes, "final")
    (alone,) = best_configs(s.outcomes, "final", audits=False)
    assert row["config"] == max(full, key=full.get) and alone["config"] == max(early, key=early.get)
    assert row["n"] == 1  # the audit stands for its twin's seed
    assert full[audit.config] > max(early.values())  # this search stopped its best configuration
    assert row["config"] == audit.config != alone["config"]
    line = (f"sgd (mlp · digits): {audit.config}, trained to the end by an audit, is selected; early "
            f"stopping alone picked {alone['config']}")
    assert audit_changes(s.outcomes, "final") == [line]
    frame = harness.results("asha_e2e", tracking_uri=uri).frame
    sm = summaries(frame)
    (audit_cid,) = sm.loc[sm["trial_id"] == audit.trial_id, "config_id"]
    best = report_best(frame)
    assert list(best["config_id"]) == [audit_cid] and list(best["n_seeds"]) == [1]
    (said,) = report_changes(frame)
    # across tasks, the audited configuration is one run (the audit), not also its stopped twin at 0
    (sgd_runs,) = run_scores(frame).runs["sgd"].values()
    assert len(sgd_runs) == 1 and sgd_runs[0] > 0.9
    assert said.endswith(f"early stopping alone picked {select_best(frame, audits=False)['config'].iloc[0]}")
    again = run_sweep(tmp_path / "asha.yaml", tracking_uri=uri, quiet=True)  # read back from the store
    assert {o.audit_of for o in again.outcomes if o.audit_of} == {a.audit_of for a in audits}


def test_status_of_a_killed_asha_sweep_counts_every_trial_it_ran_and_says_the_search_is_not_over(tmp_path):
    """``status`` counted the trials of the parent run's ``trials.json``, which an adaptive sweep
    rewrites now and then with its proposals so far: a killed ASHA sweep showed ``trials: 16 ...
    pending: 0`` with 47 trials in the store (found by an attack). Now the trials that ran under
    the sweep id count, and while the search may still propose trials its pending count is "?"."""
    db = tmp_path / "k.db"
    cfg = _config(tmp_path, name="asha_status")
    env = with_hooks({**os.environ, "PYTHONPATH": os.getcwd()}, HARNESS_TEST_CHUNK_SLEEP_S="0.05")
    p = start_sweep([sys.executable, "-m", "harness", "sweep", str(cfg), "--tracking-uri", f"sqlite:///{db}"],
                    tmp_path, env)
    n = kill_when_finished(p, db, 6)  # past the 4 configurations the first list holds
    assert n >= 6
    out = subprocess.run([sys.executable, "-m", "harness", "status", "--tracking-uri", f"sqlite:///{db}"],
                         cwd=tmp_path, env={**env, "COLUMNS": "250"}, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if "asha_status" in line)
    cells = [c.strip() for c in row.split("│") if c.strip()]
    trials, finished, stopped = int(cells[2]), int(cells[3]), int(cells[6])
    assert trials >= n and finished + stopped == n, (n, row)
    assert cells[7] == "? (search not over)", row


def test_status_of_a_finished_coordinate_descent_sweep_counts_what_it_trained(tmp_path):
    """A coordinate descent's parent records its grid (15 configurations here) as ``n_trials``, the
    most it could train: ``status`` showed the grid as its trials and the configurations it never
    needed as pending (84 trials, 48 pending for experiments/coordinate_descent.yaml: the review's
    F1). Now a finished adaptive sweep's trials are those it proposed, pending 0; and ``status
    CONFIG`` finds the sweep under the id the sweep used (it computed another, and called the real
    one superseded: F5)."""
    from harness.orchestrate.run import run_sweep

    cfg = {"name": "cd_status", "datasets": ["digits"], "seeds": [0], "batch_size": 64,
           "models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}],
           "optimizers": [{"name": "momentum", "hparams": {"step_size": [0.01, 0.03, 0.1, 0.3, 1.0],
                                                           "mass": [0.5, 0.9, 0.99]}}],
           "schedules": ["constant"], "budget": {"steps": 20}, "eval_every": 10, "measure_perf": False,
           "batching": "off", "search": {"method": "coordinate_descent", "passes": 1}}
    path = tmp_path / "cd.yaml"
    path.write_text(yaml.safe_dump(cfg))
    uri = f"sqlite:///{tmp_path}/m.db"
    s = run_sweep(path, tracking_uri=uri, quiet=True)
    trained = len(s.outcomes)
    assert trained < 15
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "COLUMNS": "250"}
    for extra in ([], [str(path)]):
        out = subprocess.run([sys.executable, "-m", "harness", "status", *extra, "--tracking-uri", uri],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        rows = [line for line in out.stdout.splitlines() if "cd_status" in line]
        assert len(rows) == 1, out.stdout  # no second, phantom sweep id
        cells = [c.strip() for c in rows[0].split("│") if c.strip()]
        assert cells[1] == s.sweep_id and int(cells[2]) == trained and cells[6] == "0", rows[0]
