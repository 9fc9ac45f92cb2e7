"""Mid-trial checkpoints (``harness/checkpoint.py``): cadence parsing, bit-identical resume of
``run_trial`` and ``run_trials_batched`` after an interruption at chunk ``j``, atomic writes under
SIGKILL, ownership between processes, clean-up and the final-state artifact of a sweep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from interrupting import Interrupt, Interrupting

from harness.core.spec import TrialSpec
from harness.train import checkpoint, program
from harness.train import loop as trainer
from harness.train.checkpoint import Cadence, UnitCheckpoints, parse_every


@pytest.fixture(scope="module")
def digits_ds():
    from harness.data.sources import load_dataset

    return load_dataset("digits")


# --------------------------------------------------------------------------- cadence


@pytest.mark.parametrize("value, want", [
    (None, Cadence(seconds=60.0)), ("default", Cadence(seconds=60.0)),
    (500, Cadence(steps=500)), ("500 steps", Cadence(steps=500)), ("1 step", Cadence(steps=1)),
    ("90s", Cadence(seconds=90.0)), ("10min", Cadence(seconds=600.0)), ("1.5 h", Cadence(seconds=5400.0)),
    ("2 minutes", Cadence(seconds=120.0)), (0, Cadence()), (False, Cadence()), ("off", Cadence()),
    ("never", Cadence()), ("0 steps", Cadence()),
])
def test_parse_every(value, want):
    assert parse_every(value) == want


@pytest.mark.parametrize("value", [True, -3, 1.5, "1.5 steps", "fortnight", "10 parsecs", "-1min", "nan s",
                                   [1]])
def test_parse_every_rejects_with_the_accepted_forms(value):
    with pytest.raises(ValueError) as e:
        parse_every(value)
    msg = str(e.value)
    assert msg.startswith("checkpoint_every")
    if value != -3:
        assert "use a number of steps (500 or '500 steps'), a time ('90s', '10min', '1h'), or 'off'" in msg


def test_config_key_is_validated_and_canonical(write_sweep):
    from harness.config.load import ConfigError, load_config

    assert load_config(write_sweep(checkpoint_every="5 min")).checkpoint_every == "300s"
    assert load_config(write_sweep(checkpoint_every=40)).checkpoint_every == "40 steps"
    assert load_config(write_sweep()).checkpoint_every is None  # the default cadence
    with pytest.raises(ConfigError) as e:
        load_config(write_sweep(checkpoint_every="weekly"))
    assert "checkpoint_every" in str(e.value) and "'10min'" in str(e.value)


def test_cadence_is_not_part_of_the_trial(write_sweep):
    from harness.config.load import load_config
    from harness.orchestrate.run import expand

    a = expand(load_config(write_sweep()))
    b = expand(load_config(write_sweep(checkpoint_every=3, keep_final_checkpoint=True)))
    assert [s.trial_id for s in a] == [s.trial_id for s in b]


def test_root_beside_a_sqlite_store_or_configured(tmp_path, monkeypatch):
    monkeypatch.delenv(checkpoint.ENV_DIR, raising=False)
    assert checkpoint.root_for(f"sqlite:///{tmp_path}/m.db") == str(tmp_path.resolve() / "checkpoints")
    assert checkpoint.root_for("http://127.0.0.1:5000", str(tmp_path / "shared")) == str(tmp_path / "shared")
    assert checkpoint.root_for("http://h:5000", "gs://bucket/ck") == "gs://bucket/ck"
    monkeypatch.chdir(tmp_path)
    assert checkpoint.root_for("http://h:5000") == str(tmp_path.resolve() / "checkpoints")
    monkeypatch.setenv(checkpoint.ENV_DIR, str(tmp_path / "env"))
    assert checkpoint.root_for(f"sqlite:///{tmp_path}/m.db", "ignored") == str(tmp_path / "env")


# --------------------------------------------------------------------------- bit-identical resume




def _specs(**kw) -> list[TrialSpec]:
    base = dict(sweep="ck", model="mlp", optimizer="adam", schedule="cosine_decay", dataset="digits",
                steps=47, batch_size=64, eval_every=20, steps_per_dispatch=6,
                model_hparams={"width": 32, "depth": 1, "dropout": 0.2})
    base.update(kw)
    return [TrialSpec.make(seed=s, optimizer_hparams={"step_size": lr}, **base)
            for s, lr in ((0, 0.01), (1, 0.003))]


def _curves(r) -> tuple:
    c = r.curves
    return (c.train_step, c.train_loss, c.eval_step, c.eval_loss, c.eval_accuracy, c.eval_metrics,
            r.status, r.diverged_step, r.steps_to_target, r.final_valid_loss, r.final_valid_accuracy,
            r.test_loss, r.test_accuracy)


def _train(specs, ck):
    if len(specs) == 1:
        return [trainer.run_trial(specs[0], measure_perf=False, checkpoints=ck)]
    return trainer.run_trials_batched(specs, measure_perf=False, checkpoints=ck)


@pytest.mark.parametrize("width", [1, 2])
def test_interrupt_after_chunk_j_and_resume_is_bit_identical(tmp_path, digits_ds, width):
    """Chunks end at 6, 12, 18, 20 (eval), 26, 32, 38, 40 (eval), 46, 47; with a checkpoint every 10
    steps (at the first chunk end at or past each multiple: 12, 20, 32, 40) the trial is
    interrupted after chunk j and resumed from the newest: every curve value, the status, the
    target step and the finals equal the uninterrupted run's exactly (one trial, and a vmapped
    batch of two)."""
    specs = _specs(target={"metric": "eval/accuracy", "value": 0.5})[:width]
    ids, T = [s.trial_id for s in specs], (width if width > 1 else None)
    ref = _train(specs, None)
    every = parse_every(10)
    for j, resumed in ((3, 12), (8, 40)):
        d = str(tmp_path / f"w{width}-j{j}")
        ck = Interrupting(d, ids, T, every, stop_after=j)
        with pytest.raises(Interrupt):
            _train(specs, ck)
        ck.release()
        again = UnitCheckpoints(d, ids, T, every)
        res = _train(specs, again)
        assert again.resumed_from == resumed
        for a, b in zip(res, ref, strict=True):
            assert _curves(a) == _curves(b)
        assert res[0].extra["checkpoint"]["resumed_from_step"] == resumed
        again.cleanup()
        assert not Path(d).exists()


def test_resume_from_the_final_checkpoint_trains_nothing(tmp_path, digits_ds):
    specs = _specs()[:1]
    d = str(tmp_path / "u")
    ck = UnitCheckpoints(d, [specs[0].trial_id], None, parse_every(20))
    first = _train(specs, ck)
    ck.release()  # results "not yet in the store": the final (done) state stays
    again = UnitCheckpoints(d, [specs[0].trial_id], None, parse_every(20))
    second = _train(specs, again)
    assert again.resumed_from == 47 and again.saves == 0
    assert _curves(second[0]) == _curves(first[0])
    again.cleanup()


class FirstChunkOnly(UnitCheckpoints):
    """Due at the first chunk end only (then training runs on for far less than 100 saves)."""

    def due(self, step: int) -> bool:
        return self.saves == 0


def test_final_save_obeys_the_adaptive_spacing(tmp_path, digits_ds):
    """The benchmark found a 2-minute resnet18 trial paying two saves (the one at the cadence and
    the final state) = 2.6% of training; with the default (adaptive) cadence the final save is
    skipped when less than 100x the last save's duration has passed since it; a fixed cadence, or
    keep_final, still saves the final state."""
    specs = _specs()[:1]
    every = parse_every("1min")
    runs = {}
    for name, kw in (("adaptive", {"adaptive": True}), ("fixed", {}),
                     ("keep", {"adaptive": True, "keep_final": True})):
        ck = FirstChunkOnly(str(tmp_path / name), [specs[0].trial_id], None, every, **kw)
        runs[name] = (_train(specs, ck)[0], ck.saves, ck._latest)
        ck.cleanup()
    assert runs["adaptive"][1:] == (1, 6)  # only the first chunk end's save
    assert runs["fixed"][1:] == (2, 47) and runs["keep"][1:] == (2, 47)
    assert _curves(runs["adaptive"][0]) == _curves(runs["fixed"][0])


def test_checkpoint_of_another_unit_is_ignored(tmp_path, digits_ds):
    a, b = _specs()
    d = str(tmp_path / "u")
    ck = Interrupting(d, [a.trial_id], None, parse_every(6), stop_after=3)
    with pytest.raises(Interrupt):
        _train([a], ck)
    ck.release()
    other = UnitCheckpoints(d, [b.trial_id], None, parse_every(6))  # same directory, other trial
    res = _train([b], other)
    assert other.resumed_from is None
    assert _curves(res[0]) == _curves(_train([b], None)[0])


def test_the_checkpoint_holds_the_whole_state(tmp_path, digits_ds):
    """Params and the optimizer state through unpack_optimizer_state, keys, data-order position,
    the host record (curves so far, clock)."""
    import orbax.checkpoint as ocp

    (s,) = _specs()[:1]
    d = tmp_path / "u"
    ck = Interrupting(str(d), [s.trial_id], None, parse_every(10), stop_after=4)  # saved at 12 and 20
    with pytest.raises(Interrupt):
        _train([s], ck)
    ck.release()
    mgr = ocp.CheckpointManager(str(d), item_names=("state", "host"),
                                options=ocp.CheckpointManagerOptions(read_only=True))
    assert mgr.all_steps() == [12, 20]
    got = mgr.restore(20, args=ocp.args.Composite(host=ocp.args.JsonRestore(),
                                                  state=ocp.args.StandardRestore()))
    host, state = got["host"], got["state"]
    assert host["step"] == 20 and host["trial_ids"] == [s.trial_id] and host["batched"] is None
    assert host["done"] is False and host["wall_s"] > 0
    tr = host["tracks"][0]
    assert tr["curves"]["train_step"] == list(range(1, 21)) and tr["curves"]["eval_step"] == [0, 20]
    assert tr["active"] is True
    # mlp depth 1: 2 dense layers = 4 parameter leaves; adam keeps (x, m, v) per leaf; the
    # parameters are written on their own only in the final checkpoint
    assert sum(k.startswith("opt_state.p") for k in state) == 12
    assert not [k for k in state if k.startswith("params.")]
    assert state["data_key"].dtype == np.uint32 and state["data_key"].shape == (2,)
    assert state["perm"].shape == (digits_ds.num_train,)
    assert int(state["perm_epoch"]) == (20 * 64 - 1) // digits_ds.num_train  # epoch of the last example used
    mgr.close()


def test_a_second_process_neither_writes_nor_deletes_an_owned_unit(tmp_path, digits_ds):
    (s,) = _specs()[:1]
    d = str(tmp_path / "u")
    owner = UnitCheckpoints(d, [s.trial_id], None, parse_every(10))
    owner.save(0, 0.0, program.program_for(s, digits_ds).init(__import__("jax").random.PRNGKey(0), 0.01)[0],
               [], lambda st: ())
    assert owner.saves == 1
    code = textwrap.dedent(f"""
        from harness.train.checkpoint import UnitCheckpoints, parse_every
        u = UnitCheckpoints({d!r}, [{s.trial_id!r}], None, parse_every(10))
        print(u._own()); u.cleanup()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]
    assert (Path(d) / "0").is_dir()  # still there
    owner.cleanup()
    assert not Path(d).exists() and not Path(d + ".lock").exists()


