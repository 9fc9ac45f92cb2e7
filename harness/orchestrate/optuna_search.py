"""Model-based search through Optuna: ``search: {method: optuna, sampler: tpe | cmaes |
gp | random, trials: N, seed: S, batch: B}``.

A cell's sampled dimensions (:attr:`harness.plan.cells.Cell.dims`) become Optuna distributions
(:func:`to_optuna`): ``log_uniform`` -> ``FloatDistribution(lo, hi, log=True)``, ``uniform`` ->
``FloatDistribution(lo, hi)``, ``int_uniform`` -> ``IntDistribution(lo, hi)``, ``choice`` ->
``CategoricalDistribution`` of its options (of their indices when an option is not a ``None``,
``bool``, ``int``, ``float`` or ``str``, which Optuna cannot store). A grid axis of the cell (a list
or ``log_grid`` beside the distributions: :meth:`Cell.axes` minus the sampled keys) is searched
too, as a ``choice`` of its values. A proposal's floats are rounded to 6 significant digits and
clipped into ``[lo, hi]``, as the harness's own sampling does (:meth:`Distribution.map`), so run
names and MLflow params stay readable; Optuna keeps the unrounded value it proposed.

**No state but the store.** :meth:`OptunaSearcher.propose` builds a fresh in-memory study at every
call (``optuna.create_study``, no storage, the sampler seeded with ``search.seed``) and replays the
search from the start on ``seen``, round by round, ``B`` configurations a round (``batch``,
default 1: strictly sequential): round ``r`` asks ``B`` trials (``study.ask`` with the mapped
distributions); each configuration is trained with every seed of the cell (:meth:`Cell.make`); if
every trial of the round is in ``seen`` the round is told (in ask order) and the next is asked,
else the round's untrained trials are the proposal. Round ``r``'s points are therefore a function
of the seed and rounds ``< r`` only, never of when their results arrived, so a sweep SIGKILLed at
any moment and run again (the in-process executor, a fixed seed) proposes the same sequence as one
that ran through; with ``B > 1`` the ``B`` trials of a round are asked while none is told (TPE's
``constant_liar``, on by default in Optuna 5, spreads them). Replaying costs ``O(N^2)`` asks over a
whole search (TPE: milliseconds each; GP refits at each ask and is the slow one).

**What is told.** The objective is the sweep's selection value (:mod:`harness.core.selection_rule`):
the mean over the cell's seeds of the final validation value of the task's target metric
(``valid/loss`` is minimized; accuracy and any other metric maximized; the best value during
training for ``selection: {by: best}``; ``time_to_target`` tells the final value, its tie-break),
rounded to 9 significant digits so that it does not depend on the last bits a store keeps. A
configuration any of whose seeds diverged, failed, was stopped or has no such value is told
``TrialState.FAIL``: TPE, CMA-ES and GP then ignore it (Optuna's samplers learn only from
complete trials; it may propose near it again). A configuration proposed twice is trained once and
told twice.

**Budget.** ``trials: N`` is ``N`` configurations per cell (asks; a repeated one costs no
training), each trained to the budget with every seed: at most ``N x steps x seeds`` steps
(:meth:`OptunaSearcher.max_steps`), the same as a random search of ``N`` trials.
:meth:`OptunaSearcher.candidates` are the cell's expanded trials (the first points of its
quasi-random sequence): pre-flight builds them and the sweep id hashes them; they are not trained
unless Optuna proposes them.

**Samplers** (:func:`make_sampler`): ``tpe`` (``TPESampler``, Bergstra et al. 2011; Optuna 5's
defaults but ``n_startup_trials = min(10, ceil(N / 2))``: Optuna's 10 random trials, never more
than half the budget, so a small budget still gets model-based proposals), ``cmaes``
(``CmaEsSampler``, Hansen 2016; its default first random trial; categorical dimensions are sampled
by its independent random sampler), ``gp`` (``GPSampler``, Gaussian-process Bayesian optimization,
startup as ``tpe``; needs ``torch``, which is not a dependency of the harness: without it the
searcher raises :class:`~harness.config.errors.ConfigError` :data:`GP_NEEDS_TORCH` before anything
trains), ``random`` (``RandomSampler``).

**Pruning and early stopping.** Optuna's pruners are not used: early stopping is
:mod:`harness.orchestrate.asha`'s. ASHA rungs over Optuna's proposals are **not supported**: a stopped
trial would have to be told as a partial value, and ASHA's promotions would have to be replayed
inside the same study; a stopped trial is told as failed.
"""

