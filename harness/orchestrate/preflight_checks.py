"""Pre-flight's checks of one value (:mod:`harness.orchestrate.preflight`): a dataset's load error,
a model's memory, a step size, an optimizer state's form, an AlgoPerf submission's import and first
update."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from typing import Any

from harness.config.hparams import exc_text, hp_path
from harness.plan.expansion import hp_text


def hp_or_defaults(hp: Mapping[str, Any]) -> str:
    """``hp`` as ``k=v, ...`` for an error line; ``"defaults"`` when empty."""
    return hp_text(hp) or "defaults"


def load_error(file: str, path: str, name: str, hp: Mapping[str, Any], e: Exception) -> str:
    """The error line of a dataset that does not load: a ``tfds:`` dataset not prepared (its message
    says how) or a kind's data error at ``path.name``; one that names a hyperparameter at it."""
    from harness.data.kinds import dataset_error_key, kind_of

    if key := dataset_error_key(e):
        return f"{file}: {path}.hparams.{key}: {e}"
    if isinstance(e, FileNotFoundError) or (kind_of(name) is not None and isinstance(e, ValueError)):
        return f"{file}: {path}.name: {exc_text(e)}"
    return (f"{file}: {hp_path(path, hp, str(e))}: cannot load dataset {name!r} ({hp_or_defaults(hp)}): "
            f"{exc_text(e)}")


#: A step holds the parameters, their gradients and the optimizer's state: at least this many
#: copies of the parameters (Adam: 4; SOAP and Shampoo more).
MIN_PARAMETER_COPIES = 4


def device_memory_bytes() -> int | None:
    """Memory of the first device: its allocator's limit on an accelerator, the machine's physical
    memory on a CPU (``None`` when neither is known)."""
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
    """Why a model whose parameters are ``params`` (shape/dtype structs) cannot train on this
    device (:data:`MIN_PARAMETER_COPIES` copies of its parameters exceed the device's memory),
    with the figures; else ``None``."""
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


def check_state_form(state0: Any, state: Any) -> None:
    """Check that an optimizer's ``update_fun`` keeps ``init_fun``'s state form (the trainer's scan
    carries it): the same tree structure, each leaf the same shape and dtype.

    Raises:
      TypeError: naming the structures, or the first leaf (its path) whose shape or dtype changed.
    """
    import jax
    import jax.numpy as jnp

    before, after = jax.tree.structure(state0), jax.tree.structure(state)
    if before != after:
        raise TypeError(f"update_fun returned a state of another structure than "
                        f"init_fun's: {after} after {before}")
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(state0)[0],
                            jax.tree.leaves(state), strict=True):
        ta, tb = (jnp.shape(a), jnp.result_type(a)), (jnp.shape(b), jnp.result_type(b))
        if ta != tb:
            where = re.sub(r"<flat index (\d+)>", r"\1", jax.tree_util.keystr(path))
            raise TypeError(f"update_fun returned a state whose leaf "
                            f"{where or '(the state)'} is "
                            f"{tb[1]}{list(tb[0])} where init_fun's is {ta[1]}{list(ta[0])}: "
                            f"the trainer carries the state from step to step, so each "
                            f"leaf must keep its shape and dtype")


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
    ``update_params``, where an ``import``, a shape error or a wrong return would otherwise show
    only once the store exists and the trial fails. So the pre-flight builds the trial as a worker does
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
