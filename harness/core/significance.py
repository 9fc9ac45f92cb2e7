"""Whether a configuration's final validation losses over seeds support "it reaches the target".

Two rules, one record (:class:`TargetClaim`): modded-nanogpt's optimization-track rule
(``(target - mean) * sqrt(n) >= 0.004``, a one-sided z-test at p < 0.01 with the sigma that margin
implies) and a one-sided Student t-test on the seeds' own spread, with its p-value and the seeds it
would take at the observed mean and spread. Standard library only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ALPHA", "MAX_SEEDS", "TRACK_MARGIN", "TRACK_SIGMA", "TargetClaim", "claim_words",
           "t_sf", "target_claim", "verdict_words"]

#: modded-nanogpt's optimization track: a claim passes when ``(target - mean) * sqrt(n) >= 0.004``.
TRACK_MARGIN = 0.004
#: The one-sided level of both tests.
ALPHA = 0.01
#: The sigma the track's margin implies at ``ALPHA`` (``0.004 / z_0.99``, about 0.00172).
TRACK_SIGMA = TRACK_MARGIN / statistics.NormalDist().inv_cdf(1 - ALPHA)
#: Seeds counts past this are reported as ``None`` ("more than MAX_SEEDS").
MAX_SEEDS = 10_000


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for aa in (m * (b - m) * x / ((qam + 2 * m) * (a + 2 * m)),
                   -(a + m) * (qab + m) * x / ((a + 2 * m) * (qap + 2 * m))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x)
                     + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """``P(T > t)`` for Student's t with ``df`` degrees of freedom (``scipy.stats.t.sf``)."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def _t_crit(df: float, alpha: float) -> float:
    """``t`` with ``t_sf(t, df) == alpha`` (bisection)."""
    lo, hi = 0.0, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_sf(mid, df) > alpha else (lo, mid)
    return hi


@dataclass(frozen=True)
class TargetClaim:
    """One configuration's claim "mean final validation loss < target" over ``n`` seeds.

    ``track_statistic`` is ``(target - mean) * sqrt(n)``; ``track_p`` its z-test p-value at
    :data:`TRACK_SIGMA`; ``track_seeds`` the seeds the track's rule needs at this mean. ``sd`` (None
    below 2 seeds), ``t``, ``p_value`` and ``seeds_needed`` are the t-test's, on the seeds' spread.
    A seeds count is None when the mean is not below the target or past :data:`MAX_SEEDS`. ``margin``:
    the √n rule's margin the claim was judged by (a `target.claim` may set its own)."""

    n: int
    mean: float
    target: float
    track_statistic: float
    track_passes: bool
    track_p: float
    track_seeds: int | None
    sd: float | None
    t: float | None
    p_value: float | None
    seeds_needed: int | None
    margin: float = TRACK_MARGIN

    @property
    def passes(self) -> bool:
        """The track's rule and the t-test (where it has 2 seeds or more) both pass at :data:`ALPHA`."""
        return self.track_passes and (self.p_value is None or self.p_value < ALPHA)


def _seeds_t(gap: float, sd: float, alpha: float) -> int | None:
    if gap <= 0:
        return None
    if sd == 0:
        return 2
    z = statistics.NormalDist().inv_cdf(1 - alpha)
    start = max(2, math.ceil((z * sd / gap) ** 2))  # t's quantile exceeds z's: never fewer
    for n in range(start, MAX_SEEDS + 1):
        if gap * math.sqrt(n) / sd >= _t_crit(n - 1, alpha):
            return n
    return None


def target_claim(losses: Sequence[float], target: float, *, alpha: float = ALPHA,
                 margin: float = TRACK_MARGIN) -> TargetClaim:
    """The claim that the mean of ``losses`` (final validation losses, one per seed) is below ``target``.

    Args:
      losses: one finite loss per seed (at least one).
      target: the target validation loss.
      alpha: the t-test's one-sided level.
      margin: the track's margin (modded-nanogpt: 0.004).

    Returns:
      A :class:`TargetClaim`.

    Raises:
      ValueError: no losses, or a non-finite one.
    """
    xs = [float(x) for x in losses]
    if not xs or not all(math.isfinite(x) for x in xs):
        raise ValueError(f"target_claim needs finite losses, got {xs!r}")
    n, mean = len(xs), statistics.fmean(xs)
    gap = target - mean
    stat = gap * math.sqrt(n)
    track_seeds = None if gap <= 0 else math.ceil((margin / gap) ** 2 - 1e-12)
    sd = t = p = needed = None
    if n >= 2:
        sd = statistics.stdev(xs)
        if sd == 0:
            t, p = math.copysign(math.inf, gap) if gap else 0.0, 0.0 if gap > 0 else 1.0
        else:
            t = gap * math.sqrt(n) / sd
            p = t_sf(t, n - 1)
        needed = _seeds_t(gap, sd, alpha)
    return TargetClaim(n=n, mean=mean, target=target, track_statistic=stat,
                       track_passes=stat >= margin - 1e-12,  # (3.28 - 3.278)·√4 is a hair under 0.004
                       track_p=0.5 * math.erfc(stat / TRACK_SIGMA / math.sqrt(2)),
                       track_seeds=track_seeds if track_seeds is None or track_seeds <= MAX_SEEDS else None,
                       sd=sd, t=t, p_value=p, seeds_needed=needed, margin=margin)


def verdict_words(c: TargetClaim) -> str:
    """``"PASSES"``, or ``"does not pass"`` and the seeds that would make it pass at this mean."""
    if c.passes:
        return "PASSES"
    need = c.seeds_needed if c.p_value is not None else c.track_seeds
    if need is None:
        return "does not pass; more seeds would not help at this mean"
    return f"does not pass; about {need} seeds would, at this mean" + ("" if c.sd is None else " and spread")


def claim_words(c: TargetClaim) -> str:
    """One line: mean over n seeds against the target, the track's statistic, the t-test, the verdict."""
    head = (f"mean {c.mean:.4f} over {c.n} seed{'s' * (c.n != 1)} vs target {c.target:g}: "
            f"(target - mean)·√n = {c.track_statistic:.4f} ({'≥' if c.track_passes else '<'} "
            f"{c.margin:g})")
    if c.p_value is not None:
        head += f", t-test p = {c.p_value:.2g}"
    return f"{head}: {verdict_words(c)}"
