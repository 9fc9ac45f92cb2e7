"""Optimizers of the 2018-2024 literature in the triple form: :func:`muon`, :func:`adafactor`,
:func:`lamb` and :func:`lars` (this module), :func:`~optimizers.modern_free.schedule_free_adamw`,
:func:`~optimizers.modern_free.schedule_free_sgd` and :func:`~optimizers.modern_free.prodigy`
(:mod:`optimizers.modern_free`), :func:`~optimizers.modern_soap.soap`
(:mod:`optimizers.modern_soap`).

Each one with an Optax twin follows its arithmetic operation by operation (same order, same
dtypes, same 1-based step counts), so both agree to float32 rounding over long runs
(``tests/test_optimizers_modern.py``); each docstring names the Optax function it matches and any
convention the harness adds. The per-array rules use :func:`optimizers.core.optimizer`; their
state is an :class:`~optimizers.core.OptimizerState` like every other optimizer's. Step sizes are
floats, traced scalars or schedules (``make_schedule``), called with the 0-based step index ``i``
exactly where the Optax twin calls its schedule with its own 0-based count. Imports jax and numpy
only.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from optimizers.common import check_nonnegative, check_unit_interval, fresh, params_of, positive_step_size
from optimizers.core import Optimizer, OptimizerState, make_schedule, optimizer
from optimizers.groups import mask_flags
from optimizers.registry import register_optimizer

__all__ = [
    "MUON_CONVENTIONS",
    "MUON_NS_COEFFS",
    "adafactor",
    "bias_correction",
    "lamb",
    "lars",
    "muon",
    "muon_hparams_used",
    "muon_matrices",
    "newton_schulz",
    "step_count",
]

#: Jordan et al.'s quintic Newton-Schulz coefficients ``(a, b, c)``: ``X <- a X + b (X X^T) X +
#: c (X X^T)^2 X`` (``optax.contrib.muon``'s default ``ns_coeffs``).
MUON_NS_COEFFS = (3.4445, -4.7750, 2.0315)


# --------------------------------------------------------------------------------------------
# Pieces shared with optimizers.modern_free and optimizers.modern_soap.


def step_count(i) -> jax.Array:
    """The 1-based step ``t = i + 1`` as an int32 scalar (Optax's incremented ``count``)."""
    return jnp.asarray(i, jnp.int32) + 1


def bias_correction(moment: jax.Array, decay, count) -> jax.Array:
    """``moment / (1 - decay**count)``, the power taken in float32 and the division in the
    moment's dtype (``optax.tree.bias_correction``)."""
    return moment / (1 - decay**count).astype(moment.dtype)


def _adam_direction(i, g, m, v, b1, b2, eps, nesterov: bool):
    """Optax's ``scale_by_adam`` on one array (``eps_root = 0``): returns ``(u, m, v)``."""
    t = step_count(i)
    m = (1 - b1) * g + b1 * m
    v = (1 - b2) * g**2 + b2 * v
    if nesterov:
        mhat = b1 * bias_correction(m, b1, t + 1) + (1 - b1) * bias_correction(g, b1, t)
    else:
        mhat = bias_correction(m, b1, t)
    return mhat / (jnp.sqrt(bias_correction(v, b2, t)) + eps), m, v


# --------------------------------------------------------------------------------------------
# Muon.

#: Muon's conventions by name (``muon(convention=...)``): Newton-Schulz coefficients, iterations,
#: normalisation eps and compute dtype; the momentum form; the auxiliary Adam's Nesterov and eps.
#: ``None`` under ``"optax"``: ``ns_dtype`` the parameters' dtype, ``ns_eps``/``adam_eps`` the
#: shared ``eps``, ``adam_nesterov`` Muon's ``nesterov``.
MUON_CONVENTIONS: dict[str, dict[str, Any]] = {
    # optax.contrib.muon (the harness's default since its first muon)
    "optax": {"ns_coeffs": MUON_NS_COEFFS, "ns_steps": 5, "ns_eps": None, "ns_dtype": None,
              "momentum_form": "bias_corrected", "adam_nesterov": None, "adam_eps": None},
    # KellerJordan/Muon's muon.py (MuonWithAuxAdam): bf16 quintic, lerp momentum, plain Adam
    "jordan": {"ns_coeffs": MUON_NS_COEFFS, "ns_steps": 5, "ns_eps": 1e-7, "ns_dtype": "bfloat16",
               "momentum_form": "lerp", "adam_nesterov": False, "adam_eps": 1e-10},
    # modded-nanogpt's records/track_3_optimization/train_gpt_simple.py: 12 bf16 iterations of
    # (2, -1.5, 0.5), lerp momentum, a plain torch.optim.AdamW beside it
    "modded_nanogpt": {"ns_coeffs": (2.0, -1.5, 0.5), "ns_steps": 12, "ns_eps": 1e-7, "ns_dtype": "bfloat16",
                       "momentum_form": "lerp", "adam_nesterov": False, "adam_eps": 1e-10},
}
_NS_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def _coefficient_rows(coeffs, ns_steps) -> tuple[tuple[float, float, float], ...]:
    """``coeffs`` (one ``(a, b, c)`` or one per iteration) as one triple per iteration.

    Raises:
      ValueError: not a triple of finite numbers nor a sequence of them; a per-iteration list
        whose length is not the number of iterations.
    """
    def triple(t) -> bool:
        return (isinstance(t, list | tuple) and len(t) == 3
                and all(isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v) for v in t))

    if triple(coeffs):
        rows = (tuple(float(v) for v in coeffs),) * ns_steps
    elif isinstance(coeffs, list | tuple) and coeffs and all(triple(t) for t in coeffs):
        rows = tuple(tuple(float(v) for v in t) for t in coeffs)
        if len(rows) != ns_steps:
            raise ValueError(f"ns_coeffs: {len(rows)} (a, b, c) triples, one per iteration, but "
                             f"{ns_steps} Newton-Schulz iterations")
    else:
        raise ValueError(f"ns_coeffs must be one (a, b, c) triple of finite numbers or one triple per "
                         f"iteration, got {coeffs!r}")
    return rows


