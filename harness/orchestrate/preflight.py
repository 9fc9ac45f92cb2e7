"""Pre-flight: what trials need, checked once per distinct value before any work or write.

Traces: each model once per name, hyperparameters and dataset shape; each optimizer once per
*program*, that is name, int/bool/str hyperparameters, schedule (and its int/bool/str ones) and
steps, on each model: not once per step size (a traced value of the program), nor per other float
(each distinct float value is built, which runs the optimizer's and schedule's own checks of it,
:mod:`optimizers.common`, and only where that build fails is it traced to name the key).
:data:`TRACE_HOOKS` hears each trace. It checks:

- every dataset loads (a ``tfds:NAME`` that is not prepared fails here with the full
  "how to prepare it" message; small datasets are loaded, and the in-process executor reuses
  this process's cache);
- the trials left after ``include``/``exclude`` are not zero;
- every optimizer builds with its hyperparameters and schedule exactly as the trainer does
  (:func:`harness.train.build.make_opt_factory`, ``total_steps`` injected, a traced step size),
  returns one of the accepted forms (:func:`harness.train.build.as_train_optimizer`) and
  traces one update and its evaluation parameters on the parameter shapes of the trial's model
  (``jax.eval_shape``, no compute), a user's optimizer (``source:``) as a built-in; where that
  fails the optimizer is traced alone too, so the error names the optimizer or the schedule;
  an AlgoPerf submission (which builds its optimizer in its own loop) is imported, once per
  file, and its API checked (:func:`submission_problem`): a module it imports that is not
  installed, an exception or a missing function is its entry's ``source`` line; then, where
  nothing failed before it, it takes one real update on each task (model on dataset) it trains
  on (:func:`submission_step_problem`), so an error inside ``update_params``, also one on one
  dataset's shapes only, is refused here too;
- every model builds on its dataset's input shape and initialises abstractly
  (``jax.eval_shape`` of its ``init``; a sourced one, bounded, also applies once);
- no batch size exceeds its dataset's training examples, nor (``order: sequential`` token
  shards) every shard's tokens;
- ``parallelism``: ``devices`` does not exceed this process's visible devices
  (:func:`harness.execute.devices.visible_devices`), and with ``shard: batch`` every batch size divides
  over the device count (the message names the nearest valid sizes,
  :func:`harness.train.parallel.batch_problem`).
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.config.errors import ConfigError
from harness.config.hparams import builder_defaults, every_problem, exc_text, hp_path
from harness.config.load import config_registries
from harness.config.model_sources import sourced_model_params
from harness.config.registries import Registries, default_registries
from harness.config.schema import SweepConfig
from harness.config.workloads import needs_parts
from harness.orchestrate.preflight_checks import (
    check_state_form,
    hp_or_defaults,
    load_error,
    memory_problem,
    step_size_problem,
    submission_problem,
    submission_step_problem,
)
from harness.plan.expansion import TrialList, entry_paths, expand, expand_parts, hp_key

#: Called with the key of each abstract trace the pre-flight makes (a model's init: ``("model", ...)``;
#: an optimizer's update with its schedule, or alone: ``("opt", ...)``), before it is made; tests
#: count them: one trace per program, not per step size, none for a FINISHED trial.
TRACE_HOOKS: list[Callable[[tuple], None]] = []


def _traces(key: tuple) -> None:
    for hook in TRACE_HOOKS:
        hook(key)


def _program_hp(hp: Mapping[str, Any]) -> str:
    """The hyperparameters that set a traced program: the int, bool and str ones (a float, such as
    the step size or ``b1``, is a value in the same program; its checks run on every distinct value
    when the optimizer is built, :func:`preflight`)."""
    return hp_key({k: v for k, v in hp.items() if not isinstance(v, float)})


def model_key(s, ds) -> tuple:
    """What a model is traced once per: name, hyperparameters, the dataset's input shape and classes."""
    return ("model", s.model, hp_key(s.hparams("model")), ds.input_shape, ds.num_classes)


