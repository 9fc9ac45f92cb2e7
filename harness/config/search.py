"""Search spaces and their sampling: the one module that both the config validator
(:mod:`harness.config`) and the planner (:mod:`harness.plan.expansion`) use.

A hyperparameter value in a config is one of

- a **fixed value** (``0.9``), a **grid axis** (a list ``[0.9, 0.99]`` or ``{log_grid: [lo, hi, num]}``),
  a literal (``{value: X}``, e.g. for a list-valued hyperparameter) — see
  :func:`harness.config.values.hparam_values`;
- a **distribution** (:class:`Distribution`), sampled by the search:

  ``{log_uniform: [lo, hi]}``  ``exp(U(log lo, log hi))``, needs ``0 < lo < hi``;
  ``{uniform: [lo, hi]}``      ``U(lo, hi)``, needs ``lo < hi``;
  ``{int_uniform: [lo, hi]}``  an integer in ``lo..hi`` (both included), needs integers ``lo < hi``;
  ``{choice: [a, b, ...]}``    one of the options (at least one), each equally likely.

The search of a sweep is ``search: {method, trials, seed}`` at the top level of a config (and may be
overridden field by field on an optimizer entry):

- ``quasirandom`` (default): a scrambled Halton sequence (:class:`scipy.stats.qmc.Halton`, scrambled
  with ``numpy.random.default_rng(seed)``) in the unit cube of the cell's sampled dimensions, each
  coordinate mapped through its distribution (:meth:`Distribution.map`);
- ``random``: i.i.d. uniform points of the unit cube from ``numpy.random.default_rng(seed)``, mapped
  the same way;
- ``grid``: nothing is sampled; a distribution under ``grid`` is a config error.

``trials`` is the number of configurations per cell, a cell being one (model, dataset, optimizer,
schedule) combination of config entries; every configuration runs with every seed. Grid axes stay
crossed: a cell with a grid axis of 3 values and ``trials: 16`` has 3 × 16 configurations (the same
16 sampled points for each grid value). The sampled dimensions of a cell are the distributions of its
model, optimizer and schedule entries, in that order and in each entry's key order.

**Prefix stability.** Point ``k`` of a sequence depends only on the seed, the number of dimensions
and ``k``, never on ``trials``: raising ``trials`` from 16 to 32 keeps the first 16 points bit-for-bit,
so their trials keep their ``trial_id`` and a re-run skips them as FINISHED. (Both generators draw
their points in order from a state fixed at construction; :func:`unit_points` is tested for this.) The
points are the same for every cell of the same dimension, so optimizers with the same space see the
same configurations. Sampled floats are rounded to 6 significant digits (as ``log_grid`` values are)
and clipped into ``[lo, hi]``: readable in run names and MLflow params, and independent of the last
bits of ``exp``/``log``. A different scipy whose scrambling differs would give different points, hence
new trial ids, never a silent mix.

This module imports numpy and scipy only inside the sampling functions; parsing needs neither.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.config.numbers import is_num
from harness.core.finite import finite
from harness.core.names import FIXED_METHODS, TAG_SEARCH, TAG_SEARCH_INDEX

#: The distribution forms, the key of their one-key mapping.
DISTRIBUTIONS = ("log_uniform", "uniform", "int_uniform", "choice")
#: The early-stopping methods (:mod:`harness.orchestrate.asha`): rungs at evaluation steps.
ASHA_METHODS = ("asha", "successive_halving", "hyperband")
#: The adaptive methods: the sweep is a loop, propose -> train -> observe -> propose
#: (:mod:`harness.orchestrate.searchers`); every decision is a function of what the store holds.
ADAPTIVE_METHODS = (*ASHA_METHODS, "coordinate_descent", "optuna")
#: Search methods of ``search.method``.
METHODS = (*FIXED_METHODS, *ADAPTIVE_METHODS)
#: Samplers of ``search.sampler``: Optuna's (``method: optuna``) and the sequences that draw an
#: early-stopping method's configurations (``asha``, ``successive_halving``, ``hyperband``).
OPTUNA_SAMPLERS = ("tpe", "cmaes", "gp", "random")
SEQUENCE_SAMPLERS = ("quasirandom", "random")
#: Why ``sampler: gp`` is refused where torch cannot be imported (Optuna's GPSampler needs it; torch
#: is not a dependency of the harness).
GP_NEEDS_TORCH_REASON = ("gp (Optuna's GPSampler) needs torch, which is not installed: pip install "
                         "torch (the CPU build is enough), or choose sampler tpe, cmaes or random")
#: The options of ``search`` beyond method/trials/seed and the methods each applies to.
OPTION_METHODS: dict[str, tuple[str, ...]] = {
    "min_steps": ASHA_METHODS, "eta": ASHA_METHODS, "brackets": ("hyperband",), "audit": ASHA_METHODS,
    "passes": ("coordinate_descent",), "start": ("coordinate_descent",),
    "sampler": ("optuna", *ASHA_METHODS), "batch": ("optuna",),
}
def option_errors(block: Any, method: str, why: str = "") -> list[str]:
    """What a ``search`` block (a config's section: ``eta``, ``sampler``, ...) sets that ``method``
    does not take: one line per option of :data:`OPTION_METHODS` of another method
    (``eta applies to method asha or successive_halving or hyperband, not coordinate_descent``),
    and a sampler its method does not take; ``why`` follows the method (where it came from)."""
    out = [f"{k} applies to method {' or '.join(ms)}, not {method}{why}"
           for k, ms in OPTION_METHODS.items() if getattr(block, k, None) is not None and method not in ms]
    sampler = getattr(block, "sampler", None)
    valid = OPTUNA_SAMPLERS if method == "optuna" else SEQUENCE_SAMPLERS
    if sampler is not None and method in OPTION_METHODS["sampler"] and sampler not in valid:
        out.append(f"sampler {sampler} does not apply to method {method}{why}; valid: {', '.join(valid)}")
    return out


#: The method used when a config gives ``search`` without ``method``.
DEFAULT_METHOD = "quasirandom"
#: Run tags of a sampled trial: the method that sampled it and its index in the sequence.
SEARCH_TAG = TAG_SEARCH
SEARCH_INDEX_TAG = TAG_SEARCH_INDEX


def _round6(x: float) -> float:
    return float(f"{x:.6g}")


@dataclass(frozen=True, eq=True)
class Distribution:
    """One sampled dimension: ``kind`` is one of :data:`DISTRIBUTIONS`; ``args`` is ``(lo, hi)`` for
    the range kinds (floats; ints for ``int_uniform``) and the tuple of options for ``choice``.

    Build it with :func:`parse_distribution` (which checks the arguments)."""

    kind: str
    args: tuple

    @property
    def lo(self) -> Any:
        return self.args[0]

    @property
    def hi(self) -> Any:
        return self.args[-1]

    @property
    def produces_floats(self) -> bool:
        """Whether sampled values are non-integer numbers (``uniform``, ``log_uniform``)."""
        return self.kind in ("uniform", "log_uniform")

    def map(self, u: float) -> Any:
        """The value at unit coordinate ``u`` in ``[0, 1)``.

        - ``log_uniform``: ``lo * (hi / lo) ** u``; ``uniform``: ``lo + u * (hi - lo)`` (both rounded
          to 6 significant digits and clipped into ``[lo, hi]``, a Python ``float``);
        - ``int_uniform``: ``lo + floor(u * (hi - lo + 1))`` (an ``int``; each of the ``hi - lo + 1``
          integers gets an equal share of ``[0, 1)``);
        - ``choice``: option ``floor(u * n)`` of the ``n`` options (a copy).

        ``u`` outside ``[0, 1)`` is clipped (``u = 1`` gives ``hi`` / the last option).
        """
        u = min(max(float(u), 0.0), 1.0)
        if self.kind == "choice":
            n = len(self.args)
            return copy.deepcopy(self.args[min(int(u * n), n - 1)])
        lo, hi = self.args
        if self.kind == "int_uniform":
            return int(min(lo + math.floor(u * (hi - lo + 1)), hi))
        if self.kind == "log_uniform":
            x = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
        else:
            x = lo + u * (hi - lo)
        return min(max(_round6(x), float(lo)), float(hi))

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is one this distribution can produce (for matching a sampled trial back
        to its config entry)."""
        if self.kind == "choice":
            return any(value == o and type(value) is type(o) for o in self.args)
        if not is_num(value):
            return False
        if self.kind == "int_uniform" and not isinstance(value, int):
            return False
        return self.lo <= value <= self.hi

    def values_to_check(self) -> list[Any]:
        """Values whose type/range checks stand for every sample: the options of a ``choice``, the
        bounds of a range."""
        return list(self.args)

    def __str__(self) -> str:
        args = ", ".join(repr(a) for a in self.args)
        return f"{{{self.kind}: [{args}]}}"


def is_distribution(x: Any) -> bool:
    """Whether a raw config value is written as a distribution (a one-key mapping whose key is one of
    :data:`DISTRIBUTIONS`), well-formed or not."""
    return isinstance(x, Distribution) or (isinstance(x, Mapping) and len(x) == 1
                                           and next(iter(x)) in DISTRIBUTIONS)


def parse_distribution(x: Mapping[str, Any] | Distribution) -> Distribution:
    """The :class:`Distribution` a config value ``{kind: args}`` describes.

    Raises:
      ValueError: malformed arguments, with the rule that was broken and the value given:
        ``log_uniform must be [lo, hi] (two numbers), got [1]``,
        ``log_uniform needs lo > 0 (it samples on a log scale), got [0, 1]``,
        ``uniform needs lo < hi, got [1, 1]``,
        ``int_uniform needs integer bounds, got [1.5, 3]``,
        ``choice must be a non-empty list of options, got []``.
    """
    if isinstance(x, Distribution):
        return x
    (kind, args), = x.items()
    if kind == "choice":
        if not isinstance(args, list) or not args:
            raise ValueError(f"choice must be a non-empty list of options, got {args!r}")
        return Distribution("choice", tuple(args))
    if not (isinstance(args, list) and len(args) == 2 and all(is_num(a) for a in args)):
        raise ValueError(f"{kind} must be [lo, hi] (two numbers), got {args!r}")
    lo, hi = args
    if not (finite(lo) and finite(hi)):
        raise ValueError(f"{kind} needs finite bounds, got {args!r}")
    if kind == "int_uniform":
        if not all(isinstance(a, int) or float(a).is_integer() for a in args):
            raise ValueError(f"int_uniform needs integer bounds, got {args!r}")
        lo, hi = int(lo), int(hi)
    if kind == "log_uniform" and lo <= 0:
        raise ValueError(f"log_uniform needs lo > 0 (it samples on a log scale), got {args!r}")
    if lo >= hi:
        raise ValueError(f"{kind} needs lo < hi, got {args!r}")
    if kind != "int_uniform":
        lo, hi = float(lo), float(hi)
    return Distribution(kind, (lo, hi))


# --------------------------------------------------------------------------- the search of a cell


@dataclass(frozen=True)
class Search:
    """The resolved search of one cell: ``method`` (one of :data:`METHODS`), ``trials`` (configurations
    to sample; ``None`` under ``grid``; an adaptive method's compute budget: ``trials`` x the budget's
    steps, per optimizer and task) and ``seed``; the adaptive methods' options (``None``: the
    method's default, :mod:`harness.orchestrate.searchers`):

    - ``asha``, ``successive_halving``, ``hyperband``: ``min_steps`` (the first rung, steps),
      ``eta`` (reduction factor, an int >= 2), ``brackets``, ``audit`` (stopped trials also trained
      to the end), ``sampler`` (``quasirandom`` or ``random``: the sequence the configurations come
      from);
    - ``coordinate_descent``: ``passes`` (at most this many passes over the axes), ``start``
      (hyperparameter -> starting value, as sorted ``(name, value)`` pairs);
    - ``optuna``: ``sampler`` (``tpe``, ``cmaes``, ``gp``, ``random``), ``batch`` (proposals per
      round).
    """

    method: str = DEFAULT_METHOD
    trials: int | None = None
    seed: int = 0
    min_steps: int | None = None
    eta: int | None = None
    brackets: int | None = None
    audit: int | None = None
    passes: int | None = None
    start: tuple[tuple[str, Any], ...] = ()
    sampler: str | None = None
    batch: int | None = None

    @property
    def adaptive(self) -> bool:
        """Whether the method is a loop (:data:`ADAPTIVE_METHODS`), not a fixed plan."""
        return self.method in ADAPTIVE_METHODS

    @property
    def sampling(self) -> Search:
        """The fixed sequence this search draws its configurations from: itself for
        ``quasirandom``/``random``; ``sampler`` (default quasirandom) for the early-stopping
        methods and Optuna's candidates (a seed of the sampled space for pre-flight)."""
        if self.method in ("quasirandom", "random"):
            return self
        seq = self.sampler if self.sampler in SEQUENCE_SAMPLERS else DEFAULT_METHOD
        return Search(seq, self.trials, self.seed)


def resolve_search(top: Any | None, entry: Any | None = None) -> Search:
    """The search of a cell from the config's top-level ``search`` and its optimizer entry's
    ``search`` (objects with optional ``method``, ``trials``, ``seed`` and the options of
    :class:`Search`; the entry's fields override the top level's field by field)."""
    fields: dict[str, Any] = {"method": DEFAULT_METHOD, "trials": None, "seed": 0,
                              **{k: None for k in OPTION_METHODS}, "start": ()}
    for layer in (top, entry):
        if layer is None:
            continue
        for k in fields:
            v = getattr(layer, k, None)
            if v is not None:
                fields[k] = tuple(sorted(v.items())) if k == "start" else v
    return Search(**fields)


def unit_points(method: str, n: int, d: int, seed: int) -> Any:
    """The first ``n`` points of the search sequence in ``d`` dimensions: a float64 array of shape
    ``(n, d)`` with entries in ``[0, 1)``. Prefix-stable: ``unit_points(m, n, d, s)`` is the first
    ``n`` rows of ``unit_points(m, n + k, d, s)`` bit-for-bit.

    - ``quasirandom``: ``scipy.stats.qmc.Halton(d, scramble=True, rng=default_rng(seed)).random(n)``;
    - ``random``: ``numpy.random.default_rng(seed).random((n, d))`` (row-major, so row ``k`` is the
      draws ``k*d .. k*d+d-1``).

    Raises:
      ValueError: an unknown or non-sampling method, ``n < 0`` or ``d < 1``.
    """
    import numpy as np

    if d < 1 or n < 0:
        raise ValueError(f"need d >= 1 and n >= 0, got d={d}, n={n}")
    if method == "quasirandom":
        from scipy.stats import qmc

        return qmc.Halton(d, scramble=True, rng=np.random.default_rng(seed)).random(n)
    if method == "random":
        return np.random.default_rng(seed).random((n, d))
    raise ValueError(f"method {method!r} does not sample; sampling methods: quasirandom, random")


def sample(dists: Sequence[Distribution], search: Search) -> list[tuple[Any, ...]]:
    """``search.trials`` points of the space ``dists``: point ``k`` is ``tuple(dists[j].map(u[k, j]))``
    for the unit points ``u`` of :func:`unit_points` (``search.method``, ``search.seed``).

    Raises:
      ValueError: ``search.trials`` missing or < 1, or a non-sampling method.
    """
    if search.trials is None or search.trials < 1:
        raise ValueError(f"sampling needs trials >= 1, got {search.trials!r}")
    u = unit_points(search.method, search.trials, len(dists), search.seed)
    return [tuple(d.map(float(u[k, j])) for j, d in enumerate(dists)) for k in range(search.trials)]
