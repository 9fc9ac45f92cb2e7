"""Pre-flight: what trials need, checked once per distinct value before any work or write."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from harness.config.errors import ConfigError
from harness.config.hparams import builder_defaults, every_problem, exc_text, hp_path
from harness.config.load import config_registries
from harness.config.model_sources import sourced_model_params
from harness.config.registries import Registries, default_registries
from harness.config.schema import SweepConfig
from harness.config.workloads import needs_parts
from harness.plan.expansion import TrialList, entry_paths, expand, expand_parts, hp_key, hp_text


def _load_error(file: str, path: str, name: str, hp: Mapping[str, Any], e: Exception) -> str:
    """The error line of a dataset that does not load: a ``tfds:`` dataset not prepared (its message
    says how) or a kind's data error at ``path.name``; one that names a hyperparameter at it."""
    from harness.data.kinds import dataset_error_key, kind_of

    if key := dataset_error_key(e):
        return f"{file}: {path}.hparams.{key}: {e}"
    if isinstance(e, FileNotFoundError) or (kind_of(name) is not None and isinstance(e, ValueError)):
        return f"{file}: {path}.name: {exc_text(e)}"
    return (f"{file}: {hp_path(path, hp, str(e))}: cannot load dataset {name!r} ({_hp_text(hp)}): "
            f"{exc_text(e)}")


def _hp_text(hp: Mapping[str, Any]) -> str:
    return hp_text(hp) or "defaults"


#: A step holds the parameters, their gradients and the optimizer's state: at least this many
#: copies of the parameters (Adam: 4; SOAP and Shampoo more).
MIN_PARAMETER_COPIES = 4


def device_memory_bytes() -> int | None:
    """The first device's memory: allocator limit (accelerator) or physical memory (CPU); or None."""
    import jax

    stats = None
    with contextlib.suppress(Exception):
        stats = jax.devices()[0].memory_stats()
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    with contextlib.suppress(ValueError, OSError, AttributeError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return None


def memory_problem(params: Any) -> str | None:
    """Why a model of ``params`` (shape/dtype structs) cannot train here (:data:`MIN_PARAMETER_COPIES`
    copies exceed the device's memory), with the figures; else ``None``."""
    import jax
    import numpy as np

    leaves = jax.tree.leaves(params)
    count = sum(int(np.prod(a.shape)) for a in leaves)
    nbytes = sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in leaves)
    limit = device_memory_bytes()
    if limit is None or nbytes * MIN_PARAMETER_COPIES <= limit:
        return None
    return (f"{count:,} parameters ({nbytes / 1e9:,.1f} GB); with gradients and optimizer state a "
            f"step needs at least {MIN_PARAMETER_COPIES * nbytes / 1e9:,.1f} GB, more than the "
            f"{limit / 1e9:,.1f} GB of device memory")


def step_size_problem(optimizer_hparams: Mapping[str, Any], dtype: str) -> str | None:
    """Why the trial's ``step_size`` is 0 or infinite in its parameters' dtype (float32 under
    mixed precision), or ``None``."""
    import numpy as np

    lr = optimizer_hparams.get("step_size")
    if not isinstance(lr, float) or lr == 0.0:
        return None
    store = np.float32 if dtype in ("bfloat16", "float16", "float32") else np.dtype(dtype).type
    with np.errstate(over="ignore", under="ignore"):
        v = store(lr)
    if v == 0 or not np.isfinite(v):
        info = np.finfo(store)
        return (f"{lr!r} is {'0' if v == 0 else 'infinite'} in {np.dtype(store).name}, the dtype "
                f"training uses (its positive range is {float(info.tiny):.3g} to {float(info.max):.3g})")
    return None


#: Called with the key of each abstract trace the pre-flight makes (a model's init: ``("model", ...)``;
#: an optimizer's update with its schedule, or alone: ``("opt", ...)``), before it is made; tests
#: count them. One trace per program, not per step size, none for a FINISHED trial.
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


