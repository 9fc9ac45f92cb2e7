"""AlgoPerf submissions that import what AlgoPerf's JAX baselines import (``chex``, ``optax``), and the
pre-flight that imports every submission before anything is written.

Every case runs ``python -m harness sweep`` in a subprocess on a YAML in ``tmp_path`` (its working
directory, ``MLFLOW_TRACKING_URI`` unset: the store would be ``tmp_path/mlflow.db``):

* two submissions written here the way AlgoPerf's baselines are written (``import chex``,
  ``from algoperf import jax_sharding_utils, spec``, a ``jax.jit`` with shardings per step): one
  whose optimizer state is a ``chex.dataclass`` (heavy-ball momentum), one that builds an ``optax``
  chain inside ``init_optimizer_state`` (AdamW) and annotates its state with ``chex.Array``. Both
  train beside the built-in ``momentum`` and ``adamw`` in one sweep, and each one's curves equal
  its built-in twin's (rtol 1e-5);
* such a sweep in an environment without ``chex`` (hidden by a ``sitecustomize``): refused by
  the pre-flight, exit 2, one line, no store;
* a submission that imports a module that is not installed, has a syntax error, lacks
  ``update_params`` (or binds it to something that is not a function), takes other arguments than
  AlgoPerf's runner passes, or exits or raises while it loads: exit 2, one line naming the key path
  ``optimizers[1].source``, and no ``mlflow.db`` or ``mlruns``;
* an AlgoPerf checkout on ``PYTHONPATH`` whose ``algoperf`` package cannot be imported (no torch):
  one warning, the stand-ins used.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

#: Heavy-ball momentum (v <- mass v + g; w <- w - lr v) whose state is a ``chex.dataclass``.
CHEX_MOMENTUM = textwrap.dedent('''
    """Heavy-ball momentum, its state a chex.dataclass, written against AlgoPerf's JAX API."""
    from typing import Any, Dict, Iterator, List, Optional, Tuple

    import chex
    import jax
    import jax.numpy as jnp

    from algoperf import jax_sharding_utils, spec


    @chex.dataclass
    class MomentumState:
        count: chex.Array
        velocity: chex.ArrayTree


    def get_batch_size(workload_name):
        raise ValueError(f"Unsupported workload name: {workload_name}.")


    def init_optimizer_state(workload: spec.Workload, model_params, model_state, hyperparameters, rng):
        del model_params, model_state, rng
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape_tuple), workload.param_shapes)
        return MomentumState(count=jnp.zeros([], jnp.int32), velocity=zeros)


    def train_step(workload, model_state, state, params, batch, rng, lr, mass):
        def loss_fn(p):
            logits, new_model_state = workload.model_fn(
                p, batch, model_state, spec.ForwardPassMode.TRAIN, rng, update_batch_norm=True)
            out = workload.loss_fn(label_batch=batch["targets"], logits_batch=logits,
                                   mask_batch=batch.get("weights"))
            return out["summed"] / out["n_valid_examples"], new_model_state

        (_, new_model_state), grad = jax.value_and_grad(loss_fn, has_aux=True)(params)
        chex.assert_trees_all_equal_shapes(grad, state.velocity)
        velocity = jax.tree.map(lambda v, g: mass * v + g, state.velocity, grad)
        new_params = jax.tree.map(lambda p, v: p - lr * v, params, velocity)
        return MomentumState(count=state.count + 1, velocity=velocity), new_params, new_model_state


    def update_params(workload, current_param_container, current_params_types, model_state,
                      hyperparameters, batch, loss_type, optimizer_state, eval_results, global_step,
                      rng, train_state: Optional[Dict[str, Any]] = None):
        replicated = jax_sharding_utils.get_replicate_sharding()
        sharded = jax_sharding_utils.get_batch_dim_sharding()
        step = jax.jit(train_step, static_argnums=(0,), donate_argnums=(2,),
                       in_shardings=(replicated, replicated, replicated, sharded, replicated,
                                     replicated, replicated),
                       out_shardings=(replicated, replicated, replicated))
        return step(workload, model_state, optimizer_state, current_param_container, batch, rng,
                    hyperparameters.learning_rate, hyperparameters.mass)


    def data_selection(workload, input_queue: Iterator[Dict[str, spec.Tensor]], optimizer_state,
                       current_param_container, model_state, hyperparameters, global_step, rng):
        return next(input_queue)
