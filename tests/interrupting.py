"""Checkpoints that interrupt a trial, for the bit-identical-resume tests (test_checkpoint,
test_eval_hook, test_algoperf): :class:`Interrupting` raises :class:`Interrupt` after chunk end
number ``stop_after`` (1-based), once that chunk's checkpoint is saved."""

from __future__ import annotations

from harness.train.checkpoint import UnitCheckpoints


class Interrupt(Exception):
    pass


class Interrupting(UnitCheckpoints):
    """Raises after chunk end number ``stop_after`` (1-based), once that chunk's checkpoint is saved."""

    def __init__(self, *a, stop_after: int, **kw):
        super().__init__(*a, **kw)
        self.calls, self.stop_after = 0, stop_after

    def after_chunk(self, *a, **kw):
        super().after_chunk(*a, **kw)
        self.calls += 1
        if self.calls == self.stop_after:
            raise Interrupt(self.calls)
