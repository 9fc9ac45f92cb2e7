"""The update step's recipe keys: global-norm gradient clipping, gradient accumulation, parameter
groups, the loss's reduction over tokens.

Each wraps what :class:`harness.train.program.TrainingProgram` already has, so every optimizer
(registered, ``source:``, Optax) gets them the same way: :func:`clip_optimizer` wraps the
optimizer (its state becomes ``(inner state, int32 count of clipped updates)``),
:func:`accumulate` wraps the loss's ``value_and_grad`` (K micro-batches in a ``lax.scan``), and
:func:`group_optimizer` runs one optimizer per parameter group (step-size scale, weight decay),
:func:`token_sum` differentiates the sum of a token loss instead of its mean.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from harness.train.build import TrainOptimizer

__all__ = ["LOSS_REDUCTIONS", "GroupedState", "accumulate", "clip_optimizer", "clipped_count", "clipping",
           "global_norm", "group_hparams", "group_masks_of", "group_optimizer", "loss_reduction_of",
           "recipe_of", "token_sum"]

#: The ``loss_reduction`` values; the first is the default (left out of a trial's recipe).
LOSS_REDUCTIONS = ("mean", "sum")


def recipe_of(recipe: Any) -> tuple[float | None, int, list]:
    """``(grad_clip or None, grad_accum, param_groups)`` of a spec's ``recipe`` pairs (or a mapping);
    ``param_groups`` as :func:`group_optimizer` takes them (``[]``: none)."""
    d: Mapping[str, Any] = dict(recipe)
    return d.get("grad_clip"), int(d.get("grad_accum", 1)), list(d.get("param_groups", ()))


def loss_reduction_of(recipe: Any) -> str:
    """The ``loss_reduction`` of a spec's ``recipe`` pairs (or a mapping): ``"mean"`` or ``"sum"``."""
    return str(dict(recipe).get("loss_reduction", LOSS_REDUCTIONS[0]))


def token_sum(loss: Callable, count: Callable) -> Callable:
    """``value_and_grad`` of the token loss's sum, reporting its mean: as torch's
    ``F.cross_entropy(..., reduction="sum")`` then ``.backward()``.

    Args:
      loss: ``loss(params, mstate, xb, yb, rng) -> (float32 mean loss per token, mstate)``.
      count: ``count(xb, yb) -> float32 ()``: the tokens the mean is over (padding left out).

    Returns:
      ``fn(params, mstate, xb, yb, rng) -> ((mean loss, mstate), gradient of mean · count)``, shaped
      as ``jax.value_and_grad(loss, has_aux=True)``: the logged loss stays a per-token mean.

    Source: modded-nanogpt ``records/track_3_optimization/train_gpt_simple.py`` (``GPT.forward``).
    """

    def total(params, mstate, xb, yb, rng):
        mean, new_mstate = loss(params, mstate, xb, yb, rng)
        return mean * count(xb, yb), (mean, new_mstate)

    vg = jax.value_and_grad(total, has_aux=True)

    def fn(params, mstate, xb, yb, rng):
        (_, (mean, new_mstate)), grads = vg(params, mstate, xb, yb, rng)
        return (mean, new_mstate), grads

    return fn


def global_norm(tree: Any) -> jax.Array:
    """``sqrt(sum of squares of every leaf)``, float32 (``optax.global_norm``)."""
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(tree)))


def clip_optimizer(opt: TrainOptimizer, max_norm: float) -> TrainOptimizer:
    """``opt`` applied to gradients clipped to global norm ``max_norm`` (``optax.clip_by_global_norm``:
    unchanged when the norm is below ``max_norm``, else ``g / norm * max_norm``).

    Args:
      opt: the optimizer to wrap.
      max_norm: positive float.

    Returns:
      A :class:`TrainOptimizer` whose state is ``(opt's state, int32 clipped updates so far)``.
    """

    def init_fn(params):
        return opt.init_fn(params), jnp.zeros((), jnp.int32)

    def update_fn(i, grads, state):
        inner, count = state
        norm = global_norm(grads)
        keep = norm < max_norm
        grads = jax.tree.map(lambda g: jax.lax.select(keep, g, (g / norm.astype(g.dtype)) * max_norm), grads)
        return opt.update_fn(i, grads, inner), count + (~keep).astype(jnp.int32)

    def params_fn(state):
        return opt.params_fn(state[0])

    inner_eval = opt.eval_params_fn
    eval_fn = None if inner_eval is None else (lambda state: inner_eval(state[0]))
    return TrainOptimizer(init_fn, update_fn, params_fn, eval_fn)


