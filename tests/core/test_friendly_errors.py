"""Misspelled names and misplaced outputs get errors that say what was probably meant."""
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
    with pytest.raises(fk.DTypeError, match=r"did you mean 'f32'\? \(the dtypes: bool, .*f64\)"):
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
