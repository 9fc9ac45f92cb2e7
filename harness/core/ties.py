"""Shared ranks, the order of the rows of a tie, and the seeds that would separate two tied
neighbours: the one rule that the report's leaderboard (:mod:`reports.ranks`) and the sweep's end
table (:mod:`harness.orchestrate.summary`) both apply, so that both always give the same ranks.
Standard library only.

**The strict order** (:func:`strict_order`, the ``rank`` of ``reports.selection.best_configs``):
ranked by time to target (the default objective), more seeds reaching the target, then lower
median seconds to it (on the task's clock, :mod:`harness.core.clock`), then more seeds finished,
then the better mean validation value, then the name; a run of neighbours that reached the target
at the same median steps and the same per-step cost class (:attr:`Standing.cost_class`: the same
evaluation at the same cost, a tie on time; on the measured clock, whose seconds carry no class,
the same steps, whatever the wall-clock says) is reordered by seeds finished, then the validation
value, then the name. Ranked by ``final`` / ``best``: seeds
finished, the value, seeds reaching the target, median seconds, the name.

**Not distinguishable** (:func:`tied`). Two optimizers are compared on what orders them: with
the same seeds reaching the target (ranked by time to target) at different median steps or in
different cost classes, on their per-seed seconds to the target; else, with the same seeds
finished, on their per-seed validation values (the value the objective selects on: final, or best
during training). Per-seed values ``a`` and ``b`` are not told apart (:func:`distinguishable`):

* with at least :data:`MIN_SEEDS` paired seeds: the paired bootstrap's 95% percentile interval of
  the mean difference ``a - b`` (:func:`mean_interval`: :data:`N_BOOT` resamples of the pairs,
  ``random.Random(0)``) contains 0;
* with fewer: their ranges across seeds (min–max) overlap.

Different counts (seeds reaching, seeds finished) always tell two apart. **Over the step cost's
interval** (:func:`tie_cause`): on time, each side's per-step cost carries its 95% interval
(:attr:`Standing.cost_range`, from the timed rounds); two are told apart only when they are as
measured *and* with one at its interval's low end against the other at its high end, and the
reverse, all in the same direction; else they tie, by the ``"seeds"`` or by the ``"cost"``. A busy
machine widens the intervals: it can turn an order into a tie, not reverse it.

**Shared ranks** (:func:`share_ranks`): walking down the strict order, an optimizer joins the
current group when it is not distinguishable from one of its members, else it starts a new group
ranked by its position (competition ranks: a group of two at 1 is ``"1="``, the next is ``"3"``).
(Compared with the group's first member only, an optimizer whose results equal a member's could
rank apart from it.)

**The rows of a tie** are shown in the order of the column the reader sees (:func:`tie_column`,
:func:`order_within`): a group whose members all reached the target, ranked by time to target, in
the order of the time to target the table shows (fastest first); any other group in the order of the
validation value that ranks it (best first). Equal shown numbers keep the strict order. (The strict
order alone could put a longer shown time above a shorter one: two that reached the target at the
same evaluation are ordered by the final metric.)

**Seeds that would separate** two neighbours of a tie (:func:`separation`): the fewest paired
seeds (in all, at least :data:`MIN_SEEDS` and more than those they already share) at which the
rank rule above tells them apart with probability :data:`POWER`, if their per-seed differences
are normal with the mean and SD observed now (the effect ``δ = mean(d) / sd(d)``, sample SD with
``n - 1``). The rank rule at ``n`` pairs is the paired bootstrap's 95% percentile interval excluding
0 (two-sided, nominal ``α = 0.05``): to first order the bootstrap distribution of the mean is normal
with the plug-in SD ``sd(d)·√((n-1)/n)/√n``, so the rule separates when the paired t statistic
``|t| = |mean(d)|·√n / sd(d)`` exceeds ``z₀.₉₇₅·√((n-1)/n)`` (:func:`rule_critical`), and its power
is a noncentral t probability (``ν = n - 1``, noncentrality ``δ·√n``; :func:`power`). At few seeds
this rule is liberal: at 5 pairs it separates equal means about 15% of the time (the paired t-test
at ``α = 0.05``, :func:`t_critical`, 5%); the estimate follows the rule the ranks apply, not the
textbook test, and a brute-force simulation of the bootstrap itself agrees within 0.02 (tests). A
mean difference of exactly 0 has no such number ("no seed count separates equal results"); above
:data:`MAX_SEEDS` it says "> 100". One paired seed has no SD: nothing to estimate. Paired
differences all equal (SD 0, e.g. two seeds reaching the target 50 steps apart each) give no
estimate either, only the rule's floor, said as such ("≥ 5 seeds would separate (no spread in 2
paired seeds)", not as if the power were known). On time with cost
intervals the estimate takes the differences at the interval's worst end (the smallest in the
measured direction); where that end reverses or cancels the difference, no seed count separates
("tied by the step cost: no seed count separates ...").
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.core.power import (
    ALPHA,
    LEVEL,
    MAX_SEEDS,
    MIN_SEEDS,
    POWER,
    power,
    rule_critical,
    seeds_to_separate,
    t_critical,
)

__all__ = [
    "ALPHA",
    "LEVEL",
    "MAX_SEEDS",
    "MIN_SEEDS",
    "N_BOOT",
    "POWER",
    "UNRANKED",
    "Basis",
    "Separation",
    "Standing",
    "compared",
    "direction",
    "distinguishable",
    "mean_interval",
    "order_within",
    "power",
    "power_words",
    "rule_critical",
    "seeds_to_separate",
    "separation",
    "share_ranks",
    "strict_order",
    "t_critical",
    "tie_cause",
    "tie_column",
    "tie_labels",
    "tied",
]

#: Bootstrap resamples of the paired seeds.
N_BOOT = 10_000
#: Suffix of a shared rank (``"2="``): after the number, so a table sorts the column numerically.
TIE_MARK = "="

#: How a tie made by the step cost's interval (:func:`tie_cause` ``"cost"``) is said.
COST_TIE = "tied by the step cost"

TIME = "time to target"
VALUE = "validation value"
#: The rank label of an optimizer every trial of which failed on a task (:attr:`Standing.has_results`
#: false): it has no result to rank, so it takes no rank and comes last, also as a task's only optimizer.
#: A diverged trial is a result.
UNRANKED = "—"


@dataclass(frozen=True)
class Standing:
    """One optimizer's numbers on one task (its selected configuration).

    ``reached``: its seeds that reached the validation target; ``finished``: its seeds that
    finished; ``median_steps``: median steps to the target over the seeds that reached it
    (``None``: none); ``seconds``: seed → seconds to the target on the task's clock (the seeds that
    reached it); ``values``: seed → the validation value its objective selects on (final, or best
    during training; the finished seeds); ``higher_is_better``: the metric's direction."""

    name: str
    reached: int
    finished: int
    median_steps: float | None
    seconds: Mapping
    values: Mapping
    higher_is_better: bool = True
    #: its per-step cost on the task's clock (the modeled clock's figure, the cost clock's cost per
    #: step: :func:`harness.core.clock.cost_class_of`); ``None`` on the measured clock. Equal steps
    #: at different costs are compared on time.
    cost_class: float | None = None
    #: the 95% interval of that cost relative to it, ``(lo, hi)`` with ``lo <= 1 <= hi``
    #: (:func:`harness.core.clock.cost_range`); ``None``: exact (the cost clock, a run without it)
    cost_range: tuple[float, float] | None = None
    #: whether any of its trials on the task (any configuration) finished or diverged; ``False``:
    #: every one failed, and it is not ranked (:data:`UNRANKED`, last in :func:`strict_order`).
    has_results: bool = True

    def median_seconds(self) -> float | None:
        """The median of :attr:`seconds` (``None`` without any)."""
        xs = sorted(_finite(self.seconds).values())
        if not xs:
            return None
        m = len(xs) // 2
        return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2

    def mean_value(self) -> float | None:
        """The mean of :attr:`values` (``None`` without any)."""
        xs = list(_finite(self.values).values())
        return math.fsum(xs) / len(xs) if xs else None


