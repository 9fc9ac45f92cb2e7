"""harness.trainer: curves, data order, divergence, targets, perf cache, batching parity per optimizer."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_spec

from harness.core.spec import PerfResult, Target
from harness.data.sources import load_dataset
from harness.train import batching, build
from harness.train import loop as trainer
from models.zoo import MODELS
from optimizers import OPTIMIZERS

# float32 tolerance of "trial i of a vmapped batch equals the trial run alone"
RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def test_curves_target_progress_and_determinism(digits):
    spec = make_spec(steps=60, eval_every=30, steps_per_dispatch=30, target={"value": 0.5},
                     model_hparams={"width": 32, "depth": 1, "dropout": 0.1})
    progress = []
    r = trainer.run_trial(spec, dataset=digits, measure_perf=False,
                          on_progress=lambda done, total: progress.append((done, total)))
    c = r.curves
    assert r.status == "finished" and r.diverged_step is None and r.perf is None
    assert progress == [(30, 60), (60, 60)]
    assert c.train_step == list(range(1, 61)) and c.eval_step == [0, 30, 60]
    assert all(type(v) is float for v in c.train_loss + c.eval_loss + c.eval_accuracy + c.train_wall_s)
    assert all(type(v) is int for v in c.train_step + c.eval_step)
    assert c.eval_wall_s[0] == 0.0 and c.eval_wall_s[-1] == pytest.approx(c.train_wall_s[-1])
    assert np.all(np.diff(c.train_wall_s) >= 0)
    assert np.mean(c.train_loss[-10:]) < np.mean(c.train_loss[:10])
    assert c.eval_accuracy[-1] > 0.5 and r.final_valid_accuracy == c.eval_accuracy[-1]
    assert r.final_valid_loss == c.eval_loss[-1]
    assert 0.5 < r.test_accuracy <= 1.0 and r.test_loss > 0 and r.test_metrics == {}
    # target: first evaluation reaching 0.5 accuracy, its step and clock
    j = next(i for i, a in enumerate(c.eval_accuracy) if a >= 0.5)
    assert r.steps_to_target == c.eval_step[j] and r.seconds_to_target == c.eval_wall_s[j]
    # same seed, same machine: identical curves (compiled programs are reused: no new compile)
    r2 = trainer.run_trial(spec, dataset=digits, measure_perf=False)
    assert r2.compile_seconds == 0.0
    assert r2.curves.train_loss == c.train_loss and r2.curves.eval_loss == c.eval_loss
    # a different seed gives different curves
    r3 = trainer.run_trial(dataclasses.replace(spec, seed=1), dataset=digits, measure_perf=False)
    assert r3.curves.train_loss != c.train_loss
    # unreachable target is a value, not an error
    r4 = trainer.run_trial(dataclasses.replace(spec, target=Target("valid/loss", -1.0, "min")),
                           dataset=digits, measure_perf=False)
    assert r4.steps_to_target is None and r4.seconds_to_target is None


def test_target_met_at_initialisation_is_reached_at_the_first_evaluation_after(digits):
    """Found by a new user: a target met by the evaluation at initialisation gave
    ``seconds_to_target = 0``, so every time ratio of the performance profile was 0/0 or x/0 and
    the task counted as unsolved for every optimizer. It is reached at the first later evaluation
    that meets it now, with that evaluation's step and clock; the curves are unchanged."""
    spec = make_spec(steps=20, eval_every=10, target={"metric": "valid/loss", "value": 1e9, "mode": "min"})
    r = trainer.run_trial(spec, dataset=digits, measure_perf=False)
    c = r.curves
    assert c.eval_step == [0, 10, 20] and c.eval_wall_s[0] == 0.0 and c.eval_loss[0] < 1e9
    assert r.steps_to_target == 10 and r.seconds_to_target == c.eval_wall_s[1] > 0.0
    # a target first met later keeps its own evaluation (met at step 0 or not: the same rule)
    from harness.train.track import TrialTrack

    tr = TrialTrack(dataclasses.replace(spec, target=Target("valid/loss", 0.5, "min")))
    for step, wall, loss in ((0, 0.0, 2.3), (10, 0.01, 0.9), (20, 0.02, 0.4), (30, 0.03, 0.3)):
        tr.add_eval(step, wall, loss, {"accuracy": 0.5})
    assert (tr.steps_to_target, tr.seconds_to_target) == (20, 0.02)
    tr = TrialTrack(dataclasses.replace(spec, target=Target("valid/loss", 2.5, "min")))
    for step, wall, loss in ((0, 0.0, 2.3), (10, 0.01, 2.6), (20, 0.02, 2.0)):
        tr.add_eval(step, wall, loss, {"accuracy": 0.5})
    # met at step 0, not at step 10 (2.6 > 2.5), met again at 20: reached at 20, the first evaluation
    # after training started that meets it, as AlgoPerf's runner (no step-0 evaluation) counts it.
    # Before: step 10, "whatever the metric reads there"
    assert (tr.steps_to_target, tr.seconds_to_target) == (20, 0.02) and tr.target_at_init
    assert tr.result(perf=None, compile_s=0.0, extra={}).extra == {"target_at_init": True}


