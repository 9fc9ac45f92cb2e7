"""A trial's batch is a recorded condition: the vmapped batch it trained in is a tag
(``harness.batch``), ``reproduce`` trains it in that batch again (and says when it cannot), and the
report flags a configuration whose outcome differs between the batchings the store holds."""

from __future__ import annotations

import pandas as pd
from mlflow import MlflowClient

import harness
from harness.core import names as N
from harness.plan.units import MAX_BATCH_TAG, batch_members
from reports.batch_flags import batching_flags
from tests.conftest import make_spec


def test_a_vmapped_trials_batch_is_tagged_and_reproduced_in_it(tmp_path, write_sweep, tracking_uri):
    """Three step sizes of one seed vmapped (``batching: on``): each run lists the three trial ids;
    ``reproduce`` trains the trial again in that batch, identical bit for bit, and says so; with a
    member's run gone it trains alone and says why."""
    cfg = write_sweep(name="batched", batching="on", seeds=[0],
                      optimizers=[{"name": "sgd", "hparams": {"step_size": [0.03, 0.1, 0.3]}}])
    run = harness.sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    ids = sorted(run.trial_ids)
    assert len(ids) == 3
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name("batched").experiment_id
    runs = {r.data.tags[N.TAG_TRIAL_ID]: r
            for r in client.search_runs([exp], "tags.`harness.kind` = 'trial'")}
    assert {r.data.tags[N.TAG_BATCH] for r in runs.values()} == {",".join(ids)}
    assert all(r.data.tags[N.TAG_BATCHING] == "vmap(3): batching on" for r in runs.values())
    again = harness.reproduce(ids[1], tracking_uri=tracking_uri, scratch=tmp_path / "a")
    assert again.identical, str(again)
    assert again.batch == "in its recorded batch of 3 (tag harness.batch), as stored"
    assert "trained in its recorded batch of 3 (tag harness.batch), as stored" in str(again)
    alone = harness.reproduce(ids[1], tracking_uri=tracking_uri, scratch=tmp_path / "b", alone=True)
    assert alone.batch == "alone, as asked"
    from typer.testing import CliRunner

    from harness.cli import app

    r = CliRunner().invoke(app, ["reproduce", ids[1], "--tracking-uri", tracking_uri, "--scratch",
                                 str(tmp_path / "cli"), "--alone"])
    assert "trained alone, as asked" in r.output.splitlines(), r.output
    client.delete_run(runs[ids[0]].info.run_id)
    lost = harness.reproduce(ids[1], tracking_uri=tracking_uri, scratch=tmp_path / "c")
    assert lost.batch.startswith(f"alone: its batch's trial {ids[0]} cannot be rebuilt (no FINISHED run of "
                                 f"trial '{ids[0]}' in the store")


def test_batch_members_lists_a_units_trials_and_caps_the_tag():
    a, b = make_spec(seed=0), make_spec(seed=1)
    c = make_spec(seed=2)
    got = batch_members([[b, a], [c]])
    assert got == dict.fromkeys([a.trial_id, b.trial_id], ",".join(sorted([a.trial_id, b.trial_id])))
    many = [make_spec(seed=i) for i in range(MAX_BATCH_TAG // 17 + 2)]
    assert set(batch_members([many]).values()) == {f"{len(many)} trials (too many to list)"}


def _row(batch, status, steps, seed=0, train_steps=1000):
    return {"row": "summary", "task": "mlp · mnist1d", "optimizer": "nesterov", "config_id": "c1",
            "config": "mass=0.95 lr=0.316", "seed": seed, "train_steps": train_steps, "status": status,
            "batch": batch, N.M_STEPS_TO_TARGET: steps}


def test_an_outcome_that_differs_between_batchings_is_flagged():
    """The review's case: nesterov lr 0.316, mass 0.95, seed 0 diverged alone and reached the target
    vmapped with 13 others. Flagged; equal outcomes, one batching, a stopped trial or another step
    budget are not."""
    batch = ",".join(f"{i:016x}" for i in range(14))
    frame = pd.DataFrame([_row(None, "diverged", None), _row(batch, "finished", 350.0),
                          _row(None, "finished", 400.0, seed=1), _row(batch, "finished", 400.0, seed=1),
                          _row(None, "diverged", None, seed=2), _row(None, "finished", 300.0, seed=2),
                          _row(batch, "stopped", None, seed=3), _row(None, "finished", 300.0, seed=3),
                          _row(batch, "finished", None, seed=4, train_steps=500),
                          _row(None, "finished", 300.0, seed=4)])
    assert batching_flags(frame, {"mlp · mnist1d": "MLP"}) == [
        "nesterov mass=0.95 lr=0.316, seed 0 (MLP): diverged alone; reached the target vmapped in a "
        "batch of 14"]
    assert batching_flags(frame.drop(columns="batch")) == []


def test_the_report_flags_a_batching_difference_seen_in_another_experiment(tmp_path, write_sweep,
                                                                             tracking_uri):
    """Within one sweep a trial trains once, so the other batching comes from the store's other
    experiments: the same two configurations trained vmapped in one experiment and alone in
    another, one of the alone runs marked diverged in the store (the rare real case, 1 in 39
    trials measured, made certain here), is one flag in the vmapped sweep's HTML report."""
    from reports import make_report
    from reports.batch_flags import observed_elsewhere
    from reports.frame import load_frame

    opts = [{"name": "sgd", "hparams": {"step_size": [0.03, 0.1]}}]
    harness.sweep(write_sweep("a.yaml", name="vmapped", batching="on", seeds=[0], optimizers=opts),
                  tracking_uri=tracking_uri, quiet=True)
    harness.sweep(write_sweep("b.yaml", name="alone", batching="off", seeds=[0], optimizers=opts),
                  tracking_uri=tracking_uri, quiet=True)
    client = MlflowClient(tracking_uri)
    frame = load_frame("vmapped", tracking_uri=tracking_uri)
    assert batching_flags(frame, None, observed_elsewhere(client, frame)) == []  # same outcomes
    exp = client.get_experiment_by_name("alone").experiment_id
    (run,) = client.search_runs([exp], "params.`optimizer.step_size` = '0.1'")
    client.set_tag(run.info.run_id, "status", "diverged")
    (line,) = batching_flags(frame, None, observed_elsewhere(client, frame))
    assert line == ("sgd (step_size=0.1), seed 0 (mlp / digits): reached the target vmapped in a batch "
                    "of 2; diverged alone")
    html = make_report("vmapped", output=str(tmp_path / "r.html"), tracking_uri=tracking_uri).read_text()
    assert html.count('class="batching-flag"') == 1 and "diverged alone" in html
