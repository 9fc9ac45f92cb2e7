"""Import structure: the dependencies the architecture promises (docs/architecture.md, "Layers and arrows").

The static tests walk the AST of every module of ``harness``, ``reports``, ``models`` and
``optimizers``: every ``import x``, ``from x import y`` (``y`` a name or a submodule) and relative
import, at module level and inside functions alike, and every ``m._x`` attribute use on a module
``m`` bound by an import. They fail, naming the modules, on an import circle; on an import that
breaks the layers of ``harness`` (low to high ``core < data < config < train < plan < tracking <
execute < orchestrate < cli``: a module imports only its own or lower subpackages); on ``reports``
imported by ``harness`` outside ``harness.cli``, or ``reports`` importing ``harness`` outside
``harness.core``; on ``models``/``optimizers`` importing ``harness``; on ``harness.core``
importing anything but the standard library and ``harness.core``; on another module's private
name; and on a module of ``harness`` over 500 lines. The package ``harness`` itself (its
``__init__``) imports nothing but :data:`PINNED_FIRST` (standard library only, and it must run before
JAX's CPU client starts: XLA's pool at one thread), so any layer may import it (for ``__version__``).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: The one module the package ``harness`` imports (``harness/__init__.py``): it sets ``NPROC``
#: before any JAX computation (:mod:`harness.core.xla_threads`).
PINNED_FIRST = "harness.core.xla_threads"

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "reports", "models", "optimizers")
LAYERS = ("core", "data", "config", "train", "plan", "tracking", "execute", "orchestrate", "cli")
#: Modules of ``harness`` outside its subpackages, and the layer each sits at.
TOP_LEVEL = {"harness": "cli", "harness.__main__": "cli", "harness.cli": "cli", "harness.trainer": "train",
             "harness.results_api": "cli"}
MAX_LINES = 500


@dataclass
class Import:
    """One import (or private attribute use) in a module: the module it reaches, where, and how."""

    target: str  # dotted module name (internal: a module of the walked tree; external: as written)
    line: int
    name: str | None = None  # the name taken from ``target`` (``from target import name``, ``target.name``)
    internal: bool = True


@dataclass
class Module:
    name: str
    path: Path  # relative to the walked root
    lines: int
    imports: list[Import] = field(default_factory=list)

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_index(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``root/<package>``."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def walk(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Module]:
    """Every module under ``root/<package>`` with the imports its AST makes (module level and in
    functions), resolved to module names."""
    index = module_index(root, packages)
    mods = {}
    for name, path in index.items():
        text = path.read_text(encoding="utf-8")
        mod = Module(name, path.relative_to(root), len(text.splitlines()))
        _collect(mod, ast.parse(text, filename=str(path)), index, packages)
        mods[name] = mod
    return mods


def _known_prefix(dotted: str, index: dict[str, Path]) -> str:
    """The longest prefix of ``dotted`` that is a module of the tree (``dotted`` itself if none)."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in index:
            return ".".join(parts[:n])
    return dotted


