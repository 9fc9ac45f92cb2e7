"""The tuning paths and certificates of a sweep's coordinate descents.

An adaptive sweep logs on its parent run ``search.json`` (:data:`harness.core.names.ARTIFACT_SEARCH`):
one record per cell (optimizer entry on a task), what
``harness.orchestrate.coordinate.CoordinateDescent.describe`` wrote for ``method: coordinate_descent``:
the start, the path (per pass and axis, the values tried with their objectives and the one chosen),
the selected configuration and its certificate (every one-step neighbour on the grid trained and not
better by the selection rule, or why not). The latest parent run that holds one is read: each
invocation logs the whole search again, replayed from the store.

:func:`read_search` reads it, :func:`certificate_rows` and :func:`path_rows` make the HTML report's
"Tuning paths" section, :func:`search_table` the ``harness.results(...).search`` frame. A sweep
without a coordinate descent has none of them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pandas as pd

from harness.core.names import ARTIFACT_SEARCH
from reports.runs import download_text

__all__ = ["certificate_rows", "descents", "path_rows", "read_search", "search_table"]

METHOD = "coordinate_descent"


def read_search(client, parents: Sequence) -> list[dict[str, Any]]:
    """The records of the latest parent run's ``search.json`` that can be read (``[]``: none, or
    not a list)."""
    for run in reversed(parents):
        text = download_text(client, run.info.run_id, ARTIFACT_SEARCH)
        if text is None:
            continue
        try:
            records = json.loads(text)
        except ValueError:
            continue
        if isinstance(records, list):
            return [r for r in records if isinstance(r, dict)]
    return []


def descents(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The coordinate-descent records, by task then optimizer."""
    return sorted((r for r in records if r.get("method") == METHOD and "certificate" in r),
                  key=lambda r: (str(r.get("task")), str(r.get("optimizer"))))


def _v(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _point(values: dict[str, Any]) -> str:
    """``b1=0.9 step_size=0.00316228`` (the flat keys' last part)."""
    return " ".join(f"{k.rsplit('.', 1)[-1]}={_v(v)}" for k, v in values.items())


def objective_words(o: dict[str, Any] | None) -> str:
    """``"accuracy 0.9756 (2/2 seeds reached the target, median 50 steps)"``; ``"—"`` for none."""
    if not o:
        return "—"
    name = str(o.get("metric", "")).split("/", 1)[-1]
    val = "—" if o.get("value") is None else f"{o['value']:.4f}"
    seeds, fin, reached = o.get("seeds", 0), o.get("finished", 0), o.get("reached", 0)
    bits = [f"{fin}/{seeds} finished"] if fin < seeds else []
    if reached:
        steps = _v(o.get("steps_to_target"))
        bits.append(f"{reached}/{seeds} seeds reached the target, median {steps} steps")
    return f"{name} {val}" + (f" ({'; '.join(bits)})" if bits else "")


def certificate_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per coordinate descent: ``task``, ``optimizer``, ``start``, ``selected``,
    ``objective`` (its validation value, :func:`objective_words`), ``passes`` (``"2 of 3"``),
    ``trials``, ``steps``, ``stop`` (why it ended), ``certified`` (bool), ``certificate`` (the
    sentence), ``path`` (:func:`path_rows`) and ``neighbours`` (axis, value, objective, verdict)."""
    out = []
    for r in descents(records):
        cert = r["certificate"]
        nbs = [{"axis": n["axis"], "value": _v(n["value"]), "objective": objective_words(n.get("objective")),
                "verdict": ("not trained" if not n["trained"] else "better" if n["better"]
                            else "tied" if n.get("tied") else "not better")}
               for n in cert.get("neighbours", [])]
        out.append({
            "task": r.get("task", ""), "optimizer": r.get("optimizer", ""),
            "start": _point(r.get("start", {}).get("values", {})),
            "selected": _point(r.get("selected", {}).get("values", {})),
            "objective": objective_words(r.get("selected", {}).get("objective")),
            "passes": f"{r.get('passes_done', 0)} of {r.get('passes', '?')}",
            "trials": r.get("trials", 0), "steps": f"{r.get('steps_spent', 0):,}",
            "stop": r.get("stop_words", ""), "certified": bool(cert.get("certified")),
            "certificate": cert.get("words", ""), "path": path_rows(r), "neighbours": nbs,
        })
    return out


def path_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The path of one descent: ``pass`` (0: the start), ``axis``, ``tried`` (each value with its
    validation value, the chosen one marked), ``move`` (``"0.9 → 0.95"`` or ``"stays at 0.9"``)."""
    start = record.get("start", {})
    rows = [{"pass": 0, "axis": "start", "tried": _point(start.get("values", {})),
             "move": objective_words(start.get("objective"))}]
    for p in record.get("path", []):
        tried = " · ".join(
            ("▶" if t["value"] == p["chosen"] else "") + f"{_v(t['value'])}: "
            + ("—" if not t.get("objective") or t["objective"].get("value") is None
               else f"{t['objective']['value']:.4f}")
            for t in p.get("tried", []))
        move = (f"{_v(p['from'])} → {_v(p['chosen'])}" if p.get("moved") else f"stays at {_v(p['chosen'])}")
        if not p.get("complete", True):
            move += " (budget: not every value tried)"
        rows.append({"pass": p["pass"], "axis": p["axis"].rsplit(".", 1)[-1], "tried": tried, "move": move})
    return rows


def search_table(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per coordinate descent (``harness.results(...).search``): ``task``, ``optimizer``,
    ``certified`` (bool), ``certificate`` (the sentence), ``selected`` (its values), ``objective``,
    ``passes_done``, ``passes``, ``stop`` (``converged``, ``passes``, ``budget``, ``waiting``),
    ``trials`` and ``steps_spent``; empty (those columns) without one."""
    cols = ["task", "optimizer", "certified", "certificate", "selected", "objective", "passes_done",
            "passes", "stop", "trials", "steps_spent"]
    rows = [{"task": r.get("task", ""), "optimizer": r.get("optimizer", ""),
             "certified": bool(r["certificate"].get("certified")),
             "certificate": r["certificate"].get("words", ""),
             "selected": _point(r.get("selected", {}).get("values", {})),
             "objective": objective_words(r.get("selected", {}).get("objective")),
             "passes_done": r.get("passes_done", 0), "passes": r.get("passes"), "stop": r.get("stop", ""),
             "trials": r.get("trials", 0), "steps_spent": r.get("steps_spent", 0)}
            for r in descents(records)]
    return pd.DataFrame(rows, columns=cols)