def _opt_keys(s, mkey: tuple) -> list[tuple]:
    """What an optimizer is traced once per on model ``mkey``'s parameters: with its schedule, and
    alone only when that fails; none for an AlgoPerf submission (:func:`submission_problem`)."""
    if s.optimizer_api == "algoperf":
        return []
    ohp = hp_key({k: v for k, v in s.hparams("optimizer").items() if k != "step_size"})
    return [("opt", s.optimizer, _program_hp(s.hparams("optimizer")), s.schedule,
             _program_hp(s.hparams("schedule")), s.steps, mkey),
            ("opt", s.optimizer, ohp, "none", hp_key({}), 0, mkey)]


class _AccidentError(Exception):
    """A user's code met :func:`harness.core.source.bounded` while traced; the text is its line."""


def _traced(s, ds) -> set[tuple]:
    """The traces trial ``s`` needs when nothing fails (its model's and its optimizer's build with
    its schedule): pre-flight's k/N."""
    mkey = model_key(s, ds)
    return {mkey, *_opt_keys(s, mkey)[:1]}


def _builds_words(keys: set[tuple]) -> str:
    """``"4 builds (1 model; 3 optimizer+schedule pairs on it)"``: what pre-flight's N counts (an
    optimizer is traced on each model it trains)."""
    m = sum(k[0] == "model" for k in keys)
    o = len(keys) - m
    return (f"{len(keys)} build{'s' * (len(keys) != 1)} ({m} model{'s' * (m != 1)}; {o} "
            f"optimizer+schedule pair{'s' * (o != 1)} on {'it' if m == 1 else 'them'})")


@dataclass
class _PartPreflight:
    """The pre-flight of each part of a config with workloads (:func:`expand_parts` calls it once
    per part, in :func:`harness.config.workloads.config_parts`' order), its stage lines naming the
    part when there are several (``mnist1d_cnn (2 of 3): pre-flight: ...``): each part counts its
    own builds and trials."""

    file: str
    registries: Registries | None
    on_stage: Callable[[str, str], None] | None
    names: list[str]
    finished: Callable[[list], Collection[str]] | None = None
    turn: int = 0

    def __call__(self, part: SweepConfig) -> TrialList:
        i, self.turn = self.turn, self.turn + 1
        say = self.on_stage if self.on_stage is None or len(self.names) == 1 else (
            functools.partial(self.say_part, i))
        return preflight(part, self.file, self.registries, say, self.finished)

    def say_part(self, i: int, name: str, text: str) -> None:
        """``on_stage`` with the part's name and place before ``text``."""
        self.on_stage(name, f"{self.names[i]} ({i + 1} of {len(self.names)}): {text}")


def _parts_said(cfg: SweepConfig, file: str, registries: Registries | None,
                on_stage: Callable[[str, str], None] | None) -> _PartPreflight:
    """The pre-flight of each part of ``cfg`` (:class:`_PartPreflight`), its parts' names."""
    from harness.config.workloads import config_parts

    names = [o.get("workload") or "the models x datasets grid" for _, o, _ in config_parts(cfg)]
    names = [f"{n} [{p.dtype}]" if p.dtype != "float32" else n
             for n, (_, _, p) in zip(names, config_parts(cfg), strict=True)]
    return _PartPreflight(file, registries, on_stage, names)


def preflight(cfg: SweepConfig, file: str, registries: Registries | None = None,
              on_stage: Callable[[str, str], None] | None = None,
              finished: Callable[[list], Collection[str]] | None = None) -> TrialList:
    """Everything a trial needs, checked once per distinct value before any work or MLflow write
    (the module's list); returns the expanded trials.

    Args:
      on_stage: ``on_stage(name, text)`` hears what it is doing: ``("datasets", "loading N datasets
        ...")``, then ``("pre-flight", "pre-flight: k of N distinct model/optimizer builds traced for
        T trials ...")`` after each trial (:class:`harness.orchestrate.progress.StageLine`); with
        workloads, each part's lines start ``WORKLOAD (i of n): ``.
      finished: called once per grid (per part with workloads) with its expanded trials; returns
        the ids a FINISHED run in the store holds: they are not traced (nor an AlgoPerf submission
        run), they trained with these values.

    Raises:
      harness.config.errors.ConfigError: one ``FILE: KEY.PATH: message`` line per problem.
    """
    if needs_parts(cfg):  # each part checked as its own grid (harness.config.workloads)
        return expand_parts(cfg, _parts_said(cfg, file, registries, on_stage))
    reg = config_registries(cfg, registries or default_registries())
    say = on_stage or (lambda name, text: None)
    loaded = _load_datasets(cfg, file, reg, say)
    specs = expand(cfg, n_train=lambda n, hp: loaded[(n, hp_key(hp))].num_train, file=file)
    if not specs:
        raise ConfigError([f"{file}: exclude: no trials left after include/exclude"])
    skip = frozenset(finished(specs)) if finished is not None else frozenset()
    run = _Checks(cfg, file, reg, specs)
    _check_parallelism(run)
    _check_trials(run, loaded, skip, say)
    if run.errors:
        raise ConfigError(run.errors)
    specs.param_shapes = run.avals  # each model's traced parameters: the dry run's step cost reads them
    return specs


