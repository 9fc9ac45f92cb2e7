"""Conventions the optimizers follow where the papers' code (or ``torch.optim``) differs.
Each docstring names its convention and the other one; these tests hold the docstrings to
that, and check each convention numerically in float64 against an independent numpy
implementation of both variants: the harness equals the one its docstring states and differs
from the other. Each numpy implementation is written here from the update rule, not from the
harness's code."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optimizers as O

# --------------------------------------------------------------------------------------------
# Helpers.


def run64(opt, x0, grad_fn, steps):
    """``steps`` eager updates of ``opt`` in float64 from ``x0``; ``grad_fn(i, x)`` gives the
    gradient at the parameters ``x``. Returns the parameters and the last state."""
    with jax.enable_x64(True):
        state = opt.init_fn(jnp.asarray(x0, jnp.float64))
        for i in range(steps):
            x = np.asarray(opt.params_fn(state))
            state = opt.update_fn(i, jnp.asarray(grad_fn(i, x), jnp.float64), state)
        out = np.asarray(opt.params_fn(state))
    assert out.dtype == np.float64
    return out, state


def close(a, b, rtol=1e-12):
    return np.allclose(a, b, rtol=rtol, atol=0.0)


def fixed_grads(shape, steps, seed):
    gs = np.random.default_rng(seed).standard_normal((steps, *shape))
    return lambda i, x: gs[i]


def quadratic(center):
    """The gradient of ``0.5 ||x - center||^2`` at ``x``."""
    return lambda i, x: x - center


# --------------------------------------------------------------------------------------------
# The docstrings name the convention followed and the other one (a content guard; the numeric
# checks are below).

DOC_CONVENTIONS = {
    "rmsprop": ("eps is added inside the square root", "torch.optim.RMSprop", "g / (sqrt(a) + eps)"),
    "rmsprop_momentum": ("eps inside the square root", "torch.optim.RMSprop(momentum=...)",
                         "g / (sqrt(a) + eps)"),
    "adamax": ("outside the maximum", "torch.optim.Adamax", "optax.adamax", "max(b2 u, |g| + eps)"),
    "muon": ("bias-corrected", "torch.optim.Muon", "uncorrected", "bfloat16"),
    "schedule_free_sgd": ("no ``r``", "weight_lr_power", "warmup_steps", "``i + 1``",
                          "schedulefree.SGDScheduleFree"),
    "schedule_free_adamw": ("no ``r``", "warmup_steps", "``i + 1``", "schedulefree.AdamWScheduleFree"),
    "prodigy": ("bias correction is always on", "prodigyopt.Prodigy", "use_bias_correction=False"),
    "adafactor": ("computed in float32", "no relative step", "min_dim_size_to_factor",
                  "two largest axes", "transformers.Adafactor"),
    "lamb": ("Trust ratio", "``||x|| / ||r||``", "cybertronai/pytorch-lamb", "bias-correct"),
    "lars": ("Trust ratio", "||g + weight_decay * x||", "||g|| + weight_decay * ||x||",
             "Algorithm 1"),
    "soap": ("Precision: the parameters' own", "float64", "``eigh``", "Precision.HIGHEST",
             "nikhilvyas/SOAP", "QR"),
}


@pytest.mark.parametrize("name", sorted(DOC_CONVENTIONS))
def test_docstring_states_its_convention(name):
    doc = " ".join(O.OPTIMIZERS[name].__doc__.split())
    missing = [phrase for phrase in DOC_CONVENTIONS[name] if phrase not in doc]
    assert not missing, f"{name}'s docstring lacks {missing}"


# --------------------------------------------------------------------------------------------
# RMSProp and AdaMax: where eps goes (jax.example_libraries' placement, not torch.optim's).

LR, EPS = 0.1, 0.25  # eps large enough that the two placements differ visibly


def test_rmsprop_adds_eps_inside_the_square_root():
    """One step by hand: ``a = (1 - gamma) g**2``; the harness (and jax.example_libraries)
    divides by ``sqrt(a + eps)``, ``torch.optim.RMSprop`` by ``sqrt(a) + eps``."""
    x0, g, gamma = np.array([1.0, -2.0, 0.5]), np.array([0.3, -0.1, 2.0]), 0.9
    a = (1 - gamma) * g**2
    inside = x0 - LR * g / np.sqrt(a + EPS)
    outside = x0 - LR * g / (np.sqrt(a) + EPS)  # torch.optim.RMSprop
    got, _ = run64(O.rmsprop(LR, gamma=gamma, eps=EPS), x0, lambda i, x: g, 1)
    assert close(got, inside)
    assert not np.allclose(got, outside, rtol=1e-3)
    # with momentum: m = lr g / sqrt(a + eps); torch: buf = g / (sqrt(a) + eps), x -= lr buf
    got_m, _ = run64(O.rmsprop_momentum(LR, gamma=gamma, eps=EPS, momentum=0.9), x0, lambda i, x: g, 1)
    assert close(got_m, inside)
    assert not np.allclose(got_m, outside, rtol=1e-3)
    # optax.rmsprop's default eps_in_sqrt=True is the harness's placement
    with jax.enable_x64(True):
        tx = optax.rmsprop(LR, decay=gamma, eps=EPS)
        updates, _ = tx.update(jnp.asarray(g), tx.init(jnp.asarray(x0)))
    assert close(x0 + np.asarray(updates), inside)


def test_adamax_adds_eps_to_the_denominator_not_inside_the_max():
    """Two steps by hand (on the first the placements agree: ``max(0, |g|) + eps`` is
    ``max(0, |g| + eps)``). The harness: ``u = max(b2 u, |g|)``, step ``m / (u + eps)``;
    ``torch.optim.Adamax`` (and ``optax.adamax``): ``u = max(b2 u, |g| + eps)``, step ``m / u``,
    so its eps decays inside ``u`` where ``b2 u`` wins (coordinates 0 and 1 of step 2)."""
    x0 = np.array([1.0, -2.0, 0.5])
    g = np.array([[2.0, -1.0, 0.5], [0.1, 0.2, -3.0]])
    b1, b2 = 0.9, 0.5
    x_h, x_t = x0.copy(), x0.copy()
    m, u, u_t = np.zeros(3), np.zeros(3), np.zeros(3)
    firsts = []
    for t in (1, 2):
        m = b1 * m + (1 - b1) * g[t - 1]
        u = np.maximum(b2 * u, np.abs(g[t - 1]))
        u_t = np.maximum(b2 * u_t, np.abs(g[t - 1]) + EPS)
        x_h = x_h - LR / (1 - b1**t) * m / (u + EPS)
        x_t = x_t - LR / (1 - b1**t) * m / u_t
        firsts.append((x_h.copy(), x_t.copy()))
    assert close(*firsts[0])  # step 1: the same
    got, _ = run64(O.adamax(LR, b1=b1, b2=b2, eps=EPS), x0, lambda i, x: g[i], 2)
    assert close(got, x_h)
    assert not np.allclose(got[:2], x_t[:2], rtol=1e-3)
    assert close(got[2], x_t[2])  # where |g| wins the max, the placements agree
    with jax.enable_x64(True):  # optax.adamax places eps as torch does
        tx, x = optax.adamax(LR, b1=b1, b2=b2, eps=EPS), jnp.asarray(x0)
        state = tx.init(x)
        for k in range(2):
            updates, state = tx.update(jnp.asarray(g[k]), state)
            x = x + updates
    assert close(np.asarray(x), x_t)


# --------------------------------------------------------------------------------------------
# Muon: Nesterov momentum bias-corrected as Optax; torch.optim.Muon does not correct.


def _newton_schulz64(x, steps=5, eps=1e-8):
    a, b, c = 3.4445, -4.7750, 2.0315
    wide = x.T if x.shape[0] > x.shape[1] else x
    y = wide / (np.linalg.norm(wide) + eps)
    for _ in range(steps):
        gram = y @ y.T
        y = a * y + (b * gram + c * gram @ gram) @ y
    return y.T if x.shape[0] > x.shape[1] else y


def _muon64(x0, grads, lr, beta, wd, bias_corrected):
    """Muon with Nesterov on a ``(fan_in, fan_out)`` matrix in float64 numpy."""
    x, m = x0.copy(), np.zeros_like(x0)
    for t, g in enumerate(grads, start=1):
        m = beta * m + (1 - beta) * g
        if bias_corrected:  # Optax: beta m / (1 - beta**(t+1)) + (1 - beta) g / (1 - beta**t)
            nesterov = beta * m / (1 - beta ** (t + 1)) + (1 - beta) * g / (1 - beta**t)
        else:  # torch.optim.Muon: grad.lerp(buf, momentum)
            nesterov = beta * m + (1 - beta) * g
        u = np.sqrt(max(1.0, x.shape[1] / x.shape[0])) * _newton_schulz64(nesterov)
        x = x - lr * (u + wd * x)
    return x


def test_muon_nesterov_momentum_is_bias_corrected():
    """Three steps (on the first both Nesterov terms are multiples of ``g`` and the
    orthogonalisation erases the scale, so the conventions part from step 2 on)."""
    rng = np.random.default_rng(0)
    x0, grads = rng.standard_normal((4, 6)), rng.standard_normal((3, 4, 6))
    lr, beta, wd = 0.02, 0.95, 0.1
    got, _ = run64(O.muon(lr, beta=beta, weight_decay=wd), x0, lambda i, x: grads[i], 3)
    assert close(got, _muon64(x0, grads, lr, beta, wd, bias_corrected=True), rtol=1e-10)
    torch_like = _muon64(x0, grads, lr, beta, wd, bias_corrected=False)
    assert np.abs(got - torch_like).max() > 1e-4 * np.abs(got - x0).max()
    one, _ = run64(O.muon(lr, beta=beta, weight_decay=wd), x0, lambda i, x: grads[i], 1)
    # one step: the same up to the eps added to the two Nesterov terms' different norms
    assert close(one, _muon64(x0, grads[:1], lr, beta, wd, bias_corrected=False), rtol=1e-6)


# --------------------------------------------------------------------------------------------
# Prodigy: Adam's bias correction always on; prodigyopt defaults it off.


def _prodigy64(x0, grad_fn, steps, lr, bias_correction, b1=0.9, b2=0.999, eps=1e-8, d0=1e-6):
    beta3 = np.sqrt(b2)
    x, m, v, s = x0.copy(), np.zeros_like(x0), np.zeros_like(x0), np.zeros_like(x0)
    d, numerator = d0, 0.0
    for k in range(steps):
        g = grad_fn(k, x)
        bc = np.sqrt(1 - b2 ** (k + 1)) / (1 - b1 ** (k + 1)) if bias_correction else 1.0
        dlr = d * lr * bc
        numerator = beta3 * numerator + (d / d0) * dlr * np.dot(g, x0 - x)
        m = b1 * m + (1 - b1) * d * g
        v = b2 * v + (1 - b2) * d * d * g * g
        s = beta3 * s + (d / d0) * dlr * g
        d = max(d, numerator / np.abs(s).sum())
        x = x - dlr * m / (np.sqrt(v) + d * eps)
    return x


def test_prodigy_bias_correction_is_always_on():
    grad_fn = quadratic(np.array([3.0, -1.0, 2.0, 0.5]))
    x0 = np.zeros(4) + 0.1
    got, _ = run64(O.prodigy(1.0), x0, grad_fn, 6)
    assert close(got, _prodigy64(x0, grad_fn, 6, 1.0, bias_correction=True), rtol=1e-10)
    assert not np.allclose(got, _prodigy64(x0, grad_fn, 6, 1.0, bias_correction=False), rtol=1e-3)


# --------------------------------------------------------------------------------------------
# Schedule-Free SGD: the reference's r = 0 (no r here), warm-up indexing as Optax.


def _schedule_free_sgd64(y0, grad_fn, steps, step_lr, weight_lr, b1=0.9, power=2.0):
    """The authors' SGDScheduleFree update in its ``y`` form: step ``k`` takes the SGD step with
    ``step_lr(k)`` and averages with weight ``weight_lr(k)**power`` (their ``r = 0``)."""
    y, z, lr_max, weight_sum = y0.copy(), y0.copy(), -1.0, 0.0
    for k in range(steps):
        g = grad_fn(k, y)
        lr_max = max(lr_max, weight_lr(k))
        weight = lr_max**power
        weight_sum += weight
        c = weight / weight_sum if weight_sum > 0 else 0.0
        lr = step_lr(k)
        y = (1 - c) * y + c * z + lr * (b1 * (1 - c) - 1) * g
        z = z - lr * g
    return y, (y - (1 - b1) * z) / b1


def test_schedule_free_matches_the_reference_and_indexes_warmup_as_optax():
    grad_fn = quadratic(np.array([1.0, -2.0, 0.5]))
    y0, lr, warm, steps = np.array([0.3, 0.2, -0.4]), 0.2, 4, 8
    got, state = run64(O.schedule_free_sgd(lr), y0, grad_fn, steps)
    want_y, want_x = _schedule_free_sgd64(y0, grad_fn, steps, lambda k: lr, lambda k: lr)
    assert close(got, want_y, rtol=1e-12)
    with jax.enable_x64(True):
        assert close(np.asarray(O.schedule_free_eval_params(state)), want_x, rtol=1e-12)
    # warm-up: the reference's warmup_steps scales step k's SGD step and weight by (k+1)/W; a
    # warm-up schedule here (as Optax's warmup_steps, linear_warmup's ramp) gives the SGD step
    # lr(k) = lr k / W (0 at step 0) and the weight lr(k + 1). The ramp is written in float64
    # here: linear_warmup at an int32 step computes in float32 even under x64 (int32 / int is
    # float32 in JAX), which would blur the comparison to 1e-8.
    def ramp(i):
        return lr * jnp.minimum(jnp.asarray(i, jnp.float64), warm) / warm

    got_w, _ = run64(O.schedule_free_sgd(ramp), y0, grad_fn, steps)
    reference, _ = _schedule_free_sgd64(y0, grad_fn, steps, lambda k: lr * min(k + 1, warm) / warm,
                                        lambda k: lr * min(k + 1, warm) / warm)
    optax_like, _ = _schedule_free_sgd64(y0, grad_fn, steps, lambda k: lr * min(k, warm) / warm,
                                         lambda k: lr * min(k + 1, warm) / warm)
    assert close(got_w, optax_like, rtol=1e-12)
    assert not np.allclose(got_w, reference, rtol=1e-3)


# --------------------------------------------------------------------------------------------
# Adafactor: decay rate in float32, the step size as given, factoring by size (Optax's).


def _adafactor64(x0, grads, lr, rho_dtype, decay=0.8, eps=1e-30, clip=1.0):
    """Unfactored Adafactor (Optax's order): ``v <- rho v + (1 - rho)(g**2 + eps)``, ``u = g /
    sqrt(v)``, clipped by its rms, times ``lr``, times ``max(rms(x), 1e-3)``; ``rho = 1 -
    t**-decay`` computed in ``rho_dtype``."""
    x, v = x0.copy(), np.zeros_like(x0)
    for t, g in enumerate(grads, start=1):
        rho = float(rho_dtype(1.0) - rho_dtype(t) ** rho_dtype(-decay))
        v = rho * v + (1 - rho) * (g * g + eps)
        u = g / np.sqrt(v)
        u = u / max(1.0, np.sqrt(np.mean(u * u)) / clip)
        u = lr * u * max(np.sqrt(np.mean(x * x)), 1e-3)
        x = x - u
    return x


def test_adafactor_decay_rate_in_float32_and_step_size_as_given():
    """Float64 parameters: the harness matches the update with ``rho`` rounded to float32 (to
    float64 rounding) and differs from it with ``rho`` in float64 by float32 rounding (from step
    2; ``rho`` is 0 at step 1). The step size 0.05 is used as given (the paper's relative step
    would use ``min(1e-2, 1 / sqrt(t))``, 0.01 here)."""
    rng = np.random.default_rng(3)
    x0, grads, lr = rng.standard_normal((5, 3)), rng.standard_normal((5, 5, 3)), 0.05
    got, _ = run64(O.adafactor(lr), x0, lambda i, x: grads[i], 5)
    rho32 = _adafactor64(x0, grads, lr, np.float32)
    rho64 = _adafactor64(x0, grads, lr, np.float64)
    moved = np.abs(got - x0).max()
    assert np.abs(got - rho32).max() <= 1e-12 * moved
    assert 1e-10 * moved < np.abs(got - rho64).max() < 1e-5 * moved


def test_adafactor_factors_the_two_largest_axes_when_the_second_has_128_entries():
    """Optax's rule, not the paper's or ``transformers.Adafactor``'s (every leaf of >= 2 axes,
    over its last two): (127, 300) keeps a full second moment; (128, 300) a row and a column
    statistic; (300, 2, 128) is factored over axes 0 and 2 (the two largest), not the last two."""
    params = {"a": np.zeros((127, 300)), "b": np.zeros((128, 300)), "c": np.zeros((300, 2, 128))}
    state = O.adafactor(0.01).init_fn(jax.tree.map(jnp.asarray, params))
    shapes = {k: [np.shape(s) for s in flat[1:]]
              for k, flat in zip(sorted(params), state.packed_state, strict=True)}
    assert shapes == {"a": [(127, 300)], "b": [(128,), (300,)], "c": [(2, 128), (300, 2)]}


# --------------------------------------------------------------------------------------------
# LAMB and LARS: which trust ratio.


def _lamb64(x0, grads, lr, wd, paper_code, b1=0.9, b2=0.999, eps=1e-6):
    """``paper_code=False``: the paper's Algorithm 2 with phi the identity (bias-corrected
    moments, ratio ``||x|| / ||r||``); ``True``: cybertronai/pytorch-lamb (no bias correction,
    ``||x||`` clamped to at most 10)."""
    x, m, v = x0.copy(), np.zeros_like(x0), np.zeros_like(x0)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        if paper_code:
            r = m / (np.sqrt(v) + eps) + wd * x
            xn = min(np.linalg.norm(x), 10.0)
        else:
            r = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps) + wd * x
            xn = np.linalg.norm(x)
        rn = np.linalg.norm(r)
        ratio = xn / rn if xn > 0 and rn > 0 else 1.0
        x = x - lr * ratio * r
    return x


def test_lamb_trust_ratio():
    rng = np.random.default_rng(4)
    x0, grads = 5.0 * rng.standard_normal((4, 3)), rng.standard_normal((3, 4, 3))  # ||x0|| > 10
    lr, wd = 0.01, 0.01
    got, _ = run64(O.lamb(lr, weight_decay=wd), x0, lambda i, x: grads[i], 3)
    assert close(got, _lamb64(x0, grads, lr, wd, paper_code=False), rtol=1e-12)
    assert not np.allclose(got - x0, _lamb64(x0, grads, lr, wd, paper_code=True) - x0, rtol=1e-2)


def _lars64(x0, grads, lr, wd, tc, mom, paper):
    """``paper=False``: Optax's ratio ``tc ||x|| / ||g + wd x||``; ``True``: the paper's
    (Algorithm 1) and NVIDIA apex LARC's ``tc ||x|| / (||g|| + wd ||x||)``. Both scale
    ``g + wd x``; the momentum buffer holds step-size-scaled updates."""
    x, b = x0.copy(), np.zeros_like(x0)
    for g in grads:
        u = g + wd * x
        denominator = np.linalg.norm(g) + wd * np.linalg.norm(x) if paper else np.linalg.norm(u)
        b = mom * b + lr * tc * np.linalg.norm(x) / denominator * u
        x = x - b
    return x


@pytest.mark.parametrize("wd", [0.0, 0.05])
def test_lars_trust_ratio(wd):
    rng = np.random.default_rng(5)
    x0, grads = rng.standard_normal((4, 3)), rng.standard_normal((3, 4, 3))
    lr, tc, mom = 0.5, 0.001, 0.9
    got, _ = run64(O.lars(lr, weight_decay=wd, trust_coefficient=tc, momentum=mom), x0,
                   lambda i, x: grads[i], 3)
    assert close(got, _lars64(x0, grads, lr, wd, tc, mom, paper=False), rtol=1e-12)
    paper = _lars64(x0, grads, lr, wd, tc, mom, paper=True)
    if wd == 0:
        assert close(got, paper, rtol=1e-12)  # the variants agree without weight decay
    else:
        assert not np.allclose(got - x0, paper - x0, rtol=1e-2)
