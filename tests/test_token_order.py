"""``order: sequential`` on token shards is modded-nanogpt's reader (``distributed_data_generator``,
ported below from ``records/track_3_optimization/train_gpt_simple.py``): shards in name order, one
shard's consecutive windows per update, the same for every seed; a trial SIGKILLed mid-run
resumes at the same position; a dataset that is not token shards is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from test_token_stream_kill import kill_mid_trial_and_resume
from typer.testing import CliRunner

from harness.cli import app
from harness.data.shards import write_shard
from harness.data.tokens import TokensError, load_tokens

ROOT = Path(__file__).resolve().parents[1]


def upstream_batches(shards: list[np.ndarray], batch_size: int, seq_len: int):
    """modded-nanogpt's ``distributed_data_generator`` on one rank: ``(inputs, targets)`` ``(B, T)``."""
    files = iter(shards)
    tokens, pos = next(files), 0
    while True:
        if pos + batch_size + 1 >= len(tokens):
            tokens, pos = next(files), 0
        buf = tokens[pos:][:batch_size + 1]
        pos += batch_size
        yield buf[:-1].reshape(-1, seq_len), buf[1:].reshape(-1, seq_len)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """4 training shards (one of 50 tokens: it holds one batch of 4 × 8), one validation shard."""
    root = tmp_path_factory.mktemp("ordered")
    rng = np.random.default_rng(0)
    train = [rng.integers(0, 200, n).astype(np.uint16) for n in (300, 50, 171, 257)]
    for k, t in enumerate(train):
        write_shard(root / f"x_train_{k:03d}.bin", t)
    write_shard(root / "x_val_000.bin", rng.integers(0, 200, 100).astype(np.uint16))
    return root, train


def test_sequential_is_upstreams_reader(shards):
    """Every batch of a pass over the shards equals upstream's (22 of 4 × 8 tokens; the last 9
    training tokens are the held-out test split, never read); update 22 starts over at the first
    shard (upstream stops); seeds 0 and 5 read the same; a data-parallel share is its rows."""
    root, train = shards
    ds = load_tokens(str(root), seq_len=8, vocab_size=256, order="sequential", test_tokens=9)
    files = [t.astype(np.int64) for t in train[:-1]] + [train[-1][:-9].astype(np.int64)]
    ref = []
    gen = upstream_batches(files, 4 * 8, 8)
    try:
        while True:
            ref.append(next(gen))
    except (StopIteration, RuntimeError):  # upstream's file iterator runs out
        pass
    assert len(ref) == 22  # (300-34)//32+1 = 9, 1, (171-34)//32+1 = 5, (248-34)//32+1 = 7
    x, y = ds.stream.batches(0, 0, 23, 4)
    for i, (rx, ry) in enumerate(ref):
        np.testing.assert_array_equal(x[i], rx)
        np.testing.assert_array_equal(y[i], ry)
    np.testing.assert_array_equal(x[22], ref[0][0])
    x5, _ = ds.stream.batches(5, 10, 3, 4)
    np.testing.assert_array_equal(x5, x[10:13])
    part, _ = ds.stream.batches(0, 3, 2, 4, slice(2, 4))
    np.testing.assert_array_equal(part, x[3:5, 2:4])
    rnd = load_tokens(str(root), seq_len=8, vocab_size=256, stream=True, test_tokens=9)
    assert not np.array_equal(rnd.stream.batches(0, 0, 1, 4)[0], x[:1])  # the default is unchanged: random


def test_sequential_needs_a_shard_that_holds_a_batch(shards):
    root, _ = shards
    ds = load_tokens(str(root), seq_len=8, vocab_size=256, order="sequential", test_tokens=9)
    with pytest.raises(ValueError, match=r"no training shard holds batch_size · seq_len \+ 2 = 322 tokens "
                                         r"\(the largest has 300\)"):
        ds.stream.batches(0, 0, 1, 40)
    with pytest.raises(TokensError, match="order: sequential reads them from the shards") as e:
        load_tokens(str(root), seq_len=8, vocab_size=256, order="sequential", stream=False)
    assert e.value.key == "stream"


