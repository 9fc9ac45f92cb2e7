"""An independent PyTorch GPT, written for the tests from reading the model of modded-nanogpt's
optimization track (``records/track_3_optimization/train_gpt_simple.py``, KellerJordan/
modded-nanogpt): RMSNorm on the embedding, pre-norm blocks of causal attention (separate q/k/v
Linear layers with biases, QK-norm, half-truncated rotary embeddings, scale 0.12) and a ReLU² MLP,
a final RMSNorm, an untied Linear head, the algebraic soft-cap ``15·x/sqrt(x² + 15²)`` and a
summed cross-entropy. Head size, attention scale, soft-cap and norm epsilon are parameters here so
that small dimensions can be tested; float32 throughout (the track's embedding is bfloat16).

``load_from_stax(model, params)`` copies the harness's ``gpt`` params into it (torch's Linear
weight is the transpose of a stax kernel).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class Rotary(nn.Module):
    def __init__(self, head_dim: int, base: float = 1024.0):
        super().__init__()
        quarter = head_dim // 4
        freq = (1.0 / base) ** torch.linspace(0, 1, steps=quarter, dtype=torch.float32)
        self.register_buffer("freq", torch.cat([freq, freq.new_zeros(head_dim // 2 - quarter)]))

    def forward(self, x):  # (B, T, H, D)
        t = torch.arange(x.size(1), dtype=torch.float32)
        angle = torch.outer(t, self.freq)[None, :, None, :]
        c, s = angle.cos(), angle.sin()
        a, b = x.float().chunk(2, dim=-1)
        return torch.cat((a * c + b * s, b * c - a * s), dim=-1).type_as(x)


class Attention(nn.Module):
    def __init__(self, dim: int, head_dim: int, scale: float, eps: float | None):
        super().__init__()
        self.h, self.d, self.scale, self.eps = dim // head_dim, head_dim, scale, eps
        self.q, self.k, self.v = (nn.Linear(dim, dim) for _ in range(3))
        self.proj = nn.Linear(dim, dim)
        self.rotary = Rotary(head_dim)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = (lin(x).view(B, T, self.h, self.d) for lin in (self.q, self.k, self.v))
        q = self.rotary(F.rms_norm(q, (self.d,), eps=self.eps))
        k = self.rotary(F.rms_norm(k, (self.d,), eps=self.eps))
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           scale=self.scale, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, self.h * self.d))


class Block(nn.Module):
    def __init__(self, dim, head_dim, scale, eps):
        super().__init__()
        self.eps = eps
        self.g1, self.g2 = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.ones(dim))
        self.attn = Attention(dim, head_dim, scale, eps)
        self.fc, self.mlp_proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(F.rms_norm(x, (x.size(-1),), self.g1, eps=self.eps))
        h = F.relu(self.fc(F.rms_norm(x, (x.size(-1),), self.g2, eps=self.eps))).square()
        return x + self.mlp_proj(h)


class GPT(nn.Module):
    def __init__(self, vocab, layers, dim, head_dim, scale=0.12, cap=15.0, eps=None):
        super().__init__()
        self.eps, self.cap = eps, cap
        self.embed = nn.Embedding(vocab, dim)
        self.g_embed, self.g_final = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.ones(dim))
        self.blocks = nn.ModuleList([Block(dim, head_dim, scale, eps) for _ in range(layers)])
        self.head = nn.Linear(dim, vocab)

    def logits(self, tokens):
        x = F.rms_norm(self.embed(tokens), (self.embed.embedding_dim,), self.g_embed, eps=self.eps)
        for block in self.blocks:
            x = block(x)
        z = self.head(F.rms_norm(x, (x.size(-1),), self.g_final, eps=self.eps)).float()
        return self.cap * z * (z.square() + self.cap ** 2).rsqrt()

    def forward(self, tokens, targets):
        """Summed cross-entropy over every token (the track's ``reduction="sum"``) and the logits."""
        z = self.logits(tokens)
        return F.cross_entropy(z.view(targets.numel(), -1), targets.view(-1), reduction="sum"), z


def _set(param, value, transpose=False):
    arr = np.asarray(value, np.float32)
    param.data.copy_(torch.from_numpy(arr.T.copy() if transpose else arr))


def _linear(lin, p):
    _set(lin.weight, p["kernel"], transpose=True)
    _set(lin.bias, p["bias"])


def load_from_stax(model: GPT, params) -> GPT:
    """Copy the harness ``gpt``'s ``params`` (dict of its docstring) into ``model``; returns it."""
    _set(model.embed.weight, params["embed"][0])
    _set(model.g_embed, params["embed_norm"][0])
    _set(model.g_final, params["norm"][0])
    _linear(model.head, params["head"])
    for block, p in zip(model.blocks, params["blocks"], strict=True):
        _set(block.g1, p["attn_norm"][0])
        _set(block.g2, p["mlp_norm"][0])
        for name in ("q", "k", "v"):
            _linear(getattr(block.attn, name), p["attn"][name])
        _linear(block.attn.proj, p["attn"]["out"])
        _linear(block.fc, p["mlp"]["fc"])
        _linear(block.mlp_proj, p["mlp"]["proj"])
    return model
