"""Mid-trial checkpoints: save a work unit's whole training state with Orbax, resume it bit-identically.

What one checkpoint holds (one Orbax step directory ``<unit dir>/<step>/``, written by
``ocp.CheckpointManager`` with two items):

* ``state`` (``ocp.args.StandardSave`` of a flat ``{name: numpy array}`` dict): the optimizer state
  through :func:`optimizers.unpack_optimizer_state` (``opt_state.pPPPPP.sSS`` = leaf ``SS`` of the
  state tree of parameter leaf ``PPPPP``, in ``jax.tree.leaves`` order of the parameter tree), the
  parameters themselves (``params.PPPPP``, for whoever reads the checkpoint; resume takes them from
  the optimizer state), the model state (``model_state.NNNNN``, BatchNorm statistics), the data-order
  and dropout keys (``data_key``, ``dropout_key``: raw ``uint32 (2,)`` keys), the traced step size,
  and the data-order position (``perm``: the permutation of the last epoch touched, ``int32 (N,)``;
  ``perm_epoch``). For a vmapped unit every array has a leading axis of the unit's width ``T``
  (trial ``i`` of ``trial_ids`` is index ``i``).
* ``host`` (``ocp.args.JsonSave``): ``format``, ``trial_ids``, ``batched`` (``T`` or ``null``),
  ``step`` (updates done), ``wall_s`` (the trial's clock: training seconds so far), ``done``
  (nothing left to train), ``tracks`` (per trial: the curves so far and the trainer's per-trial
  bookkeeping — whether it is still active, its divergence step, steps/seconds to target — as JSON;
  floats round-trip exactly), ``saves`` and ``saved_at`` (Unix seconds).

Resume is bit-identical because a checkpoint is only taken at a chunk end of the uninterrupted
schedule (the chunk sequence is a function of the step alone: chunks of ``K`` steps that end at every
evaluation point), and the restored state is the very input the next compiled chunk would have seen.
Wall-clock values are the only ones that differ. It holds on one machine and software stack (the same
XLA programs); a retry on a different CPU model resumes correctly but is only float32-close.

Where (:func:`root_for`): ``checkpoint_dir`` from the config or ``HARNESS_CHECKPOINT_DIR`` wins (for a
tracking server or a multi-node Ray cluster it must be a directory every worker mounts, or any
``etils.epath`` URL Orbax writes, e.g. ``gs://bucket/ckpt``); otherwise a SQLite store keeps them beside
itself (``<dir of mlflow.db>/checkpoints``), and a server's sweep keeps them under the invoking
directory (``./checkpoints``, which only workers on the driver's machine can see: a Ray retry on
another node then starts that unit over, still correctly). Inside the root:
``<experiment id>/<unit key>/<step>/`` where the unit key is 16 hex of SHA-256 of the unit's ordered
trial ids and its vmapped width: a checkpoint resumes only exactly the program that wrote it.

Cadence (:func:`harness.core.cadence.parse_every`): ``checkpoint_every`` is a number of steps
(``500`` or ``"500 steps"``) or wall-clock time (``"90s"``, ``"10min"``, ``"1h"``), or ``off``. The
default :data:`harness.core.cadence.DEFAULT_EVERY`
is one minute of wall-clock since the unit started, so trials under a minute never write one, and
never sooner than :data:`ADAPTIVE_FACTOR` times the last save's duration (a model whose save takes
2 s is checkpointed every 200 s): the default costs under ~1% of training for any model size. The
cadence never changes a result, so it is not part of the ``TrialSpec`` (nor of ``trial_id``):
it reaches the workers through :class:`harness.core.context.RunContext`. ``HARNESS_CHECKPOINT_EVERY``
overrides the config (tests use it to force a step cadence).

Safety: Orbax writes a step into a temporary directory and renames it into place when complete, so
a SIGKILL mid-write leaves the previous checkpoint usable (tested by killing writers at random
moments). Each unit directory is owned by one process at a time (an exclusive ``filelock`` on
``<unit dir>.lock``, released by the kernel if the process dies): a concurrent invocation training
the same unit neither writes nor deletes its checkpoints. A checkpoint error never fails a trial:
it is logged as a warning and training goes on without checkpoints. After a unit's results are in
the store its directory is removed (``keep_final_checkpoint`` first logs the final state as each
trial's ``checkpoint/`` artifact).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from harness.core import env_switches
from harness.core.cadence import Cadence, parse_every
from harness.train.checkpoint_state import (
    flatten_state,
    jsonable,
    track_from_json,
    track_to_json,
    unflatten_state,
)

log = logging.getLogger(__name__)

#: With the default cadence, checkpoints are also spaced at least this many times the last save's
#: duration apart, so that their cost stays under 1% of training whatever the model's size.
ADAPTIVE_FACTOR = 100.0
#: Checkpoints kept per unit (the newest; an older one is a fallback if the newest cannot be read).
MAX_TO_KEEP = 2
FORMAT = 1
#: The cadence and root overrides (:mod:`harness.core.env_switches`); the config loader refuses a
#: bad value before any write.
ENV_EVERY = env_switches.CHECKPOINT_EVERY
ENV_DIR = env_switches.CHECKPOINT_DIR


def chunk_end(step: int) -> None:
    """Called at every chunk end of training; a no-op the kill tests replace (to trace training and
    slow it, so that a kill lands in it).

    Args:
      step: the step the chunk ended at.
    """


def unit_key(trial_ids: Sequence[str], batched: int | None) -> str:
    """16 hex of SHA-256 of the unit's ordered trial ids and vmapped width (``None``: one trial)."""
    blob = json.dumps([list(trial_ids), batched], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def root_for(tracking_uri: str, configured: str | None = None) -> str:
    """The checkpoint root for a sweep: ``configured`` (or ``$HARNESS_CHECKPOINT_DIR``) when given,
    else ``<dir of the SQLite file>/checkpoints`` for a ``sqlite:///`` store, else
    ``<cwd>/checkpoints``. Local paths are made absolute (workers may have another cwd)."""
    chosen = os.environ.get(ENV_DIR) or configured
    if chosen:
        return chosen if "://" in chosen else str(Path(chosen).expanduser().resolve())
    if tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri[len("sqlite:///"):])
        return str((db.parent if db.parent != Path("") else Path.cwd()).resolve() / "checkpoints")
    return str(Path.cwd().resolve() / "checkpoints")


