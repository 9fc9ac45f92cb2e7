"""Targets chosen after the fact, on a real store: the target is not part of a trial's id, a store
written while it was (every trial id hashed with its target, as the code before this change wrote
them) keeps its trials done, and ``report --target`` / ``results(target=)`` read steps to another
target off the stored curves, equal to a recomputation from MLflow's own metric histories."""

from __future__ import annotations

import math
from unittest import mock

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

import harness
from harness.cli import app
from harness.core.names import M_STEPS_TO_TARGET
from harness.core.reached import first_reached, parse_target, stored_targets
from harness.core.spec import Target, TrialSpec
from tests.sweep_store import finished_ids

CONFIG = {
    "name": "retarget", "models": [{"name": "mlp", "hparams": {"width": 16, "depth": 1}}],
    "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}},
                   {"name": "adam", "hparams": {"step_size": 0.003}}],
    "schedules": ["constant"], "datasets": ["digits"], "seeds": 2, "batch_size": 64,
    "budget": {"steps": 100}, "eval_every": 20, "steps_per_dispatch": 20,
    "target": {"metric": "valid/accuracy", "value": 0.8}, "measure_perf": False,
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store written with every trial id hashed with its target (the ids of the code before the
    target left the identity: ``legacy_trial_id``), trained in-process."""
    d = tmp_path_factory.mktemp("retarget")
    uri = f"sqlite:///{d / 'mlflow.db'}"
    with mock.patch.object(TrialSpec, "trial_id", property(lambda s: s.legacy_trial_id)):
        run = harness.sweep(CONFIG, tracking_uri=uri, quiet=True, executor="inprocess")
    assert run.counts["finished"] == 4 and run.counts["skipped"] == 0
    return d / "mlflow.db", uri


def _moved(value: float) -> dict:
    return {**CONFIG, "target": {"metric": "valid/accuracy", "value": value}}


def _recomputed(uri: str, target: Target) -> dict[tuple[str, int], int | None]:
    """Steps to ``target`` per (optimizer, seed), from ``MlflowClient.get_metric_history``."""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(CONFIG["name"])
    out = {}
    for r in client.search_runs([exp.experiment_id], "tags.`harness.kind` = 'trial'"):
        hist = sorted((h.step, h.value) for h in client.get_metric_history(r.info.run_id, target.metric))
        first = next((s for s, v in hist if s > 0 and v >= target.value), None)
        out[(r.data.tags["optimizer"], int(r.data.tags["seed"]))] = first
    return out


def test_a_store_with_the_target_in_its_ids_stays_done_with_the_target_moved(store):
    db, uri = store
    before = finished_ids(db)
    same = harness.sweep(CONFIG, tracking_uri=uri, quiet=True, executor="inprocess")
    moved = harness.sweep(_moved(0.7), tracking_uri=uri, quiet=True, executor="inprocess")
    assert same.counts["skipped"] == moved.counts["skipped"] == 4
    assert finished_ids(db) == before  # nothing trained, no run added
    # the summary of the moved target reads its steps off the curves: as MLflow holds them
    want = _recomputed(uri, Target("valid/accuracy", 0.7, "max"))
    got = {(o.optimizer, o.seed): o.steps_to_target for o in moved.summary.outcomes}
    assert got == want and any(v is not None for v in want.values())


def test_results_with_another_target_equal_a_recomputation_from_the_metric_histories(store):
    _db, uri = store
    own = harness.results(CONFIG["name"], tracking_uri=uri)
    again = harness.results(CONFIG["name"], tracking_uri=uri, target="valid/accuracy=0.8")
    logged = own.trials.set_index("trial_id")[M_STEPS_TO_TARGET]
    # the rule applied to the stored curve gives back what training logged, seed by seed
    assert again.trials.set_index("trial_id")[M_STEPS_TO_TARGET].equals(logged)
    for value in (0.6, 0.75, 0.99):
        t = Target("valid/accuracy", value, "max")
        res = harness.results(CONFIG["name"], tracking_uri=uri, target=f"valid/accuracy={value}")
        got = {(r["optimizer"], int(r["seed"])): _int(r[M_STEPS_TO_TARGET]) for _, r in res.trials.iterrows()}
        assert got == _recomputed(uri, t)
        assert set(res.trials["target_value"]) == {value}
    assert harness.results(CONFIG["name"], tracking_uri=uri, target="valid/accuracy=0.99").trials[
        M_STEPS_TO_TARGET].isna().all()


def _int(x: float) -> int | None:
    return None if math.isnan(x) else int(x)


def test_report_target_on_a_metric_the_runs_do_not_log_is_one_line_and_exit_2(store, tmp_path):
    _db, uri = store
    runner = CliRunner()
    out = runner.invoke(app, ["report", "-e", CONFIG["name"], "--tracking-uri", uri, "--target",
                              "valid/bits_per_byte=1.2", "-f", "md", "-o", str(tmp_path / "b.md")])
    assert out.exit_code == 2
    assert out.output.strip().splitlines() == [
        "error: target valid/bits_per_byte=1.2: the runs of this sweep log no valid/bits_per_byte curve; a "
        "target can be moved to valid/loss, valid/accuracy; a target on it moves to valid/loss "
        "(perplexity = exp(loss), bits per byte = loss / ln 2 / bytes per token)"]
    bad = runner.invoke(app, ["report", "-e", CONFIG["name"], "--tracking-uri", uri, "--target",
                              "valid/loss"])
    assert bad.exit_code == 2
    assert bad.output.strip() == ("error: --target: a target is METRIC=VALUE, e.g. valid/loss=1.9; "
                                  "got 'valid/loss'")
    assert not (tmp_path / "b.md").exists()
    ok = runner.invoke(app, ["report", "-e", CONFIG["name"], "--tracking-uri", uri, "--target",
                             "valid/loss=1.0", "-f", "md", "-o", str(tmp_path / "b.md")])
    assert ok.exit_code == 0, ok.output
    assert len((tmp_path / "b.md").read_text().splitlines()) >= 4  # header, rule, one row an optimizer


def test_the_rule_skips_step_0_and_the_parsers_say_what_is_wrong():
    t = Target("valid/loss", 1.0, "min")
    assert first_reached([0, 10, 20], [0.5, 1.5, 0.9], t) == 2  # step 0 never counts
    assert first_reached([0, 10], [0.5, float("nan")], t) is None
    assert parse_target("eval/accuracy=0.9") == Target("valid/accuracy", 0.9, "max")
    assert parse_target("valid/perplexity=7").mode == "min"
    for bad in ("loss=1", "valid/loss=x", "valid/=1", "valid/loss=inf"):
        with pytest.raises(ValueError, match=r"valid/loss=1\.9|finite"):
            parse_target(bad)
    targets = stored_targets([{"target.metric": "valid/loss", "target.value": "2.0"},
                              {"target.metric": "valid/loss", "target.value": "2.0", "target.mode": "min"}])
    assert [(type(t.value), t.value) for t in targets] == [(float, 2.0), (int, 2)]


def test_reproduce_reads_a_trial_stored_under_its_legacy_id():
    import json
    import types

    from harness.orchestrate.reproduce_checks import stored_spec

    spec = TrialSpec.make(sweep="t", model="mlp", optimizer="adam", schedule="constant", dataset="digits",
                          seed=0, steps=20, batch_size=32, eval_every=10,
                          target={"metric": "valid/loss", "value": 1.9, "mode": "min"})
    assert spec.legacy_trial_id != spec.trial_id
    run = types.SimpleNamespace(info=types.SimpleNamespace(run_id="r1"),
                                data=types.SimpleNamespace(params=spec.flat_params()))
    text = json.dumps({"trial_id": spec.legacy_trial_id, **spec.to_dict()})
    assert stored_spec(text, run, spec.legacy_trial_id) == spec
