"""A real ``python -m harness sweep`` over streamed token shards (``stream: true``) with checkpoints is
SIGKILLed mid-trial, once a checkpoint exists on disk; run again, it resumes from that checkpoint and
its curves (every train step's loss, every evaluation) equal an uninterrupted run's bit for bit: the
streamed windows it resumed on are the ones it would have read."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml
from subproc import with_hooks

from harness.data.shards import write_shard

ROOT = Path(__file__).resolve().parents[1]
STEPS = 60


def _curves(path: Path) -> tuple[list, list]:
    train, ev = [], []
    with path.open() as f:
        for row in csv.DictReader(f):
            if row["split"] == "train":
                train.append((int(row["step"]), row["loss"]))
            else:
                ev.append((row["split"], int(row["step"]), row["loss"]))
    return train, ev


def _reference(cfg: Path) -> tuple[list, list]:
    from harness.config.load import load_config
    from harness.orchestrate.run import expand
    from harness.train import loop as trainer

    (spec,) = expand(load_config(cfg))
    r = trainer.run_trial(spec, measure_perf=False)
    c = r.curves
    ev = [("valid", s, str(v)) for s, v in zip(c.eval_step, c.eval_loss, strict=True)]
    return ([(s, str(v)) for s, v in zip(c.train_step, c.train_loss, strict=True)],
            [*ev, ("test", c.eval_step[-1], str(r.test_loss))])


def _saved_steps(root: Path) -> list[int]:
    """Complete checkpoints on disk (Orbax renames a step directory into place when written)."""
    return [int(p.name) for p in root.glob("*/*/*") if p.is_dir() and p.name.isdigit()]


def kill_mid_trial_and_resume(cfg: Path, tmp_path: Path, ck: Path, experiment: str, steps: int):
    """Sweep ``cfg`` in a subprocess, SIGKILL its process group once a checkpoint is on disk in
    ``ck``, run it again to the end, and check the one FINISHED trial run resumed from a saved step
    with every train loss and evaluation equal to an uninterrupted run's, bit for bit.

    Returns:
      that MLflow run.
    """
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cmd = [sys.executable, "-m", "harness", "sweep", str(cfg), "--tracking-uri", uri, "-q"]
    # the existing chunk-sleep hook stretches training (0.15 s a chunk of 5 steps) so the kill lands in it
    env = with_hooks({**os.environ, "PYTHONPATH": str(ROOT)}, HARNESS_TEST_CHUNK_SLEEP_S="0.15")
    env.pop("MLFLOW_TRACKING_URI", None)
    p = subprocess.Popen(cmd, cwd=tmp_path, env=env, start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not _saved_steps(ck) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert p.poll() is None, f"the sweep ended before a checkpoint was seen: {p.stderr.read()[-3000:]}"
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    p.stderr.close()
    saved = _saved_steps(ck)
    assert saved and max(saved) < steps, saved  # killed mid-trial, after a checkpoint

    ref = _reference(cfg)  # an uninterrupted run of the same trial, in this process
    again = subprocess.run(cmd, cwd=tmp_path, env={**env, "HARNESS_TEST_CHUNK_SLEEP_S": "0"},
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    runs = [r for r in client.search_runs([exp.experiment_id]) if "harness.trial_id" in r.data.tags]
    finished = [r for r in runs if r.info.status == "FINISHED"]
    assert len(finished) == 1, [r.info.status for r in runs]
    run = finished[0]
    assert int(run.data.tags["harness.resumed_from_step"]) in saved
    train, ev = _curves(Path(client.download_artifacts(run.info.run_id, "curves.csv", str(tmp_path))))
    assert len(train) == steps
    assert train == ref[0]  # every step's loss, bit for bit (repr of the float)
    assert ev == ref[1]
    return run


def test_sigkill_mid_trial_on_streamed_shards_resumes_bit_identically(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = np.frombuffer((ROOT / "docs" / "architecture.md").read_bytes()[:16_000], np.uint8)
    write_shard(corpus / "doc_train_000.bin", text[:6_001])
    write_shard(corpus / "doc_train_001.bin", text[6_001:12_000])
    write_shard(corpus / "doc_val_000.bin", text[12_000:])
    cfg = tmp_path / "kill.yaml"
    ck = tmp_path / "ck"
    cfg.write_text(yaml.safe_dump({
        "name": "stream-kill", "models": [{"name": "transformer_lm",
                                           "hparams": {"width": 8, "depth": 1, "num_heads": 2}}],
        "optimizers": [{"name": "adam", "hparams": {"step_size": 3e-3}}], "schedules": ["constant"],
        "datasets": [{"name": f"tokens:{corpus}", "hparams": {"seq_len": 8, "vocab_size": 256,
                                                              "stream": True, "valid_tokens": 512}}],
        "seeds": [0], "batch_size": 4, "budget": {"steps": STEPS}, "eval_every": 20,
        "steps_per_dispatch": 5, "measure_perf": False, "checkpoint_every": 10,
        "checkpoint_dir": str(ck)}))
    kill_mid_trial_and_resume(cfg, tmp_path, ck, "stream-kill", STEPS)
