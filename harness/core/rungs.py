"""Early stopping at rungs: the rung schedule, the promotion rule, the rung board.

A trial that may be stopped carries its rule in :attr:`harness.core.spec.TrialSpec.early_stop`
(:func:`rule_of` reads it back as a dict): ``method``, ``eta``, ``bracket``, ``rungs`` (the rung
steps below the budget; the budget itself is the top rung), ``metric`` (a ``valid/*`` name),
``mode`` (``max``/``min``) and ``value`` (``final``: the metric at the rung's evaluation;
``best``: the best evaluation up to it).

**Rungs** (:func:`rung_steps`): ``min_steps * eta**(bracket + k)`` for ``k = 0, 1, ...`` while below
the budget. Defaults (:data:`DEFAULT_ETA`, :func:`default_min_steps`): ``eta = 3``,
``min_steps = ceil(steps / eta**3)``, so bracket 0 has three rungs below the budget when the budget
allows (300 steps: 12, 36, 108, then 300).

**Rule** (:func:`continues`): asynchronous successive halving, the "stop" variant of ASHA (Li et al.
2020, "A System for Massively Parallel Hyperparameter Tuning", MLSys, Algorithm 2: a trial is
promoted from rung r when it is in the top 1/eta of the trials that reached rung r). The trial of
index ``k`` (its configuration's index in the searcher's proposal order) continues past rung ``r``
iff its value ranks within the top ``ceil(n / eta)`` of the ``n`` values {rung-``r`` values of its
peers with index < k} ∪ {its own}; ties go to the earlier index; a non-finite value ranks last.
Peers are the trials of the same cell (optimizer on task), bracket and seed (:attr:`RungBoard.groups`).

**Board** (:class:`RungBoard`): what a trial's gate knows of its peers while it trains: which group
and index each trial has, and the rung values of the trials that ended. The in-process sweep shares
one board with its searcher (updated as each outcome arrives, before the background writer has
written it); a board shipped to a worker process is a copy (``live`` False), which the execute
layer refreshes from the store at each rung.

Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT_ETA", "RungBoard", "continues", "default_min_steps", "rule_of", "rung_steps",
           "rung_value"]

#: The reduction factor when the config gives none (Li et al. use 3 and 4; Hyperband's paper 3).
DEFAULT_ETA = 3


def default_min_steps(steps: int, eta: int = DEFAULT_ETA) -> int:
    """The first rung when the config gives no ``min_steps``: ``ceil(steps / eta**3)`` (at least 1),
    so that three rungs lie below a budget of ``steps`` (fewer when ``steps < eta**3``)."""
    return max(1, math.ceil(steps / eta ** 3))


def rung_steps(min_steps: int, eta: int, steps: int, bracket: int = 0) -> list[int]:
    """The rung steps of a bracket below the budget ``steps``: ``min_steps * eta**(bracket + k)``,
    ``k >= 0``, each ``< steps`` (the budget is the top rung, where nothing is decided).

    Raises:
      ValueError: ``min_steps < 1``, ``eta < 2``, ``steps < 1`` or ``bracket < 0``.
    """
    if min_steps < 1 or eta < 2 or steps < 1 or bracket < 0:
        raise ValueError(f"need min_steps >= 1, eta >= 2, steps >= 1, bracket >= 0; got "
                         f"{min_steps}, {eta}, {steps}, {bracket}")
    out, r = [], min_steps * eta ** bracket
    while r < steps:
        out.append(r)
        r *= eta
    return out


def rule_of(early_stop: Any) -> dict[str, Any]:
    """A spec's ``early_stop`` pairs as a dict (``rungs`` a list of ints); ``{}`` for none."""
    d = dict(early_stop or ())
    if "rungs" in d:
        d["rungs"] = [int(r) for r in d["rungs"]]
    return d


def _key(value: float, mode: str) -> float:
    """Smaller is better: the value signed by ``mode``; a non-finite one last."""
    if value is None or not math.isfinite(value):
        return math.inf
    return -value if mode == "max" else value


def continues(own: float, k: int, peers: Mapping[int, float], eta: int, mode: str) -> bool:
    """Whether trial ``k`` with rung value ``own`` continues past the rung (module docstring).

    Args:
      own: its value at the rung; k: its index; peers: index -> rung value of the peers that
        reached this rung (those with index >= k are ignored); eta: the reduction factor;
        mode: ``"max"`` (higher is better) or ``"min"``.

    Example: ``continues(0.5, 2, {0: 0.9, 1: 0.4}, 3, "max")`` is False (n = 3, top 1: 0.9).
    """
    vals = {j: v for j, v in peers.items() if j < k}
    vals[k] = own
    n = len(vals)
    order = sorted(vals, key=lambda j: (_key(vals[j], mode), j))
    return order.index(k) < math.ceil(n / eta)


