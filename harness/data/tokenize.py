"""Text files → token shards (what ``python -m harness data tokenize`` runs), and a folder's summary.

Tokenizers: ``bytes`` (UTF-8 bytes 0..255, end of text 256: always available) and the BPE
vocabularies that ``bpe-openai`` ships in its wheel (``cl100k_base``, ``o200k_base``: no download;
their ids pass 65,535, so their shards are ``llama3``, uint32). Each document (a text file) ends
with the end-of-text token. The last ``valid_fraction`` of the token stream goes to ``val`` shards,
the rest to ``train`` shards (modded-nanogpt's names, or nanoGPT's ``train.bin``/``val.bin``), and
``tokens.json`` records the tokenizer, the largest id and bytes per token.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from harness.data.shards import FORMATS, write_shard
from harness.data.tokens import SIDECAR, TOKENS_PREFIX, corpus_digest, scan

__all__ = ["BPE_VOCABS", "TOKENIZERS", "info", "tokenize_files"]

#: BPE vocabularies ``bpe-openai`` ships in its wheel (tested offline).
BPE_VOCABS = ("cl100k_base", "o200k_base")
TOKENIZERS = ("bytes", *BPE_VOCABS)
#: modded-nanogpt's shard size in tokens.
SHARD_TOKENS = 100_000_000


def _encoder(tokenizer: str) -> tuple[Callable[[str], list[int]], int, int]:
    """``(encode, end-of-text id, vocabulary size)``.

    Raises:
      ValueError: an unknown tokenizer, or ``bpe-openai`` not installed (one line says how)."""
    if tokenizer == "bytes":
        return (lambda text: list(text.encode("utf-8"))), 256, 257
    if tokenizer not in BPE_VOCABS:
        raise ValueError(f"tokenizer {tokenizer!r}: choose one of {', '.join(TOKENIZERS)} (GPT-2's own "
                         f"vocabulary needs a download, which the harness never does)")
    try:
        import bpe_openai
    except ImportError:
        raise ValueError(f"tokenizer {tokenizer!r} needs the package bpe-openai (its vocabulary ships in "
                         f"the wheel): pip install bpe-openai==0.1.4") from None
    enc = bpe_openai.get_encoding(tokenizer)
    return enc.encode_ordinary, int(enc.eot_token), int(enc.n_vocab)


def _check_out(root: Path) -> None:
    """Raise ``ValueError`` unless ``root`` is absent or an empty folder (old shards would join the new)."""
    if root.exists() and not root.is_dir():
        raise ValueError(f"{root}: exists and is not a folder; choose a new folder for the shards")
    held = sorted(f.name for f in root.iterdir()) if root.is_dir() else []
    if held:
        more = ", ..." if len(held) > 3 else ""
        raise ValueError(f"{root}: already holds {len(held)} entries ({', '.join(held[:3])}{more}), which "
                         f"would be read with the new shards; remove them or choose a new folder")


def tokenize_files(texts: Sequence[str | Path], out: str | Path, tokenizer: str = "bytes",
                   fmt: str = "gpt2", valid_fraction: float = 0.1, shard_tokens: int = SHARD_TOKENS,
                   prefix: str = "text", license: str = "") -> dict:
    """Tokenize text files into shards in folder ``out``; returns the sidecar written.

    Args:
      texts: UTF-8 text files, one document each. tokenizer: a :data:`TOKENIZERS` name. fmt: a
        :data:`harness.data.shards.FORMATS` key (``gpt2`` becomes ``llama3`` where ids pass 65,535).
      valid_fraction: the tail of the stream written as validation. shard_tokens: tokens per shard
        (not ``nanogpt``: one file per split). prefix: shard names ``{prefix}_train_000000.bin``.
    Raises:
      ValueError: bad tokenizer, format, fraction or shard size; ``out`` a file or a folder that is
        not empty; a file that is not UTF-8 text; no tokens.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction}")
    if shard_tokens < 1:
        raise ValueError(f"shard_tokens must be >= 1, got {shard_tokens}")
    _check_out(Path(out))
    encode, eot, n_vocab = _encoder(tokenizer)
    ids, n_bytes = [], 0
    for t in texts:
        try:
            text = Path(t).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"{t}: cannot read as UTF-8 text ({e})") from None
        n_bytes += len(text.encode("utf-8"))
        ids.extend(encode(text))
        ids.append(eot)
    toks = np.asarray(ids, np.int64)
    n_val = round(len(toks) * valid_fraction)
    if n_val < 2 or len(toks) - n_val < 2:
        where = str(texts[0]) if len(texts) == 1 else f"{len(texts)} files"
        raise ValueError(f"{where}: {len(toks)} tokens (an end-of-text one per file included) are too few "
                         f"to split into train and validation at valid_fraction {valid_fraction}; give "
                         f"more text")
    if int(toks.max()) > 65_535 and fmt != "llama3":
        if fmt == "nanogpt":
            raise ValueError(f"tokenizer {tokenizer!r} has ids above 65,535: nanoGPT's uint16 files "
                             f"cannot hold them; use format llama3")
        fmt = "llama3"
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    for split, part in (("train", toks[:-n_val]), ("val", toks[-n_val:])):
        if fmt == "nanogpt":
            write_shard(root / f"{split}.bin", part, fmt)
            continue
        for k, i in enumerate(range(0, len(part), shard_tokens)):
            write_shard(root / f"{prefix}_{split}_{k:06d}.bin", part[i:i + shard_tokens], fmt)
    meta = {"tokenizer": tokenizer, "format": fmt, "vocab_size": n_vocab, "max_token_id": int(toks.max()),
            "eot_token": eot, "tokens": len(toks), "bytes": n_bytes,
            "bytes_per_token": n_bytes / len(toks), "license": license,
            "sources": [Path(t).name for t in texts]}
    (root / SIDECAR).write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def info(path: str | Path) -> dict:
    """A shard folder's format, tokens per split, vocabulary bound and digest (as ``data info`` shows).

    Raises:
      TokensError: what :func:`harness.data.tokens.scan` refuses."""
    c = scan(str(path))
    bound = c.meta.get("max_token_id")
    return {"dataset": f"{TOKENS_PREFIX}{path}", "format": sorted({s.format for s in c.shards}),
            "train_tokens": sum(s.num_tokens for s in c.train),
            "valid_tokens": sum(s.num_tokens for s in c.valid),
            "test_tokens": sum(s.num_tokens for s in c.test),
            "files": len(c.shards), "tokenizer": c.meta.get("tokenizer", "unknown"),
            "vocab_bound": None if bound is None else int(bound) + 1,
            "bytes_per_token": c.meta.get("bytes_per_token"), "digest": corpus_digest(c)}
