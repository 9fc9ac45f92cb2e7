"""The dry run's step cost: on the parameter shapes the pre-flight traced, not traced again."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from harness.data.sources import load_dataset
from harness.orchestrate import step_cost
from models.zoo import MODELS


@pytest.fixture
def counted_inits(monkeypatch):
    """The zoo's ``mlp`` with each call of its ``init`` (a trace or a real init) counted."""
    calls: list[tuple] = []
    real = MODELS["mlp"]

    @functools.wraps(real)
    def counting(**kw):
        model = real(**kw)

        def init(*args, **kwargs):
            calls.append(args[1:])
            return model.init(*args, **kwargs)

        return dataclasses.replace(model, init=init)

    monkeypatch.setitem(MODELS, "mlp", counting)
    return calls


def test_dry_run_step_cost_reuses_the_preflights_parameter_shapes(tmp_path, capsys, monkeypatch,
                                                                  counted_inits):
    """Two widths of an MLP on digits (64 inputs, 10 classes): the pre-flight traces each once, and
    the step cost counts 64·8 + 8 + 8·10 + 10 = 610 and 64·16 + 16 + 16·10 + 10 = 1,210 parameters
    from those traces (it traced each model a second time before: 4 inits)."""
    import harness

    monkeypatch.chdir(tmp_path)
    cfg = {"name": "sc", "models": [{"name": "mlp", "hparams": {"width": [8, 16], "depth": 1}}],
           "datasets": ["digits"], "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}}],
           "budget": {"steps": 4}, "batch_size": 32}
    harness.sweep(cfg, dry_run=True, tracking_uri=f"sqlite:///{tmp_path}/m.db")
    out = " ".join(capsys.readouterr().out.split())
    assert "step cost of mlp · sgd (610 parameters, batch 32)" in out
    assert "step cost of mlp · sgd (1,210 parameters, batch 32)" in out
    assert len(counted_inits) == 2


def test_step_cost_reads_the_shapes_of_its_model_and_traces_one_not_given(counted_inits):
    """Shapes under the spec's model key are what it counts (a stand-in of 7 parameters), with no
    trace; without them, or under another model's key, it traces the model: 610 parameters."""
    import jax
    import jax.numpy as jnp
    from conftest import make_spec

    from harness.orchestrate.preflight import model_key

    spec = make_spec(model_hparams={"width": 8, "depth": 1})
    ds = load_dataset("digits")
    seven = {model_key(spec, ds): [jax.ShapeDtypeStruct((7,), jnp.float32)]}
    assert step_cost.step_cost(spec, seven)["params"] == 7 and counted_inits == []
    assert step_cost.step_cost(spec)["params"] == 610 and len(counted_inits) == 1
    wide = make_spec(model_hparams={"width": 16, "depth": 1})
    assert step_cost.step_cost(wide, seven)["params"] == 1210 and len(counted_inits) == 2


def test_an_algoperf_submission_is_not_estimated_and_says_why(tmp_path, capsys):
    """``experiments/byo.yaml --dry-run`` printed an internal ``TypeError`` (the stand-in builder of a
    submission takes no step size) as the step cost of its AlgoPerf entry."""
    import re

    from harness.orchestrate.run import run_sweep

    run_sweep("experiments/byo.yaml", tracking_uri=f"sqlite:///{tmp_path}/m.db", dry_run=True)
    out = " ".join(capsys.readouterr().out.split())
    assert "TypeError" not in out
    assert re.search(r"step cost of \S+ · nadamw_ap: not estimated \(an AlgoPerf submission builds its "
                     r"optimizer state in its own init_optimizer_state\)", out), out


def test_the_step_time_is_estimated_on_the_device_present_from_its_measured_peak(monkeypatch):
    """A dry run said only "0.003817 ms on 1 H100 SXM", nothing about the machine in use. Now the
    line first gives the time on the device present from its measured matmul peak (here a stand-in
    of 100 GFLOP/s), at the same assumed MFU: mlp width 8 depth 1 on digits, batch 32 (make_spec):
    3 × (2·64·8 + 8 + 8 + 2·8·10 + 10: matmuls, biases, ReLU) × 32 = 116,160 FLOPs per step →
    116,160 / (1e11 × 0.4) s = 0.002904 ms."""
    from conftest import make_spec

    from harness.train import timing

    monkeypatch.setattr(timing, "device_peak_flops", lambda device=None, dtype=None, **kw: 1e11)
    spec = make_spec(model_hparams={"width": 8, "depth": 1})
    fpe = 3 * (2 * 64 * 8 + 8 + 8 + 2 * 8 * 10 + 10) * spec.batch_size
    assert fpe == 116_160
    (line,) = step_cost.cost_lines([spec])
    assert f"{fpe:.3g} FLOPs" in line, line
    here = 1e3 * fpe / (1e11 * 0.4)
    assert (f"; {here:.4g} ms here ({timing.device_kind()}, measured peak 100 GFLOP/s), "
            f"{1e3 * fpe / (step_cost.PEAK_FLOPS * 0.4):.4g} ms on 1 H100 SXM") in line, line
    monkeypatch.setattr(timing, "device_peak_flops", lambda *a, **k: 1 / 0)  # no peak: the H100 figure alone
    (line,) = step_cost.cost_lines([spec])
    assert " ms here " not in line and " ms on 1 H100 SXM" in line, line