def clipping(make_opt: Callable[[Any], TrainOptimizer],
             max_norm: float | None) -> Callable[[Any], TrainOptimizer]:
    """``make_opt(step_size)`` wrapped in :func:`clip_optimizer` (unchanged when ``max_norm`` is None)."""
    if max_norm is None:
        return make_opt

    def make(step_size: Any) -> TrainOptimizer:
        return clip_optimizer(make_opt(step_size), max_norm)

    return make


def clipped_count(opt_state: Any) -> Any:
    """The count of clipped updates inside a :func:`clip_optimizer` state (stacked: one per trial)."""
    return opt_state[1]


def accumulate(value_and_grad: Callable, k: int, reduction: str = "mean") -> Callable:
    """``value_and_grad(params, mstate, xb, yb, rng) -> ((loss, mstate), grads)`` over ``k`` equal
    micro-batches of ``xb``/``yb`` (leading axis split in order), run one after the other in a
    ``lax.scan``: the loss is the micro-batches' mean; the gradients their mean (the whole batch's
    mean loss's gradient, up to float reassociation) or, with ``reduction="sum"`` (a
    :func:`token_sum` ``value_and_grad``), their sum, as torch's ``backward()`` accumulates; the
    model state threaded through; micro-batch ``j`` gets ``fold_in(rng, j)``.

    Raises:
      ValueError: (at trace time) a batch whose size ``k`` does not divide.
    """
    if k == 1:
        return value_and_grad

    def fn(params, mstate, xb, yb, rng):
        if xb.shape[0] % k or yb.shape[0] != xb.shape[0]:
            raise ValueError(f"grad_accum {k} does not divide the batch of {xb.shape[0]} examples")
        def split(a):
            return a.reshape(k, a.shape[0] // k, *a.shape[1:])

        def body(carry, inp):
            mstate, gsum, lsum = carry
            j, xm, ym = inp
            r = None if rng is None else jax.random.fold_in(rng, j)
            (loss, mstate), g = value_and_grad(params, mstate, xm, ym, r)
            return (mstate, jax.tree.map(jnp.add, gsum, g), lsum + loss), None

        zeros = jax.tree.map(jnp.zeros_like, params)
        (mstate, gsum, lsum), _ = jax.lax.scan(body, (mstate, zeros, jnp.float32(0)),
                                               (jnp.arange(k), split(xb), split(yb)))
        return (lsum / k, mstate), gsum if reduction == "sum" else jax.tree.map(lambda g: g / k, gsum)

    return fn


@jax.tree_util.register_pytree_node_class
class GroupedState:
    """The state of :func:`group_optimizer`: one inner state per group (None for an empty group),
    the parameters' tree structure and each leaf's group (static)."""

    def __init__(self, states: tuple, treedef: Any, owner: tuple[int, ...]):
        self.states, self.treedef, self.owner = states, treedef, owner

    def tree_flatten(self):
        return (self.states,), (self.treedef, self.owner)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0], *aux)


def group_masks_of(hp: Mapping[str, Any], params: Any, groups: Any, k: int, optimizer: str) -> dict[str, Any]:
    """``hp`` with each mask given as group rules (a ``*_mask`` that is a string or a list of strings,
    e.g. ``muon_mask: hidden_matrices``) resolved on the whole ``params`` tree and cut to group
    ``k``'s leaves (a list of bools, flatten order; ``k = len(groups)``: the leaves no group
    claims). A group's optimizer sees only its own leaves, where names such as ``head`` or
    ``hidden_matrices`` cannot be told apart.

    Raises:
      ValueError: a mask rule unknown or matching no parameter of the whole model.
    """
    from optimizers.groups import group_masks, rule_mask

    masks = group_masks(params, {f"param_groups[{j}]": g[0] for j, g in enumerate(groups)})
    flags = [jax.tree.leaves(m) for m in masks.values()]
    owner = [next((j for j, f in enumerate(flags) if f[i]), len(groups))
             for i in range(len(jax.tree.leaves(params)))]
    out = dict(hp)
    for key, v in hp.items():
        rules = isinstance(v, str) or (isinstance(v, list | tuple) and bool(v)
                                       and all(isinstance(r, str) for r in v))
        if key.endswith("_mask") and rules:
            try:
                full = jax.tree.leaves(rule_mask(params, v))
            except ValueError as e:
                raise ValueError(f"{optimizer}: {key}: {e}") from None
            out[key] = [f for f, o in zip(full, owner, strict=True) if o == k]
    return out


def group_hparams(groups: Any, k: int) -> dict[str, Any]:
    """Group ``k``'s own optimizer hyperparameters (a recipe group's optional fourth entry, a mapping
    or its frozen pairs); ``{}`` for none or for ``k = len(groups)``, the unclaimed leaves."""
    return dict(groups[k][3]) if k < len(groups) and len(groups[k]) > 3 else {}


