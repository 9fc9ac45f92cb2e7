"""The ``--jobs N`` worker process, both ends of its pipe: :func:`worker_main` (the worker: its
set-up before JAX is imported (device environment, the parent's datasets, the watch on its parent),
then one unit at a time until told to leave) and :class:`Worker` (the parent's handle, used by
:class:`harness.execute.executors.ProcessExecutor`).

The parent first sends the datasets it already loaded (a list, maybe empty), then ``(index, unit,
ctx, handoff)`` per unit; the worker says :data:`READY` once set up, then answers ``(index, True, outcomes)``
(:func:`harness.execute.worker.execute_unit`), or ``(index, False, exception)`` when that raised;
``None`` asks it to leave. It imports the trainer (JAX) as soon as it is set up, before its first unit
comes, so that a worker started early (``ProcessExecutor.prestart``) is ready when it does.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import sys
import threading
import time

from harness.core import conditions, watchdog
from harness.core.context import RunContext
from harness.core.spec import TrialSpec
from harness.execute import devices
from harness.execute.worker import execute_unit

#: The worker's first message: it is set up (a worker that dies before it is a start-up failure).
READY = "ready"
PARENT_POLL_S = 0.5  # how often a worker checks that the process that started it is alive


def _watch_parent(parent_pid: int, poll_s: float) -> None:
    """Daemon-thread body: end this worker (``os._exit(1)``) once its parent is gone (re-parented)."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(1)
        time.sleep(poll_s)


def _init_worker(env: dict[str, str] | None, conn) -> bool:
    """Worker set-up, before any unit, so before JAX is imported there (nothing this module imports
    at the top imports JAX): the worker's device environment
    (:func:`harness.execute.devices.worker_env`), the datasets its parent already loaded (the
    pipe's first message, :func:`harness.data.sources.preload`), and the watch on its parent.
    ``False``: the parent is gone or asked it to leave already."""
    if env is not None:
        devices.apply_worker_env(env)
    try:
        datasets = conn.recv()
    except (EOFError, OSError, KeyboardInterrupt):
        return False
    if datasets is None:
        return False
    if datasets:
        from harness.data.sources import preload

        preload(datasets)
    # A SIGKILLed sweep cannot shut its workers down: they would be re-parented and live on
    # (holding host and device memory). Each worker polls its parent pid and exits when it changes.
    # The expected pid comes from multiprocessing, so a parent that died before this ran counts too.
    # (prctl(PR_SET_PDEATHSIG) is not used: it fires when the *thread* that spawned the worker
    # exits, which is not the parent process's death.)
    parent = mp.parent_process()
    parent_pid = parent.pid if parent is not None and parent.pid is not None else os.getppid()
    threading.Thread(target=_watch_parent, args=(parent_pid, PARENT_POLL_S), daemon=True,
                     name="harness-parent-watch").start()
    return True


def worker_main(conn, env: dict[str, str] | None, board=None) -> None:
    """A ``--jobs`` worker process: receive its datasets (a list, maybe empty), then ``(index, unit,
    ctx, handoff)`` and answer ``(index, True, outcomes)`` (or ``(index, False, exception)`` when
    :func:`execute_unit` itself raised), until ``None``. ``board``: where its trainer marks each
    dispatch for the parent's watch (:mod:`harness.core.watchdog`)."""
    watchdog.install(board)
    conditions.drop_callback_failures()  # a callback that raises fails its trial in one line
    if not _init_worker(env, conn):
        return
    import harness.train.loop  # noqa: F401  (JAX and the trainer, before the first unit comes)

    try:
        conn.send(READY)
    except (OSError, ValueError):
        return

    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if msg is None:  # asked to leave, between units: nothing of this process is pending (its
            # results were sent, its checkpoints written synchronously), so it skips the interpreter's
            # tear-down of JAX (which the sweep would wait for at its end)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        i, unit, ctx, handoff = msg
        try:
            reply = (i, True, execute_unit(unit, ctx, handoff=handoff))
        except BaseException as e:  # handed to the parent, which raises it
            reply = (i, False, picklable(e))
        try:
            conn.send(reply)
        except (OSError, ValueError):
            return


