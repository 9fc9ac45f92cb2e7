"""One device copy of each dataset, shared by every program over it; images as uint8 on the device."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_spec

from harness.data.dataset import Dataset
from harness.data.sources import load_dataset
from harness.train import device_data
from harness.train.loop import run_trial
from harness.train.program import program_for


def _copies(shape: tuple) -> list[jax.Array]:
    """Live device arrays of ``shape`` (one per copy of a split on the device)."""
    return [a for a in jax.live_arrays() if a.shape == shape]


def test_two_programs_over_one_dataset_hold_one_device_copy():
    ds = load_dataset("digits")
    a = program_for(make_spec(model_hparams={"width": 16, "depth": 1}), ds)
    b = program_for(make_spec(model_hparams={"width": 24, "depth": 2}, optimizer="momentum"), ds)
    assert a.entry is not b.entry  # two model entries, two programs
    assert a.entry.x_train is b.entry.x_train
    # before: each entry device_put its own float32 copy (2 arrays of this shape, 4 bytes each)
    train = _copies(ds.x_train.shape)
    assert len(train) == 1 and train[0].dtype == jnp.uint8
    assert len(_copies(ds.x_valid.shape)) == 1 and len(_copies(ds.y_train.shape)) == 1
    held = device_data.shared(ds, jnp.float32)
    assert held.divisor == 16.0
    assert held.nbytes == sum(x.size + y.nbytes for x, y in (
        (ds.x_train, ds.y_train), (ds.x_valid, ds.y_valid), (ds.x_test, ds.y_test)))
    assert device_data.planned_bytes([(ds, "float32"), (ds, "float32")]) == held.nbytes


def test_uint8_inputs_decode_to_the_loaders_floats_bit_for_bit():
    ds = load_dataset("digits")
    e = program_for(make_spec(), ds).entry
    got = np.asarray(jax.jit(e.decode)(e.x_train))
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), ds.x_train.view(np.uint32))
    # a float64 storage dtype: the float32 value, widened
    assert np.asarray(device_data.decode(jnp.asarray([255], jnp.uint8), 255.0, jnp.float32)) == 1.0


def test_inputs_that_are_not_quantized_stay_float():
    x = np.asarray([[0.5, 1 / 3]], np.float32)
    assert device_data.uint8_divisor(x) is None
    assert device_data.uint8_divisor(np.asarray([[0.0, 2 / 255, 1.0]], np.float32)) == 255.0
    assert device_data.uint8_divisor(np.asarray([[-1 / 255]], np.float32)) is None
    ds = load_dataset("synthetic", num_examples=64, num_valid=8, num_test=8, input_shape=[4])
    held = device_data.shared(ds, jnp.float32)
    assert held.divisor is None and held.arrays[0].dtype == jnp.float32


def test_a_trial_on_uint8_images_trains_as_on_floats(monkeypatch):
    """The same trial on the device's uint8 copy and on a float32 copy: the same losses to the bit."""
    spec = make_spec(steps=10, eval_every=5, steps_per_dispatch=5)
    ds = load_dataset("digits")
    on_uint8 = run_trial(spec, dataset=ds, measure_perf=False)
    assert program_for(spec, ds).entry.x_train.dtype == jnp.uint8
    twin = Dataset(ds.x_train, ds.y_train, ds.x_test, ds.y_test, ds.x_valid, ds.y_valid, ds.input_shape,
                   ds.num_classes, ds.name)
    monkeypatch.setattr(device_data, "DIVISORS", ())  # no divisor: float32 on the device
    on_float = run_trial(spec, dataset=twin, measure_perf=False)
    assert program_for(spec, twin).entry.x_train.dtype == jnp.float32
    assert on_uint8.curves.train_loss == on_float.curves.train_loss
    assert on_uint8.final_valid_loss == pytest.approx(on_float.final_valid_loss, abs=0)


def test_the_dry_run_states_grouping_and_the_data_a_sweep_holds(tmp_path, capsys, monkeypatch):
    import harness

    monkeypatch.chdir(tmp_path)
    cfg = {"name": "dd", "models": [{"name": "mlp", "hparams": {"width": [8, 16], "depth": 1}}],
           "datasets": ["digits"], "optimizers": [{"name": "sgd", "hparams": {"step_size": [0.1, 0.2]}}],
           "budget": {"steps": 4}, "seeds": 2}
    harness.sweep(cfg, dry_run=True, tracking_uri=f"sqlite:///{tmp_path}/m.db")
    out = " ".join(capsys.readouterr().out.split())
    ds = load_dataset("digits")
    one_copy = sum(x.size + y.nbytes for x, y in (  # uint8 images and int32 labels, once
        (ds.x_train, ds.y_train), (ds.x_valid, ds.y_valid), (ds.x_test, ds.y_test)))
    assert f"device memory for data: {one_copy / 2**20:.1f} MiB (1 dataset, one device copy each" in out
    assert "batching auto: 8 trials, 2 programs; 2 groups of siblings (seed, step size)" in out