def group_optimizer(make_for: Callable[..., Callable[[Any], TrainOptimizer]],
                    groups: Any, per_group: bool = False) -> Callable[[Any], TrainOptimizer]:
    """``make(step_size)``: one optimizer per parameter group, as torch's param groups.

    Args:
      make_for: ``make_for(weight_decay)`` → the trial's optimizer factory with ``weight_decay``
        overridden (None: as configured); with ``per_group``, ``make_for(weight_decay, k)`` for
        group ``k`` (``len(groups)``: the unclaimed leaves), e.g. to cut masks (:func:`group_masks_of`).
      groups: ``[(rules, step_size_scale, weight_decay or None[, hparams]), ...]``; group ``k``
        trains the leaves its rules match (:func:`optimizers.groups.group_masks`) with step size
        ``step_size * step_size_scale``; the leaves no group claims train as configured. A group's
        ``hparams`` are ``make_for``'s to apply (:func:`group_hparams`).

    Returns:
      ``make(step_size) -> TrainOptimizer`` whose state is a :class:`GroupedState`.

    Raises:
      ValueError: (at init) a rule matching no parameter, a parameter two groups claim.
    """
    groups = [(list(g[0]), float(g[1]), g[2]) for g in groups]
    ws = [w for _, _, w in groups] + [None]
    makers = [make_for(w, k) if per_group else make_for(w) for k, w in enumerate(ws)]
    scales = [s for _, s, _ in groups] + [1.0]
    rules = {f"param_groups[{k}]": r for k, (r, _, _) in enumerate(groups)}
    return functools.partial(_make_grouped, makers, scales, rules)


def _make_grouped(makers: list[Callable[[Any], TrainOptimizer]], scales: list[float],
                  rules: dict[str, list], step_size: Any) -> TrainOptimizer:
    """:func:`group_optimizer`'s ``make(step_size)``: group ``k``'s optimizer ``makers[k]`` at
    ``step_size * scales[k]`` (the last: the leaves no rule claims)."""
    g = _Grouped([m(step_size * s) for m, s in zip(makers, scales, strict=True)], rules)
    return TrainOptimizer(g.init_fn, g.update_fn, g.params_fn, g.eval_params_fn)


@dataclass(frozen=True, eq=False)  # hashed by identity: jit keys on its bound methods
class _Grouped:
    """One optimizer per parameter group: ``opts[k]`` trains the leaves group ``k``'s ``rules``
    match (:func:`optimizers.groups.group_masks`); the last, the leaves no group claims."""

    opts: list[TrainOptimizer]
    rules: dict[str, list]

    def owners(self, params: Any) -> tuple[int, ...]:
        """Each leaf's group (``len(rules)``: unclaimed)."""
        from optimizers.groups import group_masks

        flags = [jax.tree.leaves(m) for m in group_masks(params, self.rules).values()]
        return tuple(next((k for k, f in enumerate(flags) if f[i]), len(self.rules))
                     for i in range(len(jax.tree.leaves(params))))

    def init_fn(self, params: Any) -> GroupedState:
        leaves, treedef = jax.tree.flatten(params)
        owner = self.owners(params)
        states = tuple(opt.init_fn(_part(leaves, owner, k)) if k in owner else None
                       for k, opt in enumerate(self.opts))
        return GroupedState(states, treedef, owner)

    def update_fn(self, i: Any, grads: Any, state: GroupedState) -> GroupedState:
        leaves = jax.tree.leaves(grads)
        states = tuple(None if s is None else opt.update_fn(i, _part(leaves, state.owner, k), s)
                       for k, (opt, s) in enumerate(zip(self.opts, state.states, strict=True)))
        return GroupedState(states, state.treedef, state.owner)

    def params_fn(self, state: GroupedState) -> Any:
        parts = [iter(opt.params_fn(s)) if s is not None else iter(())
                 for opt, s in zip(self.opts, state.states, strict=True)]
        return jax.tree.unflatten(state.treedef, [next(parts[o]) for o in state.owner])

    def eval_params_fn(self, state: GroupedState) -> Any:
        """Each group's evaluation parameters where it has them; ``None`` when no group has any."""
        outs, any_eval = [], False
        for opt, st in zip(self.opts, state.states, strict=True):
            e = None if st is None or opt.eval_params_fn is None else opt.eval_params_fn(st)
            any_eval = any_eval or e is not None
            outs.append(iter(() if st is None else e if e is not None else opt.params_fn(st)))
        if not any_eval:
            return None
        return jax.tree.unflatten(state.treedef, [next(outs[o]) for o in state.owner])


def _part(leaves: list, owner: tuple[int, ...], k: int) -> list:
    """The leaves group ``k`` owns."""
    return [x for x, o in zip(leaves, owner, strict=True) if o == k]
