"""Training windows streamed from token shards, in an order that is a pure function of (seed, step):
a resumed trial reads the windows it would have read, and each seed its own order.

Each window is one positional read (``os.pread``), not a slice of a memory map: on this VM
(``read_ahead_kb`` 8192) every random window touched through a map added ~1.2 MB to the process's
resident set (mapped page cache), so a sweep's peak RSS grew with the corpus (872 MB over 200 MB of
tokens, 1,658 MB over 2 GB); read this way it does not.

Window ``w`` is tokens ``[w·T, w·T + T + 1)`` of the training stream (the shards in name order,
windows may straddle two shards). Epoch ``e`` visits the ``N`` windows in
``np.random.default_rng((seed, e)).permutation(N)``; update ``i`` takes stream positions
``[i·B, (i+1)·B)`` of the concatenated epochs (a batch may straddle two epochs).

``order="sequential"`` is modded-nanogpt's reader instead (``distributed_data_generator``): the
same for every seed, update ``i`` reads ``B·T`` consecutive tokens of one shard, its row ``j`` the
window at ``pos + j·T``; ``pos`` starts at 0 in each shard and moves on by ``B·T``, and a shard is
left (its tail unread) as soon as ``pos + B·T + 1`` would reach its end. Past the last shard the
reader starts over at the first (upstream's stops). numpy only.
"""

from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np

from harness.data.integrity import check_range
from harness.data.shards import ShardInfo, digest

__all__ = ["ORDERS", "TokenStream"]

#: The orders a token stream reads its training windows in; the first is the default.
ORDERS = ("random", "sequential")


