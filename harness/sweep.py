"""A sweep from config to MLflow: expansion, resume plan, orchestration, progress and summary.

- :func:`expand` turns a validated :class:`~harness.config.SweepConfig` into ordered, de-duplicated
  :class:`~harness.spec.TrialSpec`s (full grid, zipped axes, ``include`` sub-grids, ``exclude`` rules;
  seeds vary fastest so that batchable siblings are adjacent).
- :func:`sweep_id_of`: a stable id (12 hex of SHA-256 of the sweep name and its sorted trial ids),
  the tag ``harness.sweep_id`` on the parent and child runs; the same config gives the same id on
  every invocation, so a resumed sweep is one sweep.
- :func:`make_plan` reads the experiment's trial runs: a trial with a FINISHED run is done (skipped);
  FAILED, KILLED, RUNNING or missing ones are to do.
- :func:`group_units` forms work units (vmappable siblings when batching is on/auto).
- :func:`run_sweep` does it all: store preparation (before any worker), experiment, one parent run
  per invocation, the executor, a progress bar, and the end summary table.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import tracking
from harness.config import Component, Registries, SweepConfig, hparam_values, load_config
from harness.spec import Target, TrialSpec
from harness.worker import RunContext, TrialOutcome, outcome_from_run

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


def _entry_paths(cfg: SweepConfig) -> dict[str, dict[tuple[str, str], str]]:
    """Per component axis: ``(name, canonical hparams JSON)`` -> the config key path of the first
    entry that yields it (top level first, then ``include[i]``)."""
    out: dict[str, dict[tuple[str, str], str]] = {}
    grids: list[tuple[str, Any]] = [("", cfg)] + [(f"include[{i}].", g) for i, g in enumerate(cfg.include)]
    for axis in ("models", "optimizers", "schedules", "datasets"):
        m = out.setdefault(axis, {})
        for prefix, g in grids:
            for j, comp in enumerate(getattr(g, axis) or []):
                for hp in component_variants(comp):
                    m.setdefault((comp.name, _hp_key(hp)), f"{prefix}{axis}[{j}]")
    return out


def _hp_key(hp: Mapping[str, Any]) -> str:
    return json.dumps(hp, sort_keys=True, default=str)


def _hp_path(path: str, hp: Mapping[str, Any], msg: str) -> str:
    """``path.hparams.K`` when the message names exactly one of the entry's hyperparameters ``K``."""
    named = [k for k in hp if re.search(rf"\b{re.escape(k)}\b", msg)]
    return f"{path}.hparams.{named[0]}" if len(named) == 1 else f"{path}.hparams"


def _hp_text(hp: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in hp.items()) or "defaults"


def _exc_text(e: BaseException) -> str:
    if isinstance(e, KeyError) and e.args:
        return str(e.args[0])
    return str(e) or type(e).__name__


