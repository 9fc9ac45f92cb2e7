"""Sequence (language-modelling) datasets: a Markov chain with a known entropy rate, and byte-level text.

A sequence :class:`~harness.data.dataset.Dataset` has ``task == "sequence"``: inputs ``x_* int32 (N, T)``
are token ids in ``[0, V)``, targets ``y_* int32 (N, T)`` are the next tokens (``y[:, t] ==
x[:, t + 1]`` within a window, and ``y[:, T - 1]`` is the token after the window), ``input_shape ==
(T,)`` and ``num_classes == V`` (the vocabulary). Models score them with the mean per-token
cross-entropy (nats) and per-token accuracy.

``markov_lm`` (registry name): sequences from a random order-``k`` Markov chain over ``V`` tokens.

* The chain: for every context ``c = (a_1, …, a_k)`` the next-token distribution ``P[c] ~
  Dirichlet(concentration · 1_V)``, drawn with ``numpy.random.default_rng(seed)``.
* Sequences are stationary: the first ``k`` tokens of each sequence are a context drawn from the
  chain's stationary distribution ``π`` over contexts, then the chain runs. Each split has its own
  stream (``default_rng([seed, split])``, split 1 = train, 2 = validation, 3 = test).
* :func:`entropy_rate` is exact: ``H = Σ_c π(c) · H(P[c])`` (nats), with ``π`` the fixed point of the
  context chain found by power iteration (all ``P`` entries are positive, so the chain is primitive
  and the iteration converges geometrically; stopped at an L1 change ``< 1e-13``).
* :func:`loss_floor` is the smallest expected per-token cross-entropy any model can reach on these
  windows: targets at positions ``t ≥ k - 1`` see a full context (floor ``H``); the first ``k - 1``
  see only ``t + 1`` tokens, whose floor is the stationary conditional entropy ``H(X_{t+1} | X_0..X_t)
  = H(X_0..X_{t+1}) − H(X_0..X_t)`` from the block marginals of ``π``. The harness reports
  ``nats_above_entropy = loss − loss_floor`` (``dataset.loss_floor``), which is 0 exactly for the true
  chain; for ``T ≫ k`` the floor is within ``(k - 1)/T`` nats·(log V − H) of ``H``.

Byte-level text (``tfds:lm1b``, ``tfds:tiny_shakespeare``): :func:`pack_bytes` turns a list of UTF-8
strings into fixed windows (documents joined by byte 0, which UTF-8 text never contains; ``V = 256``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from harness.data.dataset import Dataset, check_fits

__all__ = ["MarkovChain", "entropy_rate", "loss_floor", "make_chain", "markov_lm", "pack_bytes",
           "sample_sequences"]


class MarkovChain:
    """An order-``k`` chain over ``V`` tokens.

    Attributes:
      probs: ``float64 (V,)*k + (V,)``: ``probs[a_1, …, a_k, b] = P(next = b | context a_1..a_k)``
        (``a_k`` the most recent token); rows sum to 1.
      stationary: ``float64 (V,)*k``: the stationary distribution over contexts (sums to 1).
    """

    def __init__(self, probs: np.ndarray):
        probs = np.asarray(probs, np.float64)
        V = probs.shape[-1]
        if probs.ndim < 2 or any(d != V for d in probs.shape):
            raise ValueError(f"probs must have shape (V,)*(k+1), got {probs.shape}")
        if not np.allclose(probs.sum(-1), 1.0, atol=1e-9) or (probs < 0).any():
            raise ValueError("each row of probs must be a probability distribution")
        self.probs = probs
        self.V, self.k = V, probs.ndim - 1
        self.stationary = _stationary(probs)


def _stationary(probs: np.ndarray, tol: float = 1e-13, max_iter: int = 100_000) -> np.ndarray:
    """Power iteration ``π'(a_2..a_k, b) = Σ_{a_1} π(a_1..a_k) P(b | a_1..a_k)`` from uniform."""
    V, k = probs.shape[-1], probs.ndim - 1
    pi = np.full((V,) * k, 1.0 / V**k)
    for _ in range(max_iter):
        new = np.einsum("a...,a...b->...b", pi, probs)
        if np.abs(new - pi).sum() < tol:
            return new / new.sum()
        pi = new
    raise RuntimeError(f"stationary distribution did not converge in {max_iter} iterations; "
                       "use a larger concentration (every transition probability must be > 0)")


def make_chain(vocab_size: int, order: int, concentration: float, seed: int) -> MarkovChain:
    """A random chain: every context's next-token distribution ``~ Dirichlet(concentration)``.

    Raises:
      ValueError: ``vocab_size < 2``, ``order < 1``, ``concentration <= 0`` or more than 2**22
        contexts.
    """
    if vocab_size < 2 or order < 1 or not concentration > 0:
        raise ValueError(f"markov_lm needs vocab_size >= 2, order >= 1 and concentration > 0, got "
                         f"{vocab_size}, {order}, {concentration}")
    if vocab_size**order > 2**22:
        raise ValueError(f"vocab_size**order = {vocab_size**order} contexts is too many (max 2**22)")
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(vocab_size, float(concentration)), size=vocab_size**order)
    p = np.maximum(p, 1e-300)  # a Dirichlet draw can underflow to 0 for tiny concentrations
    p /= p.sum(-1, keepdims=True)
    return MarkovChain(p.reshape((vocab_size,) * (order + 1)))


def _entropy(p: np.ndarray, axis: int = -1) -> np.ndarray:
    return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=axis)


def entropy_rate(chain: MarkovChain) -> float:
    """``Σ_c π(c) H(P[c])`` in nats per token: the cross-entropy floor with a full context."""
    return float(np.sum(chain.stationary * _entropy(chain.probs)))


