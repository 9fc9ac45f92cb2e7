"""Datasets: the registry ``DATASETS`` of offline sources and TFDS datasets from a prepared ``data_dir``.

Owns, low to high: :class:`Dataset` (three disjoint splits as numpy arrays plus metadata) and the
validation-carving rule (``dataset``); the offline sources: scikit-learn's digits, MNIST-1D,
synthetic (``offline``) and the Markov-chain language model with byte-level text packing
(``sequences``); TFDS loading (``tfds_source``); token shards (``shards``: the file formats;
``tokens``: a shard folder as a dataset; ``tokenize``: text to shards); the dataset kinds
``tfds:``/``tokens:`` (``kinds``); the registry and the memoised ``load_dataset`` (``sources``).
May import :mod:`harness.core` and numpy; nothing else of ``harness``.
"""

from harness.data.dataset import Dataset, DatasetNotPreparedError, carve_validation
from harness.data.sources import DATASETS, load_dataset

__all__ = ["DATASETS", "Dataset", "DatasetNotPreparedError", "carve_validation", "load_dataset"]
