"""modded-nanogpt's optimization track's two ways to claim a loss target, for a sweep that asks for
them (``target: {claim: {margin, single_run}}``): the mean final validation loss over ``n`` runs with
``(target - mean)·√n >= margin`` (the track: 0.004, a one-sided z-test at p < 0.001 with
σ = 0.0013), or one run, not picked among several, at or below ``single_run`` (the track: 3.276,
the same test at n = 1). Standard library only.

Source: modded-nanogpt ``records/track_3_optimization/README.md`` ("Target loss and statistical
significance").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["PARAM_MARGIN", "PARAM_SINGLE_RUN", "ClaimRules", "claim_rule_lines", "rules_of_params"]

#: The run params that carry a sweep's claim rules (not part of a trial's identity).
PARAM_MARGIN = "claim.margin"
PARAM_SINGLE_RUN = "claim.single_run"
#: Float slack of the √n comparison: ``(3.28 - 3.276)·√1`` is 0.00400000000000023 or a hair under.
_SLACK = 1e-12


@dataclass(frozen=True)
class ClaimRules:
    """A sweep's claim rules: the √n rule's ``margin`` and the single-run bound (None: not asked)."""

    margin: float
    single_run: float | None = None

    def params(self) -> dict[str, str]:
        """The rules as run params (:data:`PARAM_MARGIN`, :data:`PARAM_SINGLE_RUN`)."""
        out = {PARAM_MARGIN: repr(float(self.margin))}
        if self.single_run is not None:
            out[PARAM_SINGLE_RUN] = repr(float(self.single_run))
        return out


def rules_of_params(params: Mapping[str, Any]) -> ClaimRules | None:
    """The :class:`ClaimRules` a run's params carry, or None (none asked, or unreadable values).

    Args:
      params: a run's params (``claim.margin``, ``claim.single_run``), str or numbers; missing,
        None or NaN values count as absent.

    Returns:
      The rules, or None without a readable ``claim.margin``.
    """
    def num(key: str) -> float | None:
        try:
            v = float(params.get(key))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
        return v if math.isfinite(v) else None

    margin = num(PARAM_MARGIN)
    return None if margin is None else ClaimRules(margin, num(PARAM_SINGLE_RUN))


def claim_rule_lines(runs: Sequence[tuple[int, float]], target: float, rules: ClaimRules) -> list[str]:
    """The track's verdicts on one configuration's runs, one line per rule.

    The √n rule on the mean of every run; the single-run rule on the first run (the lowest seed:
    choosing the best of several runs is the cherry-picking the rule excludes), with how many runs
    are at or below the bound.

    Args:
      runs: ``(seed, final validation loss)`` of each finished run (at least one, finite losses).
      target: the target validation loss (the track: 3.28).
      rules: the margin and single-run bound.

    Returns:
      One line for the √n rule, one more for the single-run rule when ``rules.single_run`` is set.

    Raises:
      ValueError: no runs, or a non-finite loss.
    """
    if not runs or not all(math.isfinite(float(x)) for _, x in runs):
        raise ValueError(f"claim_rule_lines needs finite losses, got {list(runs)!r}")
    runs = sorted((int(s), float(x)) for s, x in runs)
    n, mean = len(runs), statistics.fmean(x for _, x in runs)
    stat = (target - mean) * math.sqrt(n)
    ok = stat >= rules.margin - _SLACK
    line = (f"√n rule: mean {mean:.4f} over {n} run{'s' * (n != 1)}: ({target:g} − mean)·√{n} = "
            f"{stat:.4f} {'≥' if ok else '<'} {rules.margin:g}: {'PASSES' if ok else 'does not pass'}")
    if not ok and mean < target:
        need = math.ceil((rules.margin / (target - mean)) ** 2 * (1 - 1e-9))  # 16.0000000000004: 16
        line += f" (about {need} runs would, at this mean)"
    lines = [line]
    if rules.single_run is not None:
        seed, first = runs[0]
        hit = first <= rules.single_run
        below = sum(x <= rules.single_run for _, x in runs)
        lines.append(f"single-run rule: the first run (seed {seed}) {first:.4f} {'≤' if hit else '>'} "
                     f"{rules.single_run:g}: {'PASSES' if hit else 'does not pass'}"
                     + (f" ({below} of {n} runs are at or below it; picking one is cherry-picking)"
                        if n > 1 else ""))
    return lines
