"""The spool holds data, never code: a planted pickle is never unpickled, a spool folder
others can write is refused, a real spooled result still round-trips as JSON and replays into the
store, and no entry holds a password."""

from __future__ import annotations

import json
import logging
import math
import os
import pickle
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TINY_SWEEP, fake_result, make_spec

from harness.tracking import spool


class _Plant:
    """Unpickling this creates ``marker`` (what an attacker's file would do, harmlessly)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.fixture
def spool_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path / "spool"


def _entry(uri: str, **over):
    spec = make_spec(optimizer_hparams={"step_size": 0.01, "b1": 0.9},
                     model_hparams={"width": 16, "depth": 1})
    res = fake_result(spec)
    res.curves.train_loss[3] = float("nan")
    res.extra = {"time": {"train": 0.5}, "device_tags": {"device.kind": "cpu"}}
    return {"kind": "trial", "uri": uri, "ctx": {"tracking_uri": uri}, "t0_ms": 1, "result": res,
            "stale_run_id": None, "error": "x", "spooled_at": 0.0, "owner": "h:1", **over}


def test_a_planted_pickle_is_never_unpickled(spool_env, tmp_path, caplog):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    real = spool.put(uri, _entry(uri))  # the folder exists, 0700, as the harness makes it
    d = real.parent
    marker = tmp_path / "PWNED"
    payload = pickle.dumps({"result": _Plant(marker)})
    (d / f"{'a' * 16}-1-1.pkl").write_bytes(payload)  # the old format's name
    (d / f"{'b' * 16}-1-2.json").write_bytes(payload)  # a pickle under the new name
    written = []
    with caplog.at_level(logging.WARNING, logger="harness.tracking.spool"):
        pending = spool.pending_trials(uri)
        rep = spool.replay(uri, lambda e: written.append(e) or True, lambda e: False)
    assert not marker.exists()
    assert list(pending) == [real.name.split("-")[0]] and rep.written == 1 and len(written) == 1
    assert sorted(p.name for p in (d / "unreadable").iterdir() if not p.name.endswith(".why.txt")) == \
        [f"{'a' * 16}-1-1.pkl", f"{'b' * 16}-1-2.json"]
    why = (d / "unreadable" / f"{'a' * 16}-1-1.pkl.why.txt").read_text()
    assert "never loaded" in why and "trained again" in why
    lines = [r.getMessage() for r in caplog.records]
    assert any(f"{'a' * 16}-1-1.pkl" in m and "old pickle" in m for m in lines), lines
    assert spool.entries(uri) == []
    # and the module does not even import pickle
    import ast

    tree = ast.parse(Path(spool.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)
                for a in n.names} | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {"pickle", "cloudpickle", "dill", "marshal"} & imported


def test_a_planted_pickle_in_a_real_sweep_is_not_run(spool_env, tmp_path, fake_trainer):
    """The sweep's own replay at its start meets the planted file: nothing runs, the sweep trains."""
    from harness.orchestrate.run import run_sweep

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    d = spool.spool_dir(uri)
    d.mkdir(parents=True, mode=0o700)
    marker = tmp_path / "PWNED"
    (d / f"{'c' * 16}-9-9.pkl").write_bytes(pickle.dumps(_Plant(marker)))
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(TINY_SWEEP))
    s = run_sweep(cfg, tracking_uri=uri, quiet=True)
    assert not marker.exists() and s.counts()["finished"] == 2


@pytest.mark.parametrize("which", ["root", "store"])
def test_a_spool_folder_others_can_write_is_refused(spool_env, tmp_path, which, caplog):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spool.put(uri, _entry(uri))
    folder = spool_env if which == "root" else spool.spool_dir(uri)
    os.chmod(folder, 0o777)
    with pytest.raises(spool.UnsafeSpoolError) as e:
        spool.replay(uri, lambda e: True, lambda e: False)
    msg = str(e.value)
    assert "\n" not in msg and str(folder) in msg and f"chmod go-w {folder}" in msg
    with pytest.raises(spool.UnsafeSpoolError):
        spool.put(uri, _entry(uri))
    with caplog.at_level(logging.WARNING, logger="harness.tracking.spool"):
        assert spool.entries(uri) == [] and spool.pending_trials(uri) == {}
    os.chmod(folder, 0o755)  # the fix the message names
    assert len(spool.entries(uri)) == 2 - 1  # the second put was refused


