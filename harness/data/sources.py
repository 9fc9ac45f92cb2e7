"""The dataset registry :data:`DATASETS` (offline sources) and :func:`load_dataset` (those, plus TFDS
datasets read from a prepared ``data_dir``), memoised per process.

Every loader returns a :class:`~harness.data.dataset.Dataset` of numpy arrays ready for the trainer:

* Three disjoint splits. ``x_train``/``x_valid``/``x_test``: ``float32``, shape ``(N, *input_shape)``;
  ``y_train``/``y_valid``/``y_test``: ``int32`` class labels, shape ``(N,)``. The trainer trains on
  train only, evaluates validation every ``eval_every`` steps (targets, selection) and test once at
  the end of a trial (the number a report headlines).
* Preprocessing is deterministic: images stored as ``uint8`` are scaled to ``[0, 1]``; labels are
  integer class ids (a model whose loss wants one-hot targets one-hots them itself, see
  ``models.zoo``).
* Where a source has no validation split, it is **carved from the training part**
  (:func:`harness.data.dataset.carve_validation`): the last ``round(n · validation_fraction)``
  examples of a fixed seed-0 permutation of the ``n`` training examples become validation, the
  rest (in permutation order) stay train. ``validation_fraction`` defaults to ``0.2`` and must lie
  in ``(0, 1)``. The test split is always the source's own and never seen before the end of a
  trial.

Registry (:data:`DATASETS`, name → builder; a builder's keyword arguments are its hyperparameters;
the sources live in :mod:`harness.data.offline`, :mod:`harness.data.sequences` and
:mod:`harness.data.tfds_source`):

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
  ``x @ W``); the validation examples are drawn after the teacher, so train and test do not
  depend on ``num_valid``; for throughput work and tests.
* ``tfds:NAME`` (e.g. ``tfds:mnist``): read with ``tfds.data_source`` (array_record, no TensorFlow)
  from ``data_dir`` (default ``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``). Hyperparameters are
  those of :func:`harness.data.tfds_source.load_tfds` (``data_dir``, ``validation_fraction``,
  ``image_key``, ``label_key``).
  Splits: test = the ``test`` split; validation = the ``validation`` split when the dataset has
  one, else carved from ``train``. A dataset without ``test`` but with ``validation`` (ImageNet's
  layout) uses ``validation`` as test and carves validation from ``train``.
  A dataset that is not prepared there fails at once with
  :class:`~harness.data.dataset.DatasetNotPreparedError`, whose message says how to prepare it;
  nothing is downloaded.
* ``tokens:PATH``: a folder of token shards, :func:`harness.data.tokens.load_tokens`. Prefixed names
  go through their kind (:mod:`harness.data.kinds`).

:func:`load_dataset` memoises results per process (datasets are immutable: arrays are read-only).
"""


from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from harness.core.builders import lookup
from harness.core.freeze import freeze
from harness.data import sequences
from harness.data.dataset import Dataset
from harness.data.kinds import kind_of
from harness.data.offline import digits, mnist1d, synthetic
from harness.data.tfds_source import TFDS_PREFIX

__all__ = ["DATASETS", "TFDS_PREFIX", "Dataset", "load_dataset", "markov_lm"]


def markov_lm(vocab_size: int = 16, order: int = 2, seq_len: int = 32, concentration: float = 0.3,
              num_train: int = 16384, num_valid: int = 512, num_test: int = 512,
              seed: int = 0) -> Dataset:
    """Next-token sequences from a random Markov chain of order ``order`` with an exactly known entropy
    rate: :func:`harness.data.sequences.markov_lm` (its docstring has the method and the defaults)."""
    return sequences.markov_lm(vocab_size=vocab_size, order=order, seq_len=seq_len,
                               concentration=concentration, num_train=num_train, num_valid=num_valid,
                               num_test=num_test, seed=seed)


#: Dataset registry: name → builder.
DATASETS: dict[str, Callable[..., Dataset]] = {
    "digits": digits,
    "markov_lm": markov_lm,
    "mnist1d": mnist1d,
    "synthetic": synthetic,
}


#: The per-process memo: ``(name, frozen hyperparameters) -> Dataset``, the most recent last.
_MEMO: OrderedDict[tuple[str, tuple], Dataset] = OrderedDict()
#: How many datasets the memo keeps (the least recently used go first).
MEMO_SIZE = 8


def _remember(key: tuple[str, tuple], ds: Dataset) -> Dataset:
    _MEMO[key] = ds
    _MEMO.move_to_end(key)
    while len(_MEMO) > MEMO_SIZE:
        _MEMO.popitem(last=False)
    return ds


def _key(name: str, hparams: dict[str, Any]) -> tuple[str, tuple]:
    found = kind_of(name)
    return name, freeze(found[0].memo_hparams(dict(hparams)) if found else dict(hparams))


def load_dataset(name: str, **hparams: Any) -> Dataset:
    """``DATASETS[name](**hparams)``, or the loader of a dataset kind (:mod:`harness.data.kinds`);
    memoised per process (the key is :func:`harness.core.freeze.freeze` of the hyperparameters; the
    :data:`MEMO_SIZE` most recently used are kept).

    Raises:
      KeyError: unknown registry name (message lists the valid choices and the closest one).
      DatasetNotPreparedError: a ``tfds:`` dataset missing from its ``data_dir``.
      TokensError: a ``tokens:`` folder that cannot be read as asked (``.key``: the hyperparameter).
    """
    key = _key(name, hparams)
    if key in _MEMO:
        _MEMO.move_to_end(key)
        return _MEMO[key]
    kw = dict(key[1])
    if (found := kind_of(name)) is not None:
        kind, rest = found
        return _remember(key, kind.load(rest, **kw))
    return _remember(key, lookup(DATASETS, name, "dataset")(**kw))


def memoised(requests: Iterable[tuple[str, dict[str, Any]]], max_bytes: int
             ) -> list[tuple[tuple[str, tuple], Dataset]]:
    """The datasets among ``requests`` (``(name, hyperparameters)`` pairs, as :func:`load_dataset`
    takes them) that this process has already loaded, as ``(memo key, Dataset)`` entries for
    :func:`preload`, up to ``max_bytes`` bytes of arrays in all (the larger ones are left out).
    A ``--jobs`` worker is handed its sweep's entries instead of loading them again."""
    out, total = [], 0
    for key in dict.fromkeys(_key(n, h) for n, h in requests):
        ds = _MEMO.get(key)
        if ds is None:
            continue
        size = sum(a.nbytes for a in (ds.x_train, ds.y_train, ds.x_valid, ds.y_valid, ds.x_test, ds.y_test))
        if total + size <= max_bytes:
            out.append((key, ds))
            total += size
    return out


def preload(entries: Iterable[tuple[tuple[str, tuple], Dataset]]) -> None:
    """Put :func:`memoised`'s entries (loaded by another process) into this process's memo."""
    for key, ds in entries:
        _remember(key, ds)
