"""loss_reduction: sum differentiates the token loss's sum over tokens and micro-batches (torch's
``F.cross_entropy(..., reduction="sum").backward()`` per micro-batch, as modded-nanogpt), logs
per-token means, joins the trial id only when set, is recorded on the run, and is refused before
any work on a model without a token loss."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import make_spec
from typer.testing import CliRunner

from harness.cli import app
from harness.train.loop import run_trial
from harness.train.recipe import accumulate, token_sum
from models.zoo import sequence_cross_entropy

V, F = 7, 5


def _batch():
    rng = np.random.default_rng(0)
    x = rng.integers(0, V, (4, 6))
    y = rng.integers(0, V, (4, 6))
    y[1, 2:] = -1  # padding in the first micro-batch only: its token count differs from the second's
    return x, y


def _loss(params, mstate, xb, yb, rng):
    logits = params["emb"][xb] @ params["w"]
    return sequence_cross_entropy(logits, yb), mstate


def _count(xb, yb):
    return jnp.sum(yb >= 0).astype(jnp.float32)


def test_sum_gradient_equals_torchs_summed_backward_over_micro_batches():
    """2 micro-batches of 2 sequences, one with 4 padding tokens: the gradient is torch's, where
    each micro-batch's ``reduction="sum"`` loss is backpropagated into the same .grad (rtol 1e-5);
    the loss reported is the mean of the micro-batches' per-token means."""
    rng = np.random.default_rng(1)
    p = {"emb": rng.normal(size=(V, F)).astype(np.float32), "w": rng.normal(size=(F, V)).astype(np.float32)}
    x, y = _batch()
    fn = accumulate(token_sum(_loss, _count), 2, "sum")
    (loss, _), g = fn(jax.tree.map(jnp.asarray, p), None, jnp.asarray(x), jnp.asarray(y), None)

    tp = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    means = []
    for j in range(2):
        xm, ym = torch.tensor(x[2 * j:2 * j + 2]), torch.tensor(y[2 * j:2 * j + 2])
        logits = tp["emb"][xm] @ tp["w"]
        total = torch.nn.functional.cross_entropy(logits.reshape(-1, V), ym.reshape(-1), reduction="sum",
                                                  ignore_index=-1)
        total.backward()
        means.append(total.item() / int((ym >= 0).sum()))
    for k in p:
        np.testing.assert_allclose(g[k], tp[k].grad.numpy(), rtol=1e-5, atol=1e-5)
    assert float(loss) == pytest.approx(sum(means) / 2, rel=1e-6)
    # 8 of 12 tokens in micro-batch 0, 12 in 1: the sum's gradient is not 20 × the mean's
    (_, _), g_mean = accumulate(jax.value_and_grad(_loss, has_aux=True), 2)(
        jax.tree.map(jnp.asarray, p), None, jnp.asarray(x), jnp.asarray(y), None)
    assert not np.allclose(g["w"], 20 * g_mean["w"], rtol=1e-3)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from harness.data.shards import write_shard

    root = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(3)
    write_shard(root / "c_train_000.bin", rng.integers(0, 64, 4_000).astype(np.uint16))
    write_shard(root / "c_val_000.bin", rng.integers(0, 64, 600).astype(np.uint16))
    return root


def test_sgd_on_the_sum_is_sgd_on_the_mean_at_tokens_times_the_step(corpus):
    """A real trial (gpt on token shards, 4 × 8 tokens a batch, 2 micro-batches): SGD at step size
    η on the sum takes the steps SGD at η · 32 takes on the mean, so the logged per-token train
    losses agree (rtol 2e-5) and stay per-token means (≈ ln 64 at the start, not 32 × that)."""
    common = dict(model="gpt", optimizer="sgd", dataset=f"tokens:{corpus}", steps=6, batch_size=4,
                  eval_every=6, steps_per_dispatch=6, model_hparams={"width": 16, "depth": 0, "num_heads": 2},
                  dataset_hparams={"seq_len": 8, "vocab_size": 64, "valid_tokens": 300, "test_tokens": 300})
    summed = run_trial(make_spec(**common, optimizer_hparams={"step_size": 0.01},
                                 recipe={"loss_reduction": "sum", "grad_accum": 2}), measure_perf=False)
    mean = run_trial(make_spec(**common, optimizer_hparams={"step_size": 0.32},
                               recipe={"grad_accum": 2}), measure_perf=False)
    np.testing.assert_allclose(summed.curves.train_loss, mean.curves.train_loss, rtol=2e-5)
    assert summed.curves.train_loss[0] == pytest.approx(np.log(64), rel=0.05)
    assert summed.final_valid_loss == pytest.approx(mean.final_valid_loss, rel=2e-5)


def _specs(path):
    from harness.config.load import load_config
    from harness.orchestrate.run import expand

    return list(expand(load_config(path)))


def test_trial_ids_change_only_with_sum(corpus, write_sweep):
    """``mean`` (the default) keeps every trial id; ``sum`` is in the recipe, the ids and the params."""
    lm = {"models": [{"name": "gpt", "hparams": {"width": 16, "depth": 1, "num_heads": 2}}],
          "datasets": [{"name": f"tokens:{corpus}", "hparams": {"seq_len": 8, "vocab_size": 64}}]}
    plain = _specs(write_sweep("a.yaml", **lm))
    assert [s.trial_id for s in _specs(write_sweep("b.yaml", loss_reduction="mean", **lm))] == \
        [s.trial_id for s in plain]
    summed = _specs(write_sweep("c.yaml", loss_reduction="sum", **lm))
    assert not {s.trial_id for s in summed} & {s.trial_id for s in plain}
    assert dict(summed[0].recipe) == {"loss_reduction": "sum"} and plain[0].recipe == ()
    assert summed[0].flat_params()["train.loss_reduction"] == "sum"
    assert "train.loss_reduction" not in plain[0].flat_params()


@pytest.mark.parametrize("over, line", [
    ({"loss_reduction": "sum"}, "loss_reduction: sum needs a model with a token loss (a sequence model); "
                                "models[0] (mlp) is a classification model"),
    ({"loss_reduction": "max"}, "loss_reduction:"),
])
def test_refused_before_any_work(tmp_path, write_sweep, monkeypatch, over, line):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = write_sweep(**over)
    r = CliRunner().invoke(app, ["sweep", str(cfg)])
    assert r.exit_code == 2, r.output
    assert f"{cfg}: {line}" in r.output
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()
