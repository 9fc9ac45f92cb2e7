"""Loading a sweep config: from a YAML file to a validated :class:`~harness.config.schema.SweepConfig`.

A config is loaded in four steps, all before any trial runs and before anything is written to MLflow:

0. **Reading** (:mod:`harness.config.yamlsafe`): at most 1 MiB of UTF-8; duplicate keys rejected
   (both line numbers); aliases bounded (1,000 uses, 100,000 values expanded: no "billion laughs");
   at most 50 levels of nesting; YAML 1.2 floats (``3e-3`` is a float, not the string PyYAML makes).
1. **Structure** (:func:`parse_config`): pydantic models (:mod:`harness.config.schema`) with unknown
   keys forbidden, types and ranges checked (non-empty axes; integers are never booleans —
   ``eval_every: true`` is an error — and an integral float such as ``1e3`` counts as an integer;
   ranges from :mod:`harness.config.limits`: steps and ``eval_every`` <= 10^9, epochs finite and
   <= 10^6, ``steps_per_dispatch`` <= 10,000, seeds in [0, 2^32), batch sizes <= 10^7, ``jobs``
   <= 1024; targets finite, accuracies within [0, 1]; the ``name`` <= 200 characters and 255 UTF-8
   bytes without control characters, as MLflow and the artifact directory need; ``tracking_uri`` a
   scheme the harness can use). Then the **plan-size limit** (:func:`check_plan_size`): the number
   of trials computed from the axis sizes, without expanding anything, may not exceed
   ``max_trials`` (10,000; ``sweep --max-trials N``).
2. **Names** (:func:`harness.config.validate.validate_names`): every model, optimizer, schedule and
   dataset name is looked up in its registry (:mod:`harness.config.registries`), and every
   hyperparameter is checked against the builder's signature (:mod:`harness.config.hparams`:
   unknown names, missing required ones, values of the wrong type, non-positive ``step_size``,
   non-finite numbers, values longer than MLflow's 6,000-character param limit); ``exclude`` keys
   ``KIND.HPARAM`` must name a hyperparameter that some entry sets (did-you-mean against the
   builders' hyperparameters).
3. **Canonical numbers** (:func:`harness.config.hparams.canonicalize_numbers`): an int given where
   the builder takes a float becomes a float, so ``step_size: 1000`` and ``1000.0`` are one trial.

Every problem becomes one line ``FILE: KEY.PATH: message`` (with the valid choices and a
"did you mean" where one is close), and all lines are raised together as one
:class:`~harness.config.errors.ConfigError` (at most 50 lines of at most 1,000 characters; a user's
value is echoed in at most 200 characters, :func:`harness.core.echo.short_repr`).

Schema (``experiments/quickstart.yaml`` is a complete example)::

    name: quickstart              # the sweep's name = the MLflow experiment
    description: "..."            # optional free text
    models:                       # axis; each entry a name or {name, hparams, zip}
      - mlp
      - {name: cnn, hparams: {width: [16, 32]}}     # a list is a grid axis
    optimizers:
      - {name: adam, hparams: {step_size: {log_grid: [1.0e-4, 1.0e-1, 4]}}}   # 4 log-spaced values
      - {name: sgd, hparams: {step_size: [0.1, 0.3], }, zip: [[...]]}
    schedules: [constant, cosine_decay]  # default [constant]; factories get the optimizer's step_size
    datasets: [digits]             # registry names, "tfds:NAME" or "tokens:PATH" (harness.data.kinds)
    workloads: [mnist1d_cnn]       # instead of models x datasets: named tasks (harness.config.workloads)
    ladder: {...}                  # instead of both: one workload at several sizes (config.ladder_schema)
    define_workloads: {NAME: {dataset, model, loss, batch_size, budget, eval_every, target}}  # or a FILE
    seeds: [0, 1]                  # a list, or an int n meaning 0..n-1
    batch_size: 64                 # an int or a list (an axis)
    budget: {steps: 500}           # or {epochs: 3} (steps = ceil(epochs * n_train / batch_size)),
                                   # {tokens: 1000000} or {tokens_per_param: 20} (sequence datasets)
    eval_every: 100                # steps between evaluations (default: budget / 10)
    steps_per_dispatch: 50         # K steps fused in one lax.scan dispatch
    target: {metric: valid/accuracy, value: 0.9}  # on validation; mode inferred: accuracy→max, loss→min
    # a loss target's claim rules, stated in the summary and report (harness.core.claim_rules):
    # target: {metric: valid/loss, value: 3.28, claim: {margin: 0.004, single_run: 3.276}}
    targets: {mnist1d: {metric: valid/accuracy, value: 0.6}}  # per-dataset override (eval/* = valid/*)
    search: {method: quasirandom, trials: 16, seed: 0}   # samples the distributions (harness.config.search)
    zip: [[models, batch_size]]    # top-level axes that vary together instead of as a product
    include: [{models: [cnn], optimizers: [sgd]}]   # extra sub-grids (other axes as above)
    exclude: [{model: cnn, optimizer.step_size: [1.0]}]   # drop trials matching every key
    batching: auto                 # auto | on | off (true: on, false: off): seed/step-size siblings vmapped
    measure_perf: true             # throughput timing (once per perf key; false: none, cost clock)
    scoring: harness               # tuned time-to-result rule: harness | algoperf (reports.scoring)
    time: modeled                  # the clock time to target ranks on: modeled | measured (core.clock)
    dtype: auto                    # auto (float32 on a CPU, else bf16 compute) | float32 | bfloat16 | ...
    augment: {crop_pad: 4, flip: true}   # in-graph image augmentation (harness.core.augment_keys)
    grad_clip: 1.0                 # clip gradients to this global norm before each update (default: none)
    grad_accum: 4                  # micro-batches per update; must divide every batch size (default 1)
    param_groups:                  # one optimizer per group (optimizers.groups rules); the rest as configured
      - {rules: [embeddings, head], step_size_scale: 0.5, weight_decay: 0.0, hparams: {b1: 0.8}}
    loss_reduction: mean           # mean | sum: a token loss's gradient of its sum over tokens and
                                   # micro-batches (modded-nanogpt's reduction="sum"); sequence models
    divergence: {loss_factor: 100}  # diverged: train loss > 100 x the initial one (null: off)
    selection: {by: time_to_target}  # each optimizer's best config: time_to_target | final | best
    parallelism: {devices: 1, shard: batch}  # devices: N | all; shard: batch (data-parallel) | trials
    tracking_uri: null             # overridden by --tracking-uri / MLFLOW_TRACKING_URI
    executor: inprocess            # inprocess | process | (ray, once registered)
    jobs: 1
    address: null                  # for executors that connect somewhere (ray)
    checkpoint_every: 1min         # mid-trial checkpoints: N steps, "90s"/"10min"/"1h", or off
    checkpoint_dir: null           # default: beside a SQLite store (./checkpoints for a server)
    keep_final_checkpoint: false   # log each trial's final state as its checkpoint/ artifact
    source_timeout_s: 60           # each check running a source: file's code, before any write
    dispatch_timeout_s: 600        # each dispatch of a trial with a source: entry, in a worker (null: none)

Hyperparameter values: a scalar is fixed; a list is a grid axis; ``{log_grid: [low, high, num]}`` is
``num`` log-spaced values (6 significant digits); ``{value: X}`` is the literal X (use it for
list-valued hyperparameters). An entry's ``zip: [[a, b]]`` makes its hyperparameter axes ``a`` and
``b`` vary together (equal lengths required).

A model, optimizer or schedule hyperparameter may also be a distribution, sampled by the sweep's
``search`` (``trials`` configurations per (model, dataset, optimizer, schedule) cell; an optimizer
entry may override ``search`` field by field)::

    search: {method: quasirandom, trials: 16, seed: 0}    # quasirandom (default) | random | grid
    optimizers:
      - {name: adam, hparams: {step_size: {log_uniform: [1.0e-4, 1.0e-1]}, b1: {uniform: [0.8, 0.99]}}}
      - {name: sgd, hparams: {step_size: {log_uniform: [1.0e-3, 1.0]}}, search: {trials: 32}}
    models: [{name: mlp, hparams: {depth: {int_uniform: [1, 3]}, activation: {choice: [relu, tanh]}}}]

Grid axes stay crossed with the sampled points; see :mod:`harness.config.search` for the sampling, the
value mappings and why raising ``trials`` keeps the earlier trials.

An optimizer entry may say ``tuning: none`` (AlgoPerf's self-tuning track): it runs **one**
configuration per task, the builder's defaults plus the scalar values the entry fixes, with every
seed::

    optimizers:
      - {name: prodigy, tuning: none, hparams: {step_size: 1.0}}   # fixed values only

A grid or a distribution in its ``hparams``, a ``search`` override beside it, ``tuning`` on a
model, schedule or dataset entry, a value other than ``none``, or a required hyperparameter it
leaves out (no built-in optimizer has a default ``step_size``) is a config error; so is a sweep
whose schedules, batch sizes or sampled model hyperparameters would give the entry several
configurations on one task (found when the trials are formed). ``tuning: none`` is not part of a
trial's id (the trial trains the same either way): its runs carry the tag ``harness.tuning``.
"""


