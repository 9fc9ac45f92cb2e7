"""The :class:`Dataset` record (three disjoint splits plus metadata) and the validation-carving rule.

Every loader of :mod:`harness.data` returns a :class:`Dataset`: ``x_train``/``x_valid``/``x_test``
``float32 (N, *input_shape)`` and ``y_*`` ``int32 (N,)`` class labels (or, for ``task ==
"sequence"``, ``int32 (N, T)`` tokens and next tokens). Where a source has no validation split,
:func:`carve_validation` carves it from the training part. numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["VALIDATION_FRACTION", "Dataset", "DatasetNotPreparedError", "carve_validation", "check_fits"]

#: Default fraction of a training part carved out as validation where a source has none.
VALIDATION_FRACTION = 0.2


class DatasetNotPreparedError(FileNotFoundError):
    """A TFDS dataset is not prepared in the ``data_dir`` (the harness never downloads)."""


def _memory_bytes() -> int | None:
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(nbytes: int, what: str) -> None:
    """Refuse, before allocating, arrays of ``nbytes`` bytes that exceed this machine's memory.

    Raises:
      ValueError: ``"{what} need(s) X GiB of arrays, more than this machine's Y GiB of memory"``.
    """
    limit = _memory_bytes()
    if limit is not None and nbytes > limit:
        raise ValueError(f"{what} need {nbytes / 2**30:,.1f} GiB of arrays, more than this machine's "
                         f"{limit / 2**30:,.1f} GiB of memory")


@dataclass(frozen=True, eq=False)
class Dataset:
    """Three disjoint splits (train, validation, test) with their metadata.

    Attributes:
      x_train: ``float32 (N, *input_shape)``; y_train: ``int32 (N,)`` class ids in ``[0, num_classes)``.
      x_test, y_test: the test split, same layout; evaluated once, at the end of a trial.
      x_valid, y_valid: the validation split, same layout; evaluated every ``eval_every`` steps,
        what targets and every selection read.
      input_shape: one example's shape (no batch axis), a tuple of ints.
      num_classes: number of classes.
      name: how it was loaded (registry name or ``tfds:NAME``).
      source, license, citation: provenance strings.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    x_valid: np.ndarray
    y_valid: np.ndarray
    input_shape: tuple[int, ...]
    num_classes: int
    name: str
    source: str = ""
    license: str = ""
    citation: str = ""
    #: ``"classification"`` (above) or ``"sequence"``: ``x_*``/``y_*`` both ``int32 (N, T)`` token ids,
    #: ``y`` the next tokens, ``num_classes`` the vocabulary (see :mod:`harness.data.sequences`).
    task: str = "classification"
    #: sequence datasets with a known optimum: entropy rate and the exact per-token loss floor (nats)
    entropy_rate: float | None = None
    loss_floor: float | None = None
    #: a streamed training split (:class:`harness.data.stream.TokenStream`): ``x_train``/``y_train``
    #: then hold only its first windows (shapes, throughput); training reads ``stream``
    stream: Any = None
    #: UTF-8 bytes per token of a text dataset's tokenizer, where known (bits per byte)
    bytes_per_token: float | None = None

    def __post_init__(self) -> None:
        for f in ("x_train", "y_train", "x_test", "y_test", "x_valid", "y_valid"):
            a = getattr(self, f)
            if a.flags.writeable:
                a = np.array(a, copy=True)
                a.setflags(write=False)
                object.__setattr__(self, f, a)
        shape = tuple(int(d) for d in self.input_shape)
        object.__setattr__(self, "input_shape", shape)
        for xs, ys, split in ((self.x_train, self.y_train, "train"), (self.x_valid, self.y_valid, "valid"),
                              (self.x_test, self.y_test, "test")):
            if self.task == "sequence":
                if xs.dtype != np.int32 or ys.dtype != np.int32 or ys.shape != xs.shape:
                    raise TypeError(f"{split} split of a sequence dataset must be int32 tokens and "
                                    f"int32 next tokens of one shape, got {xs.dtype}{xs.shape} and "
                                    f"{ys.dtype}{ys.shape}")
            elif xs.dtype != np.float32 or ys.dtype != np.int32:
                raise TypeError(f"{split} split must be float32 inputs and int32 labels, "
                                f"got {xs.dtype} and {ys.dtype}")
            if xs.shape[1:] != shape or xs.shape[0] != ys.shape[0] or (
                    ys.ndim != 1 and self.task != "sequence"):
                raise ValueError(f"{split} split shapes {xs.shape}, {ys.shape} do not match "
                                 f"input_shape {shape}")

    @property
    def num_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def num_test(self) -> int:
        return int(self.x_test.shape[0])

    @property
    def num_valid(self) -> int:
        return int(self.x_valid.shape[0])

    @property
    def split_sizes(self) -> dict[str, int]:
        """``{"train": n, "valid": n, "test": n}``."""
        return {"train": self.num_train, "valid": self.num_valid, "test": self.num_test}

def carve_validation(x: np.ndarray, y: np.ndarray, validation_fraction: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split a training part into ``(x_train, y_train, x_valid, y_valid)``.

    With ``n = len(y)`` and ``p = np.random.default_rng(0).permutation(n)``, validation is
    ``p[n - n_val:]`` and train ``p[:n - n_val]``, ``n_val = round(n · validation_fraction)``: fixed
    for a given ``n``, independent of any trial's seed.

    Raises:
      ValueError: the fraction is outside ``(0, 1)`` or leaves an empty split.
    """
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in (0, 1) (every dataset has a validation "
                         f"split carved from its training part), got {validation_fraction}")
    n = len(y)
    n_val = round(n * validation_fraction)
    if n_val == 0 or n_val == n:
        raise ValueError(f"validation_fraction={validation_fraction} leaves an empty split of {n} "
                         f"training examples; choose a fraction that keeps both parts non-empty")
    perm = np.random.default_rng(0).permutation(n)
    tr, va = perm[: n - n_val], perm[n - n_val:]
    return x[tr], y[tr], x[va], y[va]
