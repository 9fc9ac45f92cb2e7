"""Targets chosen after the fact: a sweep's frame with its steps and times to another target.

A trial logs its whole validation curve, and its target is not part of its identity
(:attr:`harness.core.spec.TrialSpec.trial_id`), so ``report --target valid/loss=1.9`` and
``harness.results(..., target="valid/loss=1.9")`` read the store again with a new target and train
nothing. :func:`retarget` recomputes, per trial, from the frame's curve rows (the values MLflow
holds) with training's rule (:func:`harness.core.reached.first_reached`: the first evaluation after
step 0 that reaches it):

- ``convergence/steps_to_target``: that evaluation's step;
- ``convergence/seconds_to_target``: the ``time/wall_s`` the trial logged at it (measured clock);
- ``convergence/modeled_seconds_to_target``: steps × ``perf/modeled_step_ms`` / 1000
  (:func:`harness.core.clock.modeled_seconds`);
- ``convergence/cost_seconds_to_target``: steps × the program's FLOPs per step / the device's peak
  (:func:`harness.core.clock.cost_seconds`): the logged cost per step (cost / steps to the sweep's
  target), else ``perf/step_time_ms`` / 1000 × ``perf/utilization`` (the same quotient);

and sets every row's ``target_metric``, ``target_value``, ``target_mode`` (and the ``params.target.*``
columns, so task labels follow), so that the leaderboard, selection, claims and figures read the
new target as they read the sweep's own. Trials that failed keep no value. The targets a report
can move to are those on the frame's validation curves: ``valid/loss`` and ``valid/accuracy``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.core import names
from harness.core.clock import cost_seconds, modeled_seconds
from harness.core.reached import first_reached, parse_target
from harness.core.spec import Target
from reports.labels import add_labels

__all__ = ["TARGETABLE", "resolve_target", "retarget"]

#: The metrics a target may be moved to: the frame's validation curves.
TARGETABLE = (names.M_VALID_LOSS, names.M_VALID_ACC)
#: Trials whose curves are read for a target (a failed trial's are not: it has no result).
_READ = ("finished", "diverged", "stopped")
#: The summary columns :func:`retarget` recomputes.
TO_TARGET = (names.M_STEPS_TO_TARGET, names.M_SECONDS_TO_TARGET, names.M_MODELED_SECONDS_TO_TARGET,
             names.M_COST_SECONDS_TO_TARGET)


def resolve_target(frame: pd.DataFrame, target: str | Target) -> Target:
    """``target`` (``"valid/loss=1.9"`` or a :class:`Target`) checked against ``frame``'s curves.

    Args:
      frame: a sweep's tidy frame (:mod:`reports.frame`).
      target: ``METRIC=VALUE`` or a :class:`~harness.core.spec.Target`.
    Returns:
      the :class:`~harness.core.spec.Target`.
    Raises:
      ValueError: not ``METRIC=VALUE``; a metric the runs do not log on validation (naming those
        they do); a value on the wrong side of a metric's range (accuracy outside [0, 1], a negative
        loss). One line each.
    """
    t = target if isinstance(target, Target) else parse_target(target)
    logged = [m for m in TARGETABLE if m in frame and frame[m].notna().any()]
    if t.metric not in logged:
        other = ("; a target on it moves to valid/loss (perplexity = exp(loss), bits per byte = "
                 "loss / ln 2 / bytes per token)" if t.metric.endswith(("perplexity", "bits_per_byte"))
                 else "")
        raise ValueError(f"target {t.metric}={t.value:g}: the runs of this sweep log no {t.metric} "
                         f"curve; a target can be moved to {', '.join(logged) or 'none of them'}{other}")
    if t.metric.endswith("accuracy") and not 0.0 <= t.value <= 1.0:
        raise ValueError(f"target {t.metric}={t.value:g}: an accuracy target must be within [0, 1]")
    if t.metric.endswith("loss") and t.value < 0:
        raise ValueError(f"target {t.metric}={t.value:g}: a loss target must be >= 0")
    return t


def retarget(frame: pd.DataFrame, target: str | Target) -> pd.DataFrame:
    """``frame`` with steps and times to ``target`` (module docstring) in place of its own.

    Args:
      frame: a sweep's tidy frame (curve and summary rows, :func:`reports.frame.build_frame`).
      target: ``METRIC=VALUE`` or a :class:`~harness.core.spec.Target` (:func:`resolve_target`).
    Returns:
      a new frame (same rows, columns and ``attrs``); ``frame`` is not changed.
    Raises:
      ValueError: as :func:`resolve_target`.
    """
    t = resolve_target(frame, target)
    out = frame.copy()
    curve = out[(out["row"] == "curve") & out[t.metric].notna()]
    per_trial = {tid: g.sort_values("step") for tid, g in curve.groupby("trial_id", sort=False)}
    summary = out.index[out["row"] == "summary"]
    for i in summary:
        row = out.loc[i]
        g = per_trial.get(row["trial_id"])
        values = _to_target(g, t, row) if row["status"] in _READ and g is not None else None
        for col, v in zip(TO_TARGET, values or (None,) * len(TO_TARGET), strict=True):
            out.at[i, col] = math.nan if v is None else float(v)
    out["target_metric"], out["target_value"], out["target_mode"] = t.metric, t.value, t.mode
    for param, v in ((names.PARAM_TARGET_METRIC, t.metric), (names.PARAM_TARGET_VALUE, str(t.value)),
                     (names.PARAM_TARGET_MODE, t.mode)):
        out[f"params.{param}"] = v
    return _relabel(out)


def _to_target(g: pd.DataFrame, t: Target, row: pd.Series) -> tuple | None:
    """``(steps, seconds, modeled seconds, cost seconds)`` to ``t`` of one trial (``g``: its curve
    rows holding ``t.metric``, by step; ``row``: its summary row); ``None`` when not reached."""
    steps = [int(s) for s in g["step"]]
    i = first_reached(steps, g[t.metric].tolist(), t)
    if i is None:
        return None
    n = steps[i]
    wall = g[names.M_WALL_S].iloc[i] if names.M_WALL_S in g else math.nan
    old_steps, old_cost = row.get(names.M_STEPS_TO_TARGET), row.get(names.M_COST_SECONDS_TO_TARGET)
    step_ms, util = row.get(names.M_STEP_MS), row.get(names.M_UTIL)
    # the program's FLOPs per step / peak: the logged cost per step, else step time × utilisation
    per_step = old_cost / old_steps if _pos(old_cost) and _pos(old_steps) else \
        step_ms / 1e3 * util if _pos(step_ms) and _pos(util) else None
    return (n, wall if np.isfinite(wall) else None, modeled_seconds(n, row.get(names.M_MODELED_STEP_MS)),
            cost_seconds(n, per_step, 1.0))


def _pos(x) -> bool:
    return x is not None and not pd.isna(x) and math.isfinite(float(x)) and float(x) > 0


def _relabel(frame: pd.DataFrame) -> pd.DataFrame:
    """Task and configuration labels again from the summary rows' params (a task split by the
    targets its runs were trained with is one task under one target), copied onto the curve rows."""
    is_sum = frame["row"] == "summary"
    if not is_sum.any():
        return frame
    s = add_labels(frame[is_sum])
    for col in ("task", "config", "config_id"):
        by_trial = dict(zip(s["trial_id"], s[col], strict=True))
        frame[col] = frame["trial_id"].map(by_trial).fillna(frame[col]).astype(frame[col].dtype)
    return frame
