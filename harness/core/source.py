"""Where a user's training algorithm comes from: an optimizer entry's ``source``.

A config's optimizer entry may name code outside the project's registries::

    optimizers:
      - {name: my_adam, source: "my_opts.py:my_adam"}          # a file, relative to the config
      - {name: mine, source: "mypkg.opts:make"}                 # an importable module
      - {name: sf, source: "optax.contrib:schedule_free_adamw"}  # any Optax optimizer
      - {name: nadamw_ap, source: "algoperf:submissions/nadamw.py"}  # an AlgoPerf submission

:func:`parse_source` turns the text into a :class:`SourceRef`: its kind (``path``, ``module``,
``optax`` or ``algoperf``), where it lives, the function it names, and a **digest** that is part of
every trial's identity (``TrialSpec.optimizer_source_hash``):

- a file (``path``; a module's file that no installed distribution owns): :func:`code_digest` of
  the code the factory's behaviour depends on: the top-level statements that bind the factory's
  name, every top-level definition they reach by name (transitively: helpers, constants, imports,
  decorators, classes), and every top-level statement that binds nothing (it runs for its effect);
  each as its syntax tree with docstrings and other constant expression statements dropped, dumped
  without line numbers. So a comment, a docstring, formatting, or an edit of a function the factory
  never reaches changes nothing, and any change of what it runs changes the digest. Code that reads
  the module's names dynamically (``globals()``, ``vars()``, ``eval``, ``exec``) makes the whole
  file count; a file that does not parse is hashed as bytes (loading it then fails anyway);
- an AlgoPerf submission: the same, from the functions AlgoPerf's runner calls
  (:data:`ALGOPERF_API`);
- an installed package (``optax``, ``mypkg``): the SHA-256 of ``"<distribution>==<version>"``.

Changing what your factory runs changes the digest, hence the trial ids, so a re-run trains again
instead of skipping as FINISHED. The whole file's SHA-256 (:attr:`SourceRef.file_digest`) is kept
for provenance (the run's tag ``optimizer.source_file_hash``), not for identity.

A file's text travels with the trial (``TrialSpec.optimizer_source_code``, never part of its
identity), and :func:`load_module` executes exactly that text in a module of its own
(``harness_source_<file digest>``, cached per file and whole-file digest), with the file's folder **last**
on ``sys.path`` while it runs so that it may import its neighbours without shadowing anything (a
``json.py``, ``random.py`` or ``optimizers.py`` beside the config is not what ``import json``
finds). So a worker on another machine (Ray) needs no copy of the file, and a file edited while a
sweep runs cannot mix two versions into one sweep.

User code runs inside :func:`bounded`: the user's code is trusted, its accidents are not. A call
that does not return within its limit (``SIGALRM`` in the main thread: a Python loop or a
``time.sleep`` is interrupted), that calls ``os._exit``, raises a ``BaseException`` that is
neither an ``Exception`` nor ``SystemExit`` (``KeyboardInterrupt`` from the code, not from Ctrl-C),
or changes the working directory (restored) becomes one :class:`SourceError` line.

Standard library only (importing the named module is the only thing that runs user code).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import signal
import sys
import threading
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from harness.core import interrupt
from harness.core.source_digest import code_digest

__all__ = ["ALGOPERF_API", "DEFAULT_TIMEOUT_S", "SOURCE_KINDS", "SourceError", "SourceRef", "bounded",
           "code_digest", "load_module", "parse_source", "source_of"]

#: The kinds of source, in the order the docs present them.
SOURCE_KINDS = ("path", "module", "optax", "algoperf")
#: Largest source file read (bytes): an optimizer is code, not data.
MAX_SOURCE_BYTES = 2 * 1024 * 1024
#: Seconds a user's code may run in each pre-flight check (importing a file, calling its factory,
#: tracing one update): the config's ``source_timeout_s`` default.
DEFAULT_TIMEOUT_S = 60.0

#: The functions of an AlgoPerf submission that AlgoPerf's runner (and the harness's) calls: the
#: roots of its digest.
ALGOPERF_API = ("get_batch_size", "init_optimizer_state", "data_selection", "update_params",
                "prepare_for_eval")

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_MODULE_RE = re.compile(rf"^{_IDENT}(\.{_IDENT})*$")
_FUNC_RE = re.compile(rf"^{_IDENT}$")


class SourceError(ValueError):
    """A ``source`` that cannot be used; the message is one line saying what to do."""


@dataclass(frozen=True)
class SourceRef:
    """A parsed ``source``.

    Attributes:
      text: the source as written in the config (``"my_opts.py:my_adam"``).
      kind: ``"path"``, ``"module"``, ``"optax"`` (``optax:`` / ``optax.contrib:``) or
        ``"algoperf"``.
      target: the file's absolute path (``path``, ``algoperf``) or the module's dotted name.
      function: the factory's name (``""`` for an AlgoPerf submission: the module is the algorithm).
      digest: 16 hex digits of SHA-256 of what the optimizer's behaviour depends on (see the
        module docstring): its identity.
      code: the file's text (``path``, ``algoperf``; ``""`` for modules).
    """

    text: str
    kind: Literal["path", "module", "optax", "algoperf"]
    target: str
    function: str
    digest: str
    code: str = ""

    @property
    def is_file(self) -> bool:
        return self.kind in ("path", "algoperf")

    @property
    def file_digest(self) -> str:
        """16 hex digits of SHA-256 of the whole file's text (``""`` for a module): provenance, the
        exact version that ran; not identity (:attr:`digest` is)."""
        return _sha16(self.code.encode()) if self.code else ""

    @property
    def filename(self) -> str:
        """The file's base name (``my_opts.py``), or the module's name."""
        return os.path.basename(self.target) if self.is_file else self.target


def _sha16(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _read_file(path: str, text: str) -> str:
    if not os.path.isfile(path):
        where = "no such file" if not os.path.exists(path) else "not a file"
        raise SourceError(f"source {text!r}: {where}: {path} (a path is relative to the config "
                          f"file's folder)")
    size = os.path.getsize(path)
    if size > MAX_SOURCE_BYTES:
        raise SourceError(f"source {text!r}: {path} is {size:,} bytes; a source file is at most "
                          f"{MAX_SOURCE_BYTES:,}")
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8")
    except UnicodeDecodeError as e:
        raise SourceError(f"source {text!r}: {path} is not UTF-8 text ({e.reason} at byte "
                          f"{e.start})") from None
    except OSError as e:
        raise SourceError(f"source {text!r}: cannot read {path}: {e.strerror}") from None


def _module_digest(module: str, function: str, text: str) -> str:
    """``"<dist>==<version>"`` of the distribution that provides ``module``'s top package, else
    :func:`code_digest` of the module's file from ``function``."""
    top = module.split(".")[0]
    dists = importlib.metadata.packages_distributions().get(top, [])
    if dists:
        name = sorted(dists)[0]
        return _sha16(f"{name}=={importlib.metadata.version(name)}".encode())
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        spec = None
    except (ImportError, ValueError) as e:
        raise SourceError(f"source {text!r}: cannot import {module!r}: {e}") from None
    if spec is None:
        raise SourceError(f"source {text!r}: no module named {module!r} (is it installed, or on "
                          f"PYTHONPATH?)")
    origin = spec.origin if spec.origin and os.path.isfile(spec.origin) else None
    if origin is None:
        return _sha16(module.encode())
    with open(origin, "rb") as f:
        data = f.read()
    try:
        return code_digest(data.decode("utf-8"), (function,))
    except UnicodeDecodeError:  # not Python text (an extension module): its bytes
        return _sha16(data)


