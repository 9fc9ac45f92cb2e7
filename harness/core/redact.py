"""Credentials never shown: the one rule that masks a password in a URI or in any text.

A tracking URI may carry user-info (``http://alice:S3cretPW@host:5000``,
``postgresql://u:secretpw@db/mlflow``). Every message, tag, parameter, report, log line and spool
entry the harness writes shows it as ``http://alice:***@host:5000``: :func:`mask_uri` for a URI,
:func:`mask_text` for free text that may quote one (a store's exception, a log line). A user name
alone (``http://alice@host``) is kept; a password alone (``http://:pw@host``) is masked.

Standard library only (``reports`` may import it).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

#: What a masked password reads as.
MASK = "***"

# scheme://user:password@ : the password is everything up to the last "@" before the host part
# (a "/", "?", "#" or whitespace ends the authority), so a password holding "@" or ":" is masked whole
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<auth>[^\s/?#]*)@")


def _mask_auth(auth: str) -> str:
    if ":" not in auth:
        return auth  # a user name alone: no secret
    user = auth.split(":", 1)[0]
    return f"{user}:{MASK}"


def mask_text(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` in it replaced by ``***``."""
    if "@" not in text:
        return text
    return _USERINFO.sub(lambda m: f"{m['head']}{_mask_auth(m['auth'])}@", text)


def mask_uri(uri: str) -> str:
    """``uri`` with its password (if any) replaced by ``***``: ``http://alice:***@127.0.0.1:5000``."""
    return mask_text(uri)


def split_userinfo(uri: str) -> tuple[str, str | None, str | None]:
    """``(uri without user-info, user name, password)``, both percent-decoded (as ``requests``
    reads them); ``(uri, None, None)`` when there is none."""
    m = _USERINFO.match(uri)
    if m is None:
        return uri, None, None
    auth = m["auth"]
    user, sep, password = auth.partition(":")
    bare = m["head"] + uri[m.end():]
    return bare, unquote(user), (unquote(password) if sep else None)
