"""Streamed token shards (``stream: true``): the order is a pure function of seed and step, the windows
are the files' bytes, and a trial interrupted mid-run and resumed from its checkpoint reads the same
windows, bit for bit, as an uninterrupted one (one trial, and a vmapped pair of seeds)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from interrupting import Interrupt, Interrupting

from harness.core.spec import TrialSpec
from harness.data.shards import write_shard
from harness.data.stream import TokenStream
from harness.data.tokens import load_tokens, scan
from harness.train import loop as trainer
from harness.train.checkpoint import UnitCheckpoints, parse_every

ROOT = Path(__file__).resolve().parents[1]
SEQ = 8


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Real English bytes in two training shards (windows straddle them) and one validation shard."""
    d = tmp_path_factory.mktemp("stream")
    text = np.frombuffer((ROOT / "docs" / "architecture.md").read_bytes()[:24_000], np.uint8)
    write_shard(d / "doc_train_000.bin", text[:10_001])
    write_shard(d / "doc_train_001.bin", text[10_001:20_000])
    write_shard(d / "doc_val_000.bin", text[20_000:])
    return d


def test_stream_windows_are_the_files_and_each_epoch_visits_every_window_once(corpus):
    c = scan(str(corpus))
    toks = np.concatenate([np.fromfile(f, np.uint16, offset=1024) for f in sorted(corpus.glob("*train*"))])
    s = TokenStream(c.train, SEQ, len(toks), 256)
    N = (len(toks) - 1) // SEQ
    assert s.num_windows == N
    for w in (0, 1249, 1250, N - 1):  # 1250: straddles the two shards (10,001 tokens in the first)
        assert np.array_equal(s.window(w), toks[w * SEQ:w * SEQ + SEQ + 1])
    B = 7
    steps = -(-N // B)
    ids = s.order(3, 0, steps, B).reshape(-1)[:N]
    assert sorted(ids.tolist()) == list(range(N))  # epoch 0: a permutation
    assert np.array_equal(s.order(3, 5, 4, B), s.order(3, 0, 9, B)[5:])  # a pure function of the step
    assert not np.array_equal(s.order(4, 0, 4, B), s.order(3, 0, 4, B))  # each seed its own order
    x, y = s.batches(3, 2, 3, B)
    assert x.dtype == np.int32 and x.shape == (3, B, SEQ)
    w = s.order(3, 2, 3, B)
    assert np.array_equal(x[1, 4], toks[w[1, 4] * SEQ:w[1, 4] * SEQ + SEQ])
    assert np.array_equal(y[1, 4], toks[w[1, 4] * SEQ + 1:w[1, 4] * SEQ + SEQ + 1])


def test_a_streamed_dataset_holds_only_its_first_windows(corpus):
    ds = load_tokens(str(corpus), seq_len=SEQ, vocab_size=256, stream=True, valid_tokens=1000)
    mem = load_tokens(str(corpus), seq_len=SEQ, vocab_size=256, stream=False, valid_tokens=1000)
    assert ds.stream is not None and mem.stream is None
    assert ds.stream.num_windows == mem.num_train
    assert np.array_equal(ds.x_train, mem.x_train[:len(ds.x_train)])
    assert np.array_equal(ds.x_valid, mem.x_valid) and np.array_equal(ds.x_test, mem.x_test)


def _specs(corpus: Path, width: int) -> list[TrialSpec]:
    base = dict(sweep="st", model="transformer_lm", optimizer="adam", schedule="constant",
                dataset=f"tokens:{corpus}", steps=17, batch_size=4, eval_every=8, steps_per_dispatch=3,
                model_hparams={"width": 8, "depth": 1, "num_heads": 2},
                dataset_hparams={"seq_len": SEQ, "vocab_size": 256, "stream": True, "valid_tokens": 512})
    return [TrialSpec.make(seed=s, optimizer_hparams={"step_size": 3e-3}, **base) for s in (0, 1)][:width]


def _run(specs, ds, ck, seen):
    """Train, recording each ``(seed, update) -> window ids`` the stream hands out."""
    real = ds.stream.batches

    def batches(seed, start, n, batch, part=slice(None)):
        for i in range(n):
            seen.setdefault((seed, start + i), ds.stream.order(seed, start + i, 1, batch).tolist())
        return real(seed, start, n, batch, part)

    ds.stream.batches = batches
    try:
        if len(specs) == 1:
            return [trainer.run_trial(specs[0], dataset=ds, measure_perf=False, checkpoints=ck)]
        return trainer.run_trials_batched(specs, dataset=ds, measure_perf=False, checkpoints=ck)
    finally:
        del ds.stream.batches


@pytest.mark.parametrize("width", [1, 2])
def test_interrupted_and_resumed_reads_the_same_windows_bit_for_bit(corpus, tmp_path, width):
    specs = _specs(corpus, width)
    ds = load_tokens(**{"path": str(corpus), **specs[0].hparams("dataset")})
    ids, T = [s.trial_id for s in specs], (width if width > 1 else None)
    ref_seen: dict = {}
    ref = _run(specs, ds, None, ref_seen)
    assert ref[0].extra["data_wait_s"] >= 0.0 and ref[0].extra["data_read_s"] > 0.0
    d = str(tmp_path / f"w{width}")
    ck = Interrupting(d, ids, T, parse_every(5), stop_after=3)  # saved at 6 (the first chunk end past 5)
    first: dict = {}
    with pytest.raises(Interrupt):
        _run(specs, ds, ck, first)
    ck.release()
    again = UnitCheckpoints(d, ids, T, parse_every(5))
    second: dict = {}
    res = _run(specs, ds, again, second)
    assert again.resumed_from == 6
    assert min(k[1] for k in second) == 6  # resumed: updates 0..5 were not read again
    assert {**first, **second} == ref_seen  # every update's windows, as uninterrupted
    assert len(ref_seen) == 17 * width
    for a, b in zip(res, ref, strict=True):
        assert a.curves.train_loss == b.curves.train_loss and a.curves.eval_loss == b.curves.eval_loss
        assert a.test_loss == b.test_loss
    if width == 2:  # the two seeds read different windows
        assert ref_seen[(0, 0)] != ref_seen[(1, 0)]
    again.cleanup()


def test_a_stream_orders_epochs_as_numpy_permutation_in_4_bytes_a_window(tmp_path):
    n = 1_000_001  # tokens: 1,000,000 windows of 1 token
    write_shard(tmp_path / "t_train_000.bin", np.arange(n) % 256)
    write_shard(tmp_path / "t_val_000.bin", np.arange(9))
    s = TokenStream(scan(str(tmp_path)).train, 1, n, 256)
    tracemalloc.start()
    s.order(5, 0, 1, 1)  # epoch 0's permutation, made and kept
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4.5 * s.num_windows, peak  # int32: 4 bytes a window (int64 took 8)
    ids = s.order(5, 0, 1000, 1000).reshape(-1)
    assert np.array_equal(ids, np.random.default_rng((5, 0)).permutation(s.num_windows))  # the order kept
