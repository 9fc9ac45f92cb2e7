"""The update step's recipe keys of a config (``grad_clip``, ``grad_accum``): a trial's ``recipe``
pairs and the one rule that refuses them where they cannot apply."""

from __future__ import annotations

from typing import Any

__all__ = ["recipe_fields", "recipe_problem"]


def recipe_fields(cfg: Any) -> dict[str, Any]:
    """A trial's ``recipe`` (``TrialSpec.recipe``): the config's recipe keys not at their defaults."""
    return {**({"grad_clip": cfg.grad_clip} if cfg.grad_clip is not None else {}),
            **({"grad_accum": cfg.grad_accum} if cfg.grad_accum != 1 else {})}


def recipe_problem(cfg: Any, batch_size: int, optimizer_path: str, source: str) -> str | None:
    """Why the config's recipe cannot apply to a trial of ``batch_size`` whose optimizer entry at
    ``optimizer_path`` has ``source`` (``""``: none): a key path and the reason, or None."""
    if batch_size % cfg.grad_accum:
        return (f"grad_accum: {cfg.grad_accum} micro-batches do not divide batch_size {batch_size} "
                f"(each micro-batch must have as many examples)")
    if recipe_fields(cfg) and source.startswith("algoperf:"):
        return (f"{optimizer_path}.source: an AlgoPerf submission runs its own update step; grad_clip "
                f"and grad_accum do not apply to it")
    return None
