"""SOAP: Adam in the eigenbasis of Shampoo's preconditioner (Vyas et al. 2024, arXiv:2409.11321).

No Optax twin; ``tests/test_optimizers_modern_soap.py`` checks the eigenbasis against
``numpy.linalg.eigh``, one step written out from the paper's algorithm, and ten steps of float64
parameters against an independent float64 SOAP in numpy (relative difference <= 1e-8; measured
1.8e-15 on random gradients, 8.8e-12 on a least-squares problem's own gradients). Per-array
(:func:`optimizers.core.optimizer`). Imports jax and numpy only.

Precision: every step runs at the parameters' precision. The statistics ``L``, ``R``, the bases,
the moments and the rotations are kept in each leaf's dtype, the eigendecompositions run in that
dtype (float64 for float64 parameters, float32 for float32; at least float32, since ``eigh`` has
no narrower form, for bfloat16 or float16), and every matrix product asks for
``Precision.HIGHEST`` (no effect on CPU; on GPU and TPU it keeps float32 products from TF32 or
bfloat16 passes). With the eigendecomposition in float32 for every dtype, ten steps
of float64 parameters differed from the float64 reference by 6.0e-7 (random gradients) and
by 0.036 (least-squares gradients, eps 1e-6; 0.092 at eps 1e-8), where the rotated gradient is
near zero off the diagonal and float32 rounding there, not the gradient, decides Adam's ratio.
Float32 parameters give the same bits as before on CPU.

Cost (``tests/benchmarks/test_bench_optimizers.py::test_soap_update_cost``): one ``1024 x 1024``
float32 layer, jitted and donated, on 2 shared, loaded CPU cores, ms per update (median of 3
rounds) and the paired ratio to :func:`optimizers.adam` on the same layer, two runs:

    ========================================= ================ ================
    variant                                   run 1            run 2
    ========================================= ================ ================
    adam                                      1.7 ms           2.0 ms
    soap, precondition_frequency 10 (default) 823 ms (481x)    504 ms (344x)
    soap, precondition_frequency 1            4,086 ms (1737x) 5,560 ms (4020x)
    soap, max_precond_dim 256                 3.3 ms (1.9x)    4.0 ms (2.3x)
    ========================================= ================ ================

A step without a refresh is six ``1024^3`` matrix products (the rotation in and out on both sides,
``G G^T``, ``G^T G``); a refresh adds two ``eigh`` of ``1024 x 1024``, seconds each on this
machine, so frequency 1 costs several times frequency 10. There is no block size: with
``max_precond_dim`` 256 this layer is not rotated at all and takes AdamW steps (the ratio above 1
is the weight decay and the step-0 selects).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from optimizers.common import check_nonnegative, check_unit_interval, params_of, positive_step_size
from optimizers.core import Optimizer, OptimizerState, make_schedule, optimizer
from optimizers.groups import mask_flags
from optimizers.registry import register_optimizer

__all__ = ["soap", "soap_sides"]


def soap_sides(shape, max_precond_dim: int) -> tuple[bool, bool]:
    """Which sides of a leaf of ``shape`` SOAP rotates: ``(left, right)``, each True for a 2-D
    leaf whose rows (resp. columns) number at most ``max_precond_dim``; ``(False, False)`` for
    every leaf that is not 2-D (those take plain Adam steps)."""
    if len(shape) != 2:
        return False, False
    return shape[0] <= max_precond_dim, shape[1] <= max_precond_dim


def _compute_dtype(dtype):
    """The dtype SOAP's linear algebra runs in for a leaf of ``dtype``: the leaf's own (float64
    for float64, float32 for float32), at least float32 (``eigh`` has no lower precision)."""
    return jnp.promote_types(dtype, jnp.float32)


def _matmul(a, b):
    """``a @ b`` at the operands' full precision (``Precision.HIGHEST``: on CPU the same as the
    default; on GPU and TPU it keeps float32 products from TF32 or bfloat16 passes)."""
    return jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)


def _eigenvectors(stat):
    """Eigenvectors (columns, eigenvalues ascending) of a symmetric statistic, computed at the
    statistic's precision (float64 for float64, float32 for float32 and narrower dtypes) and
    returned in its dtype."""
    return jnp.linalg.eigh(stat.astype(_compute_dtype(stat.dtype)))[1].astype(stat.dtype)


@register_optimizer("soap", note="(matrix set ``soap_mask``: default every 2-D leaf; in YAML a group rule "
                                 "or a list of them: hidden_matrices, embeddings, head, norms_and_biases, "
                                 "glob:PATTERN)")
def soap(
    step_size,
    b1: float = 0.95,
    b2: float = 0.95,
    shampoo_beta: float | None = None,
    eps: float = 1e-8,
    weight_decay: float = 0.01,
    precondition_frequency: int = 10,
    max_precond_dim: int = 10000,
    soap_mask: Callable[[Any], Any] | str | list[str] | None = None,
) -> Optimizer:
    """SOAP, ShampoO with Adam in the Preconditioner's eigenbasis (Vyas et al. 2024, arXiv:2409.11321).

    For a 2-D leaf ``x`` of shape ``(m, n)`` with gradient ``G`` at step ``t = i`` (the reference's
    count): Adam in the current rotated basis, ``G' = Q_L^T G Q_R;  m <- b1 m + (1 - b1) G';
    v <- b2 v + (1 - b2) G'**2;  N = Q_L (m / (sqrt(v) + eps)) Q_R^T * sqrt(1 - b2**t) / (1 - b1**t);
    x <- x - lr N;  x <- x - lr * weight_decay * x`` (skipped at step 0, which only gathers statistics,
    as the reference); then ``L <- s L + (1 - s) G G^T`` (``(m, m)``) and ``R <- s R + (1 - s) G^T G``
    (``(n, n)``), ``s = shampoo_beta`` (default ``b2``), and every ``precondition_frequency`` steps from
    step 0 on, ``Q_L, Q_R`` become the eigenvectors of ``L, R`` (``eigh``), the first moment carried
    into the new basis (``m <- Q_L'^T Q_L m Q_R^T Q_R'``). A side longer than ``max_precond_dim`` (the
    block bound) is not rotated (``Q = I``, no statistic kept); leaves that are not 2-D take plain AdamW
    steps. State per leaf: ``(x, m, v, L, Q_L, R, Q_R)`` (``None`` for a side not rotated).

    Precision: the parameters' own. ``L``, ``R``, ``Q_L``, ``Q_R``, ``m`` and ``v`` are kept in the leaf's
    dtype; ``eigh`` runs in it (float64 for float64 parameters, which need ``jax.enable_x64``; float32 for
    float32; float32 for bfloat16 and float16); every matrix product uses ``Precision.HIGHEST``.

    Defaults are the paper's reference code (betas 0.95, eps 1e-8, weight decay 0.01, frequency 10, max
    dimension 10,000; ``nikhilvyas/SOAP``, ``soap.py``), whose conventions this follows: step 0 only
    gathers ``L``, ``R`` and the first bases; refreshes at the steps ``t > 0`` with
    ``t % precondition_frequency == 0``; bias correction always on (its ``correct_bias=True`` default);
    eps added to ``sqrt(v)``; weight decay ``lr * weight_decay`` on the updated parameters; no gradient
    normalisation (its ``normalize_grads=False``); 1-D leaves not rotated (its ``precondition_1d=False``).
    Departures from it: the bases are exact eigenvectors at every refresh (the reference refines them by
    one power step and a QR decomposition after the first ``eigh``; here there is no QR or power
    iteration), and the second moment is kept as is when the basis changes (the reference reorders it by
    the estimated eigenvalues); leaves that are not 2-D are not rotated at all (the reference, with its
    default ``merge_dims=False``, keeps a statistic per axis of a 3-D or 4-D leaf, and with
    ``merge_dims=True`` merges axes first; neither exists here); and the reference allocates ``L`` and
    ``R`` in float32 (torch's default dtype) and casts any statistic that is not float32 to float32 for
    ``eigh`` and QR, where this runs them at the parameters' precision.

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      b1, b2: Adam's moment decay rates in ``[0, 1)``.
      shampoo_beta: decay of ``L`` and ``R`` (``None``: ``b2``).
      eps: added to the root of the second moment.
      weight_decay: decoupled decay (>= 0), multiplied by the step size.
      precondition_frequency: steps between eigendecompositions (>= 1).
      max_precond_dim: longest side that is rotated.
      soap_mask: which leaves are rotated, as Muon's ``muon_mask`` (:func:`optimizers.groups.mask_flags`;
        ``None``: every 2-D leaf); the others take the AdamW steps of a leaf that is not rotated.

    Returns:
      An :class:`~optimizers.core.Optimizer` ``(init_fn, update_fn, params_fn)``.

    Raises:
      ValueError: concrete ``step_size <= 0``, decay rates outside ``[0, 1)``,
        ``weight_decay < 0``, ``precondition_frequency < 1``; at init, a ``soap_mask`` rule matching
        no parameter.
      TypeError: at update, a gradient tree whose structure differs from the parameters'.
    """
    args = (step_size, b1, b2, shampoo_beta, eps, weight_decay, precondition_frequency)
    rotated = _soap_leaves(*args, max_precond_dim)
    if soap_mask is None:
        return rotated
    plain = _soap_leaves(*args, 0)  # no side is rotated

    def init_fn(params):
        leaves, treedef = jax.tree.flatten(params)
        flags = mask_flags(params, soap_mask, lambda p: jax.tree.map(lambda x: jnp.ndim(x) == 2, p),
                           "soap: soap_mask")
        states = [(rotated if f else plain).init_fn(x) for x, f in zip(leaves, flags, strict=True)]
        return OptimizerState(tuple(st.packed_state[0] for st in states), treedef,
                              tuple(st.subtree_defs[0] for st in states))

    return Optimizer(init_fn, rotated.update_fn, rotated.params_fn)


@optimizer
def _soap_leaves(step_size, b1, b2, shampoo_beta, eps, weight_decay, precondition_frequency, max_precond_dim):
    """:func:`soap` leaf by leaf (the triple :func:`optimizers.core.optimizer` makes)."""
    step_size = make_schedule(positive_step_size(step_size))
    check_unit_interval(b1, "b1")
    check_unit_interval(b2, "b2")
    check_nonnegative(weight_decay, "weight_decay")
    if not int(precondition_frequency) >= 1:
        raise ValueError(f"precondition_frequency must be >= 1, got {precondition_frequency!r}")
    beta = b2 if shampoo_beta is None else shampoo_beta
    check_unit_interval(beta, "shampoo_beta")

    def init(x0):
        left, right = soap_sides(jnp.shape(x0), max_precond_dim)

        def side(k):
            eye = jnp.eye(jnp.shape(x0)[k], dtype=jnp.asarray(x0).dtype)
            return (jnp.zeros_like(eye), eye)

        lq = side(0) if left else (None, None)
        rq = side(1) if right else (None, None)
        return (x0, jnp.zeros_like(x0), jnp.zeros_like(x0), *lq, *rq)

    def update(i, g, state):
        x, m, v, sl, ql, sr, qr = state
        t = jnp.asarray(i, jnp.int32)
        x, m, v = _soap_adam(t, g, state, step_size(i), (b1, b2, eps, weight_decay))
        m, sl, ql, sr, qr = _soap_bases(t, g, m, (sl, ql, sr, qr), beta, precondition_frequency)
        return x, m, v, sl, ql, sr, qr

    return init, update, params_of


def _soap_adam(t, g, state, lr, hp):
    """One AdamW step of :func:`soap` in the current basis (built from the gradients before this
    one): ``(x, m, v)``, unchanged at step 0, which only gathers statistics as the reference;
    ``hp`` is ``(b1, b2, eps, weight_decay)``."""
    b1, b2, eps, weight_decay = hp
    x, m, v, _sl, ql, _sr, qr = state
    gp = g
    if ql is not None:
        gp = _matmul(ql.T, gp)
    if qr is not None:
        gp = _matmul(gp, qr)
    m_new = (1 - b1) * gp + b1 * m
    v_new = (1 - b2) * gp**2 + b2 * v
    scale = (1 - b2**t).astype(x.dtype) ** 0.5 / (1 - b1**t).astype(x.dtype)
    n = m_new / (jnp.sqrt(v_new) + eps)
    if ql is not None:
        n = _matmul(ql, n)
    if qr is not None:
        n = _matmul(n, qr.T)
    x_new = x - lr * scale * n
    x_new = x_new - lr * weight_decay * x_new
    first = t == 0  # step 0 only gathers statistics, as the reference
    return tuple(jnp.where(first, a, b) for a, b in ((x, x_new), (m, m_new), (v, v_new)))


def _soap_bases(t, g, m, sides, beta, precondition_frequency):
    """:func:`soap`'s statistics ``L``, ``R`` updated with ``g`` and, every
    ``precondition_frequency`` steps, the bases refreshed (``m`` carried into them): returns
    ``(m, L, Q_L, R, Q_R)``."""
    sl, ql, sr, qr = sides
    if sl is not None:
        sl = beta * sl + (1 - beta) * _matmul(g, g.T)
    if sr is not None:
        sr = beta * sr + (1 - beta) * _matmul(g.T, g)
    if sl is not None or sr is not None:

        def refresh(operand):
            m, ql, qr = operand
            new_ql = _eigenvectors(sl) if sl is not None else None
            new_qr = _eigenvectors(sr) if sr is not None else None
            if ql is not None:
                m = _matmul(new_ql.T, _matmul(ql, m))
            if qr is not None:
                m = _matmul(_matmul(m, qr.T), new_qr)
            return m, new_ql, new_qr

        m, ql, qr = jax.lax.cond(t % precondition_frequency == 0, refresh, lambda o: o, (m, ql, qr))
    return m, sl, ql, sr, qr
