"""The ``tokens:PATH`` dataset kind: a folder of token shards (:mod:`harness.data.shards`) as a
next-token :class:`~harness.data.dataset.Dataset`.

Splits by file name (globs, overridable): train ``*train*``, validation ``*val*``, test ``*test*``;
without test files, the last ``test_tokens`` tokens of the training stream are held out as test.
Windows are ``seq_len + 1`` consecutive tokens of a split's files read in name order, stride
``seq_len`` (``x`` the first ``seq_len``, ``y`` the next tokens), as modded-nanogpt reads them.
The sidecar ``tokens.json`` (written by ``harness data tokenize``) gives the tokenizer, its largest
token id and bytes per token. numpy only.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from harness.data.dataset import Dataset
from harness.data.integrity import INDEX_LIMIT, check_range, partial_output, shard_files
from harness.data.shards import FORMATS, ShardError, ShardInfo, content_digest, digest, read_info, read_tokens
from harness.data.stream import ORDERS, TokenStream

__all__ = [
    "DIGESTS",
    "FULL_DIGEST_MAX_BYTES",
    "SIDECAR",
    "TOKENS_PREFIX",
    "VALID_TOKENS_MAX",
    "Corpus",
    "TokensError",
    "corpus_digest",
    "hashes_whole",
    "load_tokens",
    "scan",
    "unchanged",
    "windows",
]

TOKENS_PREFIX = "tokens:"
SIDECAR = "tokens.json"
#: modded-nanogpt's validation set: the first 10,485,760 tokens of FineWeb's validation shards.
VALID_TOKENS_MAX = 10_485_760


class TokensError(ValueError):
    """Bad token data or hyperparameters; ``key`` is the hyperparameter (``""``: the name)."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Corpus:
    """A shard folder: ``root``, the shards of each split, and the sidecar's contents (``{}``: none)."""

    root: Path
    train: tuple[ShardInfo, ...]
    valid: tuple[ShardInfo, ...]
    test: tuple[ShardInfo, ...]
    meta: dict

    @property
    def shards(self) -> tuple[ShardInfo, ...]:
        return self.train + self.valid + self.test


def _match(files: list[Path], pattern: str) -> list[Path]:
    return [f for f in files if fnmatch.fnmatch(f.name, pattern)]


def scan(path: str, train_glob: str = "*train*", valid_glob: str = "*val*", test_glob: str = "*test*",
         format: str = "auto") -> Corpus:
    """The shards of folder ``path`` by split (headers read and checked, no token read).

    Raises:
      TokensError: no such folder, an unknown ``format``, a glob that matches nothing
        (``train_glob``/``valid_glob``), a shard that is not a supported format or cannot be read
        (:class:`~harness.data.shards.ShardError`), a dangling link, a damaged ``tokens.json``, an
        unfinished ``data tokenize`` output (:func:`harness.data.integrity.partial_output`).
    """
    if format != "auto" and format not in FORMATS:
        raise TokensError("format", f"{format!r}: choose one of auto, {', '.join(FORMATS)}")
    root = Path(path).expanduser()
    if not root.is_dir():
        raise TokensError("", f"{root}: not a folder of token shards (nothing is downloaded: put llm.c or "
                              f"modded-nanogpt .bin shards there, e.g. from modded-nanogpt's "
                              f"data/cached_fineweb10B.py, or make one with: python -m harness data "
                              f"tokenize TEXT... -o {root})")
    try:
        files = shard_files(root, (SIDECAR,))
    except ValueError as e:
        raise TokensError("", str(e)) from None
    if why := partial_output(root, files, (root / SIDECAR).is_file()):
        raise TokensError("", why)
    if not files:
        raise TokensError("", f"{root}: empty folder, no token shards")
    split = {}
    for key, pat in (("train_glob", train_glob), ("valid_glob", valid_glob), ("test_glob", test_glob)):
        got = _match(files, pat)
        if not got and key != "test_glob":
            names = ", ".join(f.name for f in files[:5]) + (", ..." if len(files) > 5 else "")
            raise TokensError(key, f"{pat!r} matches no file in {root} ({names})")
        split[key] = got
    both = set(split["train_glob"]) & (set(split["valid_glob"]) | set(split["test_glob"]))
    if both:
        raise TokensError("train_glob", f"{sorted(both)[0]} is in the training split and another one")
    try:
        infos = {k: tuple(read_info(f, format) for f in v) for k, v in split.items()}
    except ShardError as e:
        raise TokensError("", str(e)) from None
    meta = _sidecar(root / SIDECAR)
    return Corpus(root, infos["train_glob"], infos["valid_glob"], infos["test_glob"], meta)


