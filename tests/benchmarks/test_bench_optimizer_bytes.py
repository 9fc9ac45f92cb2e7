"""Memory traffic of one update: XLA's ``bytes accessed`` (``compiled.cost_analysis()``) of the
harness's ``adamw``, and of ``muon``'s auxiliary AdamW, against Optax's on the same tree.

The tree is ``gpt``'s at vocabulary 50,304, width 256, depth 4 (28,963,456 float32 parameters).
Both sides are what a training step runs: the harness's ``update_fn(i, grads, state)`` (the new
parameters are in its state) against Optax's ``update`` plus ``optax.apply_updates``. Target:
<= 1.1x Optax. Compiled accounting, so the figure does not move with the machine's load.

Both compiled alike (jitted, nothing donated). Measured (2026-12-07, jax on the CPU, two runs with
the same figures; XLA counts each fusion's operands and results):

    ============================== ============ ============ =====
    update                         harness GB   optax GB     ratio
    ============================== ============ ============ =====
    adamw (weight_decay 0.1)       1.159        1.159        1.00
    muon, every leaf to AdamW      1.274        1.274        1.00
    ============================== ============ ============ =====

(the muon row against ``optax.adamw(..., nesterov=True)``, the AdamW muon runs on a leaf its mask
leaves out). With the state donated, as the trainer does, the harness's figures stay 1.159 and
1.274 GB while Optax's (parameters and state donated) read 2.085 and 2.201 GB. Optax's ``update``
alone, without ``apply_updates``, reads 1.159 GB for adamw (1.043 for adam) in the same build.
"""

import jax
import jax.numpy as jnp
import pytest

import optimizers as O
from models.zoo import MODELS

optax = pytest.importorskip("optax")


@pytest.fixture(scope="module")
def gpt_params():
    md = MODELS["gpt"](input_shape=(128,), vocab_size=50_304, width=256, depth=4)
    _, shapes, _ = jax.eval_shape(lambda k: md.init(k, (8, 128)), jax.random.PRNGKey(0))
    params = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)
    assert sum(x.size for x in jax.tree.leaves(params)) == 28_963_456
    return params


def _ours(opt, params):
    lowered = jax.jit(opt.update_fn).lower(jnp.int32(0), params, opt.init_fn(params))
    return lowered.compile().cost_analysis()["bytes accessed"]


def _optax(tx, params):
    def step(g, s, p):
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    lowered = jax.jit(step).lower(params, tx.init(params), params)
    return lowered.compile().cost_analysis()["bytes accessed"]


CASES = {
    "adamw": (lambda p: O.adamw(1e-3, weight_decay=0.1),
              lambda: optax.adamw(1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.1)),
    "muon_aux_adamw": (lambda p: O.OPTIMIZERS["muon"](1e-3, adam_weight_decay=0.1,
                                                      muon_mask=jax.tree.map(lambda _: False, p)),
                       lambda: optax.adamw(1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.1,
                                           nesterov=True)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_update_bytes_accessed_at_most_1_1x_optax(benchmark, gpt_params, name):
    ours, twin = CASES[name]
    benchmark.group = "optimizer bytes accessed"
    mine = benchmark.pedantic(lambda: _ours(ours(gpt_params), gpt_params), rounds=1, iterations=1)
    theirs = _optax(twin(), gpt_params)
    benchmark.extra_info.update(harness_bytes=mine, optax_bytes=theirs, ratio=mine / theirs)
    print(f"{name}: bytes accessed harness {mine / 1e9:.3f} GB, optax {theirs / 1e9:.3f} GB, "
          f"ratio {mine / theirs:.3f}")
    assert mine <= 1.1 * theirs
