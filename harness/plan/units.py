"""The work units of a sweep: :func:`group_units` forms them from its trials (vmappable siblings
together when batching is on/auto, else one trial each) and says why, for the ``harness.batching``
tag. (Which trials are done is the store's: :mod:`harness.orchestrate.resume`.)
"""

from __future__ import annotations

from collections.abc import Callable

from harness.core.names import TAG_BATCH, TAG_BATCHING
from harness.core.spec import TrialSpec


def group_units(specs: list[TrialSpec], batching: str,
                should_batch: Callable[[list[TrialSpec]], bool] | None = None,
                labels: dict[str, str] | None = None,
                on_measure: Callable[[int, int], None] | None = None) -> list[list[TrialSpec]]:
    """Work units: single trials (``off``) or groups of equal :meth:`TrialSpec.batch_key`
    (``on``; ``auto`` keeps a group only where ``should_batch(group)`` — by default
    ``harness.train.loop.should_batch``, measured by :mod:`harness.batching` — says batching pays, or
    where its trials ask for trial-parallel training, ``parallelism: {shard: trials}`` on more than
    one device).

    A batched group larger than device memory holds is split into programs of as many trials as
    fit (:func:`harness.train.batching.group_size`).

    ``labels``, when given, is filled with ``trial_id -> how its unit trains and why`` (the
    ``harness.batching`` tag: ``"vmap(8): measured 1.21x"``, ``"sequential: batching off"``, ...).
    ``on_measure(i, n)``, when given, is called before ``auto`` decides the ``i``-th of the ``n``
    groups it decides (each may compile and time programs: a stage line's count)."""
    labels = {} if labels is None else labels
    if batching == "off":
        labels.update((s.trial_id, "sequential: batching off") for s in specs)
        return [[s] for s in specs]
    groups: dict[tuple, list[TrialSpec]] = {}
    for s in specs:
        groups.setdefault(s.batch_key(), []).append(s)
    units = []
    decided = [g for g in groups.values()  # the groups auto measures (or finds in its cache)
               if len(g) > 1 and not (g[0].shard == "trials" and g[0].devices != 1)]
    turn = {id(g): i for i, g in enumerate(decided, 1)}
    for g in groups.values():
        trial_parallel = g[0].shard == "trials" and g[0].devices != 1
        if len(g) > 1 and batching == "auto" and not trial_parallel:
            if on_measure is not None:
                on_measure(turn[id(g)], len(decided))
            if should_batch is None:
                from harness.train.loop import should_batch as sb

                should_batch = sb
            units.extend(_auto_units(g, should_batch, labels))
            continue
        elif trial_parallel and len(g) > 1:
            label = f"vmap({len(g)}): trial-parallel over parallelism.devices={g[0].devices}"
        else:
            label = f"vmap({len(g)}): batching on" if len(g) > 1 else "sequential: single trial"
        labels.update((s.trial_id, label) for s in g)
        units.append(g)
    return units


#: How ``batching: auto`` decides a group it has not decided before (the dry runs' words).
_AUTO_RULE = "trials that fit device memory; on a CPU then timed: vmap where >= {}x"


def plan_lines(specs: list[TrialSpec], batching: str) -> list[str]:
    """What the dry run says of ``specs``' work units (decisions already known are named, nothing is
    compiled or timed) and of the device memory their datasets will hold (:func:`data_line`)."""
    from harness.train import batching as _batching

    groups: dict[tuple, list[TrialSpec]] = {}
    for s in specs:
        groups.setdefault(s.batch_key(), []).append(s)
    many = [g for g in groups.values() if len(g) > 1]
    line = (f"batching {batching}: {len(specs)} trials, {len(groups)} programs; {len(many)} groups of "
            f"siblings (seed, step size)")
    if batching == "auto" and many:
        known = [_batching.known(g) for g in many]
        counts: dict[str, int] = {}
        for d in known:
            if d is not None:
                counts[d.label] = counts.get(d.label, 0) + 1
        line += "".join(f"; {n} x {label}" for label, n in counts.items())
        if (todo := sum(d is None for d in known)):
            line += f"; {todo} decided at the start ({_AUTO_RULE.format(_batching.MIN_SPEEDUP)})"
    return [line, data_line(specs)]


