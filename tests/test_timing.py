"""harness.timing: cost-analysis parsing, the measure() protocol, peak caching."""

from __future__ import annotations

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from harness.train import timing


class _Fake:
    def __init__(self, ca):
        self.ca = ca

    def cost_analysis(self):
        if isinstance(self.ca, Exception):
            raise self.ca
        return self.ca


@pytest.mark.parametrize(("ca", "want"), [
    ({"flops": 10.0, "bytes accessed": 3.0}, 10.0),
    ([{"flops": 4.0}, {"flops": 6.0}], 10.0),
    ({"flops": -1.0}, None),
    ({"bytes accessed": 3.0}, None),
    (None, None),
    ([], None),
    ({"flops": float("nan")}, None),
    (RuntimeError("no cost analysis"), None),
])
def test_cost_flops_shapes(ca, want):
    assert timing.cost_flops(_Fake(ca)) == want


def test_flops_agree():
    assert timing.flops_agree(100.0, 60.0) is True
    assert timing.flops_agree(100.0, 40.0) is False
    assert timing.flops_agree(None, 40.0) is None


def test_measure_matmul_step(monkeypatch):
    n = 64
    calls = []

    def step(state, w):
        return (state @ w) / n, jnp.sum(state)

    def carry(out, args):
        calls.append(1)
        return (out[0], args[1])

    state = jnp.ones((n, n), jnp.float32)
    w = jnp.ones((n, n), jnp.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # analytic count agrees: no warning
        perf = timing.measure(step, (state, w), batch_size=n, warmup=2, iters=7, donate_argnums=(0,),
                              carry=carry, analytic_flops=2.0 * n**3, peak_flops=1e12)
    assert len(calls) == 9  # every warm-up and timed call fed the next
    assert perf.timed_steps == 7 and perf.warmup_steps == 2 and perf.compile_s > 0
    assert perf.step_time_ms_p10 <= perf.step_time_ms <= perf.step_time_ms_p90
    assert perf.examples_per_sec == pytest.approx(n / (perf.step_time_ms / 1e3))
    # XLA counts the dot (2 n^3) plus the elementwise/reduce work (O(n^2))
    assert perf.flops_per_step == pytest.approx(2.0 * n**3, rel=0.05)
    assert perf.utilization == pytest.approx(perf.flops_per_step / (perf.step_time_ms / 1e3) / 1e12)
    assert perf.device_kind == timing.device_kind()


def test_measure_steps_per_call_and_mismatch_warning():
    def two_steps(x):
        return (jnp.sin(x) @ x,)

    x = jnp.ones((32, 32), jnp.float32)
    with pytest.warns(timing.FlopsMismatchWarning, match="analytic count"):
        perf = timing.measure(two_steps, (x,), batch_size=8, steps_per_call=2, warmup=1, iters=3,
                              analytic_flops=1.0, peak_flops=1e12)
    assert perf.flops_per_step == pytest.approx(2 * 32**3 / 2, rel=0.1)  # per step, not per call
    assert perf.timed_steps == 6
    with pytest.raises(ValueError, match="iters and steps_per_call"):
        timing.measure(two_steps, (x,), batch_size=8, iters=0)


def test_peak_cached_in_process_and_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(timing, "_PEAK", {})
    measured = []

    def fake(n, dtype, device):
        measured.append(n)
        return 123e9

    monkeypatch.setattr(timing, "_time_matmul", fake)
    assert timing.device_peak_flops() == 123e9
    assert timing.device_peak_flops() == 123e9
    assert len(measured) == 1
    key = f"{timing.device_kind()}|float32"
    assert json.loads((tmp_path / "peak.json").read_text()) == {key: 123e9}
    monkeypatch.setattr(timing, "_PEAK", {})  # a new process: read from disk, no measurement
    assert timing.device_peak_flops() == 123e9 and len(measured) == 1
    timing.device_peak_flops(refresh=True)
    assert len(measured) == 2
    expected_n = 2048 if jax.devices()[0].platform == "cpu" else 8192
    assert measured == [expected_n, expected_n]


def test_real_matmul_rate_positive():
    rate = timing._time_matmul(128, jnp.float32, jax.devices()[0])
    assert np.isfinite(rate) and rate > 1e6  # FLOP/s


def test_a_peak_timed_under_load_is_retimed_when_a_step_beats_it(tmp_path, monkeypatch):
    """Found in the MNIST-1D report: the CNN read 114% utilisation because the cached matmul peak
    had been timed while the machine was busy. A step faster than the cached peak re-times the
    matmul (once per process) and the cache, on disk too, keeps the higher peak."""
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(timing, "_PEAK", {})
    monkeypatch.setattr(timing, "_RETIMED", set())
    key = f"{timing.device_kind()}|float32"
    (tmp_path / "peak.json").write_text(json.dumps({key: 1e3}))  # 1 kFLOP/s: "timed under load"
    retimed = []

    def matmul(n, dtype, device):
        retimed.append(n)
        return 1e15  # the machine is quiet now

    monkeypatch.setattr(timing, "_time_matmul", matmul)
    n = 64
    a = jnp.ones((n, n), jnp.float32)
    perf = timing.measure(lambda x: x @ x, (a,), batch_size=1, iters=5, analytic_flops=2.0 * n**3)
    assert len(retimed) == 1 and perf.peak_flops == 1e15 and 0 < perf.utilization < 1
    assert json.loads((tmp_path / "peak.json").read_text())[key] == 1e15
    # a step still faster than a re-timed peak is reported as measured, and not re-timed again
    monkeypatch.setattr(timing, "_PEAK", {key: 1e3})
    perf2 = timing.measure(lambda x: x @ x, (a,), batch_size=1, iters=5, analytic_flops=2.0 * n**3)
    assert len(retimed) == 1 and perf2.peak_flops == 1e3 and perf2.utilization > 1
