"""Token shard files as the field writes them: their formats, a reader, a writer and a content digest.

Formats (checked as the projects' own loaders check them: file size = header + tokens × width):

* ``gpt2``: llm.c / modded-nanogpt, a 256 × int32 header (magic 20240520, version 1, token count)
  then ``uint16`` tokens (karpathy/llm.c ``dev/data/data_common.py``).
* ``llama3``: llm.c's Llama-3 shards, magic 20240801, version 7, ``uint32`` tokens.
* ``nanogpt``: nanoGPT's headerless ``uint16`` memmap (``train.bin`` / ``val.bin``).

numpy only; every error is a :class:`ShardError` whose text names the file.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["FORMATS", "HEADER_BYTES", "ShardError", "ShardInfo", "content_digest", "digest", "read_info",
           "read_tokens", "write_shard"]

HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
#: format name -> (magic, version, token dtype); ``nanogpt`` has no header.
FORMATS: dict[str, tuple[int | None, int | None, np.dtype]] = {
    "gpt2": (20240520, 1, np.dtype("<u2")),
    "llama3": (20240801, 7, np.dtype("<u4")),
    "nanogpt": (None, None, np.dtype("<u2")),
}
#: headerless file names read as ``nanogpt`` (nanoGPT's ``prepare.py`` writes these).
HEADERLESS_NAMES = ("train.bin", "val.bin", "test.bin")


class ShardError(ValueError):
    """A token shard that cannot be read as any supported format (the message names the file)."""


@dataclass(frozen=True)
class ShardInfo:
    """One shard: ``path``, ``format`` (a :data:`FORMATS` key), ``offset`` (bytes of header),
    ``dtype`` of its tokens, ``num_tokens``, ``size`` in bytes, ``mtime_ns``, ``inode`` and
    ``ctime_ns`` (what :meth:`changed` compares; a write moves the ctime even when the mtime is put
    back; 0: not known)."""

    path: str
    format: str
    offset: int
    dtype: np.dtype
    num_tokens: int
    size: int
    mtime_ns: int
    inode: int = 0
    ctime_ns: int = 0

    def changed(self, st: os.stat_result | None = None) -> str:
        """What differs between the file now (``st``: its ``os.stat``/``os.fstat``, default the path's)
        and when it was read (``""``: nothing): its size, mtime, inode (replaced by another file) or
        ctime (written with its mtime put back; also moved by a ``chmod`` or a new hard link)."""
        try:
            st = os.stat(self.path) if st is None else st
        except OSError as e:
            return f"{self.path}: {e.strerror} (it was read at the start)"
        for what, was, now in (("size", self.size, st.st_size), ("mtime_ns", self.mtime_ns, st.st_mtime_ns),
                               ("inode", self.inode, st.st_ino), ("ctime_ns", self.ctime_ns, st.st_ctime_ns)):
            if was != now and (was or what != "ctime_ns"):
                return f"{self.path}: its {what} changed ({was} -> {now})"
        return ""


def read_info(path: str | os.PathLike, fmt: str = "auto") -> ShardInfo:
    """The format and token count of one shard, from its header and size (no token is read).

    Args:
      path: the file. fmt: ``"auto"`` (a known magic number, else ``nanogpt`` for the
        :data:`HEADERLESS_NAMES`) or a :data:`FORMATS` key.
    Raises:
      ShardError: wrong magic or version, a size that does not match the header, an odd size.
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            st = os.fstat(f.fileno())
            head = np.frombuffer(f.read(HEADER_BYTES if st.st_size >= HEADER_BYTES else st.st_size // 4 * 4),
                                 "<i4")
    except OSError as e:
        raise ShardError(f"{p}: cannot be read ({e.strerror or e})") from None
    known = {m: name for name, (m, _, _) in FORMATS.items() if m is not None}
    if fmt == "auto":
        if head.size and int(head[0]) in known:
            fmt = known[int(head[0])]
        elif p.name in HEADERLESS_NAMES:
            fmt = "nanogpt"
        else:
            got = int(head[0]) if head.size else None
            raise ShardError(f"{p}: magic number {got} is not llm.c's 20240520 (GPT-2, uint16) or "
                             f"20240801 (Llama-3, uint32); a headerless nanoGPT file is named "
                             f"{' or '.join(HEADERLESS_NAMES)}")
    magic, version, dtype = FORMATS[fmt]
    if magic is None:
        if st.st_size % dtype.itemsize:
            raise ShardError(f"{p}: {st.st_size} bytes is not a whole number of uint16 tokens "
                             f"(truncated nanoGPT file?)")
        return ShardInfo(str(p), fmt, 0, dtype, st.st_size // dtype.itemsize, st.st_size, st.st_mtime_ns,
                         st.st_ino, st.st_ctime_ns)
    if head.size < HEADER_INTS:
        raise ShardError(f"{p}: {st.st_size} bytes, shorter than the {HEADER_BYTES}-byte header")
    if int(head[0]) != magic:
        raise ShardError(f"{p}: magic number {int(head[0])}, expected {magic} ({fmt})")
    if int(head[1]) != version:
        raise ShardError(f"{p}: version {int(head[1])}, expected {version} for magic {magic} ({fmt})")
    ntok = int(head[2])
    want = HEADER_BYTES + ntok * dtype.itemsize
    if ntok < 0 or st.st_size != want:
        raise ShardError(f"{p}: {st.st_size} bytes, but its header says {ntok} tokens = {want} bytes "
                         f"(truncated or not a {fmt} shard)")
    return ShardInfo(str(p), fmt, HEADER_BYTES, dtype, ntok, st.st_size, st.st_mtime_ns, st.st_ino,
                     st.st_ctime_ns)


def read_tokens(info: ShardInfo, start: int = 0, count: int | None = None,
                fd: int | None = None) -> np.ndarray:
    """Tokens ``start .. start + count - 1`` of the shard (``count`` None: to its end), ``uint16`` or
    ``uint32``, read by positional reads (``os.pread``), never through a memory map (a map's pages
    count in the process's resident set).

    Args:
      info: the shard. start, count: which tokens. fd: an open descriptor of it (default: opened here).
    Raises:
      ShardError: fewer bytes than its header promised (the file shrank after it was read), or
        the file cannot be read.
    """
    start = min(max(start, 0), info.num_tokens)
    count = info.num_tokens - start if count is None else min(max(count, 0), info.num_tokens - start)
    if count == 0:
        return np.zeros(0, info.dtype)
    width = info.dtype.itemsize
    own = fd is None
    try:
        fd = os.open(info.path, os.O_RDONLY) if fd is None else fd
        out = bytearray(count * width)
        view, got = memoryview(out), 0
        while got < len(out):  # one pread returns at most ~2 GiB
            n = os.preadv(fd, [view[got:got + (1 << 30)]], info.offset + start * width + got)
            if n == 0:
                raise ShardError(f"{info.path}: {got} bytes read at token {start}, {len(out)} expected: the "
                                 f"file shrank after it was checked (rewritten while the sweep ran?)")
            got += n
    except OSError as e:
        raise ShardError(f"{info.path}: cannot be read ({e.strerror or e})") from None
    finally:
        if own and isinstance(fd, int):
            os.close(fd)
    return np.frombuffer(out, info.dtype)


def write_shard(path: str | os.PathLike, tokens: np.ndarray, fmt: str = "gpt2") -> ShardInfo:
    """Write ``tokens`` (integers) as one shard of format ``fmt``; returns its :class:`ShardInfo`.

    Raises:
      ValueError: a token below 0 or above the format's dtype (``gpt2``/``nanogpt``: 65,535).
    """
    magic, version, dtype = FORMATS[fmt]
    toks = np.asarray(tokens)
    if toks.size and (int(toks.min()) < 0 or int(toks.max()) > np.iinfo(dtype).max):
        raise ValueError(f"{path}: token ids {int(toks.min())}..{int(toks.max())} do not fit {fmt}'s "
                         f"{dtype.name}; use llama3 (uint32) shards")
    tmp = Path(f"{path}.tmp")
    with open(tmp, "wb") as f:
        if magic is not None:
            header = np.zeros(HEADER_INTS, "<i4")
            header[:3] = (magic, version, toks.size)
            f.write(header.tobytes())
        f.write(toks.astype(dtype).tobytes())
    os.replace(tmp, path)
    return read_info(path, fmt)


#: Bytes read from a shard for its digest: the header, and this many blocks spread over the tokens.
DIGEST_BLOCKS, DIGEST_BLOCK_BYTES = 16, 4096


def digest(infos: list[ShardInfo], extra: bytes = b"") -> str:
    """16 hex digits of SHA-256 over each shard's name, size, header and :data:`DIGEST_BLOCKS`
    evenly spaced blocks of its bytes (first and last included), plus ``extra``: stable (no
    timestamps: a copied corpus keeps its digest), and cheap for a corpus of any size (at most
    ~65 KiB read per shard). A same-size edit that touches no sampled block is not seen."""
    h = hashlib.sha256(b"harness-shards-1")
    for info in infos:
        h.update(f"{Path(info.path).name}\0{info.size}\0{info.format}\0".encode())
        with open(info.path, "rb") as f:
            f.seek(0)
            h.update(f.read(info.offset))
            span = max(info.size - DIGEST_BLOCK_BYTES, 0)
            for k in range(DIGEST_BLOCKS):
                f.seek(span * k // max(DIGEST_BLOCKS - 1, 1))
                h.update(f.read(DIGEST_BLOCK_BYTES))
    h.update(extra)
    return h.hexdigest()[:16]


#: This process's full-content hashes of shards, by ``(path, size, mtime_ns, inode, ctime_ns)``: a
#: file is hashed again only when one of them changes (a write changes its mtime and ctime).
_CONTENT: dict[tuple, str] = {}
#: Bytes hashed per read by :func:`content_digest`.
CONTENT_BLOCK_BYTES = 8 << 20


def _shard_content(path: str) -> str:
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        key = (path, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
        if key not in _CONTENT:
            h = hashlib.sha256()
            while block := f.read(CONTENT_BLOCK_BYTES):
                h.update(block)
            _CONTENT[key] = h.hexdigest()
    return _CONTENT[key]


def content_digest(infos: list[ShardInfo], extra: bytes = b"") -> str:
    """16 hex digits of SHA-256 over every byte of each shard (its name, size and format, then all
    its bytes), plus ``extra``: any edit is seen. Costs a read of the whole corpus (~1.5 GB/s of
    SHA-256 on a core with SHA extensions), once per process and file version: a shard is hashed again
    only when its size, mtime, inode or ctime changes.

    Raises:
      ShardError: a shard that cannot be read (the message names it)."""
    h = hashlib.sha256(b"harness-content-1")
    for info in infos:
        try:
            whole = _shard_content(info.path)
        except OSError as e:
            raise ShardError(f"{info.path}: cannot be read ({e.strerror or e})") from None
        h.update(f"{Path(info.path).name}\0{info.size}\0{info.format}\0{whole}\0".encode())
    h.update(extra)
    return h.hexdigest()[:16]