def preflight(cfg: SweepConfig, file: str, registries: Registries | None = None) -> list[TrialSpec]:
    """Everything a trial needs, checked once per distinct value before any work or MLflow write;
    returns the expanded trials.

    - every dataset loads (a ``tfds:NAME`` that is not prepared fails here with the full
      "how to prepare it" message; small datasets are loaded, and the in-process executor reuses
      this process's cache);
    - the trials left after ``include``/``exclude`` are not zero;
    - every optimizer builds with its hyperparameters and schedule exactly as the trainer does
      (:func:`harness.trainer._make_opt_factory`, ``total_steps`` injected, a traced step size) and
      traces one update (``jax.eval_shape``, no compute);
    - every model builds on its dataset's input shape and initialises abstractly
      (``jax.eval_shape`` of its ``init``);
    - no batch size exceeds its dataset's training examples.

    Raises:
      harness.config.ConfigError: one ``FILE: KEY.PATH: message`` line per problem.
    """
    import types

    import jax
    import jax.numpy as jnp

    from harness.config import ConfigError, default_registries
    from harness.data import DATASETS, TFDS_PREFIX, load_dataset
    from harness.trainer import _make_opt_factory, _step_size

    reg = registries or default_registries()
    paths = _entry_paths(cfg)
    errors: list[str] = []

    # datasets
    loaded: dict[tuple[str, str], Any] = {}
    for (name, hpk), path in paths["datasets"].items():
        hp = json.loads(hpk)
        try:
            if name.startswith(TFDS_PREFIX) or reg.datasets is DATASETS:
                loaded[(name, hpk)] = load_dataset(name, **hp)
            else:  # an injected registry (tests)
                loaded[(name, hpk)] = reg.datasets[name](**hp)
        except FileNotFoundError as e:  # DatasetNotPreparedError: its message says how to prepare it
            errors.append(f"{file}: {path}.name: {_exc_text(e)}")
        except Exception as e:
            errors.append(f"{file}: {_hp_path(path, hp, str(e))}: cannot load dataset {name!r} "
                          f"({_hp_text(hp)}): {_exc_text(e)}")
    if errors:
        raise ConfigError(errors)
    specs = expand(cfg, n_train=lambda n, hp: loaded[(n, _hp_key(hp))].num_train, file=file)
    if not specs:
        raise ConfigError([f"{file}: exclude: no trials left after include/exclude"])

    seen: set[tuple] = set()

    def once(key: tuple) -> bool:
        if key in seen:
            return False
        seen.add(key)
        return True

    p = jnp.zeros((2,), jnp.float32)
    lr_aval = jax.ShapeDtypeStruct((), jnp.float32)
    key_aval = jax.ShapeDtypeStruct((2,), jnp.uint32)
    for s in specs:
        ds_key = (s.dataset, _hp_key(s.hparams("dataset")))
        ds = loaded[ds_key]
        # batch size
        if s.batch_size > ds.num_train and once(("bs", s.batch_size, ds_key)):
            bs_path = next((f"include[{i}].batch_size" for i, g in enumerate(cfg.include)
                            if g.batch_size and s.batch_size in g.batch_size
                            and s.batch_size not in cfg.batch_size), "batch_size")
            errors.append(f"{file}: {bs_path}: {s.batch_size} exceeds the {ds.num_train} training "
                          f"examples of dataset {s.dataset!r}")
        # model
        mhp = s.hparams("model")
        if once(("model", s.model, _hp_key(mhp), ds.input_shape, ds.num_classes)):
            mpath = paths["models"].get((s.model, _hp_key(mhp)), "models")
            try:
                model = reg.models[s.model](input_shape=ds.input_shape, num_classes=ds.num_classes, **mhp)
                jax.eval_shape(lambda k, m=model, sh=ds.input_shape: m.init(k, (1, *sh)), key_aval)
            except Exception as e:
                if once(("model-err", s.model, _hp_key(mhp), _exc_text(e))):  # once, not per dataset
                    errors.append(f"{file}: {_hp_path(mpath, mhp, str(e))}: model {s.model!r} "
                                  f"({_hp_text(mhp)}) on dataset {s.dataset!r} with input shape "
                                  f"{ds.input_shape}: {_exc_text(e)}")
        # optimizer alone, then with its schedule (as the trainer builds it)
        ohp = s.hparams("optimizer")
        opath = paths["optimizers"].get((s.optimizer, _hp_key(ohp)), "optimizers")
        shp = s.hparams("schedule")
        spath = paths["schedules"].get((s.schedule, _hp_key(shp)), "schedules")
        for sched, sched_hp, steps in (("none", {}, 0), (s.schedule, shp, s.steps)):
            if ("bad-opt", s.optimizer, _hp_key(ohp)) in seen:
                break  # reported once, on the optimizer
            if not once(("opt", s.optimizer, _hp_key(ohp), sched, _hp_key(sched_hp), steps)):
                continue
            stand_in = types.SimpleNamespace(
                trial_id="preflight", optimizer=s.optimizer, schedule=sched, steps=steps,
                hparams=lambda kind, o=ohp, h=sched_hp: {"optimizer": o, "schedule": h}[kind])
            try:
                make = _make_opt_factory(stand_in, reg.optimizers, reg.schedules)
                _step_size(stand_in, reg.optimizers[s.optimizer])

                def one_update(lr, make=make):
                    opt = make(lr)
                    state = opt.init_fn(p)
                    return opt.params_fn(opt.update_fn(0, p, state))

                jax.eval_shape(one_update, lr_aval)
            except Exception as e:
                if sched == "none":
                    seen.add(("bad-opt", s.optimizer, _hp_key(ohp)))
                    errors.append(f"{file}: {_hp_path(opath, ohp, str(e))}: optimizer {s.optimizer!r} "
                                  f"({_hp_text(ohp)}): {_exc_text(e)}")
                else:
                    errors.append(f"{file}: {_hp_path(spath, shp, str(e))}: schedule {s.schedule!r} "
                                  f"({_hp_text(shp)}, total_steps={steps}) with optimizer "
                                  f"{s.optimizer!r}: {_exc_text(e)}")
    if errors:
        raise ConfigError(errors)
    return specs


