"""harness.batching: the vmap-or-sequence decision, measured once per (program, T, device), cached."""

from __future__ import annotations

import json
import threading

import jax
import jax.numpy as jnp
import pytest
from conftest import make_spec

from harness.data.sources import load_dataset
from harness.plan.units import group_units
from harness.train import batching
from harness.train import loop as trainer


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty cache dir and in-process cache; no HARNESS_BATCH override."""
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("HARNESS_BATCH", raising=False)
    monkeypatch.setattr(batching, "_MEM", {})
    return tmp_path


def _no_measure(specs):
    raise AssertionError("measured a key that should not be measured")


def test_measures_once_then_reads_the_cache(fresh, monkeypatch):
    """The decision's bookkeeping, with a stand-in measurement (the real one, on the trainer's own
    compiled chunks, runs in tests/test_gpu_check.py, where those programs are compiled anyway)."""
    monkeypatch.setattr(batching, "measure_speedup", lambda specs: (1.3125, 4))
    monkeypatch.setattr(batching, "_fit", lambda specs, device_bytes: (None, ""))
    specs = [make_spec(seed=0), make_spec(seed=1, optimizer_hparams={"step_size": 0.1})]
    d = batching.decide(specs)
    assert (d.source, d.speedup, d.batch, d.label) == ("measured", 1.3125, True, "vmap(2): measured 1.31x")
    assert trainer.should_batch(specs) is True
    disk = json.loads((fresh / "batching.json").read_text())
    (key, entry), = disk.items()
    assert key.endswith(f"|T=2|{batching.signature(specs[0])}") and entry["reps"] == 4
    assert entry["speedup"] == pytest.approx(d.speedup, abs=1e-4) and entry["label"] == d.label
    # never measured again: not in this process, not in the next one (empty in-process cache)
    monkeypatch.setattr(batching, "measure_speedup", _no_measure)
    assert batching.decide(specs) is d
    monkeypatch.setattr(batching, "_MEM", {})
    again = batching.decide([make_spec(seed=5), make_spec(seed=6)])  # other seeds: same key
    assert again.source == "cached" and again.label == d.label and again.batch is d.batch
    # what group_units logs for the group is that decision
    labels: dict = {}
    units = group_units(specs, "auto", labels=labels)
    assert len(units) == (1 if d.batch else 2) and set(labels.values()) == {d.label}


def test_overrides_trivial_cases_and_the_rule(fresh, monkeypatch):
    a, b = make_spec(seed=0), make_spec(seed=1)
    assert batching.decide([a], measure=_no_measure).label == "sequential: single trial"
    assert batching.decide([a, make_spec(batch_size=16)], measure=_no_measure).batch is False
    monkeypatch.setenv("HARNESS_BATCH", "always")
    assert batching.decide([a, b], measure=_no_measure).label == "vmap(2): HARNESS_BATCH=always"
    monkeypatch.setenv("HARNESS_BATCH", "never")
    assert batching.decide([a, b], measure=_no_measure).label == "sequential: HARNESS_BATCH=never"
    # the config's words too (before, on/off were refused: one vocabulary, on/off/auto)
    monkeypatch.setenv("HARNESS_BATCH", "on")
    assert batching.decide([a, b], measure=_no_measure).label == "vmap(2): HARNESS_BATCH=on"
    monkeypatch.setenv("HARNESS_BATCH", "off")
    assert batching.decide([a, b], measure=_no_measure).label == "sequential: HARNESS_BATCH=off"
    monkeypatch.delenv("HARNESS_BATCH")
    assert batching.decide([a, b], measure=lambda s: (1.21, 3)).label == "vmap(2): measured 1.21x"
    c = [make_spec(seed=s, model_hparams={"width": 8, "depth": 1}) for s in range(3)]
    d = batching.decide(c, measure=lambda s: (1.02, 3))  # within the noise margin: sequential
    assert d.batch is False and d.label == "sequential: measured 1.02x"
    # a measurement that raises: sequential, remembered in this process only
    e = [make_spec(seed=s, batch_size=8) for s in range(2)]
    boom = batching.decide(e, measure=lambda s: 1 / 0)
    assert boom.label == "sequential: measurement failed (ZeroDivisionError)"
    assert len(json.loads((fresh / "batching.json").read_text())) == 2
    # group_units: off / on / auto labels
    labels: dict = {}
    group_units([a, b], "off", labels=labels)
    assert set(labels.values()) == {"sequential: batching off"}
    group_units([a, b], "on", labels=labels)
    assert set(labels.values()) == {"vmap(2): batching on"}
    assert group_units([a, b], "auto", labels=labels) == [[a, b]]
    assert set(labels.values()) == {"vmap(2): measured 1.21x"}


def _footprint(spec):
    """The per-trial footprint and the data held, as the decision reads them."""
    from harness.train import capacity, device_data, program

    prog = program.program_for(spec, load_dataset("digits"))
    e = prog.entry
    one, _ = prog.init(jax.random.PRNGKey(0), 0.01)
    state_bytes = sum(a.nbytes for a in jax.tree.leaves(one))
    exe, _ = prog.get_chunk(None, batching._chunk_len(spec), one, jnp.int32(0), e.x_train, e.y_train)
    fp = capacity.footprint(exe.steps_exe, e.x_train.nbytes + e.y_train.nbytes)
    return fp, state_bytes, max(device_data.resident_bytes(), fp.shared)


def test_trials_per_program_follow_device_memory(fresh):
    """On an accelerator the group is vmapped in programs of as many trials as fit 80% of the
    device's memory (set here by hand) beside the data it holds; nothing is timed."""
    specs = _siblings(8)
    fp, state_bytes, held = _footprint(specs[0])
    # one trial holds at least its state (params and adam's two moments, the carried permutation)
    assert state_bytes >= 3 * 1210 * 4 + 1150 * 4 and fp.per_trial >= state_bytes
    roomy = batching.decide(specs, measure=_no_measure, device_bytes=2**34, platform="gpu")
    assert (roomy.batch, roomy.source, roomy.size) == (True, "memory", None)
    assert roomy.label.startswith("vmap(8): fits device memory (") and "of 16.0 GiB)" in roomy.label
    batching._MEM.clear()
    three = int((held + 3.5 * fp.per_trial) / 0.8)  # 3 trials fit, not 4
    dec = batching.decide(specs, measure=_no_measure, device_bytes=three, platform="tpu")
    assert (dec.batch, dec.size) == (True, 3) and dec.label.startswith("vmap(3): 3 programs for 8 trials")
    labels: dict = {}
    units = group_units(specs, "auto", labels=labels,
                        should_batch=lambda g: batching.decide(g, device_bytes=three, platform="tpu").batch)
    assert [len(u) for u in units] == [3, 3, 2] and set(labels.values()) == {dec.label}
    batching._MEM.clear()
    one = int((held + 1.5 * fp.per_trial) / 0.8)
    alone = batching.decide(specs, measure=_no_measure, device_bytes=one, platform="gpu")
    assert (alone.batch, alone.source) == (False, "memory")
    assert alone.label.startswith("sequential: 1 trial fits device memory (")


