"""Early stopping: ``search: {method: asha | hyperband}`` (``successive_halving``:
:mod:`harness.orchestrate.halving`).

One :class:`AshaSearcher` per cell (one optimizer on one task). Its configurations are the points of
the cell's sampled sequence in order (:func:`harness.config.search.unit_points`, prefix-stable: the
first ``trials`` are the expanded candidates, later ones come from the same sequence through
:meth:`harness.plan.cells.Cell.make`); a cell without sampled dimensions (a grid), or whose grid
axes are crossed with its sampled ones, has only its candidates (its budget may then go unspent).
Configuration ``k`` (its **index**) is trained with every seed, each trial carrying its rule in
:attr:`harness.core.spec.TrialSpec.early_stop` (so its ``trial_id`` is its own: a stopped trial is
never a full-budget trial of the same configuration).

- **Rungs** (:mod:`harness.core.rungs`): ``min_steps * eta**(bracket + i)`` below the budget,
  evaluated by the trainer; defaults ``eta = 3``, ``min_steps = ceil(steps / 27)``.
- **Decision** (taken inside training by the gate, :mod:`harness.execute.rung_gate`): ASHA's stop
  rule (Li et al. 2020): trial ``k`` continues past rung ``r`` iff its rung value is in the top
  ``ceil(n/eta)`` of the ``n`` values of its peers of smaller index that reached ``r`` and its own
  (ties: earlier index). Peers: same cell, same bracket, **same seed** (each seed is its own
  stream; a configuration may so finish on one seed and stop on another, and selection, which
  counts finished seeds, ranks it below configurations that finished on all). The rung value is
  the sweep's objective: the target's metric (``valid/loss`` when there is no target) at the rung
  (``selection: {by: best}``: the best evaluation up to it; ``time_to_target`` and ``final``: the
  value at the rung).
- **Budget**: ``trials: N`` is compute, ``N x seeds x steps`` (what a fixed search of
  ``N`` configurations spends); configuration ``k`` is proposed while the steps spent by
  configurations ``0..k-1`` (a stopped trial counts its steps; one not yet ended counts its whole
  budget) are below it. The final set of trials is therefore ``{k: spent(0..k-1) < budget}``,
  whatever the rounds were, and the steps spent at most ``budget - 1`` plus one configuration's
  seeds x steps (:meth:`AshaSearcher.max_steps`), with any executor: a proposal counts every trial
  not yet ended at its whole budget, so results arriving in any order only lower the count.
- ``hyperband``: ``brackets`` brackets (default: every bracket with a rung, plus the one without:
  ``len(rungs of bracket 0) + 1``); configuration ``k`` goes to bracket ``k mod brackets``
  (round-robin, deterministic); bracket ``b`` starts at ``min_steps * eta**b``.
- ``successive_halving``: the synchronous algorithm, :mod:`harness.orchestrate.halving` (a subclass).
- ``audit: K``: once the search has proposed its last configuration and all its trials ended, the
  first ``K`` stopped trials (in index order, then seed order) are also trained to the end as the
  same configuration without ``early_stop`` (the plain trial id, which a grid sweep reuses), tagged
  ``harness.audit_of`` = the stopped twin. Their steps are not part of the budget.

In-process (the default executor) trials train one at a time in proposal order and the gate sees
every peer's rung values through the searcher's :meth:`AshaSearcher.observe`, so an interrupted
sweep re-run makes the same decisions. With ``--jobs N`` / Ray the gate reads its peers from the
store at each rung: a peer still training is not counted (asynchronous ASHA): the set of stopped
trials then depends on timing, and a re-run after a kill may stop a retrained trial elsewhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from harness.config.errors import ConfigError
from harness.config.search import unit_points
from harness.core.boundary import RANGE_KINDS, SearchRange, space_tag
from harness.core.freeze import freeze
from harness.core.names import (
    TAG_AUDIT_OF,
    TAG_BRACKET,
    TAG_RUNG_GROUP,
    TAG_SEARCH,
    TAG_SEARCH_INDEX,
    TAG_SEARCH_SPACE,
)
from harness.core.outcome import TrialOutcome
from harness.core.rungs import DEFAULT_ETA, RungBoard, default_min_steps, rung_steps
from harness.core.selection_rule import DEFAULT_SELECT_BY
from harness.core.spec import TrialSpec
from harness.orchestrate.searchers import Searcher, register
from harness.plan.cells import Cell

__all__ = ["AshaSearcher", "objective", "steps_trained"]


def objective(spec: TrialSpec, select_by: str) -> tuple[str, str, str]:
    """``(metric, mode, value)`` the rungs rank by: the target's metric and mode (``valid/loss``,
    ``min`` without a target); ``value`` ``best`` for ``selection: {by: best}``, else ``final``."""
    metric, mode = (spec.target.metric, spec.target.mode) if spec.target else ("valid/loss", "min")
    return metric, mode, "best" if select_by == "best" else "final"


def steps_trained(o: TrialOutcome | None, spec: TrialSpec) -> int:
    """The training steps a trial spent: its stop or divergence step, else its budget (also for a
    trial not yet ended or failed: it will be trained again)."""
    if o is None:
        return spec.steps
    for s in (o.stopped_step, o.diverged_step):
        if s is not None:
            return int(s)
    return spec.steps


@register("asha", "hyperband")
class AshaSearcher(Searcher):
    """The early-stopping search of one cell (module docstring)."""

    candidates_are = "its first configurations (search.trials), every seed, with their stopping rule"

    def __init__(self, cell: Cell, select_by: str = DEFAULT_SELECT_BY):
        super().__init__(cell, select_by)
        srch, t0 = cell.search, cell.trials[0]
        self.method = srch.method
        self.steps, self.seeds = t0.steps, tuple(cell.seeds)
        self.eta = int(srch.eta or DEFAULT_ETA)
        self.min_steps = int(srch.min_steps or default_min_steps(self.steps, self.eta))
        n0 = len(rung_steps(self.min_steps, self.eta, self.steps, 0))
        if n0 == 0:
            raise ConfigError([f"{self.where}: search.min_steps: the first rung ({self.min_steps} steps) "
                               f"is not below the budget's {self.steps} steps, so {self.method} would stop "
                               f"nothing: use min_steps < {self.steps} (default: {self.steps}/{self.eta}^3, "
                               f"rounded up)"])
        self.brackets = int(srch.brackets or n0 + 1) if self.method == "hyperband" else 1
        if self.brackets > n0 + 1:
            raise ConfigError([f"{self.where}: search.brackets: {self.brackets} brackets, but only {n0} "
                               f"have a rung below the budget ({self.steps} steps) and one more runs "
                               f"without: at most {n0 + 1}"])
        self.audit = int(srch.audit or 0)
        self.metric, self.mode, self.value = objective(t0, select_by)
        self.budget = sum(s.steps for s in cell.trials)
        self.board = RungBoard()
        # the candidates' configurations in expansion order: one spec per seed each
        self._configs: list[dict[int, TrialSpec]] = []
        for s in cell.trials:
            key = dataclasses.replace(s, seed=self.seeds[0]).trial_id
            if not self._configs or key != self._last_key:
                self._configs.append({})
                self._last_key = key
            self._configs[-1][s.seed] = s
        # later points of the sequence only where the candidates are exactly its first points
        self.extends = bool(cell.dims) and len(self._configs) == (srch.trials or 0) and all(
            len(c) == len(self.seeds) for c in self._configs)
        self._points: Any = None
        ranges = [SearchRange(key, d.kind, d.lo, d.hi) for key, d in cell.dims if d.kind in RANGE_KINDS]
        self._space = {TAG_SEARCH_SPACE: space_tag(ranges)} if ranges else {}  # boundary warnings

    # -- the configurations --------------------------------------------------------------------

    def rule(self, bracket: int) -> tuple[tuple[str, Any], ...]:
        """The ``early_stop`` pairs of a trial of ``bracket``."""
        return freeze({"method": self.method, "eta": self.eta, "min_steps": self.min_steps,
                       "bracket": bracket, "rungs": rung_steps(self.min_steps, self.eta, self.steps, bracket),
                       "metric": self.metric, "mode": self.mode, "value": self.value})

    def bracket(self, k: int) -> int:
        """Configuration ``k``'s bracket: ``k mod brackets``."""
        return k % self.brackets

    def _plain(self, k: int) -> dict[int, TrialSpec] | None:
        """Configuration ``k``'s trials without a rule, by seed (``None``: the sequence has no ``k``)."""
        if k < len(self._configs):
            return self._configs[k]
        if not self.extends:
            return None
        if self._points is None or len(self._points) <= k:
            n = max(2 * k + 2, 64)
            self._points = unit_points(self.cell.search.sampling.method, n, len(self.cell.dims),
                                       self.cell.search.seed)
        values = {key: d.map(float(self._points[k, j])) for j, (key, d) in enumerate(self.cell.dims)}
        return {seed: self.cell.make(values, seed) for seed in self.seeds}

    def trials_of(self, k: int) -> list[TrialSpec] | None:
        """Configuration ``k``'s trials (every seed, in order) with the rule of its bracket,
        registered on the board; ``None`` past the end of the sequence."""
        plain = self._plain(k)
        if plain is None:
            return None
        b = self.bracket(k)
        out = []
        for seed in self.seeds:
            s = dataclasses.replace(plain[seed], early_stop=self.rule(b))
            group = f"{self.cell.key} | bracket {b} | seed {seed}"
            self.board.add(s.trial_id, group, k, {TAG_SEARCH: self.method, TAG_SEARCH_INDEX: str(k),
                                                  TAG_BRACKET: str(b), TAG_RUNG_GROUP: group,
                                                  **self._space})
            out.append(s)
        return out

    # -- the seam ------------------------------------------------------------------------------

    def candidates(self) -> list[TrialSpec]:
        """The first ``trials`` configurations with their rules (what pre-flight builds, the sweep
        id hashes and the dry run counts)."""
        return [s for k in range(len(self._configs)) for s in (self.trials_of(k) or [])]

    def _walk(self, seen: Mapping[str, TrialOutcome]) -> tuple[list[list[TrialSpec]], int]:
        """The configurations proposed given ``seen`` (their trials) and the steps they spent
        (those not ended counted at their budget)."""
        out, spent, k = [], 0, 0
        while spent < self.budget:
            specs = self.trials_of(k)
            if specs is None:
                break
            out.append(specs)
            spent += sum(steps_trained(seen.get(s.trial_id), s) for s in specs)
            k += 1
        return out, spent

    def audits(self, seen: Mapping[str, TrialOutcome]) -> list[tuple[TrialSpec, TrialSpec]]:
        """``(stopped twin, audit trial)`` of the first ``audit`` stopped trials (index, then seed
        order) once every proposed trial has ended (``[]`` before)."""
        configs, _ = self._walk(seen)
        trials = [s for c in configs for s in c]
        if not self.audit or any(s.trial_id not in seen for s in trials):
            return []
        stopped = [s for s in trials if seen[s.trial_id].status == "stopped"][:self.audit]
        out = []
        for s in stopped:
            a = dataclasses.replace(s, early_stop=())
            self.board.tags[a.trial_id] = {TAG_SEARCH: self.method, TAG_AUDIT_OF: s.trial_id,
                                           TAG_SEARCH_INDEX: self.board.tags[s.trial_id][TAG_SEARCH_INDEX],
                                           **self._space}
            out.append((s, a))
        return out

    def propose(self, seen: Mapping[str, TrialOutcome]) -> list[TrialSpec]:
        """Every proposed configuration's trials not in ``seen``, then the audits (module docstring)."""
        configs, _ = self._walk(seen)
        out = [s for c in configs for s in c if s.trial_id not in seen]
        return out + [a for _, a in self.audits(seen) if a.trial_id not in seen]

    def observe(self, outcome: TrialOutcome) -> None:
        """A trial's rung values onto the board (the in-process gate ranks the next trials on them)."""
        if outcome.trial_id in self.board.groups and outcome.status != "failed":
            self.board.record(outcome.trial_id, outcome.rungs)

    def context(self) -> dict[str, Any]:
        """``rung_board``: the board the trainer's gate reads (:mod:`harness.execute.rung_gate`)."""
        return {"rung_board": self.board}

    def max_steps(self) -> int:
        """The most steps the search can spend: the budget less one, plus one configuration's
        seeds at their whole budget (the last proposed), plus the audits; at most every candidate
        trained whole when the sequence cannot be extended."""
        per = len(self.seeds) * self.steps
        most = self.budget - 1 + per if self.extends else min(self.budget - 1 + per,
                                                               len(self._configs) * per)
        return most + self.audit * self.steps

    def max_trials(self) -> int:
        """The most trials the search can train when none diverges: configurations proposed while
        the least they can spend (every seed stopped at its bracket's first rung) stays under the
        budget, every seed of each, plus the audits. A trial that diverges counts only the steps it
        ran, so the search may then propose more (its steps stay within :meth:`max_steps`)."""
        spent, k = 0, 0
        while spent < self.budget and (self.extends or k < len(self._configs)):
            rungs = rung_steps(self.min_steps, self.eta, self.steps, self.bracket(k))
            spent += len(self.seeds) * (rungs[0] if rungs else self.steps)
            k += 1
        return k * len(self.seeds) + self.audit

    def _words(self, trials: list[TrialSpec], seen: Mapping[str, TrialOutcome], brackets: list[dict],
               spent: int, audits: list[dict], full: list[dict]) -> str:
        """The search in one line: stops per rung, steps spent of the budget, the audits' verdict
        (an audited trial whose full training beats every promoted trial "would have won")."""
        n = sum(s.trial_id in seen for s in trials)
        stops = [f"step {r['step']}: {r['stopped']}" for b in brackets for r in b["rungs"] if r["stopped"]]
        nstop = sum(seen[s.trial_id].status == "stopped" for s in trials if s.trial_id in seen)
        return (f"stopped {nstop} of {n} trials" + (f" ({', '.join(stops)})" if stops else "")
                + f"; {spent:,} of {self.budget:,} steps spent{self._over_words(spent)}"
                + self._audit_words(audits, full))

    def _over_words(self, spent: int) -> str:
        """Past the budget: ``" (at most 809: the last configuration proposed trains to the end)"``
        (:meth:`max_steps` less the audits: the bound for any executor, ``--jobs N`` included)."""
        most = self.max_steps() - self.audit * self.steps
        return f" (at most {most:,}: the last configuration proposed trains to the end)" \
            if spent > self.budget else ""

    def _audit_words(self, audits: list[dict], full: list[dict]) -> str:
        """``"; audit: 1 of 2 stopped trials trained to the end would have won"`` (an audited trial
        whose full training beats every promoted one), or ``""`` before any audit has finished."""
        kind = "best" if self.value == "best" else "final"
        key = f"{kind}_valid_{self.metric.split('/', 1)[-1]}"
        vals = [f[key] for f in full if f.get(key) is not None]
        done = [a for a in audits if a["status"] == "finished" and a.get(key) is not None]
        if not (done and vals):
            return ""
        best = max(vals) if self.mode == "max" else min(vals)
        won = sum((a[key] > best) if self.mode == "max" else (a[key] < best) for a in done)
        return f"; audit: {won} of {len(done)} stopped trials trained to the end would have won"

    def describe(self, seen: Mapping[str, TrialOutcome]) -> dict[str, Any]:
        """The search's account (``search.json``): its settings, each bracket's rungs, per rung how
        many trials reached it, continued and were stopped there, the steps spent, and the audits
        (each stopped twin's rung values beside its full training's final values)."""
        configs, _ = self._walk(seen)
        trials = [s for c in configs for s in c]
        spent = sum(steps_trained(seen[s.trial_id], s) for s in trials if s.trial_id in seen)
        brackets = []
        for b in range(self.brackets):
            mine = [s for s in trials if dict(s.early_stop)["bracket"] == b]
            rungs = []
            for r in rung_steps(self.min_steps, self.eta, self.steps, b):
                reached = [s for s in mine if r in (seen[s.trial_id].rungs if s.trial_id in seen else {})]
                stopped = [s for s in reached if seen[s.trial_id].stopped_step == r]
                rungs.append({"step": r, "reached": len(reached), "stopped": len(stopped),
                              "continued": len(reached) - len(stopped)})
            brackets.append({"bracket": b, "trials": len(mine), "rungs": rungs,
                             "finished": sum(seen[s.trial_id].status == "finished"
                                             for s in mine if s.trial_id in seen)})
        audits = []
        for twin, a in self.audits(seen):
            t, o = seen[twin.trial_id], seen.get(a.trial_id)
            audits.append({"trial_id": a.trial_id, "stopped_twin": twin.trial_id, "seed": twin.seed,
                           "config": t.config, "stopped_step": t.stopped_step,
                           "rungs": {str(k): v for k, v in sorted(t.rungs.items())},
                           "status": o.status if o else "pending",
                           "final_valid_loss": o.final_valid_loss if o else None,
                           "final_valid_accuracy": o.final_valid_accuracy if o else None,
                           "best_valid_loss": o.best_valid_loss if o else None,
                           "best_valid_accuracy": o.best_valid_accuracy if o else None})
        full = [{"trial_id": s.trial_id, "seed": s.seed, "config": seen[s.trial_id].config,
                 "rungs": {str(k): v for k, v in sorted(seen[s.trial_id].rungs.items())},
                 "final_valid_loss": seen[s.trial_id].final_valid_loss,
                 "final_valid_accuracy": seen[s.trial_id].final_valid_accuracy,
                 "best_valid_loss": seen[s.trial_id].best_valid_loss,
                 "best_valid_accuracy": seen[s.trial_id].best_valid_accuracy}
                for s in trials if s.trial_id in seen and seen[s.trial_id].status == "finished"]
        words = self._words(trials, seen, brackets, spent, audits, full)
        return {**super().describe(seen), "trials": len(trials), "configurations": len(configs),
                "words": words,
                "synchronous": False, "eta": self.eta, "min_steps": self.min_steps,
                "brackets": brackets, "budget_steps": self.budget, "steps_spent": spent,
                "audit_steps": sum(steps_trained(seen.get(a.trial_id), a) for _, a in self.audits(seen)
                                   if a.trial_id in seen),
                "objective": {"metric": self.metric, "mode": self.mode, "value": self.value},
                "stopped": sum(seen[s.trial_id].status == "stopped" for s in trials if s.trial_id in seen),
                "full_budget": full, "audits": audits}
