"""The pre-flight traces once per program, not per step size, and not at all for a trial
a FINISHED run already holds; the values of every trial are still checked."""

from __future__ import annotations

import pytest

from harness.config.errors import ConfigError
from harness.config.load import parse_config
from harness.orchestrate import preflight as pf


def _cfg(trials: int, optimizers=None, name: str = "scale", steps: int = 5, **extra):
    return parse_config({
        "name": name, "models": [{"name": "logreg"}], "datasets": ["digits"], "seeds": 1,
        "optimizers": optimizers or [{"name": "adam",
                                      "hparams": {"step_size": {"log_uniform": [1e-4, 1e-1]}}}],
        "search": {"method": "quasirandom", "trials": trials, "seed": 0},
        "budget": {"steps": steps}, "eval_every": steps, "steps_per_dispatch": steps, "batch_size": 32,
        "measure_perf": False, **extra})


@pytest.fixture
def traces(monkeypatch):
    """The keys of the traces the pre-flight makes, heard through its public hook."""
    seen: list[tuple] = []
    monkeypatch.setattr(pf, "TRACE_HOOKS", [seen.append])
    return seen


def test_200_step_sizes_trace_as_often_as_2(traces):
    """200 trials that differ only in step size: one model trace, one optimizer trace, as for 2
    (before: one optimizer trace per step size, 201 traces)."""
    counts = {}
    for n in (2, 200):
        traces.clear()
        specs = pf.preflight(_cfg(n), "scale.yaml")
        assert len(specs) == n and len({s.hparams("optimizer")["step_size"] for s in specs}) == n
        counts[n] = [k[0] for k in traces]
    assert counts[2] == counts[200] == ["model", "opt"]


def test_an_int_or_str_hyperparameter_is_another_program(traces):
    """Two schedules (str) and two values of an int hyperparameter: four programs, each traced once
    whatever the step sizes (20 trials)."""
    cfg = _cfg(5, [{"name": "adafactor", "hparams": {"step_size": {"log_uniform": [1e-3, 1e-1]},
                                                     "min_dim_size_to_factor": [2, 128]}}],
               schedules=["constant", "cosine_decay"])
    specs = pf.preflight(cfg, "scale.yaml")
    assert len(specs) == 20
    assert [k[0] for k in traces] == ["model"] + ["opt"] * 4


def test_a_float_that_breaks_the_build_is_still_refused_naming_its_value(traces):
    """b1 is a float: three values are one program, traced once, but each value is built (adam's own
    check of b1): -0.5, on the third trial, is refused before any write, its value named."""
    cfg = _cfg(1, [{"name": "adam", "hparams": {"step_size": 0.01, "b1": [0.9, 0.5, -0.5]}}])
    with pytest.raises(ConfigError) as e:
        pf.preflight(cfg, "scale.yaml")
    assert str(e.value) == ("scale.yaml: optimizers[0].hparams.b1: optimizer 'adam' (b1=-0.5, "
                            "step_size=0.01): b1 must be in [0, 1), got -0.5"), str(e.value)
    assert [k[0] for k in traces][:2] == ["model", "opt"]


def test_a_rerun_with_every_trial_finished_traces_nothing(tmp_path, traces, monkeypatch):
    """A real sweep of 6 trials into SQLite; the same config again: the pre-flight reads the store
    (read-only) and traces nothing, the sweep trains nothing. A dry run and a config error on a store
    that does not exist create nothing."""
    from harness.orchestrate.resume import finished_trials
    from harness.orchestrate.run import run_sweep

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_BATCH", "never")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = _cfg(6, name="rerun")
    # a dry run on a store that does not exist: traced (nothing finished), the store not created
    run_sweep(cfg, tracking_uri=uri, dry_run=True, quiet=True)
    assert [k[0] for k in traces] == ["model", "opt"] and not (tmp_path / "mlflow.db").exists()
    first = run_sweep(cfg, tracking_uri=uri, quiet=True)
    assert sum(o.status == "finished" for o in first.outcomes) == 6
    traces.clear()
    again = run_sweep(cfg, tracking_uri=uri, quiet=True)
    assert traces == [] and again.parent_run_id is None and len(again.outcomes) == 6
    # a seventh trial (another step size): only it is traced
    traces.clear()
    more = _cfg(7, name="rerun")
    found = pf.preflight(more, "scale.yaml", finished=finished_trials(lambda: uri, "rerun"))
    assert len(found) == 7 and [k[0] for k in traces] == ["model", "opt"]


def test_a_config_error_creates_no_store(tmp_path, traces):
    from harness.orchestrate.run import run_sweep

    uri = f"sqlite:///{tmp_path / 'none.db'}"
    bad = _cfg(1, [{"name": "adam", "hparams": {"step_size": 0.01, "b1": -0.5}}], name="bad")
    with pytest.raises(ConfigError):
        run_sweep(bad, tracking_uri=uri, quiet=True)
    assert not (tmp_path / "none.db").exists()
