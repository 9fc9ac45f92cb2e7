"""Import structure: the dependencies the architecture promises (docs/architecture.md, "Packages")."""

import subprocess
import sys


def _loaded_after(stmt: str) -> set[str]:
    code = f"import sys\n{stmt}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


def test_reports_stand_on_mlflow_alone_without_importing_harness():
    mods = _loaded_after("import reports, reports.frame, reports.figures, reports.html, reports.compare")
    assert sorted(m for m in mods if m == "harness" or m.startswith("harness.")) == []


def test_config_imports_neither_the_executors_nor_the_worker():
    # config -> executors -> worker -> config was an import circle; the executor names now live in
    # harness.registry
    mods = _loaded_after("import harness.config.load")
    assert {"harness.execute.executors", "harness.execute.worker", "harness.train.loop"} & mods == set()
    assert "harness.core.registry" in mods


def test_report_version_comes_from_the_distribution_metadata():
    import harness
    from reports.html import harness_version

    assert harness_version() == harness.__version__ == "0.1.0"
