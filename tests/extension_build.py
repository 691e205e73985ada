"""Build a throwaway extension against the fuel_kernel this test process imports.

The tests of the cimport API compile small modules (the examples/extension backend, probes against
patched headers) with `python setup.py build_ext --inplace` in a temp dir.  The child interpreter
gets this process's sys.path, so it builds against the same fuel_kernel whether that is an
in-place build, an editable install or an installed wheel.
"""
import os
import subprocess
import sys
from pathlib import Path

import fuel_kernel


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p or os.curdir) for p in sys.path)
    return env


def build_inplace(directory):
    """Run setup.py in `directory`; fail with the compiler's output if it does not build."""
    env = child_env()
    probe = subprocess.run([sys.executable, "-c", "import fuel_kernel; print(fuel_kernel.__file__)"],
                           cwd=directory, env=env, capture_output=True, text=True)
    assert probe.returncode == 0 and Path(probe.stdout.strip()) == Path(fuel_kernel.__file__), \
        f"the build would not see this fuel_kernel ({fuel_kernel.__file__}): {probe.stdout}{probe.stderr}"
    result = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=directory,
                            env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"building in {directory} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"


def import_from(directory, name):
    """Import module `name` from `directory` (and only from there)."""
    sys.path.insert(0, str(directory))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(directory))
