"""Planning: a validated config → ordered, de-duplicated trials, and trials → work units.

Owns expansion (grid, sub-grids, search sequences, the sweep id) and the grouping of trials into
work units. May import :mod:`harness.core`, :mod:`harness.config`, :mod:`harness.data` and
:mod:`harness.train` (whether siblings train faster vmapped is measured there).
"""
