"""The clock a report counts time to target on (``time:``, ``report --time``), put in the frame.

:func:`use_clock` returns a copy of the tidy frame whose ``convergence/seconds_to_target`` holds, per
trial, the seconds of the clock its task ranks on (:func:`harness.core.clock.task_clock`): on the
``modeled`` clock (the default) ``convergence/modeled_seconds_to_target`` (steps to target × the
program's median step time), except on a task where some trial reached the target without a
modeled time (its step time is suspect, tag ``perf.suspect``, or was not measured): that whole task
counts measured seconds, so that no comparison mixes two clocks; on the ``measured`` clock the
measured seconds as logged. Every view that ranks or draws time to target (the leaderboard's rank,
time to target and its figure's axis, performance profiles, tuned time-to-result, the baseline
comparison) reads that one column, so they all count on one clock. ``frame.attrs["time_clock"]``
names the clock, ``frame.attrs["time_measured_tasks"]`` the tasks moved to measured seconds;
:func:`clock_note` is the sentence the report shows, :func:`clock_of` one task's clock. The tidy CSV
is written from the frame as loaded, with both metrics as MLflow holds them.
"""

from __future__ import annotations

import pandas as pd

from harness.core.clock import CLOCKS, DEFAULT_CLOCK, clock_sentence, ranked_seconds, task_clock
from harness.core.names import M_MODELED_SECONDS_TO_TARGET, M_SECONDS_TO_TARGET
from reports.layout import task_labels

#: ``frame.attrs`` keys: the clock, and the tasks that rank on measured seconds under it.
CLOCK_ATTR = "time_clock"
MEASURED_TASKS_ATTR = "time_measured_tasks"


def _num(x) -> float | None:
    return None if pd.isna(x) else float(x)


def use_clock(frame: pd.DataFrame, clock: str = DEFAULT_CLOCK) -> pd.DataFrame:
    """A copy of ``frame`` that counts time to target on ``clock`` (module docstring).

    Raises:
      ValueError: ``clock`` is not one of :data:`harness.core.clock.CLOCKS`.
    """
    if clock not in CLOCKS:
        raise ValueError(f"--time must be one of {', '.join(CLOCKS)}; got {clock!r}")
    out = frame.copy()
    out.attrs = dict(frame.attrs)
    modeled = out[M_MODELED_SECONDS_TO_TARGET] if M_MODELED_SECONDS_TO_TARGET in out else pd.Series(
        float("nan"), index=out.index)
    rows = out.index[(out["row"] == "summary")]
    measured_tasks = []
    for task, idx in out.loc[rows].groupby("task", sort=True).groups.items():
        finished = [i for i in idx if out.at[i, "status"] == "finished"]
        on = task_clock([(_num(modeled.at[i]), _num(out.at[i, M_SECONDS_TO_TARGET])) for i in finished],
                        clock)
        if on != clock:
            measured_tasks.append(task)
        for i in idx:
            secs = ranked_seconds(_num(modeled.at[i]), _num(out.at[i, M_SECONDS_TO_TARGET]), on)
            out.at[i, M_SECONDS_TO_TARGET] = float("nan") if secs is None else secs
    out.attrs[CLOCK_ATTR] = clock
    out.attrs[MEASURED_TASKS_ATTR] = measured_tasks
    return out


def clock_of(frame: pd.DataFrame, task: str) -> str:
    """The clock ``task``'s times in ``frame`` are on: ``measured`` for a frame that
    :func:`use_clock` did not make (the seconds as logged)."""
    clock = frame.attrs.get(CLOCK_ATTR)
    if clock is None or task in frame.attrs.get(MEASURED_TASKS_ATTR, ()):
        return "measured"
    return clock


def clock_note(frame: pd.DataFrame) -> str:
    """The sentence that says which clock ``frame`` counts time on, naming the tasks moved to
    measured seconds by their labels (``""`` for a frame that :func:`use_clock` did not make: a
    notebook's raw frame counts the measured seconds it holds)."""
    clock = frame.attrs.get(CLOCK_ATTR)
    if not clock:
        return ""
    tasks = frame.attrs.get(MEASURED_TASKS_ATTR, [])
    labels = task_labels(frame) if tasks and {"model", "dataset"} <= set(frame.columns) else {}
    return clock_sentence(clock, [labels.get(t, t) for t in tasks])