def _sidecar(side: Path) -> dict:
    """The sidecar's contents (``{}``: no file), its numbers checked.

    Raises:
      TokensError: not a JSON object, ``max_token_id`` not an integer in [0, 2^32),
        ``bytes_per_token`` not a positive number."""
    if not side.is_file():
        return {}
    fix = "fix or delete it (python -m harness data tokenize writes it)"
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise TokensError("", f"{side}: not readable as JSON ({e}); {fix}") from None
    if not isinstance(meta, dict):
        raise TokensError("", f"{side}: a JSON {type(meta).__name__}, not an object; {fix}")
    top = meta.get("max_token_id")
    if top is not None and (type(top) is not int or not 0 <= top < 2**32):
        raise TokensError("", f"{side}: max_token_id {top!r} is not an integer in [0, 2^32) (a shard holds "
                              f"uint16 or uint32 tokens); {fix}")
    bpt = meta.get("bytes_per_token")
    if bpt is not None and (type(bpt) not in (int, float) or not 0 < bpt < float("inf")):
        raise TokensError("", f"{side}: bytes_per_token {bpt!r} is not a positive number; {fix}")
    return meta


#: ``digest`` choices: ``auto`` (full content where ``tokens.json`` records it, up to
#: :data:`FULL_DIGEST_MAX_BYTES`), ``full`` (every byte, any size), ``sampled`` (blocks only).
DIGESTS = ("auto", "full", "sampled")
#: Largest corpus whose recorded full-content digest ``digest: auto`` checks (SHA-256 of 2 GiB:
#: ~5-6 s measured on a busy 2-core VM, once per process and file version).
FULL_DIGEST_MAX_BYTES = 2 << 30


def corpus_digest(corpus: Corpus, coverage: str = "auto") -> str:
    """The corpus's content digest, which joins the trial id.

    The sampled :func:`harness.data.shards.digest` of every shard and the sidecar's bytes, and,
    where every byte is hashed (``auto``: up to :data:`FULL_DIGEST_MAX_BYTES` of shards; ``full``:
    any size; ``sampled``: never), the full-content :func:`harness.data.shards.content_digest`:
    - where ``tokens.json`` records a ``content_digest`` (``data tokenize`` writes it), the hash is
      compared with it: equal, the digest stays the sampled one, which holds the record's bytes and
      so names the whole content (trial ids of corpora made before stay as they were); different
      (shards edited since), the hash found joins the digest, so the trial id changes;
    - without a record (shards of other tools), the hash joins the digest.

    Raises:
      TokensError: ``coverage`` not one of :data:`DIGESTS`; a shard ``tokens.json`` lists missing,
        or one it does not list; an unreadable shard."""
    if coverage not in DIGESTS:
        raise TokensError("digest", f"{coverage!r}: choose one of {', '.join(DIGESTS)}")
    side = corpus.root / SIDECAR
    shards = list(corpus.shards)
    sampled = digest(shards, side.read_bytes() if side.is_file() else b"")
    recorded = corpus.meta.get("content_digest")
    try:
        whole = hashes_whole(corpus, coverage)
        if recorded is not None and whole:
            if (now := content_digest(_recorded(corpus))) != recorded:  # edited since: the id says so
                return digest([], f"{sampled}+{now}".encode())
        elif whole:
            return digest([], f"{sampled}+{content_digest(shards)}".encode())
    except ShardError as e:
        raise TokensError("", str(e)) from None
    return sampled


def hashes_whole(corpus: Corpus, coverage: str) -> bool:
    """Whether :func:`corpus_digest` hashes every byte of ``corpus`` for ``coverage`` (``full``; or
    ``auto`` with at most :data:`FULL_DIGEST_MAX_BYTES` of shards)."""
    return coverage == "full" or (coverage == "auto"
                                  and sum(i.size for i in corpus.shards) <= FULL_DIGEST_MAX_BYTES)


def _recorded(corpus: Corpus) -> list[ShardInfo]:
    """The shards ``tokens.json`` lists (``data tokenize`` digests them in this order).

    Raises:
      TokensError: a listed shard is missing, or a shard of a split is not listed (another
        writer's, or one added by hand)."""
    names = corpus.meta.get("shards")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TokensError("", f"{corpus.root / SIDECAR}: records a content_digest but no list of shards; "
                              f"tokenize again")
    extra = sorted({Path(i.path).name for i in corpus.shards} - set(names))
    if extra:
        raise TokensError("", f"{corpus.root / extra[0]}: a shard {SIDECAR} does not list (data tokenize "
                              f"wrote {len(names)} shards here); remove it or tokenize again")
    try:
        return [read_info(corpus.root / n) for n in names]
    except ShardError as e:
        raise TokensError("", f"{e}; {SIDECAR} lists it: the corpus is not whole, tokenize again") from None


