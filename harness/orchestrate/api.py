"""``harness.sweep(config, ...)``: the command line's ``sweep`` from Python (a notebook, a script).

The same validation, resume and guarantees as ``python -m harness sweep`` (it is
:func:`harness.orchestrate.run.run_sweep`), with Python's conventions for what goes wrong: a config, an
option or a ``only`` the harness cannot use is one exception type,
:class:`harness.config.errors.ConfigError` (``err.key_path``, ``err.key_paths``, one
``LABEL: KEY.PATH: message`` line each in ``str(err)``), raised, never ``SystemExit``. Failed
trials do not raise: they are counted in the :class:`SweepRun` it returns (as the command line
exits 1 and goes on). The package :mod:`harness` exposes :func:`sweep` as ``harness.sweep``.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.errors import ConfigError, UsageError
from harness.config.limits import DEFAULT_MAX_TRIALS

__all__ = ["SweepRun", "check_option_types", "sweep"]


_NAMED = ("tracking_uri", "jobs", "dry_run", "only", "quiet", "executor", "batching", "max_trials",
          "compile_cache")


def sweep(config: str | Path | Any, *, tracking_uri: str | None = None, jobs: int | None = None,
          dry_run: bool = False, only: Any = None, quiet: bool = False, executor: str | None = None,
          batching: str | None = None, max_trials: int = DEFAULT_MAX_TRIALS, compile_cache: bool = True,
          **options: Any) -> SweepRun:
    """Validate, plan and run a sweep config; return what happened.

    Args:
      config: a YAML file's path, a mapping (the YAML's keys: ``{"name": ..., "models": [...],
        ...}``) or a :class:`harness.config.schema.SweepConfig` from ``harness.config.load_config``
        (:mod:`harness.config.given`).
      tracking_uri: the MLflow store (``None``: ``MLFLOW_TRACKING_URI``, the config's
        ``tracking_uri``, else ``sqlite:///<cwd>/mlflow.db``).
      jobs: local worker processes (``None``: the config's ``jobs``, else 1).
      executor: ``inprocess`` | ``process`` | ``ray`` (``None``: the config's).
      dry_run: plan only: print the trials to run and why; nothing is trained or written.
      only: run part of the config: ``{"optimizer": "adam"}``, ``{"optimizer": ["adam", "sgd"],
        "seed": 0}`` or ``"optimizer=adam"`` (axes optimizer, model, dataset, schedule, seed,
        workload; :mod:`harness.orchestrate.only`), with the trial ids of the whole config.
      quiet: print nothing (no progress bar, no summary table, no dry-run plan).
      batching: ``auto`` | ``on`` | ``off``, ``True``/``False`` for on/off as in YAML (``None``: the
        config's).
      max_trials: refuse a config that expands to more trials.
      compile_cache: load compiled programs from the persistent XLA cache.
      options: :class:`harness.orchestrate.run.SweepOptions`' other fields (``console``, ``executor_opts``,
        ``registries``, ...).

    Returns:
      a :class:`SweepRun`: counts, ids, and ``.results()``.

    Raises:
      harness.config.errors.ConfigError: an invalid config or option, nothing trained or written
        (a :class:`harness.config.errors.UsageError` for ``tracking_uri``, ``executor``, ``jobs``,
        ``only``, and an option of the wrong type: ``max_trials`` not an int >= 1, ``dry_run``,
        ``quiet`` or ``compile_cache`` not a bool, ``console`` not a rich Console); ``err.key_path``
        names the key.
      harness.tracking.store_errors.TrackingUnavailableError: the store cannot be reached or used.
      harness.orchestrate.run.SweepInterrupted: interrupted (a ``KeyboardInterrupt``); calling again
        resumes.
      TypeError: ``config`` is neither a path, a mapping nor a SweepConfig, or an unknown option.
    """
    check_option_types(tracking_uri=tracking_uri, dry_run=dry_run, only=only, quiet=quiet,
                        max_trials=max_trials, compile_cache=compile_cache)
    _check_console(options.get("console"))
    _check_known(options)
    return SweepRun(_run(config, tracking_uri=tracking_uri, jobs=jobs, dry_run=dry_run, only=only,
                         quiet=quiet, executor=executor, batching=batching, max_trials=max_trials,
                         compile_cache=compile_cache, **options))


def _check_known(options: dict[str, Any]) -> None:
    """Raise TypeError, naming :func:`sweep`'s options, on one that is not a field of
    :class:`harness.orchestrate.run.SweepOptions` (said as sweep()'s, not as SweepOptions.__init__'s)."""
    import dataclasses

    from harness.orchestrate.run import SweepOptions

    known = {f.name for f in dataclasses.fields(SweepOptions)}
    for name in options:
        if name not in known:
            raise TypeError(f"harness.sweep() got an unexpected keyword argument {name!r}; its "
                            f"options: tracking_uri, jobs, dry_run, only, quiet, executor, batching, "
                            f"max_trials, compile_cache, {', '.join(sorted(known - set(_NAMED)))}")


def _run(config: Any, **options: Any):
    """:func:`harness.orchestrate.run.run_sweep`'s summary; what the command line reports as a usage error
    (exit 2) raised as a :class:`harness.config.errors.UsageError` naming its option."""
    from harness.execute.devices import DevicePlanError
    from harness.execute.executors import ExecutorUnavailableError
    from harness.orchestrate.run import run_sweep

    try:
        return run_sweep(config, **options)
    except ConfigError:
        raise
    except DevicePlanError as e:  # --jobs N's devices do not fit
        raise UsageError(f"jobs: {e}", "jobs") from e
    except ExecutorUnavailableError as e:  # e.g. executor ray without Ray installed
        raise UsageError(f"executor: {e}", "executor") from e
    except ValueError as e:  # what the command line reports as a usage error (exit 2), typed
        from harness.execute.ray_executor import RayTrackingError

        if isinstance(e, RayTrackingError):
            raise UsageError(f"tracking_uri: {e}", "tracking_uri") from e
        raise


#: What each of :func:`sweep`'s named options must be (``tracking_uri`` may be ``None``; ``jobs``,
#: ``executor`` and ``batching`` are checked by the config's own fields).
_OPTION_TYPES = {"tracking_uri": (str, "a string such as 'sqlite:///mlflow.db'"),
                 "max_trials": (int, "a whole number >= 1"), "dry_run": (bool, "True or False"),
                 "quiet": (bool, "True or False"), "compile_cache": (bool, "True or False"),
                 "alone": (bool, "True or False")}  # harness.reproduce's


def check_option_types(**given: Any) -> None:
    """Raise :class:`UsageError` (with the option's name as key path) for an option of the wrong
    type, before anything is read or run (a non-empty string such as ``dry_run="no"`` is true,
    and ``only=5`` would fail deep inside)."""
    import numbers
    from collections.abc import Mapping

    import numpy as np

    for name, value in given.items():
        if name == "only":  # a mapping, "optimizer=adam", or the command line's list of such strings
            listed = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
            if value is not None and not (isinstance(value, str | Mapping) or listed):
                raise UsageError(f"only: must be a mapping such as {{'optimizer': 'adam'}}, a string such as "
                                 f"'optimizer=adam' or a list of such strings, got {type(value).__name__} "
                                 f"{value!r}", "only")
            continue
        want, words = _OPTION_TYPES[name]
        if value is None and name == "tracking_uri":
            continue
        if want is bool:
            ok = isinstance(value, bool | np.bool_)
        elif want is int:
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_) and value >= 1
        else:
            ok = isinstance(value, want)
        if not ok:
            raise UsageError(f"{name}: must be {words}, got {type(value).__name__} {value!r}", name)


def _check_console(console: Any) -> None:
    """Raise :class:`UsageError` (key path ``console``) unless ``console`` is ``None`` or a
    ``rich.console.Console``: a string failed with ``AttributeError`` after the store was made."""
    from rich.console import Console

    if console is not None and not isinstance(console, Console):
        from harness.core.echo import short_repr

        raise UsageError(f"console: must be a rich.console.Console (None: stdout), got "
                         f"{type(console).__name__} {short_repr(console)}", "console")


@dataclass
class SweepRun:
    """What :func:`sweep` did.

    Attributes:
      summary: the :class:`harness.orchestrate.summary.SweepSummary` the command line prints.
      experiment: the sweep's name (its MLflow experiment); ``sweep_id``; ``tracking_uri``.
      counts: trials per status: ``finished``, ``diverged``, ``failed``, and ``skipped`` (finished
        by an earlier invocation, not trained again); ``dry_run``.
      trial_ids: every trial of this run (with ``only``, of that part), in the config's order.
    """

    summary: Any

    @property
    def experiment(self) -> str:
        return self.summary.name

    @property
    def sweep_id(self) -> str:
        return self.summary.sweep_id

    @property
    def tracking_uri(self) -> str:
        return self.summary.tracking_uri

    @property
    def dry_run(self) -> bool:
        return self.summary.dry_run

    @property
    def counts(self) -> dict[str, int]:
        return self.summary.counts()

    @property
    def trial_ids(self) -> list[str]:
        return list(self.summary.trial_ids) or [o.trial_id for o in self.summary.outcomes]

    def results(self, **kwargs: Any):
        """``harness.results(experiment, sweep=sweep_id, tracking_uri=...)`` of this sweep
        (:func:`reports.results.results`; ``kwargs`` go to it: ``clock=``, ``select_by=``).

        Raises:
          ValueError: a dry run (nothing was written), or what :func:`reports.results.results` raises.
        """
        if self.dry_run:
            raise ValueError("a dry run wrote nothing: run the sweep (dry_run=False) first")
        import harness  # the package's lazily imported results (harness.results): reports reads the store

        return harness.results(self.experiment, sweep=self.sweep_id, tracking_uri=self.tracking_uri,
                               **kwargs)

    def _line(self) -> str:
        c = self.counts
        what = "planned (dry run)" if self.dry_run else \
            f"{c['finished']} finished, {c['diverged']} diverged, {c['failed']} failed" + \
            (f", {c['stopped']} stopped early" if c.get("stopped") else "")
        return (f"sweep {self.experiment} ({self.sweep_id}): {len(self.trial_ids)} trials, {what}, "
                f"{c['skipped']} from earlier runs; store {self.tracking_uri}")

    def __repr__(self) -> str:
        return f"SweepRun({self._line()})"

    def _repr_html_(self) -> str:
        """The notebook view: the counts, then (after a real run) the results' leaderboard."""
        head = f"<p>{html.escape(self._line())}</p>"
        if self.dry_run or not self.summary.outcomes:
            return head
        return head + self.results()._repr_html_()
