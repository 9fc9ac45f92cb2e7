"""Test submission without update_params (or data_selection)."""


def get_batch_size(workload_name):
    return 16


def init_optimizer_state(workload, model_params, model_state, hyperparameters, rng):
    return {}
