"""A target read off a stored validation curve: the rule training applies, applied after the fact.

The target is not part of a trial's identity (:attr:`harness.core.spec.TrialSpec.trial_id`): a trial
logs its whole validation curve, and steps to any target are a function of it. :func:`first_reached`
is the rule of :meth:`harness.train.track.TrialTrack.add_eval` (the first evaluation after training
started whose value reaches the target; the step-0 evaluation, at initialisation, never counts),
so a curve re-read with the target the trial trained with gives the steps it logged.
:func:`parse_target` reads ``report --target`` / ``results(target=)``; :func:`stored_targets` the
targets the runs of a store were trained with (their ``target.*`` params).

Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from harness.core.names import PARAM_TARGET_METRIC, PARAM_TARGET_MODE, PARAM_TARGET_VALUE, canonical_metric
from harness.core.spec import Target

__all__ = ["default_mode", "first_reached", "parse_target", "stored_targets"]

def default_mode(metric: str) -> str:
    """``"max"`` for an accuracy (a name ending in ``accuracy``), else ``"min"`` (loss, perplexity,
    bits per byte): the config's rule (``target.mode`` left out).

    Args:
      metric: a validation metric name (``valid/accuracy``, ``valid/loss``).
    Returns:
      ``"max"`` or ``"min"``.
    """
    return "max" if metric.endswith("accuracy") else "min"


def parse_target(text: str, mode: str | None = None) -> Target:
    """``METRIC=VALUE`` (``valid/loss=1.9``; ``eval/*`` read as ``valid/*``) as a :class:`Target`.

    Args:
      text: the metric, ``=``, and a finite number.
      mode: ``"max"`` or ``"min"``; ``None``: :func:`default_mode` of the metric.
    Returns:
      the :class:`~harness.core.spec.Target`.
    Raises:
      ValueError: not ``METRIC=VALUE``, a metric that is not a ``valid/*`` name, a value that is not a
        finite number (the message quotes ``text``).
    """
    metric, sep, value = str(text).partition("=")
    metric = canonical_metric(metric.strip())
    how = f"a target is METRIC=VALUE, e.g. valid/loss=1.9; got {text!r}"
    if not sep or not metric.startswith("valid/") or len(metric) <= len("valid/"):
        raise ValueError(how)
    try:
        v = float(value)
    except ValueError:
        raise ValueError(how) from None
    if not math.isfinite(v):
        raise ValueError(f"a target's value must be a finite number; got {text!r}")
    return Target(metric, v, mode or default_mode(metric))  # type: ignore[arg-type]


def first_reached(steps: Sequence[int], values: Sequence[float], target: Target) -> int | None:
    """The index of the first evaluation after step 0 whose value reaches ``target``.

    Args:
      steps: the evaluations' steps, ascending (``0`` = at initialisation, never counted).
      values: the metric at each of them (non-finite values never reach a target).
    Returns:
      the index into ``steps``, or ``None`` when no evaluation after step 0 reaches it.
    """
    for i, (s, v) in enumerate(zip(steps, values, strict=True)):
        if s > 0 and v is not None and target.reached(float(v)):
            return i
    return None


def stored_targets(params: Iterable[dict[str, str]]) -> list[Target]:
    """The distinct targets among runs' params (``target.metric``, ``target.value``, ``target.mode``),
    as each was written in the trial's identity before the target left it: a value that is a whole
    number is given both as a float and as an int (a config's ``1`` and ``1.0`` hashed apart).

    Args:
      params: each run's MLflow params.
    Returns:
      the targets, in first-seen order (none for runs without a target).
    """
    out: list[Target] = []
    seen: set[tuple] = set()  # 1 == 1.0: the dataclasses compare equal, their ids do not
    for p in params:
        metric, value = p.get(PARAM_TARGET_METRIC), p.get(PARAM_TARGET_VALUE)
        if not metric or value is None:
            continue
        try:
            v = float(value)
        except ValueError:
            continue
        mode = p.get(PARAM_TARGET_MODE) or default_mode(canonical_metric(metric))
        for val in ((v, int(v)) if v.is_integer() else (v,)):
            t = Target(metric, val, mode)  # type: ignore[arg-type]
            key = (t.metric, type(val).__name__, val, t.mode)
            if key not in seen:
                seen.add(key)
                out.append(t)
    return out
