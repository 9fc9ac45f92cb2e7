"""A smoke run: ``sweep --max-steps N`` (``harness.sweep(config, max_steps=N)``) trains the first
``N`` steps of every trial whose budget is longer, as the full run would take them (its schedule
spans the full budget: the recipe's ``schedule_steps``). A capped trial has other ``steps`` and
recipe, so another ``trial_id``: it never stands for, nor skips, the full trial. A smoke run
measures no throughput (``measure_perf`` off): timing took most of a short run's time. It goes to
an experiment of its own, :func:`smoke_name`, so that it never becomes the sweep's current version
in ``report``, ``status`` or ``harness.results``.
"""

from __future__ import annotations

import dataclasses

from harness.config.errors import UsageError
from harness.plan.expansion import TrialList

__all__ = ["cap_steps", "check_max_steps", "smoke_line", "smoke_name"]


def check_max_steps(max_steps: object) -> int | None:
    """``max_steps`` as an int ``>= 1`` (``None``: no cap).

    Raises:
      harness.config.errors.UsageError: not an int, or ``< 1`` (key ``max_steps``).
    """
    if max_steps is None:
        return None
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise UsageError(f"max_steps: must be an integer >= 1, got {max_steps!r}", "max_steps")
    return max_steps


def cap_steps(trials: TrialList, max_steps: int | None, adaptive: bool = False) -> TrialList:
    """``trials`` with each trial longer than ``max_steps`` cut to it (its schedule kept over its
    full budget: ``schedule_steps`` in its recipe); the origins re-keyed by the new trial ids.

    Raises:
      harness.config.errors.UsageError: ``adaptive`` (a search whose rungs are steps) with a cap.
    """
    if max_steps is None:
        return trials
    if adaptive:
        raise UsageError("max_steps: an adaptive search (ASHA, halving, ...) sets its own steps; "
                         "a smoke run takes a grid or a sampled search", "max_steps")
    out = TrialList()
    out.origins = {}
    for s in trials:
        new = s
        if s.steps > max_steps:
            recipe = dict(s.recipe)
            recipe["schedule_steps"] = recipe.get("schedule_steps", s.steps)
            new = dataclasses.replace(s, steps=max_steps, recipe=tuple(sorted(recipe.items())))
        out.append(new)
        if s.trial_id in trials.origins:
            out.origins[new.trial_id] = trials.origins[s.trial_id]
    return out


def smoke_name(name: str) -> str:
    """The experiment a smoke run of sweep ``name`` is logged to: ``NAME-smoke``."""
    return f"{name}-smoke"


def smoke_line(max_steps: int | None, experiment: str) -> str:
    """The summary's line for a smoke run (``""`` without a cap), naming its ``experiment``."""
    if max_steps is None:
        return ""
    return (f"smoke run: every trial capped at {max_steps} steps (--max-steps), its schedule over its full "
            f"budget, not timed; new trial ids in experiment {experiment}, not comparable with the full runs")
