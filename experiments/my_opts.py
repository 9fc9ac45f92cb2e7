"""A hand-written optimizer for experiments/byo.yaml: Adam (Kingma & Ba 2015) in a few lines.

The harness knows nothing about this file until a config names it (``source: "my_opts.py:my_adam"``):
its hyperparameters are read from the signature below, and each trial's id includes a digest of
the code ``my_adam`` depends on (docstrings and comments left out), so changing it and re-running
the sweep trains its trials again.
"""

import jax.numpy as jnp

from optimizers import make_schedule, optimizer


@optimizer
def my_adam(step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    """Adam with bias correction; ``step_size`` is a float, a traced scalar or a schedule."""
    lr = make_schedule(step_size)

    def init(x):
        return x, jnp.zeros_like(x), jnp.zeros_like(x)

    def update(i, g, state):
        x, m, v = state
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1 ** (i + 1))
        v_hat = v / (1 - b2 ** (i + 1))
        return x - lr(i) * m_hat / (jnp.sqrt(v_hat) + eps), m, v

    def get_params(state):
        return state[0]

    return init, update, get_params
