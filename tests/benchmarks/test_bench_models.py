"""Training-step speed of the zoo's MLP and CNN against the reference stax, flax.linen+optax, torch.

Run: ``pytest tests/benchmarks/test_bench_models.py --benchmark-only -s`` (``-s`` prints the ratio
table at the end). Every benchmark round runs ``K`` training steps at batch 128 on one fixed batch,
so all rows of a group are directly comparable; figures are reported as ratios to the reference
stax + optimizers classic loop of the same run (the VM's speed swings, absolute times do not carry).

Networks (issue 4):
* MLP 784-1024-1024-10, relu, momentum(0.01, 0.9).
* CNN Conv(32, 3x3, SAME)-Relu-MaxPool(2)-Conv(64, 3x3, SAME)-Relu-MaxPool(2)-Flatten-Dense(10) on
  28x28x1, adam(1e-3).

Variants: ``reference`` (jax.example_libraries stax+optimizers, one jitted update per step, the
classic loop), ``harness`` (models.zoo + optimizers, jitted step with the optimizer state donated),
``harness_scan`` (K steps in one ``lax.scan`` dispatch, as the harness trainer runs them),
``*_patches`` (CNN with ``conv_impl='patches'``, which the zoo's default ``'auto'`` picks on
CPU), ``flax`` (flax.linen + optax, jitted),
``torch`` (torch eager). flax/torch variants skip when those packages are absent.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.example_libraries import optimizers as ref_opt  # noqa: E402
from jax.example_libraries import stax as ref_stax  # noqa: E402

import optimizers as harness_opt  # noqa: E402
from models.zoo import MODELS, softmax_cross_entropy  # noqa: E402

K = 10  # training steps per benchmark round
BATCH = 128
_RESULTS: dict[str, dict[str, float]] = {"mlp": {}, "cnn": {}}


def _data(kind):
    rng = np.random.default_rng(0)
    shape = (BATCH, 784) if kind == "mlp" else (BATCH, 28, 28, 1)
    x = rng.normal(size=shape).astype(np.float32)
    y = rng.integers(0, 10, BATCH).astype(np.int32)
    return x, y


def _opt(kind, lib):
    return lib.momentum(0.01, 0.9) if kind == "mlp" else lib.adam(1e-3)


def _record(benchmark, group, name):
    _RESULTS[group][name] = benchmark.stats.stats.median


@pytest.fixture(scope="module", autouse=True)
def _ratio_table():
    yield
    for group, res in _RESULTS.items():
        base = res.get("reference")
        if not res or base is None:
            continue
        print(f"\n[{group}] per-step time relative to the reference stax+optimizers classic loop:")
        for name, t in sorted(res.items(), key=lambda kv: kv[1]):
            print(f"  {name:>16}: {t / base:5.2f}x   ({t / K * 1e3:.2f} ms/step this run)")


def _run(benchmark, group, name, run_k, rounds):
    run_k()  # compile / warm up outside the timing
    benchmark.group = group
    benchmark.pedantic(run_k, rounds=rounds, warmup_rounds=1, iterations=1)
    _record(benchmark, group, name)


def _ref_net(kind):
    S = ref_stax
    if kind == "mlp":
        return S.serial(S.Dense(1024), S.Relu, S.Dense(1024), S.Relu, S.Dense(10))
    return S.serial(S.Conv(32, (3, 3), padding="SAME"), S.Relu, S.MaxPool((2, 2), (2, 2)),
                    S.Conv(64, (3, 3), padding="SAME"), S.Relu, S.MaxPool((2, 2), (2, 2)), S.Flatten,
                    S.Dense(10))


ROUNDS = {"mlp": 10, "cnn": 3}


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_reference_stax_classic_loop(benchmark, kind):
    x, y = map(jnp.asarray, _data(kind))
    init, apply = _ref_net(kind)
    _, params = init(jax.random.PRNGKey(0), (-1, *x.shape[1:]))
    opt_init, opt_update, get_params = _opt(kind, ref_opt)

    @jax.jit
    def update(i, opt_state, x, y):
        grads = jax.grad(lambda p: softmax_cross_entropy(apply(p, x), y))(get_params(opt_state))
        return opt_update(i, grads, opt_state)

    box = {"state": opt_init(params), "i": 0}

    def run_k():
        s = box["state"]
        for _ in range(K):
            s = update(box["i"], s, x, y)
            box["i"] += 1
        box["state"] = jax.block_until_ready(s)

    _run(benchmark, kind, "reference", run_k, ROUNDS[kind])


def _harness_model(kind, conv_impl="xla"):
    if kind == "mlp":
        return MODELS["mlp"](input_shape=(784,), num_classes=10, width=1024, depth=2)
    return MODELS["cnn"](input_shape=(28, 28, 1), num_classes=10, width=32, hidden=0, conv_impl=conv_impl)


def _harness_step(model, opt):
    opt_init, opt_update, get_params = opt

    def step(i, opt_state, model_state, x, y):
        def loss_fn(p):
            out, new_state = model.apply(p, model_state, x, train=True)
            return model.loss(out, y), new_state

        grads, new_state = jax.grad(loss_fn, has_aux=True)(get_params(opt_state))
        return opt_update(i, grads, opt_state), new_state

    return opt_init, step


@pytest.mark.parametrize(("kind", "conv_impl"), [("mlp", "xla"), ("cnn", "xla"), ("cnn", "patches")])
def test_harness_step(benchmark, kind, conv_impl):
    x, y = map(jnp.asarray, _data(kind))
    model = _harness_model(kind, conv_impl)
    _, params, model_state = model.init(jax.random.PRNGKey(0), (-1, *x.shape[1:]))
    opt_init, step = _harness_step(model, _opt(kind, harness_opt))
    jstep = jax.jit(step, donate_argnums=(1, 2))
    box = {"state": opt_init(params), "ms": model_state, "i": 0}

    def run_k():
        s, ms = box["state"], box["ms"]
        for _ in range(K):
            s, ms = jstep(box["i"], s, ms, x, y)
            box["i"] += 1
        box["state"], box["ms"] = jax.block_until_ready((s, ms))

    name = "harness" if conv_impl == "xla" else f"harness_{conv_impl}"
    _run(benchmark, kind, name, run_k, ROUNDS[kind])


@pytest.mark.parametrize(("kind", "conv_impl"), [("mlp", "xla"), ("cnn", "xla"), ("cnn", "patches")])
def test_harness_scan(benchmark, kind, conv_impl):
    x, y = map(jnp.asarray, _data(kind))
    xs = jnp.broadcast_to(x, (K, *x.shape))
    ys = jnp.broadcast_to(y, (K, *y.shape))
    model = _harness_model(kind, conv_impl)
    _, params, model_state = model.init(jax.random.PRNGKey(0), (-1, *x.shape[1:]))
    opt_init, step = _harness_step(model, _opt(kind, harness_opt))

    def k_steps(i0, opt_state, ms, xs, ys):
        def body(carry, batch):
            i, s, m = carry
            s, m = step(i, s, m, *batch)
            return (i + 1, s, m), None

        (_, s, m), _ = jax.lax.scan(body, (i0, opt_state, ms), (xs, ys))
        return s, m

    jk = jax.jit(k_steps, donate_argnums=(1, 2))
    box = {"state": opt_init(params), "ms": model_state, "i": 0}

    def run_k():
        s, ms = jk(box["i"], box["state"], box["ms"], xs, ys)
        box["i"] += K
        box["state"], box["ms"] = jax.block_until_ready((s, ms))

    name = "harness_scan" if conv_impl == "xla" else f"harness_scan_{conv_impl}"
    _run(benchmark, kind, name, run_k, ROUNDS[kind])


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_flax_optax(benchmark, kind):
    nn = pytest.importorskip("flax.linen")
    optax = pytest.importorskip("optax")
    x, y = map(jnp.asarray, _data(kind))

    class Net(nn.Module):
        @nn.compact
        def __call__(self, v):
            if kind == "mlp":
                v = nn.relu(nn.Dense(1024)(v))
                v = nn.relu(nn.Dense(1024)(v))
                return nn.Dense(10)(v)
            v = nn.max_pool(nn.relu(nn.Conv(32, (3, 3), padding="SAME")(v)), (2, 2), (2, 2))
            v = nn.max_pool(nn.relu(nn.Conv(64, (3, 3), padding="SAME")(v)), (2, 2), (2, 2))
            return nn.Dense(10)(v.reshape(v.shape[0], -1))

    net = Net()
    params = net.init(jax.random.PRNGKey(0), x)
    tx = optax.sgd(0.01, momentum=0.9) if kind == "mlp" else optax.adam(1e-3)
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state, x, y):
        grads = jax.grad(lambda p: softmax_cross_entropy(net.apply(p, x), y))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    box = {"p": params, "s": opt_state}

    def run_k():
        p, s = box["p"], box["s"]
        for _ in range(K):
            p, s = step(p, s, x, y)
        box["p"], box["s"] = jax.block_until_ready((p, s))

    _run(benchmark, kind, "flax_optax", run_k, ROUNDS[kind])


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_torch_eager(benchmark, kind):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    xn, yn = _data(kind)
    if kind == "mlp":
        net = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                  torch.nn.ReLU(), torch.nn.Linear(1024, 10))
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        x = torch.from_numpy(xn)
    else:
        net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(64 * 7 * 7, 10))
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        x = torch.from_numpy(np.ascontiguousarray(xn.transpose(0, 3, 1, 2)))  # NCHW, torch's native
    y = torch.from_numpy(yn.astype(np.int64))

    def run_k():
        for _ in range(K):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()

    _run(benchmark, kind, "torch_eager", run_k, ROUNDS[kind])
