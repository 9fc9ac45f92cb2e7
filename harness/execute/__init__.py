"""Execution: work units → trained and logged trials, in this process, in worker processes or on Ray.

Owns the worker (``worker``: one unit's lifecycle, claim, train, write, release, written once for
both write modes), the per-trial claims (``claims``), training a unit with its batch fallback and
checkpoints (``training``), writing results to the store or the spool and replaying it
(``writing``), the background writer thread (``background``), the executors with their complete
protocol (``executors``), the Ray executor (``ray_executor``) and the devices each ``--jobs`` worker
gets (``devices``). May import :mod:`harness.core`, :mod:`harness.data`, :mod:`harness.config`,
:mod:`harness.train`, :mod:`harness.plan` and :mod:`harness.tracking`.
"""