from __future__ import annotations

import copy
import importlib.util
import logging
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.config.errors import ConfigError
from harness.config.search import GP_NEEDS_TORCH_REASON, Distribution
from harness.core.log_level import logger_level
from harness.core.outcome import TrialOutcome
from harness.core.selection_rule import DEFAULT_SELECT_BY, value_kind
from harness.core.spec import TrialSpec
from harness.orchestrate.searchers import Searcher, register
from harness.plan.cells import Cell

__all__ = ["DEFAULT_BATCH", "DEFAULT_SAMPLER", "GP_NEEDS_TORCH", "OptunaSearcher", "Proposal",
           "check_sampler", "from_optuna", "make_sampler", "to_optuna"]

#: ``search.sampler`` when not given; ``search.batch`` when not given (strictly sequential).
DEFAULT_SAMPLER = "tpe"
DEFAULT_BATCH = 1
#: Optuna's default number of random trials before TPE / GP model the results.
OPTUNA_STARTUP = 10
#: Significant digits of a told value (:func:`objective_value`).
VALUE_DIGITS = 9
#: The error of ``sampler: gp`` where torch cannot be imported (the config's own check says it at load,
#: :mod:`harness.config.search_schema`; this one covers a config built past it).
GP_NEEDS_TORCH = f"search.sampler: {GP_NEEDS_TORCH_REASON}"
#: Option types Optuna's CategoricalDistribution can hold.
_PRIMITIVE = (type(None), bool, int, float, str)


def torch_available() -> bool:
    """Whether ``torch`` can be found (without importing it)."""
    return importlib.util.find_spec("torch") is not None


def check_sampler(sampler: str) -> None:
    """Raise unless ``sampler`` can run here.

    Raises:
      ConfigError: ``gp`` without torch (:data:`GP_NEEDS_TORCH`); a sampler that is not Optuna's.
    """
    if sampler not in ("tpe", "cmaes", "gp", "random"):
        raise ConfigError([f"search.sampler: {sampler!r} is not one of Optuna's samplers: "
                           f"tpe, cmaes, gp, random"])
    if sampler == "gp" and not torch_available():
        raise ConfigError([GP_NEEDS_TORCH])


def _indexed(d: Distribution) -> bool:
    """Whether a ``choice`` is searched by option index (an option Optuna cannot hold)."""
    return d.kind == "choice" and not all(type(o) in _PRIMITIVE for o in d.args)