def parse_source(text: Any, base_dir: str) -> SourceRef:
    """The :class:`SourceRef` of ``text`` (see the module docstring); a relative path is relative
    to ``base_dir`` (the config file's folder). Reads the file (to hash it) but runs no code of it.

    Raises:
      SourceError: not a string; malformed (``expected PATH.py:FUNCTION, package.module:FUNCTION,
        optax:NAME, optax.contrib:NAME or algoperf:PATH.py``); the file is missing, not UTF-8 or
        too large; the module is not installed.
    """
    forms = ("expected PATH.py:FUNCTION, package.module:FUNCTION, optax:NAME, optax.contrib:NAME "
             "or algoperf:PATH.py")
    if not isinstance(text, str) or not text.strip():
        raise SourceError(f"source must be a non-empty string; {forms}")
    if len(text) > 1000:
        raise SourceError(f"source is {len(text):,} characters; {forms}")
    if text.startswith("algoperf:"):
        rel = text[len("algoperf:"):]
        if not rel.endswith(".py"):
            raise SourceError(f"source {text!r}: an AlgoPerf submission is a .py file "
                              f"(algoperf:PATH.py)")
        path = os.path.abspath(os.path.join(base_dir, rel))
        code = _read_file(path, text)
        return SourceRef(text, "algoperf", path, "", code_digest(code, ALGOPERF_API), code)
    where, sep, func = text.rpartition(":")
    if not sep or not where or not _FUNC_RE.match(func):
        raise SourceError(f"source {text!r}: {forms}")
    if where.endswith(".py"):
        path = os.path.abspath(os.path.join(base_dir, where))
        code = _read_file(path, text)
        return SourceRef(text, "path", path, func, code_digest(code, (func,)), code)
    if not _MODULE_RE.match(where):
        why = ("not a .py file (a file source ends in .py)" if "/" in where or "\\" in where else
               "neither a .py path nor a module name")
        raise SourceError(f"source {text!r}: {where!r} is {why}; {forms}")
    kind: Literal["module", "optax"] = "optax" if where in ("optax", "optax.contrib") else "module"
    return SourceRef(text, kind, where, func, _module_digest(where, func, text))


