"""The ``source`` entries of one section of a config resolved to builders (config step 1): the loop
that :mod:`harness.config.optimizer_sources` and :mod:`harness.config.model_sources` share."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any

from harness.core.source import SourceError, SourceRef

__all__ = ["config_grids", "resolve_entries"]


def config_grids(cfg: Any) -> Iterator[tuple[str, Any]]:
    """``(key path prefix, grid)`` of ``cfg`` itself (prefix ``""``) and of each ``include`` entry
    (``"include[i]."``)."""
    yield "", cfg
    for i, g in enumerate(cfg.include):
        yield f"include[{i}].", g


def resolve_entries(cfg: Any, file: str, section: str, taken: Collection[str], taken_as: str,
                    parse: Callable[[Any], SourceRef], build: Callable[[SourceRef, Any, Any], Callable]
                    ) -> tuple[dict[str, Callable], list[str]]:
    """Resolve every ``section`` entry of ``cfg`` (top level and ``include``) that has a ``source``.

    Args:
      cfg: a :class:`~harness.config.schema.SweepConfig`; each resolved entry gets its
        :class:`SourceRef` (``comp.set_source_ref``).
      file: the config's name, the first word of an error line.
      section: ``"models"`` or ``"optimizers"``.
      taken: the registered names a source entry may not reuse; ``taken_as`` names them in the
        error (``"a zoo model"``).
      parse: ``parse(source text) -> SourceRef``; raises :class:`SourceError`.
      build: ``build(ref, entry, grid) -> builder``; raises :class:`SourceError`.

    Returns:
      ``({name: builder}, error lines)``, a line ``FILE: [include[i].]SECTION[j].source: message``;
      entries that share a name must share the source.
    """
    builders: dict[str, Callable] = {}
    refs: dict[str, SourceRef] = {}
    errors: list[str] = []
    for prefix, grid in config_grids(cfg):
        for j, comp in enumerate(getattr(grid, section) or []):
            if comp.source is None:
                continue
            where = f"{file}: {prefix}{section}[{j}].source"
            if comp.name in taken:
                errors.append(f"{where}: {comp.name!r} is {taken_as}; give your source entry a name of "
                              f"its own (e.g. 'my_{comp.name}')")
                continue
            try:
                ref = parse(comp.source)
                old = refs.get(comp.name)
                if old is not None and (old.text, old.digest) != (ref.text, ref.digest):
                    errors.append(f"{where}: entries named {comp.name!r} have different sources "
                                  f"({old.text!r}, {ref.text!r}); name them apart")
                    continue
                builder = build(ref, comp, grid)
            except SourceError as e:
                errors.append(f"{where}: {e}")
                continue
            comp.set_source_ref(ref)
            refs[comp.name] = ref
            builders[comp.name] = builder
    return builders, errors
