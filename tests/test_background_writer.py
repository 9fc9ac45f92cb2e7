"""The background writer's queue is bounded (issue 35): training waits for the writer instead of
running thousands of trials ahead of it with their results only in memory."""

from __future__ import annotations

import threading
import time

from harness.execute import background as bg


def test_submit_waits_while_the_queue_is_full_and_goes_on_as_the_writer_frees_it():
    gate = threading.Event()
    started: list[int] = []

    def submitter():
        for i in range(bg.MAX_QUEUED + 3):
            bg.submit(gate.wait, 30)  # each write blocks the writer until the gate opens
            started.append(i)

    t = threading.Thread(target=submitter, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while len(started) < bg.MAX_QUEUED and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # time enough to queue more, were the queue not full
    assert len(started) == bg.MAX_QUEUED  # the 65th submit waits for a free slot
    gate.set()
    t.join(10)
    assert not t.is_alive() and len(started) == bg.MAX_QUEUED + 3
    assert bg.flush_logging() >= 0.0
    assert not bg.PENDING
