"""The adaptive sweep's rounds: propose -> train -> observe -> propose, on the seam of
:mod:`harness.orchestrate.searchers`.

:class:`Rounds` drives a :class:`~harness.orchestrate.searchers.SweepSearch`: each call of
:meth:`Rounds.next_plan` asks the searchers for their next trials given ``seen`` (every trial of
the sweep the store holds: FINISHED runs read once at the start, then each outcome of this
invocation as it arrives), takes out those the store or the spool already holds (they join
``seen``: an earlier invocation, or an earlier sweep of the same trial ids, trained them) and
returns the first round that has something to train, as a :class:`~harness.orchestrate.resume.Plan`.
:func:`harness.orchestrate.run.run_sweep` trains each round under one parent run and one progress bar
(the executors, resume, de-duplication and writing are the fixed sweep's); the search ends when the
searchers propose nothing new. Because every searcher's ``propose`` is a pure function of ``seen``,
a sweep killed at any moment and run again replays the same decisions from the store and trains
nothing twice.

At the end of an invocation the parent run gets ``search.json`` (each cell's
:meth:`~harness.orchestrate.searchers.Searcher.describe`: the path, rungs, certificate, ...) and its
``trials.json`` becomes every trial the search proposed (the report's list of the sweep's trials,
reused ones included).

``only`` (``sweep --only``) keeps the proposals of its axis values; a search that needs a trial
``only`` leaves out stops there (said in the summary as its trials).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.names import ARTIFACT_SEARCH, ARTIFACT_TRIALS, TAG_AUDIT_OF
from harness.core.outcome import TrialOutcome
from harness.core.spec import TrialSpec
from harness.orchestrate.resume import Plan, make_plan, take_spooled
from harness.orchestrate.searchers import SweepSearch
from harness.plan.units import search_lines
from harness.tracking.client import trial_runs

__all__ = ["Rounds", "keep_only", "print_search_plan", "unequal_compute"]

def keep_only(only: dict[str, tuple[str, ...]]) -> Callable[[TrialSpec], bool]:
    """The predicate of ``sweep --only`` on a proposal: every axis of ``only`` has one of its values."""
    return lambda s: all(str(getattr(s, a)) in vals for a, vals in only.items())


class Rounds:
    """The rounds of one invocation (see the module docstring).

    Args:
      search: the sweep's searchers.
      client, experiment_id: the store (read once here: ``trial_runs``).
      uri: the tracking URI (its spool's trials count as trained).
      keep: which proposals this invocation may train (``only``).
      carried: the sweep's outcome list (outcomes read back join it).
      origins: the sweep's ``TrialList.origins``: a proposal without one gets its cell's
        (:meth:`~harness.orchestrate.searchers.SweepSearch.adopt`), so its run is tagged with its method.
    """

    def __init__(self, search: SweepSearch, client, experiment_id: str, uri: str,
                 keep: Callable[[TrialSpec], bool] = lambda s: True,
                 carried: list[TrialOutcome] | None = None, origins: dict | None = None):
        self.search, self.uri, self.keep, self.origins = search, uri, keep, origins
        self.runs = trial_runs(client, experiment_id) if experiment_id else {}
        self.seen: dict[str, TrialOutcome] = {}
        self.proposed: dict[str, TrialSpec] = {}
        #: outcomes read back from the store or the spool (not trained here), in order (the sweep's
        #: outcome list when given: they join it as they are found)
        self.carried: list[TrialOutcome] = carried if carried is not None else []
        self.rounds = 0
        self._last: frozenset[str] = frozenset()
        self._board = search.context().get("rung_board")  # an early-stopping search's (audit tags)
        self._described: tuple[int, list[dict[str, Any]]] | None = None

    def next_plan(self) -> Plan | None:
        """The next round with trials to train (its ``todo``), or ``None`` when the search is over.
        Proposals the store already holds join ``seen`` (and :attr:`carried`) on the way."""
        while True:
            nxt = [s for s in self.search.propose(self.seen) if s.trial_id not in self.seen]
            nxt = [s for s in nxt if self.keep(s)]
            ids = frozenset(s.trial_id for s in nxt)
            if not nxt or ids == self._last:  # over, or stuck on what this invocation may not train
                return None
            self._last = ids
            for s in nxt:
                self.proposed.setdefault(s.trial_id, s)
            if self.origins is not None:
                self.search.adopt(nxt, self.origins)
            plan = make_plan(nxt, None, None, runs=self.runs)
            for o in plan.done_outcomes + take_spooled(plan, self.uri):
                self.add(o, carried=True)
            if plan.todo:
                self.rounds += 1
                return plan

    def add(self, o: TrialOutcome, carried: bool = False) -> None:
        """An outcome of this sweep: into ``seen`` and to the searchers (:meth:`observe`). A trial
        trained here that a search made its audit (the rung board's tag ``harness.audit_of``) is
        marked so (:attr:`TrialOutcome.audit_of`: never selected)."""
        board = self._board
        if not o.audit_of and board is not None:
            o.audit_of = board.tags.get(o.trial_id, {}).get(TAG_AUDIT_OF, "")
        self.seen[o.trial_id] = o
        if carried:
            self.carried.append(o)
        self.search.observe(o)

    def context(self) -> dict[str, Any]:
        """The searchers' RunContext fields (:meth:`harness.orchestrate.searchers.SweepSearch.context`)."""
        return self.search.context()

    def proposed_specs(self) -> list[TrialSpec]:
        """Every trial proposed so far, in order."""
        return list(self.proposed.values())

    def describe(self) -> list[dict[str, Any]]:
        """Each cell's account of its search (``search.json``, the summary's lines): replayed once per
        state of ``seen`` (the parent run's artifact and the summary share it)."""
        if self._described is None or self._described[0] != len(self.seen):
            self._described = (len(self.seen), self.search.describe(self.seen))
        return self._described[1]

    def log(self, client, parent_id: str) -> None:
        """``search.json`` and the proposed trials as ``trials.json`` on the parent run."""
        with tempfile.TemporaryDirectory(prefix="harness-") as d:
            dp = Path(d)
            (dp / ARTIFACT_SEARCH).write_text(json.dumps(self.describe(), indent=2, default=str))
            (dp / ARTIFACT_TRIALS).write_text(json.dumps(
                [{"trial_id": s.trial_id, **s.to_dict()} for s in self.proposed_specs()],
                indent=2, default=str))
            client.log_artifacts(parent_id, d)


def print_search_plan(console, search: SweepSearch, sweep_id: str, cfg, seen: dict) -> None:
    """The dry run of an adaptive sweep (``cfg`` its config): per cell its method, its candidates
    (what they are: a line per method under the table), how many of them the store holds, the most
    trials it can train (:meth:`Searcher.max_trials`) and the most training steps it can spend (its
    budget); then the totals, how its trials will be grouped and the device memory for its data
    (:func:`harness.plan.units.search_lines`)."""
    from rich.markup import escape
    from rich.table import Table

    from harness.orchestrate.tables import print_table

    most, trials = search.max_steps(), search.max_trials()
    t = Table(title=f"sweep {cfg.name!r} ({sweep_id}): adaptive search; trials are proposed as results "
                    f"arrive")
    for col in ("task", "optimizer", "method", "candidates", "in the store", "at most (trials)",
                "at most (steps)"):
        t.add_column(col)
    for s in search.searchers:
        c = s.cell
        cands = s.candidates()  # ASHA's carry their rule: not the expansion's plain trials
        held = sum(x.trial_id in seen for x in cands)
        t.add_row(escape(c.task), escape(c.optimizer), c.search.method, str(len(cands)), str(held),
                  f"{trials[c.key]:,}", f"{most[c.key]:,}")
    print_table(console, t)
    what = {s.cell.search.method: s.candidates_are for s in search.searchers}
    console.print(escape("candidates: " + "; ".join(f"{m}: {w}" for m, w in what.items())))
    console.print(f"the search can train at most {sum(trials.values()):,} trials and spend at most "
                  f"{sum(most.values()):,} training steps in all (an adaptive method's budget is "
                  f"compute: trials x seeds x the budget's steps per optimizer and task; early "
                  f"stopping proposes trials while the steps last, so its count assumes none "
                  f"diverges: a diverged trial's unspent steps pay for more)")
    for line in search_lines(search.candidates(), cfg.batching):
        console.print(escape(line), soft_wrap=True)
    for line in unequal_compute(search):
        console.print(f"[yellow]warning: {escape(line)}[/]")


def unequal_compute(search: SweepSearch) -> list[str]:
    """One line per task whose optimizers can spend different numbers of training steps (a
    comparison is fair when every optimizer gets the same compute): ``"digits · mlp: the
    optimizers' most training steps differ: adam 2,000, sgd 1,000"``."""
    per: dict[str, dict[str, int]] = {}
    for s in search.searchers:
        c = s.cell
        per.setdefault(c.task, {})
        per[c.task][c.optimizer] = per[c.task].get(c.optimizer, 0) + s.max_steps()
    return [f"{task}: the optimizers' most training steps differ: "
            + ", ".join(f"{o} {n:,}" for o, n in sorted(opts.items()))
            for task, opts in per.items() if len(set(opts.values())) > 1]
