"""Dataset kinds: the one seam through which a dataset name that is not a registry name is read.

A kind is a name prefix (``tfds:``, ``tokens:``) registered once in :data:`KINDS` with everything
the rest of the harness asks of it: ``load`` (the loader; its keyword arguments after the first are
the dataset's hyperparameters, checked by the config validator), ``name_problem`` (the pre-work
check of the name), ``pattern`` and ``summary`` (what ``harness list`` shows), ``digest`` (a content
digest that enters the trial's identity; ``""``: the name and hyperparameters say it all) and
``memo_hparams`` (hyperparameters resolved for the load memo). Registry names (``DATASETS``) are
the default kind, handled by :mod:`harness.data.sources`.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.data.dataset import Dataset
from harness.data.tfds_source import TFDS_PREFIX, default_tfds_data_dir, load_tfds
from harness.data.tokens import TOKENS_PREFIX, TokensError, corpus_digest, load_tokens, scan

__all__ = ["KINDS", "DatasetKind", "dataset_digest", "dataset_error_key", "kind_of"]


def _same(hparams: dict[str, Any]) -> dict[str, Any]:
    return hparams


@dataclass(frozen=True)
class DatasetKind:
    """One dataset kind (see the module docstring). Every callable takes the name without its prefix."""

    prefix: str
    pattern: str
    summary: str
    load: Callable[..., Dataset]
    name_problem: Callable[[str], str | None]
    digest: Callable[[str, dict[str, Any]], str]
    memo_hparams: Callable[[dict[str, Any]], dict[str, Any]] = field(default=_same)

    def hparams_builder(self, rest: str) -> Callable[..., Dataset]:
        """The loader with the name bound: its signature and annotations are the kind's
        hyperparameters, its docstring the loader's."""
        bound = functools.partial(self.load, rest)

        def builder(**hparams: Any) -> Dataset:
            return bound(**hparams)

        sig = inspect.signature(bound)
        hints = typing.get_type_hints(self.load)
        builder.__signature__ = sig.replace(parameters=[  # type: ignore[attr-defined]
            p.replace(kind=p.KEYWORD_ONLY) for p in sig.parameters.values()])
        builder.__annotations__ = {k: v for k, v in hints.items() if k in sig.parameters}
        builder.__doc__ = self.load.__doc__
        return builder


_TFDS_RE = re.compile(r"^[a-z][a-z0-9_]*(/[A-Za-z0-9_.\-]+)?(:\d+\.\d+\.\d+)?$")


def _tfds_name(rest: str) -> str | None:
    if _TFDS_RE.match(rest):
        return None
    return (f"malformed TFDS dataset {TFDS_PREFIX + rest!r}; expected 'tfds:NAME', "
            f"'tfds:NAME/CONFIG' or 'tfds:NAME:1.2.3'")


def _tfds_memo(hparams: dict[str, Any]) -> dict[str, Any]:
    if hparams.get("data_dir") is None:  # resolved now, so the memo key sees the environment
        return {**hparams, "data_dir": default_tfds_data_dir()}
    return hparams


def _tokens_name(rest: str) -> str | None:
    return None if rest.strip() else "'tokens:' names a folder of token shards: tokens:PATH"


def _tokens_digest(rest: str, hparams: dict[str, Any]) -> str:
    globs = {k: hparams[k] for k in ("train_glob", "valid_glob", "test_glob", "format") if k in hparams}
    return corpus_digest(scan(rest, **globs), hparams.get("digest", "auto"))


#: prefix -> kind.
KINDS: dict[str, DatasetKind] = {
    TFDS_PREFIX: DatasetKind(
        TFDS_PREFIX, "tfds:NAME", "a TFDS dataset prepared in a data_dir (array_record)",
        load_tfds, _tfds_name, lambda rest, hp: "", _tfds_memo),
    TOKENS_PREFIX: DatasetKind(
        TOKENS_PREFIX, "tokens:PATH", "a folder of token shards (llm.c, modded-nanogpt, nanoGPT formats; "
        "make one with: python -m harness data tokenize)",
        load_tokens, _tokens_name, _tokens_digest),
}


def kind_of(name: str) -> tuple[DatasetKind, str] | None:
    """``(kind, name without prefix)`` for a prefixed dataset name, ``None`` for a registry name."""
    for prefix, kind in KINDS.items():
        if name.startswith(prefix):
            rest = name[len(prefix):]
            return kind, (str(Path(rest).expanduser()) if prefix == TOKENS_PREFIX and rest else rest)
    return None


def dataset_digest(name: str, hparams: dict[str, Any]) -> str:
    """The content digest of dataset ``name`` read with ``hparams`` (``""`` for a registry name, a
    kind without one, or data that cannot be read: the pre-flight says why)."""
    found = kind_of(name)
    if found is None:
        return ""
    try:
        return found[0].digest(found[1], hparams)
    except (OSError, ValueError):
        return ""


def dataset_error_key(e: Exception) -> str:
    """The hyperparameter a kind's load error names (``""``: the name itself)."""
    return e.key if isinstance(e, TokensError) else ""
