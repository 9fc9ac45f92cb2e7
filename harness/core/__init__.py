"""The harness's shared vocabulary: records, names and small rules, standard library only.

Owns the records that flow through a sweep (:mod:`harness.core.spec`: ``TrialSpec``, ``TrialResult``),
the name → builder registry helpers (:mod:`harness.core.registry`: signature → hyperparameters,
did-you-mean, executor names). It imports nothing but the standard library and nothing of
``harness``, so every other subpackage, and ``reports``, may import it cheaply.
"""