def newton_schulz(x: jax.Array, ns_steps: int = 5, coeffs=MUON_NS_COEFFS, eps: float = 1e-8,
                  dtype: Any = None) -> jax.Array:
    """An approximate orthogonalisation ``U S' V^T`` of a matrix ``x = U S V^T`` (``S'`` near 1).

    Each matrix is cast to ``dtype``, transposed to wide form when ``m > n``, scaled to unit
    Frobenius norm (``x / (||x||_F + eps)``), then ``ns_steps`` iterations ``A = X X^T;
    X <- a X + (b A + c A A) X`` with that iteration's ``(a, b, c)`` cast to the compute dtype,
    and transposed back. The matrices go through ``jax.vmap`` with a leading batch axis (a single
    matrix too), as in ``optax.contrib.orthogonalize_via_newton_schulz`` (``'frobenius'``
    preconditioning), whose rounding this then shares.

    Args:
      x: shape ``(m, n)``, or ``(..., m, n)`` for a stack of matrices, each done on its own.
      ns_steps: the number of iterations (default 5).
      coeffs: ``(a, b, c)`` for every iteration (default :data:`MUON_NS_COEFFS`), or a sequence
        of ``ns_steps`` such triples, one per iteration.
      eps: added to the Frobenius norm.
      dtype: the compute dtype (``None``: ``x``'s); modded-nanogpt and KellerJordan/Muon use
        bfloat16.

    Returns:
      The orthogonalised matrices, with ``x``'s shape, in the compute dtype.

    Raises:
      ValueError: ``x`` has fewer than 2 axes; ``coeffs`` malformed or of the wrong length.

    Source: Jordan et al. 2024 (Muon); ``optax.contrib.orthogonalize_via_newton_schulz``;
    ``zeropower_via_newtonschulz5`` of modded-nanogpt and KellerJordan/Muon.
    """
    if x.ndim < 2:
        raise ValueError(f"newton_schulz needs a matrix, got shape {x.shape}")
    rows = _coefficient_rows(coeffs, ns_steps)
    x = x if dtype is None else x.astype(dtype)

    def one(x):
        transposed = x.shape[0] > x.shape[1]
        if transposed:
            x = x.T
        x = x / (jnp.linalg.norm(x, ord="fro") + eps)
        for row in rows:
            a, b, c = jnp.asarray(row).astype(x.dtype)
            gram = x @ x.T
            x = a * x + (b * gram + c * gram @ gram) @ x
        return x.T if transposed else x

    return jax.vmap(one)(x.reshape((-1, *x.shape[-2:]))).reshape(x.shape)


def muon_matrices(params) -> Any:
    """Muon's default rule over a parameter tree: ``True`` for every 2-D leaf, else ``False``.

    2-D leaves are dense kernels ``(fan_in, fan_out)``, embedding tables and the output layer; the
    others (biases, norm scales, 0-d leaves, 3-D+ kernels such as convolutions) are AdamW's.

    Args:
      params: a pytree of arrays.

    Returns:
      A pytree of Python bools with ``params``' structure.

    Source: the rule of ``optax.contrib.muon`` without ``muon_weight_dimension_numbers``.
    """
    return jax.tree.map(lambda x: jnp.ndim(x) == 2, params)


