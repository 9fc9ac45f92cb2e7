"""One stored trial trained again: ``python -m harness reproduce TRIAL_ID`` and ``harness.reproduce``.

:func:`reproduce` reads the trial's latest FINISHED run, rebuilds its :class:`TrialSpec` from
``trial.json`` (a user's source from the text the run kept, checked against its digest), trains it
again with the sweep's trainer (in its recorded vmapped batch, tag ``harness.batch``, else alone;
a stored early stop replayed at its rung), writes it with the sweep's writer into a scratch store,
and compares every logged value but the clocks (:data:`CLOCK_PREFIXES`): ``identical`` when all are
equal bit for bit. Otherwise it names the largest difference and the environment tags that differ
(:data:`VERSION_TAGS`). A CPU trial is trained on the XLA CPU pool size it recorded (tag
``xla_cpu_threads``), in a subprocess (:func:`retrain_main`) where this process's pool differs;
``threads="here"`` trains here instead. A pool of several threads may round reductions differently
from run to run, and the answer says so.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core import names
from harness.core.artifact_text import artifact_text
from harness.core.spec import TrialSpec
from harness.orchestrate.reproduce_checks import (
    ReproduceError,
    check_data,
    check_scratch,
    replayed_stop,
    stopped_at,
    stored_spec,
)

__all__ = ["CLOCK_PREFIXES", "VERSION_TAGS", "Difference", "ReproduceError", "Reproduction", "reproduce",
           "retrain_main"]

#: Metrics that measure time rather than what was computed: never compared.
CLOCK_PREFIXES = ("perf/", "time/", "compile/", names.M_SECONDS_TO_TARGET,
                  names.M_MODELED_SECONDS_TO_TARGET, names.M_COST_SECONDS_TO_TARGET)
#: The environment tags compared between the stored run and this process.
VERSION_TAGS = ("jax_version", "jaxlib_version", "harness_version", names.TAG_HARNESS_COMMIT, "device_kind",
                names.TAG_XLA_CPU_THREADS)
#: The file a subprocess that trained on the stored pool (:func:`retrain_main`) leaves in the scratch
#: folder: ``{"scratch_uri", "new_run_id", "seconds"}``; ``subprocess.log`` holds its output.
RETRAINED_JSON = "retrained.json"


@dataclass(frozen=True)
class Difference:
    """Where two logged values differ: ``metric`` at ``step``, ``stored`` and ``new`` (``None``
    where one run has no value there), ``abs_diff`` (``inf`` when one is missing)."""

    metric: str
    step: int
    stored: float | None
    new: float | None
    abs_diff: float


@dataclass
class Reproduction:
    """What :func:`reproduce` found.

    Attributes:
      trial_id, experiment: the trial and its experiment; ``stored_run_id`` the run read.
      scratch_uri, new_run_id: the scratch store and the run written there.
      identical: every compared value equal bit for bit, the same metrics at the same steps.
      compared: how many values were compared; ``metrics`` which metrics.
      largest: the largest difference (``None`` when identical).
      differences: how many values differ (a missing one counts).
      versions: ``{tag: (stored, now)}`` of the :data:`VERSION_TAGS` that differ.
      batching: the stored run's ``harness.batching`` tag (how it trained); ``status``:
        ``(stored, new)``; ``seconds``: the training's wall-clock here.
      subprocess_threads: the threads of XLA's CPU pool a subprocess trained on (the stored run's
        ``xla_cpu_threads``, where this process's pool differs); ``None``: trained in this process.
      pool_here: the threads of this process's XLA CPU pool (``None``: not a CPU, or not listed).
      stopped: ``(stored, new)`` rung steps an early-stopping rule stopped each run at (``None``:
        not stopped); a stored stop is replayed, not decided again.
      reason: why the training here failed (its run's ``harness.reason``; ``""`` unless it did).
    """

    trial_id: str
    experiment: str
    stored_run_id: str
    scratch_uri: str
    new_run_id: str
    identical: bool
    compared: int
    metrics: list[str]
    largest: Difference | None
    differences: int
    versions: dict[str, tuple[str, str]] = field(default_factory=dict)
    batching: str = ""
    #: how it trained here: ``"in its recorded batch of N"``, else ``"alone"`` and why (``""``: alone,
    #: as stored)
    batch: str = ""
    status: tuple[str, str] = ("", "")
    seconds: float = 0.0
    subprocess_threads: int | None = None
    pool_here: int | None = None
    stopped: tuple[int | None, int | None] = (None, None)
    reason: str = ""

    def lines(self) -> list[str]:
        """The report: the verdict, then what differs and where the scratch run is."""
        head = (f"trial {self.trial_id} ({self.experiment}, run {self.stored_run_id}): "
                + (f"identical: {self.compared} values of {len(self.metrics)} metrics equal bit for bit"
                   if self.identical else f"NOT identical: {self.differences} of {self.compared} values "
                   f"differ"))
        out = [head]
        if self.largest is not None:
            d = self.largest
            out.append(f"largest difference: {d.metric} at step {d.step}: stored {_num(d.stored)}, "
                       f"now {_num(d.new)} (|diff| {d.abs_diff:.6g})")
        if self.status[0] != self.status[1]:
            why = f" ({self.reason})" if self.reason and self.status[1] == "failed" else ""
            out.append(f"status: stored {self.status[0]}, now {self.status[1]}{why}")
        if self.stopped[0] is not None:
            out.append(f"stopped at step {self.stopped[0]} as the stored run (its early-stopping decision "
                       f"replayed: the peers that made it were not trained again)" if self.stopped[1] ==
                       self.stopped[0] else f"the stored run was stopped at step {self.stopped[0]}; this "
                       f"trial's early-stopping rule has no rung there now, so it could not stop there")
        if self.versions:
            out.append("versions that differ: " + "; ".join(f"{k} {a} -> {b}" for k, a, b in
                                                           ((k, *v) for k, v in self.versions.items())))
        elif not self.identical:
            out.append(f"versions: the same ({', '.join(VERSION_TAGS)})")
        if self.subprocess_threads is not None:
            out.append(f"trained in a subprocess on XLA's CPU pool of {self.subprocess_threads} "
                       f"thread{'s' * (self.subprocess_threads != 1)}, as the stored run "
                       f"({names.TAG_XLA_CPU_THREADS}; this process computes on {self.pool_here})")
        pool = max([int(t) for t in self.versions.get(names.TAG_XLA_CPU_THREADS, ()) if str(t).isdigit()]
                   + [self.subprocess_threads or 1, self.pool_here or 1])
        if not self.identical and pool > 1:
            out.append(f"XLA's CPU pool of {pool} threads may split a reduction differently from run to "
                       f"run: values may differ in float32 rounding even on the same machine")
        if self.batch:
            out.append(f"trained {self.batch}")
        out.append(f"trained again in {self.seconds:.2f} s into {self.scratch_uri} (run {self.new_run_id})")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def _repr_html_(self) -> str:
        import html

        return "<pre>" + html.escape(str(self)) + "</pre>"


def _num(v: float | None) -> str:
    return "absent" if v is None else repr(v)


def reproduce(trial_id: str, *, tracking_uri: str | None = None, scratch: str | Path | None = None,
              compile_cache: bool = True, threads: str = "stored", alone: bool = False) -> Reproduction:
    """Train the stored trial ``trial_id`` again and compare (module docstring).

    Args:
      trial_id: the trial's id (the run tag ``harness.trial_id``, 16 hex digits).
      tracking_uri: the store holding it (``None``: ``MLFLOW_TRACKING_URI``, else ``./mlflow.db``);
        only read.
      scratch: a folder for the scratch store (``mlflow.db``) and the optimizer file; default a new
        temporary folder, kept (its path is in the answer).
      compile_cache: load compiled programs from the persistent XLA cache (as a sweep does).
      threads: ``"stored"`` (default): train on the XLA CPU pool the stored run recorded (its tag
        ``xla_cpu_threads``), in a subprocess where this process's pool has another size (a few
        seconds more: the subprocess imports JAX); ``"here"``: in this process, whatever its pool (a
        different size is then named among the versions that differ). Nothing changes for a run
        without the tag (an accelerator's, or one from before it) or where this process is not on a CPU.
      alone: train the trial on its own even where it was trained in a vmapped batch (tag
        ``harness.batch``; default: in that batch again).

    Returns:
      a :class:`Reproduction`: the stored and the new run, every value compared, and the versions
      that differ.

    Raises:
      ReproduceError: no FINISHED run of the trial, its recorded spec or source does not hash to its
        id, its data is unreadable or changed, or the subprocess training on the stored pool ended
        without writing its run (its last line of output and the log's path in the message).
      UsageError: ``compile_cache`` or ``alone`` is not a bool.
      ValueError: ``threads`` is neither ``"stored"`` nor ``"here"``; its subclass
        :class:`harness.core.filters.BadIdError`: ``trial_id`` is not 16 hexadecimal digits.
      harness.tracking.store_errors.TrackingUnavailableError: a store cannot be opened.
    """
    from harness.core.filters import check_trial_id
    from harness.orchestrate.api import check_option_types
    from harness.tracking.client import prepare_store
    from harness.tracking.uris import resolve_tracking_uri

    check_option_types(compile_cache=compile_cache, alone=alone)  # alone="no" would be true
    if threads not in ("stored", "here"):
        raise ValueError(f"threads={threads!r}: 'stored' (the stored run's XLA CPU pool) or 'here' "
                         f"(this process's)")
    trial_id = check_trial_id(trial_id)  # before any query: never pasted into a filter unchecked
    uri = resolve_tracking_uri(tracking_uri)
    client = prepare_store(uri, create=False)
    run, experiment = _stored_run(client, trial_id)
    folder = Path(scratch) if scratch is not None else Path(tempfile.mkdtemp(prefix="harness-reproduce-"))
    check_scratch(folder, uri)  # never written beside the stored runs
    folder.mkdir(parents=True, exist_ok=True)
    check_data(spec := _stored_spec(client, run, trial_id, folder))  # before any training
    stored_pool = _count(run.data.tags.get(names.TAG_XLA_CPU_THREADS))
    here = _pool_here()
    sub = stored_pool if threads == "stored" and stored_pool and here and here != stored_pool else None
    batch, how = ([spec], "alone, as asked") if alone else _batch_of(client, run, spec, folder)
    if sub is None:
        scratch_uri, new_client, new_run_id, seconds = _retrain(run, experiment, batch, folder, compile_cache)
    else:
        scratch_uri, new_run_id, seconds = _in_subprocess(trial_id, run.info.run_id, uri, folder,
                                                          compile_cache, sub, alone)
        new_client = prepare_store(scratch_uri, create=False)
    compared, metrics, diffs = _compare(client, run, new_client, new_run_id)
    largest = max(diffs, key=lambda d: d.abs_diff) if diffs else None
    new = new_client.get_run(new_run_id)
    return Reproduction(
        trial_id=trial_id, experiment=experiment, stored_run_id=run.info.run_id, scratch_uri=scratch_uri,
        new_run_id=new_run_id, identical=not diffs, compared=compared, metrics=metrics, largest=largest,
        differences=len(diffs), versions=_versions(run.data.tags, new.data.tags),
        batching=run.data.tags.get(names.TAG_BATCHING, ""), batch=how,
        status=(run.data.tags.get(names.TAG_STATUS, ""), new.data.tags.get(names.TAG_STATUS, "")),
        seconds=seconds, subprocess_threads=sub, pool_here=here, stopped=(stopped_at(run), stopped_at(new)),
        reason=new.data.tags.get(names.TAG_REASON, ""))


def _count(tag: str | None) -> int | None:
    """A thread count tag as an int (``None``: absent or not a count)."""
    return int(tag) if tag and tag.isdigit() and int(tag) > 0 else None


def _pool_here() -> int | None:
    """The threads of this process's XLA CPU pool (starts JAX's client); ``None`` off a CPU."""
    from harness.tracking.provenance import environment_tags

    return _count(environment_tags().get(names.TAG_XLA_CPU_THREADS))


def _batch_of(client, run, spec: TrialSpec, folder: Path) -> tuple[list[TrialSpec], str]:
    """The specs to train, ``spec`` first (its stored batch, tag ``harness.batch``, each member from its
    own run; else ``spec`` alone), and how (:attr:`Reproduction.batch`)."""
    ids = [t for t in run.data.tags.get(names.TAG_BATCH, "").split(",") if t]
    label = run.data.tags.get(names.TAG_BATCHING, "")
    if run.data.tags.get(names.TAG_BATCH_FALLBACK_REASON):
        return [spec], ""
    if not ids:
        return [spec], (f"alone: the stored trial trained in a vmapped batch ({label}) whose members "
                        f"were not recorded; values may differ in float32 rounding, and so may whether "
                        f"it diverges") if label.startswith("vmap(") else ""
    if len(ids) < 2 or any(len(t) != 16 for t in ids):
        return [spec], f"alone: its batch is not listed ({ids[0][:60]}); values may differ"
    out = [spec]
    for tid in ids:
        if tid in (spec.trial_id, spec.legacy_trial_id):
            continue
        try:
            other, _ = _stored_run(client, tid)
            out.append(_stored_spec(client, other, tid, folder))
        except ReproduceError as e:
            return [spec], f"alone: its batch's trial {tid} cannot be rebuilt ({e}); values may differ"
    if any(s.batch_key() != spec.batch_key() for s in out):
        return [spec], "alone: its batch's stored trials no longer share a vmapped program; values may differ"
    return out, f"in its recorded batch of {len(out)} (tag {names.TAG_BATCH}), as stored"


def _retrain(run, experiment: str, batch: list[TrialSpec], folder: Path,
             compile_cache: bool) -> tuple[str, Any, str, float]:
    """Train ``batch[0]`` in this process (vmapped with the rest of ``batch`` when there is more) and
    write it into ``folder``'s scratch store: (scratch URI, its client, the new run's id, training
    seconds). A trainer's exception is a FAILED run, as in a sweep."""
    from harness.train import compile_cache as cache
    from harness.train.loop import run_trial, run_trials_batched

    cache.enable(compile_cache)
    spec = batch[0]
    t0 = time.perf_counter()
    t0_ms = int(time.time() * 1000)
    try:
        result = (run_trials_batched(batch, measure_perf=False, gate=replayed_stop(run))[0] if len(batch) > 1
                  else run_trial(spec, measure_perf=False, gate=replayed_stop(run)))  # stopped where it was
    except Exception as e:  # recorded as a failed trial, as a sweep records it
        import traceback

        from harness.core.spec import TrialResult

        result = TrialResult(spec=spec, status="failed", reason=f"{type(e).__name__}: {e}\n"
                             + traceback.format_exc())
    seconds = time.perf_counter() - t0
    scratch_uri, new_client, new_run_id = _write(folder, experiment, run, result, t0_ms)
    return scratch_uri, new_client, new_run_id, seconds


