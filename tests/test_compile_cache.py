"""The persistent XLA compilation cache: on by default under
``$HARNESS_CACHE_DIR/xla``, a second invocation with new seeds compiles nothing new (counted from
JAX's own cache events, as MLflow stored them), loaded programs give bit-identical curves, and it
turns off with ``--no-compile-cache``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import jaxlib
import mlflow
import pytest

from harness.core import names
from harness.train import compile_cache

ROOT = Path(__file__).resolve().parents[1]

CONFIG = """\
name: cachetest
models: [{{name: mlp, hparams: {{width: 16, depth: 1}}}}]
optimizers:
  - {{name: sgd, hparams: {{step_size: 0.1}}}}
  - {{name: adam, hparams: {{step_size: 0.003}}}}
schedules: [constant]
datasets: [digits]
seeds: {seeds}
batch_size: 32
budget: {{steps: 60}}
eval_every: 20
steps_per_dispatch: 20
batching: off
measure_perf: true
"""


def _env(cache: Path) -> dict[str, str]:
    """The environment of a user who configured no cache of their own (the test session's
    ``JAX_*`` cache variables removed), with a private ``HARNESS_CACHE_DIR``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE", "HARNESS_COMPILE_CACHE"))}
    env.update(HARNESS_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    return env


def _sweep(tmp_path: Path, store: str, seeds: str, *extra: str) -> dict[str, dict]:
    cfg = tmp_path / f"c-{store}-{seeds.strip('[]').replace(', ', '-')}.yaml"
    cfg.write_text(CONFIG.format(seeds=seeds))
    uri = f"sqlite:///{tmp_path / store}.db"
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", str(cfg), "--tracking-uri", uri, "-q",
                        *extra], cwd=tmp_path, env=_env(tmp_path / "cache"), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("cachetest")
    runs = client.search_runs([exp.experiment_id], f"tags.`{names.TAG_KIND}` = 'trial'")
    out = {}
    for run in runs:
        key = (run.data.tags[names.TAG_OPTIMIZER], run.data.tags[names.TAG_SEED])
        hist = client.get_metric_history(run.info.run_id, names.M_VALID_LOSS)
        out[key] = {"metrics": run.data.metrics, "valid_loss": [(m.step, m.value) for m in hist]}
    return out


def test_second_invocation_with_new_seeds_compiles_nothing_new(tmp_path):
    first = _sweep(tmp_path, "a", "[0, 1]")
    assert len(first) == 4
    # the first invocation compiled (a later trial of the same shapes reuses the process's programs;
    # the training chunks are compiled by the sweep's interleaved throughput stage before training,
    # so a trial's counts hold what its unit compiled beyond them: here the first unit's evaluation)
    assert first[("sgd", "0")]["metrics"][names.M_CACHE_MISSES] > 0, first[("sgd", "0")]["metrics"]
    assert first[("sgd", "0")]["metrics"][names.M_TIME_COMPILE_S] > 0
    folder = tmp_path / "cache" / "xla" / f"jax-{jax.__version__}-jaxlib-{jaxlib.__version__}"
    assert folder.is_dir() and any(folder.iterdir())

    # a second invocation, in another store, with the same seeds and two new ones: every program
    # loaded, none compiled, and the repeated trials' curves are the same floats
    again = _sweep(tmp_path, "b", "[0, 1, 2, 3]")
    assert len(again) == 8
    for key, t in again.items():
        assert t["metrics"][names.M_CACHE_MISSES] == 0, key
        if key[1] in "01":
            assert t["valid_loss"] == first[key]["valid_loss"], key
    assert again[("sgd", "0")]["metrics"][names.M_CACHE_HITS] > 0


def test_no_compile_cache_compiles_everything_and_writes_no_cache(tmp_path):
    out = _sweep(tmp_path, "c", "[0]", "--no-compile-cache")
    # no cache, no counts: 0 misses would read as "nothing compiled" (it all was)
    assert all(names.M_CACHE_HITS not in t["metrics"] and names.M_CACHE_MISSES not in t["metrics"]
               for t in out.values())
    assert all(t["metrics"][names.M_TIME_COMPILE_S] > 0 for k, t in out.items() if k[0] == "sgd")
    assert not (tmp_path / "cache" / "xla").exists()


def test_enable_respects_the_users_cache_and_the_off_switch(monkeypatch, tmp_path):
    monkeypatch.setenv(compile_cache.CACHE_ENV, "off")
    assert compile_cache.enable() is None
    monkeypatch.delenv(compile_cache.CACHE_ENV)
    assert compile_cache.enable(False) is None
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "mine"))
    assert compile_cache.enable() == str(tmp_path / "mine")  # left as the user set it


@pytest.mark.parametrize(("raw", "message"), [
    ("lots", "HARNESS_COMPILE_CACHE_MAX_BYTES='lots' is not a number of bytes (e.g. 2e9)"),
    ("0", "HARNESS_COMPILE_CACHE_MAX_BYTES='0' must be positive; to turn the cache off set "
          "HARNESS_COMPILE_CACHE=0"),
    # nan said "must be positive"
    ("nan", "HARNESS_COMPILE_CACHE_MAX_BYTES='nan' is not a number of bytes (e.g. 2e9)"),
    # inf and 1e400 raised OverflowError (a traceback); 1.5 was a 1-byte cache
    # the upper bound read "1e+15", below the real one (1.1e15 passed); 1.2e15 is above it
    *((raw, f"HARNESS_COMPILE_CACHE_MAX_BYTES={raw!r} must be between 1 MiB (1048576) and 1 PiB "
            "(1125899906842624) bytes, e.g. 2e9") for raw in ("inf", "1e400", "1.5", "1.2e15")),
])
def test_a_bad_size_bound_is_refused(monkeypatch, tmp_path, raw, message):
    monkeypatch.setenv(compile_cache.MAX_BYTES_ENV, raw)
    with pytest.raises(ValueError) as ei:
        compile_cache.enable()
    assert str(ei.value) == message


def test_cache_path_names_the_jax_and_jaxlib_versions(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    folder = f"jax-{jax.__version__}-jaxlib-{jaxlib.__version__}"
    assert compile_cache.cache_path() == tmp_path / "xla" / folder


@pytest.mark.parametrize("raw", ["maybe", "2"])
def test_an_unknown_switch_is_refused(monkeypatch, raw):
    """``HARNESS_COMPILE_CACHE=maybe`` left the cache on without a word."""
    monkeypatch.setenv(compile_cache.CACHE_ENV, raw)
    with pytest.raises(ValueError) as ei:
        compile_cache.enable()
    assert str(ei.value) == (f"HARNESS_COMPILE_CACHE={raw!r} is neither on (1, on, true, yes) nor off "
                             "(0, off, false, no)")
