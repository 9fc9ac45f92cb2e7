"""AlgoPerf submissions on the harness (``harness/train/algoperf``, ``harness/config/algoperf_space.py``):
an AlgoPerf-API NAdamW equals the built-in ``nadamw`` + ``warmup_cosine_decay``, ``prepare_for_eval``'s
parameters are the evaluated ones, loading errors, the batch size's source, bit-identical resume and
the search-space conversion. The submissions are files under ``tests/algoperf_submissions/``."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from interrupting import Interrupt, Interrupting

from harness.config.algoperf_space import (
    load_algoperf_space,
    points_from_algoperf,
    search_space_from_algoperf,
)
from harness.core.source import SourceError, parse_source
from harness.core.spec import TrialSpec
from harness.train import batching
from harness.train import loop as trainer
from harness.train.algoperf.submission import load_submission
from harness.train.checkpoint import UnitCheckpoints, parse_every

HERE = Path(__file__).parent
SUBS = HERE / "algoperf_submissions"
#: The shipped example submission: the parity test runs exactly what users copy.
EXAMPLES = HERE.parent / "experiments" / "submissions"
NADAMW_HP = {"learning_rate": 3e-3, "one_minus_beta1": 0.1, "beta2": 0.99, "weight_decay": 0.01,
             "warmup_factor": 0.1}


@pytest.fixture(scope="module")
def mnist1d():
    from harness.data.sources import load_dataset

    return load_dataset("mnist1d")


def algoperf_spec(path: Path, hparams: dict, **kw) -> TrialSpec:
    ref = parse_source(f"algoperf:{path.name}", str(path.parent))
    base = dict(sweep="ap", model="mlp", dataset="mnist1d", seed=0, steps=100, batch_size=32,
                eval_every=25, steps_per_dispatch=25, model_hparams={"width": 32, "depth": 1},
                optimizer=path.stem, schedule="none", optimizer_hparams=hparams,
                optimizer_source=ref.text, optimizer_source_hash=ref.digest,
                optimizer_source_ref=(ref.kind, ref.target, ref.function, ref.digest, ref.code))
    base.update(kw)
    return TrialSpec.make(**base)


def curves(r) -> tuple:
    c = r.curves
    return (c.train_step, c.train_loss, c.eval_step, c.eval_loss, c.eval_accuracy, c.eval_metrics,
            r.status, r.diverged_step, r.steps_to_target, r.final_valid_loss, r.final_valid_accuracy,
            r.test_loss, r.test_accuracy)


# --------------------------------------------------------------------------- a. NAdamW parity


def test_algoperf_nadamw_equals_builtin_nadamw_with_warmup_cosine(mnist1d):
    """The AlgoPerf-API NAdamW (own jitted step, warm-up = int(0.1 · step_hint)) against the built-in
    ``nadamw`` with ``warmup_cosine_decay(warmup_steps=10)`` at matched hyperparameters, same seed,
    same data order: every validation and train value within rtol 1e-5 (measured: valid loss max
    abs 1.2e-7, rel 6.0e-8; train loss max abs 4.8e-7, rel 1.7e-7). Both at the same initial
    parameters (step-0 evaluation equal exactly)."""
    ap = trainer.run_trial(algoperf_spec(EXAMPLES / "nadamw.py", NADAMW_HP, target={"value": 0.3}),
                           dataset=mnist1d)
    native = trainer.run_trial(TrialSpec.make(
        sweep="ap", model="mlp", dataset="mnist1d", seed=0, steps=100, batch_size=32, eval_every=25,
        steps_per_dispatch=25, model_hparams={"width": 32, "depth": 1}, optimizer="nadamw",
        schedule="warmup_cosine_decay", schedule_hparams={"warmup_steps": 10}, target={"value": 0.3},
        optimizer_hparams={"step_size": 3e-3, "b1": 1 - 0.1, "b2": 0.99, "weight_decay": 0.01}),
        dataset=mnist1d, measure_perf=False)
    assert ap.status == native.status == "finished"
    a, n = ap.curves, native.curves
    assert a.eval_step == n.eval_step == [0, 25, 50, 75, 100]
    assert a.train_step == n.train_step == list(range(1, 101))
    assert a.eval_loss[0] == n.eval_loss[0]
    np.testing.assert_allclose(a.eval_loss, n.eval_loss, rtol=1e-5, atol=0)
    np.testing.assert_allclose(a.eval_accuracy, n.eval_accuracy, rtol=0, atol=2 / 800)
    np.testing.assert_allclose(a.train_loss, n.train_loss, rtol=1e-5, atol=0)
    np.testing.assert_allclose(ap.test_loss, native.test_loss, rtol=1e-5)
    assert ap.steps_to_target == native.steps_to_target
    assert ap.extra["optimizer_api"] == "algoperf" and ap.extra["workload_name"] == "mnist1d_mlp"
    assert ap.extra["batch_size"] == 32 and ap.extra["batch_size_source"] == "workload"
    # clock and throughput: compile apart, one timed row per update, a PerfResult of the update calls
    assert ap.compile_seconds > 0 and 0 < ap.train_seconds < ap.compile_seconds
    # its time budget: the same clocks, and the throughput protocol's seconds
    budget = ap.extra["time"]
    assert budget["compile"] == ap.compile_seconds and budget["throughput"] > 0
    assert budget["train"] == pytest.approx(ap.train_seconds, rel=1e-9)
    assert set(native.extra["time"]) == {"compile", "train", "eval", "throughput"}
    assert native.extra["time"]["throughput"] == 0.0 < native.extra["time"]["eval"]  # measure_perf off
    assert len(a.train_wall_s) == 100 and a.train_wall_s == sorted(a.train_wall_s)
    assert ap.perf is not None and ap.perf.timed_steps == 96 and ap.perf.warmup_steps == 3
    assert ap.perf.step_time_ms > 0 and ap.perf.examples_per_sec > 0 and ap.perf.flops_per_step > 0


# --------------------------------------------------------------------------- b. prepare_for_eval


def test_prepare_for_eval_params_are_the_evaluated_ones(mnist1d):
    """The EMA submission's evaluations are at the averaged parameters it returns (the loss computed
    here from those parameters with the model's own loss), which differ from the raw ones."""
    from harness.train.algoperf.runner import entry_for

    spec = algoperf_spec(SUBS / "ema.py", {"learning_rate": 0.05, "ema_decay": 0.9}, steps=30, eval_every=10)
    r = trainer.run_trial(spec, dataset=mnist1d, measure_perf=False)
    mod = load_submission(parse_source("algoperf:ema.py", str(SUBS)))
    got = [(s, p) for s, p in mod.EVAL_PARAMS[-4:]]
    assert [s for s, _ in got] == r.curves.eval_step == [0, 10, 20, 30]
    entry = entry_for(spec, mnist1d)
    _, mstate = entry.init_params(jax.random.PRNGKey(0))

    def loss_at(params, x, y):
        out, _ = entry.model.apply(params, mstate, x, train=False)
        return float(entry.model.loss(out, y))

    for (_, params), valid in zip(got, r.curves.eval_loss, strict=True):
        assert loss_at(params, entry.x_valid, entry.y_valid) == pytest.approx(valid, rel=1e-6)
    assert loss_at(got[-1][1], entry.x_test, entry.y_test) == pytest.approx(r.test_loss, rel=1e-6)
    assert r.extra["prepare_for_eval"] is True


