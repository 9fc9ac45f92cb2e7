"""Execution: work units → trained and logged trials, in this process, in worker processes or on Ray.

Owns the worker (one unit's lifecycle: claim, train, write, release), the executors, the Ray
executor and the devices each ``--jobs`` worker gets. May import :mod:`harness.core`,
:mod:`harness.config`, :mod:`harness.data`, :mod:`harness.train` and :mod:`harness.tracking`.
"""
