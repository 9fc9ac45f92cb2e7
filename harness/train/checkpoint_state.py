"""A unit's training state and bookkeeping as checkpoint data: flat numpy arrays and JSON.

:func:`flatten_state` turns a :class:`harness.train.program.TrainState` into ``{name: numpy array}``
(the names are listed in :mod:`harness.train.checkpoint`'s docstring: ``opt_state.pPPPPP.sSS`` through
:func:`optimizers.unpack_optimizer_state`, ``params.*``, ``model_state.*``, the keys, the step size
and the data-order position) and :func:`unflatten_state` puts such a dict back into the structure of
a freshly initialised state, checking every name, shape and dtype. :func:`track_to_json` /
:func:`track_from_json` do the same for the trainer's per-trial records
(:class:`harness.train.track.TrialTrack`); floats round-trip exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["flatten_state", "is_join", "jsonable", "track_from_json", "track_to_json", "unflatten_state"]


def is_join(x: Any) -> bool:
    """Whether ``x`` is an ``optimizers.JoinPoint`` (one parameter's optimizer-state subtree)."""
    return type(x).__name__ == "JoinPoint" and hasattr(x, "subtree")


def flatten_state(state: Any, params_fn: Callable[[Any], Any] | None) -> dict[str, Any]:
    """A :class:`harness.train.program.TrainState` (device arrays) → ``{name: numpy array}``
    (copies); with ``params_fn`` the parameters too (``params.*``, only in a final checkpoint:
    mid-trial they are inside the optimizer state and would double the bytes written)."""
    import jax
    import numpy as np

    from optimizers import unpack_optimizer_state

    out: dict[str, Any] = {}
    try:
        joins = jax.tree.leaves(unpack_optimizer_state(state.opt_state), is_leaf=is_join)
        for p, jp in enumerate(joins):
            for k, leaf in enumerate(jax.tree.leaves(jp.subtree)):
                out[f"opt_state.p{p:05d}.s{k:02d}"] = leaf
    except (TypeError, ValueError, AttributeError):  # not an OptimizerState: its plain leaves
        for i, leaf in enumerate(jax.tree.leaves(state.opt_state)):
            out[f"opt_state.flat{i:05d}"] = leaf
    if params_fn is not None:
        for i, leaf in enumerate(jax.tree.leaves(params_fn(state))):
            out[f"params.{i:05d}"] = leaf
    for i, leaf in enumerate(jax.tree.leaves(state.model_state)):
        out[f"model_state.{i:05d}"] = leaf
    for name in ("data_key", "dropout_key", "step_size", "perm", "perm_epoch"):
        out[name] = getattr(state, name)
    # one host transfer for all leaves, then private copies (the device buffers are donated next)
    host = jax.device_get(out)
    return {k: np.array(v, copy=True) for k, v in host.items()}


def unflatten_state(template: Any, arrays: dict[str, Any]) -> Any:
    """Put ``arrays`` (from :func:`flatten_state`) into the structure of ``template`` (a freshly
    initialised state of the same unit) as device arrays.

    Raises:
      ValueError: a name, shape or dtype does not match the template (a checkpoint of another unit).
    """
    import jax
    import numpy as np

    from optimizers import pack_optimizer_state, unpack_optimizer_state

    def take(name: str, like: Any) -> Any:
        if name not in arrays:
            raise ValueError(f"checkpoint lacks {name}")
        a = np.asarray(arrays[name])
        if a.shape != tuple(like.shape) or a.dtype != like.dtype:
            raise ValueError(f"checkpoint {name}: {a.dtype}{a.shape} != {like.dtype}{tuple(like.shape)}")
        return jax.device_put(a)

    if any(k.startswith("opt_state.flat") for k in arrays):
        leaves, tdef = jax.tree.flatten(template.opt_state)
        opt_state = jax.tree.unflatten(
            tdef, [take(f"opt_state.flat{i:05d}", x) for i, x in enumerate(leaves)])
    else:
        marked = unpack_optimizer_state(template.opt_state)
        joins, jdef = jax.tree.flatten(marked, is_leaf=is_join)
        new = []
        for p, jp in enumerate(joins):
            sl, sdef = jax.tree.flatten(jp.subtree)
            new.append(type(jp)(jax.tree.unflatten(
                sdef, [take(f"opt_state.p{p:05d}.s{k:02d}", x) for k, x in enumerate(sl)])))
        opt_state = pack_optimizer_state(jax.tree.unflatten(jdef, new))
    ml, mdef = jax.tree.flatten(template.model_state)
    model_state = jax.tree.unflatten(mdef, [take(f"model_state.{i:05d}", x) for i, x in enumerate(ml)])
    rest = {n: take(n, getattr(template, n))
            for n in ("data_key", "dropout_key", "step_size", "perm", "perm_epoch")}
    return template._replace(opt_state=opt_state, model_state=model_state, **rest)


def jsonable(x: Any) -> Any:
    """``x`` with every value JSON can hold as itself: dicts (string keys), lists, bools, strings,
    ``None``, Python ints and floats (numpy scalars through ``.item()``); anything else as ``str``."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, bool | str) or x is None:
        return x
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return float(x)
    if hasattr(x, "item"):  # numpy scalar
        return jsonable(x.item())
    return str(x)


def track_to_json(track: Any) -> dict[str, Any]:
    """A trainer's per-trial record (a dataclass with ``spec`` and ``curves``) → JSON-able dict."""
    out = {}
    for f in dataclasses.fields(track):
        if f.name == "spec":
            continue
        v = getattr(track, f.name)
        out[f.name] = dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v
    return jsonable(out)


def track_from_json(track: Any, d: dict[str, Any]) -> None:
    """Restore :func:`track_to_json` output into ``track`` in place (fields unknown to either side
    are left alone)."""
    for f in dataclasses.fields(track):
        if f.name == "spec" or f.name not in d:
            continue
        cur = getattr(track, f.name)
        v = d[f.name]
        if dataclasses.is_dataclass(cur) and isinstance(v, dict):
            names = {g.name for g in dataclasses.fields(cur)}
            v = type(cur)(**{k: x for k, x in v.items() if k in names})
        setattr(track, f.name, v)