def test_matches_hand_written_reference(digits):
    """Data order (epoch permutations, straddling batches), update indexing, evaluation on the
    validation split during training and on the test split at the end: by hand."""
    B, steps, lr = 500, 4, 0.05
    spec = make_spec(optimizer="sgd", optimizer_hparams={"step_size": lr}, steps=steps, batch_size=B,
                     eval_every=4, steps_per_dispatch=2, seed=7)
    r = trainer.run_trial(spec, dataset=digits, measure_perf=False)

    model = MODELS["mlp"](input_shape=(8, 8, 1), num_classes=10, width=16, depth=1)
    k_init, k_data, _ = jax.random.split(jax.random.PRNGKey(7), 3)
    _, params, state = model.init(k_init, (B, 8, 8, 1))
    N = digits.num_train
    stream = np.concatenate([np.asarray(jax.random.permutation(jax.random.fold_in(k_data, e), N))
                             for e in range(2)])  # 4 * 500 = 2000 > 1150: the stream crosses an epoch
    x, y = jnp.asarray(digits.x_train), jnp.asarray(digits.y_train)

    def loss_fn(p, xb, yb):
        return model.loss(model.apply(p, state, xb, train=True)[0], yb)

    losses = []
    for i in range(steps):
        idx = stream[i * B:(i + 1) * B]
        loss, g = jax.value_and_grad(loss_fn)(params, x[idx], y[idx])
        losses.append(float(loss))
        params = jax.tree_util.tree_map(lambda p, gg: p - lr * gg, params, g)
    np.testing.assert_allclose(r.curves.train_loss, losses, rtol=1e-5, atol=1e-6)
    assert r.curves.eval_step == [0, 4]
    for x_split, y_split, got_loss, got_acc in (
            (digits.x_valid, digits.y_valid, r.curves.eval_loss[-1], r.curves.eval_accuracy[-1]),
            (digits.x_test, digits.y_test, r.test_loss, r.test_accuracy)):
        out = model.apply(params, state, jnp.asarray(x_split), train=False)[0]
        want_loss = float(model.loss(out, jnp.asarray(y_split)))
        want_acc = float(model.metrics["accuracy"](out, jnp.asarray(y_split)))
        np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5)
        np.testing.assert_allclose(got_acc, want_acc, rtol=1e-6)
    assert r.test_loss != r.curves.eval_loss[-1]  # two different splits


def test_eval_batches_cover_split_exactly(monkeypatch, digits):
    """287 validation examples in batches of 100 (2 full + 87 remainder) and 360 test examples
    (3 full + 60) give the whole-split means."""
    spec = make_spec(steps=4, eval_every=4, steps_per_dispatch=4, seed=3)
    whole = trainer.run_trial(spec, dataset=digits, measure_perf=False)
    monkeypatch.setattr(build, "EVAL_BATCH", 100)
    batched = trainer.run_trial(spec, dataset=digits, measure_perf=False)
    assert batched.extra["eval_batch"] == 100 and whole.extra["eval_batch"] == 287
    np.testing.assert_allclose(batched.curves.eval_loss, whole.curves.eval_loss, rtol=1e-5)
    np.testing.assert_allclose(batched.test_loss, whole.test_loss, rtol=1e-5)
    np.testing.assert_allclose(batched.test_accuracy, whole.test_accuracy, rtol=1e-6)
    np.testing.assert_allclose(batched.curves.eval_accuracy, whole.curves.eval_accuracy, rtol=1e-6)