def test_a_world_writable_spool_stops_the_sweep_with_one_line(spool_env, tmp_path):
    """Through the command line: exit 3, one line naming the folder and the fix."""
    import subprocess

    spool_env.mkdir(mode=0o700)
    os.chmod(spool_env, 0o777)
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(TINY_SWEEP))
    env = dict(os.environ, HARNESS_SPOOL_DIR=str(spool_env))
    p = subprocess.run([sys.executable, "-m", "harness", "sweep", str(cfg), "--tracking-uri",
                        f"sqlite:///{tmp_path / 'mlflow.db'}"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 3, p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [f"error: the spool folder {spool_env} is writable by group or others (mode 777): "
                      f"whoever can write it could plant results; run `chmod go-w {spool_env}` (or set "
                      f"HARNESS_SPOOL_DIR to a folder of your own)"]
    assert "Traceback" not in p.stderr


def test_entry_round_trips_as_json_without_a_password(spool_env):
    uri = "postgresql://u:secretpw@127.0.0.1:5432/mlflow"
    e = _entry(uri, error=f"could not connect: {uri}")
    p = spool.put(uri, e)
    text = p.read_text()
    assert "secretpw" not in text and "secretpw" not in (p.parent / "uri.txt").read_text()
    assert json.loads(text)["format"] == spool.FORMAT
    assert oct(os.stat(p.parent).st_mode & 0o777) == "0o700" and oct(os.stat(p).st_mode & 0o777) == "0o600"
    back = spool.load(p, uri)
    r0, r1 = e["result"], back["result"]
    assert r1.spec == r0.spec and r1.spec.trial_id == r0.spec.trial_id
    assert r1.spec.optimizer_hparams == r0.spec.optimizer_hparams  # tuples stay tuples
    assert math.isnan(r1.curves.train_loss[3]) and r1.curves.train_loss[:3] == r0.curves.train_loss[:3]
    assert r1.curves.eval_loss == r0.curves.eval_loss and r1.extra == r0.extra
    assert back["ctx"]["tracking_uri"] == uri  # the replaying store's own URI, not the masked one
    assert back["error"] == "could not connect: postgresql://u:***@127.0.0.1:5432/mlflow"
    with pytest.raises(ValueError):
        spool.decode({"$record": "Popen", "fields": {}})


def test_a_spooled_result_replays_into_the_store(spool_env, tmp_path, fake_trainer, monkeypatch):
    """A write that fails (an outage) spools the result as JSON; the next sweep writes it, with the
    same metrics as a result written directly, and trains nothing again."""
    from mlflow import MlflowClient

    import harness.execute.writing as writing
    from harness.orchestrate.run import run_sweep
    from harness.tracking.client import search_all
    from harness.tracking.health import HEALTH

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(TINY_SWEEP))
    real = writing.write_run
    fails = {"n": 1}

    def flaky(client, rid, res, *a, **kw):
        if res.spec.seed == 1 and fails["n"]:
            fails["n"] -= 1
            raise OSError("disk I/O error")
        return real(client, rid, res, *a, **kw)

    monkeypatch.setattr(writing, "write_run", flaky)
    monkeypatch.setattr(writing, "store_should_be_tried", lambda uri: True)
    s1 = run_sweep(cfg, tracking_uri=uri, quiet=True)
    files = spool.entries(uri)
    # written at the end of the same sweep (the store answers again) or left for the next one
    if files:
        doc = json.loads(files[0].read_text())
        assert doc["format"] == spool.FORMAT
    n_calls = len(fake_trainer["calls"])
    HEALTH.__init__()
    run_sweep(cfg, tracking_uri=uri, quiet=True)
    assert spool.entries(uri) == [] and len(fake_trainer["calls"]) == n_calls  # nothing trained again
    c = MlflowClient(uri)
    runs = [r for r in search_all(c, c.get_experiment_by_name("tiny").experiment_id)
            if r.data.tags.get("harness.kind") == "trial" and r.info.status == "FINISHED"]
    assert len(runs) == 2 and s1.counts()["finished"] + s1.counts().get("spooled", 0) >= 1
    by_seed = {r.data.params["train.seed"]: r for r in runs}
    assert by_seed["1"].data.tags.get("harness.spooled") == "1"
    assert by_seed["1"].data.metrics["test/loss"] == pytest.approx(by_seed["0"].data.metrics["test/loss"])