def sweep_id_of(name: str, specs: list[TrialSpec]) -> str:
    """12 hex digits of SHA-256 over the sweep name and its sorted trial ids."""
    blob = json.dumps([name, sorted(s.trial_id for s in specs)])
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def group_units(specs: list[TrialSpec], batching: str,
                should_batch: Callable[[list[TrialSpec]], bool] | None = None) -> list[list[TrialSpec]]:
    """Work units: single trials (``off``) or groups of equal :meth:`TrialSpec.batch_key`
    (``on``; ``auto`` keeps a group only where ``should_batch(group)`` — by default
    ``harness.trainer.should_batch`` — says batching pays)."""
    if batching == "off":
        return [[s] for s in specs]
    groups: dict[tuple, list[TrialSpec]] = {}
    for s in specs:
        groups.setdefault(s.batch_key(), []).append(s)
    units = []
    for g in groups.values():
        if len(g) > 1 and batching == "auto":
            if should_batch is None:
                from harness.trainer import should_batch as sb

                should_batch = sb
            if not should_batch(g):
                units.extend([s] for s in g)
                continue
        units.append(g)
    return units


# --------------------------------------------------------------------------- plan


@dataclass
class Plan:
    """Which trials of a sweep are already done (a FINISHED run exists) and which will run."""

    specs: list[TrialSpec]
    todo: list[TrialSpec]
    done: dict[str, Any] = field(default_factory=dict)  # trial_id -> FINISHED run
    failed_before: set[str] = field(default_factory=set)

    @property
    def done_outcomes(self) -> list[TrialOutcome]:
        by_id = {s.trial_id: s for s in self.specs}
        out = []
        for tid, run in self.done.items():
            o = outcome_from_run(by_id[tid], run)
            o.skipped = True
            out.append(o)
        return out


def make_plan(specs: list[TrialSpec], client, experiment_id: str | None) -> Plan:
    """Split ``specs`` into done / to do from the runs stored in ``experiment_id`` (None: none)."""
    runs = tracking.trial_runs(client, experiment_id) if experiment_id else {}
    done, failed, todo = {}, set(), []
    for s in specs:
        rs = runs.get(s.trial_id, [])
        fin = [r for r in rs if r.info.status == "FINISHED"]
        if fin:
            done[s.trial_id] = fin[0]
        else:
            if any(r.info.status == "FAILED" for r in rs):
                failed.add(s.trial_id)
            todo.append(s)
    return Plan(specs, todo, done, failed)


# --------------------------------------------------------------------------- orchestration


@dataclass
class SweepSummary:
    """What :func:`run_sweep` returns: the outcomes of every trial of the sweep (skipped included)."""

    name: str
    sweep_id: str
    experiment_id: str | None
    parent_run_id: str | None
    tracking_uri: str
    outcomes: list[TrialOutcome]
    wall_s: float
    dry_run: bool = False

    def counts(self) -> dict[str, int]:
        c = {"finished": 0, "diverged": 0, "failed": 0, "skipped": 0}
        for o in self.outcomes:
            c[o.status] = c.get(o.status, 0) + 1
            c["skipped"] += o.skipped
        return c