@contextlib.contextmanager
def _main_hidden():
    """While a worker starts: the main module's spec and file hidden from ``multiprocessing``'s
    spawn, which would otherwise import the parent's script in the child."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__spec__", "__file__") if main is not None and k in main.__dict__}
    try:
        for k in saved:
            if k == "__spec__":
                main.__spec__ = None
            else:
                del main.__dict__[k]
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)


def picklable(e: BaseException) -> BaseException:
    """``e`` if it pickles, else a ``RuntimeError`` with its text (a worker's exception crosses a pipe)."""
    try:
        pickle.dumps(e)
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")


class Worker:
    """The parent's handle on one spawned worker process: its pipe, its device environment, the
    unit it holds, whether it said it is set up, and the board its dispatches are watched on
    (:mod:`harness.core.watchdog`). ``own_main``: the worker does not import the parent's main
    script (it runs only the harness's code and the sources its trials carry), so a script that
    runs a sweep needs no ``__main__`` guard for it."""

    def __init__(self, spawn, env: dict[str, str] | None, datasets: list | None = None,
                 own_main: bool = False) -> None:
        self.env = env
        self.conn, child = spawn.Pipe()
        self.board = watchdog.new_board(spawn)
        self.proc = spawn.Process(target=worker_main, args=(child, env, self.board), name="harness-worker")
        with _main_hidden() if own_main else contextlib.nullcontext():
            self.proc.start()
        child.close()
        self.unit: int | None = None
        self.ready = False  # the worker said it is set up (process_worker.READY)
        # The datasets go over the pipe, not in the start-up payload: a child that dies before
        # reading all of a payload over the pipe's buffer (e.g. a script without a __main__ guard,
        # re-imported by the child) leaves Process.start blocked in its write for ever, as the parent
        # holds the payload pipe's read end too. Over this pipe (the child's end closed here) a dead
        # child is an error; sent on a thread, the parent does not wait for the child's start.
        self._sending = threading.Thread(target=self._send, args=(datasets or [],), daemon=True,
                                         name="harness-worker-datasets")
        self._sending.start()

    def _send(self, datasets: list) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(datasets)

    def _sent(self, wait_s: float | None = None) -> bool:
        """Whether the datasets message is out of the way (waited for up to ``wait_s`` s)."""
        self._sending.join(wait_s)
        return not self._sending.is_alive()

    def seen_ready(self) -> bool:
        """Whether the worker said it is set up (reading that message if it waits in the pipe; it
        is the worker's first, and stays readable after the worker's death)."""
        with contextlib.suppress(EOFError, OSError):
            if not self.ready and self.conn.poll():
                self.ready = self.conn.recv() == READY
        return self.ready

    def give(self, i: int, unit: list[TrialSpec], ctx: RunContext, handoff: bool) -> bool:
        """Hand unit ``i`` to this worker; ``False`` when the worker is already gone."""
        try:
            self._sent()
            self.conn.send((i, unit, ctx, handoff))
        except (OSError, ValueError):
            return False
        self.unit = i
        return True

    def ask_to_leave(self) -> None:
        if self._sent(1.0):  # else it never read its datasets: SIGTERM and SIGKILL will do
            with contextlib.suppress(OSError, ValueError):
                self.conn.send(None)

    def stop(self, wait_s: float) -> None:
        """Ask the worker to leave, wait ``wait_s`` s, then SIGTERM, then SIGKILL."""
        self.ask_to_leave()
        self.proc.join(wait_s)
        for end in (self.proc.terminate, self.proc.kill):
            if self.proc.exitcode is None:
                end()
                self.proc.join(2.0)
        with contextlib.suppress(OSError):
            self.conn.close()


def stop_all(workers: list[Worker], wait_s: float) -> None:
    """Stop ``workers`` together: all are asked to leave first, then each gets what is left of
    ``wait_s`` (so their interpreters shut down in parallel, not one after another)."""
    for w in workers:
        w.ask_to_leave()
    end = time.monotonic() + wait_s
    for w in workers:
        w.stop(max(0.0, end - time.monotonic()))