# --------------------------------------------------------------------------- c. loading errors


def test_missing_function_or_not_python_is_a_source_error(tmp_path):
    with pytest.raises(SourceError) as e:
        load_submission(parse_source("algoperf:missing.py", str(SUBS)))
    assert str(e.value) == ("source 'algoperf:missing.py': AlgoPerf submission missing.py defines no "
                            "update_params, data_selection (a submission defines get_batch_size, "
                            "init_optimizer_state, update_params, data_selection)")
    (tmp_path / "notpython.py").write_text("this file is not Python\n")
    with pytest.raises(SourceError) as e:
        load_submission(parse_source("algoperf:notpython.py", str(tmp_path)))
    assert str(e.value) == ("source 'algoperf:notpython.py': running notpython.py raised SyntaxError: "
                            "invalid syntax (notpython.py, line 1)")
    (tmp_path / "sub.txt").write_text("x = 1\n")
    with pytest.raises(SourceError) as e:
        parse_source("algoperf:sub.txt", str(tmp_path))
    assert str(e.value) == ("source 'algoperf:sub.txt': an AlgoPerf submission is a .py file "
                            "(algoperf:PATH.py)")


def test_standins_are_what_submissions_import():
    mod = load_submission(parse_source("algoperf:nadamw.py", str(EXAMPLES)))
    if "algoperf" in sys.modules and getattr(sys.modules["algoperf"], "__path__", None) == []:
        from harness.train.algoperf import standin_spec as standin

        assert mod.spec is standin and sys.modules["algoperf.spec"] is standin
        assert standin.ShapeTuple((2, 3)).shape_tuple == (2, 3)
        assert standin.ForwardPassMode.TRAIN.name == "TRAIN"


