"""A program's per-step figure and its 95% interval from rounds timed beside other programs
(:func:`harness.train.timing.time_rounds`): what the modeled clock charges and the rank rule
carries (:mod:`harness.core.ties`). Standard library only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = ["FIGURE_LEVEL", "FLOOR_ROUNDS", "TIMING_SHARE", "bounded_rounds", "median_interval",
           "round_figures", "rounds_left"]

#: The level of a figure's interval (:func:`median_interval`).
FIGURE_LEVEL = 0.95


def median_interval(xs: Sequence[float], level: float = FIGURE_LEVEL) -> tuple[float, float]:
    """The distribution-free interval of the median of ``xs`` from order statistics: sorted,
    ``(x[k-1], x[n-k])`` for the largest ``k`` whose coverage ``1 - 2·P(Binom(n, ½) < k)`` is at
    least ``level`` (Conover, *Practical Nonparametric Statistics*, §3.2); below 6 values, where no
    ``k`` reaches 95%, the range ``(min, max)``. Example: 30 values give ``(x[9], x[20])``.

    Raises:
      ValueError: ``xs`` empty.
    """
    v = sorted(float(x) for x in xs)
    n = len(v)
    if n == 0:
        raise ValueError("no values to take an interval of")
    below, k = 0.0, 0
    for j in range(n // 2 + 1):  # below = P(Binom(n, 1/2) < j + 1)
        below += math.comb(n, j) / 2.0 ** n
        if 1 - 2 * below < level:
            k = j
            break
    k = max(k, 1)
    return v[k - 1], v[n - k]


def round_figures(per_round: Sequence[Sequence[float]]) -> list[tuple[float, float, float]]:
    """Each program's ``(figure, lo, hi)`` from its per-round figures (``per_round[p][r]``: program
    ``p``'s seconds per call in round ``r``, the programs timed in the same rounds). One program: the
    median and :func:`median_interval` of its rounds. Several: each round's load is the geometric mean
    of its programs' figures, a program's round is divided by it, and its figure is the median of
    those ratios (its interval, :func:`median_interval` of them) × the median load; so load that
    comes and goes between rounds moves no ratio, and a busy machine, whose ratios scatter more from
    round to round, widens the intervals. Example: ``round_figures([[1, 2, 1], [2, 4, 2]])`` is
    ``[(1.0, 1.0, 1.0), (2.0, 2.0, 2.0)]`` (loads √2, 2√2, √2; every ratio 1/√2 and √2)."""
    rows = [[float(x) for x in r] for r in per_round]
    if len(rows) == 1:
        lo, hi = median_interval(rows[0])
        return [(statistics.median(rows[0]), lo, hi)]
    n = min(len(r) for r in rows)
    load = [math.exp(math.fsum(math.log(max(r[j], 1e-300)) for r in rows) / len(rows)) for j in range(n)]
    scale = statistics.median(load)
    out = []
    for r in rows:
        ratios = [r[j] / load[j] for j in range(n)]
        lo, hi = median_interval(ratios)
        out.append((statistics.median(ratios) * scale, lo * scale, hi * scale))
    return out


#: The interleaved timing's share of the training it serves: once its rounds would cost more than
#: this fraction of the seconds its programs are expected to train, they are cut (one call per
#: round, at least :data:`FLOOR_ROUNDS` rounds).
TIMING_SHARE = 0.2
#: The fewest rounds a bounded timing takes: the fewest whose median interval reaches 95%
#: (:func:`median_interval`: 6 values give ``(min, max)`` at 96.9%).
FLOOR_ROUNDS = 6


def bounded_rounds(call_s: Sequence[float], train_calls: Sequence[float], block: int, min_rounds: int,
                   max_seconds: float, share: float = TIMING_SHARE) -> tuple[int, int, float, bool]:
    """An interleaved timing's ``(block, min_rounds, max_seconds, bounded)`` once its programs'
    warm calls took ``call_s`` seconds each: unchanged while ``min_rounds`` rounds of ``block``
    calls cost at most ``share`` × the training the programs serve (``train_calls[i]`` calls of
    program ``i``), its extra rounds (``max_seconds``) then capped by that; else one call per
    round, as many rounds as fit, at least :data:`FLOOR_ROUNDS` and at most ``min_rounds``, and
    no extra ones (``bounded`` True). Example: 6 programs of 0.1 s per call, 32 training calls
    each, block 2, 10 rounds: rounds cost 1.2 s, the bound is 0.2 × 19.2 s = 3.84 s, so
    ``(1, 6, 0.0, True)``."""
    cap = share * math.fsum(c * n for c, n in zip(call_s, train_calls, strict=True))
    per_call = math.fsum(call_s)
    if min_rounds * block * per_call <= cap:
        return block, min_rounds, min(max_seconds, max(0.0, cap - min_rounds * block * per_call)), False
    fit = int(cap // per_call) if per_call > 0 else min_rounds
    return 1, max(FLOOR_ROUNDS, min(min_rounds, fit)), 0.0, True


def rounds_left(done: int, elapsed_s: float, min_rounds: int, max_rounds: int,
                max_seconds: float) -> tuple[int, float]:
    """``(at most how many rounds in all, seconds left at most)`` of a timing that did ``done``
    rounds in ``elapsed_s`` seconds and stops after ``min_rounds`` once stable or ``max_seconds``
    passed, after ``max_rounds`` at the latest (its progress line)."""
    per = elapsed_s / done if done else 0.0
    by_time = math.ceil(max_seconds / per) if per > 0 else max_rounds
    planned = min(max_rounds, max(min_rounds, by_time, done))
    return planned, (planned - done) * per