def search_lines(candidates: list[TrialSpec], batching: str) -> list[str]:
    """What an adaptive search's dry run says of its work units: each round's proposals are grouped
    as :func:`group_units` groups a grid's, except trials with an early-stopping rule, which train
    one by one (each stops at its own rung); then :func:`data_line` of its ``candidates``."""
    from harness.train import batching as _batching

    rule = [s for s in candidates if s.early_stop]
    plain = [s for s in candidates if not s.early_stop]
    if batching == "off":
        return ["batching off: every trial the search proposes trains one by one", data_line(candidates)]
    parts = []
    if rule:
        parts.append(f"trials with an early-stopping rule ({len(rule)} of the {len(candidates)} "
                     f"candidates, and the later proposals that carry one) train one by one: each "
                     f"may stop at its own rung, so vmapping them would save no compute")
    how = ("vmapped together" if batching == "on" else
           f"vmapped where it pays, decided per round ({_AUTO_RULE.format(_batching.MIN_SPEEDUP)})")
    parts.append(f"the trials of one round that differ only in seed and step size"
                 f"{' and carry no rule (such as audits)' if rule else ''}"
                 f" are {how}")
    if plain:
        n = len({s.batch_key() for s in plain})
        parts.append(f"the {len(plain)} candidates{' without a rule' if rule else ''} form {n} such "
                     f"group{'s' * (n != 1)} (a round trains all or part of one)")
    lines = [f"batching {batching}: " + "; ".join(parts)]
    return [*lines, data_line(candidates)]


def data_line(specs: list[TrialSpec]) -> str:
    """The device memory ``specs``' datasets will hold (one device copy each), for a dry run;
    datasets that cannot be loaded yet are named, not counted."""
    from harness.data.sources import load_dataset
    from harness.train import device_data
    from harness.train.capacity import mib

    pairs, missing = [], []
    for s in {(s.dataset, s.dataset_hparams): s for s in specs}.values():
        try:
            pairs.append((load_dataset(s.dataset, **s.hparams("dataset")),
                          "float64" if s.dtype == "float64" else "float32"))
        except Exception as e:  # e.g. a TFDS dataset not prepared yet: the run will say so
            missing.append(f"{s.dataset}: {type(e).__name__}")
    text = (f"device memory for data: {mib(device_data.planned_bytes(pairs))} ({len(pairs)} "
            f"dataset{'s' * (len(pairs) != 1)}, one device copy each")
    return text + (f"; not counted: {', '.join(missing)})" if missing else ")")


#: The longest ``harness.batch`` tag written (MLflow keeps 8,000 characters): about 280 trial ids.
MAX_BATCH_TAG = 5000


def batch_members(units: list[list[TrialSpec]]) -> dict[str, str]:
    """``trial_id -> the sorted, comma-separated trial ids of its unit`` for every unit of more than
    one trial (the tag ``harness.batch``: the batch a vmapped trial was trained in)."""
    out = {}
    for u in units:
        if len(u) > 1:
            ids = ",".join(sorted(s.trial_id for s in u))
            if len(ids) > MAX_BATCH_TAG:  # past MLflow's tag length: the count only
                ids = f"{len(u)} trials (too many to list)"
            out.update(dict.fromkeys((s.trial_id for s in u), ids))
    return out


def unit_tags(tags: dict[str, dict[str, str]], batching: dict[str, str],
              units: list[list[TrialSpec]]) -> dict[str, dict[str, str]]:
    """``tags`` (trial id -> its run's tags) plus each trial's ``harness.batching`` label and, in a
    unit of several, its batch (``harness.batch``, :func:`batch_members`)."""
    out = {tid: dict(t) for tid, t in tags.items()}
    for tid, label in batching.items():
        out.setdefault(tid, {})[TAG_BATCHING] = label
    for tid, ids in batch_members(units).items():
        out.setdefault(tid, {})[TAG_BATCH] = ids
    return out


def _auto_units(g: list[TrialSpec], should_batch: Callable[[list[TrialSpec]], bool],
                labels: dict[str, str]) -> list[list[TrialSpec]]:
    """``batching: auto``'s units of group ``g``: one program of as many trials as fit device memory
    (:func:`harness.train.batching.group_size`) where ``should_batch(g)``, else one per trial; each
    trial's label into ``labels``."""
    from harness.train import batching as _batching

    if not should_batch(g):
        label = _batching.describe(g, False)  # once per group: it compares all of g's keys
        labels.update((s.trial_id, label) for s in g)
        return [[s] for s in g]
    label = _batching.describe(g, True)
    size = _batching.group_size(g)  # as many trials per program as fit device memory
    labels.update((s.trial_id, label) for s in g)
    return [g[i:i + size] for i in range(0, len(g), size)]