def unchanged(corpus: Corpus) -> None:
    """Raise ``TokensError`` naming the first shard whose size, mtime, inode or ctime is not what
    :func:`scan` read (a shard rewritten or replaced since)."""
    for info in corpus.shards:
        if why := info.changed():
            raise TokensError("", f"{why}: the shard changed while it was being read; run again once "
                                  f"the data is settled")


def _read(info: ShardInfo, start: int = 0, count: int | None = None, vocab: int | None = None) -> np.ndarray:
    """Tokens of one shard (positional reads), each checked below ``vocab`` when given."""
    try:
        t = read_tokens(info, start, count)
        if vocab is not None:
            check_range(t, vocab, info.path, start)
    except ShardError as e:
        raise TokensError("", str(e)) from None
    except ValueError as e:
        raise TokensError("vocab_size", str(e)) from None
    return t


def _stream(infos: tuple[ShardInfo, ...], count: int | None = None, vocab: int | None = None) -> np.ndarray:
    """The first ``count`` (None: all) tokens of ``infos`` in order, as ``int64``, checked below ``vocab``."""
    parts, have = [], 0
    for info in infos:
        if count is not None and have >= count:
            break
        t = _read(info, 0, None if count is None else count - have, vocab)
        parts.append(t.astype(np.int64))
        have += len(t)
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def windows(tokens: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` ``int32 (n, seq_len)``: window ``i`` is ``tokens[i·seq_len : i·seq_len + seq_len + 1]``,
    ``n = (len(tokens) - 1) // seq_len``."""
    n = max((len(tokens) - 1) // seq_len, 0)
    idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    w = tokens[idx].astype(np.int32) if n else np.zeros((0, seq_len + 1), np.int32)
    return w[:, :-1], w[:, 1:]


#: Tokens read per positional read when a whole shard is scanned (64 MiB of uint32).
SCAN_BLOCK_TOKENS = 1 << 24


def _largest(info: ShardInfo) -> int:
    """The largest id of a shard, read in blocks of :data:`SCAN_BLOCK_TOKENS` (no memory map)."""
    return max((int(_read(info, i, SCAN_BLOCK_TOKENS).max())
                for i in range(0, info.num_tokens, SCAN_BLOCK_TOKENS)), default=0)


def _vocab(corpus: Corpus, vocab_size: int | None, streamed: bool) -> int:
    if vocab_size is not None:
        if not 1 <= vocab_size <= INDEX_LIMIT:
            raise TokensError("vocab_size", f"must be in [1, {INDEX_LIMIT:,}] (ids feed the model as int32), "
                                            f"got {vocab_size}")
        return vocab_size
    if (top := corpus.meta.get("max_token_id")) is not None:
        if top >= INDEX_LIMIT:
            raise TokensError("vocab_size", f"{corpus.root / SIDECAR}: max_token_id {top} does not fit the "
                                            f"model's int32 ids; set vocab_size")
        return int(top) + 1
    if streamed:
        raise TokensError("vocab_size", f"{corpus.root} has no {SIDECAR} giving its largest token id; set "
                                        f"vocab_size (reading a streamed corpus whole to find it is what "
                                        f"streaming avoids)")
    top = max((_largest(i) for i in corpus.shards if i.num_tokens), default=0)
    if top >= INDEX_LIMIT:
        raise TokensError("vocab_size", f"{corpus.root} holds token id {top:,}, which does not fit the "
                                        f"model's int32 ids")
    return 1 + top


def _tail(infos: tuple[ShardInfo, ...], start: int, vocab: int) -> np.ndarray:
    """Tokens ``start ..`` of the stream of ``infos``, as ``int64``, reading only that part, each
    checked below ``vocab``."""
    parts, first = [], 0
    for info in infos:
        if first + info.num_tokens > start:
            parts.append(_read(info, max(start - first, 0), None, vocab).astype(np.int64))
        first += info.num_tokens
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _eval_splits(c: Corpus, seq_len: int, valid_tokens: int | None, test_tokens: int | None,
                 globs: tuple[str, str], vocab_size: int | None, stream: bool | None
                 ) -> tuple[np.ndarray, np.ndarray, int, int, bool]:
    """``(validation tokens, test tokens, training tokens kept, vocabulary, streamed)``: the test
    tokens from the test files, else held out from the end of the training stream (not kept for
    training); every token read is checked below the vocabulary."""
    n_val = sum(i.num_tokens for i in c.valid)
    if n_val < seq_len + 1:
        raise TokensError("seq_len", f"the files matching {globs[0]!r} in {c.root} hold {n_val:,} tokens, "
                                     f"less than one window (seq_len + 1 = {seq_len + 1:,}); give a smaller "
                                     f"seq_len or more validation tokens")
    want_val = min(n_val, VALID_TOKENS_MAX) if valid_tokens is None else valid_tokens
    if want_val > n_val or want_val < seq_len + 1:
        raise TokensError("valid_tokens", f"asked {want_val:,} validation tokens, the files matching "
                                          f"{globs[0]!r} in {c.root} hold {n_val:,} (at least "
                                          f"seq_len + 1 = {seq_len + 1} are needed)")
    n_train = sum(i.num_tokens for i in c.train)
    want_test = tokens_for_test(sum(i.num_tokens for i in c.test) if c.test else None, want_val, test_tokens)
    if want_test < seq_len + 1:
        raise TokensError("test_tokens", f"{want_test:,} test tokens hold no window: at least seq_len + 1 = "
                                         f"{seq_len + 1} are needed")
    if c.test:
        n_test = sum(i.num_tokens for i in c.test)
        if want_test > n_test:
            raise TokensError("test_tokens", f"asked {want_test:,} test tokens, the files matching "
                                             f"{globs[1]!r} in {c.root} hold {n_test:,}")
    elif want_test >= n_train - seq_len:
        raise TokensError("test_tokens", f"holding out {want_test:,} test tokens leaves too few of "
                                         f"the {n_train:,} training tokens in {c.root}")
    kept = n_train if c.test else n_train - want_test
    streamed = kept > STREAM_ABOVE_TOKENS if stream is None else stream
    vocab = _vocab(c, vocab_size, streamed)
    valid = _stream(c.valid, want_val + (1 if n_val > want_val else 0), vocab)
    test = _stream(c.test, want_test, vocab) if c.test else _tail(c.train, kept, vocab)
    return valid, test, kept, vocab, streamed


def tokens_for_test(n_test: int | None, n_valid: int, test_tokens: int | None) -> int:
    """The test tokens evaluated: ``test_tokens`` when given; else as many as validation
    (``n_valid``), capped by the test files' ``n_test`` tokens (``None``: no test files, the test
    tokens are held out from training): all of a test split shorter than validation."""
    if test_tokens is not None:
        return test_tokens
    return n_valid if n_test is None else min(n_valid, n_test)


#: Vocabularies taken as byte-level (one token per byte, 256 ids, maybe one more for end of text):
#: their bytes per token is 1 where no ``tokens.json`` gives it.
BYTE_VOCABS = (256, 257)


def text_bytes_per_token(meta: dict, vocab: int, given: float | None) -> float | None:
    """The corpus's bytes per token, for bits per byte: ``given`` (the ``bytes_per_token`` key),
    else the sidecar's, else 1 for a :data:`BYTE_VOCABS` vocabulary, else ``None`` (unknown).

    Raises:
      TokensError: ``given`` is not a positive finite number, or differs from the sidecar's.
    """
    side = meta.get("bytes_per_token")
    if given is None:
        return side if side is not None else (1.0 if vocab in BYTE_VOCABS else None)
    if type(given) not in (int, float) or not 0 < given < float("inf"):
        raise TokensError("bytes_per_token", f"must be a positive number (bytes of text per token), "
                                             f"got {given!r}")
    if side is not None and abs(side - given) > 1e-9 * side:
        raise TokensError("bytes_per_token", f"{given:g} differs from the {side:g} of {SIDECAR}, which "
                                             f"measured it; leave the key out")
    return float(given)


#: Training splits above this many tokens are streamed (``stream: null``); below, held in memory.
STREAM_ABOVE_TOKENS = 1 << 24
#: Windows of a streamed training split kept in memory (shapes, the throughput measurement).
RESIDENT_WINDOWS = 1024


def _check_reading(seq_len: int, order: str, stream: bool | None) -> None:
    """:func:`load_tokens`'s ``seq_len`` (>= 1), ``order`` and ``stream`` (``order: sequential``
    streams). Raises :class:`TokensError` naming the bad one."""
    if seq_len < 1:
        raise TokensError("seq_len", f"must be >= 1, got {seq_len}")
    if order not in ORDERS:
        raise TokensError("order", f"{order!r}: choose one of {', '.join(ORDERS)}")
    if order == "sequential" and stream is False:
        raise TokensError("stream", "false holds the windows in memory, shuffled on the device; order: "
                                    "sequential reads them from the shards (leave stream unset)")


def _check_windows(splits: list, root: object, seq_len: int) -> None:
    """Raise :class:`TokensError` (``seq_len``) when the training, test or validation ``splits``
    (``(x, y)`` windows of the folder ``root``) hold no window."""
    for (x, _), what in zip(splits, ("training", "test", "validation"), strict=True):
        if len(x) == 0:
            raise TokensError("seq_len", f"the {what} tokens of {root} hold no window of {seq_len + 1}")


def _training_windows(src: TokenStream, c: Corpus, n_train: int, vocab: int, seq_len: int,
                      streamed: bool) -> tuple[np.ndarray, np.ndarray]:
    """The training ``(x, y)`` windows held in memory: streamed, the first :data:`RESIDENT_WINDOWS`
    of ``src``; else all of the corpus ``c``'s first ``n_train`` training tokens."""
    if streamed:
        w = np.stack([src.window(i) for i in range(min(src.num_windows, RESIDENT_WINDOWS))])
        return w[:, :-1].astype(np.int32), w[:, 1:].astype(np.int32)
    return windows(_stream(c.train, n_train, vocab), seq_len)


def load_tokens(path: str, seq_len: int = 256, vocab_size: int | None = None, valid_tokens: int | None = None,
                test_tokens: int | None = None, train_glob: str = "*train*", valid_glob: str = "*val*",
                test_glob: str = "*test*", format: str = "auto", stream: bool | None = None,
                digest: str = "auto", order: Literal["random", "sequential"] = "random",
                bytes_per_token: float | None = None) -> Dataset:
    """The shard folder ``path`` as a ``"sequence"`` :class:`Dataset` of ``int32 (N, seq_len)`` windows.

    Args:
      path: the folder. seq_len: tokens per window. vocab_size: the vocabulary (default: the
        sidecar's largest token id + 1, else the data's). valid_tokens: tokens of the
        validation files evaluated (default: all, at most :data:`VALID_TOKENS_MAX`). test_tokens:
        tokens of the test files, or held out from the end of training (default: as many as
        validation, or all of a shorter test split).
        *_glob: file-name patterns of the splits. format: ``auto`` or a
        :data:`harness.data.shards.FORMATS` key. stream: read training windows by positional reads
        (:class:`harness.data.stream.TokenStream`, ``Dataset.stream``) instead of holding them
        (``None``: above :data:`STREAM_ABOVE_TOKENS` training tokens). digest: how much of the
        content the digest covers, one of :data:`DIGESTS` (:func:`corpus_digest`). order: the
        training windows' order, ``random`` (each seed its own permutation of the windows) or
        ``sequential`` (modded-nanogpt's reader: shards in name order, consecutive windows, the same
        for every seed; always streamed), :class:`harness.data.stream.TokenStream`. bytes_per_token: bytes of
        text per token, for ``bits_per_byte`` (default: ``tokens.json``'s, else 1 for a byte-level
        vocabulary of 256 or 257, else none is logged).
    Raises:
      TokensError: bad data or hyperparameters (a token id at or above the vocabulary names its
        shard and offset); ``.key`` names the hyperparameter.
    """
    _check_reading(seq_len, order, stream)
    c = scan(path, train_glob, valid_glob, test_glob, format)
    corpus_digest(c, digest)
    valid, test, n_train, vocab, streamed = _eval_splits(c, seq_len, valid_tokens, test_tokens,
                                                         (valid_glob, test_glob), vocab_size, stream)
    if order == "sequential" and not streamed:  # read from the shards whatever the size: checked once here
        _stream(c.train, n_train, vocab)
        streamed = True
    bpt = text_bytes_per_token(c.meta, vocab, bytes_per_token)
    src = TokenStream(c.train, seq_len, n_train, vocab, order)
    train = _training_windows(src, c, n_train, vocab, seq_len, streamed)
    unchanged(c)  # every split was read from the shards the digest names
    splits = [train, windows(test, seq_len), windows(valid, seq_len)]
    _check_windows(splits, c.root, seq_len)
    (xt, yt), (xs, ys), (xv, yv) = splits
    tok, fmts = c.meta.get("tokenizer", "unknown tokenizer"), "+".join(sorted({i.format for i in c.shards}))
    return Dataset(xt, yt, xs, ys, xv, yv, input_shape=(seq_len,), num_classes=vocab,
                   name=f"{TOKENS_PREFIX}{path}", task="sequence",
                   source=f"token shards in {c.root} ({fmts}, {tok})",
                   license=str(c.meta.get("license", "")), stream=src if streamed else None,
                   bytes_per_token=bpt)
