"""``harness.core.finite.finite``: the one test of a finite number (config checks, records, metrics)."""

from __future__ import annotations

import math

import pytest

from harness.core.finite import finite


@pytest.mark.parametrize("x, expected", [
    (0, True), (-3, True), (2.5, True), (1e308, True), (2**1023, True),
    (math.nan, False), (math.inf, False), (-math.inf, False),
    (10**400, False), (-(10**400), False),  # no float holds it: math.isfinite raises OverflowError
    (True, False), (False, False), (None, False), ("1.0", False), ([1.0], False),
])
def test_finite(x, expected):
    assert finite(x) is expected