def _collect(mod: Module, tree: ast.Module, index: dict[str, Path], packages: tuple[str, ...]) -> None:
    package = mod.name if mod.is_package else mod.name.rpartition(".")[0]
    bound: dict[str, str] = {}  # local name -> module it is bound to by an import

    def add(target: str, line: int, name: str | None = None) -> None:
        internal = target.split(".")[0] in packages
        mod.imports.append(Import(_known_prefix(target, index) if internal else target, line, name, internal))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name, node.lineno)
                if a.asname:
                    bound[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    bound[top] = top
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for a in node.names:
                sub = f"{base}.{a.name}"
                if sub in index:  # ``from pkg import submodule``
                    add(sub, node.lineno, a.name if _is_private(a.name) else None)
                    bound[a.asname or a.name] = sub
                else:
                    add(base, node.lineno, a.name)
    # ``m._x`` where ``m`` is bound to a module of the tree by an import
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain = []
        cur: ast.expr = node
        while isinstance(cur, ast.Attribute):
            chain.append(cur.attr)
            cur = cur.value
        if not isinstance(cur, ast.Name) or cur.id not in bound:
            continue
        target = bound[cur.id]
        if target.split(".")[0] not in packages:
            continue
        for attr in reversed(chain):
            if f"{target}.{attr}" in index:
                target = f"{target}.{attr}"
                continue
            if _is_private(attr):
                mod.imports.append(Import(target, node.lineno, attr))
            break
    mod.imports.sort(key=lambda i: i.line)


def layer(module: str, *, as_target: bool = False) -> str | None:
    """The layer of a ``harness`` module (None outside ``harness``). As an import's target, the
    package ``harness`` itself (its ``__init__``: ``__version__``, importing nothing) is at the
    bottom: importing any module of ``harness`` runs it anyway."""
    if as_target and module == "harness":
        return "core"
    if module in TOP_LEVEL:
        return TOP_LEVEL[module]
    parts = module.split(".")
    if parts[0] != "harness":
        return None
    return parts[1] if parts[1] in LAYERS else "cli"


def circles(mods: dict[str, Module]) -> list[list[str]]:
    """The import circles between the modules: each strongly connected component of the import
    graph with more than one module (Tarjan), sorted, as a list of module names."""
    graph = {m: sorted({i.target for i in mod.imports if i.internal and i.target in mods and i.target != m})
             for m, mod in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return sorted(out)


def _describe_circle(comp: list[str], mods: dict[str, Module]) -> str:
    members = set(comp)
    edges = sorted({(m, i.line, i.target) for m in comp for i in mods[m].imports
                    if i.internal and i.target in members and i.target != m})
    return f"circle between {', '.join(comp)}:\n    " + "\n    ".join(f"{m}:{n} -> {t}" for m, n, t in edges)


def _where(mod: Module, imp: Import) -> str:
    what = f"{imp.target}.{imp.name}" if imp.name else imp.target
    return f"{mod.path}:{imp.line} ({mod.name}) imports {what}"


def violations(mods: dict[str, Module]) -> dict[str, list[str]]:
    """Every rule broken by the walked modules, by rule (an empty list: the rule holds)."""
    out: dict[str, list[str]] = {"circle": [], "layer": [], "reports": [], "harness-free": [],
                                 "core-stdlib": [], "private": [], "size": []}
    out["circle"] = [_describe_circle(c, mods) for c in circles(mods)]
    for m, mod in sorted(mods.items()):
        top = m.split(".")[0]
        if top == "harness" and mod.lines > MAX_LINES:
            out["size"].append(f"{mod.path} ({m}): {mod.lines} lines > {MAX_LINES}")
        for imp in mod.imports:
            t_top = imp.target.split(".")[0]
            where = _where(mod, imp)
            if imp.internal and imp.name and _is_private(imp.name) and imp.target != m:
                out["private"].append(f"{where}: a private name of another module")
            if not imp.internal:
                if (m == "harness" or m.startswith("harness.core")) and t_top not in sys.stdlib_module_names:
                    out["core-stdlib"].append(f"{where}: {m} imports only the standard library")
                continue
            if top == "harness" and t_top == "reports" and layer(m) != "cli":
                out["reports"].append(f"{where}: only harness.cli may import reports")
            if top == "reports" and t_top == "harness" and layer(imp.target, as_target=True) != "core":
                out["reports"].append(f"{where}: reports imports only harness.core of harness")
            if top in ("models", "optimizers") and t_top == "harness":
                out["harness-free"].append(f"{where}: {top} must not import harness")
            if m == "harness" and imp.target != PINNED_FIRST:
                out["core-stdlib"].append(f"{where}: the package harness imports nothing but "
                                          f"{PINNED_FIRST} (every import of harness runs it)")
            elif top == "harness" and t_top == "harness":
                lo, hi = layer(m), layer(imp.target, as_target=True)
                if m.startswith("harness.core") and hi != "core":
                    out["core-stdlib"].append(f"{where}: harness.core imports nothing of harness "
                                              f"outside core")
                elif LAYERS.index(hi) > LAYERS.index(lo):
                    out["layer"].append(f"{where}: layer {lo} imports the higher layer {hi} "
                                        f"({' < '.join(LAYERS)})")
    return out


@pytest.fixture(scope="module")
def broken() -> dict[str, list[str]]:
    return violations(walk())


@pytest.mark.parametrize("rule", ["circle", "layer", "reports", "harness-free", "core-stdlib", "private",
                                  "size"])
def test_import_rules(broken, rule):
    assert not broken[rule], f"{len(broken[rule])} {rule} violation(s):\n  " + "\n  ".join(broken[rule])


def test_walker_sees_every_kind_of_import(tmp_path):
    """Self-test on a synthetic package: the walker finds a circle made by an import inside a
    function, a relative import, ``from pkg import submodule``, private names taken by ``from`` and
    by attribute, and nothing on a clean tree."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""pkg."""\n')
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import os\n\n\ndef f():\n    from pkg.sub import b\n    return b\n")
    (pkg / "sub" / "b.py").write_text("from .. import c\n")
    (pkg / "c.py").write_text("import pkg.a as alias\n\nX = alias.f\n")
    mods = walk(tmp_path, ("pkg",))
    assert circles(mods) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
    assert "pkg.a:5 -> pkg.sub.b" in _describe_circle(circles(mods)[0], mods)
    assert not violations(mods)["private"]

    (pkg / "c.py").write_text("import json\n")
    (pkg / "d.py").write_text("from pkg.a import _g\nimport pkg.sub.b\n\nY = pkg.sub.b._h\n")
    mods = walk(tmp_path, ("pkg",))
    assert circles(mods) == []
    private = violations(mods)["private"]
    assert len(private) == 2 and "pkg.a._g" in private[0] and "pkg.sub.b._h" in private[1], private


def test_layers_and_packages_rules_fire(tmp_path):
    """Self-test: a layer inversion, harness.core importing a third-party module and reports
    importing harness outside core are each caught; the package ``harness`` itself is importable
    from any layer."""
    h = tmp_path / "harness"
    for sub in ("core", "train", "plan"):
        (h / sub).mkdir(parents=True)
        (h / sub / "__init__.py").write_text("")
    (h / "__init__.py").write_text("")
    (h / "core" / "x.py").write_text("import numpy\nimport json\n")
    (h / "train" / "loop.py").write_text("def f():\n    from harness.plan import units\n")
    (h / "plan" / "units.py").write_text("from harness.core import x\n\n\ndef v():\n    import harness\n")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "__init__.py").write_text(
        "from harness.plan import units\nfrom harness.core import x\n")
    v = violations(walk(tmp_path, ("harness", "reports")))
    assert [s.split(": ")[-1] for s in v["layer"]] == [
        f"layer train imports the higher layer plan ({' < '.join(LAYERS)})"]
    assert len(v["core-stdlib"]) == 1 and "numpy" in v["core-stdlib"][0]
    assert len(v["reports"]) == 1 and "harness.plan.units" in v["reports"][0]


def _loaded_after(stmt: str) -> set[str]:
    code = f"import sys\n{stmt}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


def test_reports_stand_on_mlflow_alone_importing_only_harness_core():
    mods = _loaded_after("import reports, reports.frame, reports.figures, reports.html, reports.compare")
    assert sorted(m for m in mods if m.startswith("harness.") and not m.startswith("harness.core")) == []


def test_config_imports_neither_the_executors_nor_the_worker():
    # config -> executors -> worker -> config was an import circle; the executor names now live in
    # harness.registry
    mods = _loaded_after("import harness.config.load")
    assert {"harness.execute.executors", "harness.execute.worker", "harness.train.loop"} & mods == set()
    assert "harness.core.builders" in mods


def test_train_never_imports_config():
    """The trainer builds a trial from its spec alone: a source's builder, the checkpoint cadence, the
    augment keys and the ``HARNESS_*`` switches come from :mod:`harness.core`, never from
    :mod:`harness.config` (imports inside functions count)."""
    mods = walk()
    train = [m for n, m in mods.items() if n == "harness.trainer" or n.startswith("harness.train.")
             or n == "harness.train"]
    assert len(train) > 20
    found = [f"{m.path}:{i.line} -> {i.target}" for m in train for i in m.imports
             if i.target == "harness.config" or i.target.startswith("harness.config.")]
    assert found == []


def test_report_version_comes_from_the_distribution_metadata():
    import harness
    from reports.html import harness_version

    assert harness_version() == harness.__version__ == "0.1.0"


def test_old_import_paths_users_hold_keep_working():
    """The flat modules moved into subpackages; the paths users were told about stay (the
    sweep: the function ``harness.sweep``)."""
    code = ("import harness, harness.trainer, harness.data, harness.train.loop\n"
            "from harness import sweep\n"
            "import harness.orchestrate.api, harness.orchestrate.run\n"
            "assert sweep is harness.orchestrate.api.sweep\n"
            "assert harness.orchestrate.run_sweep is harness.orchestrate.run.run_sweep\n"
            "assert harness.trainer.run_trial is harness.train.loop.run_trial\n"
            "assert harness.trainer.run_trials_batched is harness.train.loop.run_trials_batched\n"
            "from harness.data import DATASETS, load_dataset\n"
            "assert {'digits', 'mnist1d', 'synthetic', 'markov_lm'} <= set(DATASETS)\n"
            "from harness.config import load_config, ConfigError\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "ok"


def test_the_python_api_is_reexported_lazily_from_the_package():
    """``harness.sweep`` / ``harness.results`` / ``harness.reproduce`` are the package's
    lazy re-exports (its module ``__getattr__``, string targets the import walker cannot see): each
    target is a module the top layer may import, and ``import harness`` loads none of them (nor
    MLflow, JAX or pandas), so ``python -m harness --help`` stays fast."""
    import harness

    for name, (module, _attr) in harness._LAZY.items():
        top = module.split(".")[0]
        assert top in ("harness", "reports"), (name, module)
        if top == "harness":
            assert layer(module, as_target=True) in LAYERS, (name, module)
    mods = _loaded_after("import harness")
    heavy = sorted(m for m in mods if m.split(".")[0] in ("reports", "mlflow", "jax", "pandas", "numpy"))
    assert heavy == []
    assert sorted(m for m in mods if m.startswith("harness.") and not m.startswith("harness.core")) == []
    code = ("import harness, harness.orchestrate.run\n"
            "assert callable(harness.sweep)\n"
            "assert harness.orchestrate.run_sweep is harness.orchestrate.run.run_sweep\n"
            "from harness.orchestrate import run_sweep, SweepRun\n"
            "print(harness.results.__module__, harness.reproduce.__module__,\n"
            "      harness.sweep.__module__, type(harness.sweep).__name__)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["harness.results_api", "harness.orchestrate.reproduce", "harness.orchestrate.api",
                           "function"]


def duplicate_module_names(paths: list[Path]) -> dict[str, list[str]]:
    """Module file names used by more than one module (``__init__.py``, ``__main__.py`` exempt).

    Args:
      paths: module paths relative to the repository root.

    Returns:
      ``{file name: sorted paths}`` for each name that occurs more than once.
    """
    by_name: dict[str, list[str]] = {}
    for p in paths:
        if p.name not in ("__init__.py", "__main__.py"):
            by_name.setdefault(p.name, []).append(p.as_posix())
    return {n: sorted(ps) for n, ps in by_name.items() if len(ps) > 1}


def test_duplicate_module_names_finds_a_name_in_two_packages():
    paths = [Path("harness/core/clock.py"), Path("reports/clock.py"), Path("harness/core/__init__.py"),
             Path("reports/__init__.py"), Path("harness/core/names.py")]
    assert duplicate_module_names(paths) == {"clock.py": ["harness/core/clock.py", "reports/clock.py"]}


def test_module_names_are_unique_across_the_packages():
    """One name per concept: no two modules of the four packages share a file name."""
    paths = [p.relative_to(ROOT) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
             if "__pycache__" not in p.parts]
    dupes = duplicate_module_names(paths)
    assert not dupes, f"module names used by more than one module: {dupes}"


def documented_arrows(text: str) -> dict[str, set[str]]:
    """``{layer: the layers and packages it imports}`` from architecture.md's arrows block (the
    fenced block of ``X → a, b`` lines under "Layers and arrows"; several arrows share a line)."""
    section = text.split("## Layers and arrows", 1)[1].split("\n## ", 1)[0]
    block = section.split("```")[3]
    arrows = {}
    for part in re.split(r"\n|\s{2,}", block):
        if "→" in part:
            src, dst = part.split("→")
            arrows[src.strip()] = {d.strip() for d in dst.split(",") if d.strip()}
    return arrows


def actual_arrows(mods: dict[str, Module]) -> dict[str, set[str]]:
    """``{layer: the other layers of harness, and models/optimizers/reports, its modules import}``."""
    out: dict[str, set[str]] = {}
    for name, mod in mods.items():
        src = layer(name)
        if src is None or not name.startswith("harness.") or name in TOP_LEVEL:
            continue
        for imp in mod.imports:
            dst = layer(imp.target, as_target=True) or imp.target.split(".")[0]
            if dst != src and dst in (*LAYERS, "models", "optimizers", "reports"):
                out.setdefault(src, set()).add(dst)
    return out


def test_the_documented_arrows_are_the_imports():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    documented = {k: v for k, v in documented_arrows(text).items() if k in LAYERS}
    assert documented == actual_arrows(walk())
