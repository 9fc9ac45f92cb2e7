"""Expansion: a validated :class:`~harness.config.SweepConfig` → ordered, de-duplicated
trials (:class:`~harness.spec.TrialSpec`), and the sweep's stable id.

- :func:`expand`: the full grid of the top-level axes (``zip`` groups varying together), the
  ``include`` sub-grids, minus the ``exclude`` rules; seeds vary fastest so that batchable siblings
  are adjacent.
- :func:`component_variants`: the hyperparameter dicts one axis entry yields.
- :func:`entry_paths`: which config key path yields each (name, hyperparameters) value, for error
  messages (:mod:`harness.preflight`).
- :func:`sweep_id_of`: 12 hex of SHA-256 of the sweep name and its sorted trial ids (the tag
  ``harness.sweep_id``); the same config gives the same id on every invocation.

No jax, no MLflow.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from harness.config import Component, SweepConfig, hparam_values
from harness.spec import Target, TrialSpec

_AXIS_ORDER = ("datasets", "models", "optimizers", "schedules", "batch_size", "seeds")


# --------------------------------------------------------------------------- expansion


def _zip_product(names: list[str], values: Mapping[str, list[Any]], groups: list[list[str]],
                 mismatch: Callable[[list[str], list[int]], Exception]) -> list[dict[str, Any]]:
    """Cross product of the axes ``names`` (each a list in ``values``), where the axes of one group
    in ``groups`` vary together (equal lengths, else ``mismatch(group, lengths)`` is raised)."""
    group_of = {a: i for i, g in enumerate(groups) for a in g}
    axes: list[list[dict[str, Any]]] = []
    seen: set[int] = set()
    for n in names:
        if n not in group_of:
            axes.append([{n: v} for v in values[n]])
            continue
        gi = group_of[n]
        if gi in seen:
            continue
        seen.add(gi)
        group = groups[gi]
        lens = [len(values[x]) for x in group]
        if len(set(lens)) > 1:
            raise mismatch(group, lens)
        axes.append([{x: values[x][i] for x in group} for i in range(lens[0])])
    out = []
    for combo in itertools.product(*axes):
        pt: dict[str, Any] = {}
        for part in combo:
            pt.update(part)
        out.append(pt)
    return out


def component_variants(comp: Component) -> list[dict[str, Any]]:
    """The hyperparameter dicts of one entry: product of its grid axes, zip groups varying together."""
    return _zip_product(list(comp.hparams), {n: hparam_values(v) for n, v in comp.hparams.items()},
                        comp.zip, lambda g, lens: ValueError(f"zipped hyperparameters {g} have "
                                                             f"different numbers of values {lens}"))


def _axis_points(grid: Any, cfg: SweepConfig, axis: str) -> list[Any]:
    val = getattr(grid, axis, None)
    if val is None:
        val = getattr(cfg, axis)
    if axis in ("seeds", "batch_size"):
        return list(val)
    return [(c.name, h) for c in val for h in component_variants(c)]


def _grid_points(grid: Any, cfg: SweepConfig, zip_groups: list[list[str]],
                 file: str = "<config>") -> list[dict[str, Any]]:
    from harness.config import ConfigError

    points = {a: _axis_points(grid, cfg, a) for a in _AXIS_ORDER}
    return _zip_product(list(_AXIS_ORDER), points, zip_groups, lambda g, lens: ConfigError(
        [f"{file}: zip: zipped axes {g} must have equal numbers of values, got {lens}"]))


def _flat(pt: Mapping[str, Any]) -> dict[str, Any]:
    f: dict[str, Any] = {"seed": pt["seeds"], "batch_size": pt["batch_size"]}
    for axis, key in (("models", "model"), ("optimizers", "optimizer"), ("schedules", "schedule"),
                      ("datasets", "dataset")):
        name, hps = pt[axis]
        f[key] = name
        for k, v in hps.items():
            f[f"{key}.{k}"] = v
    return f


def _matches(rule: Mapping[str, Any], flat: Mapping[str, Any]) -> bool:
    for k, want in rule.items():
        if k not in flat:
            return False
        wants = want if isinstance(want, list) else [want]
        if flat[k] not in wants:
            return False
    return True


def expand(cfg: SweepConfig, n_train: Callable[[str, dict[str, Any]], int] | None = None,
           file: str = "<config>") -> list[TrialSpec]:
    """All trials of ``cfg``, in order, without duplicates.

    ``n_train(dataset, hparams)`` gives a dataset's training-split size, needed only for an
    ``epochs`` budget (default: :func:`harness.data.load_dataset`). ``file`` prefixes error lines.

    Raises:
      harness.config.ConfigError: zipped top-level axes of unequal lengths.
    """
    points = _grid_points(cfg, cfg, cfg.zip, file)
    for sub in cfg.include:
        points += _grid_points(sub, cfg, [])
    sizes: dict[tuple, int] = {}
    out: dict[str, TrialSpec] = {}
    for pt in points:
        flat = _flat(pt)
        if any(_matches(rule, flat) for rule in cfg.exclude):
            continue
        ds_name, ds_hp = pt["datasets"]
        bs = pt["batch_size"]
        if cfg.budget.steps is not None:
            steps = cfg.budget.steps
        else:
            key = (ds_name, json.dumps(ds_hp, sort_keys=True, default=str))
            if key not in sizes:
                sizes[key] = (n_train or _n_train)(ds_name, ds_hp)
            steps = max(1, math.ceil(cfg.budget.epochs * sizes[key] / bs))
        tgt = cfg.target_for(ds_name)
        spec = TrialSpec.make(
            sweep=cfg.name, model=pt["models"][0], optimizer=pt["optimizers"][0],
            schedule=pt["schedules"][0], dataset=ds_name, seed=pt["seeds"], steps=steps, batch_size=bs,
            eval_every=cfg.eval_every or max(1, steps // 10), steps_per_dispatch=cfg.steps_per_dispatch,
            model_hparams=pt["models"][1], optimizer_hparams=pt["optimizers"][1],
            schedule_hparams=pt["schedules"][1], dataset_hparams=ds_hp,
            target=Target(tgt.metric, tgt.value, tgt.resolved_mode()) if tgt else None, dtype=cfg.dtype)
        out.setdefault(spec.trial_id, spec)
    return list(out.values())


def _n_train(name: str, hparams: dict[str, Any]) -> int:
    from harness.data import load_dataset

    return len(load_dataset(name, **hparams).x_train)


def entry_paths(cfg: SweepConfig) -> dict[str, dict[tuple[str, str], str]]:
    """Per component axis: ``(name, canonical hparams JSON)`` -> the config key path of the first
    entry that yields it (top level first, then ``include[i]``)."""
    out: dict[str, dict[tuple[str, str], str]] = {}
    grids: list[tuple[str, Any]] = [("", cfg)] + [(f"include[{i}].", g) for i, g in enumerate(cfg.include)]
    for axis in ("models", "optimizers", "schedules", "datasets"):
        m = out.setdefault(axis, {})
        for prefix, g in grids:
            for j, comp in enumerate(getattr(g, axis) or []):
                for hp in component_variants(comp):
                    m.setdefault((comp.name, hp_key(hp)), f"{prefix}{axis}[{j}]")
    return out


def hp_key(hp: Mapping[str, Any]) -> str:
    return json.dumps(hp, sort_keys=True, default=str)



def sweep_id_of(name: str, specs: list[TrialSpec]) -> str:
    """12 hex digits of SHA-256 over the sweep name and its sorted trial ids."""
    blob = json.dumps([name, sorted(s.trial_id for s in specs)])
    return hashlib.sha256(blob.encode()).hexdigest()[:12]