def _print_plan(console, cfg: SweepConfig, plan: Plan, sweep_id: str, uri: str) -> None:
    from rich.table import Table

    t = Table(title=f"sweep {cfg.name!r} ({sweep_id}): {len(plan.specs)} trials, {len(plan.done)} done "
                    f"(skipped), {len(plan.todo)} to run", show_lines=False)
    for col in ("#", "trial_id", "run name", "dataset", "config", "steps", "state"):
        t.add_column(col)
    from harness.worker import config_label, run_name

    for i, s in enumerate(plan.specs):
        state = "done" if s.trial_id in plan.done else (
            "re-run (failed before)" if s.trial_id in plan.failed_before else "to run")
        t.add_row(str(i + 1), s.trial_id, run_name(s), s.dataset, config_label(s), str(s.steps), state)
    console.print(t)
    console.print(f"tracking: {uri}; batching: {cfg.batching}; executor: {cfg.executor} (jobs={cfg.jobs})")


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep (the parent run is ended KILLED): ``done`` of ``total`` trials have a
    FINISHED run in the store (earlier invocations included; see :func:`_n_done_after_interrupt`)."""

    def __init__(self, done: int, total: int):
        super().__init__(done, total)
        self.done, self.total = done, total


def _n_done_after_interrupt(specs: list[TrialSpec], client, experiment_id: str,
                            outcomes: list[TrialOutcome]) -> int:
    """How many of ``specs`` are done after a Ctrl-C, read back from the store as :func:`make_plan`
    does (a trial with a FINISHED run): with ``--jobs N`` units in flight finish while the pool shuts
    down and their outcomes never reach ``outcomes``. If the store cannot be read (or a second Ctrl-C
    comes), the trials in ``outcomes`` that did not fail."""
    try:
        return len(make_plan(specs, client, experiment_id).done)
    except (Exception, KeyboardInterrupt):
        return len({o.trial_id for o in outcomes if o.status != "failed"})


def run_sweep(config_path: str | Path, *, tracking_uri: str | None = None, jobs: int | None = None,
              executor: str | None = None, address: str | None = None, batching: str | None = None,
              dry_run: bool = False, quiet: bool = False, registries: Registries | None = None,
              console=None, executor_obj=None,
              executor_opts: dict[str, Any] | None = None) -> SweepSummary:
    """Validate, plan and run a sweep config; see the module docstring.

    Raises:
      harness.config.ConfigError: invalid config (nothing logged).
      harness.tracking.TrackingUnavailableError: the store cannot be reached (nothing trained).
      SweepInterrupted: Ctrl-C (a ``KeyboardInterrupt``); the parent run is ended KILLED.
    """
    from rich.console import Console

    if console is None:
        console = Console(stderr=False)
        if not console.is_terminal:  # piped or logged: do not squeeze the summary into 80 columns
            console = Console(stderr=False, width=140)
    t_start = time.perf_counter()
    cfg = load_config(config_path, registries)
    overrides: dict[str, Any] = {}
    if jobs is not None:
        overrides["jobs"] = jobs
    if executor is not None:
        overrides["executor"] = executor
    if address is not None:
        overrides["address"] = address
    if batching is not None:
        overrides["batching"] = batching
    if overrides:
        cfg = cfg.model_copy(update=overrides)
    if cfg.jobs > 1 and cfg.executor == "inprocess" and executor is None:
        cfg = cfg.model_copy(update={"executor": "process"})
    from harness.executors import known_executors

    if cfg.executor not in known_executors():
        from harness.registry import did_you_mean

        ex_names = known_executors()
        raise ValueError(f"unknown executor {cfg.executor!r}; valid choices: {', '.join(ex_names)}"
                         f"{did_you_mean(cfg.executor, ex_names)}")
    specs = preflight(cfg, str(config_path), registries)  # before the store is touched, dry run too
    sweep_id = sweep_id_of(cfg.name, specs)
    uri = tracking.resolve_tracking_uri(tracking_uri, cfg.tracking_uri)

    if dry_run:
        # Read-only: do not create a store that does not exist yet.
        exp_id = None
        client = None
        if tracking.is_server(uri) or not uri.startswith("sqlite:///") or Path(uri[10:]).exists():
            client = tracking.prepare_store(uri)
            exp = client.get_experiment_by_name(cfg.name)
            exp_id = exp.experiment_id if exp else None
        plan = make_plan(specs, client, exp_id) if client else Plan(specs, list(specs))
        _print_plan(console, cfg, plan, sweep_id, uri)
        return SweepSummary(cfg.name, sweep_id, exp_id, None, uri, plan.done_outcomes,
                            time.perf_counter() - t_start, dry_run=True)

    from harness.executors import get_executor

    ex = executor_obj or get_executor(cfg.executor, jobs=cfg.jobs, address=cfg.address,
                                      **(executor_opts or {}))
    if hasattr(ex, "validate"):  # e.g. Ray refuses a SQLite store with a remote cluster, before any write
        ex.validate(uri)
    client = tracking.prepare_store(uri)  # health check / schema creation, before any worker
    exp_id = tracking.get_or_create_experiment(client, cfg.name, uri)
    plan = make_plan(specs, client, exp_id)
    units = group_units(plan.todo, cfg.batching) if plan.todo else []

    parent_id = _start_parent(client, exp_id, cfg, config_path, specs, plan, sweep_id, uri)
    from harness import checkpoint

    ctx = RunContext(tracking_uri=uri, experiment_id=exp_id, parent_run_id=parent_id, sweep_id=sweep_id,
                     sweep=cfg.name, git_commit=tracking.git_commit(), measure_perf=cfg.measure_perf,
                     checkpoint_every=cfg.checkpoint_every or "default",
                     checkpoint_dir=checkpoint.root_for(uri, cfg.checkpoint_dir),
                     keep_final_checkpoint=cfg.keep_final_checkpoint)
    outcomes: list[TrialOutcome] = plan.done_outcomes
    status = "KILLED"
    try:
        _execute(console, ex, units, ctx, outcomes, plan, quiet)
        status = "FINISHED"
    except KeyboardInterrupt:
        raise SweepInterrupted(_n_done_after_interrupt(specs, client, exp_id, outcomes), len(specs)) from None
    except Exception:
        status = "FAILED"
        raise
    finally:
        _end_parent(client, parent_id, outcomes, time.perf_counter() - t_start, status,
                    flush_wait_s=getattr(ex, "flush_wait_s", 0.0))
    summary = SweepSummary(cfg.name, sweep_id, exp_id, parent_id, uri, outcomes,
                           time.perf_counter() - t_start)
    if not quiet:
        print_summary(console, summary)
    return summary


def _start_parent(client, exp_id, cfg, config_path, specs, plan, sweep_id, uri) -> str:
    from mlflow.entities import Param

    # An earlier invocation of this sweep that died leaves its parent RUNNING.
    stale = tracking.search_all(client, exp_id, f"tags.`{tracking.SWEEP_ID_TAG}` = '{sweep_id}' and "
                                f"tags.`{tracking.KIND_TAG}` = 'parent'")
    tracking.kill_stale(client, stale)
    tags = {tracking.SWEEP_TAG: cfg.name, tracking.SWEEP_ID_TAG: sweep_id, tracking.KIND_TAG: "parent",
            "git_commit": tracking.git_commit()}
    run = client.create_run(exp_id, tags=tags, run_name=f"sweep-{time.strftime('%Y%m%d-%H%M%S')}")
    rid = run.info.run_id
    params = [Param(k, str(v)) for k, v in {
        "config_file": str(config_path), "n_trials": len(specs), "n_todo": len(plan.todo),
        "n_skipped": len(plan.done), "executor": cfg.executor, "jobs": cfg.jobs, "batching": cfg.batching,
        "budget.steps": cfg.budget.steps, "budget.epochs": cfg.budget.epochs}.items()]
    client.log_batch(rid, params=params, synchronous=True)
    with tempfile.TemporaryDirectory(prefix="harness-") as d:
        dp = Path(d)
        (dp / "config.yaml").write_text(Path(config_path).read_text())
        (dp / "resolved_config.json").write_text(json.dumps(cfg.model_dump(mode="json"), indent=2))
        (dp / "trials.json").write_text(json.dumps(
            [{"trial_id": s.trial_id, **s.to_dict()} for s in specs], indent=2, default=str))
        client.log_artifacts(rid, d)
    return rid


def _end_parent(client, rid: str, outcomes: list[TrialOutcome], wall_s: float, status: str,
                flush_wait_s: float = 0.0) -> None:
    """End the parent run with the sweep's counts and its tracking cost: ``sweep/tracking_s`` is the
    MLflow time on the critical path (per-trial calls made before/after training plus the final wait
    for background writes), ``sweep/tracking_fraction`` that over the trials' wall-clock."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    counts = {"finished": 0, "diverged": 0, "failed": 0}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    ms = [Metric(f"sweep/n_{k}", float(v), now, 0) for k, v in counts.items()]
    ms.append(Metric("sweep/n_skipped", float(sum(o.skipped for o in outcomes)), now, 0))
    ms.append(Metric("sweep/wall_s", float(wall_s), now, 0))
    ran = [o for o in outcomes if not o.skipped and o.wall_seconds > 0]
    if ran:
        track = sum(o.tracking_seconds for o in ran) + flush_wait_s
        ms.append(Metric("sweep/tracking_s", track, now, 0))
        ms.append(Metric("sweep/tracking_fraction", track / sum(o.wall_seconds for o in ran), now, 0))
    try:
        client.log_batch(rid, metrics=ms, synchronous=True)
    finally:
        client.set_terminated(rid, status=status)


