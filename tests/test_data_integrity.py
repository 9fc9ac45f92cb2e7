"""Token data that cannot change under a result, each bad thing done for real: two ``data tokenize``
into one folder at once (a real second process holds the lock), SIGKILL mid-tokenize, a partial
output, a tokenized corpus edited between the sampled digest's blocks, out-of-range ids in the
held-out tail (uint16 and uint32, streamed), a dangling link among the shards, and the checks' reads
made without a memory map."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.data.kinds import dataset_digest
from harness.data.shards import HEADER_BYTES, write_shard
from harness.data.stream import TokenStream
from harness.data.tokens import TokensError, load_tokens, scan

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
TEXTS = [ROOT / "docs" / "architecture.md", ROOT / "README.md"]
SEQ = 16

HOLDER = """
import sys
from harness.data.tokenize import tokenize_files
tokenize_files([sys.argv[1]], sys.argv[2])
"""


def _holder(fifo: Path, out: Path) -> subprocess.Popen:
    """A real ``data tokenize`` process that takes the lock, then blocks reading ``fifo``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(fifo), str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    marker = out.parent / f".{out.name}.partial" / ".tokenize-partial"
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.05)
    return proc


def test_a_second_writer_is_refused_and_a_killed_one_leaves_nothing_readable(tmp_path):
    text = TEXTS[1].read_text()
    fifo, out = tmp_path / "doc.fifo", tmp_path / "out"
    os.mkfifo(fifo)
    a = _holder(fifo, out)
    r = runner.invoke(app, ["data", "tokenize", str(TEXTS[0]), "-o", str(out)])
    assert r.exit_code == 2 and r.output.strip() == (
        f"tokenize: {out}: another data tokenize is writing it (its lock .out.tokenize.lock is held); wait "
        f"for it to finish or choose another folder"), r.output
    partial = tmp_path / ".out.partial"
    r = runner.invoke(app, ["data", "info", str(partial)])
    assert r.exit_code == 2 and "an unfinished data tokenize output" in r.output, r.output
    assert not out.exists()
    fifo.write_text(text)  # the first writer reads its text and finishes alone
    assert a.wait(60) == 0, a.communicate()[0]
    meta = json.loads((out / "tokens.json").read_text())
    info = json.loads(runner.invoke(app, ["data", "info", str(out), "--json"]).output)
    assert (info["train_tokens"], info["valid_tokens"]) == (meta["train_tokens"], meta["valid_tokens"])
    assert meta["tokens"] == len(text.encode()) + 1 and info["digest_coverage"] == "full"
    assert not partial.exists() and not (tmp_path / ".out.tokenize.lock").exists()

    out2 = tmp_path / "out2"
    b = _holder(fifo, out2)
    b.send_signal(signal.SIGKILL)
    b.wait(30)
    r = runner.invoke(app, ["data", "info", str(out2)])
    assert r.exit_code == 2 and "not a folder of token shards" in r.output  # nothing at the name
    r = runner.invoke(app, ["data", "tokenize", str(TEXTS[0]), "-o", str(out2)])  # the folder: again
    assert r.exit_code == 0, r.output
    assert not (tmp_path / ".out2.partial").exists()
    assert runner.invoke(app, ["data", "info", str(out2)]).exit_code == 0


