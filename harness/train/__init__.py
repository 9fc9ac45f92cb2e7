"""Training: one trial (or a vmapped batch of trials) → :class:`~harness.core.spec.TrialResult`.

Owns building the model and the optimizer, the compiled training and evaluation programs, the
training loop, the vmap-or-sequence decision, devices and meshes, augmentation, the throughput
protocol and mid-trial checkpoints. May import :mod:`harness.core`, :mod:`harness.config`,
:mod:`harness.data`, ``models`` and ``optimizers``; never MLflow or the tracking store.
"""
