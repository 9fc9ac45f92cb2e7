"""The record a worker receives with each work unit: :class:`RunContext` (where and how to log it).

Picklable (plain strings, numbers and dicts), so every executor ships it to its workers and the
spool keeps its fields beside a result it could not write. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.core.watchdog import DEFAULT_DISPATCH_TIMEOUT_S


@dataclass(frozen=True)
class RunContext:
    """What a worker needs to log a unit; picklable (plain strings and bools).

    Attributes:
      tracking_uri: MLflow store URI (``sqlite:///…`` already created, or ``http://…`` checked).
      experiment_id: the sweep's experiment.
      parent_run_id: the invocation's parent run (children get ``mlflow.parentRunId``).
      sweep_id: stable id of the sweep (hash of its trial ids), tag ``harness.sweep_id``.
      sweep: the sweep's name (tag ``harness.sweep``; also the experiment's name).
      harness_commit: commit of the checkout the harness runs from (tag ``harness_commit``).
      config_commit: commit of the config's folder (tag ``config_commit``).
      git_commit: the working tree's commit, as runs before ``harness_commit`` recorded it; a
        context spooled by such a version still carries it (``"unknown"``: not written).
      measure_perf: whether the trainer measures throughput.
      log_dataset: log the training split as an MLflow dataset input.
      claim_wait_s: on a SQLite store, how long a unit waits for a trial's claim held by another
        invocation on this machine (0: it does not wait; the trial's outcome is ``deferred``).
      trial_tags: ``trial_id`` -> extra tags of that trial's run (e.g. ``harness.search``, the
        search method that sampled it, and ``harness.search_index``, its index in the sequence).
      checkpoint_every: mid-trial checkpoint cadence (:func:`harness.train.checkpoint.parse_every`:
        steps, ``"10min"``, ``"off"``; ``"default"`` = one minute, spaced by the save's cost). Never
        part of a trial's id.
      checkpoint_dir: checkpoint root (``""``: :func:`harness.train.checkpoint.root_for` the store).
      keep_final_checkpoint: log each trial's final training state as its ``checkpoint/`` artifact.
      rung_board: an early-stopping sweep's :class:`harness.core.rungs.RungBoard` (``None``: none):
        the trainer's gate ranks a trial at its rungs against it. A copy shipped to a worker is
        not ``live`` (:mod:`harness.execute.rung_gate`); never spooled.
      dispatch_timeout_s: seconds one dispatch of a trial with user code (a ``source:`` entry) may
        take while it trains (:mod:`harness.core.watchdog`); ``None``: no limit.
    """

    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    sweep_id: str
    sweep: str
    git_commit: str = "unknown"
    harness_commit: str = "unknown"
    config_commit: str = "unknown"
    measure_perf: bool = True
    log_dataset: bool = True
    claim_wait_s: float = 0.0
    trial_tags: dict[str, dict[str, str]] = field(default_factory=dict)
    checkpoint_every: str = "default"
    checkpoint_dir: str = ""
    keep_final_checkpoint: bool = False
    rung_board: Any = None
    dispatch_timeout_s: float | None = DEFAULT_DISPATCH_TIMEOUT_S

    def tags_of(self, trial_id: str) -> dict[str, str]:
        """The extra run tags of ``trial_id``: :attr:`trial_tags`' and, in an early-stopping sweep,
        the rung board's (its search index, bracket, rung group, ``harness.audit_of``)."""
        board = self.rung_board.tags.get(trial_id, {}) if self.rung_board is not None else {}
        return {**self.trial_tags.get(trial_id, {}), **board}