def test_a_partial_harness_output_is_refused_and_other_tools_shards_still_read(tmp_path):
    toks = np.arange(3000) % 250
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for d, pre in ((ours, "text"), (theirs, "fineweb")):
        d.mkdir()
        write_shard(d / f"{pre}_val_000000.bin", toks[:500])
        write_shard(d / f"{pre}_train_000001.bin", toks)
    r = runner.invoke(app, ["data", "info", str(ours)])
    assert r.exit_code == 2 and r.output.strip() == (
        f"info: {ours}: 2 shards named as data tokenize names them (text_train_000001.bin, ...) but no "
        f"tokens.json, which it writes last: an unfinished output; tokenize again into a new folder "
        f"(python -m harness data tokenize TEXT... -o FOLDER)"), r.output
    with pytest.raises(TokensError, match="an unfinished output"):
        load_tokens(str(ours), seq_len=SEQ, vocab_size=256)
    r = runner.invoke(app, ["data", "info", str(theirs), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["digest_coverage"] == "full", r.output


def test_tokenize_valid_and_test_files_llm_c_numbering_and_eot_before_each_document(tmp_path):
    a, b, c = (tmp_path / f"{n}.txt" for n in "abc")
    a.write_text("alpha " * 40)
    b.write_text("beta " * 30)
    c.write_text("gamma " * 20)
    out = tmp_path / "o"
    r = runner.invoke(app, ["data", "tokenize", str(a), "--valid", str(b), "--test", str(c), "-o", str(out),
                            "--shard-tokens", "100"])
    assert r.exit_code == 0 and r.output.strip().startswith(f"{out}: 513 tokens: 241 train, 151 validation, "
                                                            f"121 test"), r.output
    names = sorted(f.name for f in out.glob("*.bin"))
    assert names == ["text_test_000002.bin", "text_test_000003.bin", "text_train_000004.bin",
                     "text_train_000005.bin", "text_train_000006.bin", "text_val_000000.bin",
                     "text_val_000001.bin"]
    ds = load_tokens(str(out), seq_len=8, valid_tokens=151, test_tokens=121)
    assert ds.x_valid[0].tolist() == [256, *b"beta be"]  # end of text first, as llm.c writes it
    assert ds.x_test[0].tolist() == [256, *b"gamma g"] and ds.x_train[0].tolist() == [256, *b"alpha a"]
    r = runner.invoke(app, ["data", "tokenize", str(a), "--valid", str(b), "--valid-fraction", "0.2",
                            "-o", str(tmp_path / "p")])
    assert r.exit_code == 2
    assert r.output.strip() == "tokenize: give --valid files or --valid-fraction, not both"


def test_an_edit_the_sampled_digest_cannot_see_changes_the_digest_where_the_content_is_recorded(tmp_path):
    out, big = tmp_path / "o", tmp_path / "big.txt"
    big.write_text(TEXTS[0].read_text() * 80)  # ~2 MB: the 16 sampled blocks lie ~130 KB apart
    assert runner.invoke(app, ["data", "tokenize", str(big), "-o", str(out)]).exit_code == 0
    name = f"tokens:{out}"
    before = dataset_digest(name, {})
    (shard,) = out.glob("text_train_*.bin")
    st = shard.stat()
    with open(shard, "r+b") as f:  # 2,000 tokens zeroed between two sampled blocks, size and mtime kept
        f.seek(HEADER_BYTES + 2 * 10_000)
        f.write(bytes(4000))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert dataset_digest(name, {"digest": "sampled"}) == before  # the sampled digest's stated limit
    after = dataset_digest(name, {})
    assert len(after) == 16 and after != before  # every byte hashed: the trial id changes
    r = runner.invoke(app, ["data", "info", str(out), "--json"])
    d = json.loads(r.output)
    assert (d["digest"], d["digest_coverage"], d["as_tokenized"]) == (after, "full", False)
    (shard.parent / "extra_train.bin").write_bytes(shard.read_bytes())  # a shard tokens.json does not list
    r = runner.invoke(app, ["data", "info", str(out)])
    assert r.exit_code == 2 and r.output.strip() == (
        f"info: {out / 'extra_train.bin'}: a shard tokens.json does not list (data tokenize wrote 2 shards "
        f"here); remove it or tokenize again"), r.output
    # shards of other tools (no tokens.json), up to 2 GiB: every byte by default too
    other = tmp_path / "other"
    other.mkdir()
    toks = np.arange(300_000) % 250
    write_shard(other / "a_val.bin", toks[:1000])
    write_shard(other / "a_train.bin", toks)
    auto = dataset_digest(f"tokens:{other}", {})
    sampled = dataset_digest(f"tokens:{other}", {"digest": "sampled"})
    assert auto == dataset_digest(f"tokens:{other}", {"digest": "full"}) and auto != sampled
    toks[150_000] += 1  # between sampled blocks
    write_shard(other / "a_train.bin", toks)
    assert dataset_digest(f"tokens:{other}", {"digest": "sampled"}) == sampled  # its stated limit
    assert dataset_digest(f"tokens:{other}", {}) not in ("", auto)
    assert dataset_digest(f"tokens:{other}", {"digest": "full"}) not in ("", auto)


def _tail_corpus(d: Path, bad: int, fmt: str, at: int) -> Path:
    """Training tokens 0..59 repeated, one id ``bad`` at token ``at`` of the training shard."""
    d.mkdir()
    toks = np.arange(4000, dtype=np.int64) % 60
    toks[at] = bad
    write_shard(d / "x_train_000.bin", toks, fmt)
    write_shard(d / "x_val_000.bin", np.arange(400) % 60, fmt)
    return d


def test_an_id_beyond_the_vocabulary_in_the_held_out_tail_is_refused_streamed_and_uint32(tmp_path):
    d = _tail_corpus(tmp_path / "u16", 200, "gpt2", 3_900)  # the last 400 tokens are test
    for stream in (True, False):
        with pytest.raises(TokensError, match=f"{d / 'x_train_000.bin'} holds token id 200 at token 3,900, "
                                              f"beyond vocab_size 64") as e:
            load_tokens(str(d), seq_len=SEQ, vocab_size=64, valid_tokens=400, stream=stream)
        assert e.value.key == "vocab_size"
    d = _tail_corpus(tmp_path / "u32", 2**32 - 1, "llama3", 3_950)
    with pytest.raises(TokensError, match="holds token id 4294967295 at token 3,950, beyond vocab_size 64"):
        load_tokens(str(d), seq_len=SEQ, vocab_size=64, valid_tokens=400, stream=True)
    with pytest.raises(TokensError, match=r"holds token id 4,294,967,295, which does not fit the model's"):
        load_tokens(str(d), seq_len=SEQ, valid_tokens=400)  # vocabulary from the data
    with pytest.raises(TokensError, match=r"must be in \[1, 2,147,483,647\]"):
        load_tokens(str(d), seq_len=SEQ, vocab_size=2**32, valid_tokens=400)
    # deep in a streamed training shard: found when its window is read, with the offset
    d = _tail_corpus(tmp_path / "deep", 99, "gpt2", 1_000)
    s = TokenStream(scan(str(d)).train, SEQ, 3_600, 64)
    with pytest.raises(ValueError, match="holds token id 99 at token 1,000, beyond vocab_size 64"):
        s.window(1_000 // SEQ)


def test_the_checks_read_without_a_memory_map(tmp_path, monkeypatch):
    d = _tail_corpus(tmp_path / "c", 7, "gpt2", 0)

    def no_map(*a, **k):
        raise AssertionError("a shard was read through a memory map")

    monkeypatch.setattr(np, "memmap", no_map)
    for stream, vocab in ((True, 64), (False, None)):  # in memory: the vocabulary from the data
        ds = load_tokens(str(d), seq_len=SEQ, vocab_size=vocab, valid_tokens=400, stream=stream)
        assert ds.num_classes == (vocab or 60)


def test_a_dangling_link_or_a_pipe_among_the_shards_is_refused_with_its_path(tmp_path):
    d = _tail_corpus(tmp_path / "c", 7, "gpt2", 0)
    (d / "x_train_001.bin").symlink_to(d / "x_train_000.bin")  # a good link is read
    assert len(scan(str(d)).train) == 2
    (d / "x_train_002.bin").symlink_to(tmp_path / "gone.bin")
    r = runner.invoke(app, ["data", "info", str(d)])
    assert r.exit_code == 2 and r.output.strip() == (
        f"info: {d / 'x_train_002.bin'}: a dangling symbolic link (No such file or directory); remove it "
        f"or restore its target"), r.output
    with pytest.raises(TokensError, match="a dangling symbolic link"):
        load_tokens(str(d), seq_len=SEQ, valid_tokens=400)
    (d / "x_train_002.bin").unlink()
    os.mkfifo(d / "x_train_003.bin")  # a pipe: reading it would block, skipping it would lose a shard
    r = runner.invoke(app, ["data", "info", str(d)])
    assert r.exit_code == 2 and r.output.strip() == (
        f"info: {d / 'x_train_003.bin'}: not a regular file; remove it from the shard folder"), r.output