@register_optimizer("muon", note="(matrix set ``muon_mask``: default every 2-D leaf; in YAML a group rule "
                                 "or a list of them: hidden_matrices, embeddings, head, norms_and_biases, "
                                 "glob:PATTERN; named conventions: optax, jordan, modded_nanogpt)",
                    hparams_used=lambda **hp: muon_hparams_used(**hp))
def muon(
    step_size,
    beta: float = 0.95,
    ns_steps: int | None = None,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    nesterov: bool = True,
    adam_b1: float = 0.9,
    adam_b2: float = 0.999,
    adam_weight_decay: float = 0.0,
    adam_lr_ratio: float = 1.0,
    muon_mask: Callable[[Any], Any] | str | list[str] | None = None,
    convention: Literal["optax", "jordan", "modded_nanogpt"] = "optax",
    ns_coeffs: tuple[float, float, float] | tuple[tuple[float, float, float], ...] | None = None,
    ns_eps: float | None = None,
    ns_dtype: Literal["float32", "bfloat16", "float16"] | None = None,
    momentum_form: Literal["bias_corrected", "lerp"] | None = None,
    adam_nesterov: bool | None = None,
    adam_eps: float | None = None,
) -> Optimizer:
    """Muon, MomentUm Orthogonalized by Newton-Schulz (Jordan et al. 2024), AdamW for non-matrices.

    For a Muon leaf ``x`` of shape ``(fan_in, fan_out)``, with ``t = i + 1``: ``m <- (1 - beta) g
    + beta m``; the direction ``m^`` is, by ``momentum_form``, ``"bias_corrected"`` (Optax's):
    ``beta m / (1 - beta**(t+1)) + (1 - beta) g / (1 - beta**t)`` (Nesterov; ``m / (1 -
    beta**t)`` without), or ``"lerp"`` (torch's ``momentum.lerp_(g, 1 - beta); g.lerp_(momentum,
    beta)``): ``beta m + (1 - beta) g`` (Nesterov; ``m`` without), uncorrected. Then ``u =
    sqrt(max(1, fan_out / fan_in)) * newton_schulz(m^, ns_steps, ns_coeffs, ns_eps, ns_dtype)``
    (cast back to ``x``'s dtype); ``x <- x - lr * (u + weight_decay * x)``. Every other leaf
    takes an AdamW step (``optax.adamw`` with ``nesterov=adam_nesterov``, ``b1=adam_b1``,
    ``b2=adam_b2``, ``eps=adam_eps``, ``weight_decay=adam_weight_decay``; ``torch.optim.AdamW``
    without Nesterov) with step size ``adam_lr_ratio * lr``. State per leaf: ``(x, m)`` for Muon
    leaves, ``(x, m, v)`` for AdamW leaves, each with the leaf's shape and dtype.

    ``convention`` fills every convention hyperparameter left ``None`` (:data:`MUON_CONVENTIONS`):

    * ``optax`` (default, ``optax.contrib.muon``, which this matches at equal settings with
      ``adam_learning_rate = adam_lr_ratio * lr``): 5 iterations of :data:`MUON_NS_COEFFS` in the
      parameters' dtype at JAX's default matmul precision, ``ns_eps = adam_eps = eps``,
      bias-corrected momentum, ``adam_nesterov = nesterov`` (NAdamW when Nesterov);
    * ``jordan`` (KellerJordan/Muon's ``MuonWithAuxAdam``): 5 iterations of
      :data:`MUON_NS_COEFFS` in bfloat16, ``ns_eps`` 1e-7, lerp momentum, plain Adam, ``adam_eps``
      1e-10;
    * ``modded_nanogpt`` (its optimization track's ``train_gpt_simple.py``): 12 iterations of
      ``(2, -1.5, 0.5)`` in bfloat16, ``ns_eps`` 1e-7, lerp momentum, plain AdamW, ``adam_eps``
      1e-10 (set its betas and decays too: ``adam_b1: 0.8, adam_b2: 0.95``).

    Left from torch: its Newton-Schulz keeps float32 coefficients on a bfloat16 matrix (cast here;
    exact for ``(2, -1.5, 0.5)``); ``torch.optim.Muon`` divides by ``max(||x||_F, eps)``. Checked
    against a PyTorch port of ``train_gpt_simple.py``'s optimizers (``tests/test_torch_muon.py``).

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      beta: momentum decay in ``[0, 1)``.
      ns_steps: Newton-Schulz iterations (>= 1; ``None``: the convention's, or the number of
        per-iteration triples).
      eps: under ``convention="optax"``, added to the Frobenius norm and AdamW's denominator.
      weight_decay: decoupled decay of Muon leaves (>= 0), multiplied by the step size.
      nesterov: Nesterov momentum for Muon leaves (and AdamW's under ``optax``).
      adam_b1, adam_b2: AdamW's moment decay rates in ``[0, 1)``.
      adam_weight_decay: decoupled decay of AdamW leaves (>= 0).
      adam_lr_ratio: AdamW leaves' step size as a multiple of ``step_size``.
      muon_mask: which leaves are Muon's (they must be 2-D), read once by ``init_fn``: a tree of bools
        with the parameters' structure (or a prefix of it), a callable ``params -> such a tree``, or group
        rules by name (:mod:`optimizers.groups`: ``"hidden_matrices"``, ``["hidden_matrices", "glob:..."]``,
        what a YAML config can write). ``None``: :func:`muon_matrices` (every 2-D leaf); to give the
        output layer or an embedding to AdamW, pass ``False`` there.
      convention: ``"optax"``, ``"jordan"`` or ``"modded_nanogpt"`` (above).
      ns_coeffs: ``(a, b, c)`` for every iteration, or one triple per iteration.
      ns_eps: added to the Frobenius norm before Newton-Schulz (>= 0).
      ns_dtype: Newton-Schulz's compute dtype, ``"float32"``, ``"bfloat16"`` or ``"float16"``.
      momentum_form: ``"bias_corrected"`` or ``"lerp"``.
      adam_nesterov: NAdamW (True) or plain AdamW (False) for the AdamW leaves.
      adam_eps: added to AdamW's denominator (>= 0).

    Returns:
      An :class:`~optimizers.core.Optimizer` ``(init_fn, update_fn, params_fn)``.

    Raises:
      ValueError: concrete ``step_size <= 0``, a decay rate outside ``[0, 1)``, a negative weight
        decay or eps, an unknown convention, dtype or momentum form, ``ns_coeffs`` malformed or
        not one triple per iteration, ``ns_steps < 1``; at init, a masked leaf that is not 2-D, or
        a ``muon_mask`` rule matching no parameter.
    """
    step_size = make_schedule(positive_step_size(step_size))
    for v, name in ((beta, "beta"), (adam_b1, "adam_b1"), (adam_b2, "adam_b2")):
        check_unit_interval(v, name)
    check_nonnegative(weight_decay, "weight_decay")
    check_nonnegative(adam_weight_decay, "adam_weight_decay")
    ns = _muon_convention(convention, ns_steps, eps, nesterov, ns_coeffs=ns_coeffs, ns_eps=ns_eps,
                          ns_dtype=ns_dtype, momentum_form=momentum_form, adam_nesterov=adam_nesterov,
                          adam_eps=adam_eps)
    adam = (adam_b1, adam_b2, adam_weight_decay, adam_lr_ratio, ns["adam_eps"], ns["adam_nesterov"])

    def update(i, g, state):
        return _muon_update(i, g, state, step_size(i), beta, weight_decay, nesterov, ns, adam)

    tree = optimizer(lambda: (_muon_init, update, params_of))()
    return Optimizer(lambda params: _muon_state(params, muon_mask), tree.update_fn, tree.params_fn)