@dataclass(frozen=True)
class Basis:
    """What two optimizers of a task are compared on: per-seed ``a`` and ``b`` (seed → value),
    ``what`` (:data:`TIME` or :data:`VALUE`) and its direction; on time, each side's cost interval
    relative to its figure (``a_range``, ``b_range``: :attr:`Standing.cost_range`)."""

    a: Mapping
    b: Mapping
    what: str
    higher_is_better: bool
    a_range: tuple[float, float] = (1.0, 1.0)
    b_range: tuple[float, float] = (1.0, 1.0)

    def scenarios(self) -> list[tuple[dict, dict]]:
        """The per-seed values as measured, then at the two ends of the cost ratio's interval
        (``a`` at its low end against ``b`` at its high end, and the reverse); one when exact."""
        out = [(_finite(self.a), _finite(self.b))]
        (alo, ahi), (blo, bhi) = self.a_range, self.b_range
        if (alo, ahi, blo, bhi) != (1.0, 1.0, 1.0, 1.0):
            for fa, fb in ((alo, bhi), (ahi, blo)):
                out.append(({k: v * fa for k, v in out[0][0].items()},
                            {k: v * fb for k, v in out[0][1].items()}))
        return out


@dataclass(frozen=True)
class Separation:
    """What would separate two tied neighbours (:func:`separation`): ``seeds`` (paired seeds in all;
    ``None`` when there is no finite number or none could be estimated), ``paired`` (seeds they
    share now), ``effect`` (mean paired difference / its SD; ``inf`` for constant differences,
    ``nan`` when not estimated), ``what`` they are compared on, and ``words`` (``"7 seeds would
    separate"``, ``"> 100 seeds would separate"``, ``"no seed count separates equal results"``,
    ``"1 paired seed: too few to estimate"``, ``"≥ 5 seeds would separate (no spread in 2 paired
    seeds)"`` when every paired difference is the same: the rule needs at least that many, and a
    spread of 0 from few seeds says nothing about how many more)."""

    seeds: int | None
    paired: int
    effect: float
    what: str
    words: str
    #: what made the tie (:func:`tie_cause`): ``"seeds"`` or ``"cost"``; ``""`` when not known
    cause: str = ""


