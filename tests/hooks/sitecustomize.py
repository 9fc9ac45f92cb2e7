"""Installs the test suite's ``HARNESS_TEST_*`` hooks (:mod:`harness_test_hooks`) in a process the
tests start with this folder on its ``PYTHONPATH``; nothing without such a variable."""

import os

if any(k.startswith("HARNESS_TEST_") for k in os.environ):
    import harness_test_hooks

    harness_test_hooks.install()
