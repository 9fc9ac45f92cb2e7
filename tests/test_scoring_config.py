"""Loose ends in the config: ``scoring``, ``selection.by`` and ``time`` read like every
other enumerated key (one line, the valid values, a did-you-mean, never pydantic's wording), and
the objectives that rank on time to target are refused, before anything runs, on a sweep without
a target."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from harness.cli import app


def _sweep(tmp_path, write_sweep, **overrides):
    """Run ``sweep`` on a tiny config with ``overrides`` (``target=None``: no target);
    return (exit code, output lines, whether a store was written)."""
    cfg = write_sweep(**overrides)
    res = CliRunner().invoke(app, ["sweep", str(cfg), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"])
    return res.exit_code, res.output.splitlines(), (tmp_path / "m.db").exists()


@pytest.mark.parametrize("overrides, line", [
    ({"scoring": "algoperf", "target": None},
     "scoring: algoperf scores time to the validation target and dataset digits has none; add target: "
     "{metric: valid/accuracy, value: X} (or a targets entry per dataset), or use scoring: harness"),
    ({"selection": {"by": "time_to_target"}, "target": None},
     "selection.by: time_to_target selects on reaching the validation target and dataset digits has "
     "none; add target: {metric: valid/accuracy, value: X} (or a targets entry per dataset), or use "
     "selection: {by: final} or {by: best}"),
    ({"scoring": "algoperf", "target": None, "datasets": ["digits", "mnist1d"],
      "targets": {"mnist1d": {"metric": "valid/accuracy", "value": 0.5}}},
     "scoring: algoperf scores time to the validation target and dataset digits has none; add target: "
     "{metric: valid/accuracy, value: X} (or a targets entry per dataset), or use scoring: harness"),
    ({"scoring": "algoperff"}, "scoring: must be one of harness, algoperf, got 'algoperff' (did you mean "
                               "'algoperf'?)"),
    ({"scoring": 3}, "scoring: must be one of harness, algoperf, got 3"),
    ({"time": "modelled"},
     "time: must be one of modeled, measured, got 'modelled' (did you mean 'modeled'?)"),
    ({"time": None}, "time: must be one of modeled, measured, got None"),
])
def test_a_bad_scoring_selection_or_clock_is_one_line_before_anything_runs(tmp_path, write_sweep, overrides,
                                                                          line):
    code, lines, store = _sweep(tmp_path, write_sweep, **overrides)
    assert code == 2 and not store
    assert lines == ["invalid sweep config:", f"{tmp_path / 'sweep.yaml'}: {line}"]


def test_no_pydantic_wording_reaches_a_config_error(tmp_path, write_sweep):
    """The prefixes pydantic puts on its own messages never reach the user."""
    for overrides in ({"scoring": ["algoperf"]}, {"scoring": {}}, {"selection": {"by": ["final"]}},
                      {"time": 0.5}, {"selection": {"by": "time_to_target"}, "target": None}):
        code, lines, _ = _sweep(tmp_path, write_sweep, **overrides)
        assert code == 2 and len(lines) == 2, lines
        assert "Value error" not in lines[1] and "Input should be" not in lines[1], lines[1]


def test_without_a_target_the_default_selection_and_final_or_best_still_run(tmp_path, write_sweep):
    """Only an explicit objective that needs a target is refused: the default (``selection`` left
    out) and ``final``/``best`` load."""
    from harness.config.load import load_config

    for i, extra in enumerate(({}, {"selection": {"by": "final"}}, {"selection": {"by": "best"}})):
        cfg = write_sweep(f"s{i}.yaml", target=None, **extra)
        assert load_config(cfg).target is None