''')

#: AdamW as an optax chain built inside ``init_optimizer_state`` (the state and the update function
#: travel together, as in AlgoPerf's NAdamW baseline); ``chex.Array`` annotates its own state.
OPTAX_CHAIN = textwrap.dedent('''
    """AdamW as an optax chain made in init_optimizer_state, written against AlgoPerf's JAX API."""
    from typing import Any, Dict, List, NamedTuple, Optional, Tuple

    import chex
    import jax
    import jax.numpy as jnp
    import optax

    from algoperf import jax_sharding_utils, spec


    class Steps(NamedTuple):
        """The submission's own count beside optax's state (annotated as AlgoPerf's baselines do)."""

        count: chex.Array


    def get_batch_size(workload_name):
        raise ValueError(f"Unsupported workload name: {workload_name}.")


    def init_optimizer_state(workload, model_params, model_state, hyperparameters, rng):
        del model_params, model_state, rng
        opt = optax.chain(
            optax.scale_by_adam(b1=1.0 - hyperparameters.one_minus_beta1, b2=hyperparameters.beta2,
                                eps=1e-8),
            optax.add_decayed_weights(hyperparameters.weight_decay),
            optax.scale_by_learning_rate(hyperparameters.learning_rate),
        )
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape_tuple), workload.param_shapes)
        return (opt.init(zeros), Steps(count=jnp.zeros([], jnp.int32))), opt.update


    def train_step(workload, opt_update_fn, model_state, optimizer_state, params, batch, rng):
        def loss_fn(p):
            logits, new_model_state = workload.model_fn(
                p, batch, model_state, spec.ForwardPassMode.TRAIN, rng, update_batch_norm=True)
            out = workload.loss_fn(label_batch=batch["targets"], logits_batch=logits,
                                   mask_batch=batch.get("weights"))
            return out["summed"], (out["n_valid_examples"], new_model_state)

        (_, (n, new_model_state)), grad = jax.value_and_grad(loss_fn, has_aux=True)(params)
        grad = jax.tree.map(lambda g: g / n, grad)
        opt_state, steps = optimizer_state
        updates, opt_state = opt_update_fn(grad, opt_state, params)
        return (opt_state, Steps(count=steps.count + 1)), optax.apply_updates(params, updates), \\
            new_model_state


    def update_params(workload: spec.Workload, current_param_container, current_params_types,
                      model_state, hyperparameters, batch, loss_type, optimizer_state,
                      eval_results: List[Tuple[int, float]], global_step: int, rng,
                      train_state: Optional[Dict[str, Any]] = None):
        optimizer_state, opt_update_fn = optimizer_state
        replicated = jax_sharding_utils.get_replicate_sharding()
        sharded = jax_sharding_utils.get_batch_dim_sharding()
        step = jax.jit(train_step, static_argnums=(0, 1), donate_argnums=(2, 3, 4),
                       in_shardings=(replicated, replicated, replicated, sharded, replicated),
                       out_shardings=(replicated, replicated, replicated))
        new_state, new_params, new_model_state = step(workload, opt_update_fn, model_state,
                                                      optimizer_state, current_param_container, batch,
                                                      rng)
        return (new_state, opt_update_fn), new_params, new_model_state


    def prepare_for_eval(workload, current_param_container, current_params_types, model_state,
                         hyperparameters, loss_type, optimizer_state, eval_results, global_step, rng):
        return optimizer_state, current_param_container, model_state


    def data_selection(workload, input_queue, optimizer_state, current_param_container, model_state,
                       hyperparameters, global_step, rng):
        return next(input_queue)
