"""Building a fresh MLflow schema in a new SQLite file: MLflow's migrations, or a copy of a template.

MLflow creates a SQLite store by running its alembic migrations in place (1,668 statements, seconds:
docs/decisions.md). :func:`build` makes a complete store in a
temporary file instead (the caller links it into place only when complete). The schema is MLflow's
own: the first store of an MLflow version on a machine runs MLflow's migrations
(``mlflow.store.db.utils._initialize_tables``) into a template
(``$HARNESS_CACHE_DIR/mlflow-schema/<mlflow version>-<schema head>.db``, itself built in a temporary
file and renamed); later stores copy that template (milliseconds instead of seconds). The template
holds only what the migrations write (the tables, ``alembic_version`` and the ``default`` workspace
row); MLflow adds the ``Default`` experiment when it first opens the store, exactly as for a store
it creates itself. ``HARNESS_STORE_TEMPLATE=0`` migrates every new store.

:func:`kill_point` marks the points of store creation (``stmt:N`` before the N-th SQL statement of a
migration, 1-based, :data:`LAST_MIGRATION` counting a whole one; the stages are listed in
:mod:`harness.tracking.store`): a no-op the fault tests replace to SIGKILL the process there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from pathlib import Path

from harness.config import environment
from harness.core.cache_files import cache_dir
from harness.tracking.store_state import LOCK_WAIT_S, StoreError, inspect_file, mlflow_version, schema_head


def kill_point(stage: str) -> None:
    """A named point of store creation (``stmt:N`` or a stage); a no-op the fault tests replace.

    Args:
      stage: the point's name.
    """


#: SQL statements run by the last :func:`migrate` of this process (1,668 for MLflow 3.17.2).
LAST_MIGRATION = [0]


def fsync(path: Path, *, directory: bool = False) -> None:
    """``os.fsync`` the file (or, with ``directory``, the folder) ``path``; errors are ignored."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def migrate(path: Path) -> None:
    """Run MLflow's migrations into the new file ``path`` (which must not be in use elsewhere).

    The connection uses ``synchronous=OFF`` and an in-memory journal: safe because the file is
    discarded unless complete, and faster than MLflow's defaults. The caller fsyncs it.
    """
    import sqlalchemy
    from mlflow.store.db import utils

    engine = sqlalchemy.create_engine(f"sqlite:///{path}", poolclass=sqlalchemy.pool.NullPool)
    LAST_MIGRATION[0] = 0

    @sqlalchemy.event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):
        dbapi_conn.execute("PRAGMA synchronous=OFF")
        dbapi_conn.execute("PRAGMA journal_mode=MEMORY")

    @sqlalchemy.event.listens_for(engine, "before_cursor_execute")
    def _count(*_args):
        LAST_MIGRATION[0] += 1
        kill_point(f"stmt:{LAST_MIGRATION[0]}")

    with quiet_migrations():
        try:
            utils._initialize_tables(engine)
        finally:
            engine.dispose()


@contextlib.contextmanager
def quiet_migrations():
    """Silence alembic's and MLflow's INFO lines about migrations ("Running upgrade ..." x60)."""
    import logging

    loggers = [logging.getLogger(n) for n in ("alembic", "mlflow.store.db.utils")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, lv in zip(loggers, levels, strict=True):
            lg.setLevel(lv)


def template_enabled() -> bool:
    """Whether new stores copy the cached template (``HARNESS_STORE_TEMPLATE`` not off; a sweep's
    config loading refuses a value neither on nor off: :mod:`harness.config.environment`)."""
    return os.environ.get(environment.STORE_TEMPLATE, "").strip().lower() not in environment.OFF


def template_path() -> Path:
    """The cached fresh schema of this MLflow version: ``$HARNESS_CACHE_DIR/mlflow-schema/...db``."""
    return cache_dir("mlflow-schema", f"{mlflow_version()}-{schema_head()}.db")


def _template() -> Path | None:
    """The cached fresh schema of this MLflow version (built on first use), or ``None`` where the
    cache is disabled or cannot be written (the caller then migrates in place of copying)."""
    if not template_enabled():
        return None
    from filelock import FileLock, Timeout

    try:
        tpl = template_path()
        if inspect_file(tpl).kind == "ready":
            return tpl
        tpl.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(tpl) + ".lock", timeout=LOCK_WAIT_S):
            if inspect_file(tpl).kind == "ready":
                return tpl
            tmp = tpl.with_name(f"{tpl.name}.{os.getpid()}.tmp")
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            try:
                migrate(tmp)
                fsync(tmp)
                os.replace(tmp, tpl)
                fsync(tpl.parent, directory=True)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
        return tpl if inspect_file(tpl).kind == "ready" else None
    except (OSError, Timeout, sqlite3.Error):
        return None


def build(tmp: Path) -> None:
    """A complete fresh store at ``tmp``: a copy of the template, else MLflow's migrations."""
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tpl = _template()
    if tpl is not None:
        shutil.copyfile(tpl, tmp)
    else:
        migrate(tmp)
    kill_point("built")
    fsync(tmp)
    st = inspect_file(tmp)
    if st.kind != "ready":  # never link an incomplete schema into place
        raise StoreError(f"building a new MLflow store in {tmp} gave {st.kind} ({st.detail})")