@dataclass
class _Checks:
    """One grid's pre-flight: its trials, the error lines so far, the keys checked once (``seen``)
    and each model's parameter shapes (``avals``, the optimizers are checked on them)."""

    cfg: SweepConfig
    file: str
    reg: Registries
    specs: TrialList
    errors: list[str] = field(default_factory=list)
    seen: set[tuple] = field(default_factory=set)
    avals: dict[tuple, Any] = field(default_factory=dict)

    def once(self, key: tuple) -> bool:
        """True the first time ``key`` is asked, False after."""
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def path(self, s, entry: str) -> str:
        """The key path of trial ``s``'s entry of ``entry`` (``"optimizers"``: ``optimizers[1]``)."""
        return self.specs.origins[s.trial_id].paths[entry]


def _load_datasets(cfg: SweepConfig, file: str, reg: Registries,
                   say: Callable[[str, str], None]) -> dict[tuple[str, str], Any]:
    """Every dataset of ``cfg`` loaded, by ``(name, hp_key(hparams))``.

    Raises:
      harness.config.errors.ConfigError: one line per dataset that does not load (:func:`load_error`).
    """
    from harness.data.kinds import kind_of
    from harness.data.sources import DATASETS, load_dataset

    paths = entry_paths(cfg)["datasets"]
    say("datasets", f"loading {len(paths)} dataset{'' if len(paths) == 1 else 's'} of {file}")
    loaded: dict[tuple[str, str], Any] = {}
    errors: list[str] = []
    for (name, hpk), path in paths.items():
        hp = json.loads(hpk)
        try:
            if kind_of(name) is not None or reg.datasets is DATASETS:
                loaded[(name, hpk)] = load_dataset(name, **hp)
            else:  # an injected registry (tests)
                loaded[(name, hpk)] = reg.datasets[name](**hp)
        except Exception as e:
            errors.append(load_error(file, path, name, hp, e))
    if errors:
        raise ConfigError(errors)
    return loaded


def _check_parallelism(run: _Checks) -> None:
    """``parallelism``: the device count, then (``shard: batch``) each batch size against it.

    Raises:
      harness.config.errors.ConfigError: ``parallelism.devices`` this process cannot have.
    """
    par = run.cfg.parallelism
    if par.devices == 1:
        return
    from harness.train.parallel import batch_problem, resolve_devices

    try:
        n_dev = resolve_devices(par.devices)
    except ValueError as e:
        why = str(e).removeprefix("parallelism.devices ")  # the key is in the line's prefix
        raise ConfigError([f"{run.file}: parallelism.devices: {why}"]) from None
    if par.shard == "batch":
        for s in run.specs:
            if (msg := batch_problem(s.batch_size, n_dev)) is not None and run.once(("par", s.batch_size)):
                run.errors.append(f"{run.file}: batch_size: {msg.removeprefix('batch_size ')}")


def _progress_text(builds: str, n_trials: int, n_skip: int, n_done: int) -> str:
    """The pre-flight's stage line: the same words in a dry run and a real one."""
    skipped = f", {n_skip} already finished" if n_skip else ""
    return (f"pre-flight: tracing {builds} for {n_trials} trial{'s' * (n_trials != 1)}"
            f"{skipped}: {n_done} done (nothing is trained or written yet)")


