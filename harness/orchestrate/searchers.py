"""The searcher seam: a sweep is a loop, propose -> train -> observe -> propose.

A :class:`Searcher` searches one :class:`~harness.plan.cells.Cell` (one optimizer on one task). Given
every trial of the sweep the store holds (``seen``: ``trial_id`` -> :class:`TrialOutcome`), its
:meth:`Searcher.propose` returns the trials to train next, and ``[]`` once its search is over.
**Nothing of a search lives only in memory**: ``propose`` is a pure function of ``seen`` (and of
the config), replayed from the start at every call, so a sweep killed at any moment and run again
makes the same decisions from the same store. The sweep loop
(:func:`harness.orchestrate.adaptive.run_rounds`), the executors, resume, de-duplication and the report are
written once against this seam.

Methods (``search: {method: ...}``, :data:`harness.config.search.METHODS`):

- ``grid``, ``random``, ``quasirandom``: :class:`FixedSearcher`, every candidate at once (the
  expanded trials, their ids and order);
- ``asha``, ``hyperband``: :mod:`harness.orchestrate.asha`; ``successive_halving``:
  :mod:`harness.orchestrate.halving`;
- ``coordinate_descent``: :mod:`harness.orchestrate.coordinate`;
- ``optuna``: :mod:`harness.orchestrate.optuna_search`.

A method module registers its class with :func:`register` (imported lazily by
:func:`searcher_for`, so a grid sweep imports none of them).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from harness.config.errors import ConfigError
from harness.core.outcome import TrialOutcome
from harness.core.selection_rule import DEFAULT_SELECT_BY
from harness.core.spec import TrialSpec
from harness.plan.cells import Cell, cells_of

__all__ = ["FixedSearcher", "Searcher", "SweepSearch", "register", "searcher_for"]

#: method -> the module that registers its searcher (imported on first use)
_MODULES = {"asha": "harness.orchestrate.asha", "successive_halving": "harness.orchestrate.halving",
            "hyperband": "harness.orchestrate.asha", "coordinate_descent": "harness.orchestrate.coordinate",
            "optuna": "harness.orchestrate.optuna_search"}
_REGISTRY: dict[str, type[Searcher]] = {}


def register(*methods: str) -> Callable[[type[Searcher]], type[Searcher]]:
    """Class decorator: the searcher of ``methods``."""
    def deco(cls: type[Searcher]) -> type[Searcher]:
        for m in methods:
            _REGISTRY[m] = cls
        return cls
    return deco


class Searcher:
    """The search of one cell. Subclasses override :meth:`propose` (and, where they have something
    to say, :meth:`candidates`, :meth:`max_steps`, :meth:`max_trials`, :meth:`describe`).

    Args:
      cell: the cell (its candidates, sampled dimensions, seeds and resolved search).
      select_by: the sweep's selection objective (:data:`harness.core.selection_rule.SELECT_BY`): what
        "better" means to a searcher, by :func:`harness.core.selection_rule.selection_key`.
    """

    method: ClassVar[str] = "grid"
    #: what :meth:`candidates` are, in the dry run's words (its ``candidates`` column)
    candidates_are: ClassVar[str] = "the config's expanded trials"
    #: stopped trials the search trains again to the end (``search.audit``; early stopping only)
    audit: int = 0

    def __init__(self, cell: Cell, select_by: str = DEFAULT_SELECT_BY):
        self.cell, self.select_by = cell, select_by
        parts = cell.key.split(" | ")
        #: the config path of the cell's optimizer entry (``optimizers[1]``), for a config error
        self.where = parts[1] if len(parts) > 1 else cell.optimizer

    def candidates(self) -> list[TrialSpec]:
        """The trials that stand for the search before it runs: pre-flight builds them, the sweep
        id hashes them, the dry run counts them (default: the cell's expanded trials)."""
        return list(self.cell.trials)

    def propose(self, seen: Mapping[str, TrialOutcome]) -> list[TrialSpec]:
        """The trials to train next given ``seen`` (every trial of the sweep the store holds, by id;
        failed and stopped ones included); ``[]`` when the search is over. Must be a pure function of
        ``seen``: deterministic, no state kept between calls. Trials already in ``seen`` may be
        returned (the loop drops them)."""
        raise NotImplementedError

    @classmethod
    def link(cls, searchers: list[Searcher]) -> None:
        """Called once per searcher class with every searcher of the sweep, after all are built: a
        search that depends on another cell's (coordinate descent at a ladder's rung starting from
        the previous rung's optimum) connects to it here. Default: nothing."""

    def observe(self, outcome: TrialOutcome) -> None:
        """A trial of this sweep just ended here (called by the loop as each outcome arrives, before
        it is written: the in-process executor writes on a background thread). Default: nothing. A
        searcher that keeps a cache of ``seen`` for decisions taken *during* training (ASHA's rungs)
        updates it here; the cache must equal what the store will hold."""

    def context(self) -> dict[str, Any]:
        """Fields of :class:`harness.core.context.RunContext` this searcher's trials need while they
        train (ASHA's rung board); merged by the loop. Default: none."""
        return {}

    def max_steps(self) -> int:
        """The most training steps this search can spend (the dry run's budget line): default, every
        candidate trained to its budget."""
        return sum(s.steps for s in self.candidates())

    def max_trials(self) -> int:
        """The most trials this search can train (the dry run's count; a bound, as
        :meth:`max_steps`): default, its candidates."""
        return len(self.candidates())

    def describe(self, seen: Mapping[str, TrialOutcome]) -> dict[str, Any]:
        """What the search did, JSON-able (the parent run's ``search.json``, the report's section):
        at least ``method``, ``cell``, ``task``, ``optimizer``, ``steps_spent``."""
        mine = [seen[s.trial_id] for s in self.cell.trials if s.trial_id in seen]
        return {"method": self.method, "cell": self.cell.key, "task": self.cell.task,
                "optimizer": self.cell.optimizer, "trials": len(mine)}


class FixedSearcher(Searcher):
    """``grid``, ``random``, ``quasirandom``: every candidate at once, in the expansion's order."""

    method = "fixed"
    candidates_are = "every trial, all trained at once"

    def propose(self, seen: Mapping[str, TrialOutcome]) -> list[TrialSpec]:
        return [s for s in self.cell.trials if s.trial_id not in seen]


def searcher_class(method: str) -> type[Searcher]:
    """The searcher of ``method`` (its module imported on first use).

    Raises:
      ValueError: a method no module registers.
    """
    if method in ("grid", "random", "quasirandom"):
        return FixedSearcher
    if method not in _REGISTRY and method in _MODULES:
        importlib.import_module(_MODULES[method])
    if method not in _REGISTRY:
        raise ValueError(f"no searcher for method {method!r}")
    return _REGISTRY[method]


class SweepSearch:
    """Every cell's searcher of one sweep: the union of their proposals, cell by cell in order."""

    def __init__(self, trials: list[TrialSpec], select_by: str = DEFAULT_SELECT_BY,
                 trial_limit: int | None = None):
        self.cells = cells_of(trials)
        #: trial_id -> the cell whose searcher made it (candidates and proposals)
        self.cell_of: dict[str, Cell] = {}
        self.searchers = [searcher_class(c.search.method)(c, select_by) for c in self.cells]
        for cls in dict.fromkeys(type(s) for s in self.searchers):
            cls.link(self.searchers)
        #: ``sweep --max-trials`` for an adaptive search: the most trials it may propose in all
        #: (:meth:`propose` stops there); ``None``: unbounded.
        self.trial_limit = trial_limit if self.adaptive else None
        self._proposed: set[str] = set()
        self.capped = False
        if self.trial_limit is not None and sum(self.max_trials().values()) > self.trial_limit:
            raise ConfigError([self._too_many()])

    def _too_many(self) -> str:
        """The error of a search that can train more than :attr:`trial_limit` trials; it names
        ``search.audit`` where the audits alone take the count past the limit."""
        most = sum(self.max_trials().values())
        each = [f"{s.cell.optimizer} on {s.cell.task}: {s.max_trials():,}" for s in self.searchers]
        each = each[:4] + (["..."] if len(each) > 4 else [])
        audits = sum(s.audit for s in self.searchers)
        limit = f"more than the limit of {self.trial_limit:,}"
        if audits and most - audits <= self.trial_limit:
            room = (self.trial_limit - most + audits) // sum(s.audit > 0 for s in self.searchers)
            return (f"search.audit: {max(s.audit for s in self.searchers):,} audits (stopped trials "
                    f"trained again) per optimizer and task make the adaptive search able to train up "
                    f"to {most:,} trials ({', '.join(each)}), {limit}; lower search.audit (at most "
                    f"{room:,} fits), or raise the limit with `python -m harness sweep --max-trials N`")
        fix = "its budget, seeds or search.audit" if audits else "its budget or seeds"
        return (f"search: the adaptive search can train up to {most:,} trials ({', '.join(each)}), "
                f"{limit}; lower {fix}, or raise the limit with `python -m harness sweep --max-trials N`")

    @property
    def adaptive(self) -> bool:
        """Whether any cell's method is a loop (else the sweep is a fixed plan)."""
        return any(c.search.adaptive for c in self.cells)

    def candidates(self) -> list[TrialSpec]:
        """Every searcher's candidates, in cell order, without duplicates."""
        out: dict[str, TrialSpec] = {}
        for s in self.searchers:
            for t in s.candidates():
                out.setdefault(t.trial_id, t)
                self.cell_of.setdefault(t.trial_id, s.cell)
        return list(out.values())

    def propose(self, seen: Mapping[str, TrialOutcome]) -> list[TrialSpec]:
        """Every searcher's next trials not yet in ``seen``, in cell order, without duplicates; at
        most :attr:`trial_limit` trials proposed in all (those past it are dropped, and
        :attr:`capped` says so: only a search whose trials diverge proposes more than
        :meth:`max_trials`, which the constructor checked against the limit)."""
        out: dict[str, TrialSpec] = {}
        for s in self.searchers:
            for t in s.propose(seen):
                if t.trial_id not in seen:
                    out.setdefault(t.trial_id, t)
                    self.cell_of.setdefault(t.trial_id, s.cell)
        if self.trial_limit is not None:
            new = [i for i in out if i not in self._proposed]
            room = max(self.trial_limit - len(self._proposed), 0)
            for i in new[room:]:
                del out[i]
                self.capped = True
            self._proposed.update(new[:room])
        return list(out.values())

    def adopt(self, specs: list[TrialSpec], origins: dict[str, Any]) -> None:
        """Give each of ``specs`` that has no origin in ``origins`` (a trial the expansion did not
        make: Optuna's proposal, ASHA's rule) its cell's (:meth:`harness.plan.cells.Cell.origin_of`),
        so that it is tagged with its search method like the rest."""
        for t in specs:
            cell = self.cell_of.get(t.trial_id)
            if t.trial_id not in origins and cell is not None and (o := cell.origin_of(t)) is not None:
                origins[t.trial_id] = o

    def observe(self, outcome: TrialOutcome) -> None:
        """Each searcher's :meth:`Searcher.observe`."""
        for s in self.searchers:
            s.observe(outcome)

    def context(self) -> dict[str, Any]:
        """The searchers' :meth:`Searcher.context` fields, merged."""
        out: dict[str, Any] = {}
        for s in self.searchers:
            for k, v in s.context().items():  # one object several searchers share (ASHA's board)
                out[k] = out[k].join(v) if k in out and hasattr(out[k], "join") else v
        return out

    def max_steps(self) -> dict[str, int]:
        """Cell key -> the most steps its search can spend."""
        return {s.cell.key: s.max_steps() for s in self.searchers}

    def max_trials(self) -> dict[str, int]:
        """Cell key -> the most trials its search can train."""
        return {s.cell.key: s.max_trials() for s in self.searchers}

    def describe(self, seen: Mapping[str, TrialOutcome]) -> list[dict[str, Any]]:
        """Each searcher's :meth:`Searcher.describe`, in cell order; when :attr:`capped`, each line
        (its certificate's, else its words) says that the search stopped at the limit."""
        out = [s.describe(seen) for s in self.searchers]
        if self.capped:
            note = (f"; the search stopped at --max-trials {self.trial_limit:,} (trials that diverged "
                    f"left steps for more)")
            for s, d in zip(self.searchers, out, strict=True):
                if not s.cell.search.adaptive:  # a fixed cell proposed all it had at once
                    continue
                if isinstance(d.get("certificate"), dict) and d["certificate"].get("words"):
                    d["certificate"]["words"] += note
                else:
                    d["words"] = (d.get("words") or d.get("method", "search")) + note
        return out


def searcher_for(trials: list[TrialSpec], select_by: str = DEFAULT_SELECT_BY,
                 trial_limit: int | None = None) -> SweepSearch:
    """The sweep's search over an expanded config's trials (a ``TrialList`` with ``origins``);
    ``trial_limit`` (``sweep --max-trials``) bounds an adaptive search's trials.

    Raises:
      ConfigError: an adaptive search that can train more than ``trial_limit`` trials (none
        diverging: :meth:`SweepSearch.max_trials`), before anything runs.
    """
    return SweepSearch(trials, select_by, trial_limit)