# --------------------------------------------------------------------------- d. batch size


def test_get_batch_size_decides_when_it_knows_the_workload(mnist1d, tmp_path):
    """``batchsize.py`` imports the example NAdamW beside it (a submission may import its
    neighbours): both are copied into one folder."""
    import shutil

    shutil.copy(EXAMPLES / "nadamw.py", tmp_path)
    sub = Path(shutil.copy(SUBS / "batchsize.py", tmp_path))
    known = trainer.run_trial(algoperf_spec(sub, NADAMW_HP, steps=4, eval_every=4),
                              dataset=mnist1d, measure_perf=False)
    assert known.extra["batch_size"] == 48 and known.extra["batch_size_source"] == "submission"
    other = trainer.run_trial(algoperf_spec(sub, NADAMW_HP, steps=4, eval_every=4,
                                            workload="mnist1d_other"), dataset=mnist1d, measure_perf=False)
    assert other.extra["batch_size"] == 32 and other.extra["batch_size_source"] == "workload"
    assert other.extra["workload_name"] == "mnist1d_other"
    assert known.curves.train_loss != other.curves.train_loss


def test_input_queue_follows_the_native_data_order(mnist1d):
    """Batch p of the queue is stream positions [p·B, (p+1)·B) of the epochs' permutations
    (an epoch boundary inside a batch included)."""
    from harness.train.algoperf.runner import entry_for
    from harness.train.algoperf.workload import InputQueue

    spec = algoperf_spec(EXAMPLES / "nadamw.py", NADAMW_HP)
    entry = entry_for(spec, mnist1d)
    key = jax.random.split(jax.random.PRNGKey(0), 3)[1]
    q = InputQueue(entry, spec, key, 1000)
    N = entry.num_train
    stream = np.concatenate([np.asarray(jax.random.permutation(jax.random.fold_in(key, e), N))
                             for e in range(2)])
    for p in range(4):
        b = next(q)
        want = np.asarray(entry.y_train)[stream[p * 1000:(p + 1) * 1000]]
        np.testing.assert_array_equal(np.asarray(b["targets"]), want)
        assert b["weights"].shape == (1000,) and float(b["weights"].min()) == 1.0


def test_algoperf_trials_are_never_vmapped():
    specs = [algoperf_spec(EXAMPLES / "nadamw.py", NADAMW_HP, seed=s) for s in (0, 1)]
    dec = batching.decide(specs)
    assert not dec.batch and "AlgoPerf" in dec.label


# --------------------------------------------------------------------------- e. resume




def test_interrupted_then_resumed_equals_uninterrupted(tmp_path, mnist1d):
    """Dropout (the update rng), the EMA state that prepare_for_eval hands back, and the queue's
    position all survive a checkpoint: a trial interrupted after step 12 (checkpoint every 7 steps:
    the newest at 7) or 23 (at 21, after the evaluation at 20) resumes to the same curves, bit for bit."""
    spec = algoperf_spec(SUBS / "ema.py", {"learning_rate": 0.05, "ema_decay": 0.9}, steps=30, eval_every=10,
                         model_hparams={"width": 32, "depth": 1, "dropout": 0.2},
                         target={"metric": "valid/loss", "value": 2.0, "mode": "min"})
    ref = trainer.run_trial(spec, dataset=mnist1d, measure_perf=False)
    every = parse_every(7)
    for stop, resumed in ((12, 7), (23, 21)):
        d = str(tmp_path / f"s{stop}")
        ck = Interrupting(d, [spec.trial_id], None, every, stop_after=stop)
        with pytest.raises(Interrupt):
            trainer.run_trial(spec, dataset=mnist1d, measure_perf=False, checkpoints=ck)
        ck.release()
        again = UnitCheckpoints(d, [spec.trial_id], None, every)
        res = trainer.run_trial(spec, dataset=mnist1d, measure_perf=False, checkpoints=again)
        assert again.resumed_from == resumed
        assert curves(res) == curves(ref)
        assert res.extra["checkpoint"]["resumed_from_step"] == resumed
        again.cleanup()