def submission_problem(s, limit_s: float | None = None) -> str | None:
    """Why trial ``s``'s AlgoPerf submission cannot train, or ``None``: the file's shipped text run
    as a worker runs it (:func:`harness.train.algoperf.submission.load_submission`: the bounds of
    every user file, :func:`harness.core.source.bounded` with ``limit_s`` seconds: exceptions,
    ``SystemExit``, ``os._exit``, a ``KeyboardInterrupt``, a change of directory or the time limit
    as one line with the file's line; a missing module says where to install it) and its API
    checked (the functions AlgoPerf's runner calls, each callable with the arguments it passes)."""
    from harness.core.source import SourceError, source_of
    from harness.train.algoperf.submission import load_submission

    try:
        load_submission(source_of(s), limit_s)
    except SourceError as e:
        return str(e)
    return None


def submission_step_problem(s, ds) -> str | None:
    """One line saying why AlgoPerf submission trial ``s`` cannot take its first step on dataset
    ``ds`` (a :class:`harness.data.dataset.Dataset`), else ``None``. Importing the file and checking
    its API (:func:`submission_problem`) does not run ``init_optimizer_state``, ``data_selection`` or
    ``update_params``: an ``import`` inside one of them, a shape error or a wrong return only showed
    once the store existed and the trial failed. So the pre-flight builds the trial as a worker does
    (:func:`harness.train.algoperf.runner.first_update`, no checkpoints, nothing written) and takes
    one real update (its own ``jit``: there is nothing to trace abstractly), each call into the
    submission bounded as in training (the runner's limit of one call, not ``source_timeout_s``:
    the first update compiles)."""
    from harness.core.source import SourceError
    from harness.train.algoperf.runner import first_update

    where = f"source {s.optimizer_source!r}: its first update (on {s.model} · {s.dataset})"
    try:
        first_update(s, ds)
    except SourceError as e:
        return f"source {s.optimizer_source!r}: {e}"[:500]
    except Exception as e:  # the submission's own error, as one line
        first = str(e).splitlines()[0] if str(e) else ""
        return f"{where} raised {type(e).__name__}: {first}"[:500]
    return None


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


def _parts_said(cfg: SweepConfig, file: str, registries: Registries | None,
                on_stage: Callable[[str, str], None] | None,
                finished: Callable[[list], Collection[str]] | None = None
                ) -> Callable[[SweepConfig], TrialList]:
    """The pre-flight of each part of a config with workloads (:func:`expand_parts` calls it once
    per part, in :func:`harness.config.workloads.config_parts`' order), its stage lines naming the
    part when there are several (``mnist1d_cnn (2 of 3): pre-flight: ...``): each part counts its
    own builds and trials."""
    from harness.config.workloads import config_parts

    names = [o.get("workload") or "the models x datasets grid" for _, o, _ in config_parts(cfg)]
    names = [f"{n} [{p.dtype}]" if p.dtype != "float32" else n
             for n, (_, _, p) in zip(names, config_parts(cfg), strict=True)]
    turn = iter(range(len(names)))

    def one(part: SweepConfig) -> TrialList:
        i = next(turn)
        say = on_stage if on_stage is None or len(names) == 1 else (
            lambda name, text: on_stage(name, f"{names[i]} ({i + 1} of {len(names)}): {text}"))
        return preflight(part, file, registries, say, finished)

    return one


