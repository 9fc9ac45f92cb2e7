"""The selection rule: which of one optimizer's configurations is its best on a task.

The one home of the rule that the reports (``reports.frame.best_configs``) and the end-of-sweep
table (:mod:`harness.sweep.summary`) both apply, so that both always select the same configuration.
Standard library only.
"""

from __future__ import annotations

import math


def selection_key(reached: int, median_steps: float | None, finished: int, value: float | None,
                  higher_is_better: bool, median_seconds: float | None, config: str) -> tuple:
    """The order in which one optimizer's configurations are selected: the smallest key wins.

    First difference decides: more seeds that ``reached`` the target; lower ``median_steps`` to
    target; more seeds ``finished``; better validation ``value`` (mean final metric; higher when
    ``higher_is_better``); lower ``median_seconds`` to target; the ``config`` name. ``None`` (no
    seed reached / no value) sorts last.
    """
    inf = math.inf
    return (-int(reached), inf if median_steps is None else float(median_steps), -int(finished),
            inf if value is None else (-1.0 if higher_is_better else 1.0) * float(value),
            inf if median_seconds is None else float(median_seconds), str(config))