def muon_hparams_used(**hparams) -> dict[str, Any]:
    """The convention hyperparameters :func:`muon` trains with for these keyword arguments: each
    given one, else its ``convention``'s (:data:`MUON_CONVENTIONS`), ``eps`` and ``nesterov``
    standing in where the convention leaves them to those.

    Args:
      **hparams: :func:`muon`'s keyword arguments; others are ignored.

    Returns:
      ``{"ns_coeffs", "ns_steps", "ns_eps", "ns_dtype", "momentum_form", "adam_nesterov",
      "adam_eps"}``; ``ns_coeffs`` one ``(a, b, c)`` when every iteration's is the same, else one
      per iteration; ``ns_dtype`` ``None``: the parameters' dtype.

    Raises:
      ValueError: as :func:`muon` says.
    """
    a = {k: p.default for k, p in inspect.signature(muon).parameters.items()
         if p.default is not inspect.Parameter.empty}
    a.update({k: v for k, v in hparams.items() if k in a})
    out = _muon_convention(a["convention"], a["ns_steps"], a["eps"], a["nesterov"],
                           **{k: a[k] for k in MUON_CONVENTIONS["optax"] if k != "ns_steps"})
    rows = out["ns_coeffs"]
    out["ns_coeffs"] = rows[0] if len(set(rows)) == 1 else rows
    return out