def source_of(spec: Any, which: str = "optimizer") -> SourceRef | None:
    """The :class:`SourceRef` of the ``which`` (``"optimizer"`` or ``"model"``) a
    :class:`~harness.core.spec.TrialSpec` carries (``None`` for a registered one); the file's text
    is the one shipped with the spec."""
    text = getattr(spec, f"{which}_source", "")
    if not text:
        return None
    kind, target, func, digest, code = getattr(spec, f"{which}_source_ref")
    return SourceRef(text, kind, target, func, digest, code)


_LOADED: dict[tuple[str, str], types.ModuleType] = {}
_LOCK = threading.Lock()


def load_module(ref: SourceRef, limit_s: float | None = None) -> types.ModuleType:
    """The module of ``ref``: for a file, a fresh module executed from ``ref.code`` (cached per
    file and whole-file digest, so the text that runs is exactly the shipped one; registered in
    ``sys.modules`` as ``harness_source_<file digest>``); else
    ``importlib.import_module(ref.target)``. Either runs :func:`bounded` (``limit_s`` seconds; no
    time limit when ``None``).

    Raises:
      SourceError: the module cannot be imported, or executing the file raised (one line: the
        file, the exception, the first line of its message and its line; for a module the code
        imports that is not installed, the Python to install it for), or an accident
        (:func:`bounded`).
    """
    if not ref.is_file:
        return _import_target(ref, limit_s)
    key = (ref.target, ref.file_digest)
    with _LOCK:
        mod = _LOADED.get(key)
        if mod is not None:
            return mod
        name = f"harness_source_{ref.file_digest}"
        mod = types.ModuleType(name)
        mod.__file__ = ref.target
        sys.modules[name] = mod
        folder = os.path.dirname(ref.target)
        added = folder not in sys.path
        if added:  # last: a neighbour named like a module the harness imports (json.py) shadows nothing
            sys.path.append(folder)
        try:
            with bounded(f"source {ref.text!r}: running {os.path.basename(ref.target)}", limit_s,
                         ref.target):
                exec(compile(ref.code, ref.target, "exec"), mod.__dict__)
        except (Exception, SystemExit) as e:  # a sys.exit() in the file must not end the sweep
            sys.modules.pop(name, None)
            if isinstance(e, SourceError):
                raise
            raise SourceError(f"source {ref.text!r}: running {os.path.basename(ref.target)} raised "
                              f"{type(e).__name__}: {_one_line(e)}{_line_of(e, ref.target)}"
                              f"{_install_hint(e)}") from None
        finally:
            if added:
                with contextlib.suppress(ValueError):
                    sys.path.remove(folder)
        _LOADED[key] = mod
        return mod


