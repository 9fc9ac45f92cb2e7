"""Count a sweep's XLA compiles by where they come from.

    HARNESS_CACHE_DIR=/tmp/fresh python tests/benchmarks/compile_census.py experiments/quickstart.yaml \
        --tracking-uri sqlite:////tmp/fresh/m.db

Runs the sweep in this process (``jobs=1``) and counts JAX's compile requests
(``/jax/core/compile/backend_compile_duration`` events: one per program compiled or loaded from
the persistent cache) and persistent-cache hits (loaded), each attributed to the
innermost harness call that asked for it: the batching measurement's chunks (vmapped / single),
the trainer's chunks (per width and length, so a remainder chunk shows), init, eval, eval_params,
the throughput protocol, and "other" (eager operations: ``jnp.stack``, ``PRNGKey``, an optimizer's
``init_fn``, ...). Prints a table: source, requests, loaded (cache hits), compiled (the
difference), seconds of those requests, and seconds inside ``Lowered.compile()`` (backend
compile, or the persistent cache's key and load; the rest of a compile site's time is tracing and
lowering).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import sys
import time

import jax

_stack: list[str] = []
_counts: collections.Counter = collections.Counter()
_hits: collections.Counter = collections.Counter()
_secs: collections.Counter = collections.Counter()
_in_compile: collections.Counter = collections.Counter()  # seconds inside Lowered.compile()


def _where() -> str:
    return " / ".join(_stack) if _stack else "other (eager ops)"


def _on_duration(event: str, duration: float, **_: object) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _counts[_where()] += 1
        _secs[_where()] += duration


def _on_event(event: str, **_: object) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _hits[_where()] += 1


@contextlib.contextmanager
def _in(label: str):
    _stack.append(label)
    try:
        yield
    finally:
        _stack.pop()


def _wrap(owner, name: str, label) -> None:
    orig = getattr(owner, name)

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        with _in(label(*args, **kwargs) if callable(label) else label):
            return orig(*args, **kwargs)

    setattr(owner, name, wrapper)


def install() -> None:
    """Attribute compiles to the harness's compile sites (monkeypatched wrappers)."""
    from harness.train import batching, build, loop, program

    jax.monitoring.register_event_duration_secs_listener(_on_duration)
    jax.monitoring.register_event_listener(_on_event)
    orig_compile = jax.stages.Lowered.compile

    def timed_compile(self, *a, **k):
        where, t0 = _where(), time.perf_counter()
        try:
            return orig_compile(self, *a, **k)
        finally:
            _in_compile[where] += time.perf_counter() - t0

    jax.stages.Lowered.compile = timed_compile
    _wrap(batching, "measure_speedup", "batching")
    _wrap(batching, "_param_count", "batching param count")
    _wrap(loop, "measure_trial_perf", "throughput")
    _wrap(program.TrainingProgram, "get_chunk",
          lambda self, T, n, *a, **k: f"chunk {'single' if T is None else f'vmap({T})'} n={n}")
    _wrap(program.TrainingProgram, "get_eval_params", lambda self, T, *a, **k: f"eval_params T={T}")
    _wrap(program.TrainingProgram, "init", "init")
    _wrap(build.ModelEntry, "get",
          lambda self, kind, T, *a, **k: kind if kind == "init" else f"{kind} T={T} m={a[2].shape[0]}")


def table() -> str:
    rows = sorted(set(_counts) | set(_hits))
    w = max([len(r) for r in rows] + [6])
    out = [f"{'source':<{w}}  requests  loaded  compiled  request s  in .compile() s"]
    for r in rows:
        out.append(f"{r:<{w}}  {_counts[r]:>8}  {_hits[r]:>6}  {_counts[r] - _hits[r]:>8}  {_secs[r]:>9.2f}  "
                   f"{_in_compile[r]:>15.2f}")
    n, h = sum(_counts.values()), sum(_hits.values())
    out.append(f"{'total':<{w}}  {n:>8}  {h:>6}  {n - h:>8}  {sum(_secs.values()):>9.2f}  "
               f"{sum(_in_compile.values()):>15.2f}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--tracking-uri", required=True)
    a = ap.parse_args(argv)
    install()
    from harness.orchestrate.run import run_sweep

    t0 = time.perf_counter()
    run_sweep(a.config, tracking_uri=a.tracking_uri, jobs=1)
    print(f"sweep: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print(table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
