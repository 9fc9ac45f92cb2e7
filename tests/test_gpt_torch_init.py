"""``gpt``'s ``init: torch``: torch's default ``nn.Linear``/``nn.Embedding`` initialisation (uniform on
±1/sqrt(fan_in) for kernels and biases, normal(0, 1) for the embedding, gains ones), the
``zero_init`` projections at zero bias included, as modded-nanogpt's AdamW baseline; the default
initialisation unchanged."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
import torch

from models.zoo import gpt

WIDTH, VOCAB = 64, 300


@functools.cache
def _init(kw: tuple):
    m = gpt(input_shape=(16,), num_classes=VOCAB, width=WIDTH, depth=2, num_heads=2, **dict(kw))
    return m.init(jax.random.key(0), (1, 16))[1]


def _params(**kw):
    return _init(tuple(sorted(kw.items())))


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov–Smirnov statistic."""
    a, b = np.sort(a.ravel()), np.sort(b.ravel())
    grid = np.concatenate([a, b])
    cdf_a, cdf_b = np.searchsorted(a, grid, "right") / a.size, np.searchsorted(b, grid, "right") / b.size
    return float(np.max(np.abs(cdf_a - cdf_b)))


def test_torch_init_moments_match_the_formula():
    """Each linear layer's kernel and bias lie in [-b, b), b = 1/sqrt(fan_in), with mean 0 and
    variance b²/3 within 5 standard errors of the sample; the embedding's mean 0 and variance 1
    likewise; out/proj/head zero (bias included) under zero_init; gains ones."""
    p = _params(init="torch")
    blk = p["blocks"][0]
    hidden = 4 * WIDTH
    attn, mlp = blk["attn"], blk["mlp"]
    for name, x, fan_in in (("q.kernel", attn["q"]["kernel"], WIDTH), ("q.bias", attn["q"]["bias"], WIDTH),
                            ("v.kernel", attn["v"]["kernel"], WIDTH),
                            ("fc.kernel", mlp["fc"]["kernel"], WIDTH), ("fc.bias", mlp["fc"]["bias"], WIDTH)):
        x = np.asarray(x, np.float64).ravel()
        b, n = fan_in ** -0.5, x.size
        assert x.min() >= -b and x.max() < b, name
        var = b * b / 3
        assert abs(x.mean()) < 5 * np.sqrt(var / n), name
        assert abs(x.var() - var) < 5 * b * b * np.sqrt(4 / 45 / n), name  # Var(s²) = (b⁴/5 - b⁴/9)/n
        if n > 1000:
            assert x.max() > 0.99 * b and x.min() < -0.99 * b, name  # the whole interval, not a narrower one
    emb = np.asarray(p["embed"][0], np.float64).ravel()
    assert abs(emb.mean()) < 5 / np.sqrt(emb.size) and abs(emb.var() - 1) < 5 * np.sqrt(2 / emb.size)
    for layer in (blk["attn"]["out"], blk["mlp"]["proj"], p["head"]):
        assert not np.any(np.asarray(layer["kernel"])) and not np.any(np.asarray(layer["bias"]))
    assert np.all(np.asarray(p["norm"][0]) == 1) and np.all(np.asarray(blk["attn_norm"][0]) == 1)
    assert p["blocks"][1]["mlp"]["proj"]["kernel"].shape == (hidden, WIDTH)
    free = _params(init="torch", zero_init=False)  # nothing zeroed: the head is torch's too
    h = np.asarray(free["head"]["kernel"], np.float64)
    assert abs(h).max() < WIDTH ** -0.5 and abs(h.var() - 1 / (3 * WIDTH)) < 0.05 / (3 * WIDTH)
    proj = np.asarray(free["blocks"][0]["mlp"]["proj"]["bias"])
    assert np.any(proj) and abs(proj).max() < hidden ** -0.5


def test_torch_init_draws_as_torch_does():
    """Two-sample KS against torch's own ``nn.Linear`` (64 -> 256) and ``nn.Embedding`` draws: below
    the 1% critical value 1.63·sqrt((n + m)/(n·m))."""
    p = _params(init="torch")
    torch.manual_seed(0)
    lin, emb = torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.Embedding(VOCAB, WIDTH)
    pairs = ((p["blocks"][0]["mlp"]["fc"]["kernel"], lin.weight.detach().numpy().T),
             (p["blocks"][1]["mlp"]["fc"]["bias"], lin.bias.detach().numpy()),
             (p["embed"][0], emb.weight.detach().numpy()))
    for ours, theirs in pairs:
        n, m = np.size(ours), np.size(theirs)
        assert _ks(np.asarray(ours), theirs) < 1.63 * np.sqrt((n + m) / (n * m))
    other = np.random.default_rng(0).normal(0, WIDTH ** -0.5 / 3 ** 0.5, lin.weight.shape)  # same variance
    n = lin.weight.numel()
    assert _ks(other, lin.weight.detach().numpy()) > 1.63 * np.sqrt(2 / n)  # the test tells the shape apart


def test_default_init_unchanged():
    """The default equals ``init: modded`` and the values the code gave before the option (pinned at
    key 0: the sum of squares of every parameter and two entries)."""
    d, m = _params(), _params(init="modded")
    assert all(jax.tree.leaves(jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), d, m)))
    total = sum(float(np.sum(np.asarray(x, np.float64) ** 2)) for x in jax.tree.leaves(d))
    assert total == pytest.approx(20253.280759355184, rel=1e-6)
    assert float(d["blocks"][0]["attn"]["q"]["kernel"][0, 0]) == pytest.approx(-0.09414226561784744, rel=1e-6)
    assert float(d["embed"][0][3, 5]) == pytest.approx(-1.2284109592437744, rel=1e-6)
    with pytest.raises(ValueError, match=r"gpt: init must be one of \['modded', 'torch'\], got 'xavier'"):
        _params(init="xavier")
