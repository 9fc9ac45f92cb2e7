"""Part of a config: ``sweep --only optimizer=adam`` (``harness.sweep(config, only=...)``).

The whole config is validated, expanded and pre-flighted as ever; ``only`` then keeps the trials
whose axis values match, so every kept trial has the very ``trial_id`` it has in the whole config
(a later run of the whole config skips it as FINISHED), and the invocation's parent run belongs to
the whole config's sweep id (its ``trials.json`` lists every trial of the config; ``status`` shows
the others pending). The axes are :data:`AXES`; several values of one axis are alternatives (``adam``
or ``sgd``), several axes must all match.

Forms: ``{"optimizer": "adam"}``, ``{"optimizer": ["adam", "sgd"], "seed": 0}``, the command
line's ``["optimizer=adam,sgd", "seed=0"]`` (``--only`` repeated), or one such string.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from typing import Any

from harness.config.errors import UsageError
from harness.core.builders import did_you_mean
from harness.core.spec import TrialSpec
from harness.plan.expansion import TrialList

__all__ = ["AXES", "Only", "describe", "parse_only", "select"]

#: The axes ``only`` selects on: the :class:`~harness.core.spec.TrialSpec` field of each.
AXES = ("optimizer", "model", "dataset", "schedule", "seed", "workload")

#: ``{axis: (value, ...)}``, each value as text (a seed ``"0"``).
Only = dict[str, tuple[str, ...]]


def _values(axis: str, raw: Any) -> tuple[str, ...]:
    items = raw if isinstance(raw, (list, tuple, set, frozenset)) else [raw]
    out = []
    for v in items:
        if isinstance(v, numbers.Integral) and not isinstance(v, bool):
            v = str(int(v))  # a numpy int too (a seed read from results().trials)
        if not isinstance(v, str):
            raise UsageError(f"only: {axis}: {v!r} is not a name or a seed (give text, or an int for "
                             f"seed)", f"only.{axis}")
        out.extend(p.strip() for p in v.split(",") if p.strip())
    if not out:
        raise UsageError(f"only: {axis}: no value given", f"only.{axis}")
    return tuple(dict.fromkeys(out))


def parse_only(only: Mapping[str, Any] | Iterable[str] | str | None) -> Only:
    """``only`` in any of its forms (module docstring) as ``{axis: values}``; ``{}`` for ``None``.

    Raises:
      harness.config.errors.UsageError: an unknown axis (with the valid ones and a did-you-mean), an
        item without ``=``, an empty value; its key path is ``only.AXIS`` (``only`` when no axis).
    """
    if only is None:
        return {}
    if isinstance(only, str):
        only = [only]
    pairs: list[tuple[str, Any]] = []
    if isinstance(only, Mapping):
        pairs = [(str(k), v) for k, v in only.items()]
    else:
        for item in only:
            if not isinstance(item, str) or "=" not in item:
                raise UsageError(f"only: {item!r} is not AXIS=VALUE[,VALUE...] (e.g. optimizer=adam)",
                                 "only")
            k, v = item.split("=", 1)
            pairs.append((k.strip(), v))
    out: Only = {}
    for axis, raw in pairs:
        if axis not in AXES:
            raise UsageError(f"only: unknown axis {axis!r}; valid axes: {', '.join(AXES)}"
                             f"{did_you_mean(axis, AXES)}", f"only.{axis}")
        out[axis] = tuple(dict.fromkeys((*out.get(axis, ()), *_values(axis, raw))))
    return out


def describe(only: Only) -> str:
    """``optimizer=adam,sgd seed=0``: what the command line would say; ``""`` for all trials."""
    return " ".join(f"{axis}={','.join(vals)}" for axis, vals in only.items())


def select(specs: list[TrialSpec], only: Only, label: str = "<config>") -> list[TrialSpec]:
    """The trials of ``specs`` (in order) whose every axis of ``only`` has one of its values; a
    :class:`~harness.plan.expansion.TrialList` keeps its ``origins`` (where each trial came from).

    Raises:
      harness.config.errors.UsageError: a value no trial of the config has (naming the config's
        values of that axis and a did-you-mean), or values that each match but no trial has all of.
    """
    if not only:
        return specs  # as given: a TrialList keeps its origins (the dry run's search table reads them)
    for axis, vals in only.items():
        have = sorted({str(getattr(s, axis)) for s in specs})
        for v in vals:
            if v not in have:
                shown = ", ".join(have) if len(have) <= 20 else ", ".join(have[:20]) + ", ..."
                raise UsageError(f"only: {axis}={v}: no trial of {label} has it; its {axis} values: "
                                 f"{shown}{did_you_mean(v, have)}", f"only.{axis}")
    kept = [s for s in specs if all(str(getattr(s, a)) in vals for a, vals in only.items())]
    if not kept:
        raise UsageError(f"only: {describe(only)}: no trial of {label} matches every axis at once",
                         "only")
    out = TrialList(kept)
    out.origins = getattr(specs, "origins", {})
    return out
