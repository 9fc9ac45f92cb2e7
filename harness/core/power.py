"""The power of the rank rule's paired test: how many seeds would tell two optimizers apart
(:func:`harness.core.ties.separation`'s number; the rule and its derivation are
:mod:`harness.core.ties`' docstring). Standard library only.
"""

from __future__ import annotations

import math
from statistics import NormalDist

__all__ = ["ALPHA", "MAX_SEEDS", "MIN_SEEDS", "POWER", "power", "rule_critical", "seeds_to_separate",
           "t_critical"]

#: Below this many paired seeds ties are decided by overlapping min–max ranges (and no paired test).
MIN_SEEDS = 5
#: Level of the paired bootstrap interval that separates two optimizers, and its two-sided α.
LEVEL = 0.95
ALPHA = 1 - LEVEL
#: The probability at which the seeds to separate are asked to tell two neighbours apart.
POWER = 0.8
#: The most seeds named; beyond, "> 100".
MAX_SEEDS = 100

_Z = NormalDist().inv_cdf(1 - ALPHA / 2)
_PHI = NormalDist().cdf
#: Simpson intervals of the integral over the chi distribution (:func:`_tail`).
_STEPS = 800


def _tail(c: float, lam: float, nu: int) -> float:
    """``P(|T| > c)`` for ``T`` noncentral t with ``nu`` degrees of freedom and noncentrality
    ``lam``: ``T = (Z + lam) / S`` with ``S = √(χ²_ν / ν)``, so ``P = E_S[Φ(lam - cS) + Φ(-lam -
    cS)]``, integrated over the density of ``S`` (Simpson's rule on a range holding all but
    ~1e-30 of it)."""
    if nu < 1:
        raise ValueError(f"need at least 1 degree of freedom; got {nu}")
    w = 1 / math.sqrt(2 * nu)  # ~ the SD of S
    lo, hi = max(0.0, 1 - 14 * w), 1 + 14 * w + 2 / nu
    log_norm = math.log(2) + (nu / 2) * math.log(nu / 2) - math.lgamma(nu / 2)

    def f(s: float) -> float:
        if s <= 0:
            dens = math.exp(log_norm) if nu == 1 else 0.0
        else:
            dens = math.exp(log_norm + (nu - 1) * math.log(s) - nu * s * s / 2)
        return dens * (_PHI(lam - c * s) + _PHI(-lam - c * s))

    h = (hi - lo) / _STEPS
    total = f(lo) + f(hi)
    for k in range(1, _STEPS):
        total += (4 if k % 2 else 2) * f(lo + k * h)
    return min(1.0, max(0.0, total * h / 3))


def rule_critical(n: int) -> float:
    """The paired t statistic above which the rank rule's bootstrap interval (of ``n`` paired
    seeds) excludes 0, to first order: ``z₀.₉₇₅ · √((n - 1) / n)`` (module docstring)."""
    return _Z * math.sqrt((n - 1) / n)


def t_critical(n: int, alpha: float = ALPHA) -> float:
    """The two-sided paired t-test's critical value at ``alpha`` with ``n`` pairs (the t
    distribution's ``1 - alpha/2`` quantile, ``n - 1`` degrees of freedom), by bisection on
    :func:`_tail`."""
    lo, hi = 0.0, 1e3
    for _ in range(80):
        mid = (lo + hi) / 2
        if _tail(mid, 0.0, n - 1) > alpha:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def power(effect: float, n: int, critical: float | None = None) -> float:
    """The probability that a paired two-sided test of ``n`` normal differences with mean/SD
    ``effect`` rejects at the t statistic's ``critical`` value (default :func:`rule_critical` of
    ``n``: the rank rule): ``P(|T| > critical)``, ``T`` noncentral t (``n - 1`` degrees of freedom,
    noncentrality ``effect·√n``). E.g. ``power(1.0, 8) ≈ 0.830``; with the t-test's critical
    value ``power(1.0, 10, t_critical(10)) ≈ 0.803``."""
    if n < 2:
        raise ValueError(f"a paired test needs at least 2 pairs; got {n}")
    c = rule_critical(n) if critical is None else critical
    return _tail(c, abs(effect) * math.sqrt(n), n - 1)


def seeds_to_separate(effect: float, start: int = MIN_SEEDS, test: str = "rule") -> int | None:
    """The fewest paired seeds ``n >= start`` at which :func:`power` of ``effect`` reaches
    :data:`POWER`, under the rank rule (``test="rule"``) or the paired t-test at :data:`ALPHA`
    (``test="t"``); ``None`` above :data:`MAX_SEEDS` or for an effect of 0. An infinite effect
    (constant nonzero differences) needs ``start``."""
    if test not in ("rule", "t"):
        raise ValueError(f"test must be 'rule' or 't'; got {test!r}")
    if effect == 0 or math.isnan(effect):
        return None
    start = max(2, start)
    if math.isinf(effect):
        return start
    for n in range(start, MAX_SEEDS + 1):
        if power(effect, n, t_critical(n) if test == "t" else None) >= POWER:
            return n
    return None