#: What the subprocess runs: this process's ``sys.path`` (so a module source imports as it does
#: here), then :func:`retrain_main` on the remaining arguments.
_CHILD = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
          "from harness.orchestrate.reproduce import retrain_main; retrain_main(sys.argv[2:])")


def _in_subprocess(trial_id: str, run_id: str, uri: str, folder: Path, compile_cache: bool,
                   threads: int, alone: bool = False) -> tuple[str, str, float]:
    """Train in a subprocess whose XLA CPU pool has ``threads`` threads (``HARNESS_XLA_CPU_THREADS``
    and ``NPROC`` set before it imports anything): (scratch URI, new run id, training seconds). Its
    output goes to ``folder/subprocess.log``.

    Raises:
      ReproduceError: it ended without writing :data:`RETRAINED_JSON` (exit code, last line, log).
    """
    from harness.core.xla_threads import ENV, XLA_ENV

    out, log = folder / RETRAINED_JSON, folder / "subprocess.log"
    out.unlink(missing_ok=True)
    env = {**os.environ, ENV: str(threads), XLA_ENV: str(threads)}
    argv = [sys.executable, "-c", _CHILD, json.dumps(sys.path), trial_id, run_id, uri, str(folder.resolve()),
            "1" if compile_cache else "0", "1" if alone else "0"]
    with open(log, "w", encoding="utf-8") as f:
        code = subprocess.run(argv, env=env, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
    if code != 0 or not out.exists():
        text = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        raise ReproduceError(f"the subprocess training trial {trial_id} on XLA's CPU pool of {threads} "
                             f"threads ended with exit {code}: {text[-1] if text else '(no output)'} "
                             f"(its output: {log}; threads='here' trains in this process)")
    d = json.loads(out.read_text(encoding="utf-8"))
    return d["scratch_uri"], d["new_run_id"], float(d["seconds"])


def retrain_main(argv: list[str]) -> None:
    """The subprocess's entry (:func:`reproduce` with ``threads="stored"``): ``argv`` is ``[trial_id,
    stored run id, tracking URI, scratch folder, "1"|"0" (compile cache), "1"|"0" (alone)]``; trains
    the run's spec (in its batch, :func:`_batch_of`) in this process and writes ``{"scratch_uri",
    "new_run_id", "seconds"}`` to ``folder/``:data:`RETRAINED_JSON`. Errors propagate (a traceback,
    a non-zero exit)."""
    from harness.core.cache_files import write_json_atomic
    from harness.tracking.client import prepare_store

    trial_id, run_id, uri, where, cc, alone = argv
    client = prepare_store(uri, create=False)
    run = client.get_run(run_id)
    experiment = client.get_experiment(run.info.experiment_id).name
    folder = Path(where)
    spec = _stored_spec(client, run, trial_id, folder)
    batch = [spec] if alone == "1" else _batch_of(client, run, spec, folder)[0]
    scratch_uri, _, new_run_id, seconds = _retrain(run, experiment, batch, folder, cc == "1")
    write_json_atomic(folder / RETRAINED_JSON, {"scratch_uri": scratch_uri, "new_run_id": new_run_id,
                                                "seconds": seconds})


def _stored_run(client, trial_id: str) -> tuple[Any, str]:
    """The latest FINISHED run of ``trial_id`` in any experiment, and its experiment's name.

    Raises:
      ReproduceError: no FINISHED run (naming the statuses of the runs there are).
    """
    from mlflow.entities import ViewType

    from harness.core.filters import tag_is

    flt = tag_is(names.TAG_TRIAL_ID, trial_id)  # checked by reproduce: 16 hex digits
    found = []
    for exp in client.search_experiments(view_type=ViewType.ALL):
        found += [(r, exp.name) for r in client.search_runs([exp.experiment_id], flt,
                                                            run_view_type=ViewType.ACTIVE_ONLY,
                                                            max_results=1000)]
    finished = [(r, e) for r, e in found if r.info.status == "FINISHED"]
    if not finished:
        have = ", ".join(sorted({r.info.status for r, _ in found})) or "none"
        raise ReproduceError(f"no FINISHED run of trial {trial_id!r} in the store (its runs: {have})")
    return max(finished, key=lambda re_: (re_[0].info.start_time or 0, re_[0].info.run_id))


def _stored_spec(client, run, trial_id: str, folder: Path) -> TrialSpec:
    """The run's ``trial.json`` as a TrialSpec, a user's optimizer rebuilt from the run's copy of
    its file (written into ``folder/source``).

    Raises:
      ReproduceError: ``trial.json`` missing, or the spec (or the source) not hashing to ``trial_id``.
    """
    text = artifact_text(client, run.info.run_id, names.ARTIFACT_TRIAL, folder)
    if text is None:
        raise ReproduceError(f"run {run.info.run_id} of trial {trial_id} has no {names.ARTIFACT_TRIAL}")
    spec = stored_spec(text, run, trial_id)  # a damaged record is said so
    if spec.optimizer_source:
        spec = dataclasses.replace(spec, optimizer_source_ref=_source_ref(client, run, spec, folder))
    if spec.model_source:
        spec = dataclasses.replace(spec, model_source_ref=_source_ref(client, run, spec, folder, "model"))
    return spec


def _source_ref(client, run, spec: TrialSpec, folder: Path, which: str = "optimizer") -> tuple:
    """``{which}_source_ref`` of a user's optimizer (or model): a file from the run's ``source/``
    (``source/model/``) artifact, a module or Optax as installed now; its digest must be the one
    in the trial's id.

    Raises:
      ReproduceError: the file is not in the run, or the digest differs.
    """
    from harness.core.source import SourceError, parse_source

    text = getattr(spec, f"{which}_source")
    want = getattr(spec, f"{which}_source_hash")
    kept = names.ARTIFACT_SOURCE_DIR + ("/model" if which == "model" else "")
    kind_file = text.startswith("algoperf:") or text.rpartition(":")[0].endswith(".py")
    try:
        if kind_file:
            rel = text[len("algoperf:"):] if text.startswith("algoperf:") else text.rpartition(":")[0]
            name = os.path.basename(rel)
            code = artifact_text(client, run.info.run_id, f"{kept}/{name}", folder)
            if code is None:
                raise ReproduceError(f"run {run.info.run_id} kept no copy of {name} ({kept}/{name})")
            src = folder / kept
            src.mkdir(parents=True, exist_ok=True)
            (src / name).write_text(code, encoding="utf-8")
            local = f"algoperf:{name}" if text.startswith("algoperf:") \
                else f"{name}:{text.rpartition(':')[2]}"
            ref = dataclasses.replace(parse_source(local, str(src)), text=text)
        else:
            ref = parse_source(text, ".")
    except SourceError as e:
        raise ReproduceError(str(e)) from None
    if ref.digest != want:
        raise ReproduceError(f"source {text!r} digests to {ref.digest} now, the trial ran "
                             f"{want} (a package's version, or the file, differs)")
    return (ref.kind, ref.target, ref.function, ref.digest, ref.code)


def _write(folder: Path, experiment: str, run, result, t0_ms: int) -> tuple[str, Any, str]:
    """The retrained result in a new SQLite store in ``folder``, written by the sweep's writer."""
    from harness.core.context import RunContext
    from harness.core.outcome import run_name
    from harness.execute.writing import resolved_defaults
    from harness.tracking.client import get_or_create_experiment, prepare_store
    from harness.tracking.provenance import harness_commit
    from harness.tracking.trial_run import finish_run, trial_tags

    uri = f"sqlite:///{(folder / 'mlflow.db').resolve()}"
    client = prepare_store(uri)
    exp_id = get_or_create_experiment(client, experiment, uri)
    tags = run.data.tags
    ctx = RunContext(tracking_uri=uri, experiment_id=exp_id, parent_run_id="",
                     sweep_id=tags.get(names.TAG_SWEEP_ID, ""), sweep=result.spec.sweep,
                     harness_commit=harness_commit(), config_commit=tags.get(names.TAG_CONFIG_COMMIT, ""),
                     measure_perf=False, log_dataset=False)
    spec = result.spec
    new = client.create_run(exp_id, tags={k: v for k, v in trial_tags(spec, ctx).items()
                                          if k != names.TAG_PARENT_RUN},
                            run_name=f"reproduce-{run_name(spec)}")
    finish_run(client, new.info.run_id, result, t0_ms, ctx, defaults=resolved_defaults(spec))
    return uri, client, new.info.run_id


def _is_clock(metric: str) -> bool:
    return metric.startswith(CLOCK_PREFIXES) or metric == names.M_WALL_S


def _history(client, run_id: str, key: str) -> dict[int, float]:
    """step → value of one metric (a step logged twice: the later value)."""
    out: dict[int, float] = {}
    for m in sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp)):
        out[int(m.step)] = float(m.value)
    return out