def to_optuna(d: Distribution) -> Any:
    """The Optuna distribution of a harness :class:`Distribution` (module docstring)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if d.kind == "choice":
        return CategoricalDistribution(tuple(range(len(d.args))) if _indexed(d) else d.args)
    if d.kind == "int_uniform":
        return IntDistribution(int(d.lo), int(d.hi))
    if d.kind in ("uniform", "log_uniform"):
        return FloatDistribution(float(d.lo), float(d.hi), log=d.kind == "log_uniform")
    raise ValueError(f"no Optuna distribution for {d.kind!r}")


def from_optuna(d: Distribution, raw: Any) -> Any:
    """The trial's value for Optuna's ``raw`` proposal of ``d``: floats rounded to 6 significant
    digits and clipped into ``[lo, hi]`` (a Python ``float``), an ``int`` for ``int_uniform``, a copy
    of the option for ``choice``."""
    if d.kind == "choice":
        return copy.deepcopy(d.args[int(raw)] if _indexed(d) else raw)
    if d.kind == "int_uniform":
        return int(raw)
    return min(max(float(f"{float(raw):.6g}"), float(d.lo)), float(d.hi))


def make_sampler(sampler: str, seed: int, trials: int) -> Any:
    """Optuna's sampler ``sampler`` seeded with ``seed`` for a search of ``trials`` configurations
    (module docstring: the startup rule of ``tpe`` and ``gp``).

    Raises:
      ConfigError: as :func:`check_sampler`.
    """
    check_sampler(sampler)
    import optuna

    startup = min(OPTUNA_STARTUP, max(1, math.ceil(trials / 2)))
    if sampler == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup)
    if sampler == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed)
    if sampler == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
    return optuna.samplers.RandomSampler(seed=seed)


@dataclass
class Proposal:
    """One ask of the replayed study: configuration ``k`` (0-based), its values (flat key ->
    value), its trials (one per seed), and ``state``: ``complete`` (told ``value``), ``failed``
    (told FAIL), ``trained`` (its trials are in ``seen``, its round is not: not told yet) or
    ``pending`` (to train)."""

    k: int
    values: dict[str, Any]
    trials: list[TrialSpec]
    state: str = "pending"
    value: float | None = None
    outcomes: list[TrialOutcome] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"k": self.k, "values": self.values, "trial_ids": [s.trial_id for s in self.trials],
                "state": self.state, "value": self.value}


@register("optuna")
class OptunaSearcher(Searcher):
    """Optuna's search of one cell (module docstring).

    Raises:
      ConfigError: at construction, a sampler that cannot run here (:func:`check_sampler`).
    """

    method = "optuna"
    candidates_are = "the config's expanded points (trained only if Optuna proposes them)"

    def __init__(self, cell: Cell, select_by: str = DEFAULT_SELECT_BY):
        super().__init__(cell, select_by)
        srch, t0 = cell.search, cell.trials[0]
        self.sampler = srch.sampler or DEFAULT_SAMPLER
        check_sampler(self.sampler)
        self.seed = int(srch.seed)
        self.batch = int(srch.batch or DEFAULT_BATCH)
        self.seeds = tuple(cell.seeds)
        self.steps = int(t0.steps)
        #: the budget: configurations (asks); without ``trials``, the number of candidate configs
        self.trials = int(srch.trials or max(1, len(cell.trials) // max(1, len(self.seeds))))
        self.metric = t0.target.metric if t0.target else "valid/accuracy"
        self.is_loss = self.metric.endswith("/loss")
        self.direction = "minimize" if self.is_loss else "maximize"
        self.kind = value_kind(select_by)
        sampled = dict(cell.dims)
        grid = {k: Distribution("choice", tuple(vs)) for k, vs in cell.axes().items() if k not in sampled}
        #: flat key -> the harness distribution searched (sampled dimensions, then grid axes)
        self.space: dict[str, Distribution] = {**sampled, **grid}

    # ------------------------------------------------------------------ objective

    def objective_value(self, outcomes: list[TrialOutcome]) -> float | None:
        """The value told for a configuration whose seeds ended as ``outcomes`` (module docstring);
        ``None``: told as failed."""
        attr = f"{self.kind}_valid_{'loss' if self.is_loss else 'accuracy'}"
        vals = [getattr(o, attr) for o in outcomes if o.status == "finished"]
        if len(vals) < len(outcomes) or not outcomes \
                or any(v is None or not math.isfinite(v) for v in vals):
            return None
        return float(f"{statistics.fmean(vals):.{VALUE_DIGITS}g}")

    # ------------------------------------------------------------------ the replay

    def replay(self, seen: Mapping[str, TrialOutcome]) -> list[Proposal]:
        """Every configuration asked so far given ``seen``, in ask order (module docstring): the told
        rounds, then the round that waits (its ``pending`` proposals are what :meth:`propose`
        returns), or nothing more once ``trials`` configurations are told."""
        return self.study(seen)[1]

    def study(self, seen: Mapping[str, TrialOutcome]) -> tuple[Any, list[Proposal]]:
        """The replayed in-memory ``optuna.Study`` (its trials: the told ones, then the waiting
        round's, RUNNING) and :meth:`replay`'s proposals."""
        import optuna
        from optuna.trial import TrialState

        dists = {k: to_optuna(d) for k, d in self.space.items()}
        out: list[Proposal] = []
        with logger_level("optuna", logging.WARNING):  # its "Trial 3 finished" lines off
            study = optuna.create_study(sampler=make_sampler(self.sampler, self.seed, self.trials),
                                        direction=self.direction)
            while len(out) < self.trials:
                asked = []
                for _ in range(min(self.batch, self.trials - len(out))):
                    t = study.ask(dists)
                    vals = {k: from_optuna(d, t.params[k]) for k, d in self.space.items()}
                    p = Proposal(len(out), vals, [self.cell.make(vals, s) for s in self.seeds])
                    if all(s.trial_id in seen for s in p.trials):
                        p.outcomes = [seen[s.trial_id] for s in p.trials]
                        p.value = self.objective_value(p.outcomes)
                        p.state = "trained"
                    out.append(p)
                    asked.append((t, p))
                if any(p.state == "pending" for _, p in asked):
                    return study, out
                for t, p in asked:
                    if p.value is None:
                        study.tell(t, state=TrialState.FAIL)
                        p.state = "failed"
                    else:
                        study.tell(t, p.value)
                        p.state = "complete"
        return study, out

    def propose(self, seen: Mapping[str, TrialOutcome]) -> list[TrialSpec]:
        """The untrained trials of the round that waits (every seed of its configurations, in ask
        order, without duplicates); ``[]`` once ``trials`` configurations are told."""
        out: dict[str, TrialSpec] = {}
        for p in self.replay(seen):
            if p.state == "pending":
                for s in p.trials:
                    if s.trial_id not in seen:
                        out.setdefault(s.trial_id, s)
        return list(out.values())

    # ------------------------------------------------------------------ budget and account

    def max_steps(self) -> int:
        """``trials x steps x seeds``: every configuration trained to the budget with every seed."""
        return self.trials * self.steps * len(self.seeds)

    def max_trials(self) -> int:
        """``trials x seeds``: every configuration asked, with every seed."""
        return self.trials * len(self.seeds)

    def describe(self, seen: Mapping[str, TrialOutcome]) -> dict[str, Any]:
        """The sampler, the objective, how many configurations were told, the best one (value,
        values, trial ids; the first asked among equals), every proposal in ask order, and the
        steps its trials spent (a diverged trial counts the steps it ran)."""
        order = self.replay(seen)
        told = [p for p in order if p.state in ("complete", "failed")]
        done = [p for p in told if p.state == "complete"]
        sign = 1.0 if self.is_loss else -1.0
        best = min(done, key=lambda p: (sign * p.value, p.k)) if done else None  # type: ignore[operator]
        spent: dict[str, int] = {}
        for p in order:
            for s in p.trials:
                if s.trial_id in seen:
                    d = getattr(seen[s.trial_id], "diverged_step", None)
                    spent[s.trial_id] = int(d) if d is not None else s.steps
        return {**super().describe(seen), "sampler": self.sampler, "seed": self.seed,
                "batch": self.batch, "budget_trials": self.trials,
                "budget_steps": self.max_steps(), "steps_spent": sum(spent.values()),
                "objective": {"metric": self.metric, "direction": self.direction, "value": self.kind},
                "space": {k: str(d) for k, d in self.space.items()},
                "trials": len(spent), "told": len(told), "failed": len(told) - len(done),
                "done": len(told) >= self.trials,
                "best": None if best is None else {"k": best.k, "value": best.value,
                                                   "values": best.values,
                                                   "trial_ids": [s.trial_id for s in best.trials]},
                "order": [p.to_dict() for p in order]}
