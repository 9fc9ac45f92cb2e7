"""What identifies a user's optimizer: the code its factory depends on, not the file.

``harness.core.source.code_digest`` hashes the top-level statements the factory reaches (helpers,
constants, imports, decorators), docstrings, comments and formatting left out; the whole file's
SHA-256 is provenance only (tag ``optimizer.source_file_hash``). Real files, real sweeps into a real
SQLite store: an unrelated edit re-trains nothing, a change in a helper the factory calls re-trains
exactly that factory's trials.
"""

from __future__ import annotations

import hashlib
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from harness.config.load import load_config
from harness.core.source import parse_source
from harness.orchestrate.run import run_sweep
from harness.plan.expansion import expand
from harness.tracking.client import search_all

# Two factories in one file: `scaled` calls the helper `_scale`, `plain` does not.
OPTS = textwrap.dedent('''
    """Two optimizers of a user's."""
    import jax.numpy as jnp

    from optimizers import make_schedule, optimizer

    FACTOR = 1.0


    def _scale(g):
        """The gradient, scaled."""
        return FACTOR * g


    @optimizer
    def scaled(step_size):
        """SGD on a scaled gradient."""
        lr = make_schedule(step_size)

        def init(x):
            return x

        def update(i, g, x):
            return x - lr(i) * _scale(g)

        return init, update, lambda x: x


    @optimizer
    def plain(step_size):
        """Plain SGD."""
        lr = make_schedule(step_size)

        def init(x):
            return x

        def update(i, g, x):
            return x - lr(i) * g

        return init, update, lambda x: x
''')


def _sweep(tmp_path: Path) -> Path:
    (tmp_path / "opts.py").write_text(OPTS)
    cfg = {"name": "ident", "models": [{"name": "mlp", "hparams": {"width": 8, "depth": 1}}],
           "optimizers": [{"name": "scaled", "source": "opts.py:scaled", "hparams": {"step_size": 0.1}},
                          {"name": "plain", "source": "opts.py:plain", "hparams": {"step_size": 0.1}}],
           "datasets": ["digits"], "seeds": [0], "batch_size": 32, "budget": {"steps": 10},
           "eval_every": 10, "steps_per_dispatch": 10, "measure_perf": False}
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return p


def _edit(tmp_path: Path, old: str, new: str) -> None:
    f = tmp_path / "opts.py"
    text = f.read_text()
    assert old in text
    f.write_text(text.replace(old, new))


def _runs(uri: str) -> list:
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name("ident")
    return [r for r in search_all(c, exp.experiment_id) if r.data.tags.get("harness.kind") == "trial"]


