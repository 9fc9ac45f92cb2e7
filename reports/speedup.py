"""Data-efficiency speed-up over a tuned baseline (Wen, Hall, Ma and Liang 2025, "Fantastic
Pretraining Optimizers and Where to Find Them", arXiv:2509.02046, §3).

**Definition.** Optimizer X trained with ``D_X`` tokens ends at validation loss ``L_X``. The tuned
baseline (AdamW, at the same model size) has a loss-vs-tokens curve ``(D_i, L_i)``; ``D_base`` is
the number of tokens at which that curve first reaches ``L_X``. The speed-up is ``D_base / D_X``:
1 = as data-efficient as the baseline, 2 = the baseline needs twice the tokens for X's loss.
Wen et al. read it at the *end* of training (a decaying schedule's intermediate losses can flip
rankings); which curve the caller passes decides that: end-of-training losses at several token
budgets (one run per budget, the rigorous curve), or one run's evaluations (a within-run curve,
exact only for a schedule that does not depend on the budget, such as a constant one).

**Interpolation.** Linear in ``log D`` between the two evaluations that bracket ``L_X``: with ``i``
the first index where ``L_i <= L_X``, ``log D_base = log D_{i-1} + f·(log D_i − log D_{i-1})``,
``f = (L_{i-1} − L_X) / (L_{i-1} − L_i)``. The *first* crossing is taken, so a noisy curve that
rises again later does not move the answer back. **No extrapolation:**

* X's loss below every point of the baseline's curve (X beats the baseline's best): the baseline
  does not reach it within ``D_n`` tokens, and the speed-up is reported as a lower bound
  ``> D_n / D_X`` (:attr:`SpeedUp.bound` ``">"``).
* X's loss at or above the curve's first point, which already reaches it: an upper bound
  ``< D_1 / D_X`` (``"<"``; equality at the first point is exact, ``"="``).

**Interval over seeds.** The baseline's curve is the pointwise mean over its seeds (all on one
token grid); X's loss is the mean of its seeds' final losses. :func:`speedup_interval` resamples X's
seeds and the baseline's seeds independently, with replacement (``scipy.stats.bootstrap``, two
samples, ``method="percentile"``), recomputing the speed-up of each resample; a censored resample
counts at its bound and the fraction of such resamples is reported beside the interval. With few
seeds (2 per side: 3 × 3 distinct resamples) the percentile interval is close to the range over
seed combinations; it says how far seeds move the answer, not a calibrated 95% interval. A side
with one seed (a rung whose other seed failed or has not run yet) is held fixed and the other
side's seeds are resampled alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["SpeedUp", "SpeedUpInterval", "baseline_tokens_to_reach", "speedup", "speedup_interval"]

#: Bootstrap defaults of :func:`speedup_interval`.
N_RESAMPLES = 1000
LEVEL = 0.90


@dataclass(frozen=True)
class SpeedUp:
    """One speed-up.

    Attributes:
      value: ``D_base / D_X`` (a bound when ``bound`` is not ``"="``).
      bound: ``"="`` (interpolated), ``">"`` (X's loss is below the baseline's whole curve: a lower
        bound) or ``"<"`` (the baseline's first point already reaches it: an upper bound).
      tokens: ``D_X``, the tokens X used. baseline_tokens: ``D_base`` (or the curve's end it is
        bounded by).
    """

    value: float
    bound: str
    tokens: float
    baseline_tokens: float

    def text(self, digits: int = 2) -> str:
        """``"1.32×"``, ``"> 4.00×"`` or ``"< 0.50×"``."""
        head = "" if self.bound == "=" else f"{self.bound} "
        return f"{head}{self.value:.{digits}f}×"


@dataclass(frozen=True)
class SpeedUpInterval:
    """A speed-up with its bootstrap interval over seeds (:func:`speedup_interval`).

    Attributes:
      estimate: the speed-up of the seed means. low, high: the percentile interval's ends at
        ``level``. censored: the fraction of resamples that were a bound (``>`` or ``<``) rather than
        interpolated; ``> 0`` means an end of the interval is itself a bound.
      n_seeds, n_base_seeds: seeds of X and of the baseline.
    """

    estimate: SpeedUp
    low: float
    high: float
    level: float
    censored: float
    n_seeds: int
    n_base_seeds: int

    def text(self) -> str:
        """``"1.32× [1.20, 1.45]"`` plus ``" (25% of resamples censored)"`` when some were."""
        s = f"{self.estimate.text()} [{self.low:.2f}, {self.high:.2f}]"
        if self.censored > 0:
            s += f" ({self.censored:.0%} of resamples censored)"
        return s


def _curve(tokens, losses) -> tuple[np.ndarray, np.ndarray]:
    d = np.asarray(tokens, np.float64)
    loss = np.asarray(losses, np.float64)
    if d.ndim != 1 or loss.shape != d.shape or d.size == 0:
        raise ValueError(f"the baseline's curve needs 1-D tokens and losses of one length, got shapes "
                         f"{d.shape} and {loss.shape}")
    if not (np.all(np.isfinite(d)) and np.all(d > 0) and np.all(np.diff(d) > 0)):
        raise ValueError("the baseline's tokens must be finite, positive and strictly increasing")
    if not np.all(np.isfinite(loss)):
        raise ValueError("the baseline's losses must be finite (a diverged baseline has no curve)")
    return d, loss


def baseline_tokens_to_reach(tokens, losses, target: float) -> tuple[float, str]:
    """The tokens at which the curve ``(tokens, losses)`` first reaches ``target`` (module docstring).

    Args:
      tokens: ``float (n,)``, strictly increasing, > 0. losses: ``float (n,)``, finite.
      target: the loss to reach.

    Returns:
      ``(D, bound)``: ``bound`` ``"="`` with ``D`` interpolated linearly in log-tokens; ``">"`` with
      ``D = tokens[-1]`` when no point reaches ``target``; ``"<"`` with ``D = tokens[0]`` when the
      first point is already strictly below it.

    Raises:
      ValueError: bad shapes, non-increasing or non-positive tokens, non-finite values.
    """
    d, loss = _curve(tokens, losses)
    if not math.isfinite(target):
        raise ValueError(f"the loss to reach must be finite, got {target}")
    hit = np.flatnonzero(loss <= target)
    if hit.size == 0:
        return float(d[-1]), ">"
    i = int(hit[0])
    if i == 0:
        return float(d[0]), "=" if loss[0] == target else "<"
    f = (loss[i - 1] - target) / (loss[i - 1] - loss[i])
    return float(math.exp(math.log(d[i - 1]) + f * (math.log(d[i]) - math.log(d[i - 1])))), "="


def speedup(tokens, losses, x_tokens: float, x_loss: float) -> SpeedUp:
    """Wen et al.'s speed-up of an optimizer that reached ``x_loss`` with ``x_tokens`` tokens over
    the baseline's curve ``(tokens, losses)`` (module docstring).

    Raises:
      ValueError: a bad curve (:func:`baseline_tokens_to_reach`) or ``x_tokens <= 0``.
    """
    if not x_tokens > 0:
        raise ValueError(f"x_tokens must be > 0, got {x_tokens}")
    d, bound = baseline_tokens_to_reach(tokens, losses, x_loss)
    return SpeedUp(d / x_tokens, bound, float(x_tokens), d)


def speedup_interval(tokens, base_losses, x_tokens: float, x_losses, *, level: float = LEVEL,
                     n_resamples: int = N_RESAMPLES, seed: int = 0) -> SpeedUpInterval:
    """The speed-up of X's seed-mean final loss over the baseline's seed-mean curve, with a
    bootstrap interval over both sets of seeds (module docstring).

    Args:
      tokens: ``float (n,)``: the baseline's token grid (shared by its seeds).
      base_losses: ``float (s_base, n)``: one row per baseline seed.
      x_tokens: tokens X used. x_losses: ``float (s_x,)``: X's final validation loss per seed.
      level: the interval's confidence level. n_resamples, seed: of the bootstrap.

    Raises:
      ValueError: bad shapes or values, or no seed on either side.
    """
    from scipy.stats import bootstrap

    base = np.atleast_2d(np.asarray(base_losses, np.float64))
    xs = np.asarray(x_losses, np.float64).reshape(-1)
    if base.shape[0] == 0 or xs.size == 0:
        raise ValueError("the speed-up needs at least one seed of X and of the baseline")
    if base.shape[1] != np.asarray(tokens).reshape(-1).size:
        raise ValueError(f"base_losses has {base.shape[1]} points per seed, tokens {np.size(tokens)}")
    if not np.all(np.isfinite(xs)):
        raise ValueError("X's final losses must be finite (a diverged seed has no speed-up)")
    est = speedup(tokens, base.mean(0), x_tokens, float(xs.mean()))

    def stat(ix, ib):
        return speedup(tokens, base[ib].mean(0), x_tokens, float(xs[ix].mean()))

    def value(ix, ib):  # the speed-up and whether it is a bound (its mean: the censored fraction)
        s = stat(ix.astype(int), ib.astype(int))
        return np.array([s.value, float(s.bound != "=")])

    if xs.size == 1 and base.shape[0] == 1:  # nothing to resample
        return SpeedUpInterval(est, est.value, est.value, level, float(est.bound != "="), 1, 1)
    one = np.zeros(1)
    if xs.size == 1:  # scipy resamples a sample of 2+ only: the side with one seed is held fixed
        data, fn = (np.arange(base.shape[0]),), (lambda ib: value(one, ib))
    elif base.shape[0] == 1:
        data, fn = (np.arange(xs.size),), (lambda ix: value(ix, one))
    else:
        data, fn = (np.arange(xs.size), np.arange(base.shape[0])), value
    res = bootstrap(data, fn, vectorized=False, paired=False, n_resamples=n_resamples,
                    confidence_level=level, method="percentile", rng=np.random.default_rng(seed))
    return SpeedUpInterval(est, float(res.confidence_interval.low[0]),
                           float(res.confidence_interval.high[0]), level,
                           float(res.bootstrap_distribution[1].mean()), int(xs.size), int(base.shape[0]))
