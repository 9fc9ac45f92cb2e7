"""Checks that keep token data honest: every token id in range, a shard folder's entries (no dangling
link, no unreadable shard skipped), and a partial ``data tokenize`` output told from a corpus.

* :func:`check_range`: an id at or above the vocabulary, or one the model's integer type cannot hold
  (``int32``), fails with the shard and the token's offset in it. Run on every window streamed and
  on every array a split is built from, so a ``uint32`` id never wraps to a negative one.
* :func:`shard_files`: the files a folder's splits are chosen from; a dangling or looping link, or an
  entry that is neither a file nor a folder, fails with its path.
* :func:`partial_output`: a folder ``data tokenize`` began and did not finish (its marker, or its
  shard names without the ``tokens.json`` it writes last). numpy only.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

import numpy as np

__all__ = ["INDEX_LIMIT", "PARTIAL_MARKER", "check_range", "partial_output", "shard_files"]

#: Token ids feed the model as ``int32``: a vocabulary above this cannot be indexed.
INDEX_LIMIT = 2**31 - 1
#: Written first into a folder ``data tokenize`` is filling, removed just before it is renamed into place.
PARTIAL_MARKER = ".tokenize-partial"
#: The shard names ``data tokenize`` writes (its default prefix ``text``).
HARNESS_SHARD = re.compile(r"^text_(train|val|test)_\d{6}\.bin$")


def check_range(tokens: np.ndarray, vocab_size: int, path: str, first: int = 0) -> None:
    """Raise unless every id of ``tokens`` lies in ``[0, vocab_size)``.

    Args:
      tokens: ids read from shard ``path`` (any integer dtype), the first at token ``first`` of it.
      vocab_size: the model's vocabulary, at most :data:`INDEX_LIMIT`.
    Raises:
      ValueError: names ``path``, the offending id and its token offset in the file.
    """
    if tokens.size == 0:
        return
    if int(tokens.max()) < vocab_size and (tokens.dtype.kind == "u" or int(tokens.min()) >= 0):
        return
    bad = int(np.flatnonzero((tokens >= vocab_size) | (tokens < 0))[0])
    raise ValueError(f"{path} holds token id {int(tokens[bad])} at token {first + bad:,}, beyond vocab_size "
                     f"{vocab_size} (the model's vocabulary)")


def shard_files(root: Path, skip: tuple[str, ...]) -> list[Path]:
    """The files of folder ``root`` (name order) that may be shards: not a folder, not a name in
    ``skip`` or :data:`PARTIAL_MARKER`, not a ``.tmp`` file.

    Raises:
      ValueError: a dangling or looping symbolic link, or an entry that is not a regular file or
        folder (a pipe, a device), named by its path: never skipped without a word."""
    out = []
    for f in sorted(root.iterdir()):
        if f.name in skip or f.name == PARTIAL_MARKER or f.name.endswith(".tmp"):
            continue
        try:
            mode = f.stat().st_mode
        except OSError as e:
            what = "a dangling symbolic link" if f.is_symlink() else "unreadable"
            raise ValueError(f"{f}: {what} ({e.strerror}); remove it or restore its target") from None
        if stat.S_ISDIR(mode):
            continue
        if not stat.S_ISREG(mode):
            raise ValueError(f"{f}: not a regular file; remove it from the shard folder")
        out.append(f)
    return out


def partial_output(root: Path, files: list[Path], has_sidecar: bool) -> str:
    """Why ``root`` is an unfinished ``data tokenize`` output (``""``: it is not): its marker, or
    shards named as the harness names them with no ``tokens.json`` (which it writes last). Shards
    made by other tools, without ``tokens.json``, are not refused."""
    again = "tokenize again into a new folder (python -m harness data tokenize TEXT... -o FOLDER)"
    if (root / PARTIAL_MARKER).exists():
        return f"{root}: an unfinished data tokenize output (its {PARTIAL_MARKER} marker is there); {again}"
    ours = [f.name for f in files if HARNESS_SHARD.match(f.name)]
    if ours and not has_sidecar:
        return (f"{root}: {len(ours)} shard{'s' * (len(ours) != 1)} named as data tokenize names them "
                f"({ours[0]}, ...) but no "
                f"tokens.json, which it writes last: an unfinished output; {again}")
    return ""
