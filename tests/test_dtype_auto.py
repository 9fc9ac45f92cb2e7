"""dtype: auto (the default): float32 on a CPU, bfloat16 compute with float32 master weights on a GPU/TPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from harness.config.load import ConfigError, parse_config
from harness.config.schema import auto_dtype
from harness.data.sources import load_dataset
from harness.orchestrate.run import expand
from harness.train.program import program_for

BASE = {"name": "d", "models": [{"name": "mlp", "hparams": {"width": 8, "depth": 1}}], "datasets": ["digits"],
        "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}}], "budget": {"steps": 4}, "seeds": 1}


@pytest.mark.parametrize(("platform", "want"), [("cpu", "float32"), ("gpu", "bfloat16"), ("cuda", "bfloat16"),
                                                ("tpu", "bfloat16")])
def test_auto_dtype_per_platform(platform, want):
    assert auto_dtype(platform) == want


def test_the_default_trains_in_float32_on_this_cpu():
    assert jax.default_backend() == "cpu"
    (spec,) = expand(parse_config(dict(BASE)))
    assert spec.dtype == "float32" and spec.flat_params()["train.dtype"] == "float32"


def test_on_an_accelerator_the_default_is_bfloat16_compute_float32_parameters(monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    (spec,) = expand(parse_config(dict(BASE)))
    assert spec.dtype == "bfloat16" and spec.flat_params()["train.dtype"] == "bfloat16"  # on the run
    entry = program_for(spec, load_dataset("digits")).entry
    assert entry.mixed and entry.compute_dtype == jnp.bfloat16 and entry.dtype == jnp.float32
    # the config says otherwise: kept, on any device
    (spec,) = expand(parse_config({**BASE, "dtype": "float32"}))
    assert spec.dtype == "float32"
    assert [s.dtype for s in expand(parse_config({**BASE, "dtype": ["auto", "float32", "float16"]}))] == [
        "bfloat16", "float32", "float16"]


def test_an_unknown_dtype_names_the_key():
    with pytest.raises(ConfigError, match="dtype"):
        parse_config({**BASE, "dtype": "bf16"})
