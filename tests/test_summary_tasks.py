"""The end-of-sweep summary's task is the report's (:mod:`harness.orchestrate.tasks`): model, dataset and
every task-defining param that varies (:func:`harness.core.names.is_task_param`). The summary grouped
by (dataset, model) alone and counted a model's width and the batch size as part of the optimizer's
configuration: a sweep of two widths printed one table and picked one best configuration per
optimizer across both, where the report ranks each width apart."""

from __future__ import annotations

import io

import pytest

from reports import frame as RF

#: (width or batch size, optimizer, step size) → steps to the target, the same on every seed: on
#: the first task sgd at 0.1 wins, on the second adam at 0.03; the best configuration of each
#: optimizer differs between the two.
STEPS = {
    ("a", "sgd", 0.1): 10, ("a", "sgd", 0.3): 30, ("a", "adam", 0.01): 20, ("a", "adam", 0.03): 40,
    ("b", "sgd", 0.1): 40, ("b", "sgd", 0.3): 20, ("b", "adam", 0.01): 40, ("b", "adam", 0.03): 10,
}


def _sweep(tmp_path, write_sweep, tracking_uri, monkeypatch, axis: str):
    """A real small sweep (the trainer faked) of sgd and adam at two step sizes each, two seeds, on
    two tasks: two widths of the MLP (``axis="width"``) or two batch sizes; returns its summary."""
    import dataclasses

    from conftest import fake_result

    import harness.train.loop as trainer
    from harness.orchestrate.run import run_sweep

    def run_trial(spec, **_kw):
        task = "a" if (spec.hparams("model")["width"] if axis == "width" else spec.batch_size) == 16 else "b"
        steps = STEPS[(task, spec.optimizer, spec.hparams("optimizer")["step_size"])]
        return dataclasses.replace(fake_result(spec), steps_to_target=steps, seconds_to_target=steps * 1e-3)

    monkeypatch.setattr(trainer, "run_trial", run_trial)
    monkeypatch.setattr(trainer, "should_batch", lambda specs: False)
    monkeypatch.setattr("harness.execute.training.measure_throughput", lambda units, on_stage=None: 0.0)
    monkeypatch.chdir(tmp_path)
    if axis == "width":
        grid = {"models": [{"name": "mlp", "hparams": {"width": [16, 32], "depth": 1}}]}
    else:
        grid = {"batch_size": [16, 32]}
    cfg = write_sweep(name=f"two_{axis}s", eval_every=10, steps_per_dispatch=10, **grid, optimizers=[
        {"name": "sgd", "hparams": {"step_size": [0.1, 0.3]}},
        {"name": "adam", "hparams": {"step_size": [0.01, 0.03]}}])
    s = run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    assert s.counts() == {"finished": 16, "diverged": 0, "failed": 0, "skipped": 0}
    return s


@pytest.mark.parametrize("axis,bit", [("width", "width"), ("batch", "batch_size")])
def test_the_summary_ranks_each_width_or_batch_size_as_its_own_task_as_the_report(
        tmp_path, write_sweep, tracking_uri, monkeypatch, axis, bit):
    from rich.console import Console

    from harness.orchestrate.summary import print_summary, ranked_rows
    from reports.selection import best_configs as report_best

    s = _sweep(tmp_path, write_sweep, tracking_uri, monkeypatch, axis)
    frame = RF.load_frame(f"two_{axis}s", tracking_uri=tracking_uri)
    runs = frame[frame["row"] == "summary"]
    # a configuration by the trials it holds (the report's config_id hashes the builders' defaults
    # too, adam's b1, which a run's params hold and a trial's spec does not)
    report = {(r.task, r.optimizer): (set(runs[(runs["task"] == r.task) & (runs["config_id"] == r.config_id)]
                                          ["trial_id"]), r.rank) for r in report_best(frame).itertuples()}
    # the report: two tasks, each with its own winner and best configurations
    assert sorted({t for t, _ in report}) == [f"mlp / digits ({bit}=16)", f"mlp / digits ({bit}=32)"]
    rows = ranked_rows(s.outcomes)
    assert len(rows) == len(report) == 4  # the old summary: one task, one row per optimizer

    from harness.core.outcome import task_key

    summary = {(r["task_title"].replace(" · ", " / ", 1), r["optimizer"]): (
        {o.trial_id for o in s.outcomes if task_key(o) == r["task"] and o.config_id == r["config_id"]},
        r["rank"]) for r in rows}
    assert summary == report
    assert all(len(trials) == 2 for trials, _ in summary.values())  # two seeds each
    assert [(r["task_title"], r["optimizer"], r["rank"]) for r in rows] == [
        (f"mlp · digits ({bit}=16)", "sgd", 1), (f"mlp · digits ({bit}=16)", "adam", 2),
        (f"mlp · digits ({bit}=32)", "adam", 1), (f"mlp · digits ({bit}=32)", "sgd", 2)]
    lrs = {(r["task_title"], r["optimizer"]): {o.config for o in s.outcomes if task_key(o) == r["task"]
                                               and o.config_id == r["config_id"]} for r in rows}
    assert lrs == {(f"mlp · digits ({bit}=16)", "sgd"): {"constant step_size=0.1"},
                   (f"mlp · digits ({bit}=16)", "adam"): {"constant step_size=0.01"},
                   (f"mlp · digits ({bit}=32)", "adam"): {"constant step_size=0.03"},
                   (f"mlp · digits ({bit}=32)", "sgd"): {"constant step_size=0.3"}}
    # printed: one table per task, headed by its label; the best config cells name the step size,
    # not the width or batch size (the task's, in the title)
    out = io.StringIO()
    print_summary(Console(file=out, width=80), s)
    lines = [ln.rstrip() for ln in out.getvalue().splitlines()]
    first, second = lines.index(f"mlp · digits ({bit}=16)"), lines.index(f"mlp · digits ({bit}=32)")
    table = {ln.split()[1]: ln.split()[2] for ln in lines[first:second] if ln.split()[:1] in (["1"], ["2"])}
    assert table == {"sgd": "lr=0.1", "adam": "lr=0.01"}, out.getvalue()
    table = {ln.split()[1]: ln.split()[2] for ln in lines[second:second + 8]
             if ln.split()[:1] in (["1"], ["2"])}
    assert table == {"adam": "lr=0.03", "sgd": "lr=0.3"}, out.getvalue()
    assert "bs=" not in out.getvalue() and "width=16 " not in out.getvalue()


def test_a_tasks_title_names_what_sets_it_apart_from_its_model_and_datasets_other_tasks():
    """Two widths of the MLP are two tasks, titled by their width; the CNN beside them, one task,
    keeps its plain title (the report's label would also name the params the two models differ in:
    the same three tasks). Batch sizes that differ by model split nothing further."""
    from conftest import make_spec

    from harness.core.outcome import TrialOutcome, task_key
    from harness.orchestrate.tasks import task_order, task_titles

    specs = [make_spec(model_hparams={"width": w, "depth": 1}, seed=s) for w in (128, 16) for s in (0, 1)]
    specs += [make_spec(model="cnn", model_hparams={"width": 8}, batch_size=64, seed=s) for s in (0, 1)]
    outs = [TrialOutcome.of_spec(s, "finished") for s in specs]
    titles = task_titles(outs)
    assert [titles[k] for k in sorted(titles, key=task_order)] == [
        "cnn · digits", "mlp · digits (width=16)", "mlp · digits (width=128)"]
    assert len({task_key(o) for o in outs}) == 3
    assert {o.config for o in outs} == {"constant step_size=0.01"}  # the task's params are not in it
