"""Datasets: a registry of offline sources plus TFDS datasets read from a prepared ``data_dir``.

Every loader returns a :class:`Dataset` of numpy arrays ready for the trainer:

* Three disjoint splits. ``x_train``/``x_valid``/``x_test``: ``float32``, shape ``(N, *input_shape)``;
  ``y_train``/``y_valid``/``y_test``: ``int32`` class labels, shape ``(N,)``. The trainer trains on
  train only, evaluates validation every ``eval_every`` steps (targets, selection) and test once at
  the end of a trial (the number a report headlines).
* Preprocessing is deterministic: images stored as ``uint8`` are scaled to ``[0, 1]``; labels are
  integer class ids (a model whose loss wants one-hot targets one-hots them itself, see
  ``models.zoo``).
* Where a source has no validation split, it is **carved from the training part**
  (:func:`carve_validation`): the last ``round(n · validation_fraction)`` examples of a fixed
  seed-0 permutation of the ``n`` training examples become validation, the rest (in permutation
  order) stay train. ``validation_fraction`` defaults to ``0.2`` and must lie in ``(0, 1)``.
  (Before the three-split protocol this hyperparameter *replaced* the test split; now the test
  split is always the source's own and never seen before the end of a trial.)

Registry (:data:`DATASETS`, name → builder; a builder's keyword arguments are its hyperparameters):

* ``digits(validation_fraction=0.2)``: scikit-learn's bundled 8×8 handwritten digits (1,797 images,
  UCI ML hand-written digits), images ``(8, 8, 1)`` scaled from ``0..16`` to ``[0, 1]``; a fixed
  split (seed 0 permutation) of 1,437 train+valid / 360 test, the 1,437 then carved into
  **1,150 train / 287 valid** (the default fraction).
* ``mnist1d(num_samples=5000, train_split=0.8, seed=42, validation_fraction=0.2)``: MNIST-1D
  (Greydanus 2020) generated locally by ``mnist1d.data.make_dataset`` with the package's default
  arguments (4,000 train / 1,000 test, length 40), never its download path; the 4,000 are carved
  into **3,200 train / 800 valid**, the package's 1,000 test examples are the test split. Inputs
  are ``(40,)`` float32 (the package's values, not rescaled). The generated arrays are cached in
  ``$HARNESS_CACHE_DIR`` (default ``~/.cache/harness``) as ``.npz``.
* ``synthetic(num_examples=1024, num_test=256, input_shape=(784,), num_classes=10, seed=0,
  num_valid=256)``: standard-normal inputs labelled by a random linear teacher (argmax of
  ``x @ W``); the validation examples are drawn after the teacher, so train and test are the same
  arrays as before validation existed; for throughput work and tests.
* ``tfds:NAME`` (e.g. ``tfds:mnist``): read with ``tfds.data_source`` (array_record, no TensorFlow)
  from ``data_dir`` (default ``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``). Hyperparameters are
  those of :func:`load_tfds` (``data_dir``, ``validation_fraction``, ``image_key``, ``label_key``).
  Splits: test = the ``test`` split; validation = the ``validation`` split when the dataset has
  one, else carved from ``train``. A dataset without ``test`` but with ``validation`` (ImageNet's
  layout) uses ``validation`` as test and carves validation from ``train``.
  A dataset that is not prepared there fails at once with :class:`DatasetNotPreparedError`, whose
  message says how to prepare it; nothing is downloaded.

:func:`load_dataset` memoises results per process (datasets are immutable: arrays are read-only).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.registry import lookup

__all__ = [
    "DATASETS",
    "VALIDATION_FRACTION",
    "Dataset",
    "DatasetNotPreparedError",
    "cache_dir",
    "carve_validation",
    "digits",
    "load_dataset",
    "load_tfds",
    "markov_lm",
    "mnist1d",
    "synthetic",
]

TFDS_PREFIX = "tfds:"
#: Default fraction of a training part carved out as validation where a source has none.
VALIDATION_FRACTION = 0.2


class DatasetNotPreparedError(FileNotFoundError):
    """A TFDS dataset is not prepared in the ``data_dir`` (the harness never downloads)."""


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
    #: ``y`` the next tokens, ``num_classes`` the vocabulary (see :mod:`harness.sequences`).
    task: str = "classification"
    #: sequence datasets with a known optimum: entropy rate and the exact per-token loss floor (nats)
    entropy_rate: float | None = None
    loss_floor: float | None = None

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


def cache_dir() -> Path:
    """``$HARNESS_CACHE_DIR`` or ``~/.cache/harness`` (created on demand)."""
    d = Path(os.environ.get("HARNESS_CACHE_DIR") or Path.home() / ".cache" / "harness")
    d.mkdir(parents=True, exist_ok=True)
    return d


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


# --------------------------------------------------------------------------------------------------
# Offline sources

_DIGITS_TEST = 360


def digits(validation_fraction: float = VALIDATION_FRACTION) -> Dataset:
    """scikit-learn's 8×8 digits: 1,150 train / 287 valid / 360 test (default fraction), images
    ``(8, 8, 1)`` float32 in [0, 1].

    The split is fixed: a seed-0 numpy permutation of the 1,797 images, the last 360 as test; the
    first 1,437 are then carved by :func:`carve_validation`.
    """
    from sklearn.datasets import load_digits

    raw = load_digits()
    x = (np.asarray(raw.images, np.float32) / np.float32(16.0))[..., None]
    y = np.asarray(raw.target, np.int32)
    perm = np.random.default_rng(0).permutation(len(y))
    tr, te = perm[:-_DIGITS_TEST], perm[-_DIGITS_TEST:]
    x_tr, y_tr, x_va, y_va = carve_validation(x[tr], y[tr], validation_fraction)
    return Dataset(
        x_train=x_tr, y_train=y_tr, x_valid=x_va, y_valid=y_va, x_test=x[te], y_test=y[te],
        input_shape=(8, 8, 1),
        num_classes=10, name="digits",
        source="scikit-learn sklearn.datasets.load_digits (UCI ML hand-written digits, test part)",
        license="CC BY 4.0 (UCI Machine Learning Repository)",
        citation="Alpaydin, E. and Kaynak, C. (1998). Optical Recognition of Handwritten Digits. "
                 "UCI Machine Learning Repository. https://doi.org/10.24432/C50P49",
    )


def mnist1d(num_samples: int = 5000, train_split: float = 0.8, seed: int = 42,
            validation_fraction: float = VALIDATION_FRACTION) -> Dataset:
    """MNIST-1D generated locally with ``mnist1d.data.make_dataset`` (defaults: 3,200 train /
    800 valid carved from the package's 4,000 train by :func:`carve_validation`, and its 1,000
    test; inputs ``(40,)`` float32, 10 classes). Other generation arguments are the package's
    ``get_dataset_args()`` defaults. Cached on disk under :func:`cache_dir` keyed by the arguments.
    """
    key = json.dumps({"num_samples": num_samples, "train_split": train_split, "seed": seed,
                      "version": "0.0.2.post1"}, sort_keys=True)
    import hashlib

    path = cache_dir() / f"mnist1d-{hashlib.sha256(key.encode()).hexdigest()[:12]}.npz"
    if path.exists():
        with np.load(path) as z:
            arrays = {k: z[k] for k in ("x", "y", "x_test", "y_test")}
    else:
        from mnist1d.data import get_dataset_args, make_dataset

        args = get_dataset_args()
        args.num_samples, args.train_split, args.seed = num_samples, train_split, seed
        raw = make_dataset(args)  # local generation; never mnist1d's download path
        arrays = {k: np.asarray(raw[k]) for k in ("x", "y", "x_test", "y_test")}
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
    x_tr, y_tr, x_va, y_va = carve_validation(arrays["x"].astype(np.float32),
                                              arrays["y"].astype(np.int32), validation_fraction)
    return Dataset(
        x_train=x_tr, y_train=y_tr, x_valid=x_va, y_valid=y_va,
        x_test=arrays["x_test"].astype(np.float32), y_test=arrays["y_test"].astype(np.int32),
        input_shape=(int(arrays["x"].shape[1]),), num_classes=10, name="mnist1d",
        source="mnist1d 0.0.2.post1 make_dataset(get_dataset_args()), generated locally",
        license="Apache-2.0",
        citation="Greydanus, S. and Kobak, D. (2024). Scaling down deep learning with MNIST-1D. ICML.",
    )


def synthetic(num_examples: int = 1024, num_test: int = 256, input_shape: tuple[int, ...] = (784,),
              num_classes: int = 10, seed: int = 0, num_valid: int = 256) -> Dataset:
    """Random teacher data: ``x ~ N(0, 1)`` float32 of shape ``(n, *input_shape)``, labels the argmax
    of ``x.reshape(n, -1) @ W`` for a random ``W ~ N(0, 1)``; deterministic in ``seed``.

    Draw order from ``np.random.default_rng(seed)``: train and test inputs (one array), ``W``, then
    the ``num_valid`` validation inputs (so train and test do not depend on ``num_valid``).

    Raises:
      ValueError: a split size below 1.
    """
    if min(num_examples, num_test, num_valid) < 1:
        raise ValueError(f"synthetic needs at least one example per split, got num_examples="
                         f"{num_examples}, num_valid={num_valid}, num_test={num_test}")
    shape = tuple(int(d) for d in input_shape)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((num_examples + num_test, *shape), dtype=np.float32)
    w = rng.standard_normal((int(np.prod(shape)), num_classes), dtype=np.float32)
    y = np.argmax(x.reshape(len(x), -1) @ w, axis=1).astype(np.int32)
    xv = rng.standard_normal((num_valid, *shape), dtype=np.float32)
    yv = np.argmax(xv.reshape(num_valid, -1) @ w, axis=1).astype(np.int32)
    return Dataset(
        x_train=x[:num_examples], y_train=y[:num_examples], x_valid=xv, y_valid=yv, x_test=x[num_examples:],
        y_test=y[num_examples:], input_shape=shape, num_classes=num_classes, name="synthetic",
        source=f"harness.data.synthetic(seed={seed}): Gaussian inputs, random linear teacher",
        license="CC0", citation="",
    )


def markov_lm(vocab_size: int = 16, order: int = 2, seq_len: int = 32, concentration: float = 0.3,
              num_train: int = 16384, num_valid: int = 512, num_test: int = 512,
              seed: int = 0) -> Dataset:
    """Next-token sequences from a random Markov chain of order ``order`` with an exactly known entropy
    rate: :func:`harness.data.sequences.markov_lm` (its docstring has the method and the defaults)."""
    from harness.data.sequences import markov_lm as _markov_lm

    return _markov_lm(vocab_size=vocab_size, order=order, seq_len=seq_len,
                      concentration=concentration, num_train=num_train, num_valid=num_valid,
                      num_test=num_test, seed=seed)


#: Dataset registry: name → builder.
DATASETS: dict[str, Callable[..., Dataset]] = {
    "digits": digits,
    "markov_lm": markov_lm,
    "mnist1d": mnist1d,
    "synthetic": synthetic,
}


# --------------------------------------------------------------------------------------------------
# TFDS


def default_tfds_data_dir() -> str:
    """``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``."""
    return os.environ.get("TFDS_DATA_DIR") or str(Path.home() / "tensorflow_datasets")


def _prepare_hint(name: str, data_dir: str) -> str:
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
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError as e:
        raise KeyError(f"unknown TFDS dataset {name!r}: {str(e).splitlines()[0]}") from None
    if not builder.is_prepared():
        raise DatasetNotPreparedError(_prepare_hint(name, data_dir))
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
    from harness.data.sequences import make_dataset, pack_bytes

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
    return make_dataset(dict(
        x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te, input_shape=(seq_len,), num_classes=256,
        name=f"{TFDS_PREFIX}{name}", task="sequence",
        source=f"TFDS {info.full_name} from {data_dir}, UTF-8 bytes in windows of {seq_len}",
        license=str(getattr(info, "license", "") or ""), citation=str(info.citation or "")),
        x_va, y_va)


# --------------------------------------------------------------------------------------------------


def _freeze(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return v


@functools.lru_cache(maxsize=8)
def _load_cached(name: str, frozen: tuple) -> Dataset:
    hparams = dict(frozen)
    if name.startswith(TFDS_PREFIX):
        return load_tfds(name[len(TFDS_PREFIX):], **hparams)
    return lookup(DATASETS, name, "dataset")(**hparams)


def load_dataset(name: str, **hparams: Any) -> Dataset:
    """``DATASETS[name](**hparams)``, or :func:`load_tfds` for ``tfds:NAME``; memoised per process.

    Raises:
      KeyError: unknown registry name (message lists the valid choices and the closest one).
      DatasetNotPreparedError: a ``tfds:`` dataset missing from its ``data_dir``.
    """
    if name.startswith(TFDS_PREFIX) and hparams.get("data_dir") is None:
        hparams["data_dir"] = default_tfds_data_dir()  # resolve now so the memo key sees the env
    return _load_cached(name, _freeze(hparams))