class TokenStream:
    """The training split of a shard folder, read window by window (positional reads).

    Args:
      infos: the training shards, in order. seq_len: ``T``. num_tokens: how many tokens of the
        stream are training (the rest, held out, is never read). vocab_size: every token read must
        be below it (checked per batch: ``ValueError`` naming the shard and the token's offset).
        order: one of :data:`ORDERS` (see the module docstring).

    :meth:`check_unchanged` (cheap: a ``stat`` and an ``fstat`` per shard) and :meth:`verify` (also
    the digest's sampled blocks) find a shard rewritten or replaced since it was scanned.
    """

    def __init__(self, infos: tuple[ShardInfo, ...], seq_len: int, num_tokens: int, vocab_size: int,
                 order: str = "random"):
        self.infos, self.seq_len, self.num_tokens, self.vocab_size = infos, seq_len, num_tokens, vocab_size
        self.order_kind = order
        self.num_windows = max((num_tokens - 1) // seq_len, 0)
        self._open()

    def _open(self) -> None:
        self._fds = [os.open(i.path, os.O_RDONLY) for i in self.infos]
        self._ends = np.cumsum([i.num_tokens for i in self.infos])
        self._perms: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        if not hasattr(self, "_blocks"):  # a --jobs worker keeps the blocks the scan's process read
            self._blocks = digest(list(self.infos))

    def check_unchanged(self) -> None:
        """Raise ``ValueError`` when a training shard's size, mtime, inode or ctime (the open file's and
        the path's) is not the one scanned: tokens read from now on, or since, may be another
        corpus's. Costs two ``stat`` calls per shard."""
        for info, fd in zip(self.infos, self._fds, strict=True):
            if why := info.changed(os.fstat(fd)) or info.changed():
                raise ValueError(f"{why}: a training shard changed while the trial trained, so its "
                                 f"result would mix two corpora")

    def verify(self) -> None:
        """:meth:`check_unchanged`, then the digest's sampled blocks read again (an edit that kept
        the size and reset the mtime). Raises ``ValueError`` naming what changed."""
        self.check_unchanged()
        if (now := digest(list(self.infos))) != self._blocks:
            where = os.path.dirname(self.infos[0].path)
            raise ValueError(f"the sampled blocks of the training shards in {where} digest to {now}, not "
                             f"{self._blocks} as when the trial began: a shard changed while the trial "
                             f"trained, so its result would mix two corpora")

    def __del__(self) -> None:
        for fd in getattr(self, "_fds", []):
            os.close(fd)

    def _read(self, k: int, lo: int, n: int) -> np.ndarray:
        """Tokens ``lo .. lo + n - 1`` of shard ``k``."""
        info = self.infos[k]
        width = info.dtype.itemsize
        raw = os.pread(self._fds[k], n * width, info.offset + lo * width)
        if len(raw) != n * width:
            raise ValueError(f"{info.path}: {len(raw)} bytes read at token {lo}, {n * width} expected: the "
                             f"file shrank after it was checked (rewritten while the sweep ran?)")
        return np.frombuffer(raw, info.dtype)

    def __getstate__(self) -> dict:  # a --jobs worker reopens the files: never the tokens pickled
        return {k: getattr(self, k) for k in ("infos", "seq_len", "num_tokens", "vocab_size", "num_windows",
                                              "order_kind", "_blocks")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._open()

    def _perm(self, seed: int, epoch: int) -> np.ndarray:
        key = (seed, epoch)
        if key not in self._perms:  # numpy's permutation(N), shuffled in place in 4 bytes a window
            perm = np.arange(self.num_windows, dtype=np.int32 if self.num_windows < 2**31 else np.int64)
            np.random.default_rng((seed, epoch)).shuffle(perm)
            self._perms[key] = perm
            while len(self._perms) > 4:
                self._perms.popitem(last=False)
        return self._perms[key]

    def order(self, seed: int, start: int, n: int, batch: int) -> np.ndarray:
        """``int64 (n, batch)``: the windows of updates ``start .. start + n - 1`` of seed ``seed``."""
        N = self.num_windows
        pos = np.arange(start * batch, (start + n) * batch, dtype=np.int64)
        out = np.empty_like(pos)
        for e in np.unique(pos // N):
            sel = pos // N == e
            out[sel] = self._perm(seed, int(e))[pos[sel] - e * N]
        return out.reshape(n, batch)

    def sequential_starts(self, start: int, n: int, batch: int) -> np.ndarray:
        """``int64 (n, batch)``: the stream offset of each window of updates ``start .. start + n - 1``
        in the sequential order (module docstring).

        Raises:
          ValueError: no shard holds ``batch · T + 2`` training tokens (upstream's reader needs that).
        """
        bt, ends = batch * self.seq_len, np.minimum(self._ends, self.num_tokens)
        firsts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
        lens = ends - firsts
        per = np.where(lens >= bt + 2, (lens - bt - 2) // bt + 1, 0).astype(np.int64)
        if not per.sum():
            raise ValueError(f"order sequential: no training shard holds batch_size · seq_len + 2 = "
                             f"{bt + 2:,} tokens (the largest has {int(lens.max(initial=0)):,}): each "
                             f"update reads its batch from one shard")
        i = np.arange(start, start + n, dtype=np.int64) % int(per.sum())
        cum = np.cumsum(per)
        k = np.searchsorted(cum, i, side="right")
        pos = firsts[k] + (i - (cum[k] - per[k])) * bt
        return pos[:, None] + np.arange(batch, dtype=np.int64)[None, :] * self.seq_len

    def window(self, w: int, check: bool = True) -> np.ndarray:
        """Tokens ``[w·T, w·T + T + 1)`` of the stream, ``int64 (T + 1,)``; ``check`` as
        :meth:`tokens_at`."""
        return self.tokens_at(w * self.seq_len, check)

    def tokens_at(self, lo: int, check: bool = True) -> np.ndarray:
        """Tokens ``[lo, lo + T + 1)`` of the stream, ``int64 (T + 1,)``; ``check``: each read part
        range-checked (:func:`harness.data.integrity.check_range`)."""
        hi = lo + self.seq_len + 1
        k = int(np.searchsorted(self._ends, lo, side="right"))
        parts = []
        while lo < hi:  # a window may span several shards (short or empty ones included)
            first = int(self._ends[k - 1]) if k else 0
            n = min(hi, int(self._ends[k])) - lo
            if n > 0:
                part = self._read(k, lo - first, n)
                if check:
                    check_range(part, self.vocab_size, self.infos[k].path, lo - first)
                parts.append(part)
                lo += n
            k += 1
        return np.concatenate(parts).astype(np.int64)

    def batches(self, seed: int, start: int, n: int, batch: int,
                part: slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """``(x, y)`` ``int32 (n, b, T)``: inputs and next tokens of updates ``start ..``; ``part``:
        which examples of each batch are read (a data-parallel device's share; default all ``batch``)."""
        if self.order_kind == "sequential":
            ids = self.sequential_starts(start, n, batch)[:, part]
        else:
            ids = self.order(seed, start, n, batch)[:, part] * self.seq_len
        flat = [int(i) for i in ids.reshape(-1)]
        w = np.stack([self.tokens_at(i, check=False) for i in flat])
        self._check_range(w, flat)
        w = w.astype(np.int32).reshape(*ids.shape, self.seq_len + 1)
        return w[..., :-1], w[..., 1:]

    def _check_range(self, w: np.ndarray, flat: list[int]) -> None:
        """Every token of the windows starting at stream offsets ``flat`` (read as ``w``) below the
        vocabulary: one pass over the batch; where one is not, its windows are read again, checked,
        to name the shard and offset."""
        if w.size == 0 or int(w.max()) < self.vocab_size:
            return
        for i in flat:
            self.tokens_at(i)
        raise ValueError(f"a window of the training shards held token id {int(w.max())}, beyond vocab_size "
                         f"{self.vocab_size}, and not when read again: a shard changed while it was read")