from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.config import limits
from harness.config.environment import check_environment
from harness.config.errors import ConfigError, format_pydantic
from harness.config.hparams import canonicalize_numbers
from harness.config.registries import Registries, default_registries
from harness.config.schema import SweepConfig
from harness.config.validate import validate_names
from harness.config.yamlsafe import YamlConfigError, load_yaml_file

#: ``ConfigError`` is here too: it is what these functions raise.
__all__ = ["ConfigError", "check_plan_size", "config_from_data", "config_registries", "load_config",
           "parse_config",
           "with_config_sources", "with_search_spaces", "with_workload_file"]


def parse_config(data: Any, file: str = "<config>",
                 max_trials: int = limits.DEFAULT_MAX_TRIALS) -> SweepConfig:
    """Structural validation of an already-loaded YAML document, then the plan-size limit
    (:func:`check_plan_size`), both before anything is expanded.

    Raises:
      ConfigError: one line per problem, ``FILE: KEY.PATH: message``.
    """
    if not isinstance(data, Mapping):
        raise ConfigError([f"{file}: <top>: a sweep config must be a mapping, got {type(data).__name__}"])
    try:
        cfg = SweepConfig.model_validate(dict(data), context={"max_trials": max_trials})
    except ValidationError as e:
        raise ConfigError(format_pydantic(e, file, SweepConfig)) from None
    check_plan_size(cfg, file, max_trials)
    return cfg