def _execute(console, ex, units, ctx, outcomes: list[TrialOutcome], plan: Plan, quiet: bool) -> None:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    n_todo = sum(len(u) for u in units)
    counts = {"finished": 0, "diverged": 0, "failed": 0}

    def desc() -> str:
        return (f"[green]{counts['finished']} ok[/] [yellow]{counts['diverged']} diverged[/] "
                f"[red]{counts['failed']} failed[/]")

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console,
                  disable=quiet, transient=False) as progress:
        task = progress.add_task(desc(), total=n_todo)
        if plan.done and not quiet:
            progress.console.print(f"{len(plan.done)} trials already finished: skipped")

        def on_done(batch: list[TrialOutcome]) -> None:
            for o in batch:
                outcomes.append(o)
                if not o.skipped:
                    counts[o.status] = counts.get(o.status, 0) + 1
                if not quiet:
                    progress.console.print(_outcome_line(o))
            progress.update(task, advance=len(batch), description=desc())

        ex.run(units, ctx, on_done)
        # a concurrent invocation of the same sweep (or a retried Ray task) may have finished a
        # trial too: keep one FINISHED run per trial
        tracking.dedupe_finished_runs(ctx.tracking_uri, ctx.experiment_id,
                                      {s.trial_id for unit in units for s in unit})


