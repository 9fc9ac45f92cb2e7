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
training clock twice) has no modeled time; on the modeled clock it counts its measured seconds
instead, and the reader is told (:func:`clock_sentence`). Standard library only.
"""

from __future__ import annotations

import math

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


def ranked_seconds(modeled: float | None, measured: float | None, clock: str) -> tuple[float | None, bool]:
    """The seconds to target that ``clock`` ranks a trial on, and whether it fell back to the
    measured seconds (the modeled clock, no modeled time: a suspect or unmeasured step time)."""
    if clock not in CLOCKS:
        raise ValueError(f"the time clock must be one of {', '.join(CLOCKS)}; got {clock!r}")
    if clock == "measured" or modeled is not None:
        return (measured if clock == "measured" else modeled), False
    return measured, measured is not None


def clock_sentence(clock: str, fallbacks: int = 0) -> str:
    """What a table or figure that ranks on time says about its clock, e.g. ``"Time to target:
    modeled (steps to target × the program's median step time, free of the machine's load); 1
    trial with a suspect or unmeasured step time counts its measured seconds."``"""
    if clock == "measured":
        text = ("Time to target: measured (the trial's wall-clock of training, load included; "
                "`--time modeled` counts steps × the program's median step time).")
    else:
        text = ("Time to target: modeled (steps to target × the program's median step time, free of "
                "the machine's load; `--time measured` ranks on wall-clock).")
    if fallbacks:
        one = fallbacks == 1
        text += (f" {fallbacks} trial{'' if one else 's'} with a suspect or unmeasured step time "
                 f"count{'s its' if one else ' their'} measured seconds.")
    return text
