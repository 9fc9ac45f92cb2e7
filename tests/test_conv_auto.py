"""conv_impl 'auto': im2col patches inside loops on a CPU, XLA's convolution outside them; a CPU chunk
whose convolutions are large runs as K dispatches of one step (no loop) with XLA's convolution."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
from conftest import make_spec

from harness.data.sources import load_dataset
from harness.train import program
from models import stax
from models.flops import conv_flops


def _prims(fn, *args) -> set[str]:
    return {e.primitive.name for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns}


def test_auto_is_patches_on_a_cpu_unless_outside_loops():
    init, apply = stax.Conv(4, (3, 3), padding="SAME", impl="auto")
    _, params = init(jax.random.PRNGKey(0), (2, 5, 5, 3))
    x = jnp.ones((2, 5, 5, 3))
    assert "conv_general_dilated" not in _prims(lambda p: apply(p, x), params)
    with stax.conv_outside_loops():
        assert "conv_general_dilated" in _prims(lambda p: apply(p, x), params)
    assert "conv_general_dilated" not in _prims(lambda p: apply(p, x), params)  # reset after it
    # 2 x batch x out channels x in channels x (valid position, tap) pairs: 3x3 SAME on 5x5 = 169
    with stax.conv_outside_loops():
        assert conv_flops(lambda p: apply(p, x), params) == 2 * 2 * 4 * 3 * 169


def _chunk_losses(monkeypatch, threshold: float):
    monkeypatch.setattr(program, "PROGRAMS", collections.OrderedDict())
    monkeypatch.setattr(program, "CONV_LOOP_FLOPS", threshold)
    spec = make_spec(model="cnn", model_hparams={"width": 4, "hidden": 0}, steps=4, eval_every=4,
                     steps_per_dispatch=4, batch_size=16)
    prog = program.program_for(spec, load_dataset("digits"))
    e = prog.entry
    state = prog.init_seeded(0, 0.01)[0]
    exe, _ = prog.get_chunk(None, 4, state, jnp.int32(0), e.x_train, e.y_train)
    state, losses = exe(state, jnp.int32(0), e.x_train, e.y_train)
    hlo = exe.steps_exe.as_text()
    return type(exe).__name__, np.asarray(losses), jax.tree.map(np.asarray, prog.params(state)), hlo


def test_a_chunk_of_large_convolutions_runs_as_steps_without_a_loop(monkeypatch):
    """The digits CNN: ~0.5 MFLOP of convolutions a step (batch 16); with the threshold below it, the chunk
    is 4 one-step dispatches with XLA's convolution, and trains as the scan with patches does."""
    kind_scan, loss_scan, p_scan, hlo_scan = _chunk_losses(monkeypatch, 1e12)
    kind_loop, loss_loop, p_loop, hlo_loop = _chunk_losses(monkeypatch, 1.0)
    assert (kind_scan, kind_loop) == ("Chunk", "LoopChunk")
    # the one step has XLA's convolution and no loop (a scan of length 1 kept a while loop: 38x flax)
    assert " while(" in hlo_scan and " while(" not in hlo_loop
    assert "convolution(" in hlo_loop and "convolution(" not in hlo_scan
    assert loss_loop.shape == loss_scan.shape == (4,)
    np.testing.assert_allclose(loss_loop, loss_scan, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(p_loop), jax.tree.leaves(p_scan), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
