"""Follow one work unit from ``InProcessExecutor.run``: the ``harness`` files its calls pass through,
and its calls into a higher layer (docs/architecture.md's order ``core < data < config < train <
plan < tracking < execute < orchestrate < cli``), for a quickstart-like unit and an AlgoPerf unit.

Every Python call made while ``InProcessExecutor.run`` is on the stack (main thread, and threads
started meanwhile) is recorded when it lands in a ``harness`` file, as an edge from the nearest
``harness`` frame below it. A *climb* is an edge into a file of a higher layer than its caller's
(callbacks handed down); ``train → config`` edges are counted apart.

Usage: ``python tests/benchmarks/unit_walk.py [ROOT]``: ROOT is the project tree to import
(default: this one), so the same script measures an older checkout.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

LAYERS = ("core", "data", "config", "train", "plan", "tracking", "execute", "orchestrate", "cli")
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


class Walk:
    """The calls recorded while ``InProcessExecutor.run`` runs."""

    def __init__(self) -> None:
        self.functions: set[tuple[str, str]] = set()
        self.edges: set[tuple[str, str]] = set()

    def tracer(self, frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(HARNESS):
            callee = frame.f_code.co_filename
            self.functions.add((callee, frame.f_code.co_name))
            back = frame.f_back
            while back is not None and not back.f_code.co_filename.startswith(HARNESS):
                back = back.f_back
            if back is not None and back.f_code.co_filename != callee:
                self.edges.add((back.f_code.co_filename, callee))
        return None

    def report(self, title: str) -> None:
        files = {f for f, _ in self.functions}
        climbs = sorted((a, b) for a, b in self.edges if LAYERS.index(layer(b)) > LAYERS.index(layer(a)))
        to_config = sorted((a, b) for a, b in self.edges if layer(a) == "train" and layer(b) == "config")
        short = lambda p: p[len(HARNESS):]  # noqa: E731
        print(f"{title}: {len(files)} files, {len(self.functions)} functions, {len(self.edges)} "
              f"cross-file call edges, {len(climbs)} climbs into a higher layer, "
              f"{len(to_config)} train -> config edges")
        per = {lay: sum(layer(f) == lay for f in files) for lay in LAYERS}
        print("    files per layer: " + ", ".join(f"{lay} {n}" for lay, n in per.items() if n))
        for a, b in climbs + to_config:
            print(f"    {short(a)} -> {short(b)}")


def walk_unit(cfg: dict, title: str) -> None:
    from harness.execute import executors
    from harness.orchestrate.run import run_sweep

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
            path = Path(d) / "sweep.yaml"
            path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            run_sweep(path, tracking_uri=f"sqlite:///{d}/mlflow.db", quiet=True)
    finally:
        executors.InProcessExecutor.run = real
    walk.report(title)


if __name__ == "__main__":
    walk_unit(QUICK, "quickstart-like unit")
    walk_unit(ALGOPERF, "AlgoPerf unit")
