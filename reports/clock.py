"""The clock a report counts time to target on (``report --time``): :func:`use_clock` puts it in the frame.

:func:`use_clock` returns a copy of the tidy frame whose ``convergence/seconds_to_target`` holds, per
trial, the seconds of the chosen clock (:func:`harness.core.clock.ranked_seconds`): on the
``modeled`` clock (the default) ``convergence/modeled_seconds_to_target`` (steps to target × the
program's median step time), or the measured seconds where a trial has none (its step time is
suspect, tag ``perf.suspect``, or was not measured); on the ``measured`` clock the measured seconds
as logged. Every view that ranks or draws time to target (the leaderboard's rank, time to target,
performance profiles, tuned time-to-result, the baseline comparison) reads that one column, so they
all count on one clock. ``frame.attrs["time_clock"]`` names it and ``frame.attrs["time_fallbacks"]``
counts the trials that fell back; :func:`clock_note` is the sentence the report shows. The tidy CSV
is written from the frame as loaded, with both metrics as MLflow holds them.
"""

from __future__ import annotations

import pandas as pd

from harness.core.clock import CLOCKS, DEFAULT_CLOCK, clock_sentence, ranked_seconds
from harness.core.names import M_MODELED_SECONDS_TO_TARGET, M_SECONDS_TO_TARGET

#: ``frame.attrs`` keys: the clock and how many trials fell back to their measured seconds.
CLOCK_ATTR = "time_clock"
FALLBACKS_ATTR = "time_fallbacks"


def use_clock(frame: pd.DataFrame, clock: str = DEFAULT_CLOCK) -> pd.DataFrame:
    """A copy of ``frame`` that counts time to target on ``clock`` (module docstring).

    Raises:
      ValueError: ``clock`` is not one of :data:`harness.core.clock.CLOCKS`.
    """
    if clock not in CLOCKS:
        raise ValueError(f"--time must be one of {', '.join(CLOCKS)}; got {clock!r}")
    out = frame.copy()
    out.attrs = dict(frame.attrs)
    summary = out["row"] == "summary"
    modeled = out[M_MODELED_SECONDS_TO_TARGET] if M_MODELED_SECONDS_TO_TARGET in out else pd.Series(
        float("nan"), index=out.index)
    fallbacks = 0
    for i in out.index[summary]:
        m, s = modeled.at[i], out.at[i, M_SECONDS_TO_TARGET]
        secs, fell_back = ranked_seconds(None if pd.isna(m) else float(m), None if pd.isna(s) else float(s),
                                         clock)
        out.at[i, M_SECONDS_TO_TARGET] = float("nan") if secs is None else secs
        fallbacks += fell_back and out.at[i, "status"] == "finished"
    out.attrs[CLOCK_ATTR] = clock
    out.attrs[FALLBACKS_ATTR] = int(fallbacks)
    return out


def clock_note(frame: pd.DataFrame) -> str:
    """The sentence that says which clock ``frame`` counts time on (``""`` for a frame that
    :func:`use_clock` did not make: a notebook's raw frame counts the measured seconds it holds)."""
    clock = frame.attrs.get(CLOCK_ATTR)
    return clock_sentence(clock, frame.attrs.get(FALLBACKS_ATTR, 0)) if clock else ""
