"""The native update rule: a trial's (or a vmapped batch's) compiled K-step chunks, the rule
:class:`harness.train.loop.TrialLoop` runs for every trial that is not an AlgoPerf submission.

:class:`ProgramRule` owns the :class:`~harness.train.program.TrainingProgram`, the mesh layout, the
(stacked) training state, the optimizer's evaluation parameters, a streamed split's feed and the
dispatch clocks; the loop owns the steps, the tracks, evaluation points, checkpoints and progress.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from harness.core.spec import TrialSpec
from harness.data.sources import Dataset
from harness.train import parallel
from harness.train.build import trial_step_size
from harness.train.cpu_clock import cpu_snapshot, work_cpu_s
from harness.train.program import TrainingProgram, TrainState, program_for
from harness.train.streaming import StreamFeed

__all__ = ["ProgramRule", "lm_extra"]


class ProgramRule:
    """The compiled training of ``specs`` (``batched``: one vmapped program) on ``ds``.

    ``width`` is the vmapped width (``T``, padded to the mesh for ``shard: trials``; ``None`` for a
    trial trained alone). ``max_chunk`` is ``None``: chunks of ``spec.steps_per_dispatch`` steps."""

    max_chunk: int | None = None

    def __init__(self, specs: Sequence[TrialSpec], batched: bool, ds: Dataset):
        self.specs, self.spec0, self.ds = specs, specs[0], ds
        self.prog: TrainingProgram = program_for(self.spec0, ds)
        self.entry = self.prog.entry
        self.width = len(specs) if batched else None
        self.layout = self._layout()
        self.compile_s = 0.0
        self.train_s = 0.0  # this invocation's dispatch seconds
        self.dispatch_step_s: list[float] = []  # seconds per step of each dispatch (the perf check)
        self.dispatch_cpu_s: list[float] = []  # CPU seconds per step of each dispatch (the same)
        (self.x_train, self.y_train, self.x_valid, self.y_valid,
         self.x_test, self.y_test) = self.entry.placed(self.layout)
        self.params_fn = self.prog.params if self.width is None else jax.vmap(self.prog.params)
        self.state = self._initial_state()
        if self.width is None:  # the optimizer built once per unit, not at every evaluation (its
            # step size is the state's, which no update changes)
            opt = self.prog.make_opt(self.state.step_size)
            self.params_fn = lambda st: opt.params_fn(st.opt_state)
        # the optimizer's evaluation parameters (None: evaluate at params_fn's), compiled up front
        self.eval_params_exe, dt = self.prog.get_eval_params(self.width, self.state, layout=self.layout)
        self.compile_s += dt
        self._eval_exe(self._params(), self.x_valid, self.y_valid)  # compiled up front
        self.feed = None  # a streamed training split: its windows, prefetched (harness.train.streaming)
        if ds.stream is not None:
            self.feed = StreamFeed(self.prog, specs, self.width, ds.stream, self.layout)

    # -- set-up ------------------------------------------------------------------------------------

    def _layout(self) -> parallel.Layout | None:
        """The mesh layout (:mod:`harness.train.parallel`; ``None`` = the one-device path); pads
        ``T`` for ``shard: trials`` with copies of the last trial, whose results are dropped."""
        s = self.spec0
        layout = None if s.devices == 1 else parallel.layout_for(
            s.devices, s.shard, batch_size=s.batch_size, num_trials=self.width)
        if layout is not None and layout.axis == "trials":
            self.width = layout.pad(self.width)
        return layout

    def place(self, tree: Any) -> Any:
        """``tree`` on the state's sharding (replicated for ``batch``, split for ``trials``)."""
        if self.layout is None:
            return tree
        lay = self.layout
        return jax.device_put(tree, lay.replicated if lay.axis == "batch" else lay.split)

    def _initial_state(self) -> TrainState:
        """Each trial initialised exactly as alone (same executable), then stacked (and padded)."""
        states = []
        for s in self.specs:
            st, dt = self.prog.init_seeded(s.seed, trial_step_size(s, self.prog.opt_builder))
            states.append(st)
            self.compile_s += dt
        if self.width is not None:
            states.extend([states[-1]] * (self.width - len(states)))
        state = states[0] if self.width is None else jax.tree_util.tree_map(lambda *a: jnp.stack(a), *states)
        return self.place(state)

    # -- the loop's seam ---------------------------------------------------------------------------

    def checkpoint_state(self) -> TrainState:
        """The state a checkpoint saves (and the template it restores into)."""
        return self.state

    def restore(self, state: TrainState, step: int, wall: float) -> None:
        """Continue from a checkpoint's ``state`` (placed on the state's sharding)."""
        self.state = self.place(state)

    def resumed(self, tracks: Sequence[Any]) -> None:
        """Nothing to rebuild from the restored tracks."""

    def before_eval(self, step: int) -> None:
        """Nothing to do before an evaluation."""

    def on_eval(self, step: int, loss: float, metrics: dict[str, float]) -> None:
        """Nothing to record after a validation evaluation."""

    def _params(self) -> Any:
        """The parameters to evaluate the current state at (stacked for a vmapped unit), on the
        state's sharding: the optimizer's evaluation parameters where it has them, else the
        training iterate (``params_fn``, which everything else uses)."""
        if self.eval_params_exe is not None:
            return self.eval_params_exe(self.state)
        return self.place(self.params_fn(self.state))

    def _eval_exe(self, params: Any, x: jax.Array, y: jax.Array) -> Any:
        """The compiled evaluation of a split of ``x``'s size (its compile seconds counted)."""
        exe, dt = self.entry.get("eval", self.width, params, self.state.model_state, x, y, layout=self.layout)
        self.compile_s += dt
        return exe

    def evaluate(self, split: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Per-trial ``(loss (T,), {metric: (T,)})`` (float64) of the current state on ``split``
        (``"valid"`` or ``"test"``)."""
        x, y = (self.x_valid, self.y_valid) if split == "valid" else (self.x_test, self.y_test)
        params = self._params()
        loss, mets = self._eval_exe(params, x, y)(params, self.state.model_state, x, y)
        return (np.atleast_1d(np.asarray(loss, np.float64)),
                {k: np.atleast_1d(np.asarray(v, np.float64)) for k, v in mets.items()})

    def run(self, step: int, n: int, next_n: int = 0) -> tuple[np.ndarray, float] | None:
        """``n`` updates from ``step`` in one compiled dispatch: ``(train losses (T, n), seconds)``.
        ``next_n``: the updates of the next chunk (a streamed split reads them meanwhile)."""
        start = np.int32(step)  # (a NumPy scalar: jnp.int32 was an eager device_put, ~0.3 ms)
        if self.layout is not None:
            start = jax.device_put(start, self.layout.replicated)
        x, y = self.x_train, self.y_train
        if self.feed is not None:
            x, y = self.feed.batches(step, n, next_n)
            exe, dt = self.feed.executable(self.state, start, x, y)
        else:
            exe, dt = self.prog.get_chunk(self.width, n, self.state, start, x, y, layout=self.layout)
        self.compile_s += dt
        c0 = cpu_snapshot()
        t0 = time.perf_counter()
        self.state, losses = exe(self.state, start, x, y)
        losses = np.asarray(losses, np.float64).reshape(-1, n)
        dt = time.perf_counter() - t0
        self.dispatch_cpu_s.append(work_cpu_s(c0, cpu_snapshot()) / n)
        self.train_s += dt
        self.dispatch_step_s.append(dt / n)
        return losses, dt

    def close(self) -> None:
        """Stop a streamed split's reader."""
        if self.feed is not None:
            self.feed.close()

    # -- results -----------------------------------------------------------------------------------

    def clipped_fractions(self, step: int, n: int) -> list[float | None]:
        """Per trial (``n`` of them), the fraction of its ``step`` updates ``grad_clip`` clipped
        (None without ``grad_clip``)."""
        counts = self.prog.clipped_counts(self.state)
        if counts is None or step == 0:
            return [None] * n
        c = np.atleast_1d(np.asarray(jax.device_get(counts)))
        return [float(c[i if self.width else 0]) / step for i in range(n)]

    def extra(self, batched: bool) -> dict[str, Any]:
        """The rule's part of ``TrialResult.extra`` (a fresh dict per call)."""
        lay, ds = self.layout, self.ds
        return {"batched": len(self.specs) if batched else 1,
                **({"mesh": lay.label, "num_devices": lay.num_devices,
                    "padded_trials": (self.width or 1) - len(self.specs)} if lay is not None else {}),
                "eval_batch": self.entry.eval_batch,
                **({"eval_params": True} if self.eval_params_exe is not None else {}),
                **{k: float(getattr(ds, k)) for k in ("loss_floor", "entropy_rate")
                   if getattr(ds, k, None) is not None}}

    def extra_after(self) -> dict[str, Any]:
        """What ``extra`` ends with: a streamed split's waits, a sequence dataset's token counts."""
        ds = self.ds
        return {**({"data_wait_s": self.feed.wait_s, "data_read_s": self.feed.read_s}
                   if self.feed is not None else {}),
                **({"lm": lm_extra(ds)} if ds.task == "sequence" else {})}


def lm_extra(ds: Dataset) -> dict[str, Any]:
    """A sequence dataset's bytes per token (``None``: unknown) and token counts per split
    (``TrialResult.extra["lm"]``)."""
    n_train = ds.stream.num_windows if ds.stream is not None else ds.num_train
    T = ds.input_shape[0]
    return {"bytes_per_token": ds.bytes_per_token,
            "tokens": {"train": n_train * T, "valid": ds.num_valid * T, "test": ds.num_test * T}}