def test_on_a_cpu_the_group_device_memory_holds_is_measured(fresh):
    """On a CPU the capped group is measured as before (the speed-up decides), on ``size`` trials."""
    specs = _siblings(8)
    fp, _, held = _footprint(specs[0])
    measured = []
    dec = batching.decide(specs, measure=lambda s: (measured.append(len(s)), (1.3, 3))[1],
                          device_bytes=int((held + 5.5 * fp.per_trial) / 0.8), platform="cpu")
    assert measured == [5] and (dec.batch, dec.size) == (True, 5)
    assert dec.label == "vmap(5): measured 1.30x for 5 trials (device memory)"
    (entry,) = json.loads((fresh / "batching.json").read_text()).values()
    assert entry["size"] == 5
    batching._MEM.clear()
    assert batching.decide(specs, measure=_no_measure).size == 5  # cached with its size
    batching._MEM.clear()
    slow = batching.decide(_siblings(4), measure=lambda s: (0.9, 3), device_bytes=2**34, platform="cpu")
    assert (slow.batch, slow.size, slow.label) == (False, None, "sequential: measured 0.90x")


def test_concurrent_writers_keep_every_entry(fresh):
    threads = [threading.Thread(target=batching._write_disk, args=(f"k{i}", {"speedup": i / 10}))
               for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    disk = json.loads((fresh / "batching.json").read_text())
    assert disk == {f"k{i}": {"speedup": i / 10} for i in range(12)}
    assert not list(fresh.glob("*.tmp"))



def _chunks_compiled(program) -> dict:
    """``{schedule: sorted widths of its compiled chunks}`` of the process's programs."""
    return {key[-5]: sorted(str(k[0]) for k in p.compiled) for key, p in program.PROGRAMS.items()}


def _tiny(sched: str, seed: int, steps: int = 12):
    return make_spec(seed=seed, schedule=sched, steps=steps, eval_every=6, steps_per_dispatch=6)


def test_schedules_share_one_measurement(fresh, monkeypatch):
    """Groups that differ only in their schedule are measured once: the measurement
    compiles the single-trial and vmapped chunks of the first group only (it compiled both for
    every schedule before: 4 chunks here), and both groups get its decision."""
    import collections

    from harness.train import program

    monkeypatch.setattr(program, "PROGRAMS", collections.OrderedDict())
    monkeypatch.setattr(batching, "_max_saving", lambda specs, chunk_s: float("inf"))  # always measure
    specs = [_tiny(sched, s) for sched in ("constant", "cosine_decay") for s in (0, 1)]
    labels: dict = {}
    group_units(specs, "auto", labels=labels)
    assert _chunks_compiled(program) == {"constant": ["2", "None"]}
    (label,) = set(labels.values())
    assert label.split(": ")[1].startswith("measured")
    (key,) = json.loads((fresh / "batching.json").read_text())
    assert key.endswith(f"|T=2|{batching.signature(specs[2])}")


def test_not_measured_where_compiling_costs_more_than_vmap_could_save(fresh, monkeypatch):
    """Two seeds of 12 steps train in milliseconds; compiling the vmapped chunk to measure them
    costs far more: sequential, and only the single-trial chunk (which sequential training uses)
    is compiled (before, the vmapped one as well). A budget long enough for vmap to
    pay is measured, from the cached entry's own chunk and compile seconds, compiling nothing."""
    import collections
    import re

    from harness.train import program

    monkeypatch.setattr(program, "PROGRAMS", collections.OrderedDict())
    specs = [_tiny("constant", s) for s in (0, 1)]
    # an earlier stage (throughput) compiled the single-trial chunk: its compile still counts
    prog = program.program_for(specs[0], load_dataset("digits"))
    one, _ = prog.init(jax.random.PRNGKey(0), 0.01)
    prog.get_chunk(None, 6, one, jnp.int32(0), prog.entry.x_train, prog.entry.y_train)
    d = batching.decide(specs)
    assert (d.batch, d.source) == (False, "skipped")
    assert re.fullmatch(r"sequential: not measured \(vmap could save at most 0\.\d\d s of training; "
                        r"measuring costs a ~\d+\.\d s compile\)", d.label), d.label
    assert _chunks_compiled(program) == {"constant": ["None"]}
    (entry,) = json.loads((fresh / "batching.json").read_text()).values()
    assert entry["rule"] == "cost" and entry["label"] == d.label
    assert 0 < 2 * entry["chunk_s"] < entry["compile_s"]  # 2 chunks of 6 steps saved at most
    # the next process: the same budget is decided from the cache, a long one is measured
    monkeypatch.setattr(batching, "_MEM", {})
    again = batching.decide([_tiny("constant", s) for s in (5, 6)], measure=_no_measure)
    assert (again.source, again.label) == ("cached", d.label)
    monkeypatch.setattr(batching, "_MEM", {})
    long = [_tiny("constant", s, steps=6 * 10**6) for s in (0, 1)]
    assert batching.decide(long, measure=lambda s: (1.2, 3)).label == "vmap(2): measured 1.20x"


def test_known_reapplies_a_cached_cost_rule_as_decide_does(fresh, monkeypatch):
    """A cached cost skip (2 chunks of 6 steps saved at most, 10 ms each, against a 3 s compile)
    is what the dry run says for the same budget; for a budget where vmap could pay, the dry run
    says it is decided at the start (``None``), as :func:`decide` then measures: it named the
    stale skip before."""
    short = [_tiny("constant", s) for s in (0, 1)]
    entry = {"speedup": None, "batch": False, "label": "sequential: stale", "rule": "cost",
             "chunk_s": 0.01, "compile_s": 3.0}
    (fresh / "batching.json").write_text(json.dumps({batching._key(short): entry}))
    said = batching.known(short)
    assert (said.batch, said.source) == (False, "cached")
    assert said.label == ("sequential: not measured (vmap could save at most 0.02 s of training; "
                          "measuring costs a ~3.0 s compile)")
    assert batching.decide(short, measure=_no_measure) == said
    monkeypatch.setattr(batching, "_MEM", {})  # the next process
    long = [_tiny("constant", s, steps=6 * 10**6) for s in (0, 1)]  # 10**6 chunks: 10,000 s saved
    assert batching.known(long) is None
    assert batching.decide(long, measure=lambda s: (1.2, 3)).label == "vmap(2): measured 1.20x"


def _siblings(T: int, steps: int = 12) -> list:
    """``T`` trials of one program: the same digits MLP and adam, differing in step size and seed."""
    return [make_spec(seed=i % 2, steps=steps, eval_every=6, steps_per_dispatch=6,
                      optimizer_hparams={"step_size": 0.001 * (1 + i)}) for i in range(T)]


@pytest.mark.parametrize("rule", ["too slow", "measured"])
def test_a_decision_costs_the_same_programs_for_200_siblings_as_for_20(fresh, monkeypatch, rule):
    """Deciding for 200 siblings initialises one trial state and gets at most two chunk
    programs, as for 20 (before: one eager optimizer init per trial, 200 against 20, also when the
    decision was not to measure). 'too slow': T single chunks over MAX_REP_S, not measured;
    'measured': the whole measurement, single and vmapped chunks compiled and timed. The vmapped
    chunks compiled are the T=20 and T=200 ones, one each."""
    import collections

    from harness.train import program

    monkeypatch.setattr(program, "PROGRAMS", collections.OrderedDict())
    monkeypatch.setattr(batching, "MAX_REP_S", 0.0 if rule == "too slow" else 1e9)
    monkeypatch.setattr(batching, "BUDGET_S", 0.0)  # MIN_REPS repetitions: the counts are the point
    steps = 12 if rule == "too slow" else 6 * 10**6  # measured: long enough that vmap could pay
    counts = {}
    for T in (20, 200):
        before = batching.measure_counts()
        d = batching.decide(_siblings(T, steps))
        after = batching.measure_counts()
        counts[T] = {k: after[k] - before[k] for k in after}
        assert d.source == ("skipped" if rule == "too slow" else "measured"), d
    programs = 1 if rule == "too slow" else 2
    assert counts[20] == counts[200] == {"decisions": 1, "inits": 1, "programs": programs}
    assert _chunks_compiled(program) == {"constant": ["None"] if rule == "too slow"
                                         else ["20", "200", "None"]}


def test_group_units_decides_once_per_program(fresh, monkeypatch):
    """200 siblings of two programs (two batch sizes) are two groups, two decisions: the step sizes
    and seeds do not make more."""
    monkeypatch.setattr(batching, "_fit", lambda specs, device_bytes: (None, ""))
    calls = []
    monkeypatch.setattr(batching, "measure_speedup", lambda specs: (calls.append(len(specs)), (0.9, 3))[1])
    specs = _siblings(100) + [make_spec(seed=i % 2, batch_size=16, optimizer_hparams={"step_size": 1e-3 * i})
                              for i in range(1, 101)]
    labels: dict = {}
    units = group_units(specs, "auto", labels=labels)
    assert calls == [100, 100] and len(units) == 200
    assert set(labels.values()) == {"sequential: measured 0.90x"}


def test_group_units_compares_each_trials_key_a_bounded_number_of_times(fresh, monkeypatch):
    """A group that is not batched is labelled once, not once per trial: 1,000 siblings read their
    batch keys a few thousand times (before, every trial's label compared all 1,000 keys: 1,004,000
    reads, several seconds of a 1,000-trial sweep)."""
    from harness.core.spec import TrialSpec

    monkeypatch.setattr(batching, "_fit", lambda specs, device_bytes: (None, ""))
    monkeypatch.setattr(batching, "measure_speedup", lambda specs: (0.9, 3))
    reads = [0]
    key = TrialSpec.batch_key

    def counted(self):
        reads[0] += 1
        return key(self)

    specs = _siblings(1000)
    monkeypatch.setattr(TrialSpec, "batch_key", counted)
    labels: dict = {}
    units = group_units(specs, "auto", labels=labels)
    assert len(units) == 1000 and set(labels.values()) == {"sequential: measured 0.90x"}
    assert reads[0] <= 5 * 1000, reads[0]