def preflight(cfg: SweepConfig, file: str, registries: Registries | None = None,
              on_stage: Callable[[str, str], None] | None = None,
              finished: Callable[[list], Collection[str]] | None = None) -> TrialList:
    """Everything a trial needs, checked once per distinct value before any work or MLflow write;
    returns the expanded trials. ``on_stage(name, text)``, when given, hears what it is doing:
    ``("datasets", "loading N datasets ...")``, then ``("pre-flight", "pre-flight: k of N distinct
    model/optimizer builds traced for T trials ...")`` after each trial, N the distinct models and
    optimizer builds it traces and k those done (:class:`harness.orchestrate.progress.StageLine` shows
    them); with workloads, each part's lines start ``WORKLOAD (i of n): ``. ``finished(specs)``, when
    given, is called once per grid (per part with workloads) with its expanded trials and returns the
    ids of those a FINISHED run in the store holds already: they are not traced (nor an AlgoPerf
    submission run), they trained with these values.

    Traces: each model once per name, hyperparameters and dataset shape; each optimizer once per
    *program*, that is name, int/bool/str hyperparameters, schedule (and its int/bool/str ones) and
    steps, on each model: not once per step size (a traced value of the program), nor per other float
    (each distinct float value is built, which runs the optimizer's and schedule's own checks of it,
    :mod:`optimizers.common`, and only where that build fails is it traced to name the key).
    :data:`TRACE_HOOKS` hears each trace.

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
    - every model builds on its dataset's input shape and initialises abstractly (a sourced one,
      bounded, also applies once: :func:`harness.config.model_sources.sourced_model_params`);
    - no batch size exceeds its dataset's training examples;
    - ``parallelism``: ``devices`` does not exceed this process's visible devices
      (:func:`harness.execute.devices.visible_devices`), and with ``shard: batch`` every batch size divides
      over the device count (the message names the nearest valid sizes,
      :func:`harness.train.parallel.batch_problem`).

    Raises:
      harness.config.errors.ConfigError: one ``FILE: KEY.PATH: message`` line per problem.
    """
    import jax
    import jax.numpy as jnp

    if needs_parts(cfg):  # each part checked as its own grid (harness.config.workloads)
        return expand_parts(cfg, _parts_said(cfg, file, registries, on_stage))
    from harness.data.kinds import kind_of
    from harness.data.sources import DATASETS, load_dataset
    from harness.train.build import base_step_size, make_opt_factory

    reg = config_registries(cfg, registries or default_registries())
    paths = entry_paths(cfg)
    errors: list[str] = []
    say = on_stage or (lambda name, text: None)

    # datasets
    n_ds = len(paths["datasets"])
    say("datasets", f"loading {n_ds} dataset{'' if n_ds == 1 else 's'} of {file}")
    loaded: dict[tuple[str, str], Any] = {}
    for (name, hpk), path in paths["datasets"].items():
        hp = json.loads(hpk)
        try:
            if kind_of(name) is not None or reg.datasets is DATASETS:
                loaded[(name, hpk)] = load_dataset(name, **hp)
            else:  # an injected registry (tests)
                loaded[(name, hpk)] = reg.datasets[name](**hp)
        except Exception as e:
            errors.append(_load_error(file, path, name, hp, e))
    if errors:
        raise ConfigError(errors)
    specs = expand(cfg, n_train=lambda n, hp: loaded[(n, hp_key(hp))].num_train, file=file)
    if not specs:
        raise ConfigError([f"{file}: exclude: no trials left after include/exclude"])

    skip = frozenset(finished(specs)) if finished is not None else frozenset()
    seen: set[tuple] = set()

    @contextlib.contextmanager
    def user_code(s, opath: str):
        """A sourced optimizer's trace, bounded (:func:`harness.core.source.bounded`): an accident
        is an :class:`_AccidentError` whose text is the entry's error line."""
        if not s.optimizer_source:
            yield
            return
        from harness.core.source import SourceError, bounded, source_of

        ref = source_of(s)
        try:
            with bounded(f"source {ref.text!r}: tracing one update of {s.optimizer!r}",
                         cfg.source_timeout_s, ref.target if ref.is_file else ""):
                yield
        except SourceError as e:
            raise _AccidentError(f"{file}: {opath}.source: {e}") from None

    def once(key: tuple) -> bool:
        if key in seen:
            return False
        seen.add(key)
        return True

    # parallelism: the device count, then each batch size against it
    par = cfg.parallelism
    if par.devices != 1:
        from harness.train.parallel import batch_problem, resolve_devices

        try:
            n_dev = resolve_devices(par.devices)
        except ValueError as e:
            why = str(e).removeprefix("parallelism.devices ")  # the key is in the line's prefix
            raise ConfigError([f"{file}: parallelism.devices: {why}"]) from None
        if par.shard == "batch":
            for s in specs:
                if (msg := batch_problem(s.batch_size, n_dev)) is not None and once(("par", s.batch_size)):
                    errors.append(f"{file}: batch_size: {msg.removeprefix('batch_size ')}")

    avals: dict[tuple, Any] = {}  # each model's parameter shapes: the optimizers are checked on them
    lr_aval = jax.ShapeDtypeStruct((), jnp.float32)
    key_aval = jax.ShapeDtypeStruct((2,), jnp.uint32)
    # progress: the distinct models and optimizer builds traced (k/N); a trial's count as done after it
    traced = {s.trial_id: _traced(s, loaded[(s.dataset, hp_key(s.hparams("dataset")))]) for s in specs
              if s.trial_id not in skip}
    builds = _builds_words(set().union(set(), *traced.values()))
    n_skip = sum(s.trial_id in skip for s in specs)
    skipped = f", {n_skip} already finished" if n_skip else ""
    done: set[tuple] = set()

    def progress() -> None:  # the same words in a dry run and a real one: the pre-flight is one
        say("pre-flight", f"pre-flight: tracing {builds} for {len(specs)} trial{'s' * (len(specs) != 1)}"
                          f"{skipped}: {len(done)} done (nothing is trained or written yet)")

    for s in specs:
        if s.trial_id in skip:  # a FINISHED run holds it: it trained with these values
            continue
        progress()
        done |= traced[s.trial_id]
        ds_key = (s.dataset, hp_key(s.hparams("dataset")))
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
        mkey = model_key(s, ds)
        if once(mkey):
            mpath = specs.origins[s.trial_id].paths["models"]

            def model_params(hp, name=s.model, ds=ds, s=s):
                if s.model_source:  # a user's factory: built, initialised and applied once, bounded
                    return sourced_model_params(reg.models[name], hp, ds, s, cfg.source_timeout_s)
                model = reg.models[name](input_shape=ds.input_shape, num_classes=ds.num_classes, **hp)
                return jax.eval_shape(lambda k, m=model, sh=ds.input_shape: m.init(k, (1, *sh)),
                                      key_aval)[1]

            try:
                _traces(mkey)
                avals[mkey] = model_params(mhp)
                if (msg := memory_problem(avals[mkey])) is not None:
                    errors.append(f"{file}: {hp_path(mpath, mhp, '')}: model {s.model!r} "
                                  f"({_hp_text(mhp)}) on dataset {s.dataset!r}: {msg}")
            except Exception as e:
                if once(("model-err", s.model, hp_key(mhp), exc_text(e))):  # once, not per dataset
                    defaults = builder_defaults("model", reg.models[s.model])
                    for where, text in every_problem(model_params, mhp, defaults, e, mpath):
                        if s.model_source and where == f"{mpath}.hparams":  # no one value: the factory
                            where = f"{mpath}.source"
                        errors.append(f"{file}: {where}: model {s.model!r} ({_hp_text(mhp)}) on dataset "
                                      f"{s.dataset!r} with input shape {ds.input_shape}: {text}")
        if (msg := step_size_problem(s.hparams("optimizer"), s.dtype)) is not None and \
                once(("lr", msg)):
            errors.append(f"{file}: {specs.origins[s.trial_id].paths['optimizers']}.hparams.step_size: "
                          f"{msg}")
        if s.optimizer_api == "algoperf":  # its own loop: imported, its API checked, one update taken
            sub = ("algoperf", s.optimizer_source_hash)
            msg = None
            if once(sub):  # imported once per file, on its first trial
                msg = submission_problem(s, cfg.source_timeout_s)
                if msg is not None:
                    seen.add((*sub, "bad"))
            # one update per file and task (model on dataset: a submission can break on one
            # dataset's shapes only), where everything else passed so far
            if msg is None and (*sub, "bad") not in seen and not errors and once((*sub, mkey)):
                msg = submission_step_problem(s, ds)
            if msg is not None:
                errors.append(f"{file}: {specs.origins[s.trial_id].paths['optimizers']}.source: {msg}")
            continue
        # the optimizer with its schedule (as the trainer builds it); alone only when that fails, to
        # say which of the two failed (an optimizer alone was traced for every trial before: a
        # third of the traces, none of them needed when the builds pass)
        ohp = s.hparams("optimizer")
        opath = specs.origins[s.trial_id].paths["optimizers"]
        shp = s.hparams("schedule")
        spath = specs.origins[s.trial_id].paths["schedules"]
        okey, alone_key = _opt_keys(s, mkey)
        if ("bad-opt", s.optimizer, hp_key(ohp)) in seen:
            continue  # an optimizer that fails is reported once, on the optimizer
        # each distinct set of values is built (the optimizer's and schedule's own checks of them);
        # each program (its int/bool/str hyperparameters) is traced once, on its first values; the
        # step size is not a value of the build (make takes it traced; checked above)
        rules = mkey not in avals and any(n.endswith("_mask") and isinstance(v, str) for n, v in ohp.items())
        if rules or not once(("values", s.optimizer, alone_key[2], s.schedule, hp_key(shp), s.steps, mkey)):
            continue  # (a mask's group rules need the model's parameter names: checked once it builds)
        # the model's parameter shapes; a vector when the model failed (reported above)
        p = avals.get(mkey, jax.ShapeDtypeStruct((2,), jnp.float32))

        def trace_update(ohp, sched="none", sched_hp=None, steps=0, p=p, s=s, key=None):
            make = make_opt_factory(s.optimizer, ohp, sched, sched_hp or {}, steps, reg.optimizers,
                                    reg.schedules)
            base_step_size(s.optimizer, ohp, reg.optimizers[s.optimizer])
            if key is not None and key in seen:  # its program traced already: these values built
                jax.eval_shape(lambda lr: (make(lr), lr)[1], lr_aval)
                return
            if key is not None:
                seen.add(key)
            _traces(key or ("opt", s.optimizer, hp_key(ohp), sched, hp_key(sched_hp or {}), steps))

            def one_update(lr, params, make=make):
                opt = make(lr)
                state0 = opt.init_fn(params)
                state = opt.update_fn(0, params, state0)
                before, after = jax.tree.structure(state0), jax.tree.structure(state)
                if before != after:  # the trainer's scan carries the state: it must keep its form
                    raise TypeError(f"update_fun returned a state of another structure than "
                                    f"init_fun's: {after} after {before}")
                for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(state0)[0],
                                        jax.tree.leaves(state), strict=True):  # and each leaf's type
                    ta, tb = (jnp.shape(a), jnp.result_type(a)), (jnp.shape(b), jnp.result_type(b))
                    if ta != tb:
                        where = re.sub(r"<flat index (\d+)>", r"\1", jax.tree_util.keystr(path))
                        raise TypeError(f"update_fun returned a state whose leaf "
                                        f"{where or '(the state)'} is "
                                        f"{tb[1]}{list(tb[0])} where init_fun's is {ta[1]}{list(ta[0])}: "
                                        f"the trainer carries the state from step to step, so each "
                                        f"leaf must keep its shape and dtype")
                ev = None if opt.eval_params_fn is None else opt.eval_params_fn(state)
                return opt.params_fn(state), ev

            jax.eval_shape(one_update, lr_aval, p)

        try:
            with user_code(s, opath):
                trace_update(ohp, s.schedule, shp, s.steps, key=okey)
            continue
        except _AccidentError as e:  # past source_timeout_s, os._exit, ...: once, on the source
            seen.add(("bad-opt", s.optimizer, hp_key(ohp)))
            errors.append(str(e))
            continue
        except Exception as e:
            err = e
        if once(alone_key):  # traced alone before (for another schedule) means it passed alone
            try:
                with user_code(s, opath):
                    trace_update(ohp)
            except _AccidentError as e:
                seen.add(("bad-opt", s.optimizer, hp_key(ohp)))
                errors.append(str(e))
                continue
            except Exception as e:
                seen.add(("bad-opt", s.optimizer, hp_key(ohp)))
                odefaults = builder_defaults("optimizer", reg.optimizers[s.optimizer])
                for where, text in every_problem(trace_update, ohp, odefaults, e, opath):
                    errors.append(f"{file}: {where}: optimizer {s.optimizer!r} ({_hp_text(ohp)}): "
                                  f"{text}")
                continue
        if s.optimizer_source:  # the factory, given a schedule, failed
            line = (f"{file}: {opath}.source: optimizer {s.optimizer!r} ({s.optimizer_source}) "
                    f"with schedule {s.schedule!r}: {exc_text(err)} (with a schedule the "
                    f"factory's step_size is a function i -> step size: "
                    f"optimizers.make_schedule(step_size) takes both)")
            if line not in errors:
                errors.append(line)
        elif once(("sched-err", spath, hp_key(shp), s.steps, exc_text(err))):  # not per optimizer
            errors.append(f"{file}: {hp_path(spath, shp, str(err))}: schedule {s.schedule!r} "
                          f"({_hp_text(shp)}, total_steps={s.steps}) with optimizer "
                          f"{s.optimizer!r}: {exc_text(err)}")
    progress()
    if errors:
        raise ConfigError(errors)
    specs.param_shapes = avals  # each model's traced parameters: the dry run's step cost reads them
    return specs
