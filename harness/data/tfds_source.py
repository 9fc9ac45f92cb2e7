"""TFDS datasets read from a prepared ``data_dir`` (``tfds.data_source``, array_record; nothing is
downloaded).

:func:`load_tfds` reads an image/label dataset, or a text dataset (``tfds.features.Text``: ``lm1b``,
``tiny_shakespeare``) as byte-level next-token windows
(:func:`harness.data.sequences.pack_bytes`).
A dataset that is not prepared fails at once with
:class:`~harness.data.dataset.DatasetNotPreparedError`, whose message (:func:`prepare_hint`) says how
to prepare it. ``tensorflow_datasets`` is imported only when a dataset is loaded.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.log_level import logger_level
from harness.data.dataset import VALIDATION_FRACTION, Dataset, DatasetNotPreparedError, carve_validation
from harness.data.sequences import pack_bytes

__all__ = ["TFDS_PREFIX", "default_tfds_data_dir", "load_tfds", "prepare_hint"]

#: A dataset name ``tfds:NAME`` is read by :func:`load_tfds`.
TFDS_PREFIX = "tfds:"


def default_tfds_data_dir() -> str:
    """``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``."""
    return os.environ.get("TFDS_DATA_DIR") or str(Path.home() / "tensorflow_datasets")


def prepare_hint(name: str, data_dir: str) -> str:
    """The message of :class:`~harness.data.dataset.DatasetNotPreparedError`: how to prepare TFDS
    dataset ``name`` in ``data_dir`` once, on a machine with network access."""
    return (
        f"TFDS dataset {name!r} is not prepared in data_dir {data_dir!r} and the harness never downloads. "
        f"Prepare it once on a machine with network access:\n"
        f"  python -c \"import tensorflow_datasets as tfds; tfds.builder({name!r}, data_dir={data_dir!r})"
        f".download_and_prepare(file_format='array_record')\"\n"
        f"(or copy a prepared '{name}/' folder into {data_dir!r}; set TFDS_DATA_DIR or the dataset's "
        f"data_dir hyperparameter to point elsewhere)."
    )


def _read_split(source: Any, image_key: str, label_key: str, chunk: int = 4096) -> tuple[np.ndarray, ...]:
    n = len(source)
    xs, ys = [], []
    for start in range(0, n, chunk):
        idx = list(range(start, min(n, start + chunk)))
        recs = source.__getitems__(idx) if hasattr(source, "__getitems__") else [source[i] for i in idx]
        xs.append(np.stack([np.asarray(r[image_key]) for r in recs]))
        ys.append(np.asarray([r[label_key] for r in recs]))
    return np.concatenate(xs), np.concatenate(ys)


def _to_float(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.uint8:
        return x.astype(np.float32) / np.float32(255.0)
    return x.astype(np.float32)


def load_tfds(name: str, data_dir: str | None = None, validation_fraction: float = VALIDATION_FRACTION,
              image_key: str | None = None, label_key: str | None = None, seq_len: int = 128,
              max_train_sequences: int | None = None) -> Dataset:
    """A TFDS dataset read with ``tfds.data_source`` from a prepared ``data_dir`` (array_record).

    Inputs come from ``image_key`` and labels from ``label_key`` (default: the builder's
    ``supervised_keys``, else ``"image"``/``"label"``); ``uint8`` inputs are scaled to ``[0, 1]``.
    Splits: test = ``test``; validation = ``validation`` when present, else the last
    ``validation_fraction`` of a seed-0 permutation of ``train`` (:func:`carve_validation`). Without
    a ``test`` split, ``validation`` is the test split and validation is carved from ``train``.
    ``validation_fraction`` is used only where validation is carved.

    A dataset whose input feature is ``tfds.features.Text`` (``lm1b``, ``tiny_shakespeare``) becomes
    a byte-level sequence dataset (:func:`_tfds_text`): windows of ``seq_len`` UTF-8 bytes,
    at most ``max_train_sequences`` of them from the train split (``None``: all).

    Raises:
      DatasetNotPreparedError: the dataset is not prepared in ``data_dir`` (raised at once; the
        message says how to prepare it).
      KeyError: TFDS has no dataset of that name.
      ValueError: no ``train`` split, or neither ``test`` nor ``validation``.
    """
    import tensorflow_datasets as tfds

    data_dir = str(data_dir or default_tfds_data_dir())
    builder = _prepared_builder(name, data_dir)
    info = builder.info
    sup = info.supervised_keys
    if isinstance(sup, tuple) and len(sup) == 2 and all(isinstance(k, str) for k in sup):
        image_key = image_key or sup[0]
        label_key = label_key or sup[1]
    image_key, label_key = image_key or "image", label_key or "label"
    splits = set(info.splits.keys())
    try:
        input_feature = info.features[image_key]  # a FeaturesDict: no .get
    except KeyError:
        input_feature = None
    if isinstance(input_feature, tfds.features.Text):
        return _tfds_text(builder, name, data_dir, image_key, splits, seq_len, max_train_sequences,
                          validation_fraction)
    return _tfds_arrays(builder, name, data_dir, image_key, label_key, splits, validation_fraction)


def _prepared_builder(name: str, data_dir: str) -> Any:
    """TFDS's builder of dataset ``name`` in ``data_dir``.

    Raises:
      KeyError: TFDS has no dataset of that name.
      DatasetNotPreparedError: it is not prepared there (the message says how).
    """
    import tensorflow_datasets as tfds

    try:
        # TFDS warns through absl about the empty version folder of a dataset that is not prepared
        # ("Variant folder ... has no dataset_info.json") before the harness's own clear error
        with logger_level("absl", logging.ERROR):  # absl's warnings off (errors still show)
            builder = tfds.builder(name, data_dir=data_dir)
            prepared = builder.is_prepared()
    except tfds.core.registered.DatasetNotFoundError as e:
        raise KeyError(f"unknown TFDS dataset {name!r}: {str(e).splitlines()[0]}") from None
    if not prepared:
        raise DatasetNotPreparedError(prepare_hint(name, data_dir))
    return builder


def _tfds_arrays(builder: Any, name: str, data_dir: str, image_key: str, label_key: str,
                 splits: set[str], validation_fraction: float) -> Dataset:
    """:func:`load_tfds` of an array dataset (images, features): its splits read whole.

    Raises:
      ValueError: no ``train`` split, or neither ``test`` nor ``validation``.
    """
    info = builder.info
    if "train" not in splits:
        raise ValueError(f"TFDS dataset {name!r} has no 'train' split (splits: {sorted(splits)})")
    test_split = "test" if "test" in splits else "validation" if "validation" in splits else None
    if test_split is None:
        raise ValueError(f"TFDS dataset {name!r} has neither a 'test' nor a 'validation' split")
    valid_split = "validation" if test_split == "test" and "validation" in splits else None
    sources = builder.as_data_source()
    x_tr, y_tr = _read_split(sources["train"], image_key, label_key)
    x_te, y_te = _read_split(sources[test_split], image_key, label_key)
    if valid_split is not None:
        x_va, y_va = _read_split(sources[valid_split], image_key, label_key)
        how = f"validation = its {valid_split!r} split"
    else:
        x_tr, y_tr, x_va, y_va = carve_validation(x_tr, y_tr, validation_fraction)
        how = f"validation = {validation_fraction:g} of 'train' (seed-0 permutation)"
    label_feature = info.features[label_key]
    num_classes = int(getattr(label_feature, "num_classes", 0)
                      or int(max(y_tr.max(), y_va.max(), y_te.max())) + 1)
    return Dataset(
        x_train=_to_float(x_tr), y_train=y_tr.astype(np.int32), x_valid=_to_float(x_va),
        y_valid=y_va.astype(np.int32), x_test=_to_float(x_te), y_test=y_te.astype(np.int32),
        input_shape=tuple(x_tr.shape[1:]), num_classes=num_classes, name=f"{TFDS_PREFIX}{name}",
        source=f"TFDS {info.full_name} from {data_dir} (test = its {test_split!r} split; {how})",
        license=str(getattr(info, "license", "") or ""), citation=str(info.citation or ""),
    )


def _tfds_text(builder: Any, name: str, data_dir: str, text_key: str, splits: set[str], seq_len: int,
               max_train_sequences: int | None, validation_fraction: float) -> Dataset:
    """Byte-level next-token windows of a TFDS text dataset (:func:`harness.data.sequences.pack_bytes`:
    documents joined by byte 0, ``V = 256``). Validation: the ``validation`` split when there is
    one, else the last ``validation_fraction`` (default 0.05 when 0) of the train windows; test: the
    ``test`` split. Evaluation splits are capped at 10,000 windows.

    Raises:
      ValueError: ``seq_len < 1``, no ``train`` or ``test`` split, or a split shorter than a window.
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    if "train" not in splits or "test" not in splits:
        raise ValueError(f"TFDS text dataset {name!r} needs 'train' and 'test' splits (has {sorted(splits)})")
    sources = builder.as_data_source()

    def texts(split: str):
        src = sources[split]
        for i in range(len(src)):
            yield src[i][text_key]

    x_tr, y_tr = pack_bytes(texts("train"), seq_len, max_train_sequences)
    x_te, y_te = pack_bytes(texts("test"), seq_len, 10_000)
    if "validation" in splits:
        x_va, y_va = pack_bytes(texts("validation"), seq_len, 10_000)
    else:
        frac = validation_fraction or 0.05
        n_va = max(1, min(10_000, round(len(x_tr) * frac)))
        if n_va >= len(x_tr):
            raise ValueError(f"TFDS text dataset {name!r}: {len(x_tr)} train windows of {seq_len} bytes "
                             "are too few to hold out a validation split")
        x_tr, y_tr, x_va, y_va = x_tr[:-n_va], y_tr[:-n_va], x_tr[-n_va:], y_tr[-n_va:]
    info = builder.info
    return Dataset(
        x_train=x_tr, y_train=y_tr, x_valid=x_va, y_valid=y_va, x_test=x_te, y_test=y_te,
        input_shape=(seq_len,), num_classes=256, name=f"{TFDS_PREFIX}{name}", task="sequence",
        source=f"TFDS {info.full_name} from {data_dir}, UTF-8 bytes in windows of {seq_len}",
        license=str(getattr(info, "license", "") or ""), citation=str(info.citation or ""))
