"""Tracking: everything that talks to MLflow or the store beside it.

Owns, one job a module: what store errors mean (:mod:`~harness.tracking.store_errors`), tracking URIs and a
server's health (:mod:`~harness.tracking.uris`), the MLflow client and its queries
(:mod:`~harness.tracking.client`), this process's store health (:mod:`~harness.tracking.health`),
run owners and heartbeats (:mod:`~harness.tracking.liveness`), writing a run's metrics, params and
inputs (:mod:`~harness.tracking.run_data`), provenance tags (:mod:`~harness.tracking.provenance`),
de-duplication of FINISHED runs (:mod:`~harness.tracking.dedupe`), the SQLite store (classification
:mod:`~harness.tracking.store_state`, schema building :mod:`~harness.tracking.store_build`, repair
:mod:`~harness.tracking.store_repair`, atomic creation :mod:`~harness.tracking.store`), per-trial
claims (:mod:`~harness.tracking.claim_locks`), the local spool of results the store did not take
(:mod:`~harness.tracking.spool`), the MLflow layout of one trial's run and the rule that classifies a
trial's runs (:mod:`~harness.tracking.trial_run`), and the MLflow UI's experiment tags
(:mod:`~harness.tracking.mlflow_ui`). May import :mod:`harness.core` (and ``harness`` itself for its
version), MLflow and ``filelock``; never the trainer, the config, the plan, the executors or the
sweep.
"""
