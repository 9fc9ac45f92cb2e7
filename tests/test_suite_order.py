"""The suite's file order: the slow fault, Ray and sweep files do not all start first
(a user saw them fail side by side at the start on a busy machine), and none is the run's tail."""

from __future__ import annotations

import itertools
from pathlib import Path

from conftest import HEAVY_FIRST, heavy_spread


def test_heavy_files_are_spread_over_the_first_half_one_at_a_time():
    here = Path(__file__).parent
    files = sorted(str(p) for p in [*here.glob("test_*.py"), *here.glob("benchmarks/test_*.py")])
    order = heavy_spread(files)
    assert sorted(order) == files  # a permutation
    at = [i for i, f in enumerate(order) if Path(f).name in HEAVY_FIRST]
    present = {Path(f).name for f in files}
    assert [Path(order[i]).name for i in at] == [n for n in HEAVY_FIRST if n in present]
    assert at[0] == 0 and at[-1] < len(order) / 2  # the first starts at once, the last in the first half
    gaps = [b - a for a, b in itertools.pairwise(at)]
    assert min(gaps) >= 2, gaps  # another worker's file between two heavy ones
    between = [order[a + 1:b] for a, b in itertools.pairwise(at)]
    assert all("benchmarks" not in f for part in between for f in part)  # skipped: no spacers