def _import_target(ref: SourceRef, limit_s: float | None) -> types.ModuleType:
    """``importlib.import_module(ref.target)`` under :func:`bounded`.

    Raises:
      SourceError: it raised (one line, with where to install a missing module), or an accident.
    """
    try:
        with bounded(f"source {ref.text!r}: importing {ref.target!r}", limit_s):
            return importlib.import_module(ref.target)
    except (Exception, SystemExit) as e:
        if isinstance(e, SourceError):
            raise
        raise SourceError(f"source {ref.text!r}: importing {ref.target!r} raised "
                          f"{type(e).__name__}: {_one_line(e)}{_install_hint(e)}") from None


def _one_line(e: BaseException) -> str:
    """``str(e)`` on one line: its first non-empty line, `` ...`` when more followed (a config error
    is one line per problem)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if not lines:
        return ""
    return lines[0] + (" ..." if len(lines) > 1 else "")


def _install_hint(e: BaseException) -> str:
    """For a module the code imports that is not installed: where to install it."""
    if type(e) is not ModuleNotFoundError or not getattr(e, "name", None):
        return ""
    top = e.name.split(".")[0]
    return f"; install the package that provides {top!r} for {sys.executable}, or put it on PYTHONPATH"


def _line_of(e: BaseException, filename: str) -> str:
    """`` (line N)`` of the innermost frame of ``e`` in ``filename``, or ``""``."""
    if isinstance(e, SyntaxError):  # its message already names the line
        return ""
    tb, line = e.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" (line {line})" if line else ""


class _Overran(BaseException):
    """Raised by :func:`bounded`'s alarm: a ``BaseException``, so that an ``except Exception`` in a
    user's loop does not swallow it."""


class _Exited(BaseException):
    """Raised instead of ``os._exit`` while user code runs under :func:`bounded`."""

    def __init__(self, code: Any):
        super().__init__(code)
        self.code = code


_ACTIVE = threading.local()


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:  # the folder was removed
        return ""


