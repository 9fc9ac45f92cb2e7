"""Which clock a time to target is counted on: the one rule for the modeled and the measured clock.

* **modeled** (the default): ``convergence/modeled_seconds_to_target`` = ``steps_to_target`` × the
  robust per-step time of the trial's program (``perf/step_time_ms``, the median of the throughput
  protocol's repeated timed calls, :mod:`harness.train.timing`; one measurement per program and
  device, :mod:`harness.train.perf`). Two trials of one program that reach the target at the same
  evaluation get the same time, whatever else ran on the machine while they trained.
* **measured**: ``convergence/seconds_to_target``, the trial's own wall-clock of training
  dispatches up to that evaluation (compile and evaluation excluded): what happened on this machine
  this time, load included.

A trial whose step time is suspect (tag ``perf.suspect``: it disagreed with the trial's own
training clock twice) or was not measured has no modeled time. One comparison never mixes two
clocks: on the modeled clock, a task any of whose trials reached the target without a modeled time
ranks all its trials on measured seconds (:func:`task_clock`), and the reader is told which tasks
(:func:`clock_sentence`). The clock comes from the config's ``time:`` (recorded on the sweep's
parent run as :data:`harness.core.names.TAG_TIME`), ``report --time`` overrides it. Standard
library only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

#: The clocks, the default first (``report --time``).
CLOCKS = ("modeled", "measured")
DEFAULT_CLOCK = "modeled"


def modeled_seconds(steps_to_target: float | None, step_time_ms: float | None,
                    suspect: str | None = "") -> float | None:
    """``steps_to_target × step_time_ms / 1000``, or ``None`` when the target was not reached, the
    step time is unknown (not measured, not positive) or ``suspect`` (non-empty: its reason)."""
    if steps_to_target is None or step_time_ms is None or suspect:
        return None
    steps, ms = float(steps_to_target), float(step_time_ms)
    if not (math.isfinite(steps) and math.isfinite(ms)) or ms <= 0:
        return None
    return steps * ms / 1e3


def check_clock(clock: str | None) -> str:
    """``clock`` when it is one of :data:`CLOCKS` (``None``: :data:`DEFAULT_CLOCK`).

    Raises:
      ValueError: any other value, naming the valid ones.
    """
    if clock is None:
        return DEFAULT_CLOCK
    if clock not in CLOCKS:
        raise ValueError(f"the time clock must be one of {', '.join(CLOCKS)}; got {clock!r}")
    return clock


def task_clock(trials: Iterable[tuple[float | None, float | None]], clock: str) -> str:
    """The clock one task ranks all its trials on, given each trial's ``(modeled, measured)``
    seconds to target: ``clock``, except that on the modeled clock a task where some trial reached
    the target (measured seconds) without a modeled time ranks on ``"measured"`` (one comparison,
    one clock)."""
    if check_clock(clock) == "measured":
        return clock
    return "measured" if any(m is None and s is not None for m, s in trials) else "modeled"


def ranked_seconds(modeled: float | None, measured: float | None, clock: str) -> float | None:
    """The seconds to target of one trial on ``clock`` (a task's :func:`task_clock`)."""
    return measured if check_clock(clock) == "measured" else modeled


def clock_sentence(clock: str, measured_tasks: Sequence[str] = ()) -> str:
    """What a table or figure that ranks on time says about its clock, e.g. ``"Time to target:
    modeled (steps to target × the program's median step time, free of the machine's load); mlp ·
    digits ranks on measured seconds: a trial there has a suspect or unmeasured step time, and one
    comparison never mixes two clocks."`` (``measured_tasks``: the tasks :func:`task_clock` moved
    to the measured clock)."""
    if clock == "measured":
        return ("Time to target: measured (the trial's wall-clock of training, load included; "
                "`--time modeled` counts steps × the program's median step time).")
    text = ("Time to target: modeled (steps to target × the program's median step time, free of "
            "the machine's load; `--time measured` ranks on wall-clock).")
    if measured_tasks:
        names = list(measured_tasks)
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        one = len(names) == 1
        text += (f" {shown} rank{'s' if one else ''} on measured seconds: a trial there has a suspect "
                 f"or unmeasured step time, and one comparison never mixes two clocks.")
    return text
