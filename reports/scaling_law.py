"""One scaling law for several optimizers: shared exponents, per-optimizer efficiency factors.

**The law.** For optimizer ``o`` training a model of ``N`` parameters on ``D`` tokens, the final
validation loss is modelled as

    L_o(N, D) = E + A · (ρ_N,o · N)^−α + B · (ρ_D,o · D)^−β

with ``E, A, B, α, β`` shared by every optimizer (Hoffmann et al. 2022, "Training Compute-Optimal
Large Language Models", eq. 2) and two factors per optimizer that rescale the *model size* and the
*data* that enter the approximation and the estimation terms: ``ρ_N,o`` (parameter efficiency: ``o``
gets from ``N`` parameters what the baseline gets from ``ρ_N,o · N``) and ``ρ_D,o`` (data
efficiency, likewise for tokens). The baseline's factors are 1. This follows the idea of Volkova,
Safaryan, Lampert and Alistarh (2026, "Towards Robust Scaling Laws for Optimizers",
arXiv:2602.07712): separate Chinchilla fits per optimizer are ill-conditioned with highly correlated
parameters, so the exponents are shared and each optimizer gets rescaling factors ``ρ_N``, ``ρ_D``;
their exact parameterisation is not reproduced from the paper here (only its stated idea), so this
module's law is the one above. ``rescale`` may keep only one of the two kinds of factor.

**The fit** (Hoffmann et al.'s Approach 3): minimise ``Σ_i Huber_δ(log L̂_i − log L_i)`` with
``δ = 1e-3`` over the free parameters, from a grid of starting points, keeping the best. Hoffmann
et al. minimise it with L-BFGS; here ``scipy.optimize.least_squares`` (trust-region reflective,
``loss="huber"``, ``f_scale=δ``, whose cost ``½ Σ ρ`` is exactly ``Σ Huber_δ``) minimises the same
objective with the analytic Jacobian, reaching L-BFGS-B's optimum in fewer evaluations
(``docs/decisions.md``).
``E`` is either *known* (the Markov source's exact loss floor: the harness logs it as
``dataset/loss_floor``, :mod:`harness.data.sequences`) or fitted (bounded below the smallest
observed loss). Internally ``log N`` and ``log D`` are centred on their means
(``A``, ``B`` are converted back), ``A, B, E`` fitted as logs, the factors as ``log ρ``.

**Condition.** :attr:`LawFit.condition` is the 2-norm condition number of the Jacobian of the
residuals ``log L̂ − log L`` with respect to the free parameters, at the optimum, in the centred
parameterisation (``a = log A′, b = log B′, α, β, [e = log E], log ρ…``); the Gauss–Newton Hessian
``JᵀJ`` has its square. :attr:`LawFit.max_correlation` is the largest ``|correlation|`` between two
parameters read from ``(JᵀJ)⁻¹``. Fitting ``E`` adds a column to ``J``, which cannot lower the
condition number at a given point (interlacing of singular values); the report shows both fits.

**Intervals.** :func:`bootstrap_law` resamples the points with replacement *within each optimizer*
(``scipy.stats.bootstrap``, one sample per optimizer, ``method="percentile"``), refits from the full
fit's optimum (at most 200 evaluations per refit), and gives percentile intervals of every
parameter and factor.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["DELTA", "LawFit", "LawPoints", "bootstrap_law", "factors_table", "fit_law", "law_speedup"]

#: Hoffmann et al.'s Huber threshold on log-loss residuals.
DELTA = 1e-3
_BOUND_EXP = (1e-3, 4.0)
_BOUND_LOGRHO = (-12.0, 12.0)


@dataclass(frozen=True)
class LawPoints:
    """The measured points: ``optimizer`` (names), ``N`` (parameters), ``D`` (tokens) and ``loss``
    (final validation loss, nats), each of length ``n``; one point per trained run (a seed)."""

    optimizer: tuple[str, ...]
    N: np.ndarray
    D: np.ndarray
    loss: np.ndarray

    @classmethod
    def make(cls, optimizer: Sequence[str], N, D, loss) -> LawPoints:
        """Checked points.

        Raises:
          ValueError: lengths differ, fewer than 2 points, or a non-positive or non-finite value.
        """
        n_, d_, l_ = (np.asarray(v, np.float64).reshape(-1) for v in (N, D, loss))
        opts = tuple(str(o) for o in optimizer)
        if not len(opts) == n_.size == d_.size == l_.size or n_.size < 2:
            raise ValueError(f"optimizer, N, D and loss need one equal length >= 2, got "
                             f"{len(opts)}, {n_.size}, {d_.size}, {l_.size}")
        for name, v in (("N", n_), ("D", d_), ("loss", l_)):
            if not (np.all(np.isfinite(v)) and np.all(v > 0)):
                raise ValueError(f"{name} must be finite and > 0")
        return cls(opts, n_, d_, l_)

    def take(self, idx: np.ndarray) -> LawPoints:
        return LawPoints(tuple(self.optimizer[i] for i in idx), self.N[idx], self.D[idx], self.loss[idx])


@dataclass(frozen=True)
class LawFit:
    """A fitted law (module docstring).

    Attributes:
      E, A, B, alpha, beta: the shared parameters (``E`` in nats; ``A``, ``B`` in nats at ``N = 1``,
        ``D = 1``). E_fitted: whether ``E`` was fitted (else it was given).
      rho_n, rho_d: optimizer -> factor ``ρ_N``, ``ρ_D`` (the baseline's 1.0; a kind not in
        ``rescale``: all 1.0).
      baseline: the optimizer whose factors are 1. rescale: which factors were fitted.
      residuals: ``float (n,)``: ``log L̂ − log L`` per point, in the points' order.
      objective: the Huber objective at the optimum (``Σ Huber_δ(r)``).
      condition: the Jacobian's condition number at the optimum. max_correlation: the largest
        parameter correlation from ``(JᵀJ)⁻¹`` (``nan`` when ``JᵀJ`` is singular).
      names: the free parameters' names, in the Jacobian's column order. theta: their values
        (centred parameterisation; :func:`bootstrap_law` starts from it).
    """

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    E_fitted: bool
    rho_n: dict[str, float]
    rho_d: dict[str, float]
    baseline: str
    rescale: tuple[str, ...]
    residuals: np.ndarray
    objective: float
    condition: float
    max_correlation: float
    names: tuple[str, ...]
    theta: np.ndarray = field(repr=False)
    centre: tuple[float, float] = (0.0, 0.0)

    def predict(self, optimizer: str, N, D) -> np.ndarray:
        """``L_o(N, D)`` (nats) for arrays ``N``, ``D`` (broadcast).

        Raises:
          KeyError: an optimizer the fit has no factor for."""
        N, D = np.asarray(N, np.float64), np.asarray(D, np.float64)
        return (self.E + self.A * (self.rho_n[optimizer] * N) ** -self.alpha
                + self.B * (self.rho_d[optimizer] * D) ** -self.beta)


def law_speedup(fit: LawFit, optimizer: str, N, tokens_per_param: float) -> np.ndarray:
    """The law's data-efficiency speed-up of ``optimizer`` over the baseline at model size ``N``
    trained on ``D = tokens_per_param · N`` tokens (Wen et al.'s definition read off the law): the
    tokens ``D_b`` with which the baseline reaches ``L_o(N, D)`` at the same ``N``, over ``D``:
    ``B·D_b^−β = L_o(N, D) − E − A·N^−α``. ``inf`` where that is ``<= 0`` (no amount of data
    brings the baseline's model of size ``N`` to ``o``'s loss). ``float`` array shaped like ``N``.
    """
    N = np.asarray(N, np.float64)
    D = tokens_per_param * N
    rest = fit.predict(optimizer, N, D) - fit.E - fit.A * N ** -fit.alpha
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d_b = np.where(rest > 0, (np.maximum(rest, 1e-300) / fit.B) ** (-1.0 / fit.beta), np.inf)
    return d_b / D


# ----------------------------------------------------------------------------------------- fitting


class _Problem:
    """Residuals and Jacobian of the centred parameterisation for one set of points."""

    def __init__(self, pts: LawPoints, baseline: str, E: float | None, rescale: tuple[str, ...],
                 others: list[str], centre: tuple[float, float]):
        self.x = np.log(pts.N) - centre[0]
        self.y = np.log(pts.D) - centre[1]
        self.logL = np.log(pts.loss)
        self.E = E
        self.others = others
        col = {o: i for i, o in enumerate(others)}
        self.who = np.array([col.get(o, -1) for o in pts.optimizer])  # -1: the baseline
        self.rescale = rescale
        self.names = (("a", "b", "alpha", "beta") + (("e",) if E is None else ())
                      + tuple(f"log_rho_N[{o}]" for o in others if "N" in rescale)
                      + tuple(f"log_rho_D[{o}]" for o in others if "D" in rescale))

    def split(self, th: np.ndarray):
        a, b, al, be = th[:4]
        i = 4
        if self.E is None:
            e, i = math.exp(th[4]), 5
        else:
            e = self.E
        k = len(self.others)
        u = np.zeros(k)
        v = np.zeros(k)
        if "N" in self.rescale:
            u, i = th[i:i + k], i + k
        if "D" in self.rescale:
            v = th[i:i + k]
        return a, b, al, be, e, u, v

    def resid_jac(self, th: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a, b, al, be, e, u, v = self.split(th)
        ui = np.where(self.who >= 0, u[np.maximum(self.who, 0)] if u.size else 0.0, 0.0)
        vi = np.where(self.who >= 0, v[np.maximum(self.who, 0)] if v.size else 0.0, 0.0)
        tn = np.exp(a - al * (self.x + ui))
        td = np.exp(b - be * (self.y + vi))
        s = e + tn + td
        r = np.log(s) - self.logL
        cols = [tn / s, td / s, -tn * (self.x + ui) / s, -td * (self.y + vi) / s]
        if self.E is None:
            cols.append(e / s)
        k = len(self.others)
        onehot = (self.who[:, None] == np.arange(k)[None, :]).astype(float)
        if "N" in self.rescale:
            cols += [(-al * tn / s) * onehot[:, j] for j in range(k)]
        if "D" in self.rescale:
            cols += [(-be * td / s) * onehot[:, j] for j in range(k)]
        return r, np.stack(cols, axis=1)


def _bounds(prob: _Problem, min_loss: float) -> list[tuple[float | None, float | None]]:
    out: list[tuple[float | None, float | None]] = [(-30.0, 10.0), (-30.0, 10.0), _BOUND_EXP, _BOUND_EXP]
    if prob.E is None:
        out.append((math.log(1e-6 * min_loss), math.log(min_loss * (1 - 1e-9))))
    out += [_BOUND_LOGRHO] * (len(prob.names) - len(out))
    return out


def _starts(prob: _Problem, pts: LawPoints) -> list[np.ndarray]:
    """A grid of starting points (Hoffmann et al. start L-BFGS from a grid and keep the best)."""
    lmin, lmax = float(pts.loss.min()), float(pts.loss.max())
    floors = [prob.E] if prob.E is not None else [0.5 * lmin, 0.9 * lmin, 0.99 * lmin]
    n_rho = len(prob.names) - (5 if prob.E is None else 4)
    out = []
    for e0 in floors:
        span = max(lmax - e0, 1e-3 * lmax)
        for al, be, fa, fb in itertools.product((0.15, 0.5), (0.15, 0.5), (0.1, 0.5), (0.1, 0.5)):
            th = [math.log(fa * span), math.log(fb * span), al, be]
            if prob.E is None:
                th.append(math.log(e0))
            out.append(np.array(th + [0.0] * n_rho))
    return out


def _solve(prob: _Problem, starts: list[np.ndarray], bounds, delta: float,
           polish: int = 3, max_nfev: int = 2000) -> tuple[np.ndarray, float]:
    """The best robust least-squares solution from ``starts``: ``(theta, Σ Huber_δ(r))``. Each start
    gets a short solve (60 evaluations); the ``polish`` best are then solved to convergence (an
    ill-posed problem, such as a ladder with one data budget, otherwise spends thousands of
    evaluations per start crawling along a flat valley)."""
    from scipy.optimize import least_squares

    lo = np.array([b[0] for b in bounds])
    hi = np.array([b[1] for b in bounds])

    def run(th0: np.ndarray, nfev: int):
        th0 = np.clip(th0, lo + 1e-9 * (1 + np.abs(lo)), hi - 1e-9 * (1 + np.abs(hi)))
        return least_squares(lambda th: prob.resid_jac(th)[0], th0, jac=lambda th: prob.resid_jac(th)[1],
                             bounds=(lo, hi), loss="huber", f_scale=delta, method="trf",
                             xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=nfev)

    short = [r for r in (run(th0, 60) for th0 in starts) if np.isfinite(r.cost)]
    if not short:
        raise RuntimeError("the scaling-law fit found no finite optimum from any starting point")
    short.sort(key=lambda r: r.cost)
    done = [r if r.status > 0 else run(r.x, max_nfev) for r in short[:polish]]
    best = min(done, key=lambda r: r.cost)
    return best.x, float(best.cost)


def fit_law(points: LawPoints, baseline: str, *, E: float | None = None,
            rescale: Sequence[str] = ("N", "D"), delta: float = DELTA,
            starts: list[np.ndarray] | None = None) -> LawFit:
    """Fit the law of the module docstring to ``points``.

    Args:
      points: :class:`LawPoints` (one per run). baseline: the optimizer whose factors are 1; it
        must have points.
      E: the known irreducible loss (nats; must be below every observed loss), or ``None`` to fit it.
      rescale: which factors each non-baseline optimizer gets: ``("N", "D")``, ``("D",)``,
        ``("N",)`` or ``()`` (one law for all).
      delta: the Huber threshold on log-loss residuals. starts: starting points (centred
        parameterisation, the order of :attr:`LawFit.names`); default: a grid.

    Returns:
      :class:`LawFit`.

    Raises:
      ValueError: no point of ``baseline``, a known ``E`` not below every loss, an unknown kind in
        ``rescale``. RuntimeError: no start reached a finite optimum.
    """
    rescale = tuple(rescale)
    if set(rescale) - {"N", "D"}:
        raise ValueError(f"rescale takes 'N' and/or 'D', got {rescale}")
    if baseline not in points.optimizer:
        raise ValueError(f"the baseline {baseline!r} has no point; optimizers: "
                         f"{', '.join(sorted(set(points.optimizer)))}")
    if E is not None and not (0 <= E < points.loss.min()):
        raise ValueError(f"a known E must be >= 0 and below every observed loss "
                         f"({points.loss.min():.6g}), got {E}")
    others = sorted(set(points.optimizer) - {baseline})
    centre = (float(np.log(points.N).mean()), float(np.log(points.D).mean()))
    prob = _Problem(points, baseline, E, rescale, others, centre)
    theta, f = _solve(prob, starts or _starts(prob, points), _bounds(prob, float(points.loss.min())), delta)
    return _make_fit(prob, theta, f, baseline, centre, delta)


def _make_fit(prob: _Problem, theta: np.ndarray, f: float, baseline: str, centre, delta: float) -> LawFit:
    a, b, al, be, e, u, v = prob.split(theta)
    r, J = prob.resid_jac(theta)
    sv = np.linalg.svd(J, compute_uv=False)
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else math.inf
    try:
        cov = np.linalg.inv(J.T @ J)
        sd = np.sqrt(np.diag(cov))
        corr = cov / np.outer(sd, sd)
        np.fill_diagonal(corr, 0.0)
        max_corr = float(np.nanmax(np.abs(corr))) if corr.size > 1 else 0.0
    except np.linalg.LinAlgError:
        max_corr = math.nan
    rho_n = {baseline: 1.0, **{o: float(math.exp(u[j])) if "N" in prob.rescale else 1.0
                               for j, o in enumerate(prob.others)}}
    rho_d = {baseline: 1.0, **{o: float(math.exp(v[j])) if "D" in prob.rescale else 1.0
                               for j, o in enumerate(prob.others)}}
    return LawFit(E=float(e), A=float(math.exp(a + al * centre[0])), B=float(math.exp(b + be * centre[1])),
                  alpha=float(al), beta=float(be), E_fitted=prob.E is None, rho_n=rho_n, rho_d=rho_d,
                  baseline=baseline, rescale=prob.rescale, residuals=r, objective=f,
                  condition=cond, max_correlation=max_corr, names=prob.names, theta=np.asarray(theta),
                  centre=centre)


def bootstrap_law(points: LawPoints, fit: LawFit, *, n_resamples: int = 200, level: float = 0.90,
                  seed: int = 0, delta: float = DELTA) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap intervals of the fit's parameters (module docstring).

    Returns:
      ``name -> (low, high)`` for ``"alpha"``, ``"beta"``, ``"E"`` (when fitted), and
      ``"rho_N[o]"`` / ``"rho_D[o]"`` for every non-baseline optimizer with that factor.
    """
    from scipy.stats import bootstrap

    opts = sorted(set(points.optimizer))
    groups = [np.flatnonzero(np.array(points.optimizer) == o) for o in opts]
    E = None if fit.E_fitted else fit.E
    others = sorted(set(points.optimizer) - {fit.baseline})
    keys = ["alpha", "beta"] + (["E"] if fit.E_fitted else [])
    keys += [f"rho_N[{o}]" for o in others if "N" in fit.rescale]
    keys += [f"rho_D[{o}]" for o in others if "D" in fit.rescale]

    def stat(*idx):
        sub = points.take(np.concatenate([g[i.astype(int)] for g, i in zip(groups, idx, strict=True)]))
        prob = _Problem(sub, fit.baseline, E, fit.rescale, others, fit.centre)
        th, f = _solve(prob, [fit.theta], _bounds(prob, float(sub.loss.min())), delta, max_nfev=200)
        g = _make_fit(prob, th, f, fit.baseline, fit.centre, delta)
        vals = [g.alpha, g.beta] + ([g.E] if fit.E_fitted else [])
        vals += [g.rho_n[o] for o in others if "N" in fit.rescale]
        vals += [g.rho_d[o] for o in others if "D" in fit.rescale]
        return np.array(vals)

    res = bootstrap(tuple(np.arange(g.size) for g in groups), stat, vectorized=False, paired=False,
                    n_resamples=n_resamples, confidence_level=level, method="percentile",
                    rng=np.random.default_rng(seed))
    lo, hi = np.atleast_1d(res.confidence_interval.low), np.atleast_1d(res.confidence_interval.high)
    return {k: (float(lo[i]), float(hi[i])) for i, k in enumerate(keys)}


def factors_table(fit: LawFit, intervals: Mapping[str, tuple[float, float]] | None = None) -> list[dict]:
    """One row per optimizer: ``optimizer``, ``rho_N``, ``rho_D`` and their intervals when given."""
    rows = []
    for o in sorted(fit.rho_n, key=lambda o: (o != fit.baseline, o)):
        row = {"optimizer": o, "rho_N": fit.rho_n[o], "rho_D": fit.rho_d[o]}
        if intervals:
            row["rho_N_interval"] = intervals.get(f"rho_N[{o}]")
            row["rho_D_interval"] = intervals.get(f"rho_D[{o}]")
        rows.append(row)
    return rows