# ------------------------------------------------------------------------------------------------
# one unit's checkpoints


class TrainCheckpoints(Protocol):
    """What the trainer (:mod:`harness.train.loop`) asks of a unit's checkpoints;
    :class:`UnitCheckpoints` is the implementation.

    ``state`` is the unit's :class:`harness.train.program.TrainState` (stacked for a vmapped unit),
    ``tracks`` its :class:`harness.train.track.TrialTrack` list, ``params_fn(state)`` its parameters.
    ``resumed_from`` (the step resumed from, or ``None``), ``saves`` (checkpoints written) and
    ``save_seconds`` go to ``TrialResult.extra["checkpoint"]``."""

    resumed_from: int | None
    saves: int
    save_seconds: float

    def restore(self, template: Any, tracks: list[Any], params_fn: Callable
                ) -> tuple[Any, int, float, bool] | None: ...

    def after_chunk(self, step: int, wall_s: float, state: Any, tracks: list[Any], params_fn: Callable,
                    *, done: bool = False) -> None: ...

    def finish(self, step: int, wall_s: float, state: Any, tracks: list[Any],
               params_fn: Callable) -> None: ...


def _ocp():
    import orbax.checkpoint as ocp

    return ocp


class UnitCheckpoints:
    """The checkpoints of one work unit (one trial, or trials trained together under ``jax.vmap``).

    The trainer calls :meth:`restore` once before training, :meth:`after_chunk` at chunk ends and
    :meth:`finish` at the end; the worker calls :meth:`cleanup` once the unit's results are in the
    store. Every method swallows (and logs) checkpoint errors: a checkpoint never fails a trial.

    Args:
      directory: this unit's directory (``<root>/<experiment id>/<unit key>``).
      trial_ids: the unit's trial ids in training order.
      batched: the vmapped width ``T``, or ``None`` for a single trial.
      cadence: when to save.
      keep_final: save the final state even when no checkpoint was due (for the artifact).
    """

    def __init__(self, directory: str, trial_ids: Sequence[str], batched: int | None, cadence: Cadence,
                 *, keep_final: bool = False, adaptive: bool = False):
        self.directory = directory
        self.adaptive = adaptive
        self._last_save_s = 0.0
        self.trial_ids = list(trial_ids)
        self.batched = batched
        self.cadence = cadence
        self.keep_final = keep_final
        self.saves = 0  # written by this process
        self.resumed_from: int | None = None
        self.save_seconds = 0.0
        self._mgr: Any = None
        self._lock: Any = None
        self._owner: bool | None = None
        self._t0 = time.monotonic()
        self._last_t = self._t0
        self._last_step = 0
        self._latest: int | None = None
        self._disabled = False

    # -- plumbing --------------------------------------------------------------------------------

    @property
    def _local(self) -> bool:
        return "://" not in self.directory

    def _exists(self) -> bool:
        if self._local:
            return Path(self.directory).is_dir()
        from etils import epath

        return epath.Path(self.directory).exists()

    def _own(self) -> bool:
        """Take the unit's exclusive lock (non-blocking); False if another live process holds it."""
        if self._owner is None:
            if not self._local:
                self._owner = True  # object stores: no lock (document: one invocation per sweep)
                return True
            from filelock import FileLock, Timeout

            Path(self.directory).parent.mkdir(parents=True, exist_ok=True)
            lock = FileLock(self.directory.rstrip("/") + ".lock")
            try:
                lock.acquire(timeout=0)
                self._lock, self._owner = lock, True
            except Timeout:
                log.warning("checkpoints of unit %s are owned by another process: training it "
                            "without checkpoints", self.trial_ids[0])
                self._owner = False
        return self._owner

    def _manager(self, create: bool) -> Any:
        if self._mgr is None:
            ocp = _ocp()
            opts = ocp.CheckpointManagerOptions(
                max_to_keep=MAX_TO_KEEP, create=create, enable_async_checkpointing=False,
                cleanup_tmp_directories=bool(create and self._owner), read_only=not create)
            self._mgr = ocp.CheckpointManager(self.directory, options=opts, item_names=("state", "host"))
        return self._mgr

    def _fail(self, what: str, exc: BaseException) -> None:
        log.warning("checkpoint %s of unit %s failed (%s: %s); training goes on without checkpoints",
                    what, self.trial_ids[0], type(exc).__name__, exc)
        self._disabled = True

    # -- trainer hooks ---------------------------------------------------------------------------

    def restore(self, template: Any, tracks: list[Any], params_fn: Callable
                ) -> tuple[Any, int, float, bool] | None:
        """The newest readable checkpoint of this unit: ``(state, step, wall_s, done)``, with each
        track's curves and bookkeeping restored in place; ``None`` when there is none (or none that
        matches this unit: then training starts from step 0)."""
        self._t0 = self._last_t = time.monotonic()
        try:
            if not self._exists():
                return None
            self._own()
            mgr = self._manager(create=bool(self._owner))
            steps = sorted(mgr.all_steps(), reverse=True)
        except Exception as e:
            self._fail("listing", e)
            return None
        ocp = _ocp()
        for step in steps:
            try:
                import numpy as np

                host = mgr.restore(step, args=ocp.args.Composite(host=ocp.args.JsonRestore()))["host"]
                if host.get("format") != FORMAT or host.get("trial_ids") != self.trial_ids or \
                        host.get("batched") != self.batched or len(host["tracks"]) != len(tracks):
                    log.warning("checkpoint %s/%s belongs to another unit: ignored", self.directory, step)
                    continue
                like = {k: np.asarray(v) for k, v in
                        flatten_state(template, params_fn if host.get("done") else None).items()}
                got = mgr.restore(step, args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(like)))["state"]
                state = unflatten_state(template, got)
            except Exception as e:
                log.warning("checkpoint %s/%s cannot be read (%s: %s); trying an older one",
                            self.directory, step, type(e).__name__, e)
                continue
            for tr, d in zip(tracks, host["tracks"], strict=True):
                track_from_json(tr, d)
            self._last_step = int(host["step"])
            self._latest = step
            self.saves = 0
            self.resumed_from = int(host["step"])
            log.info("unit %s resumed from step %d", self.trial_ids[0], self.resumed_from)
            return state, int(host["step"]), float(host["wall_s"]), bool(host.get("done"))
        return None

    def due(self, step: int) -> bool:
        """Whether the cadence asks for a checkpoint at this chunk end."""
        c = self.cadence
        if self._disabled or c.off:
            return False
        if c.steps is not None:
            return step // c.steps > self._last_step // c.steps
        interval = c.seconds or math.inf
        if self.adaptive:
            interval = max(interval, ADAPTIVE_FACTOR * self._last_save_s)
        return time.monotonic() - self._last_t >= interval

    def after_chunk(self, step: int, wall_s: float, state: Any, tracks: list[Any], params_fn: Callable,
                    *, done: bool = False) -> None:
        """Called at every chunk end of the uninterrupted schedule (after that step's evaluation,
        if any); saves when :meth:`due`."""
        chunk_end(step)
        if self.due(step):
            self.save(step, wall_s, state, tracks, params_fn, done=done)

    def finish(self, step: int, wall_s: float, state: Any, tracks: list[Any], params_fn: Callable) -> None:
        """End of training: save the final state (``done``) if this unit has checkpoints at all
        (so a kill before the results reach the store loses no training) or ``keep_final``.

        With the default (adaptive) cadence the final save obeys the same spacing as the others:
        it is skipped when less than ``ADAPTIVE_FACTOR`` × the last save's duration has passed
        since that save (a kill before the store write then resumes from the last checkpoint and
        trains that stretch again), so a trial just past the cadence pays one save, not two."""
        if self._disabled or self._latest == step:
            return
        if self.keep_final:
            self.save(step, wall_s, state, tracks, params_fn, done=True)
        elif self._latest is not None:
            if self.adaptive and time.monotonic() - self._last_t < ADAPTIVE_FACTOR * self._last_save_s:
                return
            self.save(step, wall_s, state, tracks, params_fn, done=True)

    def save(self, step: int, wall_s: float, state: Any, tracks: list[Any], params_fn: Callable,
             *, done: bool = False) -> None:
        """Write one checkpoint at ``step`` (atomically: a temporary directory renamed into place)."""
        if self._disabled:
            return
        t0 = time.perf_counter()
        try:
            if not self._own():
                self._disabled = True
                return
            arrays = flatten_state(state, params_fn if done else None)
            host = {"format": FORMAT, "trial_ids": self.trial_ids, "batched": self.batched,
                    "step": int(step), "wall_s": float(wall_s), "done": bool(done),
                    "tracks": [track_to_json(t) for t in tracks], "saves": self.saves + 1,
                    "saved_at": time.time()}
            ocp = _ocp()
            mgr = self._manager(create=True)
            if step in mgr.all_steps():  # same step (e.g. resumed there): replace it
                mgr.delete(step)
            mgr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(arrays),
                                                   host=ocp.args.JsonSave(jsonable(host))), force=True)
            mgr.wait_until_finished()
        except Exception as e:
            self._fail("save", e)
            return
        self.saves += 1
        self._latest = step
        self._last_step = step
        self._last_t = time.monotonic()
        self._last_save_s = time.perf_counter() - t0
        self.save_seconds += self._last_save_s

    # -- worker hooks ----------------------------------------------------------------------------

    def final_step_dir(self) -> str | None:
        """The directory of the final (``done``) checkpoint, if one was written."""
        if self._latest is None:
            return None
        return f"{self.directory.rstrip('/')}/{self._latest}"

    def cleanup(self) -> None:
        """Remove the unit's checkpoints (its results are in the store) and release its lock."""
        try:
            if self._mgr is not None:
                with contextlib.suppress(Exception):
                    self._mgr.close()
                self._mgr = None
            if self._owner is None and (self._exists() or self._lock_path_exists()):
                self._own()  # e.g. a lock left by a process killed before its first checkpoint
            if self._owner and self._exists():
                if self._local:
                    shutil.rmtree(self.directory, ignore_errors=True)
                else:
                    from etils import epath

                    epath.Path(self.directory).rmtree()
        except Exception as e:
            log.warning("could not remove checkpoints %s: %s", self.directory, e)
        finally:
            self.release()

    def _lock_path_exists(self) -> bool:
        return self._local and Path(self.directory.rstrip("/") + ".lock").exists()

    def release(self) -> None:
        """Release the lock without removing anything (the unit is not finished)."""
        if self._mgr is not None:
            with contextlib.suppress(Exception):
                self._mgr.close()
            self._mgr = None
        if self._lock is not None:
            with contextlib.suppress(Exception):
                self._lock.release()
                if self._local and not Path(self.directory).exists():
                    Path(self.directory.rstrip("/") + ".lock").unlink(missing_ok=True)
            self._lock = None
        self._owner = None


def for_unit(root: str, experiment_id: str, trial_ids: Sequence[str], batched: int | None,
             every: Any, *, keep_final: bool = False) -> UnitCheckpoints | None:
    """The :class:`UnitCheckpoints` of a unit, or ``None`` when checkpointing is off (and
    ``keep_final`` is not asked) or no root is known."""
    chosen = os.environ.get(ENV_EVERY) or every
    cadence = parse_every(chosen)
    if not root or (cadence.off and not keep_final):
        return None
    d = f"{root.rstrip('/')}/{experiment_id}/{unit_key(trial_ids, batched)}"
    default = chosen is None or (isinstance(chosen, str) and chosen.strip().lower() == "default")
    return UnitCheckpoints(d, trial_ids, batched, cadence, keep_final=keep_final, adaptive=default)
