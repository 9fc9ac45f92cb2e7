"""Text files → token shards (what ``python -m harness data tokenize`` runs), and a folder's summary.

Tokenizers: ``bytes`` (UTF-8 bytes 0..255, end of text 256: always available) and the BPE
vocabularies that ``bpe-openai`` ships in its wheel (``cl100k_base``, ``o200k_base``: no download;
their ids pass 65,535, so their shards are ``llama3``, uint32). Each document (a text file) is
preceded by the end-of-text token, as llm.c's and modded-nanogpt's scripts write it. Validation is
the ``--valid`` files, else the last ``valid_fraction`` of the token stream; test, the ``--test``
files (none: a sweep holds out the end of training). Shards are numbered as llm.c numbers them, one
counter over the splits: validation first (``_000000``), then test, then training.

Written atomically: into a hidden sibling folder (marked :data:`~harness.data.integrity.PARTIAL_MARKER`)
renamed into place when whole, under a lock that refuses a second writer; ``tokens.json`` is written
last, with the token counts per split, the shard names and their full-content digest.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from harness.data.integrity import PARTIAL_MARKER
from harness.data.shards import FORMATS, content_digest, read_info, write_shard
from harness.data.tokens import SIDECAR, TOKENS_PREFIX, corpus_digest, hashes_whole, scan

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


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold the write lock of output folder ``root`` (an ``flock`` on a hidden sibling file, released
    by the kernel if the process dies).

    Raises:
      ValueError: another process holds it."""
    root.parent.mkdir(parents=True, exist_ok=True)
    lock = root.parent / f".{root.name}.tokenize.lock"
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        busy = ValueError(f"{root}: another data tokenize is writing it (its lock {lock.name} is held); "
                          f"wait for it to finish or choose another folder")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise busy from None
        try:  # the file we locked is still the lock (not one its last holder removed)
            if os.stat(lock).st_ino != os.fstat(fd).st_ino:
                raise busy
        except FileNotFoundError:
            raise busy from None
        try:
            yield
        finally:  # held: a later writer finds the folder full (or absent) and decides anew
            lock.unlink(missing_ok=True)
    finally:
        os.close(fd)


def _encode_all(files: Sequence[str | Path], encode: Callable[[str], list[int]],
                eot: int) -> tuple[list, int]:
    """``(ids, UTF-8 bytes)`` of the files, each document preceded by ``eot``.

    Raises:
      ValueError: a file that is not UTF-8 text."""
    ids, n_bytes = [], 0
    for t in files:
        try:
            text = Path(t).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"{t}: cannot read as UTF-8 text ({e})") from None
        n_bytes += len(text.encode("utf-8"))
        ids.append(eot)
        ids.extend(encode(text))
    return ids, n_bytes


def _write_splits(tmp: Path, splits: dict[str, np.ndarray], fmt: str, shard_tokens: int,
                  prefix: str) -> list[str]:
    """Write each split's shards into ``tmp`` (llm.c's numbering: one counter, validation first);
    returns their names in name order."""
    names, k = [], 0
    for split, part in splits.items():
        if fmt == "nanogpt":
            names.append(f"{split}.bin")
            write_shard(tmp / names[-1], part, fmt)
            continue
        for i in range(0, len(part), shard_tokens):
            names.append(f"{prefix}_{split}_{k:06d}.bin")
            write_shard(tmp / names[-1], part[i:i + shard_tokens], fmt)
            k += 1
    return sorted(names)


