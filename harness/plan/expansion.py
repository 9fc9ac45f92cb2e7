"""Expansion: a validated :class:`~harness.config.schema.SweepConfig` → ordered, de-duplicated
trials (:class:`~harness.core.spec.TrialSpec`), and the sweep's stable id. No jax, no MLflow.

- :func:`expand`: the grid of the top-level axes (``zip`` groups vary together), the ``include``
  sub-grids, minus ``exclude``; seeds vary fastest so that batchable siblings are adjacent.
- :func:`component_variants`: the hyperparameter dicts one axis entry yields.
- :func:`entry_paths`: the config key path of each (name, hyperparameters) value, for errors.
- :func:`sweep_id_of`: 12 hex of SHA-256 of the name and sorted trial ids (``harness.sweep_id``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from harness.config import workloads
from harness.config.errors import ConfigError
from harness.config.recipe_keys import claim_of, recipe_fields, recipe_problem
from harness.config.schema import Component, SweepConfig
from harness.config.search import SEARCH_INDEX_TAG, SEARCH_TAG, Distribution, Search, resolve_search, sample
from harness.config.token_budget import budget_steps
from harness.config.values import hparam_values
from harness.core.boundary import RANGE_KINDS, SearchRange, space_tag
from harness.core.freeze import freeze
from harness.core.ladder import Rung
from harness.core.names import TAG_SEARCH_SPACE, TAG_TUNING, TUNING_NONE
from harness.core.spec import Target, TrialSpec
from harness.data.kinds import dataset_digest

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
    """The hyperparameter dicts of one entry: product of its grid axes, zip groups varying together.
    A distribution stays in as its :class:`~harness.config.search.Distribution` (filled in by
    :func:`expand`)."""
    return _zip_product(list(comp.hparams), {n: hparam_values(v) for n, v in comp.hparams.items()},
                        comp.zip, lambda g, lens: ValueError(f"zipped hyperparameters {g} have "
                                                             f"different numbers of values {lens}"))


class _Variant(NamedTuple):
    """One value of a component axis: an entry's name and one of its hyperparameter variants, the
    entry's config key path and the entry itself (for its ``search`` override)."""

    name: str
    hparams: dict[str, Any]
    path: str
    comp: Component


@dataclass(frozen=True)
class TrialOrigin:
    """Where a trial came from in its config (for error messages, the dry run and run tags).

    Attributes:
      paths: component axis (``models``, ``optimizers``, ``schedules``, ``datasets``) -> the config
        key path of the entry that yielded it (``optimizers[1]``, ``include[0].models[0]``).
      task: label of the (dataset, model) task whose optimizers' budgets are compared.
      method: the search method that sampled it, or None (nothing sampled: a grid trial).
      index: its point's index ``k`` in the search sequence (0-based), or None.
      sampled: the sampled hyperparameters, as flat keys (``optimizer.step_size``), in the
        sequence's dimension order.
      ranges: the sampled dimensions' ranges (:class:`harness.core.boundary.SearchRange`; the tag
        ``harness.search_space``, read by the boundary warnings).
      tuning: None for a trial of an optimizer entry that tunes; ``"none"``
        (:data:`harness.core.names.TUNING_NONE`) for one of a ``tuning: none`` entry, and
        ``"none,tuned"`` when entries of both kinds yield it (the tag ``harness.tuning``).
      ladder: the :class:`harness.core.ladder.Rung` of a ladder's trial (its run tags ``ladder.*``).
    """

    paths: dict[str, str]
    task: str
    method: str | None = None
    index: int | None = None
    sampled: tuple[str, ...] = ()
    tuning: str | None = None
    ranges: tuple[SearchRange, ...] = ()
    #: the resolved search of its cell (harness.config.search.Search) and the cell's sampled
    #: dimensions, ``(axis key, hyperparameter, Distribution)`` (``("optimizer", "step_size", d)``):
    #: what an adaptive searcher proposes new points of (harness.plan.cells)
    search: Search | None = None
    dims: tuple[tuple[str, str, Distribution], ...] = ()
    #: the ladder rung it trains (harness.core.ladder.Rung), or None outside a ladder
    ladder: Rung | None = None

    def roles(self) -> set[str]:
        """``{"tuned"}``, ``{"none"}`` or both: the kinds of entry that yield the trial."""
        return set((self.tuning or "tuned").split(","))