def _muon_convention(convention, ns_steps, eps, nesterov, **given) -> dict[str, Any]:
    """:func:`muon`'s convention hyperparameters: each given one, else ``convention``'s; checked.

    Raises:
      ValueError: as :func:`muon` says.
    """
    if convention not in MUON_CONVENTIONS:
        raise ValueError(f"convention must be one of {', '.join(MUON_CONVENTIONS)}, got {convention!r}")
    out = {k: given[k] if given[k] is not None else v for k, v in MUON_CONVENTIONS[convention].items()
           if k != "ns_steps"}
    out["ns_eps"] = eps if out["ns_eps"] is None else out["ns_eps"]
    out["adam_eps"] = eps if out["adam_eps"] is None else out["adam_eps"]
    out["adam_nesterov"] = nesterov if out["adam_nesterov"] is None else out["adam_nesterov"]
    coeffs = out["ns_coeffs"]
    per_step = isinstance(coeffs, list | tuple) and bool(coeffs) and isinstance(coeffs[0], list | tuple)
    if ns_steps is None:
        ns_steps = len(coeffs) if per_step and given["ns_coeffs"] is not None else \
            MUON_CONVENTIONS[convention]["ns_steps"]
    if isinstance(ns_steps, bool) or not isinstance(ns_steps, int | np.integer) or ns_steps < 1:
        raise ValueError(f"ns_steps must be an integer >= 1, got {ns_steps!r}")
    out["ns_steps"] = int(ns_steps)
    out["ns_coeffs"] = _coefficient_rows(coeffs, out["ns_steps"])
    check_nonnegative(out["ns_eps"], "ns_eps")
    check_nonnegative(out["adam_eps"], "adam_eps")
    if out["ns_dtype"] is not None and out["ns_dtype"] not in _NS_DTYPES:
        extra = " (64-bit arithmetic is off; the parameters' own dtype is ns_dtype: null)" \
            if out["ns_dtype"] == "float64" else ""
        raise ValueError(f"ns_dtype must be one of {', '.join(_NS_DTYPES)} or null, got "
                         f"{out['ns_dtype']!r}{extra}")
    if out["momentum_form"] not in ("bias_corrected", "lerp"):
        raise ValueError(f"momentum_form must be bias_corrected or lerp, got {out['momentum_form']!r}")
    return out


def _muon_init(x0):
    return x0, jnp.zeros_like(x0)


def _muon_update(i, g, state, lr, beta, weight_decay, nesterov, ns, adam):
    """One leaf's step of :func:`muon`: Muon for a ``(x, m)`` state, AdamW for ``(x, m, v)``;
    ``ns`` is :func:`_muon_convention`'s, ``adam`` ``(adam_b1, adam_b2, adam_weight_decay,
    adam_lr_ratio, adam_eps, adam_nesterov)``."""
    if len(state) == 3:  # an AdamW leaf
        adam_b1, adam_b2, adam_weight_decay, adam_lr_ratio, adam_eps, adam_nesterov = adam
        x, m, v = state
        u, m, v = _adam_direction(i, g, m, v, adam_b1, adam_b2, adam_eps, adam_nesterov)
        return x - adam_lr_ratio * lr * (u + adam_weight_decay * x), m, v
    x, m = state
    t = step_count(i)
    m = (1 - beta) * g + beta * m
    if ns["momentum_form"] == "lerp":
        mhat = beta * m + (1 - beta) * g if nesterov else m
    elif nesterov:
        mhat = beta * bias_correction(m, beta, t + 1) + (1 - beta) * bias_correction(g, beta, t)
    else:
        mhat = bias_correction(m, beta, t)
    dtype = _NS_DTYPES.get(ns["ns_dtype"])
    u = newton_schulz(mhat, ns["ns_steps"], ns["ns_coeffs"], ns["ns_eps"], dtype).astype(x.dtype)
    u = jnp.sqrt(jnp.maximum(1, x.shape[1] / x.shape[0])) * u
    return x - lr * (u + weight_decay * x), m


