"""A sweep's time budget: where its wall-clock went, in named parts that add up to it.

The parts (:data:`harness.core.names.TIME_PARTS`, each logged as ``time/<part>_s``):

- ``startup``: process start to the pre-flight (imports, the command line, loading the config);
  parent only. The process start is :data:`harness.PROCESS_START`, a clock taken when the
  ``harness`` package is first imported: what the interpreter did before (its own start-up,
  ``site``, ``-m``'s look-up) is missed. A sweep started inside a longer process
  (:func:`harness.orchestrate.run.run_sweep` called from Python, a test's ``CliRunner``) starts its clock
  at the call: its ``startup`` is loading the config.
- ``preflight``: loading and checking the config, building every component once; parent only.
- ``compile``, ``train``, ``eval``, ``throughput``: the trainer's clocks (compiling or loading
  programs; training dispatches; evaluating the validation and test splits; the throughput
  protocol, its own compile included).
- ``batching``: the batching decision (``harness.train.batching``, measured vmap-or-not); parent only.
- ``tracking``: MLflow calls on the critical path (the store's preparation, the runs' creation and
  writes, the waits for the background writer).
- ``other``: the rest (data loading, checkpoints, worker start-up, host work): the wall-clock minus
  the named parts, so the parts add up to it by construction; :func:`complete` never lets it go
  negative (named parts that sum past the wall-clock are an accounting error, which the tests catch).

A vmapped batch of T trials shares one clock: each trial's run records the batch's seconds divided by
T, so the trials' figures sum to the batch's. With several workers (``--jobs N``) the workers'
seconds run in parallel: the parent reports each trainer part as its share of the workers' summed
seconds times the execution's wall-clock (:func:`scale_parallel`). Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from harness.core.names import TIME_PARTS

#: The parts a trial's run records (its unit's share): the trainer's four, tracking, other.
TRIAL_PARTS = ("compile", "train", "eval", "throughput", "tracking", "other")
#: The parts the trainer measures (``TrialResult.extra["time"]``, seconds each, per trial).
TRAINER_PARTS = ("compile", "train", "eval", "throughput")


def named_sum(parts: Mapping[str, float]) -> float:
    """The seconds of every part but ``other``."""
    return sum(float(v) for k, v in parts.items() if k != "other")


def complete(wall_s: float, parts: Mapping[str, float],
             names: Iterable[str] = TIME_PARTS) -> dict[str, float]:
    """Every part of ``names`` (0.0 where absent) with ``other`` = ``wall_s`` minus the named parts,
    never below 0."""
    out = {k: float(parts.get(k, 0.0)) for k in names if k != "other"}
    out["other"] = max(0.0, float(wall_s) - named_sum(out))
    return out


def add(total: dict[str, float], parts: Mapping[str, float], scale: float = 1.0) -> dict[str, float]:
    """``total`` with ``parts`` (times ``scale``) added to it, part by part (``total`` updated)."""
    for k, v in parts.items():
        total[k] = total.get(k, 0.0) + float(v) * scale
    return total


def scale_parallel(summed_s: float, wall_s: float) -> float:
    """The factor from the workers' summed seconds to the wall-clock they ran in: ``wall / summed``
    when the workers ran in parallel (their seconds exceed the wall-clock), else 1 (one worker, or
    workers that idled: their seconds are wall-clock already)."""
    return wall_s / summed_s if summed_s > wall_s > 0 else 1.0


def budget_line(wall_s: float, parts: Mapping[str, float], width: int = 80) -> str:
    """One line of at most ``width`` characters: ``"41.8 s: compile 37%, train 11%, ..."``: the
    parts by decreasing share, those under 0.5% left out; ``", ..."`` ends a line that had no room
    for every part."""
    head = f"{wall_s:.1f} s"
    if wall_s <= 0:
        return head
    shares = sorted(((v / wall_s, k) for k, v in parts.items() if v / wall_s >= 0.005),
                    key=lambda sk: (-sk[0], sk[1]))
    bits = [f"{k} {share:.0%}" for share, k in shares]
    line, more = head + ":", ", ..."
    for i, bit in enumerate(bits):
        sep = " " if i == 0 else ", "
        room = width - (len(more) if i < len(bits) - 1 else 0)
        if len(line) + len(sep) + len(bit) > room:
            return line + (more if i else " ...")
        line += sep + bit
    return line


def eval_note(wall_s: float, parts: Mapping[str, float], share: float = 0.5) -> str:
    """``""``, or where evaluation (``parts["eval"]``) took at least ``share`` of ``wall_s``, a
    line saying so and what cuts it: fewer validation examples (a ``tokens:`` dataset's
    ``valid_tokens``: all its validation tokens by default, up to 10,485,760) or a larger
    ``eval_every``."""
    ev = parts.get("eval", 0.0) / wall_s if wall_s > 0 else 0.0
    if ev < share:
        return ""
    return (f"evaluation took {ev:.0%} of the time: it reads the whole validation split at every "
            f"evaluation; fewer validation examples (a tokens: dataset's valid_tokens, e.g. 65536 "
            f"on a CPU proxy) or a larger eval_every cut it")


def trial_parts(trainer: Mapping[str, float], unit_share_s: float, tracking_s: float) -> dict[str, float]:
    """A trial's :data:`TRIAL_PARTS`: the trainer's parts (``trainer``, its share of its unit's), the
    MLflow seconds before its training (``tracking_s``, its share), and ``other`` = its share of the
    unit's training wall-clock (``unit_share_s``) minus the trainer's parts (data loading,
    initialisation, checkpoints)."""
    return complete(unit_share_s + tracking_s, {**trainer, "tracking": tracking_s}, TRIAL_PARTS)