def _merged(a: TrialOrigin, b: TrialOrigin, file: str = "<config>") -> TrialOrigin:
    """``a`` (the first entry to yield a trial) with ``tuning`` saying every kind of entry that
    yields it, ``b`` being another one. Raises ConfigError where ``a`` and ``b`` search differently,
    one adaptively (the second's search would silently have no trials of its own)."""
    sa, sb = a.search or Search("grid"), b.search or Search("grid")
    if sa.method != sb.method and (sa.adaptive or sb.adaptive):
        raise ConfigError([f"{file}: {b.paths['optimizers']} (search {sb.method}) makes the same trials as "
                           f"{a.paths['optimizers']} (search {sa.method}) on {a.task}, so it would search "
                           "nothing of its own: give one of them another search seed (search: {seed: 1}), "
                           "range or grid"])
    roles = a.roles() | b.roles()
    return dataclasses.replace(a, tuning=None if roles == {"tuned"} else ",".join(sorted(roles)))


class TrialList(list):
    """:func:`expand`'s trials plus ``origins`` (``trial_id`` -> :class:`TrialOrigin`) and, after the
    pre-flight, ``param_shapes`` (abstract parameters by model key, for the dry run's step cost)."""

    origins: dict[str, TrialOrigin]
    param_shapes: dict[tuple, Any]


def _axis_points(grid: Any, cfg: SweepConfig, axis: str, prefix: str) -> list[Any]:
    val = getattr(grid, axis, None)
    if val is None:
        val, prefix = getattr(cfg, axis), ""
    if axis in ("seeds", "batch_size"):
        return list(val)
    return [_Variant(c.name, h, f"{prefix}{axis}[{j}]", c)
            for j, c in enumerate(val) for h in component_variants(c)]


def _grid_points(grid: Any, cfg: SweepConfig, zip_groups: list[list[str]],
                 file: str = "<config>", prefix: str = "") -> list[dict[str, Any]]:
    points = {a: _axis_points(grid, cfg, a, prefix) for a in _AXIS_ORDER}
    return _zip_product(list(_AXIS_ORDER), points, zip_groups, lambda g, lens: ConfigError(
        [f"{file}: zip: zipped axes {g} must have equal numbers of values, got {lens}"]))


def _flat(pt: Mapping[str, Any]) -> dict[str, Any]:
    f: dict[str, Any] = {"seed": pt["seeds"], "batch_size": pt["batch_size"]}
    for axis, key in (("models", "model"), ("optimizers", "optimizer"), ("schedules", "schedule"),
                      ("datasets", "dataset")):
        v = pt[axis]
        f[key] = v.name
        for k, x in v.hparams.items():
            f[f"{key}.{k}"] = x
    return f


def _matches(rule: Mapping[str, Any], flat: Mapping[str, Any]) -> bool:
    for k, want in rule.items():
        if k not in flat:
            return False
        wants = want if isinstance(want, list) else [want]
        if flat[k] not in wants:
            return False
    return True


_SAMPLED_AXES = (("models", "model"), ("optimizers", "optimizer"), ("schedules", "schedule"))


