"""What "better" means on each task of a sweep: the final validation metric it ranks by, its direction.

A task's objective follows from its target (``target.metric``, ``target.mode``): a
``valid/accuracy`` target ranks by ``final/valid_accuracy`` (higher is better), a ``valid/loss`` one by
``final/valid_loss`` (lower is better); without a target, a language model's by final loss, others' by
final accuracy when logged, else loss (:func:`harness.core.selection_rule.ranking_metric`).
Tasks of one sweep may differ (:func:`objectives_differ`), so everything that selects, ranks or
reports one task's configurations asks for that task's objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.core.names import (
    M_BEST_ACC,
    M_BEST_LOSS,
    M_FINAL_ACC,
    M_FINAL_LOSS,
    M_TEST_ACC,
    M_TEST_LOSS,
    M_TRAIN_LOSS,
    M_VALID_ACC,
    M_VALID_LOSS,
    canonical_metric,
)
from harness.core.selection_rule import ranking_metric, value_kind
from reports.frame import summaries, target_mode

#: Which final (validation) metric a target metric is judged by (``eval/*`` targets, the names of
#: before the three-split protocol, are read as ``valid/*``: :func:`harness.core.names.canonical_metric`).
FINAL_OF = {M_VALID_ACC: M_FINAL_ACC, M_VALID_LOSS: M_FINAL_LOSS}
#: The test metric reported for a final validation metric.
TEST_OF = {M_FINAL_ACC: M_TEST_ACC, M_FINAL_LOSS: M_TEST_LOSS}
#: The best-during-training validation metric of a final one (``selection: {by: best}``).
BEST_OF = {M_FINAL_ACC: M_BEST_ACC, M_FINAL_LOSS: M_BEST_LOSS}
#: Metrics in words, for titles, axes and legends.
METRIC_LABELS = {
    M_TRAIN_LOSS: "train loss",
    M_VALID_LOSS: "validation loss",
    M_VALID_ACC: "validation accuracy",
    M_FINAL_ACC: "final validation accuracy",
    M_FINAL_LOSS: "final validation loss",
    M_BEST_ACC: "best validation accuracy",
    M_BEST_LOSS: "best validation loss",
    M_TEST_ACC: "test accuracy",
    M_TEST_LOSS: "test loss",
}


@dataclass(frozen=True)
class Objective:
    """What "better" means in a sweep: ``final`` column to rank by and its direction."""

    final: str
    mode: str  # "max" or "min"
    target_metric: str | None
    target_value: float

    @property
    def label(self) -> str:
        """The final metric in words (``final validation accuracy``)."""
        return METRIC_LABELS.get(self.final, self.final)

    @property
    def test(self) -> str:
        """The test column reported for this objective (``test/accuracy`` or ``test/loss``)."""
        return TEST_OF.get(self.final, M_TEST_ACC if self.mode == "max" else M_TEST_LOSS)

    @property
    def best(self) -> str:
        """The best-during-training validation column of this objective (``best/valid_accuracy``)."""
        return BEST_OF.get(self.final, M_BEST_ACC if self.mode == "max" else M_BEST_LOSS)

    def selected(self, by: str) -> str:
        """The validation column that selection by ``by`` reads (:func:`harness.core.selection_rule.
        value_kind`): :attr:`best` for ``best``, else :attr:`final`."""
        return self.best if value_kind(by) == "best" else self.final


def objective(frame: pd.DataFrame, task: str | None = None) -> Objective:
    """The objective of ``task`` (default: of the whole sweep): its (most common) target's final
    metric, else final loss for a language model, else final accuracy, else loss.

    Tasks of one sweep may differ (``workloads: [markov_lm_transformer, mnist1d_cnn]``: a
    ``valid/loss`` target and a ``valid/accuracy`` one), so everything that selects, ranks or
    reports one task's configurations asks for that task's objective; the sweep-wide one only
    labels what is shared (:func:`objectives_differ` says when it cannot)."""
    s = summaries(frame)
    if task is not None:
        s = s[s["task"] == task]
    tm = s["target_metric"].dropna()
    if len(tm):
        metric = tm.mode().iloc[0]
        rows = s[s["target_metric"] == metric]
        mode = (
            rows["target_mode"].dropna().iloc[0]
            if rows["target_mode"].notna().any()
            else target_mode(metric, None)
        )
        value = float(rows["target_value"].median())
        final = FINAL_OF.get(canonical_metric(metric), M_FINAL_ACC if mode == "max" else M_FINAL_LOSS)
        return Objective(final, mode, metric, value)
    lm = "language_model" in s.columns and bool(s["language_model"].fillna(False).astype(bool).any())
    if ranking_metric(None, lm) == M_VALID_ACC and s[M_FINAL_ACC].notna().any():
        return Objective(M_FINAL_ACC, "max", None, math.nan)
    return Objective(M_FINAL_LOSS, "min", None, math.nan)


def objectives_differ(frame: pd.DataFrame) -> bool:
    """Whether the sweep's tasks rank by different final metrics (e.g. one loss target, one
    accuracy target): then a shared column or axis must name each task's metric."""
    tasks = summaries(frame)["task"].dropna().unique()
    return len({objective(frame, t).final for t in tasks}) > 1


def task_objective_values(frame: pd.DataFrame, rows: pd.DataFrame) -> pd.Series:
    """Each row's final validation value of its own task's objective metric (the column it ranks
    by): ``rows`` are rows of :func:`reports.frame.summaries`; NaN where absent."""
    out = pd.Series(np.nan, index=rows.index, dtype=float)
    for task, g in rows.groupby("task", sort=False):
        out.loc[g.index] = g[objective(frame, task).final].astype(float)
    return out


def target_words(obj: Objective) -> str:
    """``valid/accuracy ≥ 0.85`` for an objective with a target, else ``""``."""
    if not obj.target_metric or not math.isfinite(obj.target_value):
        return ""
    return f"{obj.target_metric} {'≥' if obj.mode == 'max' else '≤'} {obj.target_value:g}"


def objective_label(frame: pd.DataFrame) -> str:
    """The axis title for every task's objective: the sweep's (``final validation accuracy``),
    or, when tasks differ (:func:`objectives_differ`), one that says each panel is its task's."""
    if objectives_differ(frame):
        return "final validation metric (each task's target: loss or accuracy)"
    return objective(frame).label
