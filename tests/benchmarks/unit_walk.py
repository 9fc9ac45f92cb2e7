"""Follow one work unit from ``InProcessExecutor.run``: the ``harness`` files it passes through, for
a quickstart-like unit and an AlgoPerf unit.

Every Python call made while ``InProcessExecutor.run`` is on the stack (main thread, and threads
started meanwhile, such as the background writer) is recorded when it lands in a ``harness`` file.
Two readings are printed:

- **every file**: each ``harness`` file one of whose functions ran, and the cross-file call edges;
- **the path** (a maintainer reading the unit): each function taken once, at its first call,
  outside ``core`` (the shared vocabulary every layer imports); consecutive functions of one file
  are one *stay*. Its files, stays, and *upward calls*: a call into a file of a higher layer than
  its caller's (docs/architecture.md's order ``core < data < config < train < plan < tracking <
  execute < orchestrate < cli``; a callback handed down), with ``train → config`` counted apart.

Usage: ``python tests/benchmarks/unit_walk.py [ROOT] [--path]``: ROOT is the project tree to
import (default: this one); ``--path`` prints the path, one stay a line. To measure an older
checkout, run it with that tree first on ``sys.path`` and no editable install of this one.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
ROOT = Path(ARGS[0]).resolve() if ARGS else Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

LAYERS = ("core", "data", "config", "train", "plan", "tracking", "execute", "sweep", "orchestrate", "cli")
TOP = {"trainer.py": "train", "results_api.py": "cli", "__init__.py": "cli", "__main__.py": "cli"}
HARNESS = str(ROOT / "harness") + "/"
NADAMW_HP = {"learning_rate": 3.0e-3, "one_minus_beta1": 0.1, "beta2": 0.99, "weight_decay": 0.01,
             "warmup_factor": 0.1}
QUICK = {"name": "walk_quick", "models": [{"name": "mlp", "hparams": {"width": 64, "depth": 2}}],
         "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}}], "schedules": ["constant"],
         "datasets": ["digits"], "seeds": [0], "batch_size": 64, "budget": {"steps": 100},
         "eval_every": 50, "steps_per_dispatch": 50, "measure_perf": True,
         "target": {"metric": "valid/accuracy", "value": 0.9}}
ALGOPERF = {**QUICK, "name": "walk_algoperf", "datasets": ["mnist1d"],
            "models": [{"name": "mlp", "hparams": {"width": 32, "depth": 1}}],
            "optimizers": [{"name": "nadamw_ap", "hparams": NADAMW_HP,
                            "source": f"algoperf:{ROOT}/experiments/submissions/nadamw.py"}],
            "budget": {"steps": 20}, "eval_every": 10,
            "steps_per_dispatch": 10, "batch_size": 32}


def layer(path: str) -> str:
    parts = Path(path[len(HARNESS):]).parts
    return TOP.get(parts[0], "cli") if len(parts) == 1 else parts[0]


def rank(path: str) -> int:
    return LAYERS.index(layer(path))


class Walk:
    """The calls recorded while ``InProcessExecutor.run`` runs."""

    def __init__(self) -> None:
        self.functions: set[tuple[str, str]] = set()
        self.edges: set[tuple[str, str]] = set()
        self.upward: set[tuple[str, str, str, str]] = set()
        self.first: list[tuple[str, str]] = []  # (file, function) at first call, outside core
        self._seen: set[tuple[str, int]] = set()

    def tracer(self, frame, event, arg):
        callee = frame.f_code.co_filename
        if event != "call" or not callee.startswith(HARNESS):
            return None
        name = frame.f_code.co_name
        self.functions.add((callee, name))
        if (callee, frame.f_code.co_firstlineno) not in self._seen and layer(callee) != "core":
            self.first.append((callee, name))
        self._seen.add((callee, frame.f_code.co_firstlineno))
        back = frame.f_back
        while back is not None and not back.f_code.co_filename.startswith(HARNESS):
            back = back.f_back
        if back is not None and back.f_code.co_filename != callee:
            caller = back.f_code.co_filename
            self.edges.add((caller, callee))
            if rank(callee) > rank(caller) or (layer(caller), layer(callee)) == ("train", "config"):
                self.upward.add((caller, back.f_code.co_name, callee, name))
        return None

    def stays(self) -> list[tuple[str, list[str]]]:
        out: list[tuple[str, list[str]]] = []
        for path, name in self.first:
            if out and out[-1][0] == path:
                out[-1][1].append(name)
            else:
                out.append((path, [name]))
        return out

    def report(self, title: str, path: bool) -> None:
        short = lambda p: p[len(HARNESS):]  # noqa: E731
        files = {f for f, _ in self.functions}
        per = {lay: sum(layer(f) == lay for f in files) for lay in LAYERS}
        print(f"{title}: every file: {len(files)} files ("
              + ", ".join(f"{lay} {n}" for lay, n in per.items() if n)
              + f"), {len(self.functions)} functions, {len(self.edges)} cross-file call edges")
        stays = self.stays()
        print(f"    the path: {len({f for f, _ in stays})} files outside core, {len(stays)} stays, "
              f"{len(self.upward)} upward calls")
        for caller, fn, callee, name in sorted(self.upward):
            print(f"      up: {short(caller)}:{fn} -> {short(callee)}:{name}")
        for f, names in stays if path else ():
            print(f"      {short(f):34s} {' '.join(names)[:80]}")


def walk_unit(cfg: dict, title: str, path: bool) -> None:
    from harness.execute import executors
    try:
        from harness.orchestrate.run import run_sweep
    except ImportError:  # a checkout from before harness.sweep became harness.orchestrate
        from harness.sweep.run import run_sweep

    walk, real = Walk(), executors.InProcessExecutor.run

    def traced(self, *a, **kw):
        sys.settrace(walk.tracer)
        threading.settrace(walk.tracer)
        try:
            return real(self, *a, **kw)
        finally:
            sys.settrace(None)
            threading.settrace(None)

    executors.InProcessExecutor.run = traced
    try:
        with tempfile.TemporaryDirectory() as d:
            cfg_path = Path(d) / "sweep.yaml"
            cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            run_sweep(cfg_path, tracking_uri=f"sqlite:///{d}/mlflow.db", quiet=True)
    finally:
        executors.InProcessExecutor.run = real
    walk.report(title, path)


if __name__ == "__main__":
    walk_unit(QUICK, "quickstart-like unit", "--path" in sys.argv)
    walk_unit(ALGOPERF, "AlgoPerf unit", "--path" in sys.argv)