def _cell_variants(cfg: SweepConfig, pt: Mapping[str, Any], cache: dict[str, list[tuple]]
                   ) -> list[tuple[dict[str, dict[str, Any]], int | None, str | None, tuple[str, ...],
                                   tuple[SearchRange, ...]]]:
    """The configurations of one grid point: ``(hparams per axis, k, method, sampled keys, ranges)``,
    one per sampled point when the point has distributions, else the point itself (``k`` None);
    ``ranges`` are the sampled dimensions' ranges (not ``choice``), for boundary warnings. An
    adaptive method's points are its candidates: the first ``trials`` points of its sampler's
    sequence (:attr:`harness.config.search.Search.sampling`); ``method`` names the adaptive method
    even where nothing is sampled (``coordinate_descent`` on grids)."""
    dims = _dims(pt)
    base = {axis: pt[axis].hparams for axis, _ in _SAMPLED_AXES}
    srch = resolve_search(cfg.search, pt["optimizers"].comp.search)
    if not dims:
        return [(base, None, srch.method if srch.adaptive else None, (), ())]
    ck = repr((srch.sampling, [d[3] for d in dims]))
    if ck not in cache:
        cache[ck] = sample([d[3] for d in dims], srch.sampling)
    ranges = tuple(SearchRange(f"{key}.{name}", d.kind, d.lo, d.hi) for _, key, name, d in dims
                   if d.kind in RANGE_KINDS)
    out = []
    for k, values in enumerate(cache[ck]):
        hps = {axis: dict(h) for axis, h in base.items()}
        for (axis, _, name, _), v in zip(dims, values, strict=True):
            hps[axis][name] = v
        out.append((hps, k, srch.method, tuple(f"{key}.{name}" for _, key, name, _ in dims), ranges))
    return out


def _dims(pt: Mapping[str, Any]) -> list[tuple[str, str, str, Distribution]]:
    """The sampled dimensions of a grid point: ``(axis, axis key, hyperparameter, distribution)``."""
    return [(axis, key, k, v) for axis, key in _SAMPLED_AXES
            for k, v in pt[axis].hparams.items() if isinstance(v, Distribution)]


