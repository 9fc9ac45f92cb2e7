"""AlgoPerf submissions on the harness's workloads, unchanged.

* :mod:`.standin_spec`, :mod:`.jax_sharding_utils`: stand-ins for ``algoperf.spec`` and
  ``algoperf.jax_sharding_utils`` (used when the real package is not installed).
* :mod:`.submission`: :func:`~.submission.load_submission` (the stand-ins registered, the file
  run, its functions checked).
* :mod:`.workload`: a harness model on its dataset as an AlgoPerf ``Workload``; the input queue in
  the native trainer's data order.
* :mod:`.state`: the trial's state in the form the trainer's checkpoints take.
* :mod:`.runner`: :class:`~.runner.AlgoPerfRule`, a submission as an update rule of
  :class:`harness.train.loop.TrialLoop` (which owns evaluation, checkpoints and the clock).

Importing this package imports nothing (so ``harness.train.loop`` stays light).
"""
