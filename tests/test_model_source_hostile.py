"""A model by ``source:`` whose factory never returns, whose ``apply`` never returns or raises, or whose
outputs have the wrong shape: refused at pre-flight with its key path, within ``source_timeout_s``,
instead of hanging the sweep or failing every trial."""

from __future__ import annotations

import textwrap
import time

import pytest
import yaml

from harness.config.errors import ConfigError
from harness.config.load import load_config
from harness.orchestrate.preflight import preflight

NETS = textwrap.dedent('''
    import time

    from models import stax


    def good(*, num_classes, width: int = 8):
        return stax.serial(stax.Flatten, stax.Dense(width), stax.Relu, stax.Dense(num_classes))


    def hangs(*, num_classes, width: int = 8):
        while True:
            time.sleep(0.05)


    def apply_hangs(*, num_classes, width: int = 8):
        def init(rng, shape):
            return shape[:1] + (num_classes,), ()

        def apply(params, x, **kw):
            while True:
                time.sleep(0.05)

        return init, apply


    def apply_raises(*, num_classes, width: int = 8):
        def init(rng, shape):
            return shape[:1] + (num_classes,), ()

        def apply(params, x, **kw):
            raise RuntimeError("apply exploded")

        return init, apply


    def wrong_shape(*, num_classes, width: int = 8):
        init, apply = stax.serial(stax.Flatten, stax.Dense(3))
        return (lambda rng, shape: (shape[:1] + (num_classes,), init(rng, shape)[1])), apply
''')


def _cfg(tmp_path, names: list[str]):
    (tmp_path / "nets.py").write_text(NETS)
    cfg = {"name": "src", "models": [{"name": f"my_{n}", "source": f"nets.py:{n}"} for n in names],
           "optimizers": [{"name": "sgd", "hparams": {"step_size": 0.1}}], "datasets": ["digits"],
           "seeds": [0], "batch_size": 8, "budget": {"steps": 2}, "measure_perf": False,
           "source_timeout_s": 1}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(path)


def test_a_model_source_that_hangs_raises_or_misshapes_is_one_line_at_preflight(tmp_path):
    path = _cfg(tmp_path, ["good", "hangs", "apply_hangs", "apply_raises", "wrong_shape"])
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as e:
        preflight(load_config(path), path)
    assert time.monotonic() - t0 < 60
    head = (f"{path}: models[{{}}].source: model 'my_{{}}' (defaults) on dataset 'digits' with input "
            f"shape (8, 8, 1): ")
    late = "once did not return within 1 s (source_timeout_s: 1; it was at line "  # its loop: 2 lines
    want = [
        (1, "hangs", f"source 'nets.py:hangs': building, initialising and applying 'hangs' {late}"),
        (2, "apply_hangs", f"source 'nets.py:apply_hangs': building, initialising and applying 'apply_hangs' "
                           f"{late}"),
        (3, "apply_raises", "apply exploded"),
        (4, "wrong_shape", "its apply returned outputs of shape (2, 3) for inputs (2, 8, 8, 1); a "
                           "classification model on this dataset returns (2, 10)"),
    ]
    assert len(e.value.errors) == len(want), e.value.errors
    for line, (i, name, why) in zip(e.value.errors, want, strict=True):
        assert line.startswith(head.format(i, name) + why), line


def test_a_good_model_source_passes_preflight(tmp_path):
    path = _cfg(tmp_path, ["good"])
    (spec,) = preflight(load_config(path), path)
    assert spec.model == "my_good"


def test_a_stax_init_paired_with_a_hand_written_apply_runs():
    """A user's pair may take a combinator's ``init`` and write its own ``apply`` (it raised an
    AttributeError naming stax's internals)."""
    import jax
    import jax.numpy as jnp

    from models import stax

    init, dense = stax.serial(stax.Dense(3))

    def apply(params, x, **kw):
        return 2.0 * dense(params, x)

    s_init, s_apply = stax.stateful((init, apply))
    _, params, state = s_init(jax.random.key(0), (2, 4))
    x = jnp.ones((2, 4))
    out, new = s_apply(params, state, x, train=True)
    assert state == () and new == () and jnp.array_equal(out, 2.0 * dense(params, x))