def expand(cfg: SweepConfig, n_train: Callable[[str, dict[str, Any]], int] | None = None,
           file: str = "<config>") -> TrialList:
    """All trials of ``cfg``, in order, without duplicates (a :class:`TrialList`: a list of
    :class:`TrialSpec` whose ``origins`` say where each came from).

    The grid points of the top-level axes (``zip`` groups varying together) and of each ``include``
    sub-grid are formed first; a point whose model, optimizer or schedule has distributions becomes
    ``trials`` points of its search (:mod:`harness.search`; the search of its optimizer entry, else
    the top level's); then ``exclude`` rules drop trials (matching the sampled values). Within a grid
    point, trials are ordered by sequence index, and seeds vary fastest.

    ``n_train(dataset, hparams)`` gives a dataset's training-split size, needed only for an
    ``epochs`` budget (default: :func:`harness.data.sources.load_dataset`). ``file`` prefixes error lines.

    Raises:
      harness.config.errors.ConfigError: zipped top-level axes of unequal lengths.
    """
    if workloads.needs_parts(cfg):  # workloads / a dtype axis: plain parts (harness.config.workloads)
        return expand_parts(cfg, lambda part: expand(part, n_train, file))
    points = _grid_points(cfg, cfg, cfg.zip, file)
    for i, sub in enumerate(cfg.include):
        points += _grid_points(sub, cfg, [], file, prefix=f"include[{i}].")
    sizes: dict[tuple, int] = {}
    digests: dict[tuple[str, str], str] = {}  # each dataset's content digest, read once
    cache: dict[str, list[tuple]] = {}
    groups: dict[str, int] = {}
    rows: list[tuple[int, int, int, TrialSpec, TrialOrigin]] = []

    def train_size(ds: Any) -> int:
        key = (ds.name, hp_key(ds.hparams))
        if key not in sizes:
            sizes[key] = (n_train or _n_train)(ds.name, ds.hparams)
        return sizes[key]

    for pt in points:
        ds = pt["datasets"]
        bs = pt["batch_size"]
        group = groups.setdefault(repr([(a, pt[a]) if a in ("batch_size",) else
                                        (a, pt[a].name, hp_key(pt[a].hparams), pt[a].path)
                                        for a in _AXIS_ORDER if a != "seeds"]), len(groups))
        if (dkey := (ds.name, hp_key(ds.hparams))) not in digests:
            digests[dkey] = dataset_digest(ds.name, ds.hparams)
        model = pt["models"]
        steps = budget_steps(cfg.budget, model=model.name, model_hparams=model.hparams, dataset=ds.name,
                             dataset_hparams=ds.hparams, batch_size=bs, file=file, model_path=model.path,
                             n_train=functools.partial(train_size, ds))
        tgt = cfg.target_for(ds.name)
        task = f"{ds.name}" + (f" ({hp_text(ds.hparams)})" if ds.hparams else "") + f" · {model.name}"
        fixed_model = {k: v for k, v in model.hparams.items() if not isinstance(v, Distribution)}
        if fixed_model:
            task += f" ({hp_text(fixed_model)})"
        for hps, k, method, sampled, ranges in _cell_variants(cfg, pt, cache):
            flat = _flat({**pt, **{a: pt[a]._replace(hparams=hps[a]) for a, _ in _SAMPLED_AXES}})
            if any(_matches(rule, flat) for rule in cfg.exclude):
                continue
            spec = TrialSpec.make(
                sweep=cfg.name, model=model.name, optimizer=pt["optimizers"].name,
                schedule=pt["schedules"].name, dataset=ds.name, seed=pt["seeds"], steps=steps,
                batch_size=bs, eval_every=cfg.eval_every or max(1, steps // 10),
                steps_per_dispatch=cfg.steps_per_dispatch, model_hparams=hps["models"],
                optimizer_hparams=hps["optimizers"], schedule_hparams=hps["schedules"],
                dataset_hparams=ds.hparams, dataset_digest=digests[dkey], claim=claim_of(tgt),
                target=Target(tgt.metric, tgt.value, tgt.resolved_mode()) if tgt else None,
                dtype=cfg.dtypes()[0], divergence_loss_factor=cfg.divergence.loss_factor,
                devices=cfg.parallelism.devices, shard=cfg.parallelism.shard, recipe=recipe_fields(cfg),
                **source_fields(pt["optimizers"].comp), **source_fields(pt["models"].comp, "model"))
            if (why := recipe_problem(cfg, bs, pt["optimizers"].path, spec, model.path)) is not None:
                raise ConfigError([f"{file}: {why}"])
            origin = TrialOrigin({a: pt[a].path for a in ("models", "optimizers", "schedules", "datasets")},
                                 task, method, k, sampled, pt["optimizers"].comp.tuning, ranges,
                                 search=resolve_search(cfg.search, pt["optimizers"].comp.search),
                                 dims=tuple((key, name, d) for a, key, name, d in _dims(pt)))
            rows.append((group, -1 if k is None else k, len(rows), spec, origin))
    rows.sort(key=lambda r: r[:3])
    _one_configuration([(spec, origin) for *_, spec, origin in rows], file)
    out = TrialList()
    out.origins = {}
    for *_, spec, origin in rows:
        if spec.trial_id not in out.origins:
            out.origins[spec.trial_id] = origin
            out.append(spec)
        else:
            out.origins[spec.trial_id] = _merged(out.origins[spec.trial_id], origin, file)
    return out


def _one_configuration(trials: list[tuple[TrialSpec, TrialOrigin]], file: str) -> None:
    """A ``tuning: none`` entry has one configuration on each task (its seeds aside): several
    schedules, a schedule's grid or distribution, sampled model hyperparameters or several batch
    sizes would tune it.

    Raises:
      ConfigError: ``FILE: optimizers[j].tuning: ...`` naming the task and what differs.
    """
    per: dict[tuple[str, str], dict[str, TrialSpec]] = {}
    for spec, origin in trials:
        if origin.tuning == TUNING_NONE:
            per.setdefault((origin.paths["optimizers"], origin.task), {})[config_key(spec)] = spec
    errors = []
    for (path, task), configs in per.items():
        if len(configs) < 2:
            continue
        dicts = [s.to_dict() for s in configs.values()]
        differ = [k for k in dicts[0] if k != "seed" and any(d.get(k) != dicts[0][k] for d in dicts)]
        errors.append(f"{file}: {path}.tuning: tuning: none runs one configuration per task, but "
                      f"{task} gives it {len(configs)} (they differ in {', '.join(differ)}); pair "
                      f"it with one schedule, batch size and fixed model (an include entry, or an "
                      f"exclude rule)")
    if errors:
        raise ConfigError(errors)


def source_fields(comp: Component, which: str = "optimizer") -> dict[str, Any]:
    """The :class:`TrialSpec` fields of a ``which`` (optimizer or model) entry's resolved
    ``source`` (none without)."""
    ref = comp.source_ref
    if ref is None:
        return {}
    return {f"{which}_source": ref.text, f"{which}_source_hash": ref.digest,
            f"{which}_source_ref": (ref.kind, ref.target, ref.function, ref.digest, ref.code)}


def expand_parts(cfg: SweepConfig, expand_one: Callable[[SweepConfig], TrialList]) -> TrialList:
    """All trials of ``cfg``: ``expand_one(part)`` for each of
    :func:`harness.config.workloads.config_parts`, with the part's overrides set, in order and
    without duplicates; ``origins`` name ``workloads[i]`` for the model and dataset of a workload
    part and use the workload's name (and a non-float32 dtype) as the task label.

    ``expand_one(part) -> TrialList`` (:func:`expand`, or the pre-flight). A
    :class:`~harness.config.errors.ConfigError` of a workload part names ``workloads[i]`` instead of
    the part's ``models[0]``/``datasets[0]``/``batch_size``
    (:func:`harness.config.workloads.part_error`).
    """
    out = TrialList()
    out.origins = {}
    errors: list[str] = []
    for label, overrides, part in workloads.config_parts(cfg):
        try:
            specs = expand_one(part)
        except ConfigError as e:
            errors.extend(workloads.part_error(label, part, line) for line in e.errors)
            continue
        origins = getattr(specs, "origins", {})
        rung = overrides.get("ladder")
        for s in specs:
            kw = {k: v for k, v in overrides.items() if k != "ladder"}
            if "augment" in kw:
                kw["augment"] = freeze(kw["augment"])
            s2 = dataclasses.replace(s, **kw)
            o = origins.get(s.trial_id)
            if s2.trial_id in out.origins:
                if o is not None and out.origins[s2.trial_id] is not None:
                    out.origins[s2.trial_id] = _merged(out.origins[s2.trial_id], o)
                continue
            if o is not None:
                paths = dict(o.paths)
                task = o.task
                if rung is not None:
                    paths.update(models=label, datasets="ladder.workload")
                    task = rung.task
                elif label:
                    paths.update(models=f"{label}.model_hparams", datasets=f"{label}.dataset_hparams")
                    task = overrides["workload"]
                if part.dtype != "float32":
                    task += f" [{part.dtype}]"
                o = dataclasses.replace(o, paths=paths, task=task, ladder=rung)
            out.origins[s2.trial_id] = o
            out.append(s2)
    if errors:
        raise ConfigError(list(dict.fromkeys(errors)))
    return out


def search_tags(trials: TrialList) -> dict[str, dict[str, str]]:
    """``trial_id`` -> the run tags its origin gives a trial: a sampled trial's
    :data:`harness.config.search.SEARCH_TAG` (the method) and
    :data:`harness.config.search.SEARCH_INDEX_TAG` (its index in the sequence); a ``tuning: none``
    entry's trial's :data:`harness.core.names.TAG_TUNING` (:attr:`TrialOrigin.tuning`). Other
    trials get none. A ladder's trial gets its rung's tags (:meth:`harness.core.ladder.Rung.tags`)."""
    out: dict[str, dict[str, str]] = {}
    optimizer_of = {s.trial_id: s.optimizer for s in trials}
    for tid, o in getattr(trials, "origins", {}).items():
        if o is None:
            continue
        if o.method is not None:  # sampled, or an adaptive method's trial (coordinate_descent)
            out[tid] = {SEARCH_TAG: str(o.method)}
        if o.index is not None:
            out[tid][SEARCH_INDEX_TAG] = str(o.index)
            if o.ranges:
                out[tid][TAG_SEARCH_SPACE] = space_tag(list(o.ranges))
        if o.tuning is not None:
            out.setdefault(tid, {})[TAG_TUNING] = o.tuning
        if o.ladder is not None:
            out.setdefault(tid, {}).update(o.ladder.tags(optimizer_of[tid]))
    return out


def search_methods(trials: list[TrialSpec]) -> str:
    """The parent run's ``harness.search`` tag: the sampling methods the trials used, sorted and
    comma-separated (``"quasirandom"``), or ``"grid"`` when nothing was sampled."""
    used = {o.method for o in getattr(trials, "origins", {}).values() if o.method}
    return ",".join(sorted(used)) or "grid"


def config_key(spec: TrialSpec) -> str:
    """A configuration's identity: the trial's canonical JSON without its seed (the trials of one
    configuration differ only in seed)."""
    d = spec.to_dict()
    d.pop("seed", None)
    return json.dumps(d, sort_keys=True, default=str)


def budgets(trials: TrialList, self_tuning: bool = False) -> dict[str, dict[str, int]]:
    """Tuning budget per task and optimizer: ``task label -> {optimizer name -> number of distinct
    configurations}`` (schedules and entries of one optimizer name add up; seeds do not count),
    in trial order. Of the entries that tune, or with ``self_tuning`` of the ``tuning: none``
    entries (one configuration each per task); a trial both kinds yield counts in both."""
    role = TUNING_NONE if self_tuning else "tuned"
    seen: dict[str, dict[str, set[str]]] = {}
    for s in trials:
        o = trials.origins[s.trial_id]
        if role in o.roles():
            seen.setdefault(o.task, {}).setdefault(s.optimizer, set()).add(config_key(s))
    return {t: {o: len(c) for o, c in opts.items()} for t, opts in seen.items()}


def unequal_budgets(trials: TrialList) -> list[str]:
    """One warning line per task whose optimizers that tune get different numbers of
    configurations (a ``tuning: none`` entry's one configuration is meant to differ)."""
    out = []
    for task, opts in budgets(trials).items():
        if len(set(opts.values())) > 1:
            per = ", ".join(f"{o} {n}" for o, n in opts.items())
            out.append(f"warning: unequal tuning budgets on {task}: {per} configurations; a "
                       f"comparison favours the optimizer tuned more (set search.trials per "
                       f"optimizer entry to equalise)")
    return out


def hp_text(hp: Mapping[str, Any]) -> str:
    """Hyperparameters as a message shows them, ``step_size=0.1, b1=0.9`` (``""`` for none)."""
    return ", ".join(f"{k}={v!r}" for k, v in hp.items())


def _n_train(name: str, hparams: dict[str, Any]) -> int:
    from harness.data.sources import load_dataset

    return len(load_dataset(name, **hparams).x_train)


def entry_paths(cfg: SweepConfig) -> dict[str, dict[tuple[str, str], str]]:
    """Per component axis: ``(name, canonical hparams JSON)`` -> the config key path of the first
    entry that yields it (top level first, then ``include[i]``); a distribution's key is its text
    (sampled trials are traced back through :attr:`TrialList.origins` instead)."""
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