def check_plan_size(cfg: SweepConfig, file: str, max_trials: int = limits.DEFAULT_MAX_TRIALS) -> None:
    """Reject a config whose grid has more than ``max_trials`` trials, computed from axis sizes
    (:func:`harness.config.limits.plan_size`) without expanding anything.

    Raises:
      ConfigError: ``FILE: KEY.PATH: the sweep would expand to N trials, more than the limit ...``
        naming the axis or hyperparameter with the most values.
    """
    problem = limits.plan_size_problem(cfg, max_trials)
    if problem is not None:
        raise ConfigError([f"{file}: {problem[0]}: {problem[1]}"])


def load_config(path: str | Path, registries: Registries | None = None,
                max_trials: int = limits.DEFAULT_MAX_TRIALS) -> SweepConfig:
    """Read, parse and fully validate a sweep config file: the bounded YAML loader
    (:mod:`harness.config.yamlsafe`: duplicate keys, alias bombs, nesting, size, UTF-8), structure and
    ranges, the plan-size limit (``max_trials``), then registry names and hyperparameters.
    Numbers are canonicalised (:func:`harness.config.hparams.canonicalize_numbers`: an int where a
    builder takes a float becomes a float, so ``step_size: 1000`` and ``1000.0`` are one trial).

    ``registries=None`` uses :func:`harness.config.registries.default_registries`.

    Raises:
      ConfigError: the file is missing, unreadable, not UTF-8, not safe YAML, or invalid (all
        problems listed, one ``FILE: KEY.PATH: message`` line each); its subclass
        :class:`harness.config.environment.EnvSettingError`: a ``HARNESS_*`` environment variable
        holds a value the harness cannot use (one line per variable).
    """
    check_environment()  # the HARNESS_* variables, before the file (harness.config.environment)
    file = str(path)
    try:
        data = load_yaml_file(path)
    except YamlConfigError as e:
        raise ConfigError(e.lines) from None
    return config_from_data(data, file, os.path.dirname(os.path.abspath(file)), registries, max_trials)


def config_from_data(data: Any, file: str, base_dir: str, registries: Registries | None = None,
                     max_trials: int = limits.DEFAULT_MAX_TRIALS) -> SweepConfig:
    """:func:`load_config` of a document already read (the YAML's plain data): everything after
    the reading, identical for a file and for a mapping a Python caller gives
    (:mod:`harness.config.given`). ``file`` starts every error line; relative ``source:`` and
    ``search_space:`` paths are relative to ``base_dir``.

    Raises:
      ConfigError: as :func:`load_config`.
    """
    data, moved = with_search_spaces(data, file, base_dir)
    data, named = with_workload_file(data, file, base_dir)
    moved = {**moved, **named}
    try:
        cfg = parse_config(data, file, max_trials)
        regs = with_config_sources(registries or default_registries(), cfg, file, base_dir)
        validate_names(cfg, file, regs)
        cfg = canonicalize_numbers(cfg, regs)
        if any(c.source_ref is not None for g in (cfg, *cfg.include) for c in g.optimizers or []):
            from harness.config.optimizer_sources import probe_sources

            if errors := probe_sources(cfg, file):
                raise ConfigError(errors)
    except ConfigError as e:
        if not moved:
            raise
        raise ConfigError([_moved_line(line, file, moved) for line in e.errors]) from None
    return cfg