def _block_entropy(chain: MarkovChain, j: int) -> float:
    """``H(X_0..X_{j-1})`` of the stationary process for ``1 <= j <= k`` (a marginal of π)."""
    marg = chain.stationary.sum(axis=tuple(range(j, chain.k))) if j < chain.k else chain.stationary
    return float(_entropy(marg.reshape(-1)))


def loss_floor(chain: MarkovChain, seq_len: int) -> float:
    """The minimal expected mean per-token cross-entropy (nats) on stationary windows of
    ``seq_len`` next-token targets (see the module docstring)."""
    H = entropy_rate(chain)
    k = chain.k
    total = 0.0
    for t in range(seq_len):  # target t predicts X_{t+1} from X_0..X_t
        if t + 1 >= k:
            total += H
        else:
            total += _block_entropy(chain, t + 2) - _block_entropy(chain, t + 1)
    return total / seq_len


def sample_sequences(chain: MarkovChain, n: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """``int32 (n, length)`` stationary sample paths (``length >= k``)."""
    V, k = chain.V, chain.k
    if length < k:
        raise ValueError(f"length {length} is shorter than the chain's order {k}")
    flat_pi = chain.stationary.reshape(-1)
    ctx = rng.choice(V**k, size=n, p=flat_pi)
    out = np.empty((n, length), np.int32)
    for i in range(k):  # context index = a_1·V^(k-1) + … + a_k
        out[:, i] = (ctx // V ** (k - 1 - i)) % V
    cdf = np.cumsum(chain.probs.reshape(V**k, V), axis=-1)
    cdf[:, -1] = 1.0
    for t in range(k, length):
        u = rng.random(n)
        nxt = (u[:, None] > cdf[ctx]).sum(-1)
        out[:, t] = nxt
        ctx = (ctx * V + nxt) % V**k
    return out


def markov_lm(vocab_size: int = 16, order: int = 2, seq_len: int = 32, concentration: float = 0.3,
              num_train: int = 16384, num_valid: int = 512, num_test: int = 512, seed: int = 0
              ) -> Dataset:
    """Next-token prediction on a random order-``order`` Markov chain (see the module docstring).

    Returns a sequence :class:`~harness.data.dataset.Dataset`: ``x_* int32 (N, seq_len)``, ``y_*`` the
    next tokens, ``num_classes = vocab_size``, ``entropy_rate`` and ``loss_floor`` in nats/token.
    Defaults: V = 16, k = 2, T = 32, Dirichlet(0.3): entropy rate 1.5957 nats (log 16 = 2.7726),
    floor 1.6004 nats on 32-token windows (tested).

    Raises:
      ValueError: invalid chain arguments (:func:`make_chain`) or a non-positive split size/length.
    """
    for name, v in (("seq_len", seq_len), ("num_train", num_train), ("num_valid", num_valid),
                    ("num_test", num_test)):
        if v < 1:
            raise ValueError(f"markov_lm: {name} must be >= 1, got {v}")
    n = num_train + num_valid + num_test  # sampled paths of seq_len + 1, then x and y: int32 each
    check_fits(n * (3 * seq_len + 1) * 4, f"markov_lm: {n:,} windows of {seq_len} tokens (num_train="
                                          f"{num_train:,}, num_valid={num_valid:,}, num_test={num_test:,})")
    chain = make_chain(vocab_size, order, concentration, seed)
    splits = []
    for i, n in enumerate((num_train, num_valid, num_test), start=1):
        seqs = sample_sequences(chain, n, seq_len + 1, np.random.default_rng([seed, i]))
        splits.append((seqs[:, :-1].copy(), seqs[:, 1:].copy()))
    H, floor = entropy_rate(chain), loss_floor(chain, seq_len)
    (x_tr, y_tr), (x_va, y_va), (x_te, y_te) = splits
    return Dataset(
        x_train=x_tr, y_train=y_tr, x_valid=x_va, y_valid=y_va, x_test=x_te, y_test=y_te,
        input_shape=(seq_len,), num_classes=vocab_size, name="markov_lm", task="sequence",
        entropy_rate=H, loss_floor=floor,
        source=(f"harness.data.sequences.markov_lm(vocab_size={vocab_size}, order={order}, "
                f"concentration={concentration}, seed={seed}): generated locally"),
        license="CC0", citation="")


def pack_bytes(texts: Iterable[str], seq_len: int, max_sequences: int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Byte-level windows of UTF-8 ``texts`` joined by byte 0: ``(x, y)`` both ``int32 (n, seq_len)``,
    consecutive non-overlapping windows of ``seq_len + 1`` bytes (``y`` = ``x`` shifted by one).
    At most ``max_sequences`` windows (the remainder shorter than a window is dropped).

    Raises:
      ValueError: the texts hold fewer than ``seq_len + 1`` bytes.
    """
    need = None if max_sequences is None else max_sequences * (seq_len + 1)
    chunks, size = [], 0
    for t in texts:
        b = (t if isinstance(t, bytes) else str(t).encode("utf-8")) + b"\x00"
        chunks.append(b)
        size += len(b)
        if need is not None and size >= need:
            break
    buf = np.frombuffer(b"".join(chunks), np.uint8)
    n = len(buf) // (seq_len + 1)
    if max_sequences is not None:
        n = min(n, max_sequences)
    if n == 0:
        raise ValueError(f"the text holds {len(buf)} bytes, fewer than one window of {seq_len + 1}")
    w = buf[: n * (seq_len + 1)].reshape(n, seq_len + 1).astype(np.int32)
    return w[:, :-1].copy(), w[:, 1:].copy()