def _compare(client, run, new_client, new_run_id: str) -> tuple[int, list[str], list[Difference]]:
    """Every value of every metric but the clocks, both runs: (values compared, metrics,
    differences)."""
    new_metrics = new_client.get_run(new_run_id).data.metrics
    keys = sorted(k for k in set(run.data.metrics) | set(new_metrics) if not _is_clock(k))
    compared, diffs = 0, []
    for key in keys:
        a = _history(client, run.info.run_id, key) if key in run.data.metrics else {}
        b = _history(new_client, new_run_id, key) if key in new_metrics else {}
        for step in sorted(set(a) | set(b)):
            compared += 1
            x, y = a.get(step), b.get(step)
            if x is None or y is None:
                diffs.append(Difference(key, step, x, y, math.inf))
            elif x != y and not (math.isnan(x) and math.isnan(y)):
                diffs.append(Difference(key, step, x, y, abs(x - y)))
    return compared, keys, diffs


def _versions(stored: dict[str, str], now: dict[str, str]) -> dict[str, tuple[str, str]]:
    """The :data:`VERSION_TAGS` whose values differ, ``{tag: (stored, now)}``."""
    return {t: (stored.get(t, "(not recorded)"), now.get(t, "(not recorded)")) for t in VERSION_TAGS
            if stored.get(t) != now.get(t)}
