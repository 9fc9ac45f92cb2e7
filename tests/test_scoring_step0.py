"""AlgoPerf's scoring to the last case: a time of 0 and the denominator.

AlgoPerf's ``scoring/performance_profile.py`` (``compute_performance_profiles``) divides each
workload's times by the fastest with ``df.update(df.div(df.min(axis=0), axis=1))``. ``update`` skips
NaN, so a ``0 / 0`` ratio keeps the time 0 (solved at every τ), while ``t / 0 = inf`` (unsolved).
The harness divided plainly: ``0 / 0 = NaN``, unsolved, and the fastest optimizer's score halved.
``algoperf_reference`` below follows AlgoPerf's code step by step (written here from reading it,
with pandas, in AlgoPerf's orientation: submissions × workloads) so the harness is compared with
the library's own arithmetic, not with itself.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from reports import scoring


def algoperf_reference(times: pd.DataFrame, num_workloads: int) -> pd.Series:
    """AlgoPerf's score of each submission from a workload × submission table of times (``inf``:
    not reached): the 4x cap, ``update(div(min))``, ``rho = (r <= tau).sum / NUM``, 100 τ in
    [1, 4], ``np.trapz`` normalised by the range of τ."""
    return algoperf_profile_and_scores(times, num_workloads)[1]


def algoperf_profile_and_scores(times: pd.DataFrame, num_workloads: int) -> tuple[pd.DataFrame, pd.Series]:
    """:func:`algoperf_reference` with the profile too (submissions × τ, as
    ``compute_performance_profiles`` returns it)."""
    df = times.T.copy()  # submissions × workloads, as AlgoPerf holds it
    best = df.min(axis=0)
    df[df.apply(lambda x: x > 4 * best, axis=1)] = np.inf
    with np.errstate(divide="ignore", invalid="ignore"):
        df.update(df.div(df.min(axis=0), axis=1))
    points = np.linspace(1.0, 4.0, num=100)
    perf = pd.concat([(df <= tau).sum(axis=1) / num_workloads for tau in points], axis=1)
    perf.columns = points
    trapz = getattr(np, "trapezoid", None) or np.trapz
    scores = trapz(perf, x=perf.columns) / (perf.columns.max() - perf.columns.min())
    return perf, pd.Series(scores, index=perf.index, name="score")


def test_ratios_keep_a_zero_over_zero_as_algoperfs_update_does():
    """Hand values: ``{x: 0, y: 2}`` on one task gives ratios ``{x: 0, y: inf}`` (before: x NaN,
    unsolved); both 0 gives both 0; a task nobody solved stays ``inf``; a plain task divides."""
    t = pd.DataFrame({"x": [0.0, 0.0, math.inf, 1.0], "y": [2.0, 0.0, math.inf, 2.0]},
                     index=["a", "b", "c", "d"])
    r = scoring.ratios(t)
    assert r.loc["a"].tolist() == [0.0, math.inf]
    assert r.loc["b"].tolist() == [0.0, 0.0]
    assert r.loc["c"].tolist() == [math.inf, math.inf]
    assert r.loc["d"].tolist() == [1.0, 2.0]


def test_a_zero_time_scores_as_algoperfs_own_code_scores_it():
    """Two tasks: on ``a`` x took 0 s (its fastest) and y 2 s; on ``b`` x 2 s, y 1 s. By hand (the
    continuous integral): x solves ``a`` at every τ and ``b`` from τ = 2: ρ_x = 0.5 on [1, 2), 1 on
    [2, 4], score (0.5·1 + 1·2) / 3 = 0.8333; y never solves ``a`` (2 > 4 × 0), ``b`` at every τ:
    0.5. On AlgoPerf's 100-point grid the step at τ = 2 moves x's score by under 0.01. Before:
    x's ``a`` was NaN, unsolved: its score 0.333, under y's."""
    times = pd.DataFrame({"x": [0.0, 2.0], "y": [2.0, 1.0]}, index=["a", "b"])
    capped = times.mask(times.gt(4 * times.min(axis=1), axis=0), np.inf)
    got = scoring.scores_of(scoring.profile_of(capped, "algoperf"))
    ref = algoperf_reference(times, num_workloads=2)
    assert got["x"] == pytest.approx(ref["x"], abs=1e-12) and got["y"] == pytest.approx(ref["y"], abs=1e-12)
    assert got["x"] == pytest.approx(2.5 / 3, abs=0.01) and got["y"] == pytest.approx(0.5, abs=1e-12)


def test_a_target_met_at_initialisation_through_a_real_sweep(tmp_path):
    """A real sweep (``scoring: algoperf``) on two tasks, where the initial parameters already meet
    digits' target (valid/loss ≤ 100): every optimizer solves digits, at the first evaluation after
    training starts (as AlgoPerf's runner first evaluates after a step), with a time > 0; the
    leaderboard's scores equal AlgoPerf's code on the report's own table; the report says which
    denominator the score uses and why."""
    import html as htmlmod
    import re

    from harness.core import names as N
    from reports.frame import load_frame
    from reports.leaderboard import SCORE_COL, leaderboard
    from reports.report_clock import use_clock

    cfg = {"name": "step0", "models": [{"name": "mlp", "hparams": {"width": 32, "depth": 1}}],
           "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}},
                          {"name": "adam", "hparams": {"step_size": 0.003}}],
           "schedules": ["constant"], "datasets": ["digits", "mnist1d"],
           "targets": {"digits": {"metric": "valid/loss", "value": 100.0},
                       "mnist1d": {"metric": "valid/accuracy", "value": 0.3}},
           "scoring": "algoperf", "seeds": 2, "batch_size": 64, "budget": {"steps": 200},
           "eval_every": 50, "steps_per_dispatch": 50, "measure_perf": True}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", "c.yaml", "--tracking-uri", uri],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # the summary says the digits target needs no training, and MLflow holds the tag
    said = " ".join(r.stdout.split())
    assert ("Target met at initialisation (the step-0 evaluation, which does not count, as in "
            "AlgoPerf: a run reaches the target at its first later evaluation that meets it): on mlp · "
            "digits, 4 runs met it again later (at step 50). Those times to target count only the steps "
            "to that evaluation; set a harder target to compare training.") in said, said[-1500:]
    assert "on mlp · mnist1d" not in said
    from mlflow.tracking import MlflowClient

    runs = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name("step0").experiment_id],
                                         f"tags.{N.TAG_STATUS} = 'finished'")
    flags = {(r.data.params.get("dataset"), r.data.tags.get(N.TAG_TARGET_AT_INIT)) for r in runs}
    assert flags == {("digits", "true"), ("mnist1d", None)}, flags
    raw = load_frame("step0", tracking_uri=uri)
    # what the pipeline recorded: the evaluation at initialisation met digits' target (loss < 100)
    # on every trial; each trial reached it at its first evaluation after training started (step
    # 50), with that evaluation's clock, and a modeled time of those 50 steps × its step time
    curves = raw[(raw["row"] == "curve") & (raw["dataset"] == "digits") & raw["valid/loss"].notna()]
    first = curves[curves["step"] == 0]
    assert len(first) == 4 and (first["valid/loss"] < 100).all() and (first["time/wall_s"] == 0).all()
    s = raw[(raw["row"] == "summary") & (raw["dataset"] == "digits")]
    assert (s[N.M_STEPS_TO_TARGET] == 50).all()
    at50 = curves[curves["step"] == 50].set_index("trial_id")["time/wall_s"]
    assert (s.set_index("trial_id")[N.M_SECONDS_TO_TARGET] == at50.loc[s["trial_id"]]).all()
    modeled = s[N.M_MODELED_SECONDS_TO_TARGET].notna()
    np.testing.assert_allclose(s.loc[modeled, N.M_MODELED_SECONDS_TO_TARGET],
                               50 * s.loc[modeled, N.M_MODELED_STEP_MS] / 1e3, rtol=1e-12)
    frame = use_clock(raw)
    times = scoring.profile_times(frame, "algoperf")
    digits = next(t for t in times.index if "digits" in t)
    assert (times.loc[digits] > 0).all() and np.isfinite(times.loc[digits]).all()  # solved by all
    # the profile, the scores and the leaderboard's score column: AlgoPerf's code on this table
    got = scoring.algoperf_scores(frame)
    prof_ref, ref = algoperf_profile_and_scores(times, num_workloads=len(times))
    prof = scoring.performance_profile(frame).pivot(index="optimizer", columns="tau", values="rho")
    np.testing.assert_array_equal(prof.to_numpy(), prof_ref.loc[prof.index].to_numpy())
    for opt in ref.index:
        assert got[opt] == pytest.approx(ref[opt], abs=1e-12), (got, ref)
    lb = leaderboard(frame).drop_duplicates("Optimizer").set_index("Optimizer")[SCORE_COL].to_dict()
    assert lb == {opt: f"{ref[opt]:.3f}" for opt in ref.index}
    r = subprocess.run([sys.executable, "-m", "harness", "report", "-e", "step0", "--tracking-uri", uri,
                        "-o", str(tmp_path / "r.html")], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    page = (tmp_path / "r.html").read_text()
    said = htmlmod.unescape(re.search(r'<p class="sub" id="score-denominator">(.*?)</p>', page)[1])
    assert said == ("AlgoPerf score: the performance profile's denominator is this sweep's 2 tasks. "
                    "AlgoPerf's scoring divides by its fixed 8 base workloads, charging a submission for "
                    "workloads it did not run; a sweep chooses its tasks, and dividing by 8 would only "
                    "scale every score by 2/8.")


def test_a_run_that_never_meets_the_target_again_after_step_0_is_said_not_reached(tmp_path):
    """A real sweep where the initial parameters meet digits' target (valid/loss ≤ 2.5; the step-0
    evaluation reads 2.485 and 2.447 for seeds 0 and 1): sgd (step size 0.1) meets it again at its
    first later evaluation (step 50), adam at step size 10 never does (its validation loss 2.54 to
    3.5 after step 0; ``divergence: {loss_factor: null}`` so that it finishes). The step-0
    evaluation does not count (AlgoPerf's runner first evaluates after an update), so adam's runs
    did not reach the target, and the summary says so per case. Before, one sentence said the
    initial parameters reach it and every time to target compares the first ``eval_every`` steps,
    also of the runs that never reached it."""
    from mlflow.tracking import MlflowClient

    from harness.core import names as N

    cfg = {"name": "never", "models": [{"name": "mlp", "hparams": {"width": 32, "depth": 1}}],
           "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}},
                          {"name": "adam", "hparams": {"step_size": 10.0}}],
           "datasets": ["digits"], "targets": {"digits": {"metric": "valid/loss", "value": 2.5}},
           "divergence": {"loss_factor": None}, "seeds": 2, "batch_size": 64,
           "budget": {"steps": 150}, "eval_every": 50, "steps_per_dispatch": 50, "measure_perf": False}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "HARNESS_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "100"}
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", "c.yaml", "--tracking-uri", uri],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("never").experiment_id],
                              f"tags.{N.TAG_STATUS} = 'finished'")
    assert len(runs) == 4
    for run in runs:  # what happened: every run met it at step 0; adam's never again
        assert run.data.tags.get(N.TAG_TARGET_AT_INIT) == "true"
        losses = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "valid/loss")}
        assert losses[0] <= 2.5
        if run.data.tags["optimizer"] == "adam":
            assert min(v for s, v in losses.items() if s > 0) > 2.5, losses
            assert N.M_STEPS_TO_TARGET not in run.data.metrics
        else:
            assert losses[50] <= 2.5 and run.data.metrics[N.M_STEPS_TO_TARGET] == 50
    said = " ".join(r.stdout.split())
    assert ("Target met at initialisation (the step-0 evaluation, which does not count, as in "
            "AlgoPerf: a run reaches the target at its first later evaluation that meets it): on mlp · "
            "digits, 2 runs met it again later (at step 50), 2 never met it again: not reached (adam "
            "seeds 0, 1). Those times to target count only the steps to that evaluation; set a harder "
            "target to compare training.") in said, said[-1500:]