def _check_trials(run: _Checks, loaded: Mapping[tuple[str, str], Any], skip: frozenset[str],
                  say: Callable[[str, str], None]) -> None:
    """Check each trial not in ``skip`` (a FINISHED run holds it: it trained with these values),
    saying k of N builds traced before each (a trial's count as done after it) and at the end."""
    specs = run.specs
    traced = {s.trial_id: _traced(s, loaded[(s.dataset, hp_key(s.hparams("dataset")))]) for s in specs
              if s.trial_id not in skip}
    builds = _builds_words(set().union(set(), *traced.values()))
    n_skip = sum(s.trial_id in skip for s in specs)
    done: set[tuple] = set()
    for s in specs:
        if s.trial_id in skip:
            continue
        say("pre-flight", _progress_text(builds, len(specs), n_skip, len(done)))
        done |= traced[s.trial_id]
        ds_key = (s.dataset, hp_key(s.hparams("dataset")))
        _check_trial(run, s, ds_key, loaded[ds_key])
    say("pre-flight", _progress_text(builds, len(specs), n_skip, len(done)))


def _check_trial(run: _Checks, s, ds_key: tuple[str, str], ds) -> None:
    """Trial ``s`` on dataset ``ds``: its batch size, model, step size, then its optimizer (an
    AlgoPerf submission: imported, its API checked, one update taken)."""
    if s.batch_size > ds.num_train and run.once(("bs", s.batch_size, ds_key)):
        bs_path = next((f"include[{i}].batch_size" for i, g in enumerate(run.cfg.include)
                        if g.batch_size and s.batch_size in g.batch_size
                        and s.batch_size not in run.cfg.batch_size), "batch_size")
        run.errors.append(f"{run.file}: {bs_path}: {s.batch_size} exceeds the {ds.num_train} training "
                          f"examples of dataset {s.dataset!r}")
    if getattr(ds.stream, "order_kind", "") == "sequential" and run.once(("seq", s.batch_size, ds_key)):
        try:  # upstream's reader takes each update's batch from one shard
            ds.stream.sequential_starts(0, 1, s.batch_size)
        except ValueError as e:
            run.errors.append(f"{run.file}: batch_size: {s.batch_size} on dataset {s.dataset!r}: {e}")
    mkey = model_key(s, ds)
    if run.once(mkey):
        _check_model(run, s, ds, mkey)
    if (msg := step_size_problem(s.hparams("optimizer"), s.dtype)) is not None and run.once(("lr", msg)):
        run.errors.append(f"{run.file}: {run.path(s, 'optimizers')}.hparams.step_size: {msg}")
    if s.optimizer_api == "algoperf":
        _check_submission(run, s, ds, mkey)
    else:
        _check_optimizer(run, s, mkey)


def _model_params(run: _Checks, s, ds, hp: Mapping[str, Any]) -> Any:
    """Trial ``s``'s model's parameter shapes on dataset ``ds``: ``jax.eval_shape`` of its ``init``;
    a user's factory is built, initialised and applied once, bounded (:func:`sourced_model_params`)."""
    import jax
    import jax.numpy as jnp

    if s.model_source:
        return sourced_model_params(run.reg.models[s.model], hp, ds, s, run.cfg.source_timeout_s)
    model = run.reg.models[s.model](input_shape=ds.input_shape, num_classes=ds.num_classes, **hp)
    key_aval = jax.ShapeDtypeStruct((2,), jnp.uint32)
    return jax.eval_shape(lambda k: model.init(k, (1, *ds.input_shape)), key_aval)[1]