def test_an_unrelated_edit_retrains_nothing_and_a_helper_change_retrains_its_factory(
        tmp_path, tracking_uri, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = _sweep(tmp_path)
    assert run_sweep(cfg, tracking_uri=tracking_uri, quiet=True).counts()["finished"] == 2
    # another function's docstring, a comment, formatting (line breaks, quotes, spacing), the
    # module's docstring: the same optimizers; before the fix every such edit re-trained both
    _edit(tmp_path, '"""Plain SGD."""', '"""Plain SGD, with a longer docstring now."""')
    _edit(tmp_path, "FACTOR = 1.0", "FACTOR = 1.0  # the scale")
    _edit(tmp_path, "        return x - lr(i) * _scale(g)",
          "        return (x -\n                lr( i )*_scale( g ))")
    _edit(tmp_path, '"""Two optimizers of a user\'s."""', "'''Two optimizers, reformatted.'''\n\n")
    counts = run_sweep(cfg, tracking_uri=tracking_uri, quiet=True).counts()
    assert counts["skipped"] == 2 and counts["finished"] == 2, counts  # both done, nothing trained
    assert len(_runs(tracking_uri)) == 2
    # the helper `scaled` calls: its trials train again, `plain`'s are skipped
    _edit(tmp_path, "return FACTOR * g", "return 0.5 * FACTOR * g")
    counts = run_sweep(cfg, tracking_uri=tracking_uri, quiet=True).counts()
    assert counts["skipped"] == 1 and counts["finished"] == 2, counts
    runs = _runs(tracking_uri)
    assert sorted(r.data.tags["optimizer"] for r in runs) == ["plain", "scaled", "scaled"]
    # so does a module-level constant it reads
    _edit(tmp_path, "FACTOR = 1.0", "FACTOR = 2.0")
    counts = run_sweep(cfg, tracking_uri=tracking_uri, quiet=True).counts()
    assert counts["skipped"] == 1 and counts["finished"] == 2, counts
    runs = _runs(tracking_uri)
    assert sorted(r.data.tags["optimizer"] for r in runs) == ["plain", "scaled", "scaled", "scaled"]
    # provenance: the newest run records the whole file's hash besides the digest in its trial id
    from harness.core.source import code_digest

    text = (tmp_path / "opts.py").read_text()
    newest = max((r for r in runs if r.data.tags["optimizer"] == "scaled"), key=lambda r: r.info.start_time)
    assert newest.data.tags["optimizer.source_file_hash"] == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert newest.data.tags["optimizer.source_hash"] == code_digest(text, ["scaled"])
    assert newest.data.tags["optimizer.source_hash"] != newest.data.tags["optimizer.source_file_hash"]


BASE = textwrap.dedent('''
    """Module docstring."""
    import math

    import jax.numpy as jnp
    from optimizers import optimizer

    EPS = 1e-8
    UNUSED = 3


    class Clip:
        """A helper class."""

        def __call__(self, g):
            return jnp.clip(g, -1.0, 1.0)


    def helper(g):
        """Docstring of helper."""
        return Clip()(g) / (math.sqrt(2.0) + EPS)


    def unrelated(x):
        """Docstring of unrelated."""
        return x + UNUSED


    @optimizer
    def factory(step_size, mass: float = 0.9):
        """The factory's docstring."""
        def init(x):
            return x

        def update(i, g, x):
            return x - step_size * helper(g)  # a comment

        return init, update, lambda x: x


    if __name__ == "__main__":
        print(unrelated(1))
''')

SAME = {
    "the factory's docstring": ('"""The factory\'s docstring."""', '"""Rewritten."""'),
    "the factory's docstring removed": ('    """The factory\'s docstring."""\n', ""),
    "a helper's docstring": ('"""Docstring of helper."""', '"""Another."""'),
    "the module docstring": ('"""Module docstring."""', ""),
    "a comment": ("# a comment", "# another comment"),
    "spacing": ("step_size * helper(g)", "step_size*helper( g )"),
    "line breaks": ("return x - step_size * helper(g)",
                    "return (x\n                - step_size * helper(g))"),
    "quotes and number spelling": ("EPS = 1e-8", "EPS = 0.00000001"),
    "an unreached function's code": ("return x + UNUSED", "return x - UNUSED"),
    "an unreached constant": ("UNUSED = 3", "UNUSED = 4"),
    "the __main__ block": ("print(unrelated(1))", "print(unrelated(2))"),
    "an unreached function added": ("\n\n@optimizer\ndef factory",
                                    "\n\ndef extra():\n    return 1\n\n\n@optimizer\ndef factory"),
}
DIFFERENT = {
    "the factory's code": ("step_size * helper(g)", "step_size * 2 * helper(g)"),
    "a default": ("mass: float = 0.9", "mass: float = 0.8"),
    "a helper it calls": ("/ (math.sqrt(2.0) + EPS)", "/ (math.sqrt(3.0) + EPS)"),
    "a constant the helper reads": ("EPS = 1e-8", "EPS = 1e-7"),
    "a class the helper uses": ("jnp.clip(g, -1.0, 1.0)", "jnp.clip(g, -2.0, 2.0)"),
    "an import it uses": ("import math\n", "import cmath as math\n"),
    "its decorator": ("@optimizer\ndef factory", "@optimizer\n@staticmethod\ndef factory"),
    "a module-level statement run on import": ("EPS = 1e-8", "EPS = 1e-8\njnp.zeros(1)"),
    "a later rebinding of the helper": ("\n\nif __name__", "\n\nhelper = abs\n\nif __name__"),
}


def _digest(tmp_path: Path, text: str) -> str:
    """The digest ``source: "f.py:factory"`` gets for a file holding ``text`` (in a trial's id)."""
    (tmp_path / "f.py").write_text(text)
    return parse_source("f.py:factory", str(tmp_path)).digest


@pytest.mark.parametrize("what", list(SAME))
def test_edits_that_do_not_change_what_the_factory_runs_keep_the_digest(tmp_path, what):
    old, new = SAME[what]
    assert old in BASE
    assert _digest(tmp_path, BASE.replace(old, new)) == _digest(tmp_path, BASE)


@pytest.mark.parametrize("what", list(DIFFERENT))
def test_edits_of_what_the_factory_runs_change_the_digest(tmp_path, what):
    old, new = DIFFERENT[what]
    assert old in BASE
    assert _digest(tmp_path, BASE.replace(old, new)) != _digest(tmp_path, BASE)


def test_dynamic_name_lookups_make_the_whole_file_count(tmp_path):
    dyn = BASE.replace("step_size * helper(g)", "step_size * globals()['helper'](g)")
    assert _digest(tmp_path, dyn.replace("return x + UNUSED", "return x - UNUSED")) != _digest(tmp_path, dyn)
    # still without docstrings and comments
    assert _digest(tmp_path, dyn.replace('"""Docstring of unrelated."""', "")) == _digest(tmp_path, dyn)


def test_the_digest_rule_is_pinned():
    """The digest is part of every ``source:`` trial id: a change of the rule (or of how a Python
    version's syntax tree dumps) re-trains every user's trials, so it must be deliberate (then bump
    ``_DIGEST_RULE`` and this value). A file that does not parse is hashed as bytes."""
    from harness.core.source import code_digest

    assert code_digest(BASE, ["factory"]) == "3e771d3205a4eb58"
    assert code_digest("def f(:\n", ["f"]) == hashlib.sha256(b"def f(:\n").hexdigest()[:16]


def test_algoperf_submissions_are_digested_from_the_functions_the_runner_calls(tmp_path):
    sub = (Path(__file__).resolve().parents[1] / "experiments" / "submissions" / "nadamw.py").read_text()
    f = tmp_path / "sub.py"

    def digest(text: str) -> tuple[str, str]:
        f.write_text(text)
        ref = parse_source(f"algoperf:{f.name}", str(tmp_path))
        return ref.digest, ref.file_digest

    base, base_file = digest(sub)
    assert base_file == hashlib.sha256(sub.encode()).hexdigest()[:16]
    edited = sub.replace('"""Zero moments shaped like the parameters."""', '"""Zero moments."""')
    assert edited != sub
    assert digest(edited)[0] == base and digest(edited)[1] != base_file
    # the learning-rate helper update_params reaches: a different algorithm
    changed = sub.replace("cosine = peak * 0.5 * (1.0 + jnp.cos(jnp.pi * frac))",
                          "cosine = peak * 0.4 * (1.0 + jnp.cos(jnp.pi * frac))")
    assert changed != sub and digest(changed)[0] != base


def test_a_module_source_without_a_distribution_is_digested_like_a_file(tmp_path, monkeypatch):
    pkg = tmp_path / "userpkg_ident"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    mod = pkg / "opts.py"
    monkeypatch.syspath_prepend(str(tmp_path))
    digests = []
    for text in (OPTS, OPTS.replace('"""Plain SGD."""', '"""Plain."""'),
                 OPTS.replace("return FACTOR * g", "return 2 * FACTOR * g")):
        mod.write_text(text)
        digests.append(parse_source("userpkg_ident.opts:scaled", str(tmp_path)).digest)
    sys.modules.pop("userpkg_ident.opts", None)
    sys.modules.pop("userpkg_ident", None)
    assert digests[0] == digests[1] != digests[2]


def test_optax_sources_keep_the_distribution_and_version_digest(tmp_path):
    import importlib.metadata

    ref = parse_source("optax:adam", str(tmp_path))
    want = hashlib.sha256(f"optax=={importlib.metadata.version('optax')}".encode()).hexdigest()[:16]
    assert ref.digest == want and ref.file_digest == ""


def test_the_shipped_byo_config_ids_follow_the_rule():
    """``experiments/byo.yaml``'s file source is identified by ``my_adam``'s code: its trial ids
    are those of the digest of the code, not of the file's bytes."""
    root = Path(__file__).resolve().parents[1] / "experiments"
    specs = [s for s in expand(load_config(root / "byo.yaml")) if s.optimizer == "my_adam"]
    text = (root / "my_opts.py").read_text()
    from harness.core.source import code_digest

    assert specs and {s.optimizer_source_hash for s in specs} == {code_digest(text, ["my_adam"])}
