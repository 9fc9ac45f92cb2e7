"""The ``HARNESS_*`` environment variables a sweep reads: their names, their rules, and one check of
them all (:func:`check_environment`) that :func:`harness.config.load.load_config` runs with the
config, before anything is read from or written to a store.

Each variable and what it takes (empty counts as unset):

- ``HARNESS_CHECKPOINT_EVERY``: a ``checkpoint_every`` cadence that overrides the config's
  (:func:`harness.core.cadence.parse_every`: ``500``, ``"500 steps"``, ``"90s"``, ``"10min"``, ``off``).
- ``HARNESS_CHECKPOINT_DIR``, ``HARNESS_CACHE_DIR``, ``HARNESS_SPOOL_DIR``: a folder that is there or
  can be made (its nearest existing ancestor a writable folder); the checkpoint root may also be
  a URL Orbax writes (``gs://...``), which is not checked here.
- ``HARNESS_COMPILE_CACHE``, ``HARNESS_STORE_TEMPLATE``, ``HARNESS_SQLITE_WAL``: on (``1``, ``on``,
  ``true``, ``yes``) or off (``0``, ``off``, ``false``, ``no``) (:func:`switch`).
- ``HARNESS_COMPILE_CACHE_MAX_BYTES``: bytes in [1 MiB, 1 PiB] (:func:`compile_cache_max_bytes`).
- ``HARNESS_BATCH``: what ``batching: auto`` decides for every group: ``on`` (``always``, ``1``,
  ``true``, ``yes``), ``off`` (``never``, ``0``, ``false``, ``no``) or ``auto`` (measured;
  :mod:`harness.train.batching` reads it).
- ``HARNESS_CLAIMS``: ``1`` (per-trial claims, the default) or ``0`` (:mod:`harness.execute.claims`).
- ``HARNESS_XLA_CPU_THREADS``: ``1`` (the default), a positive number of threads, or ``all``: the size
  of XLA's CPU thread pool, set when :mod:`harness` is imported (:mod:`harness.core.xla_threads`).

``HARNESS_DEVICE_IDS`` needs JAX's device list: the executor checks it, also before any write
(:meth:`harness.execute.executors.Executor.validate`). A refused value is one line naming the
variable, its value (at most :data:`harness.core.echo.MAX_ECHO` characters) and what is valid:
:class:`EnvSettingError`, which the ``sweep`` command prints as ``error: LINE`` with exit 2.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from harness.config.errors import ConfigError
from harness.core import env_switches
from harness.core.cache_files import CACHE_ENV
from harness.core.cadence import parse_every
from harness.core.env_switches import (
    CHECKPOINT_DIR,
    CHECKPOINT_EVERY,
    COMPILE_CACHE,
    COMPILE_CACHE_MAX_BYTES,
    DEFAULT_MAX_BYTES,
    MAX_BYTES,
    MIN_BYTES,
    OFF,
    ON,
    shown,
)
from harness.core.xla_threads import ENV as XLA_CPU_THREADS
from harness.core.xla_threads import threads_setting

__all__ = ["BATCH", "CACHE_DIR", "CHECKPOINT_DIR", "CHECKPOINT_EVERY", "CLAIMS", "COMPILE_CACHE",
           "COMPILE_CACHE_MAX_BYTES", "DEFAULT_MAX_BYTES", "MAX_BYTES", "MIN_BYTES", "OFF", "ON",
           "SPOOL_DIR", "SQLITE_WAL", "STORE_TEMPLATE", "XLA_CPU_THREADS", "EnvSettingError",
           "check_environment", "compile_cache_max_bytes", "problems", "switch"]

CACHE_DIR = CACHE_ENV
SPOOL_DIR = "HARNESS_SPOOL_DIR"
STORE_TEMPLATE = "HARNESS_STORE_TEMPLATE"
#: On (the default): a SQLite store is written in WAL mode with ``synchronous=NORMAL``
#: (:func:`harness.tracking.client.client_for`); off for a store on a file system without shared
#: memory (NFS).
SQLITE_WAL = "HARNESS_SQLITE_WAL"
BATCH = "HARNESS_BATCH"
CLAIMS = "HARNESS_CLAIMS"

#: ``HARNESS_BATCH``'s values (the same tuples as :mod:`harness.train.batching`'s; a test pins them).
BATCH_ALWAYS = ("always", "on", "1", "true", "yes")
BATCH_NEVER = ("never", "off", "0", "false", "no")
BATCH_AUTO = ("", "auto")


class EnvSettingError(ConfigError):
    """An environment variable the harness reads holds a value it cannot use; one line each."""


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def switch(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the on/off variable ``name`` is on (:func:`harness.core.env_switches.switch`).

    Raises:
      EnvSettingError: neither on (1, on, true, yes) nor off (0, off, false, no).
    """
    try:
        return env_switches.switch(name, environ)
    except ValueError as e:
        raise EnvSettingError([str(e)]) from None