def _muon_state(params, muon_mask) -> OptimizerState:
    """:func:`muon`'s ``init_fn``: ``(x, m)`` per Muon leaf, ``(x, m, v)`` per AdamW leaf.

    Raises:
      ValueError: a leaf ``muon_mask`` marks that is not 2-D.
    """
    leaves, treedef = jax.tree.flatten(params)
    flags = mask_flags(params, muon_mask, muon_matrices, "muon: muon_mask")
    flats, subtrees = [], []
    for x, is_matrix in zip(leaves, flags, strict=True):
        x = fresh(x)
        if is_matrix and jnp.ndim(x) != 2:
            raise ValueError(f"muon: muon_mask marks a leaf of shape {jnp.shape(x)}; "
                             "Muon leaves must be 2-D")
        s = _muon_init(x) if is_matrix else (x, jnp.zeros_like(x), jnp.zeros_like(x))
        flat, sub = jax.tree.flatten(s)
        flats.append(flat)
        subtrees.append(sub)
    return OptimizerState(tuple(flats), treedef, tuple(subtrees))


# --------------------------------------------------------------------------------------------
# Adafactor, LAMB, LARS.


def _factored_dims(shape, factored: bool, min_dim_size_to_factor: int):
    """``(d1, d0)``: the second-largest and largest axes of ``shape`` when the second moment is
    factored over them (``factored``, >= 2-D, second-largest axis >= ``min_dim_size_to_factor``),
    else ``None``. Ties broken as ``numpy.argsort`` does, as Optax."""
    if not factored or len(shape) < 2:
        return None
    order = np.argsort(shape)
    if shape[order[-2]] < min_dim_size_to_factor:
        return None
    return int(order[-2]), int(order[-1])


def _rms(x):
    return jnp.sqrt(jnp.mean(x * x))


@register_optimizer("adafactor")
@optimizer
def adafactor(
    step_size,
    min_dim_size_to_factor: int = 128,
    decay_rate: float = 0.8,
    decay_offset: int = 0,
    multiply_by_parameter_scale: bool = True,
    clipping_threshold: float | None = 1.0,
    momentum: float | None = None,
    weight_decay_rate: float | None = None,
    eps: float = 1e-30,
    factored: bool = True,
):
    """Adafactor (Shazeer & Stern 2018, arXiv:1804.04235): factored second moments, update clipping.

    With ``t = i + 1 - decay_offset``, ``rho = 1 - t**(-decay_rate)`` (float32) and ``G = g**2 + eps``:
    a leaf with >= 2 axes whose second-largest axis has at least ``min_dim_size_to_factor`` entries keeps
    a row and a column statistic over its two largest axes ``d1`` (second) and ``d0`` (largest):
    ``r <- rho r + (1 - rho) mean(G, d0);  c <- rho c + (1 - rho) mean(G, d1);
    u = g * (r / mean(r))**-0.5 * c**-0.5`` (broadcast back); any other leaf keeps
    ``v <- rho v + (1 - rho) G;  u = g * v**-0.5``. Then ``u <- u / max(1, rms(u) / clipping_threshold)``
    (clipping), ``u <- lr * u``, ``u <- u * max(rms(x), 1e-3)`` (``multiply_by_parameter_scale``),
    ``m <- (1 - momentum) u + momentum m;  u = m`` (when ``momentum`` is set; float32, not debiased),
    ``u <- u + weight_decay_rate * x`` (not multiplied by the step size), ``x <- x - u``. State per leaf:
    ``(x, r, c)`` (``r``, ``c``: the leaf's shape without axis ``d0``, resp. ``d1``) or ``(x, v)``, plus
    ``m`` when ``momentum`` is set.

    Defaults are the paper's (decay 0.8, clipping 1.0, eps 1e-30, no momentum) and ``optax.adafactor``'s,
    which this matches at equal settings (``learning_rate=step_size``). With
    ``multiply_by_parameter_scale`` the step size is relative to each leaf's rms.

    Conventions (Optax's, checked against numpy in ``tests/test_optimizer_conventions.py``): ``rho`` is
    computed in float32 whatever the parameters' dtype, so float64 parameters see a float32-rounded decay
    (``transformers.Adafactor`` computes it in Python's float64); there is no relative step (the paper's
    and ``transformers.Adafactor``'s default ``relative_step=True`` replace the step size by
    ``min(1e-2, 1/sqrt(t))``); a leaf is factored only when its second-largest axis has at least
    ``min_dim_size_to_factor`` (128) entries, and then over its two largest axes (the paper and
    ``transformers.Adafactor``: every leaf of two or more axes, over its last two); ``weight_decay_rate``
    is not multiplied by the step size (``transformers.Adafactor`` multiplies it by ``lr``).

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      min_dim_size_to_factor: factor only when the second-largest axis is at least this long.
      decay_rate: exponent of the second-moment decay schedule.
      decay_offset: step offset of that schedule (for fine-tuning).
      multiply_by_parameter_scale: scale updates by each leaf's rms (at least 1e-3).
      clipping_threshold: update clipping threshold (``None``: no clipping).
      momentum: first-moment decay (``None``: no momentum).
      weight_decay_rate: decay added to the update after the step size (``None``: none).
      eps: added to the squared gradient.
      factored: whether to factor second moments at all.

    Returns:
      An :class:`~optimizers.core.Optimizer` ``(init_fn, update_fn, params_fn)``.

    Raises:
      ValueError: concrete ``step_size <= 0``.
    """
    step_size = make_schedule(positive_step_size(step_size))
    hp = (decay_rate, decay_offset, multiply_by_parameter_scale, clipping_threshold, momentum,
          weight_decay_rate, eps)

    def init(x0):
        return _adafactor_init(x0, _factored_dims(jnp.shape(x0), factored, min_dim_size_to_factor), momentum)

    def update(i, g, state):
        dims = _factored_dims(state[0].shape, factored, min_dim_size_to_factor)
        return _adafactor_update(i, g, state, step_size(i), dims, hp)

    return init, update, params_of