''')

STEPS = 60
BASE = {"models": [{"name": "mlp", "hparams": {"width": 32, "depth": 1}}], "datasets": ["digits"],
        "seeds": [0], "batch_size": 32, "budget": {"steps": STEPS}, "eval_every": 20,
        "steps_per_dispatch": 20, "measure_perf": False}


def _sweep(tmp_path: Path, name: str, optimizers: list, *args: str
           ) -> tuple[Path, subprocess.CompletedProcess]:
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(yaml.safe_dump({"name": name, **BASE, "optimizers": optimizers}, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["COLUMNS"] = "200"
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", str(cfg), *args], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=600)
    return cfg, r


def _curves(tmp_path: Path, experiment: str) -> dict[str, dict]:
    """``{optimizer: {"tags", "train", "valid"}}`` of the sweep's trial runs, read from the store
    and each run's ``curves.csv``."""
    from mlflow.tracking import MlflowClient

    from harness.tracking.client import search_all

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    out: dict[str, dict] = {}
    for run in search_all(client, exp.experiment_id):
        tags = run.data.tags
        if tags.get("harness.kind") != "trial":
            continue
        dst = tmp_path / run.info.run_id
        dst.mkdir(exist_ok=True)
        local = client.download_artifacts(run.info.run_id, "curves.csv", str(dst))
        rows = list(csv.DictReader(Path(local).read_text().splitlines()))
        out[tags["optimizer"]] = {
            "tags": tags,
            "train": np.array([float(r["loss"]) for r in rows if r["split"] == "train"]),
            "valid": np.array([float(r["loss"]) for r in rows if r["split"] == "valid"]),
            "valid_acc": np.array([float(r["accuracy"]) for r in rows if r["split"] == "valid"])}
    return out


def test_submissions_that_import_chex_train_like_their_builtin_twins(tmp_path):
    """A ``chex.dataclass`` state and an optax chain made in ``init_optimizer_state``: both train
    (exit 0), and each one's train and validation curves equal the built-in twin's at the same
    hyperparameters, seed and data order, within rtol 1e-5. Measured over the 60 steps: momentum
    bit-identical; AdamW's train loss within 2.1e-7 relative, its validation curve identical (float32
    rounding: optax adds the decay and scales by the step size in two operations, the built-in in one,
    and the submission's loss is AlgoPerf's masked sum over the batch divided by its count)."""
    (tmp_path / "chex_momentum.py").write_text(CHEX_MOMENTUM)
    (tmp_path / "optax_chain.py").write_text(OPTAX_CHAIN)
    _, r = _sweep(tmp_path, "chexsubs", [
        {"name": "momentum", "hparams": {"step_size": 0.05, "mass": 0.9}},
        {"name": "chex_momentum", "source": "algoperf:chex_momentum.py",
         "hparams": {"learning_rate": 0.05, "mass": 0.9}},
        {"name": "adamw", "hparams": {"step_size": 0.003, "b1": 0.9, "b2": 0.99, "weight_decay": 0.01}},
        {"name": "chain_adamw", "source": "algoperf:optax_chain.py",
         "hparams": {"learning_rate": 0.003, "one_minus_beta1": 0.1, "beta2": 0.99,
                     "weight_decay": 0.01}}])
    assert r.returncode == 0, r.stdout + r.stderr
    runs = _curves(tmp_path, "chexsubs")
    assert sorted(runs) == ["adamw", "chain_adamw", "chex_momentum", "momentum"]
    for mine, twin in (("chex_momentum", "momentum"), ("chain_adamw", "adamw")):
        a, b = runs[mine], runs[twin]
        assert a["tags"]["status"] == b["tags"]["status"] == "finished"
        assert a["tags"]["optimizer.api"] == "algoperf" and b["tags"].get("optimizer.api") != "algoperf"
        assert len(a["train"]) == len(b["train"]) == STEPS and len(a["valid"]) == len(b["valid"]) == 4
        assert a["valid"][0] == b["valid"][0]  # the same initial parameters
        np.testing.assert_allclose(a["train"], b["train"], rtol=1e-5, atol=0)
        np.testing.assert_allclose(a["valid"], b["valid"], rtol=1e-5, atol=0)
        np.testing.assert_array_equal(a["valid_acc"], b["valid_acc"])
        assert a["train"][-1] < 0.6 * a["train"][0]  # it trained


#: Submission files that cannot train, and the message (after ``source 'algoperf:FILE': ``) of the
#: one line that refuses each. ``{exe}`` is this Python.
BAD = {
    "missing_import.py": (
        "import chex_is_not_installed_here\n\nfrom algoperf import spec\n" + CHEX_MOMENTUM,
        "running missing_import.py raised ModuleNotFoundError: No module named "
        "'chex_is_not_installed_here' (line 1); install the package that provides "
        "'chex_is_not_installed_here' for {exe}, or put it on PYTHONPATH"),
    "syntax_error.py": (
        CHEX_MOMENTUM.replace("def data_selection(workload,", "def data_selection(workload,,"),
        "syntax_error.py line {line}: syntax error: invalid syntax"),
    "no_update_params.py": (
        CHEX_MOMENTUM.replace("def update_params(", "def update_parameters("),
        "no_update_params.py is not an AlgoPerf submission: it defines no update_params (AlgoPerf's "
        "JAX API needs get_batch_size, init_optimizer_state, update_params, data_selection)"),
    "update_params_none.py": (
        CHEX_MOMENTUM.replace("def update_params(", "def _update(") + "\nupdate_params = None\n",
        "AlgoPerf submission update_params_none.py defines no update_params (a submission defines "
        "get_batch_size, init_optimizer_state, update_params, data_selection)"),
    "old_signature.py": (
        CHEX_MOMENTUM.replace("current_param_container, current_params_types, model_state,\n",
                              "params, current_params_types, model_state,\n"),
        "AlgoPerf submission old_signature.py: update_params(workload, params, current_params_types, "
        "model_state, hyperparameters, batch, loss_type, optimizer_state, eval_results, global_step, "
        "rng, train_state) cannot take the arguments AlgoPerf's runner passes, update_params(workload=, "
        "current_param_container=, current_params_types=, model_state=, hyperparameters=, batch=, "
        "loss_type=, optimizer_state=, eval_results=, global_step=, rng=): missing a required argument: "
        "'params'"),
    # the import passes and the API is right, but update_params fails when called
    # (before: the store was created and every trial of it FAILED)
    "lazy_import.py": (
        CHEX_MOMENTUM.replace("    replicated = jax_sharding_utils.get_replicate_sharding()",
                              "    import optimizer_helpers_not_installed  # noqa: F401\n"
                              "    replicated = jax_sharding_utils.get_replicate_sharding()"),
        "its first update (on mlp · digits) raised ModuleNotFoundError: No module named "
        "'optimizer_helpers_not_installed'"),
    "exits.py": (
        "import sys\n" + CHEX_MOMENTUM + "\nsys.exit(3)\n",
        "running exits.py raised SystemExit: 3 (line {last})"),
    "raises.py": (
        CHEX_MOMENTUM + "\nraise RuntimeError('first line\\nsecond line')\n",
        "running raises.py raised RuntimeError: first line ... (line {last})"),
}


@pytest.mark.parametrize("filename", list(BAD))
def test_a_submission_that_cannot_train_is_refused_before_any_write(tmp_path, filename):
    """The bad submission is the second entry, beside a built-in: exit 2 and one line naming
    ``optimizers[1].source``, no traceback, no store (a dry run is refused the same way)."""
    text, message = BAD[filename]
    assert text != CHEX_MOMENTUM
    (tmp_path / filename).write_text(text)
    lines = text.splitlines()
    line = next(i for i, ln in enumerate(lines, 1) if ",," in ln) if ",," in text else 0
    expected = message.format(exe=sys.executable, line=line, last=len(lines))
    args = ("--dry-run",) if filename == "exits.py" else ()
    cfg, r = _sweep(tmp_path, "bad", [{"name": "adam", "hparams": {"step_size": 0.001}},
                                      {"name": "mine", "source": f"algoperf:{filename}",
                                       "hparams": {"learning_rate": 0.05, "mass": 0.9}}], *args)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    problems = [ln for ln in out.splitlines() if ln.startswith(f"{cfg}: ")]
    assert problems == [f"{cfg}: optimizers[1].source: source 'algoperf:{filename}': {expected}"], out
    assert "Traceback" not in out
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


#: Put first on ``sys.path`` (``sitecustomize``), this hides ``chex`` from a process: ``import chex``
#: raises ``ModuleNotFoundError: No module named 'chex'``, as in an environment without it.
NO_CHEX = textwrap.dedent('''
    import sys


    class _NoChex:
        def find_spec(self, name, path=None, target=None):
            if name == "chex" or name.startswith("chex."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None


    sys.meta_path.insert(0, _NoChex())
''')


def test_without_chex_a_chex_submission_is_refused_before_its_store_is_written(tmp_path, monkeypatch):
    """A sweep of a file optimizer, ``optax.contrib:muon`` and a submission that imports
    chex, in an environment without chex. Before, the store was written, the other trials trained
    and the submission's trial failed (exit 1); now the pre-flight refuses it: exit 2, one line."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_CHEX)
    (tmp_path / "chex_momentum.py").write_text(CHEX_MOMENTUM)
    (tmp_path / "my_sgd.py").write_text("from optimizers import sgd\n\n\ndef my_sgd(step_size):\n"
                                        "    return sgd(step_size)\n")
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    cfg, r = _sweep(tmp_path, "without-chex", [
        {"name": "my_sgd", "source": "my_sgd.py:my_sgd", "hparams": {"step_size": 0.1}},
        {"name": "optax_muon", "source": "optax.contrib:muon", "hparams": {"step_size": 0.01}},
        {"name": "chex_momentum", "source": "algoperf:chex_momentum.py",
         "hparams": {"learning_rate": 0.05, "mass": 0.9}}])
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    line = CHEX_MOMENTUM.splitlines().index("import chex") + 1
    assert [ln for ln in out.splitlines() if ln.startswith(f"{cfg}: ")] == [
        f"{cfg}: optimizers[2].source: source 'algoperf:chex_momentum.py': running chex_momentum.py "
        f"raised ModuleNotFoundError: No module named 'chex' (line {line}); install the package that "
        f"provides 'chex' for {sys.executable}, or put it on PYTHONPATH"], out
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def test_an_algoperf_checkout_that_cannot_import_leaves_the_stand_ins_in_place(tmp_path, monkeypatch):
    """An AlgoPerf checkout on ``PYTHONPATH`` (needed by submissions that import their neighbours as
    ``algorithms....``) whose ``algoperf.spec`` imports torch, not installed here: one warning, and
    the submission runs on the harness's stand-ins (a dry run: the pre-flight imports it)."""
    checkout = tmp_path / "checkout"
    (checkout / "algoperf").mkdir(parents=True)
    (checkout / "algoperf" / "spec.py").write_text("import torch_is_not_installed_here\n")
    (tmp_path / "chex_momentum.py").write_text(CHEX_MOMENTUM)
    paths = [str(checkout), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    _, r = _sweep(tmp_path, "checkout", [{"name": "chex_momentum", "source": "algoperf:chex_momentum.py",
                                          "hparams": {"learning_rate": 0.05, "mass": 0.9}}], "--dry-run")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    warned = [ln for ln in out.splitlines() if "UserWarning" in ln]
    assert len(warned) == 1 and warned[0].endswith(
        f"UserWarning: the algoperf package at {checkout / 'algoperf'} cannot be imported "
        "(ModuleNotFoundError: No module named 'torch_is_not_installed_here'); AlgoPerf submissions run "
        "with the harness's stand-ins (harness/train/algoperf)"), out


#: A submission written for 8x8 images: it reshapes every batch to (N, 8, 8, 1) before the model (an
#: MLP flattens it again), so it trains on ``digits`` and raises on ``mnist1d``'s 40 features.
IMAGES_ONLY = CHEX_MOMENTUM.replace(
    "    def loss_fn(p):\n",
    "    batch = {**batch, \"inputs\": batch[\"inputs\"].reshape((-1, 8, 8, 1))}\n\n"
    "    def loss_fn(p):\n")


def test_a_submission_that_breaks_on_one_dataset_only_is_refused_naming_it(tmp_path):
    """The pre-flight takes one real update per (submission, task), not only on the grid's first
    dataset: a submission that works on ``digits`` and raises on ``mnist1d``'s shapes is refused
    before any trial trains (exit 2, one line naming ``mnist1d``, no store). Before, only the first
    dataset was stepped: the store was written, the digits trials trained and mnist1d's failed."""
    assert IMAGES_ONLY != CHEX_MOMENTUM
    (tmp_path / "images_only.py").write_text(IMAGES_ONLY)
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "twodata", **BASE, "datasets": ["digits", "mnist1d"],
        "optimizers": [{"name": "adam", "hparams": {"step_size": 0.001}},
                       {"name": "mine", "source": "algoperf:images_only.py",
                        "hparams": {"learning_rate": 0.05, "mass": 0.9}}]}, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["COLUMNS"] = "200"
    r = subprocess.run([sys.executable, "-m", "harness", "sweep", str(cfg)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    problems = [ln for ln in out.splitlines() if ln.startswith(f"{cfg}: ")]
    assert len(problems) == 1, out
    assert problems[0].startswith(
        f"{cfg}: optimizers[1].source: source 'algoperf:images_only.py': its first update (on mlp · "
        f"mnist1d) raised TypeError: "), out
    assert "Traceback" not in out
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()
