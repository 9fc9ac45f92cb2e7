"""The harness's shared vocabulary: records, names and small rules, standard library only.

Owns the records that flow through a sweep (:mod:`~harness.core.spec`: ``TrialSpec`` in,
``TrialResult`` out; :mod:`~harness.core.outcome`: ``TrialOutcome``, one constructor per source;
:mod:`~harness.core.context`: ``RunContext``, what a worker needs to log a unit), every MLflow name
with the legacy ``eval/*`` map (:mod:`~harness.core.names`), the selection rule that the sweep's
summary and the reports share (:mod:`~harness.core.selection_rule`), the significance of a target claim
(:mod:`~harness.core.significance`), the name → builder registry helpers
(:mod:`~harness.core.builders`: signature → hyperparameters, did-you-mean, executor names,
``Registries``), a user's source as a builder (:mod:`~harness.core.source_builders`), the rules the
trainer shares with the config (:mod:`~harness.core.cadence`, :mod:`~harness.core.augment_keys`,
:mod:`~harness.core.env_switches`, :mod:`~harness.core.echo`) and small shared rules, a module each
(the cache folder and atomic JSON :mod:`~harness.core.cache_files`, process liveness
:mod:`~harness.core.processes`, frozen mappings :mod:`~harness.core.freeze`, finite numbers
:mod:`~harness.core.finite`, a logger's level :mod:`~harness.core.log_level`).
It imports nothing but the standard library and nothing of ``harness`` outside itself, so every
other subpackage, and ``reports``, may import it cheaply.
"""
