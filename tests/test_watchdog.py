"""The per-dispatch limit's two sides (``harness.core.watchdog``) and which trials run apart
(``harness.execute.isolation``), on hand-written boards and specs; the sweep that hangs and exits
for real is ``tests/test_user_code_bounds.py``."""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest

from harness.core import watchdog
from harness.core.spec import TrialSpec
from harness.execute import isolation


@pytest.fixture
def board():
    b = watchdog.new_board(mp.get_context("spawn"))
    watchdog.install(b)
    yield b
    watchdog.install(None)


def test_a_dispatch_is_overdue_only_while_it_runs_past_the_limit(board):
    assert watchdog.overdue(board, 2.0) is None and watchdog.last_dispatch(board) == ""
    with watchdog.dispatch("training chunk", 40):
        t0 = board[0]
        assert watchdog.overdue(board, 2.0, now=t0 + 2.0) is None
        assert watchdog.overdue(board, 2.0, now=t0 + 2.5) == (
            "its training chunk at step 40 did not return within 2 s (dispatch_timeout_s: 2)")
        assert watchdog.last_dispatch(board) == "during its training chunk at step 40"
    assert board[0] == 0.0 and watchdog.overdue(board, 2.0, now=time.monotonic() + 99) is None
    assert watchdog.last_dispatch(board) == "between dispatches, after its training chunk at step 40"
    with watchdog.dispatch("training chunk", 50):
        t0 = board[0]
        with watchdog.untimed():  # a compile: not timed, the dispatch's clock starts after it
            assert board[0] == 0.0 and watchdog.overdue(board, 2.0, now=t0 + 99) is None
            time.sleep(0.01)
        assert board[0] > t0 and watchdog.last_dispatch(board) == "during its training chunk at step 50"
    with watchdog.untimed():  # between dispatches: nothing to pause
        assert board[0] == 0.0
    assert board[0] == 0.0
    with pytest.raises(ValueError), watchdog.dispatch("nap"):
        pass


def _spec(**kw) -> TrialSpec:
    return TrialSpec(sweep="s", model="mlp", optimizer="sgd", schedule="constant", dataset="digits", seed=0,
                     steps=10, batch_size=8, eval_every=5, **kw)


def test_trials_with_user_code_and_only_those_run_apart(board):
    plain, opt, model, lib = (_spec(), _spec(optimizer_source="x.py:make"), _spec(model_source="n.py:net"),
                              _spec(optimizer_source="optax:adam"))
    assert [isolation.isolated(s) for s in (plain, opt, model, lib)] == [False, True, True, False]
    assert isolation.split([[plain], [opt, plain], [lib], [model]]) == ([0, 2], [1, 3])
    with watchdog.dispatch("evaluation", 7):
        late = board[0] + 10
        assert isolation.hang(board, [plain], 1.0) is None  # built-ins are never timed
        assert isolation.hang(board, [opt], None) is None
        why = watchdog.overdue(board, 1.0, now=late)
        assert why == "its evaluation at step 7 did not return within 1 s (dispatch_timeout_s: 1)"
    assert isolation.hang_reason([opt, model], why) == (
        f"hung: {why}; its worker process was killed (source: x.py:make, n.py:net)")
    assert isolation.death_where(board) == ", the last between dispatches, after its evaluation at step 7"
    assert isolation.death_where(watchdog.new_board(mp.get_context("spawn"))) == ""
