"""A shard rewritten while a real sweep of 2 trials runs: the event is the test's own (a sourced
optimizer's runtime callback rewrites the training shard at its trial's third update, never while
tracing), not a race against the machine. The trial that was training finishes on the data it read;
each later trial on that data is FAILED with the reason (its digest changed); nothing FINISHED is
lost, and the next sweep trains them all on the new data. A streamed trial reads its shards while it
trains: one overwritten under it is FAILED with the reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml
from typer.testing import CliRunner

from harness.cli import app
from harness.data.shards import write_shard

ROOT = Path(__file__).resolve().parents[1]

REWRITER = '''
import jax
import jax.numpy as jnp
import numpy as np

from optimizers import make_schedule, optimizer
from harness.data.shards import write_shard

SHARD = {shard!r}
DONE = {done!r}


def _rewrite(i):
    import os
    if int(i) == 2 and not os.path.exists(DONE):  # once: this trial's third update
        n = np.fromfile(SHARD, np.uint16).size
        write_shard(SHARD, np.full(n, 65, np.uint16), "nanogpt")
        open(DONE, "w").close()


@optimizer
def rewriting_sgd(step_size):
    """Plain SGD whose update rewrites the training shard once, at update 2 (a runtime callback)."""

    lr = make_schedule(step_size)

    def init(x):
        return x

    def update(i, g, x):
        jax.debug.callback(_rewrite, i)
        return x - lr(i) * g

    def get_params(x):
        return x

    return init, update, get_params
'''


def test_a_shard_rewritten_mid_sweep_fails_later_trials_and_keeps_the_finished(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = np.frombuffer((ROOT / "docs" / "architecture.md").read_bytes()[:6_000], np.uint8)
    write_shard(corpus / "train.bin", text[:5_000].astype(np.uint16), "nanogpt")
    write_shard(corpus / "val.bin", text[5_000:].astype(np.uint16), "nanogpt")
    (tmp_path / "rewriter.py").write_text(REWRITER.format(
        shard=str(corpus / "train.bin"), done=str(tmp_path / "rewritten")))
    cfg = tmp_path / "rw.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "rw", "models": [{"name": "transformer_lm",
                                  "hparams": {"width": 8, "depth": 1, "num_heads": 2}}],
        "optimizers": [{"name": "rewriting_sgd", "source": "rewriter.py:rewriting_sgd",
                        "hparams": {"step_size": 0.1}},
                       {"name": "adam", "hparams": {"step_size": 3e-3}}],
        "schedules": ["constant"], "seeds": [0], "batching": "off",
        "datasets": [{"name": f"tokens:{corpus}", "hparams": {"seq_len": 8, "vocab_size": 256,
                                                              "valid_tokens": 512}}],
        "batch_size": 4, "budget": {"steps": 4}, "eval_every": 4, "measure_perf": False,
        # in the sweep's own process, in plan order, so the sourced trial trains first (in a
        # watched worker, the default for sourced code, adam had finished before the rewrite)
        "dispatch_timeout_s": None}))
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runner = CliRunner()
    r = runner.invoke(app, ["sweep", str(cfg), "--tracking-uri", uri])
    assert (tmp_path / "rewritten").exists(), r.output
    import mlflow

    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("rw")
    runs = [x for x in client.search_runs([exp.experiment_id]) if "harness.trial_id" in x.data.tags]
    status = {x.data.tags["optimizer"]: x.info.status for x in runs}
    assert status == {"rewriting_sgd": "FINISHED", "adam": "FAILED"}, (status, r.output)
    (failed,) = [x for x in runs if x.info.status == "FAILED"]
    reason = " ".join(str(v) for k, v in failed.data.tags.items() if "reason" in k)
    assert "changed while the sweep ran (digest" in reason, failed.data.tags
    assert "changed while the sweep ran" in r.output
    # the next sweep sees the new data: every trial of it (the finished one too) trains again
    r = runner.invoke(app, ["sweep", str(cfg), "--tracking-uri", uri, "--dry-run"])
    assert "2 trials, 0 done (skipped), 2 to run" in r.output, r.output
    runs = [x for x in client.search_runs([exp.experiment_id]) if "harness.trial_id" in x.data.tags]
    assert sorted(x.info.status for x in runs) == ["FAILED", "FINISHED"]  # nothing lost


#: every token overwritten with 0: the same file, the same size
INPLACE = REWRITER.replace(
    '''        n = np.fromfile(SHARD, np.uint16).size
        write_shard(SHARD, np.full(n, 65, np.uint16), "nanogpt")''',
    '''        with open(SHARD, "r+b") as f:
            f.write(bytes(os.path.getsize(SHARD)))''')


def test_a_streamed_shard_overwritten_mid_trial_fails_that_trial_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = np.frombuffer((ROOT / "docs" / "architecture.md").read_bytes()[:6_000], np.uint8)
    write_shard(corpus / "train.bin", text[:5_000].astype(np.uint16), "nanogpt")
    write_shard(corpus / "val.bin", text[5_000:].astype(np.uint16), "nanogpt")
    assert INPLACE != REWRITER
    (tmp_path / "rewriter.py").write_text(INPLACE.format(
        shard=str(corpus / "train.bin"), done=str(tmp_path / "rewritten")))
    cfg = tmp_path / "rw.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "rw", "models": [{"name": "transformer_lm",
                                  "hparams": {"width": 8, "depth": 1, "num_heads": 2}}],
        "optimizers": [{"name": "rewriting_sgd", "source": "rewriter.py:rewriting_sgd",
                        "hparams": {"step_size": 0.1}}],
        "schedules": ["constant"], "seeds": [0], "batching": "off",
        "datasets": [{"name": f"tokens:{corpus}", "hparams": {"seq_len": 8, "vocab_size": 256,
                                                              "valid_tokens": 512, "stream": True}}],
        "batch_size": 4, "budget": {"steps": 4}, "eval_every": 4, "measure_perf": False}))
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    r = CliRunner().invoke(app, ["sweep", str(cfg), "--tracking-uri", uri])
    assert (tmp_path / "rewritten").exists(), r.output
    assert r.exit_code != 0, r.output
    import mlflow

    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("rw")
    (run,) = [x for x in client.search_runs([exp.experiment_id]) if "harness.trial_id" in x.data.tags]
    assert run.info.status == "FAILED", r.output  # it read the zeros: never stored FINISHED
    reason = " ".join(str(v) for k, v in run.data.tags.items() if "reason" in k)
    assert f"{corpus / 'train.bin'}: its mtime_ns changed" in reason, run.data.tags
    assert "a training shard changed while the trial trained, so its result would mix two corpora" in reason


def test_an_edit_between_the_sampled_blocks_with_its_mtime_put_back_is_found(tmp_path):
    """A same-size write into a streamed shard that misses every sampled block, its mtime reset
    (``os.utime``, as ``cp -p``/``rsync -t`` do): size, mtime, inode and the blocks all agree, the
    inode's change time does not (a write always moves it); before, the trial was stored FINISHED."""
    import os

    import pytest

    from harness.data.shards import DIGEST_BLOCK_BYTES, DIGEST_BLOCKS
    from harness.data.tokens import load_tokens

    rng = np.random.default_rng(0)
    shard = tmp_path / "fineweb_train_000001.bin"
    write_shard(shard, rng.integers(0, 64, 1_000_000).astype(np.uint16))
    write_shard(tmp_path / "fineweb_val_000000.bin", rng.integers(0, 64, 4_100).astype(np.uint16))
    src = load_tokens(str(tmp_path), seq_len=32, vocab_size=64, stream=True).stream
    src.verify()  # untouched: nothing to say
    st = os.stat(shard)
    gap = (st.st_size - DIGEST_BLOCK_BYTES) // (DIGEST_BLOCKS - 1)  # ~133 KB between block starts
    with open(shard, "r+b") as f:
        f.seek(4 * gap + DIGEST_BLOCK_BYTES + 100)
        f.write(b"\0" * (gap - DIGEST_BLOCK_BYTES - 200))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(shard).st_mtime_ns == st.st_mtime_ns
    with pytest.raises(ValueError, match=r"fineweb_train_000001\.bin: its ctime_ns changed .* a training "
                                         r"shard changed while the trial trained"):
        src.verify()