def _adafactor_init(x0, dims, momentum):
    """One leaf's :func:`adafactor` state: ``(x, r, c)`` (``dims = (d1, d0)``) or ``(x, v)``,
    plus a float32 ``m`` when ``momentum`` is set."""
    if dims is None:
        stats = (jnp.zeros_like(x0),)
    else:
        d1, d0 = dims
        stats = (jnp.zeros_like(jnp.sum(x0, axis=d0)), jnp.zeros_like(jnp.sum(x0, axis=d1)))
    m = (jnp.zeros(jnp.shape(x0), jnp.float32),) if momentum is not None else ()
    return (x0, *stats, *m)


def _adafactor_direction(g, state, dims, rho, eps):
    """``(u, stats)``: the gradient scaled by the new (factored or full) second moment."""
    x = state[0]
    gsq = g * g + eps
    if dims is not None:
        d1, d0 = dims
        r, c = state[1:3]
        r = (rho * r + (1.0 - rho) * jnp.mean(gsq, axis=d0)).astype(x.dtype)
        c = (rho * c + (1.0 - rho) * jnp.mean(gsq, axis=d1)).astype(x.dtype)
        row = (r / jnp.mean(r, axis=d1 - 1 if d1 > d0 else d1, keepdims=True)) ** -0.5
        return g * jnp.expand_dims(row, axis=d0) * jnp.expand_dims(c**-0.5, axis=d1), (r, c)
    v = (rho * state[1] + (1.0 - rho) * gsq).astype(x.dtype)
    return g * v**-0.5, (v,)


def _adafactor_update(i, g, state, lr, dims, hp):
    """One leaf's :func:`adafactor` step; ``hp`` is ``(decay_rate, decay_offset,
    multiply_by_parameter_scale, clipping_threshold, momentum, weight_decay_rate, eps)``."""
    decay_rate, decay_offset, by_parameter_scale, clipping_threshold, momentum, weight_decay_rate, eps = hp
    x = state[0]
    rho = 1.0 - jnp.array(jnp.asarray(i, jnp.int32) - decay_offset + 1, jnp.float32) ** (-decay_rate)
    u, stats = _adafactor_direction(g, state, dims, rho, eps)
    if clipping_threshold is not None:
        u = u / jnp.maximum(1.0, _rms(u) / clipping_threshold)
    u = jnp.asarray(lr, u.dtype) * u
    if by_parameter_scale:
        u = u * jnp.maximum(_rms(x), 1e-3)
    extra = ()
    if momentum is not None:
        u = (1 - momentum) * u + momentum * state[-1]
        extra = (u.astype(jnp.float32),)
    if weight_decay_rate is not None:
        u = u + weight_decay_rate * x
    return (jnp.asarray(x - u).astype(x.dtype), *stats, *extra)


def _trust_ratio(u, x, coefficient=1.0, eps=0.0):
    """``coefficient * ||x|| / (||u|| + eps)``, or 1 where either norm is 0 (``optax``'s
    ``scale_by_trust_ratio`` with ``min_norm = 0``), times ``u``."""
    pn, un = jnp.linalg.norm(x), jnp.linalg.norm(u)
    ratio = coefficient * pn / (un + eps)
    return u * jnp.where(jnp.logical_or(pn == 0.0, un == 0.0), jnp.array(1.0, x.dtype), ratio)