def test_divergence_is_a_status(digits):
    bad = make_spec(optimizer="sgd", optimizer_hparams={"step_size": 1e30}, steps=20)
    r = trainer.run_trial(bad, dataset=digits, measure_perf=False)
    c = r.curves
    assert r.status == "diverged" and r.diverged_step is not None and "non-finite" in r.reason
    first_bad = next(s for s, v in zip(c.train_step, c.train_loss, strict=True) if not np.isfinite(v))
    assert r.diverged_step == first_bad == c.train_step[-1]
    assert all(np.isfinite(c.train_loss[:-1]))
    assert r.test_loss is None and r.test_accuracy is None  # no test evaluation of a diverged trial
    # in a batch, the diverging member stops where it stops alone; the other trains on
    good = dataclasses.replace(bad, optimizer_hparams=(("step_size", 0.05),), seed=1)
    rb = trainer.run_trials_batched([bad, good], dataset=digits, measure_perf=False)
    assert rb[0].status == "diverged" and rb[0].diverged_step == r.diverged_step
    assert rb[1].status == "finished" and len(rb[1].curves.train_loss) == 20
    assert rb[0].test_loss is None and rb[1].test_loss is not None
    alone = trainer.run_trial(good, dataset=digits, measure_perf=False)
    np.testing.assert_allclose(rb[1].curves.train_loss, alone.curves.train_loss, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_batched_equals_alone_every_optimizer(opt, digits):
    specs = [make_spec(optimizer=opt, seed=0, optimizer_hparams={"step_size": 0.01}),
             make_spec(optimizer=opt, seed=5, optimizer_hparams={"step_size": 0.003})]
    batched = trainer.run_trials_batched(specs, dataset=digits, measure_perf=False)
    for spec, rb in zip(specs, batched, strict=True):
        ra = trainer.run_trial(spec, dataset=digits, measure_perf=False)
        assert rb.spec == spec and rb.status == ra.status == "finished"
        assert rb.curves.train_step == ra.curves.train_step and rb.curves.eval_step == ra.curves.eval_step
        np.testing.assert_allclose(rb.curves.train_loss, ra.curves.train_loss, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(rb.curves.eval_loss, ra.curves.eval_loss, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(rb.curves.eval_accuracy, ra.curves.eval_accuracy, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose([rb.test_loss, rb.test_accuracy], [ra.test_loss, ra.test_accuracy],
                                   rtol=RTOL, atol=ATOL)
    assert batched[0].curves.train_loss != batched[1].curves.train_loss


def test_schedule_total_steps_filled(digits):
    """cosine_decay's total_steps is the trial's budget: at the last step the rate is alpha·lr = 0,
    so with sgd the parameters stop moving; compare against an explicit schedule."""
    s = make_spec(optimizer="sgd", schedule="cosine_decay", steps=10, eval_every=10,
                  optimizer_hparams={"step_size": 0.5})
    explicit = make_spec(optimizer="sgd", schedule="cosine_decay", steps=10, eval_every=10,
                         optimizer_hparams={"step_size": 0.5}, schedule_hparams={"total_steps": 10})
    a = trainer.run_trial(s, dataset=digits, measure_perf=False)
    b = trainer.run_trial(dataclasses.replace(explicit), dataset=digits, measure_perf=False)
    assert a.curves.train_loss == b.curves.train_loss
    c = trainer.run_trial(make_spec(optimizer="sgd", steps=10, eval_every=10,
                                    optimizer_hparams={"step_size": 0.5}), dataset=digits, measure_perf=False)
    assert a.curves.train_loss[0] == c.curves.train_loss[0]
    assert a.curves.train_loss[-1] != c.curves.train_loss[-1]


def test_perf_measured_once_per_perf_key(tmp_path, monkeypatch, digits):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    # no clock check (a 10-step trial's clock is one dispatch; the check: tests/test_modeled_time.py)
    monkeypatch.setattr("harness.train.perf.CLOCK_FACTOR", float("inf"))
    cache: dict = {}
    spec = make_spec(steps=10, eval_every=10)
    r = trainer.run_trial(spec, dataset=digits, perf_cache=cache)
    p = r.perf
    assert isinstance(p, PerfResult) and list(cache.values()) == [p]
    assert p.compile_s > 0 and p.step_time_ms_p10 <= p.step_time_ms <= p.step_time_ms_p90
    assert p.examples_per_sec == pytest.approx(32 / (p.step_time_ms / 1e3))
    assert p.flops_per_step_analytic and p.flops_per_step
    assert 0.5 < p.flops_per_step / p.flops_per_step_analytic < 2.0
    assert 0 < p.utilization < 1.5 and p.peak_flops > 0
    # another seed and step size: same perf key, no new measurement
    r2 = trainer.run_trial(dataclasses.replace(spec, seed=9, optimizer_hparams=(("step_size", 0.1),)),
                           dataset=digits, perf_cache=cache)
    assert r2.perf is p and len(cache) == 1


def test_should_batch_rule_and_errors(monkeypatch, digits, tmp_path):
    a, b = make_spec(seed=0), make_spec(seed=1, optimizer_hparams={"step_size": 0.5})
    other = make_spec(batch_size=16)
    monkeypatch.delenv("HARNESS_BATCH", raising=False)  # measured (harness.batching; tests/test_batching.py)
    monkeypatch.setattr(batching, "_MEM", {})
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(batching, "measure_speedup", lambda specs: (1.5, 3))
    assert trainer.should_batch([a, b]) is True
    monkeypatch.setattr(batching, "_MEM", {})
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "other"))
    monkeypatch.setattr(batching, "measure_speedup", lambda specs: (0.8, 3))
    assert trainer.should_batch([a, b]) is False
    assert trainer.should_batch([a]) is False
    assert trainer.should_batch([a, other]) is False
    monkeypatch.setenv("HARNESS_BATCH", "always")
    assert trainer.should_batch([a, b]) is True and trainer.should_batch([a, other]) is False
    monkeypatch.setenv("HARNESS_BATCH", "never")
    assert trainer.should_batch([a, b]) is False
    with pytest.raises(ValueError, match="cannot share a batch"):
        trainer.run_trials_batched([a, other], dataset=digits, measure_perf=False)
    with pytest.raises(KeyError, match="unknown optimizer 'adamm'"):
        trainer.run_trial(make_spec(optimizer="adamm"), dataset=digits, measure_perf=False)


@pytest.mark.slow  # compiling the conv autoencoder costs ~10 s of CPU
def test_reconstruction_task_targets_are_inputs(digits):
    """An autoencoder trains against its inputs; without an accuracy metric accuracy is nan."""
    spec = make_spec(model="autoencoder", model_hparams={"width": 4}, steps=2, eval_every=2,
                     steps_per_dispatch=2, batch_size=8, target={"metric": "valid/loss", "value": 1e9,
                                                                  "mode": "min"})
    r = trainer.run_trial(spec, dataset=digits, measure_perf=False)
    assert r.status == "finished" and all(np.isfinite(r.curves.train_loss))
    assert all(np.isnan(a) for a in r.curves.eval_accuracy) and r.test_accuracy is None
    assert set(r.curves.eval_metrics) == {"mse"} and set(r.test_metrics) == {"mse"}
    assert r.curves.eval_metrics["mse"] == pytest.approx(r.curves.eval_loss)  # its loss is its mse
    assert r.steps_to_target == 2  # met at step 0 (any finite loss): reached at the next one meeting it
    # the eval loss is the MSE of reconstructing the validation inputs, computed by hand at step 0
    model = MODELS["autoencoder"](input_shape=(8, 8, 1), num_classes=10, width=4)
    k_init = jax.random.split(jax.random.PRNGKey(0), 3)[0]
    _, params, state = model.init(k_init, (1, 8, 8, 1))
    x = jnp.asarray(digits.x_valid)
    want = float(model.loss(model.apply(params, state, x, train=False)[0], x))
    np.testing.assert_allclose(r.curves.eval_loss[0], want, rtol=1e-5)


def test_uneven_chunks_follow_eval_points(digits):
    """steps=7, eval_every=5, K=3 runs chunks 3, 2 | 2; the result does not depend on K."""
    spec = make_spec(steps=7, eval_every=5, steps_per_dispatch=3, seed=4)
    progress = []
    r = trainer.run_trial(spec, dataset=digits, measure_perf=False,
                          on_progress=lambda d, t: progress.append(d))
    assert progress == [3, 5, 7] and r.curves.eval_step == [0, 5, 7]
    assert r.curves.train_step == list(range(1, 8))
    other = trainer.run_trial(dataclasses.replace(spec, steps_per_dispatch=7), dataset=digits,
                              measure_perf=False)
    np.testing.assert_allclose(other.curves.train_loss, r.curves.train_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(other.curves.eval_loss, r.curves.eval_loss, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model,opt,schedule,T", [
    ("mlp", "adam", "cosine_decay", None), ("mlp", "momentum", "constant", 2),
    ("cnn", "sgd", "constant", None), ("cnn", "adam", "cosine_decay", 2)])
def test_two_part_chunk_equals_one_jitted_chunk(model, opt, schedule, T, digits):
    """A one-device chunk is the shared batch-order program then the updates. Against
    the whole chunk jitted as one function (as every chunk was compiled before): the same losses
    and the same state to the bit, over 8 chunks of 50 updates of 200 examples (1,150 training
    examples: chunks straddle epochs and carry the permutation), alone and vmapped over 2."""
    from harness.train import program

    hp = {"width": 8, "hidden": 16} if model == "cnn" else {"width": 16, "depth": 1}
    spec = make_spec(model=model, optimizer=opt, schedule=schedule, steps=400, batch_size=200,
                     model_hparams=hp, optimizer_hparams={"step_size": 0.01})
    prog = program.program_for(spec, digits)
    e = prog.entry

    def fresh():
        states = [prog.init(jax.random.PRNGKey(seed), 0.01)[0] for seed in (3, 4)]
        return states[0] if T is None else jax.tree.map(lambda *a: jnp.stack(a), *states)

    def whole(s, t, x, y):
        return prog.chunk(s, t, x, y, n=50)

    one = jax.jit(whole if T is None else jax.vmap(whole, in_axes=(0, None, None, None)))
    two, _ = prog.get_chunk(T, 50, fresh(), jnp.int32(0), e.x_train, e.y_train)
    assert isinstance(two, program.Chunk)
    a, b = fresh(), fresh()
    for start in range(0, 400, 50):
        a, loss_a = one(a, jnp.int32(start), e.x_train, e.y_train)
        b, loss_b = two(b, jnp.int32(start), e.x_train, e.y_train)
        np.testing.assert_array_equal(np.asarray(loss_a), np.asarray(loss_b))
    assert int(np.max(np.asarray(b.perm_epoch))) == (400 * 200 - 1) // digits.num_train  # 69 epochs
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_batch_order_program_is_shared_by_optimizers_and_schedules(digits):
    """One order program per (T, chunk length, batch size, training split): the chunks of two
    optimizers and two schedules on digits use the very same executable."""
    from harness.train import program

    exes = []
    for opt, schedule in (("sgd", "constant"), ("adam", "cosine_decay")):
        spec = make_spec(optimizer=opt, schedule=schedule, steps=30, batch_size=48, steps_per_dispatch=7)
        prog = program.program_for(spec, digits)
        st = prog.init(jax.random.PRNGKey(0), 0.01)[0]
        exe, _ = prog.get_chunk(None, 7, st, jnp.int32(0), prog.entry.x_train, prog.entry.y_train)
        exes.append(exe.order_exe)
    assert exes[0] is exes[1]
    assert (None, 7, 48, digits.num_train) == next(k[:4] for k in program.ORDERS if k[2] == 48)