def _fmt(x: float | None, spec: str = ".4f") -> str:
    return "—" if x is None else format(x, spec)


def _outcome_line(o: TrialOutcome) -> str:
    color = {"finished": "green", "diverged": "yellow", "failed": "red"}.get(o.status, "white")
    extra = f"acc {_fmt(o.final_eval_accuracy)} loss {_fmt(o.final_eval_loss)}"
    if o.status == "failed":
        extra = o.reason
    elif o.status == "diverged":
        extra = o.reason or "diverged"
    from rich.markup import escape

    skipped = " (already done)" if o.skipped else ""
    return f"[{color}]{o.status:8}[/] {escape(f'{o.run_name} [{o.trial_id}]{skipped} {extra}')}"


def best_configs(outcomes: list[TrialOutcome]) -> list[dict[str, Any]]:
    """Best configuration per (dataset, model, optimizer), ranked exactly like the HTML report's
    leaderboard (:func:`reports.frame.best_configs`); the first difference decides: more seeds that
    reached the target; lower median seconds to target; more seeds finished (not diverged or
    failed); better mean final target metric (eval/accuracy, or eval/loss for loss targets)."""
    groups: dict[tuple, list[TrialOutcome]] = {}
    for o in outcomes:
        groups.setdefault((o.dataset, o.model, o.optimizer, o.config), []).append(o)
    best: dict[tuple, dict[str, Any]] = {}
    for (ds, model, opt, conf), os_ in groups.items():
        ok = [o for o in os_ if o.status == "finished"]
        metric = os_[0].target_metric
        vals = [(o.final_eval_loss if metric == "eval/loss" else o.final_eval_accuracy) for o in ok]
        vals = [v for v in vals if v is not None]
        row = {
            "dataset": ds, "model": model, "optimizer": opt, "config": conf, "metric": metric,
            "value": statistics.fmean(vals) if vals else None, "n": len(os_),
            "n_diverged": sum(o.status == "diverged" for o in os_),
            "n_failed": sum(o.status == "failed" for o in os_),
            "seconds_to_target": _median([o.seconds_to_target for o in ok]),
            "steps_to_target": _median([o.steps_to_target for o in ok]),
            "reached": sum(o.seconds_to_target is not None for o in ok),
            "examples_per_sec": _median([o.examples_per_sec for o in os_]),
        }
        sign = 1.0 if metric == "eval/loss" else -1.0
        row["_rank"] = (-row["reached"],
                        math.inf if row["seconds_to_target"] is None else row["seconds_to_target"],
                        -len(ok), math.inf if row["value"] is None else sign * row["value"])
        key = (ds, model, opt)
        if key not in best or row["_rank"] < best[key]["_rank"]:
            best[key] = row
    return [{k: v for k, v in r.items() if k != "_rank"} for r in best.values()]


