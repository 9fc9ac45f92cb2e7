"""The one training loop (:class:`harness.train.loop.TrialLoop`) around an update rule: evaluation
points, the test split once, progress, checkpoint offers and a rule that declares training
complete, driven by a rule of plain numbers (no JAX program), so every value is known by hand."""

from __future__ import annotations

import numpy as np
import pytest

from harness.train.loop import TrialLoop
from tests.conftest import make_spec


class NumberRule:
    """Update ``i`` (0-based) has train loss ``1/(i+1)``; the validation loss at step ``s`` is
    ``1/(s+1)``, the test loss ``2/(s+1)``, the accuracy ``s/100``; ``complete_at``: the step at
    which :meth:`run` says training is complete."""

    def __init__(self, max_chunk: int | None = None, complete_at: int | None = None):
        self.max_chunk, self.complete_at = max_chunk, complete_at
        self.compile_s, self.step = 0.0, 0
        self.calls: list[tuple] = []

    def run(self, step, n, next_n):
        self.calls.append(("run", step, n))
        if step == self.complete_at:
            return None
        self.step = step + n
        return np.array([[1.0 / (i + 1) for i in range(step, step + n)]]), 0.5 * n

    def before_eval(self, step):
        self.calls.append(("before_eval", step))

    def evaluate(self, split):
        scale = 1.0 if split == "valid" else 2.0
        return np.array([scale / (self.step + 1)]), {"accuracy": np.array([self.step / 100])}

    def on_eval(self, step, loss, metrics):
        self.calls.append(("on_eval", step, loss, metrics["accuracy"]))

    def checkpoint_state(self):
        return {"step": self.step}

    def params_fn(self, state):
        return state

    def restore(self, state, step, wall):  # pragma: no cover - nothing restores here
        raise AssertionError("no checkpoint to restore")

    def resumed(self, tracks):  # pragma: no cover
        raise AssertionError("no checkpoint to restore")


class Offers:
    """Checkpoints that record every offer and never hold one."""

    def __init__(self):
        self.offers: list[tuple] = []

    def restore(self, state, tracks, params_fn):
        return None

    def after_chunk(self, step, wall, state, tracks, params_fn, done=False):
        self.offers.append((step, state["step"], done))

    def finish(self, step, wall, state, tracks, params_fn):
        self.offers.append(("finish", step))


def _loop(rule, ck=None, **spec):
    spec = make_spec(**{"steps": 10, "eval_every": 5, "steps_per_dispatch": 5, **spec})
    return TrialLoop([spec], rule, ck)


def test_the_loop_runs_chunks_to_each_evaluation_point_and_tests_once():
    rule, progress = NumberRule(), []
    run = _loop(rule)
    run.train(lambda s, t: progress.append((s, t)))
    run.record_test()
    c = run.tracks[0].curves
    assert [x for x in rule.calls if x[0] == "run"] == [("run", 0, 5), ("run", 5, 5)]
    assert c.train_step == list(range(1, 11))
    assert c.train_loss == pytest.approx([1 / k for k in range(1, 11)], rel=1e-15)
    assert c.train_wall_s == pytest.approx([0.5 * k for k in range(1, 11)])
    assert c.eval_step == [0, 5, 10] and c.eval_loss == pytest.approx([1.0, 1 / 6, 1 / 11])
    assert c.eval_accuracy == pytest.approx([0.0, 0.05, 0.10])
    assert [x[1] for x in rule.calls if x[0] == "before_eval"] == [0, 5, 10]
    assert [x[1:3] for x in rule.calls if x[0] == "on_eval"] == [(0, 1.0), (5, pytest.approx(1 / 6)),
                                                                 (10, pytest.approx(1 / 11))]
    assert run.tracks[0].test_loss == pytest.approx(2 / 11)
    assert progress == [(5, 10), (10, 10)] and run.step == 10 and run.wall == 5.0


def test_a_one_step_rule_is_offered_a_checkpoint_every_step_and_reports_progress_per_dispatch():
    rule, ck, progress = NumberRule(max_chunk=1), Offers(), []
    run = _loop(rule, ck)
    run.train(lambda s, t: progress.append(s))
    assert [x[1:] for x in rule.calls if x[0] == "run"] == [(i, 1) for i in range(10)]
    assert ck.offers == [(s, s, s == 10) for s in range(1, 11)] + [("finish", 10)]
    assert progress == [5, 10]


@pytest.mark.parametrize("complete_at,evals", [(7, [0, 5, 7]), (5, [0, 5])])
def test_a_rule_that_completes_early_gets_one_last_evaluation_unless_the_step_has_one(complete_at, evals):
    rule, ck = NumberRule(max_chunk=1, complete_at=complete_at), Offers()
    run = _loop(rule, ck)
    run.train(None)
    run.record_test()
    c = run.tracks[0].curves
    assert c.train_step == list(range(1, complete_at + 1)) and c.eval_step == evals
    assert [x[1] for x in rule.calls if x[0] == "before_eval"] == evals
    assert run.tracks[0].test_loss == pytest.approx(2 / (complete_at + 1))
    assert ck.offers[-1] == ("finish", complete_at) and run.step == complete_at
