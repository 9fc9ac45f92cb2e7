"""The per-trial bookkeeping of training: curves, divergence, targets, test numbers, the result.

One :class:`TrialTrack` per trial of a work unit (one, or T trained together under ``jax.vmap``)
records the rows the loop hands it and decides, per trial:

* **Divergence** (:meth:`TrialTrack.check_divergence`): the first non-finite train loss, or the first
  train loss above ``spec.divergence_loss_factor`` × the trial's initial train loss (the rule applies
  only when that is finite and > 0), ends the trial at that step (1-based). The same two rules on
  each later validation evaluation's loss (against the step-0 evaluation's) end it at the
  evaluation's step: the train loss of update k is computed before update k, so a blow-up of the
  last update shows nowhere else.
* **Targets** (:meth:`TrialTrack.add_eval`): the first validation evaluation whose metric
  (``valid/loss``, ``valid/accuracy`` or ``valid/<name>``) reaches ``spec.target`` sets
  ``steps_to_target`` and ``seconds_to_target``, counting evaluations after training started only,
  as AlgoPerf's runner, whose first evaluation follows the first update: a target the step-0
  evaluation (at initialisation, clock 0) already meets is reached at the first later evaluation
  that meets it too (every optimizer of a sweep starts from the same initialisation, so all of them
  meet it at step 0, and a time of 0 would make time ratios 0/0); ``target_at_init`` records it, and
  the summary says per task which runs met it again, at which step, and which never did
  (:mod:`harness.orchestrate.at_init`).

* **Rungs** (:meth:`TrialTrack.record_rung`, :mod:`harness.core.rungs`): a trial with an
  ``early_stop`` rule records its value at each rung step it reaches (``rungs``, ``[step, value]``
  pairs); :meth:`TrialTrack.stop` ends it there (``stopped_step``, ``stop_reason``): status
  ``stopped``, its curves up to the rung, no test evaluation.

Checkpoints (:mod:`harness.train.checkpoint_state`) save and restore a track's fields as JSON, so
every field but ``spec`` is plain data.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from harness.core.rungs import rule_of, rung_value
from harness.core.spec import Curves, PerfResult, TrialResult, TrialSpec

__all__ = ["TrialTrack", "eval_points"]


def eval_points(steps: int, every: int, rungs: list[int] | tuple[int, ...] = ()) -> list[int]:
    """The steps after which the validation split is evaluated: every ``every`` steps, each of
    ``rungs`` below ``steps`` (an early-stopping trial's rung steps) and the last; sorted.

    Raises:
      ValueError: ``steps`` or ``every`` < 1.
    """
    if steps < 1 or every < 1:
        raise ValueError(f"steps and eval_every must be >= 1, got {steps}, {every}")
    pts = set(range(every, steps, every)) | {int(r) for r in rungs if 0 < int(r) < steps}
    return [*sorted(pts), steps]


@dataclasses.dataclass
class TrialTrack:
    """One trial's curves and bookkeeping while it trains (``active`` until it diverges)."""

    spec: TrialSpec
    curves: Curves = dataclasses.field(default_factory=Curves)
    active: bool = True
    diverged_step: int | None = None
    diverged_reason: str = ""
    initial_loss: float | None = None
    steps_to_target: int | None = None
    seconds_to_target: float | None = None
    target_at_init: bool = False  # met at step 0 (not counted: the summary warns)
    test_loss: float | None = None
    test_metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    stopped_step: int | None = None
    stop_reason: str = ""
    rungs: list[list[Any]] = dataclasses.field(default_factory=list)  # [[step, value], ...]

    def rung_steps(self) -> list[int]:
        """The rung steps of the trial's ``early_stop`` rule (``[]``: none)."""
        return rule_of(self.spec.early_stop).get("rungs", [])

    def record_rung(self, step: int) -> float:
        """The trial's value at rung ``step`` (:func:`harness.core.rungs.rung_value` of its rule's
        metric on its validation curve so far), recorded in ``rungs``."""
        rule, c = rule_of(self.spec.early_stop), self.curves
        name = str(rule.get("metric", "valid/accuracy")).split("/", 1)[-1]
        vals = c.eval_loss if name == "loss" else c.eval_accuracy if name == "accuracy" \
            else c.eval_metrics.get(name, [])
        v = rung_value(rule, c.eval_step, vals, step)
        self.rungs.append([int(step), float(v)])
        return v

    def stop(self, step: int, reason: str) -> None:
        """End the trial at rung ``step`` (its early-stopping rule decided it, ``reason``)."""
        self.active, self.stopped_step, self.stop_reason = False, int(step), reason

    def check_divergence(self, step: int, loss: float) -> bool:
        """Record ``loss`` of ``step`` against the divergence rules (module docstring); True when
        it ends the trial."""
        if self.initial_loss is None:
            self.initial_loss = loss
        return self._diverges("train", step, loss, self.initial_loss)

    def _eval_diverged(self, step: int, loss: float) -> bool:
        """The divergence rules on the validation loss of the evaluation after ``step`` updates
        (module docstring): the train loss of update k is computed before it, so only this sees the
        blow-up of a trial's last update. True when it ends the trial at ``step``."""
        c = self.curves
        first = c.eval_loss[0] if c.eval_step and c.eval_step[0] == 0 else math.nan
        return self._diverges("validation", step, loss, first)

    def _diverges(self, kind: str, step: int, loss: float, initial: float) -> bool:
        """The one divergence rule for the ``kind`` (train or validation) loss: non-finite, or above
        the spec's loss factor × its ``initial`` value (when that is finite and positive); ends the
        trial at ``step`` with the reason and returns True, else False."""
        factor = self.spec.divergence_loss_factor
        if not math.isfinite(loss):
            self.diverged_reason = f"non-finite {kind} loss at step {step}"
        elif factor is not None and math.isfinite(initial) and initial > 0 and loss > factor * initial:
            self.diverged_reason = (f"{kind} loss {loss:.4g} at step {step} exceeds {factor:g}x the "
                                    f"initial {kind} loss {initial:.4g}")
        else:
            return False
        self.active, self.diverged_step = False, step
        return True

    def add_train(self, step: int, wall: float, dt: float, losses: Any) -> None:
        """The rows of one chunk of ``n = len(losses)`` updates after ``step`` updates and ``wall``
        seconds, which took ``dt`` seconds (rows interpolated linearly inside it); stops at the
        update that diverges (its row is kept)."""
        c, n = self.curves, len(losses)
        for m in range(n):
            c.train_step.append(step + m + 1)
            c.train_wall_s.append(wall + dt * (m + 1) / n)
            v = float(losses[m])
            c.train_loss.append(v)
            if self.check_divergence(step + m + 1, v):
                break

    def add_eval(self, step: int, wall: float, loss: float, metrics: dict[str, float]) -> None:
        """One validation evaluation: ``loss`` and ``{metric name: value}`` of the model."""
        c = self.curves
        c.eval_step.append(step)
        c.eval_wall_s.append(wall)
        c.eval_loss.append(loss)
        c.eval_accuracy.append(metrics.get("accuracy", math.nan))
        for k, v in metrics.items():
            if k != "accuracy":
                c.eval_metrics.setdefault(k, []).append(v)
        if step > 0 and self._eval_diverged(step, loss):
            return
        tgt = self.spec.target
        if tgt is not None and self.steps_to_target is None:
            name = tgt.metric.split("/", 1)[-1]
            value = loss if name == "loss" else metrics.get(name, math.nan)
            if step == 0 and tgt.reached(value):
                self.target_at_init = True  # not counted: AlgoPerf's runner has no step-0 evaluation
            elif step > 0 and tgt.reached(value):
                self.steps_to_target, self.seconds_to_target = step, wall

    def result(self, *, perf: PerfResult | None, compile_s: float, extra: dict[str, Any]) -> TrialResult:
        """The trial's :class:`~harness.core.spec.TrialResult` (``"diverged"``, ``"stopped"`` or
        ``"finished"``)."""
        c = self.curves
        status = "diverged" if self.diverged_step is not None else \
            "stopped" if self.stopped_step is not None else "finished"
        return TrialResult(
            spec=self.spec,
            status=status,
            curves=c,
            perf=perf,
            reason=self.diverged_reason or self.stop_reason,
            diverged_step=self.diverged_step,
            stopped_step=self.stopped_step,
            rungs={int(s): float(v) for s, v in self.rungs},
            steps_to_target=self.steps_to_target,
            seconds_to_target=self.seconds_to_target,
            final_valid_loss=c.eval_loss[-1] if c.eval_loss else None,
            final_valid_accuracy=c.eval_accuracy[-1] if c.eval_accuracy else None,
            test_loss=self.test_loss,
            test_accuracy=self.test_metrics.get("accuracy"),
            test_metrics={k: v for k, v in self.test_metrics.items() if k != "accuracy"},
            train_seconds=c.train_wall_s[-1] if c.train_wall_s else 0.0,
            compile_seconds=compile_s,
            extra={**extra, "target_at_init": True} if self.target_at_init else extra,
        )
