"""The tasks of the end-of-sweep summary: which trials are one task, its title, and what the summary
computes per task (the clock it ranks on, its trials' modeled seconds and cost classes).

A task is the report's (:func:`reports.labels.add_labels`): the model and dataset plus every
task-defining param (:func:`harness.core.names.is_task_param`: ``model.width``,
``train.batch_size``, ...) that varies in the sweep. A sweep of two widths, or two batch sizes, has
two tasks, each ranked in its own table with its own best configurations; trials group by
:func:`harness.core.outcome.task_key`, and :func:`task_titles` names each task by its params that
vary among its model and dataset's tasks (``mlp · digits (width=16)``), in the report's form.
"""

from __future__ import annotations

from harness.core.clock import DEFAULT_CLOCK, cost_class_of, cost_range, task_clock
from harness.core.names import with_params
from harness.core.outcome import TrialOutcome, task_key

__all__ = ["classed_modeled", "flagged_programs", "task_bits", "task_clocks", "task_order", "task_titles"]


def task_bits(outcomes: list[TrialOutcome]) -> dict[tuple, list[str]]:
    """:func:`~harness.core.outcome.task_key` → the ``name=value`` bits that tell the task apart
    from the other tasks of its model and dataset (``["width=16"]``): its params that vary among
    theirs (a param one of them lacks varies, as in the report), each without its prefix, in the
    order of their full names, as the report writes them; ``[]`` when its model and dataset have
    one task. The report names every task param that varies in the sweep, also across models (and
    the builders' defaults its runs hold): the same tasks, a longer label where models differ."""
    groups: dict[tuple, list[tuple]] = {}
    for k in {task_key(o) for o in outcomes}:
        groups.setdefault(k[:2], []).append(k)
    out: dict[tuple, list[str]] = {}
    for keys in groups.values():
        params = {k: dict(k[2]) for k in keys}
        every = sorted({n for p in params.values() for n in p})
        varying = [n for n in every if len({p.get(n) for p in params.values()}) > 1]
        for k, p in params.items():
            out[k] = [f"{n.split('.', 1)[1]}={p[n]}" for n in varying if n in p]
    return out


def task_titles(outcomes: list[TrialOutcome]) -> dict[tuple, str]:
    """:func:`~harness.core.outcome.task_key` → the task's title in the summary: ``"mlp · digits"``,
    with the params that vary (:func:`task_bits`) after it, ``"mlp · digits (width=16)"``."""
    return {k: with_params(f"{k[1]} · {k[0]}", bits) for k, bits in task_bits(outcomes).items()}


def _natural(value: str) -> tuple:
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


def task_order(key: tuple) -> tuple:
    """A sort key of a :func:`~harness.core.outcome.task_key`: dataset, model, then its params with
    numbers in numeric order (width 16 before 128)."""
    return (key[0], key[1], tuple((n, _natural(v)) for n, v in key[2]))


def task_clocks(outcomes: list[TrialOutcome], clock: str = DEFAULT_CLOCK) -> dict[tuple, str]:
    """:func:`~harness.core.outcome.task_key` → the clock that task ranks on
    (:func:`harness.core.clock.task_clock` over its finished trials: a task where a trial reached
    the target without a modeled time, e.g. an AlgoPerf submission, ranks on the cost clock)."""
    pairs: dict[tuple, list] = {}
    for o in outcomes:
        pairs.setdefault(task_key(o), []).extend(
            [(o.modeled_seconds_to_target, o.cost_seconds_to_target, o.seconds_to_target)]
            if o.status == "finished" else [])
    return {k: task_clock(v, clock) for k, v in pairs.items()}


def classed_modeled(outcomes: list[TrialOutcome], clocks: dict[tuple, str]
                    ) -> tuple[dict[str, float | None], dict[str, float | None],
                               dict[str, tuple[float, float] | None]]:
    """Three maps of trial id: the modeled seconds to target it ranks on (steps × its program's
    figure, as logged), its per-step cost on its task's clock (``clocks``, :func:`task_clocks`;
    :func:`harness.core.clock.cost_class_of`) and that cost's relative interval
    (:func:`harness.core.clock.cost_range`)."""
    secs: dict[str, float | None] = {}
    classes: dict[str, float | None] = {}
    ranges: dict[str, tuple[float, float] | None] = {}
    for o in outcomes:
        on = clocks.get(task_key(o), "measured")
        secs[o.trial_id] = o.modeled_seconds_to_target
        classes[o.trial_id] = cost_class_of(on, o.modeled_step_ms, o.cost_seconds_to_target,
                                            o.steps_to_target)
        ranges[o.trial_id] = cost_range(on, o.modeled_step_ms, o.modeled_step_ms_lo, o.modeled_step_ms_hi)
    return secs, classes, ranges


def flagged_programs(outcomes: list[TrialOutcome]) -> list[str]:
    """``"optimizer · dataset · model"`` (with its task's params that vary, :func:`task_bits`) of
    every finished trial whose figure is flagged (tag ``perf.suspect``), once each, sorted."""
    bits = task_bits(outcomes)
    return sorted({with_params(f"{o.optimizer} · {o.dataset} · {o.model}", bits[task_key(o)])
                   for o in outcomes if o.status == "finished" and o.perf_suspect})