def _moved_line(line: str, file: str, moved: Mapping[str, str]) -> str:
    """An error line about a hyperparameter that came from a ``search_space`` file, pointed at
    that key (the user never wrote ``hparams.<name>``)."""
    for key, where in moved.items():
        for sep in (":", "."):
            if line.startswith(f"{file}: {key}{sep}"):
                return f"{file}: {where}{line[len(file) + 2 + len(key):]}"
    return line


def with_workload_file(data: Any, file: str, base_dir: str) -> tuple[Any, dict[str, str]]:
    """``data`` with ``define_workloads: PATH`` (a YAML file, relative to ``base_dir``, of workload
    definitions, under a ``define_workloads`` key or at its top) read in; and ``{"define_workloads":
    "define_workloads (PATH)"}`` so that an error line names the file too.

    Raises:
      ConfigError: ``FILE: define_workloads: message``: a missing, unsafe or malformed file.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("define_workloads"), str):
        return data, {}
    name = data["define_workloads"]
    path = os.path.join(base_dir, name)
    if not os.path.isfile(path):
        raise ConfigError([f"{file}: define_workloads: no such file: {path} (a path is relative to the "
                           f"config file's folder)"])
    try:
        defs = load_yaml_file(path)
    except YamlConfigError as e:
        raise ConfigError([f"{file}: define_workloads: {e.lines[0]}"]) from None
    if isinstance(defs, Mapping) and set(defs) == {"define_workloads"}:
        defs = defs["define_workloads"]
    if not isinstance(defs, Mapping):
        raise ConfigError([f"{file}: define_workloads: {name} holds {type(defs).__name__}, not a mapping "
                           f"of workload names to definitions"])
    return {**data, "define_workloads": defs}, {"define_workloads": f"define_workloads ({name})"}


#: Largest ``search_space`` file read (bytes).
MAX_SEARCH_SPACE_BYTES = 1024 * 1024


def with_search_spaces(data: Any, file: str, base_dir: str) -> tuple[Any, dict[str, str]]:
    """``data`` (the YAML's plain data) with each optimizer entry's ``search_space`` (an AlgoPerf
    ``tuning_search_space.json``, relative to ``base_dir``) converted
    (:mod:`harness.config.algoperf_space`: ranges become distributions, ``feasible_points``
    choices; a list of fixed points becomes one zipped grid) and merged under its ``hparams``
    (``hparams`` win). The ``search_space`` key stays, as a record of where they came from.
    Also returns ``{"optimizers[i].hparams.NAME": "optimizers[i].search_space (NAME from FILE)"}``
    for the hyperparameters a file added, so that an error about one names where it came from.

    Raises:
      ConfigError: ``FILE: optimizers[i].search_space: message`` for a missing, oversized or
        malformed file.
    """
    if not isinstance(data, Mapping):
        return data, {}
    errors: list[str] = []
    moved: dict[str, str] = {}
    data = dict(data)
    data["optimizers"] = _with_spaces(data.get("optimizers"), "", file, base_dir, errors, moved)
    if isinstance(data.get("include"), list):
        data["include"] = [{**g, "optimizers": _with_spaces(g.get("optimizers"), f"include[{i}].", file,
                                                            base_dir, errors, moved)}
                           if isinstance(g, Mapping) and "optimizers" in g else g
                           for i, g in enumerate(data["include"])]
    if data["optimizers"] is None:
        del data["optimizers"]
    if errors:
        raise ConfigError(errors)
    return data, moved


def _with_spaces(entries: Any, where: str, file: str, base_dir: str, errors: list[str],
                 moved: dict[str, str]) -> Any:
    """:func:`with_search_spaces` of one ``optimizers`` list at key path prefix ``where``: its
    entries with their files merged; ``errors`` and ``moved`` appended to."""
    if not isinstance(entries, list):
        return entries
    out = []
    for j, e in enumerate(entries):
        if isinstance(e, Mapping) and isinstance(e.get("search_space"), str):
            path = os.path.join(base_dir, e["search_space"])
            key = f"{file}: {where}optimizers[{j}].search_space"
            try:
                e, space = _merged_space(e, path)
                moved.update({f"{where}optimizers[{j}].hparams.{k}":
                              f"{where}optimizers[{j}].search_space ({k} from {e['search_space']})"
                              for k in space})
            except FileNotFoundError:
                errors.append(f"{key}: no such file: {path} (a path is relative to the config "
                              f"file's folder)")
            except (OSError, ValueError) as err:  # json.JSONDecodeError is a ValueError
                errors.append(f"{key}: {e['search_space']}: {err}")
        out.append(e)
    return out


def _merged_space(e: Mapping[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Optimizer entry ``e`` with the AlgoPerf search space in file ``path`` under its ``hparams``
    (its own win; a list of fixed points: one zipped grid), and the hyperparameters the file added.

    Raises:
      OSError, ValueError: the file cannot be read, is too large or is not a search space.
    """
    from harness.config.algoperf_space import points_from_algoperf, search_space_from_algoperf

    if os.path.getsize(path) > MAX_SEARCH_SPACE_BYTES:
        raise ValueError(f"{path} is larger than {MAX_SEARCH_SPACE_BYTES:,} bytes")
    with open(path, encoding="utf-8") as f:
        obj = json.load(f)
    own = e.get("hparams") if isinstance(e.get("hparams"), Mapping) else {}
    if isinstance(obj, list):  # AlgoPerf's list of fixed points: a zipped grid
        points = points_from_algoperf(obj)
        names = list(points[0])
        if any(list(p) != names for p in points):
            raise ValueError("every point of a list search space must name the same "
                             f"hyperparameters ({', '.join(names)})")
        space = {n: [p[n] for p in points] for n in names if n not in own}
        zips = [list(space)] if len(points) > 1 and len(space) > 1 else []
        return {**e, "hparams": {**space, **own}, "zip": [*e.get("zip", []), *zips]}, space
    space = {k: v for k, v in search_space_from_algoperf(obj).items() if k not in own}
    return {**e, "hparams": {**space, **own}}, space


def with_config_sources(regs: Registries, cfg: SweepConfig, file: str, base_dir: str) -> Registries:
    """``regs`` plus the builders of ``cfg``'s sourced optimizer and model entries
    (:func:`harness.config.optimizer_sources.resolve_sources`,
    :func:`harness.config.model_sources.resolve_model_sources`; paths relative to ``base_dir``).

    Raises:
      ConfigError: a ``source`` on a schedule or dataset entry, or one that cannot be used.
    """
    errors = [f"{file}: {prefix}{axis}[{j}].source: only optimizer and model entries take a source"
              for prefix, grid in [("", cfg)] + [(f"include[{i}].", g) for i, g in enumerate(cfg.include)]
              for axis in ("schedules", "datasets")
              for j, comp in enumerate(getattr(grid, axis) or []) if comp.source is not None]
    if errors:
        raise ConfigError(errors)
    sourced = {axis: any(c.source is not None for g in (cfg, *cfg.include) for c in getattr(g, axis) or [])
               for axis in ("optimizers", "models")}
    sourced["models"] |= any(d.model.source is not None for d in (cfg.define_workloads or {}).values())
    if not any(sourced.values()):
        return regs
    from harness.config.model_sources import resolve_model_sources
    from harness.config.optimizer_sources import resolve_sources, with_sources

    builders, errors = resolve_sources(cfg, file, base_dir) if sourced["optimizers"] else ({}, [])
    models, model_errors = resolve_model_sources(cfg, file, base_dir) if sourced["models"] else ({}, [])
    if errors or model_errors:
        raise ConfigError(errors + model_errors)
    return with_sources(regs, builders, models)


def config_registries(cfg: SweepConfig, regs: Registries) -> Registries:
    """``regs`` plus the builders of the optimizer and model entries of a loaded ``cfg`` that
    have a source (already resolved by :func:`load_config`)."""
    from harness.config.model_sources import model_source_builder
    from harness.config.optimizer_sources import source_builder, with_sources

    builders = {c.name: source_builder(c.source_ref, tuple(c.hparams))
                for g in (cfg, *cfg.include) for c in g.optimizers or [] if c.source_ref is not None}
    models = {c.name: model_source_builder(c.source_ref, c.name)
              for g in (cfg, *cfg.include) for c in g.models or [] if c.source_ref is not None}
    models.update({d.model.name: model_source_builder(d.model.source_ref, d.model.name)
                   for d in (cfg.define_workloads or {}).values() if d.model.source_ref is not None})
    return with_sources(regs, builders, models)
