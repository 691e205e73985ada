"""Shared fixtures, and one import name for the helper modules.

Test files live in folders that mirror the package (core/, cpu/<family>/, graph/, properties/);
the helper modules (support, oracles, fuzzing, abi_signature, extension_build) stay here at the
top of tests/ and are imported by their plain names (`import oracles`, `from support import ...`)
from every folder. Test folders have no __init__.py, so every test file's basename is unique."""
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))



def pytest_configure(config):
    """The suite never writes the user's route cache: every test (and every subprocess it starts)
    uses a temporary cache folder unless FUEL_KERNEL_CACHE_DIR is set already.  The route picker's
    machine constants are measured here once, before any pytest-xdist worker starts (the workers
    inherit the folder and read them): measured inside a worker, the copy's bandwidth shared the
    memory with the other workers' tests, and a 3x low figure once turned a picker test's choice."""
    if not os.environ.get("FUEL_KERNEL_CACHE_DIR"):
        os.environ["FUEL_KERNEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="fuel_kernel-test-cache-")
    if not hasattr(config, "workerinput"):
        from fuel_kernel import route
        route.machine_constants()


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)