@register_optimizer("lamb")
@optimizer
def lamb(step_size, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6, weight_decay: float = 0.0):
    """LAMB, layer-wise adaptive Adam (You et al. 2020, arXiv:1904.00962).

    With ``t = i + 1``: ``m <- (1 - b1) g + b1 m;  v <- (1 - b2) g**2 + b2 v;
    r = m / (1 - b1**t) / (sqrt(v / (1 - b2**t)) + eps) + weight_decay * x;
    x <- x - lr * (||x|| / ||r||) r`` (the trust ratio taken as 1 where either norm is 0; norms
    over the whole leaf). State per leaf: ``(x, m, v)``. Defaults are ``optax.lamb``'s (the paper
    uses eps 1e-6 and weight decay 0.01 for BERT), which this matches at equal settings.

    Trust ratio (Optax's; the paper's Algorithm 2 with ``phi`` the identity): ``||x|| / ||r||``
    per leaf, ``r`` the bias-corrected Adam direction plus ``weight_decay * x``, 1 where either
    norm is 0, ``||x||`` not clipped. Other variants: the paper allows a clipped
    ``phi(||x||)``; ``cybertronai/pytorch-lamb`` clamps ``||x||`` to at most 10 and does not
    bias-correct the moments. Checked in float64 against numpy
    (``tests/test_optimizer_conventions.py``).

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      b1, b2: moment decay rates in ``[0, 1)``.
      eps: added to the root of the second moment.
      weight_decay: decay added before the trust ratio (>= 0).

    Returns:
      An :class:`~optimizers.core.Optimizer` ``(init_fn, update_fn, params_fn)``.

    Raises:
      ValueError: concrete ``step_size <= 0``, ``b1``/``b2`` outside ``[0, 1)``,
        ``weight_decay < 0``.
    """
    step_size = make_schedule(positive_step_size(step_size))
    check_unit_interval(b1, "b1")
    check_unit_interval(b2, "b2")
    check_nonnegative(weight_decay, "weight_decay")

    def init(x0):
        return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

    def update(i, g, state):
        x, m, v = state
        u, m, v = _adam_direction(i, g, m, v, b1, b2, eps, False)
        u = _trust_ratio(u + weight_decay * x, x)
        return x - step_size(i) * u, m, v

    return init, update, params_of


@register_optimizer("lars")
@optimizer
def lars(
    step_size,
    weight_decay: float = 0.0,
    trust_coefficient: float = 0.001,
    eps: float = 0.0,
    momentum: float = 0.9,
    nesterov: bool = False,
):
    """LARS, layer-wise adaptive rate scaling (You, Gitman & Ginsburg 2017, arXiv:1708.03888).

    ``u = g + weight_decay * x;  u <- trust_coefficient * ||x|| / (||u|| + eps) * u`` (the ratio taken
    as 1 where either norm is 0; norms over the whole leaf);  ``u <- -lr * u;  b <- u + momentum * b;
    x <- x + b`` (Nesterov: ``x <- x + u + momentum * b``). State per leaf: ``(x, b)``. Defaults are
    ``optax.lars``'s (the paper's trust coefficient 0.001 and momentum 0.9; it used weight decay 5e-4),
    which this matches at equal settings (decay and trust ratio on every leaf).

    Trust ratio (Optax's): ``||x||`` over ``||g + weight_decay * x||``. The paper's Algorithm 1 (and
    NVIDIA apex's ``LARC``) divide by ``||g|| + weight_decay * ||x||``: the same without weight decay,
    a smaller ratio with it. Both scale ``g + weight_decay * x``, and the paper's momentum buffer holds
    step-size-scaled updates as here (``LARC``'s ``torch.optim.SGD`` buffer is scaled by the step size
    after: different once it changes). Checked against numpy in ``tests/test_optimizer_conventions.py``.

    Args:
      step_size: positive scalar, traced scalar, or schedule.
      weight_decay: decay added to the gradient (>= 0).
      trust_coefficient: the trust ratio's coefficient.
      eps: added to the update's norm.
      momentum: momentum decay.
      nesterov: Nesterov momentum.

    Returns:
      An :class:`~optimizers.core.Optimizer` ``(init_fn, update_fn, params_fn)``.

    Raises:
      ValueError: concrete ``step_size <= 0`` or ``weight_decay < 0``.
    """
    step_size = make_schedule(positive_step_size(step_size))
    check_nonnegative(weight_decay, "weight_decay")

    def init(x0):
        return x0, jnp.zeros_like(x0)

    def update(i, g, state):
        x, b = state
        u = _trust_ratio(g + weight_decay * x, x, trust_coefficient, eps)
        u = jnp.asarray(-step_size(i), u.dtype) * u
        b = u + momentum * b
        return x + (u + momentum * b if nesterov else b), b

    return init, update, params_of
