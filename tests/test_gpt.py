"""The zoo's ``gpt`` and its layers: forward pass and loss against an independent PyTorch model of
modded-nanogpt's optimization track (tests/torch_gpt_reference.py) with the same weights, the
layers against hand-computed values, the parameter paths, the init, and the analytic FLOPs."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import flops, stax
from models.gpt import GPT
from models.zoo import MODELS

KEY = jax.random.PRNGKey(0)


def _perturbed(params, scale=0.1):
    """``params`` plus noise (non-unit gains, non-zero biases and projections)."""
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(7), len(leaves))
    return jax.tree.unflatten(tree, [p + scale * jax.random.normal(k, p.shape) for p, k in zip(leaves, keys,
                                                                                                 strict=True)])


def test_gpt_forward_and_loss_equal_the_torch_reference():
    torch = pytest.importorskip("torch")
    from torch_gpt_reference import GPT as TorchGPT
    from torch_gpt_reference import load_from_stax

    V, T, width, depth, head_dim = 97, 12, 64, 2, 16
    eps = float(np.finfo(np.float32).eps)  # torch's rms_norm default (eps=None) for float32
    model = MODELS["gpt"](input_shape=(T,), num_classes=V, width=width, depth=depth,
                          num_heads=width // head_dim, attn_scale=0.12, logit_softcap=15.0,
                          norm_eps=eps, zero_init=False)
    _, params, state = model.init(KEY, (3, T))
    params = _perturbed(params)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (3, T), 0, V)
    targets = jax.random.randint(jax.random.PRNGKey(2), (3, T), 0, V)
    logits, _ = jax.jit(lambda p, x: model.apply(p, state, x, train=True))(params, tokens)
    loss = model.loss(logits, targets)

    ref = load_from_stax(TorchGPT(V, depth, width, head_dim, scale=0.12, cap=15.0, eps=None), params)
    with torch.no_grad():
        total, ref_logits = ref(torch.from_numpy(np.asarray(tokens)).long(),
                                torch.from_numpy(np.asarray(targets)).long())
    # float32 tolerance: logits are O(10) after the cap; two orders of float32 rounding
    np.testing.assert_allclose(np.asarray(logits), ref_logits.numpy(), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(float(loss), total.item() / targets.size, rtol=2e-6)
    assert float(np.max(np.abs(np.asarray(logits)))) > 1.0  # the comparison saw real values


def test_gpt_param_paths_and_zero_init():
    V, T = 11, 6
    model = MODELS["gpt"](input_shape=(T,), num_classes=V, width=16, depth=2, num_heads=2)
    _, params, state = model.init(KEY, (2, T))
    paths = {jax.tree_util.keystr(p, simple=True, separator="/"): a.shape
             for p, a in jax.tree_util.tree_flatten_with_path(params)[0]}
    assert paths["embed/0"] == (V, 16) and paths["head/kernel"] == (16, V) and paths["norm/0"] == (16,)
    assert paths["blocks/1/attn/q/kernel"] == (16, 16) and paths["blocks/0/mlp/fc/kernel"] == (16, 64)
    assert paths["blocks/0/mlp/proj/kernel"] == (64, 16) and paths["blocks/1/mlp_norm/0"] == (16,)
    assert len(paths) == 4 + 2 * (2 + 8 + 4) + 1  # embed, embed_norm, norm, head (2), blocks
    zero = [params["head"]["kernel"]] + [b[n][m]["kernel"] for b in params["blocks"]
                                         for n, m in (("attn", "out"), ("mlp", "proj"))]
    assert all(float(jnp.max(jnp.abs(z))) == 0.0 for z in zero)
    std = float(jnp.std(params["blocks"][0]["mlp"]["fc"]["kernel"]))
    assert abs(std - math.sqrt(0.33 / 16)) < 0.03  # 1,024 draws of variance 0.33 / fan_in
    # zero head and zero bias: every logit 0, the loss is log(V) exactly
    tokens = jnp.arange(2 * T).reshape(2, T) % V
    out, _ = jax.jit(lambda p, x: model.apply(p, state, x, train=False))(params, tokens)
    assert float(jnp.max(jnp.abs(out))) == 0.0
    np.testing.assert_allclose(float(model.loss(out, tokens)), math.log(V), rtol=1e-6)


def test_tied_head_swiglu_and_softcap_by_hand():
    V, T, d = 13, 5, 8
    model = MODELS["gpt"](input_shape=(T,), num_classes=V, width=d, depth=0, num_heads=2, tied_head=True,
                          bias=False, logit_softcap=3.0, softcap_form="tanh")
    _, params, state = model.init(KEY, (1, T))
    assert params["head"] == {}
    tokens = jnp.arange(T)[None] % V
    x = params["embed"][0][tokens]
    rms = lambda v: v / jnp.sqrt(jnp.mean(v**2, -1, keepdims=True) + 1e-6)  # noqa: E731
    want = 3.0 * jnp.tanh(rms(rms(x)) @ params["embed"][0].T / 3.0)
    out, _ = jax.jit(lambda p, x: model.apply(p, state, x, train=False))(params, tokens)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    # SwiGLU: proj(silu(gate(x)) * fc(x))
    mlp_init, mlp_apply = stax.MLP(6, "swiglu", zero_out=False)
    _, p = mlp_init(KEY, (2, 3, 4))
    xs = jax.random.normal(KEY, (2, 3, 4))
    lin = lambda q, v: v @ q["kernel"] + q["bias"]  # noqa: E731
    want = lin(p["proj"], jax.nn.silu(lin(p["gate"], xs)) * lin(p["fc"], xs))
    np.testing.assert_allclose(mlp_apply(p, xs), want, rtol=1e-5, atol=1e-6)
    # the algebraic cap: 15 x / sqrt(x^2 + 225) at x = 20 is 12
    assert float(stax.soft_cap(jnp.float32(20.0), 15.0, "algebraic")) == pytest.approx(12.0, rel=1e-6)


def test_rmsnorm_and_rope_by_hand():
    x = jnp.array([[3.0, 4.0]])
    init, apply = stax.RMSNorm(epsilon=0.0)
    _, (gamma,) = init(KEY, x.shape)
    ms = (9 + 16) / 2
    np.testing.assert_allclose(apply((gamma * 2,), x), 2 * x / math.sqrt(ms), rtol=1e-6)
    assert apply((gamma,), x.astype(jnp.bfloat16)).dtype == jnp.bfloat16
    # head dim 8, base 1024, half truncated: 2 rotating pairs at 1 and 1/1024, 2 still
    np.testing.assert_allclose(stax.rope_frequencies(8), [1.0, 1 / 1024, 0.0, 0.0], rtol=1e-6)
    # one rotating pair (D = 2, fraction 1): position t rotates (a, b) by -t radians
    q = jnp.ones((1, 3, 1, 2))
    got = stax.apply_rope(q, stax.rope_frequencies(2, fraction=1.0))
    t = np.arange(3.0)
    np.testing.assert_allclose(got[0, :, 0], np.stack([np.cos(t) + np.sin(t), np.cos(t) - np.sin(t)], -1),
                               rtol=1e-6, atol=1e-6)
    # relative: scores of rotated q, k depend on the offset only
    k = jax.random.normal(KEY, (1, 6, 1, 8))
    freqs = stax.rope_frequencies(8, fraction=1.0)
    r = stax.apply_rope(k, freqs)
    shifted = stax.apply_rope(jnp.concatenate([k[:, 3:], k[:, :3]], axis=1), freqs)
    np.testing.assert_allclose(r[0, 1, 0] @ r[0, 0, 0], shifted[0, 4, 0] @ shifted[0, 3, 0], rtol=1e-5)
    with pytest.raises(ValueError, match="even head dimension, got 5"):
        stax.rope_frequencies(5)
    with pytest.raises(ValueError, match=r"rope_frequencies: base must be > 1 and fraction in \[0, 1\], "
                                         r"got 0.5"):
        stax.rope_frequencies(8, base=0.5)


def test_rotary_attention_refuses_a_bad_rope_when_built():
    # refused when the layer is built, not on every apply (rope_frequencies runs in apply_fun)
    with pytest.raises(ValueError, match=r"RotarySelfAttention: rope_base must be > 1 and rope_fraction "
                                         r"in \[0, 1\], got 0.5, 0.5"):
        stax.RotarySelfAttention(2, rope_base=0.5)
    with pytest.raises(ValueError, match=r"rope_fraction in \[0, 1\], got 1024.0, 1.5"):
        stax.RotarySelfAttention(2, rope_fraction=1.5)


def test_gpt_flops_per_token_match_its_jaxpr():
    V, T, d, L, H = 50, 16, 32, 3, 4
    model = MODELS["gpt"](input_shape=(T,), num_classes=V, width=d, depth=L, num_heads=H)
    _, params, state = model.init(KEY, (1, T))
    mm = flops.jaxpr_flops(lambda p, x: model.apply(p, state, x, train=False)[0], params,
                           jnp.zeros((1, T), jnp.int32), matmul_only=True)
    full = flops.lm_train_flops_per_token(width=d, depth=L, context=T, vocab_size=V, mlp_dim=4 * d,
                                          causal=False)
    assert mm == full / 3 * T  # every matmul of the forward pass, all T x T scores
    n = L * (4 * d * d + 2 * d * 4 * d) + d * V
    causal = 6 * n + 12 * L * T * d / 2
    assert model.flops_per_example() == pytest.approx(causal / 3 * T, rel=1e-12)
    swiglu = flops.lm_train_flops_per_token(width=d, depth=L, context=T, vocab_size=V, mlp_dim=64,
                                            mlp_matrices=3)
    assert swiglu == 6 * (L * (4 * d * d + 3 * d * 64) + d * V) + 6 * L * T * d


@pytest.mark.parametrize("hp, message", [
    ({"width": 48, "num_heads": 5}, "gpt: width 48 must be divisible by num_heads 5"),
    ({"width": 12, "num_heads": 4}, "head dimension width / num_heads = 3 must be even"),
    ({"context": 32}, "gpt: context 32 differs from the dataset's sequence length 8"),
    ({"mlp": "relu3"}, "gpt: mlp must be one of ['gelu', 'relu2', 'swiglu'], got 'relu3'"),
    ({"vocab_size": 7}, "vocab_size 7 differs from the dataset's 11 token classes"),
])
def test_gpt_bad_hyperparameters(hp, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        MODELS["gpt"](input_shape=(8,), num_classes=11, **hp)


def test_gpt_layer_reference_style_and_gradients():
    init, apply = GPT(7, 8, 1, 2, mlp="gelu", zero_init=False)
    out_shape, params = init(KEY, (2, 4))
    assert out_shape == (2, 4, 7)
    tokens = jnp.array([[1, 2, 3, 4], [0, 6, 5, 1]])
    loss = lambda p: jnp.mean(apply(p, tokens) ** 2)  # noqa: E731
    grads = jax.jit(jax.grad(loss))(params)
    assert jax.tree.structure(grads) == jax.tree.structure(params)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grads))
    assert float(jnp.max(jnp.abs(grads["blocks"][0]["attn"]["q"]["kernel"]))) > 0


def test_sweep_refuses_bad_gpt_entries_before_any_work(tmp_path, write_sweep, monkeypatch):
    from typer.testing import CliRunner

    from harness.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = write_sweep(models=[{"name": "gpt", "hparams": {"width": 48, "num_heads": 5}},
                              {"name": "gpt", "hparams": {"width": 12, "num_heads": 4}},
                              {"name": "gpt", "hparams": {"width": 8, "num_heads": 2, "context": 64}}],
                      datasets=[{"name": "markov_lm", "hparams": {"seq_len": 16}}],
                      target={"metric": "valid/loss", "value": 1.0})
    r = CliRunner().invoke(app, ["sweep", str(cfg)])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith(f"{cfg}: ")]
    assert len(lines) == 3, r.output
    # width and num_heads together are the problem: the line names the entry's hparams
    assert lines[0].startswith(f"{cfg}: models[0].hparams: model 'gpt' (num_heads=5, width=48) on dataset "
                               f"'markov_lm' with input shape (16,): ")
    assert lines[0].endswith("gpt: width 48 must be divisible by num_heads 5")
    assert lines[1].startswith(f"{cfg}: models[1].hparams: model 'gpt'")
    assert lines[1].endswith("head dimension width / num_heads = 3 must be even for rotary embeddings "
                             "(they rotate pairs of features)")
    assert lines[2].startswith(f"{cfg}: models[2].hparams.context: model 'gpt'")
    assert "context 64 differs from the dataset's sequence length 16" in lines[2]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def test_mfu_is_logged_from_the_analytic_count():
    from conftest import make_spec

    from harness.core import names
    from harness.core.spec import Curves, PerfResult, TrialResult
    from harness.tracking.trial_run import result_metrics

    perf = PerfResult(compile_s=1.0, step_time_ms=10.0, step_time_ms_p10=9.0, step_time_ms_p90=11.0,
                      examples_per_sec=800.0, flops_per_step=4e9, flops_per_step_analytic=3e9,
                      peak_flops=1e12, utilization=0.4)
    res = TrialResult(spec=make_spec(), status="finished", curves=Curves(), perf=perf)
    logged = {k: v for k, v, _s, _t in result_metrics(res, 0).rows}
    assert logged[names.M_MFU] == pytest.approx(3e9 / 0.010 / 1e12)  # 0.3, beside XLA's 0.4
    assert logged[names.M_UTIL] == 0.4
    res = TrialResult(spec=make_spec(), status="finished", curves=Curves(),
                      perf=PerfResult(compile_s=1.0, step_time_ms=10.0, step_time_ms_p10=9.0,
                                      step_time_ms_p90=11.0, examples_per_sec=800.0))
    assert names.M_MFU not in {k for k, *_ in result_metrics(res, 0).rows}  # no analytic count


def test_bfloat16_params_compute_in_bfloat16_with_float32_logits():
    model = MODELS["gpt"](input_shape=(16,), num_classes=50, width=32, depth=2, num_heads=2, zero_init=False,
                          logit_softcap=15.0)
    _, params, state = model.init(KEY, (2, 16))
    tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 16), 0, 50)
    f = jax.jit(lambda p: model.apply(p, state, tokens, train=False)[0])
    full, half = f(params), f(jax.tree.map(lambda t: t.astype(jnp.bfloat16), params))
    assert full.dtype == half.dtype == jnp.float32
    # bfloat16 keeps 8 bits of mantissa: logits of magnitude ~4 agree to a few hundredths
    assert 0 < float(jnp.max(jnp.abs(full - half))) < 0.1


def test_a_fractional_head_count_or_head_dimension_is_refused_not_truncated():
    with pytest.raises(ValueError, match=r"num_heads must be a positive integer, got 2.5"):
        stax.RotarySelfAttention(2.5)
    with pytest.raises(ValueError, match=r"even head dimension, got 2.5"):
        stax.rope_frequencies(2.5)
    assert stax.rope_frequencies(np.int64(4)).shape == (2,)
