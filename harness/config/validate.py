"""A whole config against the registries: every entry, the search, ``exclude`` rules, workloads.

:func:`validate_names` runs, after the structural checks of :mod:`harness.config.schema`: every
entry of every axis (top level and ``include``) through :func:`harness.config.hparams.check_component`;
the search settings against the distributions they must sample; ``exclude`` rules (names are
registry names, a ``KIND.HPARAM`` key names a hyperparameter some entry sets); the executor; each
``workloads`` entry (its model and dataset with the overrides); ``augment``; ``targets`` keys. All
problems are raised together as one :class:`~harness.config.errors.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.config import search
from harness.config.errors import ConfigError, key_text
from harness.config.hparams import check_component, entry_builder
from harness.config.registries import Registries, builder_hparams
from harness.config.schema import Component, SweepConfig, WorkloadEntry
from harness.config.values import hparam_count
from harness.config.workloads import WORKLOADS, Workload, workload_registry
from harness.core.augment_keys import validate_augment
from harness.core.builders import did_you_mean, known_executors, lookup
from harness.core.echo import short_repr

__all__ = ["validate_names"]


def _dist_keys(comp: Component) -> list[str]:
    return [k for k, v in comp.hparams.items() if search.is_distribution(v)]


def _check_search(cfg: SweepConfig, file: str, errors: list[str]) -> None:
    """The search settings against the distributions they must sample: ``search`` only on optimizer
    entries; no distribution in a cell whose method is ``grid`` or ``coordinate_descent`` (it moves
    along grid axes); a sampling method with distributions needs ``trials``; ``grid`` takes no
    ``trials``."""
    if cfg.search is not None and cfg.search.method is None:  # its options go to the default method
        errors.extend(f"{file}: search: {e}" for e in search.option_errors(
            cfg.search, search.DEFAULT_METHOD, " (the default method: set search.method)"))
    if cfg.search is not None and cfg.search.method == "grid" and cfg.search.trials is not None:
        errors.append(f"{file}: search.trials: method grid has no trials (its grid points are the "
                      f"budget); remove trials, or use method quasirandom or random")
    grids: list[tuple[str, Any]] = [("", cfg)] + [(f"include[{i}].", g) for i, g in enumerate(cfg.include)]
    for prefix, grid in grids:
        opt_prefix = prefix if grid.optimizers is not None else ""
        opts = list(enumerate(grid.optimizers if grid.optimizers is not None else cfg.optimizers))
        searches = [(f"{opt_prefix}optimizers[{j}]", c, search.resolve_search(cfg.search, c.search))
                    for j, c in opts]
        for axis in ("models", "schedules", "datasets"):
            for j, comp in enumerate(getattr(grid, axis) or []):
                if comp.search is not None:
                    errors.append(f"{file}: {prefix}{axis}[{j}].search: only optimizer entries may "
                                  f"override search (each optimizer's budget is set there)")
        for j, comp in opts if grid.optimizers is not None or not prefix else []:
            path, _, srch = searches[j]
            if comp.search is not None and comp.search.method is None:  # the method it inherits
                why = (" (the top level's search.method)" if cfg.search is not None and cfg.search.method
                       else " (the default method: set search.method)")
                errors.extend(f"{file}: {path}.search: {e}"
                              for e in search.option_errors(comp.search, srch.method, why))
            if comp.search is not None and comp.search.trials is not None and srch.method == "grid":
                errors.append(f"{file}: {path}.search.trials: method grid has no trials (its grid "
                              f"points are the budget); remove trials, or use method quasirandom or "
                              f"random")
        for axis in ("models", "optimizers", "schedules"):
            if getattr(grid, axis) is None:
                continue
            for j, comp in enumerate(getattr(grid, axis)):
                if comp.tuning == "none" and axis == "optimizers":
                    continue  # its own message: tuning: none runs one configuration (_check_tuning)
                for k in _dist_keys(comp):
                    mine = [searches[j]] if axis == "optimizers" else searches
                    if (msg := _distribution_problem(comp.hparams[k], axis, mine)) is not None:
                        errors.append(f"{file}: {prefix}{axis}[{j}].hparams.{k}{msg}")


def _distribution_problem(dist: Any, axis: str, mine: list[tuple[str, Any, Any]]) -> str | None:
    """Why distribution ``dist`` of an entry of ``axis`` cannot be sampled by the searches of its
    cells (``mine``: ``(optimizer path, entry, resolved search)``; an optimizer: its own), as the
    end of its error line from its key path on (``": ..."``); else ``None``."""
    grid_opt = next((p for p, _, sr in mine if sr.method == "grid"), None)
    cd_opt = next((p for p, _, sr in mine if sr.method == "coordinate_descent"), None)
    no_trials = next((p for p, _, sr in mine if sr.method != "grid" and sr.trials is None), None)
    text = str(search.parse_distribution(dist))
    with_opt = "" if axis == "optimizers" else f" (with {grid_opt or no_trials})"
    if cd_opt is not None:
        with_cd = "" if axis == "optimizers" else f" (with {cd_opt})"
        return (f": {text} is a distribution, but search.method is coordinate_descent{with_cd}, which "
                f"moves along grid axes: write a grid (a list or {{log_grid: [lo, hi, num]}})")
    if grid_opt is not None:
        return (f": {text} is a distribution, but search.method is grid{with_opt}: pick a sampling "
                f"method (search: {{method: quasirandom, trials: N}}), or write a grid (a list or "
                f"{{log_grid: [lo, hi, num]}})")
    if no_trials is not None:
        return f": a distribution needs search.trials{with_opt}: {_TRIALS_HINT}"
    return None


_TRIALS_HINT = "add search: {method: quasirandom, trials: N} at the top level (or on the optimizer entry)"


def _check_tuning(cfg: SweepConfig, file: str, errors: list[str]) -> None:
    """``tuning: none`` only on optimizer entries, never with a ``search`` override, and with one
    configuration: a fixed value for each hyperparameter (a one-value list is one value), no grid
    and no distribution. (A schedule or model axis that would still give such an entry several
    configurations on a task is caught when the trials are formed,
    :func:`harness.plan.expansion.expand`.)"""
    grids: list[tuple[str, Any]] = [("", cfg)] + [(f"include[{i}].", g) for i, g in enumerate(cfg.include)]
    for prefix, grid in grids:
        for axis in ("models", "schedules", "datasets"):
            for j, comp in enumerate(getattr(grid, axis) or []):
                if comp.tuning is not None:
                    errors.append(f"{file}: {prefix}{axis}[{j}].tuning: only optimizer entries take "
                                  f"tuning: none (the optimizer then runs with its defaults)")
        for j, comp in enumerate(grid.optimizers or []):
            if comp.tuning != "none":
                continue
            path = f"{file}: {prefix}optimizers[{j}]"
            if comp.search is not None:
                errors.append(f"{path}.search: tuning: none runs one configuration; a search "
                              f"override would tune it (remove one of the two)")
            for k, v in comp.hparams.items():
                what = ("a distribution" if search.is_distribution(v)
                        else "a grid" if hparam_count(v) > 1 else None)
                if what:
                    errors.append(f"{path}.hparams.{key_text(k)}: tuning: none runs one "
                                  f"configuration; {what} here would tune it")


def validate_names(cfg: SweepConfig, file: str, registries: Registries) -> None:
    """Check every registry name and hyperparameter of ``cfg`` (top level and ``include``).

    Raises:
      ConfigError: one line per problem (nothing has been run or logged).
    """
    errors: list[str] = []
    axes = [("models", "model", registries.models), ("optimizers", "optimizer", registries.optimizers),
            ("schedules", "schedule", registries.schedules), ("datasets", "dataset", registries.datasets)]
    grids: list[tuple[str, Any]] = [("", cfg)] + [(f"include[{i}].", g) for i, g in enumerate(cfg.include)]
    for prefix, grid in grids:
        for axis, kind, reg in axes:
            for j, comp in enumerate(getattr(grid, axis) or []):
                check_component(kind, reg, comp, f"{prefix}{axis}[{j}]", file, errors)
    _check_search(cfg, file, errors)
    _check_tuning(cfg, file, errors)
    _check_rules(cfg, file, registries, errors)
    if cfg.executor not in known_executors():
        ex = known_executors()
        errors.append(f"{file}: executor: unknown executor {cfg.executor!r}; valid choices: "
                      f"{', '.join(ex)}{did_you_mean(cfg.executor, ex)}")
    known = workload_registry(cfg)
    for name, d in (cfg.define_workloads or {}).items():
        n = len(errors)
        _check_defined(name, d, f"define_workloads.{key_text(name)}", file, registries, errors)
        if len(errors) > n:  # said once, where it is defined
            known[name] = None  # type: ignore[assignment]
    for i, w in enumerate(cfg.workloads or []):
        _check_workload(w, f"workloads[{i}]", file, registries, errors, known)
    if cfg.ladder is not None:
        _check_ladder(cfg, file, registries, errors, known)
    if cfg.augment is not None:
        try:
            validate_augment(cfg.augment)
        except ValueError as e:
            errors.append(f"{file}: augment: {e}")
    names = [c.name for c in cfg.datasets or []] + [c.name for g in cfg.include
                                                     for c in g.datasets or []]
    names += [w.name for w in cfg.workloads or []]
    _check_needs_target(cfg, file, names, errors)
    for k in cfg.targets:
        if k not in names:
            errors.append(f"{file}: targets.{key_text(k)}: not a dataset of this sweep; datasets: "
                          f"{', '.join(names)}{did_you_mean(k[:200], names)}")
    if errors:
        raise ConfigError(errors)


def _check_ladder(cfg: SweepConfig, file: str, registries: Registries, errors: list[str],
                  known: dict) -> None:
    """The ladder's workload, and its model at each size (:mod:`harness.config.ladder_parts`)."""
    ladder = cfg.ladder
    try:
        lookup(known, ladder.workload, "workload")
    except KeyError as e:
        errors.append(f"{file}: ladder.workload: {e.args[0]}")
    for i, size in enumerate(ladder.sizes if ladder.workload in known else []):
        entry = WorkloadEntry(name=ladder.workload, model_hparams=size,
                              dataset_hparams=ladder.dataset_hparams)
        _check_workload(entry, f"ladder.sizes[{i}]", file, registries, errors, known)


