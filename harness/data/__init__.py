"""Datasets: the registry ``DATASETS`` of offline sources and TFDS datasets from a prepared ``data_dir``.

Owns :class:`Dataset` (three disjoint splits as numpy arrays plus metadata), the offline sources
(scikit-learn's digits, MNIST-1D, synthetic, the Markov-chain language model), byte-level text and
TFDS loading. May import :mod:`harness.core` and numpy; nothing else of ``harness``.
"""

from harness.data.sources import DATASETS, Dataset, DatasetNotPreparedError, load_dataset

__all__ = ["DATASETS", "Dataset", "DatasetNotPreparedError", "load_dataset"]