def _median(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def print_summary(console, summary: SweepSummary) -> None:
    """The end-of-sweep table and the command that opens the MLflow UI."""
    from rich.table import Table

    c = summary.counts()
    t = Table(caption="best = most seeds reaching the target, then fastest median time to target, "
                      "then most seeds finished, then best mean final metric (as the HTML report)",
              title=f"{summary.name}: best configuration per model and optimizer "
                    f"({c['finished']} finished, {c['diverged']} diverged, {c['failed']} failed; "
                    f"{c['skipped']} from earlier runs; {summary.wall_s:.1f} s)")
    rows = sorted(best_configs(summary.outcomes), key=lambda r: (r["dataset"], r["model"], r["optimizer"]))
    one_ds = len({r["dataset"] for r in rows}) <= 1
    for col in ("dataset", "model", "optimizer", "best config", "final", "to target", "examples/s",
                "trials"):
        if col == "dataset" and one_ds:
            continue
        t.add_column(col, overflow="fold", no_wrap=col not in ("best config", "trials"),
                     ratio=3 if col == "best config" else None)
    for r in rows:
        short = {"eval/accuracy": "acc", "eval/loss": "loss"}.get(r["metric"], r["metric"])
        val = "—" if r["value"] is None else f"{short} {r['value']:.4f}"
        ttt = "not reached" if r["seconds_to_target"] is None else \
            f"step {r['steps_to_target']:g} · {r['seconds_to_target']:.3f} s"
        eps = "—" if r["examples_per_sec"] is None else f"{r['examples_per_sec']:,.0f}"
        trials = f"{r['n']}" + (f" ({r['n_diverged']} div, {r['n_failed']} fail)"
                                if r["n_diverged"] or r["n_failed"] else "")
        cells = [r["model"], r["optimizer"], r["config"], val, ttt, eps, trials]
        t.add_row(*(cells if one_ds else [r["dataset"], *cells]))
    console.print(t)
    uri_opt = "" if summary.tracking_uri == tracking.default_tracking_uri() else \
        f" --tracking-uri {summary.tracking_uri}"
    py = python_command()
    console.print(f"Open the MLflow UI: {py} -m harness ui --experiment {summary.name}{uri_opt}",
                  soft_wrap=True)
    console.print(f"HTML report:        {py} -m harness report --experiment {summary.name} "
                  f"--sweep {summary.sweep_id}{uri_opt}", soft_wrap=True)


def python_command() -> str:
    """How the user should invoke this interpreter: ``python`` when that resolves on ``PATH`` to
    ``sys.executable`` (e.g. an activated venv), else ``sys.executable`` relative to the working
    directory when it lies under it (``.venv/bin/python``), else its absolute path."""
    import os
    import shutil
    import sys

    exe = sys.executable
    found = shutil.which("python")
    # same bin directory and same binary (a venv's python and python3 are links to one file; the
    # system python that a venv links to is a different directory, so it does not count)
    if found and os.path.dirname(os.path.abspath(found)) == os.path.dirname(os.path.abspath(exe)) \
            and os.path.realpath(found) == os.path.realpath(exe):
        return "python"
    try:
        rel = Path(exe).relative_to(Path.cwd())
    except ValueError:
        return exe
    return str(rel)
