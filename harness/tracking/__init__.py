"""Tracking: everything that talks to MLflow or the store beside it.

Owns tracking URIs and health checks, the MLflow client, owner liveness and heartbeats, the SQLite
store (atomic creation, repair, per-trial claims), the local spool of results the store did not
take, and the MLflow UI's experiment tags. May import :mod:`harness.core` and MLflow; never the
trainer, the executors or the sweep.
"""