def _check_needs_target(cfg: SweepConfig, file: str, datasets: list[str], errors: list[str]) -> None:
    """``scoring: algoperf`` and an explicit ``selection: {by: time_to_target}`` rank on time to the
    validation target: every dataset of the sweep needs one (``target`` or its ``targets`` entry)."""
    missing = list(dict.fromkeys(d for d in datasets if cfg.target_for(d) is None))
    if not missing:
        return
    which = (f"dataset {missing[0]} has none" if len(missing) == 1
             else f"datasets {', '.join(missing)} have none")
    add = "add target: {metric: valid/accuracy, value: X} (or a targets entry per dataset)"
    if cfg.scoring == "algoperf":
        errors.append(f"{file}: scoring: algoperf scores time to the validation target and {which}; "
                      f"{add}, or use scoring: harness")
    if "by" in cfg.selection.model_fields_set and cfg.selection.by == "time_to_target":
        errors.append(f"{file}: selection.by: time_to_target selects on reaching the validation target "
                      f"and {which}; {add}, or use selection: {{by: final}} or {{by: best}}")


def _check_rules(cfg: SweepConfig, file: str, registries: Registries, errors: list[str]) -> None:
    """``exclude`` rules: names are registry names; a ``KIND.HPARAM`` key names a hyperparameter
    that some ``KIND`` entry of this sweep sets (did-you-mean against the builders' hyperparameters:
    a misspelt key would silently match no trial); values are scalars or lists of scalars."""
    regs = {"model": registries.models, "optimizer": registries.optimizers,
            "schedule": registries.schedules, "dataset": registries.datasets}
    axis_of = {"model": "models", "optimizer": "optimizers", "schedule": "schedules",
               "dataset": "datasets"}
    grids: list[Any] = [cfg, *cfg.include]
    for i, rule in enumerate(cfg.exclude):
        for key, want in rule.items():
            where = f"{file}: exclude[{i}].{key_text(key)}"
            wants = want if isinstance(want, list) else [want]
            if any(isinstance(w, Mapping | list) for w in wants):
                errors.append(f"{where}: a rule value is a scalar or a list of scalars, got "
                              f"{short_repr(want)}")
                continue
            if key in regs:
                for v in wants:
                    try:
                        entry_builder(key, regs[key], v) if isinstance(v, str) else lookup(regs[key], v, key)
                    except (KeyError, TypeError) as e:
                        msg = e.args[0] if isinstance(e, KeyError) else f"not a {key} name: {short_repr(v)}"
                        errors.append(f"{where}: {msg}")
                continue
            kind, _, hp = key.partition(".")
            if kind not in regs or not hp:
                continue  # seed, batch_size (the structural check rejected anything else)
            names = rule.get(kind)
            names = set(names if isinstance(names, list) else [names]) if names is not None else None
            comps = [c for g in grids for c in (getattr(g, axis_of[kind]) or [])
                     if names is None or c.name in names]
            sets = {k for c in comps for k in c.hparams}
            if hp in sets:
                continue
            valid: list[str] = []
            for c in comps:
                try:
                    builder = entry_builder(kind, regs[kind], c.name)
                except KeyError:
                    continue
                valid += [h for h in builder_hparams(kind, builder) if h not in valid]
            if hp in valid:
                errors.append(f"{where}: no {kind} entry of this sweep sets {hp!r}, so the rule "
                              f"matches no trial; rules match hyperparameters the config sets "
                              f"({', '.join(sorted(sets)) or 'none'})")
            else:
                errors.append(f"{where}: {short_repr(hp, 60)} is not a hyperparameter of the "
                              f"{kind}s of this sweep ({', '.join(valid) or 'none'})"
                              f"{did_you_mean(hp[:200], valid)}")