def rung_value(rule: Mapping[str, Any], eval_steps: list[int], values: list[float], step: int) -> float:
    """A trial's value at rung ``step`` from its validation curve (``eval_steps``, ``values`` of
    the rule's metric): ``final`` the evaluation at ``step``, ``best`` the best evaluation up to it
    (step 0 included); ``nan`` when there is none."""
    pts = [v for s, v in zip(eval_steps, values, strict=False) if s <= step]
    if not pts:
        return math.nan
    if rule.get("value") == "best":
        fin = [v for v in pts if math.isfinite(v)]
        if not fin:
            return math.nan
        return max(fin) if rule.get("mode", "max") == "max" else min(fin)
    at = [v for s, v in zip(eval_steps, values, strict=False) if s == step]
    return at[-1] if at else math.nan


@dataclass
class RungBoard:
    """The rung values a trial's gate ranks against (module docstring). Picklable.

    Attributes:
      groups: ``trial_id`` -> ``(group, index)``: its peer group (cell, bracket, seed) and its
        index in the searcher's proposal order.
      values: ``trial_id`` -> ``{rung step: value}`` of the trials that ended (stopped, or past
        their rungs).
      tags: ``trial_id`` -> extra run tags (the search method, index, bracket).
      live: True for the sweep's own board (in-process: every peer's values arrive before the next
        trial trains); False for a copy shipped to a worker (its values are those known when it
        was shipped; the execute layer reads the store at each rung).
    """

    groups: dict[str, tuple[str, int]] = field(default_factory=dict)
    values: dict[str, dict[int, float]] = field(default_factory=dict)
    tags: dict[str, dict[str, str]] = field(default_factory=dict)
    live: bool = True

    def __getstate__(self) -> dict[str, Any]:
        return {"groups": dict(self.groups), "values": {t: dict(v) for t, v in self.values.items()},
                "tags": dict(self.tags), "live": False}

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__dict__.update(d)

    def join(self, other: RungBoard) -> RungBoard:
        """One board for two searchers: ``other``'s entries merged into this one, and ``other``
        made to share this one's dicts (each searcher keeps updating it). Returns ``self``."""
        if other is not self:
            self.groups.update(other.groups)
            self.values.update(other.values)
            self.tags.update(other.tags)
            other.groups, other.values, other.tags = self.groups, self.values, self.tags
        return self

    def add(self, trial_id: str, group: str, index: int, tags: Mapping[str, str] | None = None) -> None:
        """Register a trial of a group (idempotent)."""
        self.groups[trial_id] = (group, index)
        if tags:
            self.tags[trial_id] = dict(tags)

    def record(self, trial_id: str, rungs: Mapping[int, float]) -> None:
        """The rung values of a trial that ended (``{}``: none reached)."""
        self.values[trial_id] = {int(s): float(v) for s, v in rungs.items()}

    def peers(self, trial_id: str) -> dict[str, int]:
        """``trial_id`` -> index of the trials of ``trial_id``'s group with a smaller index."""
        if trial_id not in self.groups:
            return {}
        g, k = self.groups[trial_id]
        return {t: j for t, (gg, j) in self.groups.items() if gg == g and j < k}

    def decide(self, trial_id: str, rule: Mapping[str, Any], step: int, value: float) -> str | None:
        """Why the trial stops at rung ``step`` with ``value`` (``None``: it continues; also for a
        trial the board does not know). A rule with ``stop_at`` (synchronous successive halving's
        round, :mod:`harness.orchestrate.halving`) stops there whatever its peers: its promotion is
        decided once its whole rung has results."""
        if rule.get("stop_at") == step:
            return (f"rung {step}: successive halving's round ends here; whether it goes on is "
                    f"decided with the whole rung")
        if trial_id not in self.groups:
            return None
        k = self.groups[trial_id][1]
        peers = {j: self.values[t][step] for t, j in self.peers(trial_id).items()
                 if step in self.values.get(t, {})}
        eta, mode = int(rule.get("eta", DEFAULT_ETA)), str(rule.get("mode", "max"))
        if continues(value, k, peers, eta, mode):
            return None
        n = len(peers) + 1
        return (f"rung {step}: {rule.get('metric', 'value')} {value:.4g} not in the top "
                f"{math.ceil(n / eta)} of {n} (eta {eta})")
