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