#: The loss of each task (:attr:`harness.data.dataset.Dataset.task`).
TASK_LOSS = {"classification": "cross_entropy", "sequence": "cross_entropy", "reconstruction": "mse"}


def _check_defined(name: str, d: Any, path: str, file: str, registries: Registries,
                   errors: list[str]) -> None:
    """A ``define_workloads`` entry: a name of its own; its model and dataset pass the checks of a
    ``models``/``datasets`` entry; its augmentation; its ``loss`` is its dataset's task's."""
    if name in WORKLOADS:
        errors.append(f"{file}: {path}: {name!r} is a built-in workload; give yours a name of its own")
        return
    n = len(errors)
    for kind, reg, comp in (("model", registries.models, d.model),
                            ("dataset", registries.datasets, d.dataset)):
        if comp.source is not None and kind == "dataset":
            errors.append(f"{file}: {path}.dataset.source: only optimizer and model entries take a source")
            continue
        check_component(kind, reg, comp, f"{path}.{kind}", file, errors)
    try:
        validate_augment(d.augment)
    except ValueError as e:
        errors.append(f"{file}: {path}.augment: {e}")
    if len(errors) > n or any(isinstance(v, list | Mapping) for v in d.dataset.hparams.values()):
        return
    from harness.data.sources import load_dataset

    try:
        task = load_dataset(d.dataset.name, **d.dataset.hparams).task
    except Exception as e:  # the loader's own reason, on one line
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        errors.append(f"{file}: {path}.dataset: {d.dataset.name!r} does not load: {why}")
        return
    if TASK_LOSS.get(task, d.loss) != d.loss:
        errors.append(f"{file}: {path}.loss: a {task} dataset trains on {TASK_LOSS[task]}, got {d.loss}")
    if d.budget.tokens is not None or d.budget.tokens_per_param is not None:
        _check_token_budget(d, path, file, errors)


