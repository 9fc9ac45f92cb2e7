"""Token shards under hostile input: windows that span empty or short shards, a shard that shrinks
while streamed, a damaged ``tokens.json``, an unknown format, too few test tokens, and ``data
tokenize`` into a used folder or with a bad shard size: each read right or refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.data.shards import write_shard
from harness.data.stream import TokenStream
from harness.data.tokens import TokensError, load_tokens, scan

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
SEQ = 16


def _folder(d: Path, train: list[np.ndarray]) -> Path:
    d.mkdir()
    for k, t in enumerate(train):
        write_shard(d / f"x_train_{k:03d}.bin", t)
    write_shard(d / "x_val_000.bin", np.arange(200) % 256)
    return d


def test_stream_windows_span_empty_and_short_shards(tmp_path):
    toks = np.arange(300) % 251
    parts = [toks[:100], toks[:0], *(toks[100 + 5 * k:105 + 5 * k] for k in range(20)), toks[200:]]
    d = _folder(tmp_path / "c", parts)
    c = scan(str(d))
    s = TokenStream(c.train, SEQ, len(toks), 256)
    for w in range(s.num_windows):  # window 6 spans the empty shard, 7..12 several 5-token shards
        assert np.array_equal(s.window(w), toks[w * SEQ:w * SEQ + SEQ + 1]), w
    ds = load_tokens(str(d), seq_len=SEQ, vocab_size=256, stream=True, valid_tokens=100)
    mem = load_tokens(str(d), seq_len=SEQ, vocab_size=256, stream=False, valid_tokens=100)
    x, y = ds.stream.batches(0, 0, 2, 4)
    w = ds.stream.order(0, 0, 2, 4)
    assert np.array_equal(x, mem.x_train[w]) and np.array_equal(y, mem.y_train[w])


def test_a_shard_that_shrinks_while_streamed_names_the_file(tmp_path):
    d = _folder(tmp_path / "c", [np.arange(500) % 256])
    s = TokenStream(scan(str(d)).train, SEQ, 500, 256)
    with open(d / "x_train_000.bin", "r+b") as f:
        f.truncate(1024 + 2 * 100)
    with pytest.raises(ValueError, match=r"x_train_000.bin: 0 bytes read at token 160, 34 expected: "
                                         r"the file shrank"):
        s.window(10)


@pytest.mark.parametrize("text, why", [
    ("{not json", "not readable as JSON"),
    ("[1, 2]", "a JSON list, not an object"),
    ('{"max_token_id": "255"}', "max_token_id '255' is not an integer in [0, 2^32)"),
    ('{"max_token_id": -1}', "max_token_id -1 is not an integer in [0, 2^32)"),
    ('{"max_token_id": 4294967296}', "max_token_id 4294967296 is not an integer in [0, 2^32) (a shard"),
    ('{"bytes_per_token": 0}', "bytes_per_token 0 is not a positive number"),
])
def test_a_damaged_sidecar_is_one_line_naming_it(tmp_path, text, why):
    d = _folder(tmp_path / "c", [np.arange(500) % 256])
    (d / "tokens.json").write_text(text)
    r = runner.invoke(app, ["data", "info", str(d)])
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines() == [r.output.strip()]
    assert r.output.startswith(f"info: {d / 'tokens.json'}: {why}"), r.output
    with pytest.raises(TokensError, match="fix or delete it") as e:
        load_tokens(str(d), seq_len=SEQ, valid_tokens=100)
    assert e.value.key == ""


def test_unknown_format_and_too_few_test_tokens_name_their_key(tmp_path):
    d = _folder(tmp_path / "c", [np.arange(500) % 256])
    with pytest.raises(TokensError, match="'gpt3': choose one of auto, gpt2, llama3, nanogpt") as e:
        load_tokens(str(d), seq_len=SEQ, format="gpt3")
    assert e.value.key == "format"
    for n in (-5, 0, SEQ):
        want = f"{n} test tokens hold no window: at least seq_len \\+ 1 = 17"
        with pytest.raises(TokensError, match=want) as e:
            load_tokens(str(d), seq_len=SEQ, valid_tokens=100, test_tokens=n)
        assert e.value.key == "test_tokens"
    assert load_tokens(str(d), seq_len=SEQ, valid_tokens=100, test_tokens=SEQ + 1).x_test.shape == (1, SEQ)


def test_tokenize_refuses_a_used_output_and_a_bad_shard_size(tmp_path):
    text = ROOT / "README.md"
    used = _folder(tmp_path / "used", [np.arange(500) % 256])
    before = {f.name: f.read_bytes() for f in used.iterdir()}
    (tmp_path / "afile").write_text("x")
    cases = [
        (["-o", str(used)], f"tokenize: {used}: already holds 2 entries (x_train_000.bin, x_val_000.bin), "
                            f"which would be read with the new shards; remove them or choose a new folder"),
        (["-o", str(tmp_path / "afile")], f"tokenize: {tmp_path / 'afile'}: exists and is not a folder"),
        (["-o", str(tmp_path / "o"), "--shard-tokens", "0"], "tokenize: shard_tokens must be >= 1, got 0"),
        (["-o", str(tmp_path / "o"), "--shard-tokens", "-1"], "tokenize: shard_tokens must be >= 1, got -1"),
    ]
    for args, want in cases:
        r = runner.invoke(app, ["data", "tokenize", str(text), *args])
        assert r.exit_code == 2 and r.output.strip().startswith(want), (args, r.output)
        assert len(r.output.strip().splitlines()) == 1, r.output
    assert {f.name: f.read_bytes() for f in used.iterdir()} == before
    assert not (tmp_path / "o").exists()
    r = runner.invoke(app, ["data", "tokenize", str(used), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and f"tokenize: {used}: is a folder, not a text file" in r.output
    out = tmp_path / "o"
    r = runner.invoke(app, ["data", "tokenize", str(text), "-o", str(out), "--shard-tokens", "900"])
    assert r.exit_code == 0, r.output
    n = json.loads((out / "tokens.json").read_text())["tokens"]
    assert len(list(out.glob("text_train_*.bin"))) == -(-(n - round(0.1 * n)) // 900)


def test_validation_files_shorter_than_one_window_name_seq_len(tmp_path):
    d = _folder(tmp_path / "c", [np.arange(500) % 256])  # 200 validation tokens
    with pytest.raises(TokensError, match=r"hold 200 tokens, less than one window \(seq_len \+ 1 = 201\); "
                                          r"give a smaller seq_len") as e:
        load_tokens(str(d), seq_len=200)
    assert e.value.key == "seq_len"
    with pytest.raises(TokensError, match="asked 10 validation tokens") as e:  # fewer than a window asked
        load_tokens(str(d), seq_len=SEQ, valid_tokens=10)
    assert e.value.key == "valid_tokens"


def test_shards_of_mixed_formats_read_as_their_own_dtype(tmp_path):
    d = tmp_path / "c"
    d.mkdir()
    toks = np.arange(600) % 256
    write_shard(d / "x_train_000.bin", toks[:250])  # gpt2: uint16
    write_shard(d / "x_train_001.bin", toks[250:500], "llama3")  # uint32
    write_shard(d / "x_val_000.bin", toks[500:], "llama3")
    for stream in (False, True):
        ds = load_tokens(str(d), seq_len=SEQ, vocab_size=256, valid_tokens=50, stream=stream)
        assert ds.source.startswith(f"token shards in {d} (gpt2+llama3, "), ds.source
        w = 14  # tokens 224..240: spans the two formats' files
        got = ds.stream.window(w)[:-1] if stream else ds.x_train[w]
        assert np.array_equal(got, toks[w * SEQ:(w + 1) * SEQ])


def test_tokenize_of_an_empty_file_names_it(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    r = runner.invoke(app, ["data", "tokenize", str(tmp_path / "empty.txt"), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert r.output.strip() == (f"tokenize: {tmp_path / 'empty.txt'}: 1 tokens (an end-of-text one per file "
                                f"included) are too few to split into train and validation at "
                                f"valid_fraction 0.1; give more text"), r.output
    assert not (tmp_path / "o").exists()
