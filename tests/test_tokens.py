"""Token shards (``tokens:PATH``): the three formats read as a plain numpy reading of the files, real
sweeps of ``transformer_lm`` on each, the data digest in the trial identity, and every bad input
refused with one line naming the key path and the file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from harness.cli import app
from harness.data.kinds import dataset_digest, kind_of
from harness.data.shards import read_info, write_shard
from harness.data.tokenize import info, tokenize_files
from harness.data.tokens import load_tokens, windows

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
#: Real English that every clone has: the project's own docs.
TEXTS = [ROOT / "docs" / "architecture.md", ROOT / "README.md"]
SEQ = 16


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # the dry run's lines unwrapped


@pytest.fixture(scope="module")
def shard_dirs(tmp_path_factory) -> dict[str, Path]:
    """One folder per format, tokenized from :data:`TEXTS` (bytes; ``gpt2`` also cl100k as ``llama3``)."""
    base = tmp_path_factory.mktemp("shards")
    out = {}
    for fmt in ("gpt2", "nanogpt"):
        out[fmt] = base / fmt
        tokenize_files(TEXTS, out[fmt], "bytes", fmt, shard_tokens=40_000)
    out["llama3"] = base / "llama3"
    tokenize_files(TEXTS[:1], out["llama3"], "cl100k_base", "gpt2")  # ids pass 65,535: uint32
    return out


def _numpy_tokens(path: Path) -> np.ndarray:
    """A shard read with nothing but numpy, as llm.c's and nanoGPT's loaders read it."""
    head = np.fromfile(path, dtype=np.int32, count=256)
    if head[0] == 20240520:
        assert head[1] == 1
        return np.fromfile(path, dtype=np.uint16, offset=1024)[: head[2]]
    if head[0] == 20240801:
        assert head[1] == 7
        return np.fromfile(path, dtype=np.uint32, offset=1024)[: head[2]]
    return np.fromfile(path, dtype=np.uint16)


def test_formats_and_windows_match_a_plain_numpy_reading(shard_dirs):
    text = b"".join(p.read_bytes() for p in TEXTS)
    for fmt, d in shard_dirs.items():
        files = sorted(d.glob("*.bin"))
        assert {read_info(f).format for f in files} == {fmt}
        train = np.concatenate([_numpy_tokens(f) for f in files if "train" in f.name]).astype(np.int64)
        val = np.concatenate([_numpy_tokens(f) for f in files if "val" in f.name]).astype(np.int64)
        if fmt != "llama3":  # bytes: the stream is the texts' bytes, each followed by 256
            stream = np.concatenate([train, val])
            assert stream[stream != 256].tobytes() == np.frombuffer(text, np.uint8).astype(np.int64).tobytes()
        else:
            assert train.max() > 65_535
        ds = load_tokens(str(d), seq_len=SEQ, valid_tokens=len(val) - 1)
        n_test = len(val) - 1  # test: held out from the end of training, as many tokens as validation
        tr, te = train[:-n_test], train[-n_test:]
        for got, want in ((ds.x_train, tr), (ds.x_test, te), (ds.x_valid, val)):
            n = (len(want) - 1) // SEQ
            assert got.shape == (n, SEQ)
            assert np.array_equal(got[3], want[3 * SEQ:4 * SEQ])
            assert np.array_equal(got[-1], want[(n - 1) * SEQ:n * SEQ])
        assert np.array_equal(ds.y_train[:, :-1], ds.x_train[:, 1:])
        assert ds.num_classes == json.loads((d / "tokens.json").read_text())["max_token_id"] + 1


def test_windows_by_hand():
    x, y = windows(np.arange(10), 3)
    assert x.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert y.tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]


def test_info_command_shows_format_tokens_vocabulary_and_digest(shard_dirs):
    r = runner.invoke(app, ["data", "info", str(shard_dirs["llama3"]), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    meta = json.loads((shard_dirs["llama3"] / "tokens.json").read_text())
    assert d["format"] == ["llama3"] and d["tokenizer"] == "cl100k_base"
    assert d["train_tokens"] + d["valid_tokens"] == meta["tokens"]
    assert d["vocab_bound"] == meta["max_token_id"] + 1
    assert d["digest"] == dataset_digest(f"tokens:{shard_dirs['llama3']}", {})
    assert 3.0 < meta["bytes_per_token"] < 6.0  # cl100k on English prose


def test_digest_is_cheap_and_sees_a_rewrite(tmp_path):
    d = tmp_path / "c"
    toks = np.arange(300_000) % 250
    write_shard(tmp_path / "x", toks[:10])  # the name decides the split; this one is outside the folder
    d.mkdir()
    write_shard(d / "a_train.bin", toks)
    write_shard(d / "a_val.bin", toks[:1000])
    before = dataset_digest(f"tokens:{d}", {})
    assert before == dataset_digest(f"tokens:{d}", {}) and len(before) == 16
    toks2 = toks.copy()
    toks2[10] += 1  # same size, one token changed in the first sampled block
    write_shard(d / "a_train.bin", toks2)
    after = dataset_digest(f"tokens:{d}", {})
    assert after != before
    sampled = dataset_digest(f"tokens:{d}", {"digest": "sampled"})
    toks2[150_000] += 1  # between sampled blocks: unseen by the sampled digest (its stated limit) ...
    write_shard(d / "a_train.bin", toks2)
    assert dataset_digest(f"tokens:{d}", {"digest": "sampled"}) == sampled
    assert dataset_digest(f"tokens:{d}", {}) not in (before, after)  # ... seen by the default, whole
    after = dataset_digest(f"tokens:{d}", {})
    write_shard(d / "a_train.bin", toks2[:-1])  # one token shorter: the size and header differ
    assert dataset_digest(f"tokens:{d}", {}) not in (before, after)


def _bad_dirs(base: Path) -> dict[str, tuple[Path, dict, str]]:
    """name -> (folder, dataset hparams, what the error line must contain)."""
    toks = np.arange(2000) % 200
    out = {}

    def folder(name: str) -> Path:
        d = base / name
        d.mkdir()
        write_shard(d / "x_val_0.bin", toks[:200])
        return d

    d = folder("truncated")
    write_shard(d / "x_train_0.bin", toks)
    with open(d / "x_train_0.bin", "r+b") as f:
        f.truncate(1024 + 2 * 1000 + 1)
    out["truncated"] = (d, {}, f"name: {d / 'x_train_0.bin'}: 3025 bytes, but its header says 2000 tokens")
    d = folder("magic")
    write_shard(d / "x_train_0.bin", toks)
    with open(d / "x_train_0.bin", "r+b") as f:
        f.write(np.int32(12345).tobytes())
    out["magic"] = (d, {}, f"name: {d / 'x_train_0.bin'}: magic number 12345 is not llm.c's 20240520")
    d = folder("version")
    write_shard(d / "x_train_0.bin", toks)
    with open(d / "x_train_0.bin", "r+b") as f:
        f.seek(4)
        f.write(np.int32(3).tobytes())
    out["version"] = (d, {}, f"name: {d / 'x_train_0.bin'}: version 3, expected 1")
    d = folder("vocab")
    write_shard(d / "x_train_0.bin", toks)
    # the validation shard is read first: ids 0..199, so the first beyond 100 is id 100 at token 100
    out["vocab"] = (d, {"vocab_size": 100}, f"hparams.vocab_size: {d / 'x_val_0.bin'} holds token id 100 at "
                                            f"token 100, beyond vocab_size 100")
    d = base / "empty"
    d.mkdir()
    out["empty"] = (d, {}, f"name: {d}: empty folder, no token shards")
    d = folder("glob")
    write_shard(d / "x_train_0.bin", toks)
    out["glob"] = (d, {"train_glob": "*fineweb_train*"},
                   "hparams.train_glob: '*fineweb_train*' matches no file")
    out["valid"] = (d, {"valid_tokens": 5000}, "hparams.valid_tokens: asked 5,000 validation tokens, the "
                                               "files matching '*val*'")
    d = folder("partial")  # what a killed data tokenize of an earlier version left: no tokens.json
    write_shard(d / "text_train_000000.bin", toks)
    out["partial"] = (d, {}, f"name: {d}: 1 shard named as data tokenize names them (text_train_000000.bin, "
                             f"...) but no tokens.json, which it writes last: an unfinished output")
    d = folder("dangling")
    write_shard(d / "x_train_0.bin", toks)
    (d / "x_train_1.bin").symlink_to(base / "gone.bin")
    out["dangling"] = (d, {}, f"name: {d / 'x_train_1.bin'}: a dangling symbolic link")
    out["digest"] = (base / "glob", {"digest": "every"}, "hparams.digest: 'every': choose one of auto, full, "
                                                         "sampled")
    return out


def test_bad_input_is_one_line_naming_key_path_and_file_exit_2_nothing_written(tmp_path):
    cases = _bad_dirs(tmp_path)
    for name, (d, hp, want) in cases.items():
        cfg = tmp_path / f"{name}.yaml"
        store = tmp_path / f"{name}.db"
        cfg.write_text(yaml.safe_dump({
            "name": "bad", "models": [{"name": "transformer_lm", "hparams": {"width": 8, "depth": 1}}],
            "optimizers": [{"name": "adam", "hparams": {"step_size": 1e-3}}], "schedules": ["constant"],
            "datasets": [{"name": f"tokens:{d}", "hparams": {"seq_len": 8, **hp}}], "seeds": [0],
            "batch_size": 2, "budget": {"steps": 2}}))
        r = runner.invoke(app, ["sweep", str(cfg), "--tracking-uri", f"sqlite:///{store}"])
        lines = [ln for ln in r.output.splitlines() if "datasets[0]" in ln]
        assert r.exit_code == 2, (name, r.output)
        assert len(lines) == 1 and f"datasets[0].{want}" in lines[0], (name, r.output)
        assert not store.exists(), name


def test_a_shard_rewritten_after_planning_fails_its_trial_with_the_reason(shard_dirs, tmp_path):
    from harness.core.spec import TrialSpec
    from harness.execute.training import load_dataset_of

    name = f"tokens:{shard_dirs['gpt2']}"
    spec = TrialSpec.make(sweep="s", model="transformer_lm", optimizer="adam", schedule="constant",
                          dataset=name, seed=0, steps=1, batch_size=2, eval_every=1,
                          dataset_hparams={"seq_len": SEQ}, dataset_digest="0123456789abcdef")
    with pytest.raises(ValueError, match=r"changed while the sweep ran \(digest 0123456789abcdef -> "):
        load_dataset_of(spec)
    assert kind_of(name)[0].prefix == "tokens:"


def test_sweep_trains_on_every_format_and_a_rewritten_shard_reruns_only_its_trials(shard_dirs, tmp_path):
    cfg = tmp_path / "lm.yaml"
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    datasets = [{"name": f"tokens:{d}", "hparams": {"seq_len": SEQ, "valid_tokens": 512}}
                for d in shard_dirs.values()]
    cfg.write_text(yaml.safe_dump({
        "name": "lm", "models": [{"name": "transformer_lm", "hparams": {"width": 8, "depth": 1,
                                                                         "num_heads": 2}}],
        "optimizers": [{"name": "adam", "hparams": {"step_size": 3e-3}}], "schedules": ["constant"],
        "datasets": datasets, "seeds": [0], "batch_size": 4, "budget": {"steps": 3}, "eval_every": 3,
        "measure_perf": False,
        "target": {"metric": "valid/loss", "value": 1.0}}))
    r = runner.invoke(app, ["sweep", str(cfg), "--tracking-uri", store])
    assert r.exit_code == 0, r.output
    import mlflow

    client = mlflow.MlflowClient(store)
    exp = client.get_experiment_by_name("lm")
    runs = [x for x in client.search_runs([exp.experiment_id]) if "harness.trial_id" in x.data.tags]
    assert len(runs) == 3 and {x.info.status for x in runs} == {"FINISHED"}
    for x in runs:  # a language model's metrics: perplexity, bits per byte, token counts
        m, name = x.data.metrics, x.data.params["dataset"]
        bpt = json.loads((Path(name.removeprefix("tokens:")) / "tokens.json").read_text())["bytes_per_token"]
        assert m["valid/perplexity"] == pytest.approx(math.exp(m["valid/loss"]), rel=1e-6)
        assert m["test/perplexity"] == pytest.approx(math.exp(m["test/loss"]), rel=1e-6)
        assert m["valid/bits_per_byte"] == pytest.approx(m["valid/loss"] / math.log(2) / bpt, rel=1e-6)
        assert m["dataset/valid_tokens"] == 512 // SEQ * SEQ
    digests = {x.data.params["dataset"]: x.data.params["dataset.digest"] for x in runs}
    assert digests == {d["name"]: dataset_digest(d["name"], {}) for d in datasets}
    # rewrite one shard of the nanogpt folder: only its trial re-runs, and the dry run says why
    d = shard_dirs["nanogpt"]
    toks = np.fromfile(d / "train.bin", np.uint16).copy()
    toks[:50] = 65
    write_shard(d / "train.bin", toks, "nanogpt")
    r = runner.invoke(app, ["sweep", str(cfg), "--tracking-uri", store, "--dry-run"],
                      env={"COLUMNS": "1000"})  # the table's cells unwrapped, whatever the tmp path's length
    assert r.exit_code == 0 and "3 trials, 2 done (skipped), 1 to run" in r.output, r.output
    assert "to run: 1 data changed" in r.output, r.output
    new = dataset_digest(f"tokens:{d}", {})
    assert f"{digests[f'tokens:{d}'][:8]} -> {new[:8]}" in r.output, r.output
    r = runner.invoke(app, ["sweep", str(cfg), "--tracking-uri", store])
    assert r.exit_code == 0, r.output
    runs = [x for x in client.search_runs([exp.experiment_id]) if "harness.trial_id" in x.data.tags]
    assert len(runs) == 4 and new == info(d)["digest"]
    assert new in {x.data.params["dataset.digest"] for x in runs}


def test_tokenize_refuses_what_it_cannot_do(tmp_path):
    r = runner.invoke(app, ["data", "tokenize", str(TEXTS[0]), "-o", str(tmp_path / "o"),
                            "--tokenizer", "cl100k_base", "--format", "nanogpt"])
    assert r.exit_code == 2
    assert "tokenize: tokenizer 'cl100k_base' has ids above 65,535: nanoGPT's uint16 files" in r.output
    r = runner.invoke(app, ["data", "tokenize", str(tmp_path / "missing.txt"), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "no such file" in r.output
    r = runner.invoke(app, ["data", "info", str(tmp_path / "nothing")])
    assert r.exit_code == 2 and "not a folder of token shards" in r.output


def test_lm_text_yaml_header_makes_the_data_it_reads(tmp_path, monkeypatch):
    """The example's header commands, run as written (brace list expanded, offline), make the shards
    its dataset names; its dry run then plans 4 trials (the pre-flight loads the data)."""
    import re
    import shlex

    header = (ROOT / "experiments" / "lm_text.yaml").read_text().split("\nname:")[0]
    lines = [ln.removeprefix("#").strip() for ln in header.splitlines()]
    cmd = " ".join(ln.rstrip("\\").strip() for ln in lines[lines.index(next(
        ln for ln in lines if "data tokenize" in ln)):] if ln)
    cmd = cmd[:cmd.index(" .venv/bin/python -m harness data info")]
    files = re.search(r"/usr/share/common-licenses/\{([^}]*)\}", cmd)
    texts = [f"/usr/share/common-licenses/{n}" for n in files.group(1).split(",")]
    if not all(Path(t).is_file() for t in texts):
        pytest.skip("no /usr/share/common-licenses (Debian's base-files) on this machine")
    args = shlex.split(cmd.replace(files.group(0), " ".join(texts)))
    assert args[:4] == [".venv/bin/python", "-m", "harness", "data"]
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, args[3:])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "data" / "licenses" / "tokens.json").read_text())["tokens"] > 150_000
    r = runner.invoke(app, ["sweep", str(ROOT / "experiments" / "lm_text.yaml"), "--dry-run",
                            "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"])
    assert r.exit_code == 0 and "4 trials" in r.output, r.output
