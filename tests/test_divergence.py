"""Divergence as the field defines it: besides a non-finite train loss, a train
loss above ``divergence_loss_factor`` (default 100) times the initial one ends the trial
``diverged`` at that step, alone and inside a vmapped batch."""

from __future__ import annotations

import pytest

from harness.core.spec import TrialSpec
from harness.data.sources import load_dataset
from harness.train import loop as trainer


def _spec(optimizer: str, step_size: float, **kw) -> TrialSpec:
    hp = {"step_size": step_size, **({"mass": 0.9} if optimizer == "momentum" else {})}
    base = dict(sweep="t", model="mlp", optimizer=optimizer, schedule="constant", dataset="digits",
                seed=0, steps=20, batch_size=64, eval_every=10, steps_per_dispatch=10,
                model_hparams={"width": 64, "depth": 2}, optimizer_hparams=hp)
    base.update(kw)
    return TrialSpec.make(**base)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


@pytest.mark.parametrize("optimizer", ["sgd", "momentum"])
def test_step_size_1e3_diverges_at_the_step_it_blows_up(digits, optimizer):
    r = trainer.run_trial(_spec(optimizer, 1e3), dataset=digits, measure_perf=False)
    # measured: step 1 (initial parameters) 2.308, step 2 2.76e6; without the rule the trial ran
    # to its budget and "finished" with train losses up to 3.9e31
    assert r.status == "diverged"
    assert r.diverged_step == 2
    assert r.curves.train_step == [1, 2]
    assert r.curves.train_loss[1] > 100 * r.curves.train_loss[0]
    assert r.reason == (f"train loss {r.curves.train_loss[1]:.4g} at step 2 exceeds 100x the initial "
                        f"train loss {r.curves.train_loss[0]:.4g}")


def test_factor_is_configurable_and_can_be_turned_off(digits):
    off = trainer.run_trial(_spec("sgd", 1e3, divergence_loss_factor=None), dataset=digits,
                            measure_perf=False)
    assert off.status == "finished" and max(off.curves.train_loss) > 1e20  # the old behaviour
    loose = trainer.run_trial(_spec("sgd", 1e3, divergence_loss_factor=1e300), dataset=digits,
                              measure_perf=False)
    assert loose.status == "finished"
    sane = trainer.run_trial(_spec("sgd", 0.1), dataset=digits, measure_perf=False)
    assert sane.status == "finished" and sane.diverged_step is None and sane.reason == ""


def test_batched_member_diverges_alone(digits):
    specs = [_spec("sgd", 1e3), _spec("sgd", 0.1)]
    bad, good = trainer.run_trials_batched(specs, dataset=digits, measure_perf=False)
    assert (bad.status, bad.diverged_step) == ("diverged", 2)
    assert "exceeds 100x the initial train loss" in bad.reason
    assert good.status == "finished" and good.curves.train_step[-1] == 20


def test_default_factor_keeps_trial_ids():
    s = _spec("sgd", 0.1)
    assert "divergence_loss_factor" not in s.to_dict()
    assert _spec("sgd", 0.1, divergence_loss_factor=100.0).trial_id == s.trial_id
    assert _spec("sgd", 0.1, divergence_loss_factor=10.0).trial_id != s.trial_id
    assert _spec("sgd", 0.1, divergence_loss_factor=None).to_dict()["divergence_loss_factor"] is None
    assert TrialSpec.from_dict(s.to_dict()) == s
    assert s.flat_params()["train.divergence_loss_factor"] == "100.0"


@pytest.mark.parametrize("optimizer,step_size,reason", [
    ("lion", 3.0, "validation loss 8.658e+04 at step 1 exceeds 100x the initial validation loss 2.389"),
    ("lion", 1e30, "non-finite validation loss at step 1")])
def test_a_last_update_that_blows_up_is_diverged(digits, optimizer, step_size, reason):
    """The train-loss rules see update k's loss before update k, so the blow-up of a trial's last
    update showed only in the evaluation after it: lion at step size 3 on digits (one update, as the
    last update of any budget) finished with a validation loss of 86,582 (36,000x the initial 2.389)
    and a test loss of 80,391; at 1e30 with NaN validation and test losses. The evaluation now takes
    the same rules (non-finite, or above the factor × the step-0 validation loss): diverged at that
    step, no test numbers."""
    spec = _spec(optimizer, step_size, steps=1, eval_every=1, steps_per_dispatch=1)
    r = trainer.run_trial(spec, dataset=digits, measure_perf=False)
    assert r.curves.train_loss == [pytest.approx(2.30816650390625)]  # the update's own loss: finite
    assert r.status == "diverged" and r.diverged_step == 1, (r.status, r.curves.eval_loss)
    assert r.reason == reason
    assert r.test_loss is None


def test_an_evaluation_inside_the_factor_keeps_the_trial_finished(digits):
    """The evaluation rule leaves a trial that trains alone: sgd at 0.1 (20 steps, 2 evaluations)."""
    r = trainer.run_trial(_spec("sgd", 0.1), dataset=digits, measure_perf=False)
    assert r.status == "finished" and r.test_loss is not None
    assert r.curves.eval_loss[-1] < r.curves.eval_loss[0]