def _finite(values: Mapping) -> dict:
    out = {}
    for k, v in values.items():
        try:
            x = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(x):
            out[k] = x
    return out


def _seed_key(k) -> tuple:
    return (0, k, "") if isinstance(k, int | float) and not isinstance(k, bool) else (1, 0, str(k))


# ---------------------------------------------------------------------------------------------
# The rule: distinguishable, tied, groups
# ---------------------------------------------------------------------------------------------
def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default ``quantile`` method)."""
    pos = q * (len(sorted_xs) - 1)
    i = math.floor(pos)
    j = min(i + 1, len(sorted_xs) - 1)
    return sorted_xs[i] + (pos - i) * (sorted_xs[j] - sorted_xs[i])


def mean_interval(d: Sequence[float], level: float = LEVEL, n_boot: int = N_BOOT, seed: int = 0
                  ) -> tuple[float, float]:
    """The bootstrap percentile interval at ``level`` of the mean of ``d``: ``n_boot`` resamples
    of ``len(d)`` values drawn with replacement by ``random.Random(seed)``, their means' quantiles
    ``(1 - level) / 2`` and ``(1 + level) / 2`` (linear interpolation). Deterministic."""
    n = len(d)
    if n == 0:
        return math.nan, math.nan
    draws = random.Random(seed).choices(list(d), k=n * n_boot)
    means = sorted(math.fsum(draws[i:i + n]) / n for i in range(0, n * n_boot, n))
    return _quantile(means, (1 - level) / 2), _quantile(means, (1 + level) / 2)


def direction(a: Mapping, b: Mapping) -> int:
    """``-1`` when per-seed ``a`` is told apart below ``b`` (:func:`distinguishable`), ``1`` above,
    ``0`` when they are not told apart."""
    a, b = _finite(a), _finite(b)
    if not a or not b:
        return 0 if len(a) == len(b) else (1 if a else -1)
    paired = sorted((k for k in a if k in b), key=_seed_key)
    if len(paired) >= MIN_SEEDS:
        lo, hi = mean_interval([a[k] - b[k] for k in paired])
        return -1 if hi < 0 else 1 if lo > 0 else 0
    return -1 if max(a.values()) < min(b.values()) else 1 if max(b.values()) < min(a.values()) else 0


def tie_cause(lead: Standing, other: Standing, by: str = "time_to_target") -> str:
    """Why ``lead`` and ``other`` are tied: ``"seeds"`` (their per-seed numbers are not told apart
    as measured), ``"cost"`` (they are, but not at both ends of the step cost ratio's interval, or
    not in the same direction: :meth:`Basis.scenarios`), ``""`` when they are told apart (or their
    counts differ)."""
    basis = compared(lead, other, by)
    if basis is None:
        return ""
    ways = [direction(a, b) for a, b in basis.scenarios()]
    if ways[0] == 0:
        return "seeds"
    return "" if all(w == ways[0] for w in ways) else "cost"


def distinguishable(a: Mapping, b: Mapping) -> bool:
    """Whether per-seed values ``a`` and ``b`` (seed → value; non-finite ones left out) tell the
    two apart: with :data:`MIN_SEEDS` paired seeds or more, the paired bootstrap's
    :data:`LEVEL` interval of the mean difference (:func:`mean_interval`) excludes 0; with fewer,
    their min–max ranges are disjoint. One side without values is told apart from one with."""
    return direction(a, b) != 0


def compared(lead: Standing, other: Standing, by: str = "time_to_target") -> Basis | None:
    """What ``lead`` and ``other`` are compared on (module docstring), or ``None`` when their counts
    differ (told apart whatever their values): ranked by time to target with the same seeds
    reaching it (some) at different median steps, their seconds to it; else, with the same seeds
    finished, their validation values."""
    by_time = by == "time_to_target"
    if by_time and lead.reached != other.reached:
        return None
    if by_time and lead.reached > 0 and (lead.median_steps, lead.cost_class) != (other.median_steps,
                                                                                 other.cost_class):
        return Basis(lead.seconds, other.seconds, TIME, False,
                     lead.cost_range or (1.0, 1.0), other.cost_range or (1.0, 1.0))
    if lead.finished != other.finished:
        return None
    return Basis(lead.values, other.values, VALUE, lead.higher_is_better)


def tied(lead: Standing, other: Standing, by: str = "time_to_target") -> bool:
    """Whether ``lead`` and ``other`` are not distinguishable on what orders them (:func:`compared`,
    :func:`distinguishable`), as measured or anywhere in their step cost interval
    (:func:`tie_cause`)."""
    return tie_cause(lead, other, by) != ""


def strict_order(standings: Sequence[Standing], by: str = "time_to_target") -> list[Standing]:
    """``standings`` (one task's) in the strict order of the module docstring, best first: the order
    of ``reports.selection.best_configs``' ``rank``, which the report applies to the same numbers."""
    def metric(s: Standing) -> float:
        v = s.mean_value()
        return math.inf if v is None else (-v if s.higher_is_better else v)

    def secs(s: Standing) -> float:
        v = s.median_seconds()
        return math.inf if v is None else v

    if by != "time_to_target":
        return sorted(standings, key=lambda s: (not s.has_results, -s.finished, metric(s), -s.reached,
                                                secs(s), s.name))
    order = sorted(standings, key=lambda s: (not s.has_results, -s.reached, secs(s), -s.finished,
                                             metric(s), s.name))
    out: list[Standing] = []
    i = 0
    def same_time(s: Standing) -> tuple:  # (reached, median steps, cost class): a tie on time
        return (not s.has_results, s.reached, math.inf if s.median_steps is None else s.median_steps,
                s.cost_class)

    while i < len(order):  # a run at the same (reached, steps, class): a tie on time, by the metric
        j = i
        key = same_time(order[i])
        while j < len(order) and same_time(order[j]) == key:
            j += 1
        out += sorted(order[i:j], key=lambda s: (-s.finished, metric(s), s.name))
        i = j
    return out


def share_ranks(ordered: Sequence[Standing], by: str = "time_to_target") -> list[list[int]]:
    """The groups of :func:`tied` optimizers, walking down ``ordered`` (the strict order): each a
    list of positions (0-based) into ``ordered``; an optimizer joins the current group when it is
    tied with one of its members. An optimizer without results (:attr:`Standing.has_results`) is a
    group of its own."""
    groups: list[list[int]] = []
    for i, s in enumerate(ordered):
        if groups and s.has_results and ordered[groups[-1][0]].has_results and any(
                tied(ordered[m], s, by) for m in groups[-1]):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def tie_labels(groups: Sequence[Sequence[int]], ordered: Sequence[Standing] | None = None
               ) -> dict[int, tuple[int | None, str]]:
    """Position → ``(shared rank, label)`` for :func:`share_ranks`' groups of ``ordered``: a group of
    several at position ``p`` (0-based) is rank ``p + 1``, written ``"2="``; a lone optimizer
    ``"2"``; one without results (:attr:`Standing.has_results`) ``(None, UNRANKED)``."""
    out: dict[int, tuple[int | None, str]] = {}
    for g in groups:
        at = min(g) + 1
        for i in g:
            if ordered is not None and not ordered[i].has_results:
                out[i] = (None, UNRANKED)
            else:
                out[i] = (at, f"{at}{TIE_MARK}" if len(g) > 1 else str(at))
    return out


def tie_column(members: Sequence[Standing], by: str = "time_to_target") -> str:
    """Which shown column orders the rows of one group (module docstring): :data:`TIME` when
    ranked by time to target and every member reached the target, else :data:`VALUE`."""
    return TIME if by == "time_to_target" and all(m.reached > 0 for m in members) else VALUE


def order_within(shown: Sequence[float | None], best_low: bool) -> list[int]:
    """The order (positions into ``shown``, the numbers a table shows for a group's rows in their
    strict order) in which the rows are shown: lowest first when ``best_low`` (a time), else
    highest first; a row without a number last; equal numbers keep the strict order."""
    def key(i: int) -> tuple:
        v = shown[i]
        if v is None or not math.isfinite(v):
            return (1, 0.0, i)
        return (0, v if best_low else -v, i)

    return sorted(range(len(shown)), key=key)


# ---------------------------------------------------------------------------------------------
# Seeds that would separate: the power of the rule
# ---------------------------------------------------------------------------------------------
def separation(lead: Standing, other: Standing, by: str = "time_to_target") -> Separation | None:
    """The seeds that would separate two neighbours of a tie (module docstring), on what they are
    compared on (:func:`compared`; ``None`` when their counts differ: nothing to estimate)."""
    basis = compared(lead, other, by)
    if basis is None:
        return None
    cause = tie_cause(lead, other, by)
    diffs = [[a[k] - b[k] for k in sorted((k for k in a if k in b), key=_seed_key)]
             for a, b in basis.scenarios()]
    d = diffs[0]
    n = len(d)
    if n < 2:
        return Separation(None, n, math.nan, basis.what,
                          f"{n} paired seed{'' if n == 1 else 's'}: too few to estimate", cause)
    mean = math.fsum(d) / n
    if mean == 0:
        return Separation(None, n, 0.0, basis.what, "no seed count separates equal results", cause)
    sign = 1.0 if mean > 0 else -1.0  # the worst end of the cost interval: the smallest difference
    d = min(diffs, key=lambda x: sign * math.fsum(x))
    mean = math.fsum(d) / n
    if sign * mean <= 0:  # the order turns at the interval's worst end: no seed count separates
        words = "no seed count separates (the step times' 95% intervals cover the difference)"
        return Separation(None, n, math.nan, basis.what, f"{COST_TIE}: {words}" if cause == "cost" else words,
                          cause)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in d) / (n - 1))
    start = max(MIN_SEEDS, n + 1) if n >= MIN_SEEDS else MIN_SEEDS
    if sd == 0:  # one constant difference: no spread seen, so no power to estimate, only the floor
        return Separation(start, n, math.inf, basis.what,
                          f"≥ {start} seeds would separate (no spread in {n} paired seeds)", cause)
    effect = abs(mean) / sd
    seeds = seeds_to_separate(effect, start=start)
    words = f"{seeds} seeds would separate" if seeds is not None else f"> {MAX_SEEDS} seeds would separate"
    if cause == "cost":
        words = f"{COST_TIE}: {words} at the step times' worst ends"
    return Separation(seeds, n, effect, basis.what, words, cause)


def power_words() -> str:
    """How :func:`separation`'s number is estimated, in one sentence for a report or a summary."""
    return (f"seeds (in all) at which the rank rule — a paired bootstrap {LEVEL:.0%} interval of the "
            f"mean difference excluding 0, two-sided, nominal α = {ALPHA:.2f} — would tell the two "
            f"apart with probability {POWER}, if their per-seed differences keep the mean and SD "
            f"observed now (noncentral t; at 5 seeds this rule separates equal means about 15% of "
            f"the time)")
