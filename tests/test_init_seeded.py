"""``TrainingProgram.init_seeded``: a trial's initial state in one compiled dispatch, bit for bit the
eager ``init(jax.random.PRNGKey(seed), step_size)`` (the eager initialisation was about a
third of a 20-step trial's main-thread time in a sweep of 1,000)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import yaml
from conftest import make_spec

from harness.config.load import load_config
from harness.data.sources import load_dataset
from harness.plan.expansion import expand
from harness.train.build import trial_step_size
from harness.train.program import program_for
from optimizers import OPTIMIZERS


def _same(a, b) -> None:
    """Equal tree structure, and every leaf equal in dtype, weak type, shape and bits."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        assert (x.dtype, x.weak_type, x.shape) == (y.dtype, y.weak_type, y.shape)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), strict=True)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_every_builtin_optimizer_initialises_compiled_and_bit_identical(opt, digits, monkeypatch):
    spec = make_spec(optimizer=opt, optimizer_hparams={"step_size": 0.01})
    prog = program_for(spec, digits)
    monkeypatch.setattr(prog, "_init_exe", None)  # compiled here, even if an earlier test did
    lr = trial_step_size(spec, prog.opt_builder)
    first, dt = prog.init_seeded(0, lr)
    assert prog._init_exe not in (None, False) and dt > 0  # compiled, and its seconds counted
    _same(first, prog.init(jax.random.PRNGKey(0), lr)[0])
    for seed in (7, 2**31 + 5, 2**32 - 1):  # the whole range of seeds the harness accepts
        got, dt = prog.init_seeded(seed, 0.003)
        assert dt == 0.0
        _same(got, prog.init(jax.random.PRNGKey(seed), 0.003)[0])


@pytest.mark.parametrize("model,dataset,dtype", [
    ("cnn", "digits", "bfloat16"), ("resnet", "digits", "float32"), ("vit", "digits", "float32"),
    ("autoencoder", "digits", "float32"), ("cnn1d", "mnist1d", "float32"),
    ("transformer_lm", "markov_lm", "bfloat16")])
def test_models_with_state_and_mixed_precision_initialise_bit_identical(model, dataset, dtype, monkeypatch):
    spec = make_spec(model=model, model_hparams={}, dataset=dataset, dtype=dtype)
    prog = program_for(spec, load_dataset(dataset))
    monkeypatch.setattr(prog, "_init_exe", None)
    _same(prog.init_seeded(3, 0.01)[0], prog.init(jax.random.PRNGKey(3), 0.01)[0])
    assert prog._init_exe not in (None, False)


def test_the_models_initialisation_compiles_once_per_model_not_per_program(digits):
    """A random initialiser is slow to compile (the CNN's ~3 s, its ``erf_inv``): the programs of
    one model (here two optimizers × two schedules) share its compiled initialisation; each
    compiles only its optimizer's."""
    progs = [program_for(make_spec(model="cnn", model_hparams={}, optimizer=o, schedule=sch,
                                   optimizer_hparams={"step_size": 0.01}), digits)
             for o in ("sgd", "adam") for sch in ("constant", "cosine_decay")]
    for p in progs:
        p._init_exe = None  # (an earlier test may have compiled one of them)
        p.init_seeded(0, 0.01)
    assert len({id(p) for p in progs}) == 4 and len({id(p.entry) for p in progs}) == 1
    assert [k[0] for k in progs[0].entry.compiled].count("init_seeded") == 1
    assert len({id(p._init_exe[0]) for p in progs}) == 1 and len({id(p._init_exe[1]) for p in progs}) == 4


def test_an_initialisation_that_does_not_trace_runs_eagerly_as_before(digits, monkeypatch):
    prog = program_for(make_spec(optimizer_hparams={"step_size": 0.02}), digits)
    want = prog.init(jax.random.PRNGKey(1), 0.02)[0]
    real = prog._init_optimizer

    def branches_on_the_step_size(params, mstate, k_data, k_drop, step_size):
        if step_size > 0:  # Python control flow: fine eagerly, TracerBoolConversionError traced
            return real(params, mstate, k_data, k_drop, step_size)
        raise AssertionError("a positive step size")

    monkeypatch.setattr(prog, "_init_optimizer", branches_on_the_step_size)
    monkeypatch.setattr(prog, "_init_exe", None)
    got, _ = prog.init_seeded(1, 0.02)
    assert prog._init_exe is False
    _same(got, want)


def test_a_users_optimizer_file_initialises_eagerly(tmp_path, monkeypatch, digits):
    """A ``source:`` optimizer's init may not be pure (it could draw from NumPy's global generator):
    traced once, it would be one constant for every trial. It runs eagerly, per trial."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({
        "name": "src", "models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}],
        "optimizers": [{"name": "oadam", "source": "optax:adam", "hparams": {"step_size": 0.01}}],
        "datasets": ["digits"], "seeds": [0], "batch_size": 32, "budget": {"steps": 10},
        "measure_perf": False}))
    spec = expand(load_config(tmp_path / "sweep.yaml"))[0]
    prog = program_for(spec, digits)
    assert spec.optimizer_source == "optax:adam" and prog._init_exe is False
    _same(prog.init_seeded(0, 0.01)[0], prog.init(jax.random.PRNGKey(0), 0.01)[0])
