"""Cells: what an adaptive searcher searches over (:mod:`harness.orchestrate.searchers`).

A **cell** is one (task, optimizer entry, schedule entry, batch size) of an expanded config: the
trials one optimizer's tuning compares. Its **candidates** are the trials :func:`expand` made for it
(a grid's cross product, or the first ``trials`` points of a sampled sequence, every seed); its
**dims** are its sampled dimensions, so that a searcher can make trials at points :func:`expand` did
not (:meth:`Cell.make`: Optuna's proposals, more points of a sequence). Cells come in the order of
their first candidate; candidates keep the expansion's order (seeds fastest).

No jax, no MLflow, no store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.config.search import Distribution, Search
from harness.core.freeze import freeze
from harness.core.spec import TrialSpec

__all__ = ["Cell", "cells_of", "coordinates"]

#: The hyperparameter axes of a trial a cell's coordinates may live on (flat key prefixes).
_AXES = ("model", "optimizer", "schedule")


def coordinates(spec: TrialSpec) -> dict[str, Any]:
    """The trial's hyperparameters as flat keys (``optimizer.step_size``, ``model.width``,
    ``schedule.warmup_steps``): a cell's coordinates are those that differ among its candidates."""
    return {f"{a}.{k}": v for a in _AXES for k, v in spec.hparams(a).items()}  # type: ignore[arg-type]


@dataclass
class Cell:
    """One optimizer's tuning on one task.

    Attributes:
      key: ``task | optimizers[j] | schedules[i] | batch size`` (unique in a sweep).
      task: the task label (``digits · mlp``); optimizer: the optimizer's name.
      search: the cell's resolved search (:class:`harness.config.search.Search`).
      dims: ``(flat key, Distribution)`` of each sampled dimension, in sampling order.
      trials: the candidates, in expansion order (seeds fastest).
      seeds: the seeds, in order.
    """

    key: str
    task: str
    optimizer: str
    search: Search
    dims: tuple[tuple[str, Distribution], ...] = ()
    trials: list[TrialSpec] = field(default_factory=list)
    seeds: tuple[int, ...] = ()
    #: the first candidate's TrialOrigin (harness.plan.expansion), or None: a proposal the expansion
    #: did not make gets it, without a sequence index (origin_of)
    origin: Any = None

    def origin_of(self, spec: TrialSpec) -> Any:
        """The origin of a trial this cell's search made (:attr:`origin` without the sequence index
        and sampled point: the method, paths, task and search still hold), or None."""
        if self.origin is None:
            return None
        return dataclasses.replace(self.origin, index=None)

    def axes(self) -> dict[str, list[Any]]:
        """The gridded coordinates: flat key -> its distinct values among the candidates (sorted;
        numbers numerically), for every key with more than one value (seeds are not coordinates)."""
        vals: dict[str, list[Any]] = {}
        for s in self.trials:
            for k, v in coordinates(s).items():
                if v not in vals.setdefault(k, []):
                    vals[k].append(v)
        out = {}
        for k, vs in vals.items():
            if len(vs) > 1:
                nums = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vs)
                out[k] = sorted(vs) if nums else vs
        return out

    def make(self, values: Mapping[str, Any], seed: int) -> TrialSpec:
        """The trial of this cell at ``values`` (flat key -> value; the keys not given keep the
        first candidate's values) with ``seed``: a candidate's spec with those hyperparameters
        replaced, so everything else (steps, target, source, dtype, ...) is the cell's.

        Raises:
          KeyError: a key on no axis of the trial (``optimizer.nope``).
          ValueError: a seed the cell does not train.
        """
        if seed not in self.seeds:
            raise ValueError(f"seed {seed} is not one of the cell's seeds {list(self.seeds)}")
        template = next(s for s in self.trials if s.seed == seed)
        hps = {a: template.hparams(a) for a in _AXES}  # type: ignore[arg-type]
        for key, v in values.items():
            axis, _, name = key.partition(".")
            if axis not in hps or not name:
                raise KeyError(f"{key!r} is not a model., optimizer. or schedule. hyperparameter")
            hps[axis][name] = v
        return dataclasses.replace(template, **{f"{a}_hparams": freeze(hps[a]) for a in _AXES})


def cell_key(spec: TrialSpec, origin: Any) -> str:
    """The cell a trial belongs to (:attr:`Cell.key`)."""
    return (f"{origin.task} | {origin.paths.get('optimizers', spec.optimizer)} | "
            f"{origin.paths.get('schedules', spec.schedule)} | batch {spec.batch_size}")


def cells_of(trials: list[TrialSpec]) -> list[Cell]:
    """The cells of an expanded :class:`~harness.plan.expansion.TrialList` (its ``origins`` say
    where each trial came from), in order of their first trial. A trial without an origin is a
    cell of its own (grid search)."""
    origins = getattr(trials, "origins", {})
    cells: dict[str, Cell] = {}
    for s in trials:
        o = origins.get(s.trial_id)
        if o is None:
            key, task, srch, dims = s.trial_id, f"{s.dataset} · {s.model}", Search("grid"), ()
        else:
            key, task = cell_key(s, o), o.task
            srch = o.search or Search("grid")
            dims = tuple((f"{axis}.{name}", d) for axis, name, d in o.dims)
        c = cells.get(key)
        if c is None:
            c = cells[key] = Cell(key, task, s.optimizer, srch, dims, origin=o)
        c.trials.append(s)
        if s.seed not in c.seeds:
            c.seeds = (*c.seeds, s.seed)
    return list(cells.values())
