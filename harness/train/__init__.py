"""Training: one trial (or a vmapped batch of trials) → :class:`~harness.core.spec.TrialResult`.

Owns building the model and the optimizer (:mod:`~harness.train.build`), the compiled training and
evaluation programs and their cache (:mod:`~harness.train.program`), the update step's recipe
(:mod:`~harness.train.recipe`: clipping, accumulation, parameter groups), the one training loop
(:mod:`~harness.train.loop`: ``TrialLoop`` around an update rule, ``run_trial``, ``run_trials_batched``,
``should_batch``; the rules :mod:`~harness.train.program_rule` and
:mod:`~harness.train.algoperf.runner`) and its per-trial bookkeeping (:mod:`~harness.train.track`), the
vmap-or-sequence decision (:mod:`~harness.train.batching`), devices and meshes
(:mod:`~harness.train.parallel`), augmentation (:mod:`~harness.train.augment`), the throughput protocol
(:mod:`~harness.train.timing`, :mod:`~harness.train.perf`) and mid-trial checkpoints
(:mod:`~harness.train.checkpoint`, :mod:`~harness.train.checkpoint_state`). May import
:mod:`harness.core`, :mod:`harness.data`, ``models`` and ``optimizers``; never the config (a trial's
sources become builders through :mod:`harness.core.source_builders`), MLflow, the tracking store or any
higher layer (plan, tracking, execute, sweep, cli). Inside, the arrows are ``build → recipe → program →
(perf, batching, program_rule, algoperf) → loop``; ``checkpoint_state → checkpoint → loop``.
"""