@pytest.mark.parametrize("dataset, line", [
    ("digits", "datasets[0].hparams.order: unknown hyperparameter of dataset 'digits'"),
    ("markov_lm", "datasets[0].hparams.order: expected int, got 'sequential'"),
    ("tokens", "datasets[0].hparams.order: expected"),
    ("big", "batch_size: 40 on dataset 'tokens:"),
])
def test_order_refused_before_any_work(tmp_path, write_sweep, monkeypatch, shards, dataset, line):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    ds = ({"name": dataset, "hparams": {"order": "sequential"}} if dataset in ("digits", "markov_lm") else
          {"name": f"tokens:{shards[0]}", "hparams": {"seq_len": 8, "order": "shuffled"}})
    lm = {}
    if dataset == "big":  # 40 × 8 tokens a batch: no shard holds 322 (the largest has 300)
        ds["hparams"]["order"] = "sequential"
        lm = {"batch_size": 40, "target": {"metric": "valid/loss", "value": 9.0},
              "models": [{"name": "gpt", "hparams": {"width": 8, "depth": 0, "num_heads": 2}}]}
    cfg = write_sweep(datasets=[ds], **lm)
    r = CliRunner().invoke(app, ["sweep", str(cfg)], env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert f"{cfg}: {line}" in r.output
    if dataset in ("digits", "markov_lm"):  # markov_lm's order is its chain's: an int
        assert "order (random | sequential) is a tokens: dataset's" in r.output
    if dataset == "big":
        assert "no training shard holds batch_size · seq_len + 2 = 322 tokens" in r.output
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


STEPS = 40


def test_sigkill_mid_trial_resumes_at_the_same_position(tmp_path, monkeypatch):
    """A real sweep (gpt, torch init, loss_reduction sum, order sequential across 3 shards, a claim
    rule) SIGKILLed once a checkpoint exists, run again: every train loss and evaluation equals an
    uninterrupted run's bit for bit, MLflow stored the new keys as params, and the report states
    the claim rules on the stored final loss."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = np.frombuffer((ROOT / "docs" / "architecture.md").read_bytes()[:6_000], np.uint8)
    for k, (lo, hi) in enumerate(((0, 700), (700, 1_300), (1_300, 5_000))):  # 20, 17, 115 batches
        write_shard(corpus / f"doc_train_{k:03d}.bin", text[lo:hi])
    write_shard(corpus / "doc_val_000.bin", text[5_000:])
    cfg, ck = tmp_path / "kill.yaml", tmp_path / "ck"
    cfg.write_text(yaml.safe_dump({
        "name": "order-kill",
        "models": [{"name": "gpt", "hparams": {"width": 8, "depth": 1, "num_heads": 2, "init": "torch"}}],
        "optimizers": [{"name": "adam", "hparams": {"step_size": 3e-3}}], "schedules": ["constant"],
        "datasets": [{"name": f"tokens:{corpus}", "hparams": {"seq_len": 8, "vocab_size": 256,
                                                              "order": "sequential", "valid_tokens": 256,
                                                              "test_tokens": 256}}],
        "seeds": [0], "batch_size": 4, "budget": {"steps": STEPS}, "eval_every": 20, "loss_reduction": "sum",
        "target": {"metric": "valid/loss", "value": 9.0, "claim": {"margin": 0.004, "single_run": 8.0}},
        "steps_per_dispatch": 5, "measure_perf": False, "checkpoint_every": 10, "checkpoint_dir": str(ck)}))
    run = kill_mid_trial_and_resume(cfg, tmp_path, ck, "order-kill", STEPS)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    p = run.data.params
    assert (p["dataset.order"], p["model.init"], p["train.loss_reduction"]) == ("sequential", "torch", "sum")
    assert (p["claim.margin"], p["claim.single_run"]) == ("0.004", "8.0")
    import reports.html
    from harness.core.claim_rules import ClaimRules, claim_rule_lines
    from reports import load_frame, make_report
    from reports.claim_table import claim_rows

    want = claim_rule_lines([(0, run.data.metrics["final/valid_loss"])], 9.0, ClaimRules(0.004, 8.0))
    (row,) = claim_rows(load_frame("order-kill", tracking_uri=uri), {})
    assert row["rules"] == want
    monkeypatch.setattr(reports.html, "figure_items", lambda frame, stem: [])  # the claims, not the figures
    html = make_report("order-kill", tracking_uri=uri, output=str(tmp_path / "r.html")).read_text()
    assert 'id="claim-rules"' in html and all(line in html for line in want)