def tokenize_files(texts: Sequence[str | Path], out: str | Path, tokenizer: str = "bytes",
                   fmt: str = "gpt2", valid_fraction: float | None = 0.1, shard_tokens: int = SHARD_TOKENS,
                   prefix: str = "text", license: str = "", valid: Sequence[str | Path] = (),
                   test: Sequence[str | Path] = ()) -> dict:
    """Tokenize text files into shards in folder ``out``, atomically; returns the sidecar written.

    Args:
      texts: UTF-8 text files, one document each (training; with no ``valid`` files, its last
        ``valid_fraction`` of tokens is validation). tokenizer: a :data:`TOKENIZERS` name. fmt: a
        :data:`harness.data.shards.FORMATS` key (``gpt2`` becomes ``llama3`` where ids pass 65,535).
      valid_fraction: the tail of the stream written as validation (ignored given ``valid``).
      shard_tokens: tokens per shard (not ``nanogpt``: one file per split). prefix: shard names
        ``{prefix}_val_000000.bin``, ``{prefix}_train_000001.bin``... valid, test: files of those splits.
    Raises:
      ValueError: bad tokenizer, format, fraction or shard size; ``out`` a file or a folder that is
        not empty, or locked by another writer; a file that is not UTF-8 text; too few tokens.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if not valid and not (valid_fraction is not None and 0.0 < valid_fraction < 1.0):
        raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction} (or give validation files)")
    if shard_tokens < 1:
        raise ValueError(f"shard_tokens must be >= 1, got {shard_tokens}")
    root = Path(os.path.abspath(out))
    _check_out(root)
    encode, eot, n_vocab = _encoder(tokenizer)
    with _locked(root):
        _check_out(root)  # again, now that no other writer can fill it
        tmp = root.parent / f".{root.name}.partial"
        shutil.rmtree(tmp, ignore_errors=True)  # a killed writer's leftovers (the lock is ours)
        tmp.mkdir()
        (tmp / PARTIAL_MARKER).write_text("data tokenize is writing this folder\n")
        try:
            meta = _tokenize_into(tmp, texts, valid, test, encode, eot, n_vocab, tokenizer, fmt,
                                  valid_fraction, shard_tokens, prefix, license)
            (tmp / PARTIAL_MARKER).unlink()
            if root.is_dir():
                root.rmdir()  # empty (checked under the lock)
            os.rename(tmp, root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return meta


def _tokenize_into(tmp: Path, texts, valid, test, encode, eot, n_vocab, tokenizer, fmt, valid_fraction,
                   shard_tokens, prefix, license) -> dict:
    """:func:`tokenize_files`' work inside the hidden folder ``tmp``; returns the sidecar written."""
    ids, n_bytes = _encode_all(texts, encode, eot)
    toks = np.asarray(ids, np.int64)
    splits: dict[str, np.ndarray] = {}
    if valid:
        v_ids, v_bytes = _encode_all(valid, encode, eot)
        splits["val"], n_bytes = np.asarray(v_ids, np.int64), n_bytes + v_bytes
        train = toks
    else:
        n_val = round(len(toks) * valid_fraction)
        if n_val < 2 or len(toks) - n_val < 2:
            where = str(texts[0]) if len(texts) == 1 else f"{len(texts)} files"
            raise ValueError(f"{where}: {len(toks)} tokens (an end-of-text one per file included) are too "
                             f"few to split into train and validation at valid_fraction {valid_fraction}; "
                             f"give more text")
        splits["val"], train = toks[-n_val:], toks[:-n_val]
    if test:
        t_ids, t_bytes = _encode_all(test, encode, eot)
        splits["test"], n_bytes = np.asarray(t_ids, np.int64), n_bytes + t_bytes
    splits["train"] = train
    top = max(int(p.max()) for p in splits.values())
    if top > 65_535 and fmt != "llama3":
        if fmt == "nanogpt":
            raise ValueError(f"tokenizer {tokenizer!r} has ids above 65,535: nanoGPT's uint16 files "
                             f"cannot hold them; use format llama3")
        fmt = "llama3"
    names = _write_splits(tmp, splits, fmt, shard_tokens, prefix)
    total = sum(len(p) for p in splits.values())
    meta = {"tokenizer": tokenizer, "format": fmt, "vocab_size": n_vocab, "max_token_id": top,
            "eot_token": eot, "eot_position": "before each document", "tokens": total,
            "train_tokens": len(splits["train"]), "valid_tokens": len(splits["val"]),
            "test_tokens": len(splits.get("test", ())), "bytes": n_bytes, "bytes_per_token": n_bytes / total,
            "license": license, "sources": [Path(t).name for t in texts],
            "valid_sources": [Path(t).name for t in valid], "test_sources": [Path(t).name for t in test],
            "shards": names, "content_digest": content_digest([read_info(tmp / n, fmt) for n in names])}
    side = tmp / f"{SIDECAR}.tmp"
    side.write_text(json.dumps(meta, indent=1) + "\n")
    os.replace(side, tmp / SIDECAR)  # last: its presence says the shards are whole
    return meta


def info(path: str | Path, coverage: str = "auto") -> dict:
    """A shard folder's format, tokens per split, vocabulary bound and digest (as ``data info`` shows),
    and what the digest covers: ``full`` (every byte, checked against ``tokens.json``) or
    ``sampled`` (:func:`harness.data.tokens.corpus_digest`'s rule for ``coverage``);
    ``as_tokenized``: whether every byte is what ``data tokenize`` wrote (``None``: not checked).

    Raises:
      TokensError: what :func:`harness.data.tokens.scan` and
        :func:`harness.data.tokens.corpus_digest` refuse (an unfinished corpus, shards missing
        from or added to what ``tokens.json`` lists)."""
    c = scan(str(path))
    dig = corpus_digest(c, coverage)
    recorded = c.meta.get("content_digest")
    whole = hashes_whole(c, coverage)
    as_recorded = None if recorded is None or not whole else dig == corpus_digest(c, "sampled")
    bound = c.meta.get("max_token_id")
    return {"dataset": f"{TOKENS_PREFIX}{path}", "format": sorted({s.format for s in c.shards}),
            "train_tokens": sum(s.num_tokens for s in c.train),
            "valid_tokens": sum(s.num_tokens for s in c.valid),
            "test_tokens": sum(s.num_tokens for s in c.test),
            "files": len(c.shards), "tokenizer": c.meta.get("tokenizer", "unknown"),
            "vocab_bound": None if bound is None else int(bound) + 1,
            "bytes_per_token": c.meta.get("bytes_per_token"), "digest": dig,
            "digest_coverage": "full" if whole else "sampled", "as_tokenized": as_recorded}
