"""tests/device/check.sh runs as is on this CPU at its small sizes and prints its one table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.train.timing import device_kind

ROOT = Path(__file__).resolve().parents[1]


def test_device_check_runs_every_part_on_a_cpu(tmp_path):
    # the bf16 peak a fresh machine measures once (peak.json); preset so that CI does not pay it
    kind = device_kind()
    (tmp_path / "peak.json").write_text(json.dumps({f"{kind}|float32": 1e12, f"{kind}|bfloat16": 1e12}))
    env = {**os.environ, "HARNESS_CACHE_DIR": str(tmp_path), "PYTHON": sys.executable}
    env.pop("HARNESS_BATCH", None)  # the check reports what batching decides
    out = tmp_path / "check.json"
    r = subprocess.run(["bash", str(ROOT / "tests/device/check.sh"), "--small", "--json", str(out)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(out.read_text())
    assert (got["platform"], got["size"]) == ("cpu", "small")
    rows = {(row["part"], row["dtype"]): row for row in got["rows"]}
    models = ("transformer_lm", "resnet18")
    parts = {"quickstart", "--jobs 2, one device", "vmapped trials", *(f"{m}/flax" for m in models),
             *(f"MFU {m}" for m in models), "gpt remat none", "gpt remat block", "gpt remat"}
    assert {p for p, _ in rows} == parts
    for p in ("quickstart", "--jobs 2, one device"):
        assert rows[(p, "auto")]["finished"] == rows[(p, "auto")]["trials"] == 2
    for m in ("transformer_lm", "resnet18"):
        for dt in ("float32", "bfloat16"):
            assert rows[(f"{m}/flax", dt)]["ratio"] > 0
            assert rows[(f"{m}/flax", dt)]["detail"].startswith("harness/flax time, < 1: harness faster; ")
            assert 0 < rows[(f"MFU {m}", dt)]["mfu"] < 1  # of the preset peak, 1 TFLOP/s
    assert rows[("vmapped trials", "float32")]["speedup"] > 0
    # the track's gpt step, with and without remat
    for remat in ("none", "block"):
        g = rows[(f"gpt remat {remat}", "bfloat16")]
        assert g["step_ms"] > 0 and g["compiled_peak_gib"] > 0 and g["batch"] == 2
    assert rows[("gpt remat", "bfloat16")]["memory_ratio"] > 0
    # the two ratios run in opposite directions: each row says which (before: neither did)
    assert rows[("vmapped trials", "float32")]["detail"].startswith(
        "one-by-one/vmapped time, > 1: vmapped faster; ")
    table = r.stdout[r.stdout.rindex("\npart ") + 1:]  # the whole table, after each part's own
    assert len([line for line in table.splitlines()[2:] if line.strip()]) == len(got["rows"])


def test_a_tpu_host_gets_a_refused_row_for_jobs_2_not_a_crash():
    # a TPU chip opens in one process only: the sweep refuses --jobs 2 there (UsageError), which
    # ended the check's whole table on a TPU v5e before any row was printed
    sys.path.insert(0, str(ROOT / "tests" / "device"))
    import check

    assert check.jobs_to_run("gpu") == ((1, 2), [])
    assert check.jobs_to_run("cpu") == ((1, 2), [])
    jobs, rows = check.jobs_to_run("tpu")
    assert jobs == (1,)
    assert [(r["part"], r["figure"]) for r in rows] == [("--jobs 2, one device", "refused")]


def test_the_docstring_says_what_the_check_runs(tmp_path):
    """The docstring said the small quickstart is 4 trials (it runs 2) and that the vmapped row
    times the seeds "vmapped as decided" (it times programs of 8 when the harness decides
    sequential)."""
    import harness

    sys.path.insert(0, str(ROOT / "tests" / "device"))
    import check

    small = harness.sweep(check._sweep_config("small"), tracking_uri=f"sqlite:///{tmp_path}/m.db",
                          dry_run=True, quiet=True)
    doc = " ".join(check.__doc__.split())
    assert f"(small: {len(small.trial_ids)} trials of it)" in doc
    assert "vmapped as decided" not in doc and "else in one program of 8" in doc
    assert "``harness/flax``: lower is better; ``vmapped trials``: higher" in doc


def test_a_part_that_exits_is_a_row_and_the_json_is_strict(tmp_path, capsys):
    """A part calling sys.exit ended the whole check with no table and no JSON; the JSON held NaN
    (MFU without a stated peak), which strict parsers refuse; ``--parts ""`` was read as a part
    named ``''``."""
    sys.path.insert(0, str(ROOT / "tests" / "device"))
    import check

    def exits(size):
        sys.exit(3)

    rows = check.guarded("gpt", exits, "small")
    assert [(r["part"], r["figure"]) for r in rows] == [("gpt", "failed")]
    assert rows[0]["detail"].startswith("SystemExit: 3")
    out = json.dumps(check._json_safe({"rows": [{"mfu_pct": float("nan"), "x": [float("inf"), 1.0]}]}),
                     allow_nan=False)
    assert json.loads(out) == {"rows": [{"mfu_pct": None, "x": [None, 1.0]}]}
    for bad in ("", "gpt,,bogus"):
        try:
            check.main(["--parts", bad])
        except SystemExit as e:
            assert e.code == 2
        else:
            raise AssertionError(f"--parts {bad!r} was accepted")
    err = capsys.readouterr().err
    assert "unknown part(s) '': choose from quickstart, flax, gpt, vmapped" in err
    assert "unknown part(s) bogus: choose from" in err