def _check_model(run: _Checks, s, ds, mkey: tuple) -> None:
    """Trial ``s``'s model builds on ``ds`` and fits the device's memory; its shapes in ``run.avals``.
    A failure is reported once per model and hyperparameters, not per dataset."""
    mhp = s.hparams("model")
    mpath = run.path(s, "models")
    try:
        _traces(mkey)
        run.avals[mkey] = _model_params(run, s, ds, mhp)
        if (msg := memory_problem(run.avals[mkey])) is not None:
            run.errors.append(f"{run.file}: {hp_path(mpath, mhp, '')}: model {s.model!r} "
                              f"({hp_or_defaults(mhp)}) on dataset {s.dataset!r}: {msg}")
    except Exception as e:
        if not run.once(("model-err", s.model, hp_key(mhp), exc_text(e))):
            return
        defaults = builder_defaults("model", run.reg.models[s.model])
        attempt = functools.partial(_model_params, run, s, ds)
        for where, text in every_problem(attempt, mhp, defaults, e, mpath):
            if s.model_source and where == f"{mpath}.hparams":  # no one value: the factory
                where = f"{mpath}.source"
            run.errors.append(f"{run.file}: {where}: model {s.model!r} ({hp_or_defaults(mhp)}) on dataset "
                              f"{s.dataset!r} with input shape {ds.input_shape}: {text}")


def _check_submission(run: _Checks, s, ds, mkey: tuple) -> None:
    """An AlgoPerf submission (its own loop): imported once per file, on its first trial; then one
    update per file and task (model on dataset: a submission can break on one dataset's shapes
    only), where everything else passed so far."""
    sub = ("algoperf", s.optimizer_source_hash)
    msg = None
    if run.once(sub):
        msg = submission_problem(s, run.cfg.source_timeout_s)
        if msg is not None:
            run.seen.add((*sub, "bad"))
    if msg is None and (*sub, "bad") not in run.seen and not run.errors and run.once((*sub, mkey)):
        msg = submission_step_problem(s, ds)
    if msg is not None:
        run.errors.append(f"{run.file}: {run.path(s, 'optimizers')}.source: {msg}")


@contextlib.contextmanager
def _user_code(run: _Checks, s, opath: str):
    """A sourced optimizer's trace, bounded (:func:`harness.core.source.bounded`): an accident
    is an :class:`_AccidentError` whose text is the entry's error line."""
    if not s.optimizer_source:
        yield
        return
    from harness.core.source import SourceError, bounded, source_of

    ref = source_of(s)
    try:
        with bounded(f"source {ref.text!r}: tracing one update of {s.optimizer!r}",
                     run.cfg.source_timeout_s, ref.target if ref.is_file else ""):
            yield
    except SourceError as e:
        raise _AccidentError(f"{run.file}: {opath}.source: {e}") from None


def _one_update(make: Callable, lr: Any, params: Any) -> tuple[Any, Any]:
    """One update of the optimizer ``make(lr)`` builds, from its init on ``params``: its parameters
    and evaluation parameters (``None`` without ``eval_params_fn``); the state keeps its form."""
    opt = make(lr)
    state0 = opt.init_fn(params)
    state = opt.update_fn(0, params, state0)
    check_state_form(state0, state)
    ev = None if opt.eval_params_fn is None else opt.eval_params_fn(state)
    return opt.params_fn(state), ev


def _trace_update(run: _Checks, s, p: Any, ohp: Mapping[str, Any], sched: str = "none",
                  sched_hp: Mapping[str, Any] | None = None, steps: int = 0,
                  key: tuple | None = None) -> None:
    """Build trial ``s``'s optimizer with ``ohp`` and schedule ``sched`` as the trainer does
    (:func:`harness.train.build.make_opt_factory`, a traced step size) and trace one update on
    parameter shapes ``p``; a program ``key`` traced already is only built with these values."""
    import jax
    import jax.numpy as jnp

    from harness.train.build import base_step_size, make_opt_factory

    make = make_opt_factory(s.optimizer, ohp, sched, sched_hp or {}, steps, run.reg.optimizers,
                            run.reg.schedules)
    base_step_size(s.optimizer, ohp, run.reg.optimizers[s.optimizer])
    lr_aval = jax.ShapeDtypeStruct((), jnp.float32)
    if key is not None and key in run.seen:  # its program traced already: these values built
        jax.eval_shape(lambda lr: (make(lr), lr)[1], lr_aval)
        return
    if key is not None:
        run.seen.add(key)
    _traces(key or ("opt", s.optimizer, hp_key(ohp), sched, hp_key(sched_hp or {}), steps))
    jax.eval_shape(functools.partial(_one_update, make), lr_aval, p)


