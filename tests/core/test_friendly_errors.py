"""Misspelled names, misplaced outputs and an unbuilt source tree get errors that say what was
probably meant or what to do."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fuel_kernel as fk


@pytest.mark.parametrize("text, suggestion", [("ad", "add"), ("gelu_er", "gelu_erf"), ("softmax", "softmax_last_dim"),
                                              ("sigmod", "sigmoid")])
def test_misspelled_op_name_suggests_the_closest(text, suggestion):
    with pytest.raises(fk.UnknownOpError, match=f"did you mean '{suggestion}'"):
        fk.OpKind.parse(text)


def test_unrelated_op_name_lists_no_guess():
    with pytest.raises(fk.UnknownOpError, match="expected an OpKind or one of its names") as info:
        fk.OpKind.parse("zzzzzz")
    assert "did you mean" not in str(info.value)


def test_misspelled_member_attribute_suggests_the_closest():
    with pytest.raises(AttributeError, match="did you mean 'ADD'"):
        fk.OpKind.AD
    with pytest.raises(AttributeError, match="did you mean 'F32'"):
        fk.DType.F33
    assert not hasattr(fk.OpKind, "AD") and hasattr(fk.OpKind, "ADD")


def test_misspelled_dtype_suggests_and_lists():
    with pytest.raises(fk.DTypeError, match=r"did you mean 'f32'\? \(the dtypes: bool, .*f64, f8e4m3, f8e5m2\)"):
        fk.DType.parse("f33")


def test_output_passed_positionally_hints_out():
    kernel = fk.bindings().lookup(fk.OpKind.ADD, [fk.DType.F32] * 3, fk.Backend.CPU)
    a = np.ones(3, np.float32)
    out = np.zeros(3, np.float32)
    with pytest.raises(fk.OperandCountError, match="an output goes in out="):
        kernel(a, a, out)
    assert not out.any()


def test_public_names_are_listed_in_all():
    assert set(fk.__all__) <= set(dir(fk))
    public = {n for n in dir(fk) if not n.startswith("_") and n not in ("cpu", "errors", "graph", "ops", "records",
                                                                         "route", "spec", "types", "coverage", "os")}
    assert public - set(fk.__all__) == set(), public - set(fk.__all__)


def test_an_unbuilt_source_tree_says_how_to_build_or_leave_it(tmp_path):
    source = tmp_path / "fuel_kernel"
    source.mkdir()
    shutil.copy(Path(fk.__file__), source / "__init__.py")     # a tree without compiled modules
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", "import fuel_kernel"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: fuel_kernel is imported from ") and str(source) in last, result.stderr
    assert "build_ext --inplace" in last and "cd elsewhere" in last


def test_an_output_among_dispatch_inputs_hints_outputs():
    a = np.ones(3, np.float32)
    out = np.zeros(3, np.float32)
    with pytest.raises(fk.NoKernelError, match=r"pass it as outputs= \(dispatch\) or out="):
        fk.dispatch("add", [a, a, out])
    assert not out.any()


def test_backend_names_are_accepted_where_a_backend_is():
    from fuel_kernel.graph import Graph
    assert Graph(target_backend="cpu").target_backend == fk.Backend.CPU
    a = np.arange(3, dtype=np.float32)
    assert (fk.dispatch("add", [a, a], backend="cpu") == 2 * a).all()
    with pytest.raises(fk.BackendError):
        Graph(target_backend="cpux")
