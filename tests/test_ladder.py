"""Model-size ladders in the config: ``ladder:`` → ordinary trials per rung.

Checked: the parameter count against the transformer_lm's closed form, steps per rung from the
tokens-per-parameter ratio, μP-style and fixed transfer, the refusals, the run tags, the dry run's
ladder table (a real CLI subprocess), and that a SIGKILLed ladder resumes without retraining a
rung that finished (a real ``python -m harness sweep`` subprocess, killed while its second rung
trains).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from subproc import with_hooks

import harness  # XLA's pool pinned as in every test process; harness.sweep
from harness.config.errors import ConfigError
from harness.config.load import load_config, parse_config
from harness.core import ladder as lt
from harness.plan.expansion import expand, search_tags

T, V = 32, 16  # markov_lm's default window and vocabulary


def transformer_params(w: int, d: int, mlp: int = 4) -> int:
    """transformer_lm's parameters by hand: token and position tables, per block two LayerNorms,
    q/k/v/out projections with biases and the MLP with biases, the final LayerNorm and the head."""
    block = 2 * w + (4 * w * w + 4 * w) + 2 * w + (w * mlp * w + mlp * w + mlp * w * w + w)
    return V * w + T * w + d * block + 2 * w + (w * V + V)


def cfg_of(**ladder) -> dict:
    base = {"workload": "markov_lm_transformer",
            "sizes": [{"width": 8, "depth": 1, "num_heads": 2}, {"width": 16, "depth": 2, "num_heads": 2}],
            "tokens_per_param": [2, 8], "baseline": "adamw"}
    return {"name": "ladder_test", "seeds": [0, 1], "batch_size": 16, "measure_perf": False,
            "optimizers": [{"name": "adamw", "hparams": {"step_size": [0.003, 0.01]}},
                           {"name": "lion", "hparams": {"step_size": 0.001}}],
            "ladder": {**base, **ladder}}


def test_rungs_expand_to_trials_with_counted_steps_and_tags():
    cfg = parse_config(cfg_of(transfer={"lion": {"rule": "mup", "base_width": 8}}))
    trials = expand(cfg)
    rungs = {}
    for s in trials:
        r = trials.origins[s.trial_id].ladder
        rungs.setdefault((r.index, r.tokens_per_param), []).append(s)
    assert list(rungs) == [(0, 2.0), (0, 8.0), (1, 2.0), (1, 8.0)]
    for (i, ratio), specs in rungs.items():
        w, d = (8, 1) if i == 0 else (16, 2)
        n = transformer_params(w, d)
        r = trials.origins[specs[0].trial_id].ladder
        assert r.params == n  # 2,304 and 11,616
        assert r.steps == max(1, round(ratio * n / (16 * T))) and r.tokens == r.steps * 16 * T
        assert r.epochs == pytest.approx(r.tokens / (16384 * T))
        assert r.task.endswith(f"{ratio:g} tokens/param") and f"width={w}" in r.task
        assert len(specs) == 6  # adamw 2 step sizes x 2 seeds, lion 1 x 2 seeds
        for s in specs:
            assert s.steps == r.steps and s.eval_every == max(1, r.steps // 10)
            assert s.hparams("model")["width"] == w and s.workload == "markov_lm_transformer"
            lr = s.hparams("optimizer")["step_size"]
            if s.optimizer == "lion":  # mup: 0.001 at width 8, 0.0005 at width 16
                assert lr == pytest.approx(0.001 * 8 / w)
            else:  # adamw: tuned (its grid) at every rung
                assert lr in (0.003, 0.01)
    assert len({s.trial_id for s in trials}) == len(trials) == 24
    tags = search_tags(trials)
    s = next(s for s in trials if s.optimizer == "lion" and s.hparams("model")["width"] == 16)
    t = tags[s.trial_id]
    assert t[lt.TAG_PARAMS] == str(transformer_params(16, 2)) and t[lt.TAG_RUNG] == "1"
    assert t[lt.TAG_TRANSFER] == "mup from width 8 (exponent 1)" and t[lt.TAG_BASELINE] == "adamw"
    a = next(s for s in trials if s.optimizer == "adamw")
    assert tags[a.trial_id][lt.TAG_TRANSFER] == "per_rung"
    # the same config expands to the same trial ids (resume finds them)
    assert [s.trial_id for s in expand(parse_config(cfg_of(
        transfer={"lion": {"rule": "mup", "base_width": 8}})))] == [s.trial_id for s in trials]


def test_baseline_only_budgets():
    cfg = parse_config(cfg_of(tokens_per_param=[2], baseline_tokens_per_param=[2, 8]))
    trials = expand(cfg)
    by_ratio = {}
    for s in trials:
        r = trials.origins[s.trial_id].ladder
        by_ratio.setdefault(r.tokens_per_param, set()).add(s.optimizer)
        assert r.baseline_only == (r.tokens_per_param == 8)
    # 2 is everyone's budget (listed again for the baseline: once); 8 the baseline's alone
    assert by_ratio == {2.0: {"adamw", "lion"}, 8.0: {"adamw"}}
    assert len(trials) == 2 * (4 + 2) + 2 * 4


@pytest.mark.parametrize("change, message", [
    ({"baseline": "sgd"}, "baseline: 'sgd' is not an optimizer of this config"),
    ({"transfer": {"adamw": "fixed"}}, "transfer mup|transfer fixed carries one value"),
    ({"transfer": {"lion": "mup"}}, "must be one of per_rung, fixed"),
    ({"tokens_per_param": [0]}, "must be > 0"),
    ({"sizes": [{"width": 8}, {"width": 8}]}, "repeats"),
    ({"workload": "markov_lm_transformr"}, "unknown workload"),
    ({"sizes": [{"width": 8, "num_heads": 3}]}, "num_heads"),
])
def test_refusals(change, message, tmp_path):
    import re

    with pytest.raises(ConfigError) as e:
        expand(load_config(_write(tmp_path, cfg_of(**change))))
    assert re.search(message, str(e.value)), str(e.value)


def test_a_ladder_gives_its_own_models_and_budget():
    data = cfg_of()
    data["budget"] = {"steps": 10}
    with pytest.raises(ConfigError, match="a ladder gives the models, dataset and budget"):
        parse_config(data)


def _write(tmp: Path, cfg: dict) -> Path:
    p = tmp / "ladder.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def test_dry_run_prints_the_ladder_table(tmp_path):
    p = _write(tmp_path, cfg_of())
    env = {**os.environ, "COLUMNS": "200"}
    out = subprocess.run([sys.executable, "-m", "harness", "sweep", str(p), "--dry-run",
                          "--tracking-uri", f"sqlite:///{tmp_path}/m.db"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "ladder: transformer_lm on markov_lm_transformer, baseline adamw" in text
    n1 = transformer_params(16, 2)
    steps = round(8 * n1 / (16 * T))
    row = [ln for ln in text.splitlines() if f"{n1:,}" in ln and f"{steps * 16 * T:,}" in ln]
    assert len(row) == 1 and f" {steps} " in row[0], text
    assert not (tmp_path / "m.db").exists()  # a dry run writes nothing


@pytest.mark.slow
def test_killed_ladder_resumes_without_retraining_a_finished_rung(tmp_path):
    """Rung 0 (20 steps) finishes and is written; the sweep is SIGKILLed while rung 1 (61 steps,
    stretched by a test sleep per chunk) trains; the re-run trains rung 1 only."""
    from mlflow.tracking import MlflowClient

    n0 = transformer_params(8, 1)
    cfg = {"name": "ladder_kill", "seeds": [0], "batch_size": 16, "measure_perf": False,
           "steps_per_dispatch": 10, "batching": "off",
           "optimizers": [{"name": "adamw", "hparams": {"step_size": 0.003}}],
           "ladder": {"workload": "markov_lm_transformer", "baseline": "adamw",
                      "sizes": [{"width": 8, "depth": 1, "num_heads": 2},
                                {"width": 16, "depth": 1, "num_heads": 2}],
                      # rung 0: 20 steps of 16 x 32 tokens; rung 1 (4,352 params): 61 steps
                      "tokens_per_param": [20 * 16 * T / n0]}}
    n1 = transformer_params(16, 1)
    steps1 = round(20 * 16 * T / n0 * n1 / (16 * T))
    p = _write(tmp_path, cfg)
    uri = f"sqlite:///{tmp_path}/m.db"
    cmd = [sys.executable, "-m", "harness", "sweep", str(p), "--tracking-uri", uri, "-q"]
    trace = tmp_path / "trace.txt"
    env = with_hooks(dict(os.environ), HARNESS_TEST_CHUNK_SLEEP_S="1.0", HARNESS_TEST_TRACE=str(trace))
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    db = tmp_path / "m.db"

    def finished_rung(rung: str) -> list[str]:
        """Run ids of FINISHED runs of a rung, read-only from the SQLite file (an MLflow client
        here would create the store beside the sweep's own creation of it)."""
        if not db.exists():
            return []
        try:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as c:
                return [r[0] for r in c.execute(
                    "SELECT r.run_uuid FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
                    "WHERE t.key = ? AND t.value = ? AND r.status = 'FINISHED'", (lt.TAG_RUNG, rung))]
        except sqlite3.Error:  # the schema is being built
            return []

    try:
        deadline = time.monotonic() + 240
        first = None
        while time.monotonic() < deadline and proc.poll() is None:
            if done := finished_rung("0"):
                first = done[0]
                break
            time.sleep(0.5)
        assert first is not None, f"rung 0 never finished (sweep exit {proc.poll()})"
        # rung 1 is training: a chunk end of its own after rung 0's 20 steps
        while time.monotonic() < deadline and proc.poll() is None:
            steps = [int(ln.split()[1]) for ln in trace.read_text().splitlines()] if trace.exists() else []
            if 20 in steps and steps[-1] < steps1 and steps.index(20) < len(steps) - 1:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the sweep ended before it could be killed in rung 1"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert finished_rung("1") == []  # rung 1 did not finish

    again = subprocess.run(cmd, cwd=tmp_path, env=dict(os.environ), capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr
    c = MlflowClient(tracking_uri=uri)
    after = c.search_runs([c.get_experiment_by_name("ladder_kill").experiment_id])
    rung0 = [r for r in after if r.data.tags.get(lt.TAG_RUNG) == "0"]
    rung1 = [r for r in after if r.data.tags.get(lt.TAG_RUNG) == "1" and r.info.status == "FINISHED"]
    # the finished rung was not retrained: its one run is the run from before the kill
    assert [r.info.run_id for r in rung0] == [first]
    assert len(rung1) == 1 and rung1[0].data.tags[lt.TAG_PARAMS] == str(n1)
    assert rung1[0].data.tags[lt.TAG_TOKENS] == str(steps1 * 16 * T)


def test_shipped_scaling_study_expands():
    """experiments/scaling.yaml: 5 optimizers on 4 sizes spanning >= 16x parameters,
    2 seeds, adamw the baseline (tuned per rung, with a budget of its own), the others fixed."""
    root = Path(__file__).resolve().parents[1] / "experiments"
    trials = expand(load_config(root / "scaling.yaml"))
    rungs = {trials.origins[s.trial_id].ladder for s in trials}
    params = sorted({r.params for r in rungs})
    assert len(params) == 4 and params[-1] >= 16 * params[0]
    assert {s.optimizer for s in trials} == {"adamw", "muon", "soap", "schedule_free_adamw", "lion"}
    assert {s.seed for s in trials} == {0, 1} and len(trials) == 136
    assert all(r.epochs < 1 for r in rungs)  # no window is seen twice
    assert {r.tokens_per_param for r in rungs if r.baseline_only} == {40.0}


# ------------------------------------------------------------------ plan size


@pytest.mark.parametrize("ladder, dtype", [
    ({}, "float32"),  # 2 sizes x 2 budgets, adamw's 2 step sizes and lion, 2 seeds: 24
    ({"tokens_per_param": [2], "baseline_tokens_per_param": [2, 8]}, "float32"),  # 20
    ({"transfer": {"lion": "fixed"}}, ["float32", "float64"]),  # every part twice: 48
])
def test_plan_size_counts_every_rung(ladder, dtype):
    """The arithmetic count (before anything is loaded) equals the trials the ladder expands to."""
    from harness.config.limits import plan_size

    cfg = parse_config({**cfg_of(**ladder), "dtype": dtype})
    assert plan_size(cfg)[0] == len(expand(cfg))


def test_a_ladder_past_the_trial_limit_is_refused_before_any_work(tmp_path, monkeypatch):
    """64 sizes x (16 budgets x 6 trials + 1 baseline budget x 4) = 6,400 > 5,000: refused while
    the config is read: no model is counted, no dataset loaded, no store created."""
    import harness.config.ladder_parts as config_ladder
    from harness.config.limits import DEFAULT_MAX_TRIALS

    def no_work(*a, **k):
        raise AssertionError("a rung was counted: the limit came after work started")

    monkeypatch.setattr(config_ladder, "model_counts", no_work)
    big = cfg_of(sizes=[{"width": 8 * i, "depth": 1, "num_heads": 2} for i in range(1, 65)],
                 tokens_per_param=list(range(1, 17)), baseline_tokens_per_param=[40])
    with pytest.raises(ConfigError) as e:
        load_config(_write(tmp_path, big), max_trials=5000)
    msg = str(e.value)
    assert "ladder.sizes: the sweep would expand to 6,400 trials (64 ladder sizes x 17 data budgets" in msg
    assert "--max-trials N" in msg
    parse_config(big, max_trials=DEFAULT_MAX_TRIALS)  # under the default limit: accepted
    db = tmp_path / "m.db"
    with pytest.raises(ConfigError, match="6,400 trials"):
        harness.sweep(big, tracking_uri=f"sqlite:///{db}", max_trials=5000, quiet=True)
    assert not db.exists()
    # the CLI says it in one line, before it reads anything else
    out = subprocess.run([sys.executable, "-m", "harness", "sweep", str(_write(tmp_path, big)),
                          "--max-trials", "5000", "--dry-run", "--tracking-uri", f"sqlite:///{db}"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "6,400 trials" in out.stderr + out.stdout and not db.exists()


# ------------------------------------------------- the ladder's columns


def test_ladder_tags_are_columns_of_the_frame_and_of_results_trials(tmp_path):
    """A real two-rung ladder sweep (adamw, one seed, 9 and 41 steps): its ladder.* tags reach
    reports.frame's frame (summary and curve rows) and results().trials, numbers as numbers."""
    from reports.frame import curves, load_frame, summaries

    n0, n1 = transformer_params(8, 1), transformer_params(16, 2)
    cfg = {"name": "ladder_cols", "seeds": [0], "batch_size": 16, "measure_perf": False,
           "batching": "off", "optimizers": [{"name": "adamw", "hparams": {"step_size": 0.003}}],
           "ladder": {"workload": "markov_lm_transformer", "baseline": "adamw", "evals": 3,
                      "sizes": [{"width": 8, "depth": 1, "num_heads": 2},
                                {"width": 16, "depth": 2, "num_heads": 2}],
                      "tokens_per_param": [2]}}
    uri = f"sqlite:///{tmp_path}/m.db"
    run = harness.sweep(cfg, tracking_uri=uri, quiet=True)
    trials = run.results().trials.sort_values("ladder.rung").reset_index(drop=True)
    steps = [round(2 * n / (16 * T)) for n in (n0, n1)]
    assert trials["ladder.rung"].tolist() == [0, 1] and str(trials["ladder.rung"].dtype) == "Int64"
    assert trials["ladder.params"].tolist() == [n0, n1] and str(trials["ladder.params"].dtype) == "Int64"
    assert trials["ladder.tokens"].tolist() == [s * 16 * T for s in steps]
    assert trials["ladder.tokens_per_param"].tolist() == [2.0, 2.0]
    assert trials["ladder.tokens_per_param"].dtype == "float64" and trials["ladder.flops"].gt(0).all()
    assert trials["ladder.size"].tolist() == ["width=8, depth=1, num_heads=2",
                                              "width=16, depth=2, num_heads=2"]
    assert set(trials["ladder.baseline"]) == {"adamw"} and set(trials["ladder.transfer"]) == {"per_rung"}
    assert trials["train_steps"].tolist() == steps
    frame = load_frame("ladder_cols", tracking_uri=uri)
    s = summaries(frame).sort_values("ladder.rung")
    assert s["ladder.params"].tolist() == [n0, n1] and str(s["ladder.params"].dtype) == "Int64"
    c = curves(frame)
    assert len(c) and c["ladder.rung"].notna().all()  # curve rows carry their rung too
    by_trial = dict(zip(s["trial_id"], s["ladder.tokens"], strict=True))
    assert (c["ladder.tokens"] == c["trial_id"].map(by_trial)).all()
