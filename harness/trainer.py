"""The old import path of the trainer, kept for users' code: see :mod:`harness.train.loop`."""

from harness.train.loop import run_trial, run_trials_batched

__all__ = ["run_trial", "run_trials_batched"]
