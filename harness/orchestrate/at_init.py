"""The summary's sentence on targets met at initialisation (AlgoPerf's time 0).

A run whose step-0 evaluation (the initial parameters, clock 0) already meets its task's target is
tagged ``convergence.target_at_init``. That evaluation does not count, as AlgoPerf's runner, whose
first evaluation follows the first update: the run reaches the target at its first later
evaluation that meets it (:mod:`harness.train.track`), or not at all. :func:`solved_at_init` says
per task which of the two happened: how many runs met it again and at which step, and which never
met it again (not reached), by optimizer and seed.
"""

from __future__ import annotations

from collections import Counter

from harness.core.outcome import TrialOutcome, task_key
from harness.orchestrate.tasks import task_titles

__all__ = ["solved_at_init"]

#: Tasks named in the sentence; the rest are counted.
MAX_TASKS = 3


def _seeds(seeds: set) -> str:
    ordered = sorted(seeds, key=lambda s: (s is None, s if s is not None else 0))
    return f"seed{'s' * (len(ordered) != 1)} {', '.join(str(s) for s in ordered)}"


def _case(runs: list[TrialOutcome]) -> str:
    """What the runs of one task whose step-0 evaluation met the target did after it, e.g. ``3 runs
    met it again later (2 at step 50, 1 at step 100), 1 never met it again: not reached (adam seed
    0)``."""
    bits = []
    steps = Counter(o.steps_to_target for o in runs if o.steps_to_target is not None)
    if steps:
        n = sum(steps.values())
        at = (f"at step {next(iter(steps))}" if len(steps) == 1 else
              ", ".join(f"{c} at step {k}" for k, c in sorted(steps.items())))
        bits.append(f"{n} run{'s' * (n != 1)} met it again later ({at})")
    never = [o for o in runs if o.steps_to_target is None]
    if never:
        by_opt: dict[str, set] = {}
        for o in never:
            by_opt.setdefault(o.optimizer, set()).add(o.seed)
        who = "; ".join(f"{opt} {_seeds(seeds)}" for opt, seeds in sorted(by_opt.items()))
        bits.append(f"{len(never)} never met it again: not reached ({who})")
    return ", ".join(bits)


def solved_at_init(outcomes: list[TrialOutcome], titles: dict[tuple, str] | None = None) -> str:
    """The sentence (with a leading space) the summary adds when the step-0 evaluation of some
    finished run met its task's target (tag ``convergence.target_at_init``), else ``""``: per task
    (``titles``: :func:`harness.orchestrate.tasks.task_titles` of ``outcomes``, computed when not given),
    the runs that met it again later and at which step, and those that never did (not reached)."""
    titles = titles if titles is not None else task_titles(outcomes)
    tasks: dict[str, list[TrialOutcome]] = {}
    for o in outcomes:
        if o.status == "finished" and o.target_at_init:
            tasks.setdefault(titles[task_key(o)], []).append(o)
    if not tasks:
        return ""
    named = sorted(tasks)
    cases = "; ".join(f"on {task}, {_case(tasks[task])}" for task in named[:MAX_TASKS])
    if len(named) > MAX_TASKS:
        cases += f"; and {len(named) - MAX_TASKS} more task{'s' * (len(named) - MAX_TASKS != 1)}"
    again = any(o.steps_to_target is not None for runs in tasks.values() for o in runs)
    return (" Target met at initialisation (the step-0 evaluation, which does not count, as in "
            "AlgoPerf: a run reaches the target at its first later evaluation that meets it): "
            f"{cases}."
            + (" Those times to target count only the steps to that evaluation; set a harder target "
               "to compare training." if again else ""))