# --------------------------------------------------------------------------- atomic writes

_WRITER = textwrap.dedent("""
    import sys, numpy as np, jax.numpy as jnp
    from typing import NamedTuple
    from harness.train.checkpoint import UnitCheckpoints, parse_every
    from optimizers import adam

    class S(NamedTuple):
        opt_state: object; model_state: object; data_key: object; dropout_key: object
        step_size: object; perm: object; perm_epoch: object

    opt = adam(0.1)
    u = UnitCheckpoints(sys.argv[1], ["t"], None, parse_every(1))
    step = int(sys.argv[2])
    while True:
        step += 1
        x = {"w": jnp.full((512, 512), float(step)), "b": jnp.full((512,), float(step))}
        st = S(opt.init_fn(x), (), jnp.zeros(2, jnp.uint32), jnp.zeros(2, jnp.uint32),
               jnp.float32(step), jnp.arange(8, dtype=jnp.int32), jnp.int32(step))
        u.save(step, float(step), st, [], opt.params_fn)
        print(step, flush=True)
""")


def test_sigkill_mid_write_leaves_the_previous_checkpoint_usable(tmp_path):
    """A writer saving 4 MB checkpoints in a loop is SIGKILLed at random moments (6 times, each
    restart continuing the step count); after each kill the newest finalised checkpoint restores,
    and its arrays hold the value of its own step (never a torn mix)."""
    import random

    import jax.numpy as jnp

    from optimizers import adam

    rng = random.Random(3)
    d = str(tmp_path / "u")
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    opt = adam(0.1)
    step, tmp_seen = 0, 0
    for _ in range(6):
        p = subprocess.Popen([sys.executable, str(script), d, str(step)], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
        first = p.stdout.readline()  # one complete save first
        assert first, "writer died"
        time.sleep(rng.uniform(0.0, 0.4))
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        p.stdout.close()
        tmp_seen += sum(".orbax-checkpoint-tmp" in n for n in os.listdir(d))
        from typing import NamedTuple

        class S(NamedTuple):
            opt_state: object
            model_state: object
            data_key: object
            dropout_key: object
            step_size: object
            perm: object
            perm_epoch: object

        x = {"w": jnp.zeros((512, 512)), "b": jnp.zeros((512,))}
        tmpl = S(opt.init_fn(x), (), jnp.zeros(2, jnp.uint32), jnp.zeros(2, jnp.uint32), jnp.float32(0),
                 jnp.zeros(8, jnp.int32), jnp.int32(0))
        u = UnitCheckpoints(d, ["t"], None, parse_every(1))
        got = u.restore(tmpl, [], opt.params_fn)
        assert got is not None
        st, s, wall, _ = got
        assert s > step and wall == float(s)
        w = np.asarray(opt.params_fn(st.opt_state)["w"])
        assert (w == float(s)).all() and int(st.perm_epoch) == s
        u.release()
        step = s
    print(f"\n6 writers killed; {tmp_seen} unfinished temporary step directories seen beside them")


# --------------------------------------------------------------------------- through a sweep


def test_sweep_removes_checkpoints_and_can_keep_the_final_state(tmp_path, write_sweep, tracking_uri,
                                                                monkeypatch):
    from harness.orchestrate.run import run_sweep
    from harness.tracking.client import client_for, search_all

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(checkpoint.ENV_EVERY, "20")
    cfg = write_sweep(seeds=[0, 1], batching="on", keep_final_checkpoint=True)
    s = run_sweep(cfg, tracking_uri=tracking_uri, quiet=True)
    assert s.counts()["finished"] == 2
    root = tmp_path / "checkpoints"
    assert list(root.glob("*/*")) == []  # <experiment>/<unit>: no unit directory (nor lock) is left
    client = client_for(tracking_uri)
    for r in search_all(client, s.experiment_id, "tags.`harness.kind` = 'trial'"):
        names = {a.path for a in client.list_artifacts(r.info.run_id, "checkpoint")}
        assert {"checkpoint/state", "checkpoint/host"} <= names, names


def test_the_default_cadence_spaces_checkpoints_by_their_cost(tmp_path, monkeypatch):
    monkeypatch.delenv(checkpoint.ENV_EVERY, raising=False)
    u = checkpoint.for_unit(str(tmp_path), "1", ["t"], None, "default")
    assert u.adaptive and u.cadence == Cadence(seconds=60.0)
    clock = [1000.0]
    monkeypatch.setattr(checkpoint.time, "monotonic", lambda: clock[0])
    u._last_t, u._last_save_s = 1000.0, 2.0  # the last save took 2 s: the next after 200 s
    clock[0] = 1061.0
    assert not u.due(10)
    clock[0] = 1201.0
    assert u.due(10)
    explicit = checkpoint.for_unit(str(tmp_path), "1", ["t"], None, "60s")
    assert not explicit.adaptive