def _check_token_budget(d: Any, path: str, file: str, errors: list[str]) -> None:
    """A definition's token budget gives at least one step and no more tokens than its training
    split holds (a budget in tokens counts data seen once, as a ladder's does)."""
    from harness.config.errors import ConfigError
    from harness.config.token_budget import budget_steps
    from harness.data.sources import load_dataset

    if any(isinstance(v, list | Mapping) for v in d.model.hparams.values()):
        return  # a grid of sizes: each part's budget is checked when it expands
    ds = load_dataset(d.dataset.name, **d.dataset.hparams)
    try:
        steps = budget_steps(d.budget, model=d.model.name, model_hparams=d.model.hparams,
                             dataset=d.dataset.name, dataset_hparams=d.dataset.hparams,
                             batch_size=d.batch_size, n_train=lambda: ds.num_train)
    except ConfigError as e:  # "budget.tokens: ..." under the definition's path
        errors.extend(f"{file}: {path}.{line}" for line in e.errors)
        return
    t = int(ds.input_shape[0])
    if steps * d.batch_size * t > ds.num_train * t:
        errors.append(f"{file}: {path}.budget: {steps:,} steps of {d.batch_size} x {t} tokens are "
                      f"{steps * d.batch_size * t:,} tokens, more than the {ds.num_train * t:,} training "
                      f"tokens of {d.dataset.name}: lower the budget, or give budget.steps to repeat data")


def _check_workload(w: WorkloadEntry, path: str, file: str, registries: Registries,
                    errors: list[str], known: Mapping[str, Workload] = WORKLOADS) -> None:
    """The workload exists (in ``known``), and its model and dataset (with the overrides) pass the
    same checks as a ``models``/``datasets`` entry."""
    try:
        wl = lookup(known, w.name, "workload")
    except KeyError as e:
        errors.append(f"{file}: {path}.name: {e.args[0]}")
        return
    if wl is None:  # a definition with problems, each said where it is defined
        return
    for kind, reg, name, base, over in (
            ("model", registries.models, wl.model, wl.model_hparams, w.model_hparams),
            ("dataset", registries.datasets, wl.dataset, wl.dataset_hparams, w.dataset_hparams)):
        comp = Component(name=name, hparams={**base, **over})
        sub: list[str] = []
        check_component(kind, reg, comp, f"{path}.{kind}_hparams", file, sub)
        # "workloads[0].model_hparams.name: unknown model ..." reads as the workload's own model
        errors.extend(m.replace(f"{path}.{kind}_hparams.name:", f"{path}.name: workload "
                                f"{w.name!r} needs {kind} {name!r}, but:").replace(
                                f"{path}.{kind}_hparams.hparams", f"{path}.{kind}_hparams")
                      for m in sub)