def _check_optimizer(run: _Checks, s, mkey: tuple) -> None:
    """Trial ``s``'s optimizer with its schedule (as the trainer builds it) on model ``mkey``'s
    shapes; alone only when that fails, to say which of the two failed. Each distinct set of values
    is built (the optimizer's and schedule's own checks); each program traced once."""
    import jax
    import jax.numpy as jnp

    ohp, opath = s.hparams("optimizer"), run.path(s, "optimizers")
    okey, alone_key = _opt_keys(s, mkey)
    if ("bad-opt", s.optimizer, hp_key(ohp)) in run.seen:
        return  # an optimizer that fails is reported once, on the optimizer
    shp = s.hparams("schedule")
    rules = mkey not in run.avals and any(n.endswith("_mask") and isinstance(v, str) for n, v in ohp.items())
    if rules or not run.once(("values", s.optimizer, alone_key[2], s.schedule, hp_key(shp), s.steps, mkey)):
        return  # (a mask's group rules need the model's parameter names: checked once it builds)
    p = run.avals.get(mkey, jax.ShapeDtypeStruct((2,), jnp.float32))  # a vector: the model failed
    try:
        with _user_code(run, s, opath):
            _trace_update(run, s, p, ohp, s.schedule, shp, s.steps, key=okey)
        return
    except _AccidentError as e:  # past source_timeout_s, os._exit, ...: once, on the source
        run.seen.add(("bad-opt", s.optimizer, hp_key(ohp)))
        run.errors.append(str(e))
        return
    except Exception as e:
        err = e
    if run.once(alone_key) and _optimizer_alone_fails(run, s, p, opath):
        return  # traced alone before (for another schedule) means it passed alone
    _report_schedule_error(run, s, opath, err)


def _optimizer_alone_fails(run: _Checks, s, p: Any, opath: str) -> bool:
    """Trace trial ``s``'s optimizer without a schedule; when that fails, report it (once, on the
    optimizer's hyperparameters) and return True."""
    ohp = s.hparams("optimizer")
    try:
        with _user_code(run, s, opath):
            _trace_update(run, s, p, ohp)
        return False
    except _AccidentError as e:
        run.seen.add(("bad-opt", s.optimizer, hp_key(ohp)))
        run.errors.append(str(e))
    except Exception as e:
        run.seen.add(("bad-opt", s.optimizer, hp_key(ohp)))
        odefaults = builder_defaults("optimizer", run.reg.optimizers[s.optimizer])
        attempt = functools.partial(_trace_update, run, s, p)
        for where, text in every_problem(attempt, ohp, odefaults, e, opath):
            if s.optimizer_source and text == exc_text(e) and not isinstance(e, (TypeError, ValueError)):
                # the user's code raised something whose message alone does not say what ('boom')
                text = f"{type(e).__name__}: {text}"
            run.errors.append(f"{run.file}: {where}: optimizer {s.optimizer!r} ({hp_or_defaults(ohp)}): "
                              f"{text}")
    return True


def _report_schedule_error(run: _Checks, s, opath: str, err: Exception) -> None:
    """The optimizer passed alone, so its schedule failed: on a sourced optimizer, its factory
    (once per line); else on the schedule (once per schedule values, not per optimizer)."""
    shp = s.hparams("schedule")
    if s.optimizer_source:  # the factory, given a schedule, failed
        line = (f"{run.file}: {opath}.source: optimizer {s.optimizer!r} ({s.optimizer_source}) "
                f"with schedule {s.schedule!r}: {exc_text(err)} (with a schedule the "
                f"factory's step_size is a function i -> step size: "
                f"optimizers.make_schedule(step_size) takes both)")
        if line not in run.errors:
            run.errors.append(line)
    elif run.once(("sched-err", run.path(s, "schedules"), hp_key(shp), s.steps, exc_text(err))):
        run.errors.append(f"{run.file}: {hp_path(run.path(s, 'schedules'), shp, str(err))}: schedule "
                          f"{s.schedule!r} ({hp_or_defaults(shp)}, total_steps={s.steps}) with optimizer "
                          f"{s.optimizer!r}: {exc_text(err)}")
