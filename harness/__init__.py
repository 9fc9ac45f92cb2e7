"""Benchmark harness for training algorithms in JAX.

The runner (``python -m harness``): sweep configs are validated, expanded into trials, trained with
:mod:`harness.trainer`, timed with :mod:`harness.timing` and logged to MLflow by :mod:`harness.tracking`.
This package imports nothing heavy at import time so that ``python -m harness --help`` stays fast.
"""

__version__ = "0.1.0"
