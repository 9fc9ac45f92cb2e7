"""``tokens:`` defaults that should just work: a test split shorter than validation is evaluated
whole, and bits per byte on byte-level shards written by other tools (or given by a key)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from harness.cli import app
from harness.data.shards import write_shard
from harness.data.tokens import TokensError, load_tokens
from harness.train.program_rule import lm_extra

SEQ = 32


def _folder(base: Path, name: str, *, vocab: int, n_valid: int, n_test: int | None,
            sidecar: dict | None = None) -> Path:
    """Shards as llm.c writes them (no ``tokens.json`` unless ``sidecar``): 20,000 training tokens."""
    rng = np.random.default_rng(0)
    d = base / name
    d.mkdir()
    write_shard(d / "x_train_000000.bin", rng.integers(0, vocab, 20_000))
    write_shard(d / "x_val_000000.bin", rng.integers(0, vocab, n_valid))
    if n_test is not None:
        write_shard(d / "x_test_000000.bin", rng.integers(0, vocab, n_test))
    if sidecar is not None:
        (d / "tokens.json").write_text(json.dumps(sidecar))
    return d


def test_a_test_split_shorter_than_validation_is_evaluated_whole(tmp_path):
    # before: "asked 16,384 test tokens, the files matching '*test*' ... hold 5,646" (the default
    # was as many as validation)
    d = _folder(tmp_path, "short", vocab=64, n_valid=16_384, n_test=5_646)
    ds = load_tokens(str(d), seq_len=SEQ)
    test = np.fromfile(d / "x_test_000000.bin", np.uint16, offset=1024)
    assert ds.num_test == (5_646 - 1) // SEQ == 176
    np.testing.assert_array_equal(ds.x_test[3], test[3 * SEQ:4 * SEQ])
    assert ds.num_valid == (16_384 - 1) // SEQ
    # a test split at least as long as validation: as many tokens as validation, as before
    ds = load_tokens(str(_folder(tmp_path, "long", vocab=64, n_valid=2_000, n_test=9_000)), seq_len=SEQ)
    assert (ds.num_valid, ds.num_test) == ((2_000 - 1) // SEQ, (2_000 - 1) // SEQ)
    # an explicit test_tokens beyond the files is still refused
    with pytest.raises(TokensError, match=r"asked 6,000 test tokens, the files matching '\*test\*' in .* "
                                          r"hold 5,646"):
        load_tokens(str(d), seq_len=SEQ, test_tokens=6_000)


def test_bytes_per_token_is_known_for_byte_level_vocabularies_or_given(tmp_path):
    byte = _folder(tmp_path, "bytes", vocab=256, n_valid=2_000, n_test=None)
    small = _folder(tmp_path, "small", vocab=64, n_valid=2_000, n_test=None)
    # before: None without the harness's own tokens.json, so no bits per byte was logged
    assert lm_extra(load_tokens(str(byte), seq_len=SEQ))["bytes_per_token"] == 1.0
    assert load_tokens(str(byte), seq_len=SEQ, vocab_size=257).bytes_per_token == 1.0  # + end of text
    assert load_tokens(str(small), seq_len=SEQ).bytes_per_token is None  # a 64-token vocabulary: unknown
    assert load_tokens(str(small), seq_len=SEQ, bytes_per_token=3.5).bytes_per_token == 3.5
    told = _folder(tmp_path, "told", vocab=64, n_valid=2_000, n_test=None, sidecar={"bytes_per_token": 2.25})
    assert load_tokens(str(told), seq_len=SEQ).bytes_per_token == 2.25
    with pytest.raises(TokensError, match=r"^3 differs from the 2.25 of tokens.json, which measured it; "
                                          r"leave the key out$") as e:
        load_tokens(str(told), seq_len=SEQ, bytes_per_token=3)
    assert e.value.key == "bytes_per_token"
    for bad in (0, -1.0, math.inf, "2"):
        with pytest.raises(TokensError, match=r"^must be a positive number \(bytes of text per token\)"):
            load_tokens(str(small), seq_len=SEQ, bytes_per_token=bad)


def test_a_bad_bytes_per_token_is_one_line_with_its_key_path_exit_2(tmp_path):
    d = _folder(tmp_path, "small", vocab=64, n_valid=2_000, n_test=None)
    cfg, store = tmp_path / "c.yaml", tmp_path / "m.db"
    cfg.write_text(yaml.safe_dump({
        "name": "bad", "models": [{"name": "transformer_lm", "hparams": {"width": 8, "depth": 1}}],
        "optimizers": [{"name": "adam", "hparams": {"step_size": 1e-3}}],
        "datasets": [{"name": f"tokens:{d}", "hparams": {"seq_len": 8, "bytes_per_token": 0}}], "seeds": [0],
        "batch_size": 2, "budget": {"steps": 2}}))
    r = CliRunner().invoke(app, ["sweep", str(cfg), "--tracking-uri", f"sqlite:///{store}"])
    assert r.exit_code == 2, r.output
    assert ("datasets[0].hparams.bytes_per_token: must be a positive number (bytes of text per token), got 0"
            in r.output), r.output
    assert not store.exists()
