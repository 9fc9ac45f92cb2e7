"""The documents a newcomer reads stay short, self-contained and true to the tree.

``docs/architecture.md`` is the map (at most 25,000 characters) and names every module of the four
packages, and no module that is gone; the README is at most 12,000 characters; no document points
at an issue thread or at a file outside the repository; every relative link finds its file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
README = ROOT / "README.md"
PACKAGES = ("optimizers", "models", "harness", "reports")
DOCUMENTS = sorted([README, *(ROOT / "docs").glob("*.md")])

#: "issue" or "issues" then a thread number, after a space, "#" or "-" or nothing
ISSUE_REF = re.compile(r"\bissues?[\s#-]*\d+", re.IGNORECASE)
#: the sibling folder the project was written beside, and its design file
OUTSIDE_REF = re.compile(r"\.\./shared|\bDESIGN\.md\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


def test_architecture_map_is_at_most_25000_characters():
    n = len(ARCHITECTURE.read_text(encoding="utf-8"))
    assert n <= 25_000, f"docs/architecture.md is {n:,} characters; the map's limit is 25,000"


def test_readme_is_at_most_12000_characters():
    n = len(README.read_text(encoding="utf-8"))
    assert n <= 12_000, f"README.md is {n:,} characters; its limit is 12,000"


#: a count of tests (``1,634 passed``, ``1634 passing tests``): stale as soon as a test is added
TEST_COUNT = re.compile(r"\b\d[\d,]*\s+(?:passed|passing\s+tests?|tests?\s+pass(?:ed|ing)?)\b", re.IGNORECASE)


@pytest.mark.parametrize("doc", DOCUMENTS, ids=_ids(DOCUMENTS))
def test_no_count_of_tests_that_goes_stale(doc):
    counts = [m.group(0) for m in TEST_COUNT.finditer(doc.read_text(encoding="utf-8"))]
    assert not counts, f"{doc.name} states test counts {counts}: `pytest --collect-only -q` gives the count"


def test_test_count_pattern_finds_the_forms_it_names():
    assert [m.group(0) for m in TEST_COUNT.finditer("took 18 minutes (1,634 passed), 1634 passing tests")] \
        == ["1,634 passed", "1634 passing tests"]
    assert not TEST_COUNT.search("3 passes over the data; 2 passing lanes")


@pytest.mark.parametrize("doc", DOCUMENTS, ids=_ids(DOCUMENTS))
def test_no_issue_numbers_and_no_files_outside_the_repository(doc):
    text = doc.read_text(encoding="utf-8")
    issues = [m.group(0) for m in ISSUE_REF.finditer(text)]
    outside = [m.group(0) for m in OUTSIDE_REF.finditer(text)]
    assert not issues and not outside, (
        f"{doc.name}: issue threads a clone does not hold {issues}, files outside the repository {outside}")


@pytest.mark.parametrize("doc", DOCUMENTS, ids=_ids(DOCUMENTS))
def test_every_relative_link_finds_its_file(doc):
    prose = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S))
    missing = []
    for target in LINK.findall(prose):
        path = target.split("#", 1)[0]
        if not path or "://" in target or target.startswith("mailto:"):
            continue
        if not (doc.parent / path).exists():
            missing.append(target)
    assert not missing, f"{doc.name} links to files that do not exist: {missing}"


def map_modules(text: str) -> set[str]:
    """The module paths the map names: ``  name.py`` lines under a ``package/`` heading line, and
    the ``__init__.py`` of every heading (a package's line stands for it).

    Args:
      text: the text of ``docs/architecture.md``.

    Returns:
      Paths relative to the repository root, e.g. ``harness/core/spec.py``.
    """
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    found, package = set(), None
    for line in section.splitlines():
        heading = re.match(r"([a-z_]+/(?:[a-z_]+/)*)(\s|$)", line)
        if heading:
            package = heading.group(1)
            found.add(package + "__init__.py")
            continue
        entry = re.match(r"  (\S+\.py)\b", line)
        if entry and package:
            found.add(package + entry.group(1))
    return found


def test_map_modules_reads_package_headings_and_entries():
    text = ("## Module map\n\n```\nharness/core/      layer 1\n  spec.py          records\n"
            "models/\n  zoo.py           builders\n```\n\n## Next\n  other.py  not in the map\n")
    assert map_modules(text) == {"harness/core/__init__.py", "harness/core/spec.py", "models/__init__.py",
                                 "models/zoo.py"}


def test_the_map_names_every_module_and_no_module_that_is_gone():
    named = map_modules(ARCHITECTURE.read_text(encoding="utf-8"))
    present = {str(p.relative_to(ROOT)) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
               if "__pycache__" not in p.parts}
    assert not present - named, f"modules missing from docs/architecture.md's map: {sorted(present - named)}"
    assert not named - present, f"the map names modules that do not exist: {sorted(named - present)}"
