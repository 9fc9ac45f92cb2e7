"""The clock a report counts time to target on (``time:``, ``report --time``), put in the frame.

:func:`use_clock` returns a copy of the tidy frame whose ``convergence/seconds_to_target`` holds,
per trial, the seconds of the clock its task ranks on (:func:`harness.core.clock.task_clock`). On
the ``modeled`` clock (the default): steps to target × the program's step time measured before
training (``perf/modeled_step_ms``, CPU time on a CPU), as logged in
``convergence/modeled_seconds_to_target``; each trial also gets that figure (:data:`COST_CLASS`) and
its 95% interval relative to it (:data:`COST_LO`, :data:`COST_HI`), which the rank rule carries.
A task where some trial reached the target without a modeled time (an AlgoPerf submission's
own jit) counts ``convergence/cost_seconds_to_target`` for all its trials (steps × the model's FLOPs
per step ÷ peak: deterministic), so that no comparison mixes two clocks. On the ``measured`` clock:
the measured seconds as logged. A trial whose figure is flagged (tag ``perf.suspect``) still counts
its modeled seconds. Every view that ranks or draws time to target (the leaderboard's rank, time to
target and its figure's axis, performance profiles, tuned time-to-result, the baseline comparison)
reads that one column, so they all count on one clock. ``frame.attrs["time_clock"]`` names the
clock, ``frame.attrs["time_task_clocks"]`` the tasks moved to another clock (task → clock);
:func:`clock_note` is the sentence the report shows, :func:`clock_of` one task's clock. The tidy CSV
is written from the frame as loaded, with every metric as MLflow holds it.
"""

from __future__ import annotations

import pandas as pd

from harness.core.clock import (
    CLOCKS,
    COST_CLOCK,
    DEFAULT_CLOCK,
    clock_sentence,
    cost_class_of,
    cost_range,
    ranked_seconds,
    task_clock,
)
from harness.core.names import (
    M_COST_SECONDS_TO_TARGET,
    M_MODELED_SECONDS_TO_TARGET,
    M_MODELED_STEP_MS,
    M_MODELED_STEP_MS_HI,
    M_MODELED_STEP_MS_LO,
    M_SECONDS_TO_TARGET,
    M_STEPS_TO_TARGET,
)
from reports.layout import task_labels

#: The frame's column of each trial's per-step cost on its task's clock
#: (:func:`harness.core.clock.cost_class_of`; ``None`` on the measured clock): equal steps at one
#: cost are a tie on time.
COST_CLASS = "cost_class_ms"
#: The frame's columns of that cost's 95% interval relative to it (:func:`harness.core.clock.cost_range`;
#: NaN where exact).
COST_LO, COST_HI = "cost_lo", "cost_hi"
#: ``frame.attrs`` keys: the clock, and the tasks that rank on another clock under it (task → clock).
CLOCK_ATTR = "time_clock"
TASK_CLOCKS_ATTR = "time_task_clocks"


def _num(x) -> float | None:
    return None if pd.isna(x) else float(x)


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name] if name in frame else pd.Series(float("nan"), index=frame.index)


def use_clock(frame: pd.DataFrame, clock: str = DEFAULT_CLOCK) -> pd.DataFrame:
    """A copy of ``frame`` that counts time to target on ``clock`` (module docstring).

    Raises:
      ValueError: ``clock`` is not one of :data:`harness.core.clock.CLOCKS`.
    """
    if clock not in CLOCKS:
        raise ValueError(f"--time must be one of {', '.join(CLOCKS)}; got {clock!r}")
    out = frame.copy()
    out.attrs = dict(frame.attrs)
    modeled = _column(out, M_MODELED_SECONDS_TO_TARGET)
    cost = _column(out, M_COST_SECONDS_TO_TARGET)
    steps, figure = _column(out, M_STEPS_TO_TARGET), _column(out, M_MODELED_STEP_MS)
    lo, hi = _column(out, M_MODELED_STEP_MS_LO), _column(out, M_MODELED_STEP_MS_HI)
    rows = out.index[(out["row"] == "summary")]
    out[COST_CLASS] = pd.Series([None] * len(out), index=out.index, dtype=object)
    out[COST_LO] = out[COST_HI] = float("nan")
    moved: dict[str, str] = {}
    for task, idx in out.loc[rows].groupby("task", sort=True).groups.items():
        finished = [i for i in idx if out.at[i, "status"] == "finished"]
        on = task_clock([(_num(modeled.at[i]), _num(cost.at[i]), _num(out.at[i, M_SECONDS_TO_TARGET]))
                         for i in finished], clock)
        if on != clock:
            moved[task] = on
        for i in idx:
            secs = ranked_seconds(_num(modeled.at[i]), _num(cost.at[i]),
                                  _num(out.at[i, M_SECONDS_TO_TARGET]), on)
            out.at[i, COST_CLASS] = cost_class_of(on, _num(figure.at[i]), _num(cost.at[i]), _num(steps.at[i]))
            got = cost_range(on, _num(figure.at[i]), _num(lo.at[i]), _num(hi.at[i]))
            if got is not None:
                out.at[i, COST_LO], out.at[i, COST_HI] = got
            out.at[i, M_SECONDS_TO_TARGET] = float("nan") if secs is None else secs
    out.attrs[CLOCK_ATTR] = clock
    out.attrs[TASK_CLOCKS_ATTR] = moved
    return out


def clock_of(frame: pd.DataFrame, task: str) -> str:
    """The clock ``task``'s times in ``frame`` are on: ``measured`` for a frame that
    :func:`use_clock` did not make (the seconds as logged)."""
    clock = frame.attrs.get(CLOCK_ATTR)
    if clock is None:
        return "measured"
    return frame.attrs.get(TASK_CLOCKS_ATTR, {}).get(task, clock)


def clock_note(frame: pd.DataFrame) -> str:
    """The sentence that says which clock ``frame`` counts time on, naming the tasks moved to another
    clock by their labels and the flagged programs (``""`` for a frame that :func:`use_clock` did not
    make: a notebook's raw frame counts the measured seconds it holds)."""
    clock = frame.attrs.get(CLOCK_ATTR)
    if not clock:
        return ""
    moved = frame.attrs.get(TASK_CLOCKS_ATTR, {})
    labels = task_labels(frame) if moved and {"model", "dataset"} <= set(frame.columns) else {}
    names = {c: [labels.get(t, t) for t, on in sorted(moved.items()) if on == c]
             for c in ("measured", COST_CLOCK)}
    return clock_sentence(clock, names["measured"], names[COST_CLOCK], flagged(frame))


def flagged(frame: pd.DataFrame) -> list[str]:
    """``"optimizer · task"`` of every finished trial whose figure is flagged (tag ``perf.suspect``),
    once each, sorted (empty for a frame without the column)."""
    if "perf_suspect" not in frame:
        return []
    s = frame[(frame["row"] == "summary") & (frame["status"] == "finished") & frame["perf_suspect"].notna()
              & (frame["perf_suspect"].astype(str) != "")]
    labels = task_labels(frame) if len(s) else {}
    return sorted({f"{o} · {labels.get(t, t)}" for o, t in zip(s["optimizer"], s["task"], strict=True)})

