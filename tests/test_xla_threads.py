"""XLA's CPU pool is one thread under the harness (harness.core.xla_threads): the CPU-time figure the
modeled clock ranks on is then the step's work, not the pool's spinning, which load moves."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.config.environment import EnvSettingError, check_environment
from harness.core.xla_threads import pin, threads_setting

PROBE = ("import harness, jax, jax.numpy as jnp; from harness.core.xla_threads import pool_threads; "
         "x = jnp.ones((256, 256)); (x @ x).block_until_ready(); "
         "import os; print(os.environ.get('NPROC'), pool_threads())")


def test_the_setting_read():
    assert threads_setting({}) == 1
    assert threads_setting({"HARNESS_XLA_CPU_THREADS": " ALL "}) is None
    assert threads_setting({"HARNESS_XLA_CPU_THREADS": "3"}) == 3
    for bad in ("0", "-2", "two", "1.5"):
        with pytest.raises(ValueError, match="neither a positive number of threads"):
            threads_setting({"HARNESS_XLA_CPU_THREADS": bad})


def test_pin_sets_nproc_for_xla():
    env = {"JAX_PLATFORMS": "cpu"}
    assert pin(env) == 1 and env["NPROC"] == "1"
    env = {"JAX_PLATFORMS": "cpu", "HARNESS_XLA_CPU_THREADS": "2", "NPROC": "8"}
    assert pin(env) == 2 and env["NPROC"] == "2"
    env = {"JAX_PLATFORMS": "cpu", "HARNESS_XLA_CPU_THREADS": "all", "NPROC": "8"}
    assert pin(env) is None and env["NPROC"] == "8"  # the user's own value is left alone
    env = {"JAX_PLATFORMS": "cpu", "HARNESS_XLA_CPU_THREADS": "x"}
    assert pin(env) is None and "NPROC" not in env  # refused by check_environment, not guessed


def test_a_bad_value_is_refused_before_a_sweep():
    with pytest.raises(EnvSettingError) as e:
        check_environment({"HARNESS_XLA_CPU_THREADS": "many"})
    assert e.value.errors == ["HARNESS_XLA_CPU_THREADS='many' is neither a positive number of threads "
                              "(default 1) nor 'all' (XLA's own pool, one thread per core)"]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="XLA's own pool is one thread on one core")
def test_importing_the_harness_leaves_xla_one_thread():
    env = {k: v for k, v in os.environ.items() if k not in ("NPROC", "HARNESS_XLA_CPU_THREADS")}
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == ["1", "1"]  # NPROC=1 set by `import harness`: one tf_XLAEigen pool thread
    env["HARNESS_XLA_CPU_THREADS"] = "all"
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out[0] == "None" and int(out[1]) == os.cpu_count()  # XLA's default: a thread per core


JAX_FIRST = """
import sys, jax, jax.numpy as jnp
(jnp.ones((64, 64)) @ jnp.ones((64, 64))).block_until_ready()  # XLA's client starts: its own pool
import harness, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
harness.sweep(cfg, tracking_uri=sys.argv[2])
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="XLA's own pool is one thread on one core")
def test_jax_before_the_harness_is_said_and_recorded(tmp_path, write_sweep):
    """A notebook that computed with JAX before ``import harness`` keeps XLA's own pool: the sweep says
    so in one line and every trial records the pool it ran on (before: silently, nothing recorded)."""
    from mlflow import MlflowClient

    from harness.core.names import TAG_XLA_CPU_THREADS
    from harness.tracking.provenance import environment_tags

    assert environment_tags()[TAG_XLA_CPU_THREADS] == "1"  # this process imported harness first
    cfg = write_sweep(optimizers=[{"name": "sgd", "hparams": {"step_size": 0.1}}], seeds=1)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    env = {k: v for k, v in os.environ.items() if k not in ("NPROC", "HARNESS_XLA_CPU_THREADS")}
    env["JAX_PLATFORMS"] = "cpu"
    env["COLUMNS"] = "300"
    out = subprocess.run([sys.executable, "-c", JAX_FIRST, str(cfg), uri], env=env, capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    n = os.cpu_count()
    warning = [ln for ln in out.stdout.splitlines() if ln.startswith("warning: XLA's CPU pool")]
    assert warning == [f"warning: XLA's CPU pool has {n} threads, not the 1 HARNESS_XLA_CPU_THREADS asks "
                       f"for: JAX computed before `import harness`, so CPU step times here move with the "
                       f"machine's load and the trials record xla_cpu_threads={n}; import harness before "
                       f"jax (restart the kernel), or set HARNESS_XLA_CPU_THREADS=all to mean it"]
    runs = MlflowClient(uri).search_runs(
        [e.experiment_id for e in MlflowClient(uri).search_experiments()], "tags.`harness.kind` = 'trial'")
    assert len(runs) == 1 and runs[0].data.tags[TAG_XLA_CPU_THREADS] == str(n)


BLAS_PROBE = ("import harness, jax.numpy as jnp; jnp.linalg.eigh(jnp.eye(64) + 1.0)[0].block_until_ready(); "
              "import threadpoolctl; print(sorted({i['num_threads'] for i in threadpoolctl.threadpool_info() "
              "if i['internal_api'] == 'openblas'}))")


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenBLAS's own pool is one thread on one core")
def test_importing_the_harness_leaves_the_lapack_under_eigh_one_thread():
    """``jnp.linalg.eigh`` on a CPU runs OpenBLAS's LAPACK, whose pool (a thread per core) spins while
    it waits: a 128 x 128 eigh read 7-16 ms of CPU time on 2 loaded cores, 0.9 ms on one thread, and
    a reviewer's soap figure rose 2.7x beside burners. ``import harness`` sizes it as XLA's pool (the
    OpenBLAS libraries jaxlib loaded, read by threadpoolctl); a value the user set is kept."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("NPROC", "HARNESS_XLA_CPU_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                        "MKL_NUM_THREADS")}
    env["JAX_PLATFORMS"] = "cpu"

    def pools(**extra) -> str:
        return subprocess.run([sys.executable, "-c", BLAS_PROBE], env={**env, **extra}, capture_output=True,
                              text=True, timeout=120, check=True).stdout.strip()

    assert pools() == "[1]"
    assert pools(HARNESS_XLA_CPU_THREADS="all") == f"[{os.cpu_count()}]"
    assert pools(OPENBLAS_NUM_THREADS="2") == "[2]"  # the user's own value stays