@contextlib.contextmanager
def bounded(what: str, limit_s: float | None = None, filename: str = "",
            limit_name: str = "source_timeout_s") -> Iterator[None]:
    """Run user code (the ``with`` body) so that its accidents are one line each, a
    :class:`SourceError` that starts with ``what`` (``"source 'x.py:f': running x.py"``):

    - it runs more than ``limit_s`` seconds (``None``: no limit): ``... did not return within 5 s
      (source_timeout_s; it was at line 3)``. Timed with ``SIGALRM`` (``setitimer``, repeated every
      second past the limit), so only in the main thread: a Python loop or a sleep is interrupted,
      a computation inside one C call is not; in another thread there is no time limit;
    - it calls ``os._exit`` (in this thread; another thread's ``os._exit`` exits as ever);
    - it raises a ``BaseException`` that is neither ``Exception`` nor ``SystemExit`` (a
      ``KeyboardInterrupt`` of a real Ctrl-C, seen by the ``SIGINT`` handler, is raised as it is);
    - it changes the working directory (changed back first).

    ``Exception`` and ``SystemExit`` pass through unchanged (the callers word them). ``filename``
    (the user's file) gives the line. Nested, only the outermost bound applies.
    """
    if getattr(_ACTIVE, "on", False):
        yield
        return
    _ACTIVE.on = True
    before = _cwd()
    guard = _Guard(limit_s is not None and hasattr(signal, "setitimer")
                   and threading.current_thread() is threading.main_thread())
    guard.arm(limit_s)
    try:
        try:
            yield
        finally:
            guard.disarm()
            _ACTIVE.on = False
            now = _cwd()
            if now != before and before:
                with contextlib.suppress(OSError):
                    os.chdir(before)
    except (Exception, SystemExit):
        raise
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt) and (guard.ctrl_c or interrupt.noted()):  # Ctrl-C, SIGTERM
            raise
        raise _accident(e, what, limit_s, limit_name, filename) from None
    if now != before and before:
        raise SourceError(f"{what} changed the working directory to {now or '(a removed folder)'}; "
                          f"the sweep's store and files are relative to {before}, where it was put "
                          f"back: leave it unchanged")


class _Guard:
    """One :func:`bounded` run's hooks: ``os._exit`` in its thread raises :class:`_Exited`; when
    ``timed``, ``SIGALRM`` raises :class:`_Overran` and a real Ctrl-C is noted in ``ctrl_c``."""

    def __init__(self, timed: bool):
        self.me, self.real_exit, self.timed = threading.get_ident(), os._exit, timed
        self.ctrl_c: list[bool] = []
        self.old: tuple = ()  # the SIGALRM and SIGINT handlers replaced

    def side_door(self, code: int = 0) -> None:
        if threading.get_ident() != self.me:
            self.real_exit(code)
        raise _Exited(code)

    def on_alarm(self, signum: int, frame: Any) -> None:
        raise _Overran()

    def on_int(self, signum: int, frame: Any) -> None:
        self.ctrl_c.append(True)
        if self.old[1] is interrupt.handler:
            interrupt.handler(signum, frame)  # (noted for the sweep too; raises)
        raise KeyboardInterrupt

    def arm(self, limit_s: float | None) -> None:
        """Install the hooks (the alarm after ``limit_s`` seconds, then every second)."""
        if self.timed:
            self.old = (signal.signal(signal.SIGALRM, self.on_alarm), signal.getsignal(signal.SIGINT))
            if self.old[1] is signal.default_int_handler or self.old[1] is interrupt.handler:
                signal.signal(signal.SIGINT, self.on_int)
            signal.setitimer(signal.ITIMER_REAL, float(limit_s), 1.0)
        os._exit = self.side_door  # type: ignore[assignment]

    def disarm(self) -> None:
        """Put back the timer, the handlers and ``os._exit``."""
        if self.timed:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
            signal.signal(signal.SIGALRM, self.old[0])
            signal.signal(signal.SIGINT, self.old[1])
        os._exit = self.real_exit


def _accident(e: BaseException, what: str, limit_s: float | None, limit_name: str,
              filename: str) -> SourceError:
    """The one line of an accident ``e`` in :func:`bounded`: past the time limit, ``os._exit`` or
    another ``BaseException``, with the line of ``filename`` it was at."""
    line = _line_of(e, filename) if filename else ""
    if isinstance(e, _Overran):
        where = line.strip(" ()")
        return SourceError(f"{what} did not return within {limit_s:g} s ({limit_name}: {limit_s:g}"
                           f"{'; it was at ' + where if where else ''})")
    if isinstance(e, _Exited):
        return SourceError(f"{what} called os._exit({e.code!r}){line}; the sweep goes on only without it")
    return SourceError(f"{what} raised {type(e).__name__}{': ' if str(e) else ''}{_one_line(e)}{line}")
