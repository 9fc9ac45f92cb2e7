"""tests/benchmarks/compare_curves.py: exact curve comparison of two MLflow stores."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
from subproc import load_benchmark_script


def _script():
    return load_benchmark_script("compare_curves")


def _store(path: Path, rows: dict[str, tuple[str, list[tuple[str, int, float]]]]) -> str:
    """A store with MLflow's two tables as the script reads them: ``{run: (batching label, [(key,
    step, value)])}``, each run tagged ``harness.trial_id = run``."""
    con = sqlite3.connect(path)
    con.execute("create table metrics (key text, value real, timestamp int, run_uuid text, step int)")
    con.execute("create table tags (key text, value text, run_uuid text)")
    for run, (label, metrics) in rows.items():
        con.executemany("insert into tags values (?, ?, ?)",
                        [("harness.trial_id", run, run), ("harness.batching", label, run)])
        con.executemany("insert into metrics values (?, ?, 0, ?, ?)", [(k, v, run, s) for k, s, v in metrics])
    con.commit()
    con.close()
    return str(path)


def test_exact_equality_clocks_left_out_and_batching_apart(tmp_path, capsys):
    cc = _script()
    loss = [("valid/loss", 0, 2.25), ("valid/loss", 50, 0.5)]
    a = _store(tmp_path / "a.db", {"t1": ("sequential: x", [*loss, ("time/train_s", 0, 1.0)]),
                                   "t2": ("vmap(2): x", loss)})
    b = _store(tmp_path / "b.db", {"t1": ("sequential: y", [*loss, ("time/train_s", 0, 9.0)]),
                                   "t2": ("sequential: y", [loss[0], ("valid/loss", 50, 0.7)])})
    assert cc.main([a, b]) == 0  # t1 equal but for its clock; t2 batched differently: left out
    out = capsys.readouterr().out
    assert out == ("not compared (1, vmapped in one store, alone in the other): t2\n"
                   "identical: 1 trials, 1 metrics, 2 values\n")
    ulp = float(np.nextafter(np.float32(0.5), np.float32(1)))
    c = _store(tmp_path / "c.db", {"t1": ("sequential: z", [loss[0], ("valid/loss", 50, ulp)]),
                                   "t2": ("vmap(2): z", loss)})
    assert cc.main([a, c]) == 1  # one float32 ulp is a difference
    assert capsys.readouterr().out == f"DIFFERENT:\n  t1 valid/loss: step 50: 0.5 vs {ulp!r}\n"
