"""Training on a streamed dataset (``Dataset.stream``, :class:`harness.data.stream.TokenStream`): each
chunk's windows are read on the host from the shards (positional reads) and put on the device by a
background thread while the previous chunk computes (prefetch), then fed to the program's updates.

The order is the stream's pure function of (seed, step), so a trial resumed from its checkpoint's
step reads the windows it would have read, and each trial of a vmapped unit its own seed's order.
On a data-parallel mesh (``shard: batch``) each device's part of every global batch (``B/D``
examples) is read for that device alone (``jax.make_array_from_callback``), the batch axis
``P("batch")``; on a trial-parallel mesh the windows are replicated. ``wait_s`` is the time the
training loop waited on data (the host not keeping up), ``read_s`` the reading thread's time. Not
built on Grain: measured against it, no faster and more memory (docs/decisions.md,
``tests/benchmarks/test_bench_grain.py``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from harness.core.spec import TrialSpec
from harness.train.program import TrainingProgram, TrainState

__all__ = ["StreamFeed"]


class StreamFeed:
    """The windows of a unit's chunks, prefetched one chunk ahead, and the compiled updates on them.

    Args:
      prog: the unit's program. specs: its trials (their seeds). width: the vmapped width (``None``:
        one trial), padded members reading the last trial's windows. stream: the dataset's stream.
        layout: the unit's mesh (:class:`harness.train.parallel.Layout`; ``None``: one device).
    """

    def __init__(self, prog: TrainingProgram, specs: Sequence[TrialSpec], width: int | None, stream: Any,
                 layout: Any = None):
        self.prog, self.stream, self.width, self.layout = prog, stream, width, layout
        seeds = [s.seed for s in specs]
        self.seeds = seeds if width is None else seeds + [seeds[-1]] * (width - len(seeds))
        self.wait_s = self.read_s = 0.0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-stream")
        self._next: tuple[tuple[int, int], Future] | None = None
        self._exes: dict[int, Any] = {}

    def _host(self, start: int, n: int, part: slice = slice(None)) -> np.ndarray:
        """``int32 ([W,] n, b, T + 1)``: inputs and next tokens stacked on the last axis (``part``
        of each batch)."""
        B = self.prog.batch_size
        xy = [np.concatenate([x, y[..., -1:]], -1) for x, y in
              (self.stream.batches(seed, start, n, B, part) for seed in self.seeds)]
        return np.stack(xy) if self.width is not None else xy[0]

    def _read(self, start: int, n: int) -> tuple[jax.Array, jax.Array]:
        t0 = time.perf_counter()
        lay = self.layout
        if lay is not None and lay.axis == "batch":
            shape = (*(() if self.width is None else (len(self.seeds),)), n, self.prog.batch_size,
                     self.stream.seq_len + 1)
            lead = (None,) * (len(shape) - 3)
            sharding = NamedSharding(lay.mesh, PartitionSpec(*lead, None, "batch"))
            # each device reads its own examples of every batch (index: its slice of each axis)
            xy = jax.make_array_from_callback(shape, sharding, lambda idx: self._host(start, n, idx[-2]))
        else:
            xy = jax.device_put(self._host(start, n), lay.replicated if lay is not None else None)
        self._check(final=False)
        out = xy[..., :-1], xy[..., 1:]
        self.read_s += time.perf_counter() - t0
        return out

    def batches(self, start: int, n: int, next_n: int) -> tuple[jax.Array, jax.Array]:
        """The windows of updates ``start .. start + n - 1`` on the device; starts reading those of
        the ``next_n`` updates after them (0: none)."""
        t0 = time.perf_counter()
        if self._next is not None and self._next[0] == (start, n):
            x, y = self._next[1].result()
        else:
            if self._next is not None:
                self._next[1].result()  # a wrong guess: let it finish, never two reads at once
            x, y = self._read(start, n)
        self.wait_s += time.perf_counter() - t0
        self._next = None
        if next_n:
            self._next = ((start + n, next_n), self._pool.submit(self._read, start + n, next_n))
        return x, y

    def executable(self, state: TrainState, start: Any, x: jax.Array, y: jax.Array) -> tuple[Any, float]:
        """The compiled ``n`` updates on given windows (state donated) and the seconds compiling now."""
        n = int(x.shape[1] if self.width is not None else x.shape[0])
        if n in self._exes:
            return self._exes[n], 0.0
        prog = self.prog

        lay = self.layout
        split = lay.split if lay is not None and lay.axis == "batch" else None

        def fn(st, t, xw, yw):
            k, b = xw.shape[:2]
            idx = jnp.arange(k * b, dtype=jnp.int32).reshape(k, b)
            return prog.steps(st, t, idx, xw.reshape(k * b, -1), yw.reshape(k * b, -1), split=split)

        if self.width is not None:
            fn = jax.vmap(fn, in_axes=(0, None, 0, 0))
        kw = {}
        if lay is not None:
            st = lay.replicated if lay.axis == "batch" else lay.split
            kw = {"in_shardings": (st, lay.replicated, x.sharding, y.sharding), "out_shardings": (st, st)}
        t0 = time.perf_counter()
        exe = self._exes[n] = jax.jit(fn, donate_argnums=(0,), **kw).lower(state, start, x, y).compile()
        return exe, time.perf_counter() - t0

    def _check(self, final: bool) -> None:
        """Raise ``ValueError`` when a training shard changed since the dataset was scanned: after each
        chunk's read, its size, mtime and inode (:meth:`TokenStream.check_unchanged`, two ``stat``
        calls a shard); at the end, also the digest's sampled blocks (:meth:`TokenStream.verify`)."""
        check = getattr(self.stream, "verify" if final else "check_unchanged", None)
        if check is not None:
            check()

    def close(self) -> None:
        """Stop the reading thread (a read in flight finishes first), then check that no training
        shard changed while the trial trained.

        Raises:
          ValueError: a shard changed (the trial is then FAILED with this reason, never stored
            FINISHED on tokens of two corpora); not while an exception is on its way out (a
            ``finally``), which it would hide (a Ctrl-C among them)."""
        self._pool.shutdown(wait=True)
        if sys.exc_info()[0] is None:
            self._check(final=True)
