"""Test submission: the example NAdamW (experiments/submissions/nadamw.py, copied beside this file
by the test) with a batch size of its own for the workload mnist1d_mlp."""

from nadamw import data_selection, init_optimizer_state, update_params  # noqa: F401


def get_batch_size(workload_name):
    return {"mnist1d_mlp": 48}[workload_name]
