"""The lines under the summary's tables: the ties' line and the legend (what the columns mean)."""

from __future__ import annotations

from typing import Any

from harness.core import ties
from harness.core.clock import clock_sentence
from harness.core.selection_rule import selection_order
from harness.orchestrate.at_init import solved_at_init
from harness.orchestrate.tasks import flagged_programs

__all__ = ["RANK_WORDS", "legend", "tie_line"]

#: What the summary's rank column means (said once under its tables).
RANK_WORDS = (f"shared (\"1=\") where the rank rule cannot tell two apart on what orders them "
              f"(seconds to target, or at the same median steps or without the target the validation "
              f"value: a paired bootstrap 95% interval containing 0 with {ties.MIN_SEEDS} paired seeds or "
              f"more, else overlapping min–max ranges), as the HTML report's leaderboard; a tie's rows "
              f"in the order of \"to target\" (else of the validation value)")


def tie_line(rows: list[dict[str, Any]]) -> str:
    """The one line under the summary's tables on its ties (``""`` without any): for each pair of
    tied neighbours (:func:`ranked_rows`), the seeds that would separate them, and how that is
    estimated (:func:`harness.core.ties.power_words`)."""
    pairs = []
    counted = False  # some pair got a seed count: say how it is estimated
    prev: dict[str, Any] | None = None
    for r in rows:
        sep = r["separation"]
        if sep is not None and prev is not None:
            on = " on the validation value" if sep.what != r["tie_on"] else ""
            pairs.append(f"{prev['optimizer']} and {r['optimizer']} ({r['task_title']}, "
                         f"{r['label']}): {sep.words}{on}")
            counted = counted or sep.effect > 0  # estimated (nan: none; 0: equal results)
        prev = r
    if not pairs:
        return ""
    return f"Ties: {'; '.join(pairs)}" + (f" — {ties.power_words()}." if counted else ".")


def legend(summary: Any, measured: list[str], cost: list[str], titles: dict, explain: bool) -> str:
    """What the summary's columns mean: with ``explain`` the rules in full (the rank rule, the
    selection order, the clock); else two short sentences and ``--explain``. This sweep's own
    facts (tasks on another clock, flagged programs, targets met at step 0) are said in both.

    Returns:
      the text, starting ``"rank: "``.
    """
    clock = clock_sentence(summary.time_clock, measured, cost, flagged_programs(summary.outcomes))
    at_init = solved_at_init(summary.outcomes, titles)
    if explain:
        return (f"rank: {RANK_WORDS}. best = selected on validation: {selection_order(summary.select_by)}; "
                f"test = its mean test metric; to target = its median over the seeds that reached it (the "
                f"HTML report's and res.leaderboard's too); full configurations: the HTML report. "
                f"{clock}{at_init}")
    facts = clock[len(clock_sentence(summary.time_clock)):] + at_init
    how = ("the trial's wall-clock of training" if summary.time_clock == "measured"
           else "steps to target × the program's step time")
    return (f"rank: 1= where seeds cannot tell two apart; best = selected on validation, test = its "
            f"mean test metric, to target its median. Time to target: {summary.time_clock} "
            f"({how}).{facts} "
            f"Rules in full: sweep --explain, or the HTML report.")
