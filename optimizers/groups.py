"""Parameter groups by name rules, written as strings (so a YAML config can state them).

A parameter's path is its keys in the tree joined by ``/`` (``blocks/0/attn/q`` for a tree of
named dicts, ``2/1/0`` for a stax tuple tree). A rule is one of:

* ``hidden_matrices``: 2-D leaves that are neither ``embeddings`` nor ``head``;
* ``embeddings``: 2-D leaves with ``embed`` (or ``wte``/``wpe``) in a path key, or, in a tree without
  such names, a 2-D leaf that is its layer's only leaf (a stax ``Embedding``'s ``(table,)``);
* ``head``: 2-D leaves with ``head`` or ``lm_head`` as a path key, or, in a tree without such names,
  the last 2-D leaf (the output projection);
* ``norms_and_biases``: leaves with fewer than 2 dimensions;
* ``glob:PATTERN``: leaves whose path matches ``PATTERN`` (:func:`fnmatch.fnmatchcase`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["NAMED_RULES", "group_masks", "leaf_paths", "mask_flags", "rule_mask"]

#: The named rules (module docstring); ``glob:PATTERN`` besides.
NAMED_RULES = ("hidden_matrices", "embeddings", "head", "norms_and_biases")
_EMBED_KEYS = ("embed", "wte", "wpe")
_HEAD_KEYS = ("head", "lm_head")


def _key_text(k: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def leaf_paths(params: Any) -> list[str]:
    """Every leaf's path, in flatten order (``"0/0"``, ``"blocks/0/attn/q"``)."""
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    return ["/".join(_key_text(k) for k in path) for path, _ in flat]


def _named(paths: list[str], keys: Sequence[str], contains: bool) -> list[bool]:
    def hit(part: str) -> bool:
        return any((k in part.lower()) if contains else part == k for k in keys)

    return [any(hit(p) for p in path.split("/")) for path in paths]


def _roles(params: Any) -> dict[str, list[bool]]:
    """Per named rule, a flag per leaf (flatten order)."""
    paths = leaf_paths(params)
    leaves = jax.tree.leaves(params)
    matrix = [jnp.ndim(x) == 2 for x in leaves]
    embed = [m and f for m, f in zip(matrix, _named(paths, _EMBED_KEYS, True), strict=True)]
    head = [m and f for m, f in zip(matrix, _named(paths, _HEAD_KEYS, False), strict=True)]
    if not any(embed):  # no names: a 2-D leaf alone in its layer (the parent path has one leaf)
        parents = [p.rsplit("/", 1)[0] if "/" in p else "" for p in paths]
        embed = [m and parents.count(par) == 1 for m, par in zip(matrix, parents, strict=True)]
    if not any(head) and any(matrix):
        last = max(i for i, m in enumerate(matrix) if m)
        head = [i == last and not embed[i] for i in range(len(leaves))]
    hidden = [m and not e and not h for m, e, h in zip(matrix, embed, head, strict=True)]
    return {"hidden_matrices": hidden, "embeddings": embed, "head": head,
            "norms_and_biases": [jnp.ndim(x) < 2 for x in leaves]}


def rule_mask(params: Any, rules: str | Sequence[str]) -> Any:
    """A tree of bools shaped as ``params``: the leaves any of ``rules`` matches.

    Args:
      params: the parameter tree.
      rules: one rule or a list (module docstring).

    Raises:
      ValueError: an unknown rule, or a rule that matches no parameter (naming the rule and the paths).
    """
    rules = [rules] if isinstance(rules, str) else list(rules)
    roles, paths = _roles(params), leaf_paths(params)
    flags = [False] * len(paths)
    for rule in rules:
        if rule.startswith("glob:"):
            hit = [fnmatch.fnmatchcase(p, rule[5:]) for p in paths]
        elif rule in roles:
            hit = roles[rule]
        else:
            raise ValueError(f"unknown parameter group rule {rule!r}; valid: {', '.join(NAMED_RULES)}, "
                             f"or glob:PATTERN on the paths")
        if not any(hit):
            raise ValueError(f"parameter group rule {rule!r} matches no parameter (paths: "
                             f"{', '.join(paths[:12])}{', ...' if len(paths) > 12 else ''})")
        flags = [f or h for f, h in zip(flags, hit, strict=True)]
    return jax.tree.unflatten(jax.tree.structure(params), flags)


def group_masks(params: Any, groups: Mapping[str, str | Sequence[str]]) -> dict[str, Any]:
    """``{group: rule_mask(params, rules)}``, no parameter in two groups.

    Raises:
      ValueError: as :func:`rule_mask`; a parameter two groups claim (naming both and the path).
    """
    masks = {name: rule_mask(params, rules) for name, rules in groups.items()}
    owner: dict[int, str] = {}
    paths = leaf_paths(params)
    for name, mask in masks.items():
        for i, flag in enumerate(jax.tree.leaves(mask)):
            if flag and i in owner:
                raise ValueError(f"parameter {paths[i]!r} is claimed by groups {owner[i]!r} and {name!r}")
            if flag:
                owner[i] = name
    return masks


def mask_flags(params: Any, mask: Any, default: Any, who: str) -> list[bool]:
    """One flag per leaf (flatten order) from an optimizer's mask argument.

    Args:
      params: the parameter tree.
      mask: ``None`` (``default``), group rules (a string or a list of strings), a callable
        ``params -> tree of bools``, or a tree of bools with the parameters' structure (or a prefix).
      default: ``params -> tree of bools`` for ``None``.
      who: prefixes a rule's error (``"muon: muon_mask"``).

    Raises:
      ValueError: a rule that is unknown or matches no parameter.
    """
    if mask is None:
        mask = default
    rules = isinstance(mask, list | tuple) and mask and all(isinstance(r, str) for r in mask)
    if isinstance(mask, str) or rules:
        try:
            mask = rule_mask(params, mask)
        except ValueError as e:
            raise ValueError(f"{who}: {e}") from None
    mask = mask(params) if callable(mask) else mask
    return jax.tree.leaves(jax.tree.map(lambda f, sub: jax.tree.map(lambda _: bool(f), sub), mask, params))