# --------------------------------------------------------------------------- f. search space


def test_search_space_conversion():
    space = {"learning_rate": {"min": 1e-4, "max": 1e-2, "scaling": "log"},
             "one_minus_beta1": {"min": 0.01, "max": 0.1, "scaling": "linear"},
             "beta2": {"feasible_points": [0.999]},
             "label_smoothing": {"feasible_points": [0.1, 0.2]},
             "layers": {"min": 1, "max": 4, "scaling": "discrete"},
             "betas": {"feasible_points": [[0.9, 0.99]]},
             "fixed": {"min": 0.5, "max": 0.5, "scaling": "linear"}}
    assert search_space_from_algoperf(space) == {
        "learning_rate": {"log_uniform": [1e-4, 1e-2]}, "one_minus_beta1": {"uniform": [0.01, 0.1]},
        "beta2": 0.999, "label_smoothing": {"choice": [0.1, 0.2]}, "layers": {"int_uniform": [1, 4]},
        "betas": {"value": [0.9, 0.99]}, "fixed": 0.5}
    assert points_from_algoperf([{"lr": 0.1, "b": [1, 2]}, {"lr": 0.2}]) == [
        {"lr": 0.1, "b": {"value": [1, 2]}}, {"lr": 0.2}]


def test_example_search_space_file_converts_and_validates():
    from harness.config.search import parse_distribution

    got = load_algoperf_space(str(HERE.parent / "experiments/submissions/tuning_search_space.json"))
    assert got["beta2"] == 0.999 and got["warmup_factor"] == {"choice": [0.05, 0.1]}
    for v in got.values():
        if isinstance(v, dict):
            parse_distribution(v)


@pytest.mark.parametrize("obj, msg", [
    ({"lr": {"feasible_points": []}}, "search space 'lr': feasible_points must be a non-empty list, got []"),
    ({"lr": {"feasible_points": [1], "min": 0}},
     "search space 'lr': feasible_points cannot be combined with min"),
    ({"lr": {"min": 0.0, "max": 1.0, "scaling": "log"}},
     "search space 'lr': log scaling needs min > 0, got 0.0"),
    ({"lr": {"min": 2.0, "max": 1.0, "scaling": "linear"}}, "search space 'lr': min 2.0 exceeds max 1.0"),
    ({"lr": {"min": 0.1, "max": 1.0}},
     "search space 'lr': scaling must be one of log, linear, discrete, got None"),
    ({"lr": {"min": 0.1, "max": 1.0, "scaling": "cubic"}},
     "search space 'lr': scaling must be one of log, linear, discrete, got 'cubic'"),
    ({"lr": {"min": "a", "max": 1.0, "scaling": "log"}},
     "search space 'lr': min and max must be finite numbers, got 'a' and 1.0"),
    ({"n": {"min": 1.5, "max": 3, "scaling": "discrete"}},
     "search space 'n': discrete scaling needs integer min and max, got 1.5 and 3"),
    ({"lr": {"max": 1.0}}, "search space 'lr': expected {\"feasible_points\": [...]} or {\"min\": a, "
                           "\"max\": b, \"scaling\": \"log\" | \"linear\" | \"discrete\"}, got keys ['max']"),
    ({"lr": {"min": 0.1, "max": 1.0, "scaling": "log", "step": 2}},
     "search space 'lr': unknown keys ['step']; expected {\"feasible_points\": [...]} or {\"min\": a, "
     "\"max\": b, \"scaling\": \"log\" | \"linear\" | \"discrete\"}"),
    ({"lr": 0.1}, "search space 'lr': 0.1 is not a mapping; expected {\"feasible_points\": [...]} or "
                  "{\"min\": a, \"max\": b, \"scaling\": \"log\" | \"linear\" | \"discrete\"}"),
    ({}, "search space: expected a non-empty mapping of hyperparameter names, got {}"),
    ({"not-a-name": {"feasible_points": [1]}},
     "search space: hyperparameter name 'not-a-name' is not an identifier"),
    ([{"lr": 0.1}], "search space: a list of fixed points, not a mapping of ranges; convert it with "
                    "points_from_algoperf (one hparams mapping per point)"),
])
def test_malformed_search_spaces_have_one_line_messages(obj, msg):
    with pytest.raises(ValueError) as e:
        search_space_from_algoperf(obj)
    assert str(e.value) == msg and "\n" not in msg
