"""The persistent XLA compilation cache a sweep uses by default, and a count of its hits.

A program compiled once is written to ``$HARNESS_CACHE_DIR/xla/jax-<jax>-jaxlib-<jaxlib>/`` (JAX's
own persistent cache, :mod:`jax._src.compilation_cache`), and loaded instead of compiled by the
next process that builds the same program: a resumed or grown sweep, new seeds, a re-run after a
kill. Loading gives the very executable that was compiled, so curves are bit-identical with and
without the cache.

Staleness: JAX's cache key already hashes the computation, the compile options, the device
assignment, the backend's platform and version, the XLA flags and the jax/jaxlib versions; the
folder is named after the jax/jaxlib versions as well, so that an upgrade starts a new folder
(the old one can simply be deleted) instead of filling an old one.

Bound: JAX evicts the least recently used entries above ``HARNESS_COMPILE_CACHE_MAX_BYTES``
(default 2 GiB) under a file lock (the ``filelock`` package), so concurrent sweeps may share it.

Off: ``sweep --no-compile-cache``, ``HARNESS_COMPILE_CACHE=0`` (or ``off``/``false``/``no``), or
``run_sweep(..., compile_cache=False)``. A cache the user configured (``JAX_COMPILATION_CACHE_DIR``
or ``jax.config``'s ``jax_compilation_cache_dir``) is left as it is.

The cache is decided once per process, at its first compile: :func:`enable` must run before
then (``run_sweep`` calls it first thing). It also sets the equivalent ``JAX_*`` environment
variables, so the worker processes of ``--jobs N`` inherit the cache.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from harness.core import env_switches
from harness.core.cache_files import cache_dir

__all__ = ["CACHE_ENV", "MAX_BYTES_ENV", "CacheCounts", "active", "cache_counts", "cache_path", "enable"]

#: Set to ``0``/``off``/``false``/``no`` to compile everything afresh (no persistent cache).
CACHE_ENV = env_switches.COMPILE_CACHE
#: Size bound of the cache folder in bytes (least recently used entries are evicted above it).
MAX_BYTES_ENV = env_switches.COMPILE_CACHE_MAX_BYTES
DEFAULT_MAX_BYTES = env_switches.DEFAULT_MAX_BYTES
_JAX_DIR_ENV = "JAX_COMPILATION_CACHE_DIR"


def cache_path() -> Path:
    """``$HARNESS_CACHE_DIR/xla/jax-<version>-jaxlib-<version>`` (not created)."""
    import jax
    import jaxlib

    return cache_dir("xla", f"jax-{jax.__version__}-jaxlib-{jaxlib.__version__}")


def enable(enabled: bool = True) -> str | None:
    """Turn the persistent compilation cache on for this process and its future children.

    Args:
      enabled: ``False`` leaves the cache off (as does ``HARNESS_COMPILE_CACHE=0``).

    Returns:
      The cache folder in use (the user's own if one was configured), or ``None`` when off.

    Raises:
      ValueError: ``HARNESS_COMPILE_CACHE`` is
        neither on nor off, or ``HARNESS_COMPILE_CACHE_MAX_BYTES`` is not a number of bytes in
        [1 MiB, 1 PiB] (a sweep's config loading refuses both first).
    """
    import jax

    _listen()
    on = env_switches.switch(CACHE_ENV)
    if not enabled or not on:
        return None
    limit = env_switches.compile_cache_max_bytes()
    own = os.environ.get(_JAX_DIR_ENV) or jax.config.jax_compilation_cache_dir
    if own:
        return str(own)
    path = cache_path()
    path.mkdir(parents=True, exist_ok=True)
    # every program, however small or quick to compile (JAX's defaults keep only those taking
    # over a second to compile: on CPU that is almost none of a sweep's)
    settings = {"jax_compilation_cache_dir": str(path),
                "jax_persistent_cache_min_compile_time_secs": 0.0,
                "jax_persistent_cache_min_entry_size_bytes": 0,
                "jax_compilation_cache_max_size": limit}
    for name, value in settings.items():
        jax.config.update(name, value)
        os.environ[name.upper()] = str(value)
    return str(path)


@dataclass(frozen=True)
class CacheCounts:
    """Compile requests of this process answered from the persistent cache (``hits``) and compiled
    because the cache had no entry (``misses``: each is then written to it), since the process
    started. They count requests, not distinct programs: a program the process builds twice (the
    throughput measurement and the batching decision lower the training chunk again) counts twice,
    so a re-run's hits can exceed the first run's misses."""

    hits: int
    misses: int

    def __sub__(self, other: CacheCounts) -> CacheCounts:
        return CacheCounts(self.hits - other.hits, self.misses - other.misses)


_counts = {"hits": 0, "misses": 0}
_lock = threading.Lock()
_listening = False
_EVENTS = {"/jax/compilation_cache/cache_hits": "hits", "/jax/compilation_cache/cache_misses": "misses"}


def _on_event(event: str, **_: object) -> None:
    key = _EVENTS.get(event)
    if key is not None:
        with _lock:
            _counts[key] += 1


def _listen() -> None:
    global _listening
    with _lock:
        if _listening:
            return
        _listening = True
    import jax

    jax.monitoring.register_event_listener(_on_event)


def active() -> bool:
    """Whether this process compiles through a persistent cache (its own, the user's, or the one
    a parent sweep's environment gave this worker)."""
    import jax

    return bool(jax.config.jax_compilation_cache_dir) and bool(jax.config.jax_enable_compilation_cache)


def cache_counts() -> CacheCounts:
    """The process's :class:`CacheCounts` so far (both 0 before :func:`enable` or with no cache);
    the difference of two readings counts what happened between them."""
    _listen()
    with _lock:
        return CacheCounts(_counts["hits"], _counts["misses"])