def compile_cache_max_bytes(environ: Mapping[str, str] | None = None) -> int:
    """``HARNESS_COMPILE_CACHE_MAX_BYTES`` as an int
    (:func:`harness.core.env_switches.compile_cache_max_bytes`).

    Raises:
      EnvSettingError: not a number, not positive, or outside [1 MiB, 1 PiB].
    """
    try:
        return env_switches.compile_cache_max_bytes(environ)
    except ValueError as e:
        raise EnvSettingError([str(e)]) from None


def _folder_problem(name: str, raw: str) -> str | None:
    """Why ``raw`` cannot be the folder ``name`` names, or ``None``: it must be a writable folder,
    or be creatable (its nearest existing ancestor a writable folder)."""
    if name == CHECKPOINT_DIR and "://" in raw:
        return None  # a URL Orbax writes (gs://...): not checked here
    at = shown(name, raw)
    valid = "give a writable folder (or one that can be created), or unset it"
    path = Path(raw).expanduser().absolute()
    probe = path
    while not probe.exists() and probe != probe.parent:
        if probe.is_symlink():
            return f"{at}: {probe} is a symbolic link to nothing; {valid}"
        probe = probe.parent
    if not probe.is_dir():
        what = f"{path} is not a folder" if probe == path else f"{probe} is a file, not a folder"
        return f"{at}: {what}; {valid}"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{at}: {probe} is not writable; {valid}"
    return None


def problems(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per ``HARNESS_*`` variable that is set to a value the harness cannot use."""
    env = _env(environ)
    lines: list[str] = []
    if raw := env.get(CHECKPOINT_EVERY, ""):
        try:
            parse_every(raw)
        except ValueError:
            lines.append(f"{shown(CHECKPOINT_EVERY, raw)} is not a checkpoint cadence: use a number of "
                         f"steps (500 or '500 steps'), a time ('90s', '10min', '1h'), or 'off'")
    for name in (CHECKPOINT_DIR, CACHE_DIR, SPOOL_DIR):
        if (raw := env.get(name, "")) and (line := _folder_problem(name, raw)):
            lines.append(line)
    for check in (lambda: switch(COMPILE_CACHE, env), lambda: compile_cache_max_bytes(env),
                  lambda: switch(STORE_TEMPLATE, env), lambda: switch(SQLITE_WAL, env)):
        try:
            check()
        except EnvSettingError as e:
            lines.extend(e.errors)
    raw = env.get(BATCH, "")
    if raw.strip().lower() not in BATCH_ALWAYS + BATCH_NEVER + BATCH_AUTO:
        lines.append(f"{shown(BATCH, raw)} is none of always (1, true, yes), never (0, false, no) "
                     f"or auto (unset: measured); on and off also: on = always, off = never")
    raw = env.get(CLAIMS, "")
    if raw not in ("", "0", "1"):
        lines.append(f"{shown(CLAIMS, raw)} is neither 1 (per-trial claims, the default) nor 0 (off)")
    try:
        threads_setting(env)
    except ValueError as e:
        lines.append(str(e))
    return lines


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuse the ``HARNESS_*`` variables the harness cannot use (``environ``: default ``os.environ``).

    Raises:
      EnvSettingError: one line per variable: its name, its value (bounded) and what is valid.
    """
    if lines := problems(environ):
        raise EnvSettingError(lines)
