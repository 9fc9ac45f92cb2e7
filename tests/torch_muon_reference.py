"""An independent PyTorch port, written for the tests from reading the optimizers of modded-nanogpt's
optimization track (KellerJordan/modded-nanogpt): ``records/track_3_optimization/
train_gpt_simple.py`` (result #36, the Muon baseline) and the AdamW baseline's code from its record
log (``results/a63a68d1-...txt``, result #2).

* :func:`zeropower_via_newtonschulz5`: ``X / (||X||_F + 1e-7)`` in the compute dtype (bfloat16
  there), transposed to wide form, 12 iterations of ``(a, b, c) = (2, -1.5, 0.5)``:
  ``A = X X^T; X <- a X + (b A + c A A) X``.
* :func:`muon_update`: ``momentum.lerp_(grad, 1 - mu)``; Nesterov ``grad.lerp_(momentum, mu)``;
  orthogonalised, times ``sqrt(max(1, rows / cols))``.
* :class:`Muon`: ``p <- p (1 - lr wd) - lr update`` per matrix (one process: no all-gather).
* :func:`muon_baseline_optimizers` / :func:`adamw_baseline_optimizers`: the two baselines'
  ``torch.optim.AdamW`` groups (embedding, head, gains and biases) beside Muon, or beside a second
  AdamW on the blocks' matrices; :func:`muon_baseline_eta` / :func:`adamw_baseline_eta` their
  ``set_hparams`` multipliers per step.

The compute dtype is a parameter (``dtype``) so that the tests can run both sides in float32; the
track runs bfloat16. The model is ``tests/torch_gpt_reference.py``'s ``GPT``, whose attribute names
map to the track's: ``embed``, ``head`` (their ``proj``), blocks' ``attn.q/k/v/proj``, ``fc``,
``mlp_proj``, and the gains ``g_embed``, ``g_final``, ``g1``, ``g2``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def zeropower_via_newtonschulz5(G: Tensor, dtype: torch.dtype = torch.bfloat16, steps: int = 12,
                                coeffs=(2, -1.5, 0.5)) -> Tensor:
    """The track's orthogonalisation of ``G`` (2-D), computed in ``dtype``; returns ``dtype``."""
    assert G.ndim >= 2
    X = G.to(dtype)
    wide = G.size(-2) > G.size(-1)
    if wide:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    a, b, c = coeffs
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    return X.mT if wide else X


def muon_update(grad: Tensor, momentum: Tensor, mu: float = 0.95, nesterov: bool = True,
                dtype: torch.dtype = torch.bfloat16) -> Tensor:
    """The track's ``muon_update`` (it overwrites ``grad`` and ``momentum`` in place, as theirs)."""
    momentum.lerp_(grad, 1 - mu)
    update = grad.lerp_(momentum, mu) if nesterov else momentum
    update = zeropower_via_newtonschulz5(update, dtype)
    update *= max(1, grad.size(-2) / grad.size(-1)) ** 0.5
    return update


class Muon(torch.optim.Optimizer):
    """The track's ``Muon`` on one process: each matrix ``p <- p (1 - lr wd) - lr muon_update``."""

    def __init__(self, params, lr=0.02, weight_decay=0, mu=0.95, dtype=torch.bfloat16):
        params = sorted(params, key=lambda x: x.size(), reverse=True)
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, mu=mu))
        self.dtype = dtype

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if len(state) == 0:
                    state["momentum"] = torch.zeros_like(p)
                update = muon_update(p.grad, state["momentum"], mu=group["mu"], dtype=self.dtype)
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update, alpha=-group["lr"])


def _parts(model):
    blocks = [p for b in model.blocks for p in b.parameters()]
    matrices = [p for p in blocks if p.ndim >= 2]
    small = [p for p in model.parameters() if p.ndim < 2]
    return matrices, small


def muon_baseline_optimizers(model, dtype=torch.bfloat16) -> list[torch.optim.Optimizer]:
    """``train_gpt_simple.py``'s ``optimizer1`` (AdamW: embedding 0.7, head 0.004, gains and biases
    0.015; betas (0.8, 0.95), eps 1e-10, weight decay 0.001) and ``optimizer2`` (Muon 0.025, wd 0.05)."""
    matrices, small = _parts(model)
    adam = torch.optim.AdamW([dict(params=[model.embed.weight], lr=0.7),
                              dict(params=[model.head.weight], lr=0.004),
                              dict(params=small, lr=0.015)],
                             betas=(0.8, 0.95), eps=1e-10, weight_decay=0.001)
    return _with_initial_lr([adam, Muon(matrices, lr=0.025, weight_decay=0.05, dtype=dtype)], 0)


def adamw_baseline_optimizers(model, warmup_steps: int = 250) -> list[torch.optim.Optimizer]:
    """The AdamW baseline's ``optimizer1`` (embedding 0.3, head 1/320, gains and biases 0.01; betas
    (0.8, 0.95), eps 1e-10, no decay) and ``optimizer2`` (the blocks' matrices: lr 0.0015, betas
    (0.9, 0.95), eps 1e-10, weight decay 0.1); every group warms up over ``warmup_steps`` (250)."""
    matrices, small = _parts(model)
    aux = torch.optim.AdamW([dict(params=[model.embed.weight], lr=0.3),
                             dict(params=[model.head.weight], lr=1 / 320),
                             dict(params=small, lr=0.01)],
                            betas=(0.8, 0.95), eps=1e-10, weight_decay=0)
    blocks = torch.optim.AdamW(matrices, lr=0.0015, betas=(0.9, 0.95), eps=1e-10, weight_decay=0.10)
    return _with_initial_lr([aux, blocks], warmup_steps)


def _with_initial_lr(optimizers, warmup_steps):
    for opt in optimizers:
        for group in opt.param_groups:
            group["initial_lr"] = group["lr"]
            group["warmup_steps"] = warmup_steps
    return optimizers


def muon_baseline_eta(step: int, train_steps: int, cooldown_frac: float = 0.7) -> float:
    """``train_gpt_simple.py``'s ``set_hparams`` multiplier at ``step``."""
    progress = step / train_steps
    assert 0 <= progress < 1
    return 1.0 if progress < 1 - cooldown_frac else (1 - progress) / cooldown_frac


def adamw_baseline_eta(step: int, train_steps: int, warmup_steps: int = 250,
                       cooldown_frac: float = 0.7) -> float:
    """The AdamW baseline's multiplier: ``min(1, (step + 1) / warmup_steps)`` times the cool-down's."""
    warmup = min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0
    return warmup * muon_baseline_eta(step, train_steps, cooldown_frac)


def set_hparams(optimizers, eta: float) -> None:
    """Every group's ``lr = initial_lr * eta`` (the track's ``set_hparams`` with ``eta`` computed)."""
    for opt in optimizers:
        for group in opt.param_groups:
            group["lr"] = group["initial_lr"] * eta
