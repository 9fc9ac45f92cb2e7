"""The resume plan and work units of a sweep.

- :func:`make_plan` reads the experiment's trial runs: a trial with a FINISHED run is done (skipped);
  FAILED, KILLED, RUNNING or missing ones are to do.
- :func:`group_units` forms work units (vmappable siblings when batching is on/auto).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.tracking.client import trial_runs
from harness.core.spec import TrialSpec
from harness.execute.worker import TrialOutcome, outcome_from_run


def group_units(specs: list[TrialSpec], batching: str,
                should_batch: Callable[[list[TrialSpec]], bool] | None = None,
                labels: dict[str, str] | None = None) -> list[list[TrialSpec]]:
    """Work units: single trials (``off``) or groups of equal :meth:`TrialSpec.batch_key`
    (``on``; ``auto`` keeps a group only where ``should_batch(group)`` — by default
    ``harness.train.loop.should_batch``, measured by :mod:`harness.batching` — says batching pays, or
    where its trials ask for trial-parallel training, ``parallelism: {shard: trials}`` on more than
    one device).

    ``labels``, when given, is filled with ``trial_id -> how its unit trains and why`` (the
    ``harness.batching`` tag: ``"vmap(8): measured 1.21x"``, ``"sequential: batching off"``, ...)."""
    from harness.train import batching as _batching

    labels = {} if labels is None else labels
    if batching == "off":
        labels.update((s.trial_id, "sequential: batching off") for s in specs)
        return [[s] for s in specs]
    groups: dict[tuple, list[TrialSpec]] = {}
    for s in specs:
        groups.setdefault(s.batch_key(), []).append(s)
    units = []
    for g in groups.values():
        trial_parallel = g[0].shard == "trials" and g[0].devices != 1
        if len(g) > 1 and batching == "auto" and not trial_parallel:
            if should_batch is None:
                from harness.train.loop import should_batch as sb

                should_batch = sb
            if not should_batch(g):
                labels.update((s.trial_id, _batching.describe(g, False)) for s in g)
                units.extend([s] for s in g)
                continue
            label = _batching.describe(g, True)
        elif trial_parallel and len(g) > 1:
            label = f"vmap({len(g)}): trial-parallel over parallelism.devices={g[0].devices}"
        else:
            label = f"vmap({len(g)}): batching on" if len(g) > 1 else "sequential: single trial"
        labels.update((s.trial_id, label) for s in g)
        units.append(g)
    return units


@dataclass
class Plan:
    """Which trials of a sweep are already done (a FINISHED run exists) and which will run."""

    specs: list[TrialSpec]
    todo: list[TrialSpec]
    done: dict[str, Any] = field(default_factory=dict)  # trial_id -> FINISHED run
    failed_before: set[str] = field(default_factory=set)

    @property
    def done_outcomes(self) -> list[TrialOutcome]:
        by_id = {s.trial_id: s for s in self.specs}
        out = []
        for tid, run in self.done.items():
            o = outcome_from_run(by_id[tid], run)
            o.skipped = True
            out.append(o)
        return out


def make_plan(specs: list[TrialSpec], client, experiment_id: str | None) -> Plan:
    """Split ``specs`` into done / to do from the runs stored in ``experiment_id`` (None: none)."""
    runs = trial_runs(client, experiment_id) if experiment_id else {}
    done, failed, todo = {}, set(), []
    for s in specs:
        rs = runs.get(s.trial_id, [])
        fin = [r for r in rs if r.info.status == "FINISHED"]
        if fin:
            done[s.trial_id] = fin[0]
        else:
            if any(r.info.status == "FAILED" for r in rs):
                failed.add(s.trial_id)
            todo.append(s)
    return Plan(specs, todo, done, failed)
