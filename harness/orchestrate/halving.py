"""Synchronous successive halving: ``search: {method: successive_halving}``.

Successive halving (Jamieson and Talwalkar 2016; the inner loop of Li et al.'s Hyperband, JMLR 2018)
ranks a whole rung before anything goes on, unlike ``asha``, which decides as each trial reaches
its rung (:mod:`harness.orchestrate.asha`). One bracket of ``n`` configurations of the cell (the points of
its sampled sequence in order, as ``asha``'s: :class:`~harness.orchestrate.asha.AshaSearcher`), rung
steps ``r_0 < r_1 < ... < r_L`` = :func:`harness.core.rungs.rung_steps` then the budget:

- round ``i`` trains its configurations (every seed) to rung ``r_i``; once all have results, the
  top ``max(1, floor(n_i / eta))`` by their rung value go on (the mean over seeds of the sweep's
  objective at the rung, :func:`harness.orchestrate.asha.objective`; a seed that diverged or failed ranks
  the configuration last; ties to the earlier index), the others stop there;
- the last round trains the survivors to the budget.

**Restarts, not pauses.** The harness never pauses a trial, so a promoted configuration is trained
again from its initialisation to its next rung. The trial of round ``i < L`` is the full-budget
trial stopped at ``r_i`` (its :attr:`~harness.core.spec.TrialSpec.early_stop` says ``stop_at``:
the gate of :mod:`harness.execute.rung_gate` ends it there, status ``stopped``), so its schedule is
the full budget's and its curve up to ``r_i`` is the full trial's, bit for bit; a promotion costs
the steps of the earlier rung again, at most ``1 / (eta - 1)`` more than resuming would. The last
round's trials are plain full-budget trials (the plain trial id, which a grid sweep reuses).

**Budget**: ``trials: N`` is compute, ``N x seeds x steps``; ``n`` is the most
configurations whose whole bracket (restarts included) fits it (:func:`bracket_cost`), at least 1;
a cell without sampled dimensions has its candidates only. ``audit: K``: once the bracket is done,
the first ``K`` stopped trials whose configuration never reached the budget (by index, then seed)
are trained to the end too, tagged ``harness.audit_of``, outside the budget.

Every decision is a function of ``seen`` (the rung values are the runs' ``harness.rungs`` tags), so a
sweep killed at any moment and run again proposes the same rounds and trains nothing twice, with any
executor (the decision waits for the whole rung: no timing enters it).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping
from typing import Any

from harness.core.freeze import freeze
from harness.core.names import TAG_AUDIT_OF, TAG_SEARCH, TAG_SEARCH_INDEX
from harness.core.outcome import TrialOutcome
from harness.core.rungs import rung_steps
from harness.core.selection_rule import DEFAULT_SELECT_BY
from harness.core.spec import TrialSpec
from harness.orchestrate.asha import AshaSearcher, steps_trained
from harness.orchestrate.searchers import register
from harness.plan.cells import Cell

__all__ = ["SuccessiveHalving", "bracket_cost", "round_sizes", "survivors"]


def survivors(n: int, eta: int) -> int:
    """How many of ``n`` configurations go on past a rung: ``max(1, floor(n / eta))``."""
    return max(1, n // eta)


def round_sizes(n: int, rounds: int, eta: int) -> list[int]:
    """The configurations of each of ``rounds`` rounds of a bracket of ``n``: ``n_0 = n``,
    ``n_{i+1} = survivors(n_i)``. Example: ``round_sizes(9, 3, 3)`` is ``[9, 3, 1]``."""
    sizes = [n]
    while len(sizes) < rounds:
        sizes.append(survivors(sizes[-1], eta))
    return sizes


def bracket_cost(n: int, levels: list[int], eta: int, seeds: int) -> int:
    """Training steps of a bracket of ``n`` configurations with rung steps ``levels`` (the budget
    last), restarts included: ``seeds x sum_i n_i x levels[i]`` (:func:`round_sizes`). Example:
    ``bracket_cost(9, [10, 30, 90], 3, 1)`` is ``9*10 + 3*30 + 1*90 = 270``."""
    return seeds * sum(m * r for m, r in zip(round_sizes(n, len(levels), eta), levels, strict=True))


@register("successive_halving")
class SuccessiveHalving(AshaSearcher):
    """Synchronous successive halving over one cell (module docstring)."""

    candidates_are = "its first round's trials (the first configurations to the first rung)"

    def __init__(self, cell: Cell, select_by: str = DEFAULT_SELECT_BY):
        super().__init__(cell, select_by)
        self.method, self.brackets = "successive_halving", 1
        self.levels = [*rung_steps(self.min_steps, self.eta, self.steps, 0), self.steps]
        cap = None if self.extends else len(self._configs)
        n = 1
        while (cap is None or n < cap) and bracket_cost(n + 1, self.levels, self.eta,
                                                          len(self.seeds)) <= self.budget:
            n += 1
        self.n = n

    # -- the trials ----------------------------------------------------------------------------

    def level_trials(self, k: int, i: int) -> list[TrialSpec]:
        """Configuration ``k``'s trials (every seed) of round ``i``: stopped at rung ``i``'s step
        (``early_stop`` with ``stop_at``), or plain at the last round."""
        plain = self._plain(k)
        if plain is None:
            return []
        out = []
        for seed in self.seeds:
            s = plain[seed]
            if i + 1 < len(self.levels):
                r = self.levels[i]
                s = dataclasses.replace(s, early_stop=freeze({
                    "method": self.method, "eta": self.eta, "min_steps": self.min_steps, "bracket": 0,
                    "rungs": [r], "stop_at": r, "metric": self.metric, "mode": self.mode,
                    "value": self.value}))
            self.board.tags[s.trial_id] = {TAG_SEARCH: self.method, TAG_SEARCH_INDEX: str(k),
                                           **self._space}
            out.append(s)
        return out

    def _score(self, k: int, i: int, seen: Mapping[str, TrialOutcome]) -> float:
        """Configuration ``k``'s rung-``i`` value, signed so that smaller is better (``inf``: a seed
        without a finite value)."""
        r = self.levels[i]
        vals = []
        for s in self.level_trials(k, i):
            v = seen[s.trial_id].rungs.get(r)
            if v is None or not math.isfinite(v):
                return math.inf
            vals.append(v)
        m = statistics.fmean(vals)
        return -m if self.mode == "max" else m

    def rounds(self, seen: Mapping[str, TrialOutcome]) -> tuple[list[list[int]], list[TrialSpec]]:
        """The rounds so far (each round's configuration indices) and the trials still to train
        (``[]`` once the bracket is done): a pure function of ``seen``."""
        alive, out = list(range(self.n)), []
        for i in range(len(self.levels)):
            if self._plain(alive[0]) is None:
                break
            out.append(alive)
            missing = [s for k in alive for s in self.level_trials(k, i) if s.trial_id not in seen]
            if missing:
                return out, missing
            if i + 1 < len(self.levels):
                ranked = sorted(alive, key=lambda k, i=i: (self._score(k, i, seen), k))
                alive = sorted(ranked[:survivors(len(alive), self.eta)])
        return out, []

    def audits(self, seen: Mapping[str, TrialOutcome]) -> list[tuple[TrialSpec, TrialSpec]]:
        """``(stopped trial, audit trial)``: the first ``audit`` stopped trials whose configuration
        never reached the budget (index, then seed), once the bracket is done."""
        rounds, missing = self.rounds(seen)
        if not self.audit or missing or not rounds:
            return []
        top = set(rounds[-1]) if len(rounds) == len(self.levels) else set()
        out = []
        for k in range(self.n):
            if k in top:
                continue
            last = max(i for i, ks in enumerate(rounds) if k in ks)
            for s in self.level_trials(k, last):
                if len(out) < self.audit and seen[s.trial_id].status == "stopped":
                    a = dataclasses.replace(s, early_stop=())
                    self.board.tags[a.trial_id] = {TAG_SEARCH: self.method, TAG_AUDIT_OF: s.trial_id,
                                                   TAG_SEARCH_INDEX: str(k), **self._space}
                    out.append((s, a))
        return out

    # -- the seam ------------------------------------------------------------------------------

    def candidates(self) -> list[TrialSpec]:
        """Round 0's trials (the first ``n`` configurations to the first rung)."""
        return [s for k in range(min(self.n, len(self._configs))) for s in self.level_trials(k, 0)]

    def propose(self, seen: Mapping[str, TrialOutcome]) -> list[TrialSpec]:
        """The current round's untrained trials; once the bracket is done, the audits."""
        _, missing = self.rounds(seen)
        if missing:
            return missing
        return [a for _, a in self.audits(seen) if a.trial_id not in seen]

    def max_steps(self) -> int:
        """The bracket's steps (restarts included) plus the audits at their budget."""
        return (bracket_cost(self.n, self.levels, self.eta, len(self.seeds))
                + self.audit * self.steps)

    def max_trials(self) -> int:
        """Every round's trials (a configuration that goes on restarts as a new trial), every seed,
        plus the audits: ``seeds x sum_i n_i + audit`` (:func:`round_sizes`)."""
        return sum(round_sizes(self.n, len(self.levels), self.eta)) * len(self.seeds) + self.audit

    def describe(self, seen: Mapping[str, TrialOutcome]) -> dict[str, Any]:
        """Per round: its rung step, configurations, how many went on; the steps spent; the
        audits."""
        rounds, missing = self.rounds(seen)
        trials = [s for i, ks in enumerate(rounds) for k in ks for s in self.level_trials(k, i)]
        spent = sum(steps_trained(seen[s.trial_id], s) for s in trials if s.trial_id in seen)
        table = [{"round": i, "step": self.levels[i], "configurations": len(ks),
                  "went_on": len(rounds[i + 1]) if i + 1 < len(rounds) else 0, "indices": ks}
                 for i, ks in enumerate(rounds)]
        def rung_values(k: int, seed: int) -> dict[str, float]:
            """Configuration ``k``'s value at each rung it was trained to (seed ``seed``)."""
            out = {}
            for i, r in enumerate(self.levels[:-1]):
                t = next(x for x in self.level_trials(k, i) if x.seed == seed)
                if t.trial_id in seen and r in seen[t.trial_id].rungs:
                    out[str(r)] = seen[t.trial_id].rungs[r]
            return out

        def finals(o: TrialOutcome | None) -> dict[str, Any]:
            return {m: getattr(o, m, None) for m in ("final_valid_loss", "final_valid_accuracy",
                                                    "best_valid_loss", "best_valid_accuracy")}

        audits = [{"trial_id": a.trial_id, "stopped_twin": s.trial_id, "seed": s.seed,
                   "config": seen[s.trial_id].config, "stopped_step": seen[s.trial_id].stopped_step,
                   "rungs": rung_values(int(self.board.tags[a.trial_id][TAG_SEARCH_INDEX]), s.seed),
                   "status": seen[a.trial_id].status if a.trial_id in seen else "pending",
                   **finals(seen.get(a.trial_id))}
                  for s, a in self.audits(seen)]
        top = rounds[-1] if len(rounds) == len(self.levels) else []
        full = [{"trial_id": s.trial_id, "seed": s.seed, "config": seen[s.trial_id].config,
                 "rungs": rung_values(k, s.seed), **finals(seen[s.trial_id])}
                for k in top for s in self.level_trials(k, len(self.levels) - 1)
                if s.trial_id in seen and seen[s.trial_id].status == "finished"]
        words = (" → ".join(f"{r['configurations']} to step {r['step']}" for r in table)
                 + f"; {spent:,} of {self.budget:,} steps spent (restarts included)"
                 + self._audit_words(audits, full))
        return {"method": self.method, "cell": self.cell.key, "task": self.cell.task,
                "optimizer": self.cell.optimizer, "synchronous": True, "restarts": True,
                "eta": self.eta, "min_steps": self.min_steps, "levels": self.levels,
                "configurations": self.n, "rounds": table, "trials": len(trials),
                "steps_spent": spent, "budget_steps": self.budget, "done": not missing,
                "objective": {"metric": self.metric, "mode": self.mode, "value": self.value},
                "stopped": sum(seen[s.trial_id].status == "stopped" for s in trials if s.trial_id in seen),
                "full_budget": full, "audits": audits, "words": words}
