"""Coordinate descent to a certified optimum: ``search: {method: coordinate_descent}``.

The tuning of Wen, Hall, Ma and Liang ("Fantastic Pretraining Optimizers and Where to Find Them",
2025): every optimizer, baseline included, is tuned one hyperparameter at a time until no single
move improves, and the report proves it with a **certificate**.

**The grid.** A cell's axes are its gridded hyperparameters (:meth:`harness.plan.cells.Cell.axes`:
flat key -> sorted values, for each list or ``log_grid`` with more than one value), in that order
(the model's, then the optimizer's, then the schedule's, each alphabetically). A configuration is
one value per axis; it is trained with every seed of the cell, and only configurations the
expansion made are trained (one that ``exclude`` removes is skipped). Distributions are a config
error (:mod:`harness.config.validate`): the descent moves on a grid.

**The start.** For each axis, in this order: the entry's ``search.start`` value (``step_size`` is
``optimizer.step_size``; a flat key such as ``model.width`` names another axis; a value not on the
axis's grid, or a key that is not an axis, is a :class:`~harness.config.errors.ConfigError` naming
the grid); else the grid value closest to the builder's default (the signature's default,
:func:`harness.config.registries.builder_hparams`, of a registered builder; closest on a log scale
when the default and every value are positive numbers, else by absolute difference, else equal;
ties to the lower value); else the middle value (index ``(n - 1) // 2``).

**The passes.** Train the start. Then, for each axis in order, train every other value of that axis
with the other axes fixed at the current point (every seed), and move to the best of them when it is
strictly better than the current point (among tied best values the lower grid index). A value tied
with the current point (equal on the rule below) that the descent has not stood on is followed: it
moves there (the lowest such grid index), so a plateau is explored and a better point one step
beyond a tie is found; it never returns to a configuration it stood on, so it cannot cycle. A
pass is all axes once. Repeat until a whole pass moves nothing
(``converged``) or ``passes`` passes are done (default :data:`DEFAULT_PASSES`), or the compute
budget is spent.

**Better.** :func:`harness.core.selection_rule.selection_key` of a configuration, its seeds aggregated as
:func:`harness.orchestrate.summary.best_configs` does (seeds reaching the target, median steps to it,
seeds finished, the mean validation value ``selection.by`` reads), with the two last tie-breakers of
the sweep's rule left out: the median seconds to target (wall-clock differs between runs, so a
re-trained trial could change the path) and the configuration's name (a tie keeps the current
point).

**The budget.** ``search.trials: N`` is a compute budget of N configurations trained to the end with
every seed: ``N x seeds x steps`` training steps per cell (as ``trials: N`` of a random search). Each
distinct trial the descent uses costs its budget's steps (a diverged one too: the store does not
say at which step it stopped), once: a configuration met again costs nothing. A round that does not
fit trains the values (in grid order) that do, the move is made among them, and the descent ends
(``budget``). Without ``trials`` the passes are the only limit.

**Purity.** :meth:`CoordinateDescent.propose` replays the whole descent from the start on every call
from ``seen`` alone and returns the first round whose trials are not all results (a failed or
deferred trial is not a result: the store holds no FINISHED run for it and the next invocation
trains it again). A configuration already trained (an earlier pass's, an earlier sweep's under the
same trial ids) is reused and never proposed as new, and a sweep killed at any moment and run again
follows the same path.

**Across a ladder's rungs**: in a ``ladder:`` sweep, the descent of an optimizer at rung
``r > 0`` (same optimizer entry, same tokens-per-parameter budget) starts from the configuration its
descent at rung ``r - 1`` selected, once that descent has ended (each value mapped to the closest
value of this rung's grid: a transferred step-size grid moves with the width), instead of from the
rule above; an entry's own ``search.start`` wins. Until the previous rung's descent ends this one
proposes nothing, so rungs are tuned in order (:meth:`CoordinateDescent.link`).

**The certificate** (:meth:`CoordinateDescent.describe`): every one-step neighbour of the selected
configuration (grid index +-1 on each axis, inside the grid and not excluded) was trained with every
seed and is not better by the rule above; else the report says why not (the pass or compute budget
ran out, or the search has not ended). It lists the ties the descent followed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.config.errors import ConfigError
from harness.core.outcome import TrialOutcome, config_label
from harness.core.selection_rule import DEFAULT_SELECT_BY, selection_key
from harness.core.spec import TrialSpec
from harness.orchestrate.searchers import Searcher, register
from harness.orchestrate.summary import best_configs
from harness.plan.cells import Cell, coordinates

__all__ = ["DEFAULT_PASSES", "CoordinateDescent", "closest_index"]

#: Passes over the axes when ``search.passes`` is not given.
DEFAULT_PASSES = 3

Point = tuple[int, ...]


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def closest_index(values: list[Any], target: Any) -> int | None:
    """The index of the value of ``values`` closest to ``target``: on a log scale when ``target`` and
    every value are positive numbers, else by absolute difference when all are numbers, else the
    first equal value; ties to the lower index; ``None`` when nothing matches."""
    if _is_number(target) and values and all(_is_number(v) for v in values):
        if target > 0 and all(v > 0 for v in values):
            def dist(i: int) -> float:
                return abs(math.log(values[i]) - math.log(target))
        else:
            def dist(i: int) -> float:
                return abs(values[i] - target)
        return min(range(len(values)), key=lambda i: (dist(i), i))
    return next((i for i, v in enumerate(values) if v == target), None)


def _usable(o: TrialOutcome | None) -> bool:
    """Whether an outcome is a result the descent decides on (a FINISHED run: finished or diverged)."""
    return o is not None and not o.deferred and o.status != "failed"


@dataclass
class _Walk:
    """The descent replayed from ``seen`` (:meth:`CoordinateDescent._walk`)."""

    point: Point
    path: list[dict[str, Any]] = field(default_factory=list)
    #: the trials the descent has results of, in the order it used them
    used: dict[str, TrialSpec] = field(default_factory=dict)
    #: the round to train next ([] when the descent is over)
    pending: list[TrialSpec] = field(default_factory=list)
    #: waiting, converged, passes, budget
    stop: str = "waiting"
    passes_done: int = 0
    #: the configurations it stood on (a tie never moves back to one)
    visited: set = field(default_factory=set)
    #: the ties it followed: axis, from, to (values)
    followed: list[dict[str, Any]] = field(default_factory=list)

    @property
    def spent(self) -> int:
        return sum(s.steps for s in self.used.values())


@register("coordinate_descent")
class CoordinateDescent(Searcher):
    """Coordinate descent over a cell's grid axes with a certificate (module docstring).

    Raises:
      harness.config.errors.ConfigError: the cell has sampled dimensions; a ``search.start`` key
        that is not one of its axes, or a value not on the axis's grid; a start point the config
        excludes.
    """

    method = "coordinate_descent"
    candidates_are = "the candidate grid (every configuration and seed; it trains one axis at a time)"
    #: the same optimizer's descent at the ladder's previous rung (:meth:`link`), or None
    previous: CoordinateDescent | None = None

    def __init__(self, cell: Cell, select_by: str = DEFAULT_SELECT_BY):
        super().__init__(cell, select_by)
        self.label = f"{cell.optimizer} on {cell.task}"
        if cell.dims:
            raise ConfigError([f"{self.where}: {key}: {d} is a distribution, but search.method is "
                               f"coordinate_descent, which moves along grid axes: write a grid (a list "
                               f"or {{log_grid: [lo, hi, num]}})" for key, d in cell.dims])
        self.axes = cell.axes()
        self.names = list(self.axes)
        #: grid point (one index per axis) -> seed -> its trial
        self.grid: dict[Point, dict[int, TrialSpec]] = {}
        for s in cell.trials:
            c = coordinates(s)
            idx = tuple(self.axes[k].index(c[k]) for k in self.names)
            self.grid.setdefault(idx, {})[s.seed] = s
        self.start, self.start_rule = self._start()
        self.passes = cell.search.passes or DEFAULT_PASSES
        self.steps = max(s.steps for s in cell.trials)
        self.budget = (None if cell.search.trials is None
                       else cell.search.trials * len(cell.seeds) * self.steps)

    # ------------------------------------------------------------------------------ the start
    @classmethod
    def link(cls, searchers: list[Any]) -> None:
        """Chain the descents of a ladder (module docstring): per optimizer entry and budget, rung
        ``r``'s descent gets ``previous`` = rung ``r - 1``'s, unless its entry gives ``search.start``."""
        chains: dict[tuple, dict[int, CoordinateDescent]] = {}
        for s in searchers:
            rung = getattr(s.cell.origin, "ladder", None) if isinstance(s, cls) else None
            if rung is not None:
                key = (s.where, rung.tokens_per_param, rung.baseline_only)
                chains.setdefault(key, {})[rung.index] = s
        for chain in chains.values():
            order = sorted(chain)
            for a, b in itertools.pairwise(order):
                if not chain[b].cell.search.start:
                    chain[b].previous = chain[a]

    def _begin(self, seen: Mapping[str, TrialOutcome]) -> tuple[Point | None, dict[str, str]]:
        """Where the descent starts given ``seen``: its own start, or (chained) the previous rung's
        selected configuration mapped onto this grid; ``None`` while the previous descent runs."""
        if self.previous is None:
            return self.start, self.start_rule
        prev = self.previous._walk(seen)
        if prev.stop == "waiting":
            return None, {}
        values = self.previous._values(prev.point)
        rung = self.previous.cell.origin.ladder.index
        point = [closest_index(vals, values[k]) if k in values else None for k, vals in self.axes.items()]
        p = tuple(self.start[a] if i is None else i for a, i in enumerate(point))
        if p not in self.grid:  # excluded here: the rule's own start
            return self.start, self.start_rule
        return p, {k: (f"the optimum of rung {rung} ({values[k]!r})" if point[a] is not None
                       else self.start_rule[k]) for a, k in enumerate(self.names)}

    def _start(self) -> tuple[Point, dict[str, str]]:
        given: dict[str, tuple[str, Any]] = {}
        for name, v in self.cell.search.start:
            given["optimizer." + name if "." not in name else name] = (name, v)
        errors = []
        for key, (name, v) in given.items():
            if key not in self.axes:
                errors.append(f"{self.where}: search.start.{name}: {key} is not a grid axis of "
                              f"{self.label} (its axes: {', '.join(self.names) or 'none'}); a start "
                              f"is given only for a hyperparameter with a list or log_grid")
            elif v not in self.axes[key]:
                errors.append(f"{self.where}: search.start.{name}: {v!r} is not on the grid of {key} "
                              f"{self.axes[key]!r} ({self.label}); start at one of its values")
        if errors:
            raise ConfigError(errors)
        point, rule = [], {}
        for key, vals in self.axes.items():
            if key in given:
                point.append(vals.index(given[key][1]))
                rule[key] = "given"
                continue
            default = self._default(key)
            i = None if default is None else closest_index(vals, default)
            if i is None:
                point.append((len(vals) - 1) // 2)
                rule[key] = "middle of the grid"
            else:
                point.append(i)
                rule[key] = f"closest to the default {default!r}"
        start = tuple(point)
        if start not in self.grid:
            raise ConfigError([f"{self.where}: search.start: the start point "
                               f"{self._values(start)!r} of {self.label} is excluded by the config; "
                               f"give search.start values of a configuration it trains"])
        return start, rule

    def _default(self, key: str) -> Any:
        """The builder's default of hyperparameter ``key`` (flat), or ``None``."""
        axis, _, name = key.partition(".")
        spec = self.cell.trials[0]
        if axis == "optimizer" and spec.optimizer_source:
            return None  # a user's builder: its defaults are not looked up here
        try:
            from harness.config.registries import builder_hparams, default_registries

            reg = default_registries()
        except ImportError:
            return None
        builders, bname = {"model": (reg.models, spec.model), "optimizer": (reg.optimizers, spec.optimizer),
                           "schedule": (reg.schedules, spec.schedule)}.get(axis, ({}, ""))
        builder = builders.get(bname)
        hp = builder_hparams(axis, builder).get(name) if builder is not None else None
        return None if hp is None or hp.required else hp.default

    # ------------------------------------------------------------------------------ the descent
    def _values(self, p: Point) -> dict[str, Any]:
        return {k: self.axes[k][i] for k, i in zip(self.names, p, strict=True)}

    def _trials(self, points: list[Point]) -> list[TrialSpec]:
        return [s for p in points for _, s in sorted(self.grid[p].items())]

    def _score(self, p: Point, seen: Mapping[str, TrialOutcome]) -> dict[str, Any] | None:
        """The objective of configuration ``p`` (``key``: its selection key), ``None`` unless every
        seed of it has a result in ``seen``."""
        outs = [seen.get(s.trial_id) for s in self.grid[p].values()]
        if not all(_usable(o) for o in outs):
            return None
        r = best_configs(outs, self.select_by)[0]  # type: ignore[arg-type]
        key = selection_key(r["reached"], r["steps_to_target"], r["finished"], r["value"],
                            not r["metric"].endswith("/loss"), None, "", self.select_by)
        return {"key": key, "metric": r["metric"], "value": r["value"], "reached": r["reached"],
                "finished": r["finished"], "seeds": r["n"], "steps_to_target": r["steps_to_target"]}

    def _afford(self, points: list[Point], w: _Walk) -> list[Point]:
        """The longest prefix of ``points`` whose new trials fit the compute budget."""
        if self.budget is None:
            return points
        spent, out = w.spent, []
        for p in points:
            spent += sum(s.steps for s in self.grid[p].values() if s.trial_id not in w.used)
            if spent > self.budget:
                break
            out.append(p)
        return out

    def _trained(self, points: list[Point], seen: Mapping[str, TrialOutcome], w: _Walk) -> bool:
        """Whether every trial of ``points`` has a result; if not, they are the walk's next round."""
        trials = self._trials(points)
        if not all(_usable(seen.get(s.trial_id)) for s in trials):
            w.pending, w.stop = trials, "waiting"
            return False
        for s in trials:
            w.used.setdefault(s.trial_id, s)
        return True

    def _walk(self, seen: Mapping[str, TrialOutcome]) -> _Walk:
        """The descent from the start, replayed from ``seen`` alone, up to its first round without
        results (its trials in ``pending``) or its end."""
        start, _ = self._begin(seen)
        if start is None:  # the previous rung's descent has not ended: nothing to train yet
            w = _Walk(self.start)
            w.stop = "waiting"
            return w
        w = _Walk(start, visited={start})
        if not self._afford([start], w):
            w.stop = "budget"
            return w
        if not self._trained([start], seen, w):
            return w
        for n in range(1, self.passes + 1):
            moved = False
            for a, key in enumerate(self.names):
                line = [p for i in range(len(self.axes[key]))
                        if (p := (*w.point[:a], i, *w.point[a + 1:])) in self.grid and p != w.point]
                if not line:
                    continue
                tried = self._afford(line, w)
                if not tried:
                    w.stop = "budget"
                    return w
                if not self._trained(tried, seen, w):
                    return w
                here = self._score(w.point, seen)
                scores = {p: self._score(p, seen) for p in tried}
                chosen = self._choose(a, w, here, scores, tried)
                w.path.append(self._step(n, a, w.point, chosen, [w.point, *tried], {**scores, w.point: here},
                                         complete=len(tried) == len(line)))
                moved |= chosen != w.point
                w.point = chosen
                w.visited.add(chosen)
                if len(tried) < len(line):
                    w.stop = "budget"
                    return w
            w.passes_done = n
            if not moved:
                w.stop = "converged"
                return w
        w.stop = "passes"
        return w

    def _choose(self, a: int, w: _Walk, here: dict, scores: dict[Point, Any], tried: list[Point]) -> Point:
        """The point the descent moves to along axis ``a`` (module docstring): the best of ``tried``
        when strictly better than ``here``; else the first tied one it has not stood on (recorded
        in ``w.followed``); else where it is."""
        best = min(tried, key=lambda p: (scores[p]["key"], p[a]))
        if scores[best]["key"] < here["key"]:
            return best
        tied = [p for p in sorted(tried, key=lambda p: p[a])
                if scores[p]["key"] == here["key"] and p not in w.visited]
        if not tied:
            return w.point
        key = self.names[a]
        w.followed.append({"axis": key, "from": self.axes[key][w.point[a]], "to": self.axes[key][tied[0][a]]})
        return tied[0]

    def _step(self, n: int, a: int, frm: Point, chosen: Point, tried: list[Point],
              scores: dict[Point, Any], complete: bool) -> dict[str, Any]:
        key = self.names[a]
        return {"pass": n, "axis": key, "from": self.axes[key][frm[a]],
                "tried": [{"value": self.axes[key][p[a]], "objective": _public(scores[p])}
                          for p in sorted(tried, key=lambda p: p[a])],
                "chosen": self.axes[key][chosen[a]], "moved": chosen != frm,
                "objective": _public(scores[chosen]), "complete": complete}

    # ------------------------------------------------------------------------------ the seam
    def propose(self, seen: Mapping[str, TrialOutcome]) -> list[TrialSpec]:
        """The descent's next round (every seed of each configuration; trials already in ``seen``
        included, the loop drops them), ``[]`` when it is over: a pure function of ``seen``."""
        return self._walk(seen).pending

    def _most_configs(self) -> int:
        """The most configurations the descent trains: the start plus every other value of every
        axis in each pass, no more than the grid."""
        return min(len(self.grid), 1 + self.passes * sum(len(v) - 1 for v in self.axes.values()))

    def max_steps(self) -> int:
        """At most: :meth:`_most_configs` with every seed, capped by the compute budget."""
        most = self._most_configs() * len(self.cell.seeds) * self.steps
        return most if self.budget is None else min(most, self.budget)

    def max_trials(self) -> int:
        """At most: :meth:`_most_configs` with every seed, no more trials than the compute budget
        pays for."""
        most = self._most_configs() * len(self.cell.seeds)
        cheapest = min(s.steps for s in self.cell.trials)
        return most if self.budget is None else min(most, self.budget // max(1, cheapest))

    def describe(self, seen: Mapping[str, TrialOutcome]) -> dict[str, Any]:
        """The path, the selected configuration and its certificate, JSON-able (``search.json``):
        ``axes``, ``start`` (values, the rule of each, objective), ``path`` (per pass and axis: the
        values tried with their objectives, the one chosen, whether it moved), ``selected``,
        ``stop`` (``converged``, ``passes``, ``budget``, ``waiting``) and ``certificate``
        (``certified``, ``words``, ``neighbours``: axis, value, step -1/+1, trained, better,
        tied (equal on the rule without seconds and name), objective). Objectives: ``metric``,
        ``value`` (mean validation value of the finished seeds), ``reached``, ``finished``,
        ``seeds``, ``steps_to_target`` (median)."""
        w = self._walk(seen)
        begin, rule = self._begin(seen)
        begin, rule = (self.start, self.start_rule) if begin is None else (begin, rule)
        start = self._score(begin, seen)
        here = self._score(w.point, seen)
        cert = self._certificate(w, here, seen)
        return {
            **super().describe(seen), "trials": len(w.used), "steps_spent": w.spent,
            "budget_steps": self.budget, "passes": self.passes, "passes_done": w.passes_done,
            "select_by": self.select_by, "axes": self.axes,
            "start": {"values": self._values(begin), "rule": rule, "objective": _public(start)},
            "path": w.path, "stop": w.stop, "stop_words": self._stop_words(w),
            "selected": {"values": self._values(w.point), "objective": _public(here),
                         "config": config_label(next(iter(self.grid[w.point].values())))},
            "certificate": cert,
        }

    def _certificate(self, w: _Walk, here: dict | None, seen: Mapping[str, TrialOutcome]) -> dict:
        nbs = []
        for a, key in enumerate(self.names):
            for d in (-1, 1):
                i = w.point[a] + d
                p = (*w.point[:a], i, *w.point[a + 1:])
                if not 0 <= i < len(self.axes[key]) or p not in self.grid:
                    continue
                sc = self._score(p, seen)
                both = sc is not None and here is not None
                nbs.append({"axis": key, "value": self.axes[key][i], "step": d, "trained": sc is not None,
                            "better": bool(both and sc["key"] < here["key"]),  # type: ignore[index]
                            "tied": bool(both and sc["key"] == here["key"]),  # type: ignore[index]
                            "objective": _public(sc)})
        trained = sum(n["trained"] for n in nbs)
        better = [n for n in nbs if n["better"]]
        ok = here is not None and trained == len(nbs) and not better
        if ok:
            words = (f"certified: all {len(nbs)} neighbours trained, none better" if nbs else
                     "certified: no neighbour on the grid (one configuration)")
            if tied := [n for n in nbs if n["tied"]]:
                words += (f" ({_named(tied)} tied with it: the leaderboard breaks the tie by seconds "
                          f"to target)")
            if w.followed:
                words += "; followed the ties " + ", ".join(
                    f"{f['axis']} {f['from']!r} -> {f['to']!r}" for f in w.followed)
        else:
            why = {"waiting": "the search has not ended", "passes": "pass budget spent",
                   "budget": "compute budget spent", "converged": "search ended"}[w.stop]
            words = f"not certified: {why}; {trained} of {len(nbs)} neighbours trained"
            if better:
                words += f", better: {_named(better)}"
        return {"certified": ok, "words": words, "neighbours": nbs, "followed": w.followed}

    def _stop_words(self, w: _Walk) -> str:
        if w.stop == "converged":
            return f"converged: pass {w.passes_done} moved nothing"
        if w.stop == "passes":
            return f"pass budget spent: {self.passes} passes, the last one moved"
        if w.stop == "budget":
            return (f"compute budget spent: {w.spent:,} of {self.budget:,} steps used; the next round "
                    f"did not fit")
        if not w.pending and self.previous is not None:
            return "waiting for the previous rung's descent to end (it starts from its optimum)"
        return f"waiting for {len(w.pending)} trials (run the sweep again to train them)"


def _named(neighbours: list[dict[str, Any]]) -> str:
    return ", ".join(f"{n['axis']}={n['value']!r}" for n in neighbours)


def _public(score: dict[str, Any] | None) -> dict[str, Any] | None:
    """An objective without its selection key (which holds infinities: not JSON)."""
    return None if score is None else {k: v for k, v in score.items() if k != "key"}

