"""Kernels check the layouts a C caller hands them, with no Python layer in between.

A cimport user builds fk_storage / fk_layout by hand, so a kernel must refuse any layout that would
address memory outside its storage (or that it cannot run) with an error status, before writing.
These tests call kernels through their capsule with ctypes mirrors of the abi.h structs, on layouts
Kernel.__call__ could never produce from a NumPy array.
"""
import ctypes

import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel.errors import STATUS_ERRORS

from capi import MAX_DIMS, Layout, Storage, kernel_function, layout, storage_of

D = fk.DType
STATUS = {cls: code for code, cls in STATUS_ERRORS.items()}
OK, SHAPE, DTYPE = 0, STATUS[fk.ShapeError], STATUS[fk.DTypeError]

# (op, key dtypes, NumPy reference on float64 inputs); every input and the output are F32 except
# WHERE's condition, which the case builds as BOOL
KERNELS = {
    "add": (fk.OpKind.ADD, [D.F32] * 3, lambda a, b: a + b),
    "exp": (fk.OpKind.EXP, [D.F32] * 2, np.exp),
    "where": (fk.OpKind.WHERE, [D.BOOL, D.F32, D.F32, D.F32], lambda c, a, b: np.where(c, a, b)),
}


class Call:
    """One kernel call on fresh buffers of `size` elements per operand; layouts default to a
    contiguous vector of `n` elements in each."""

    def __init__(self, name, n=8, size=16):
        op, self.dtypes, self.reference = KERNELS[name]
        self.kernel = kernel_function(op, self.dtypes)
        rng = np.random.default_rng(7)
        self.buffers = [rng.random(size) < 0.5 if dt == D.BOOL else rng.standard_normal(size).astype(np.float32)
                        for dt in self.dtypes[:-1]]
        self.buffers.append(np.full(size, -7.0, np.float32))
        self.storages = [storage_of(buf, dt) for buf, dt in zip(self.buffers, self.dtypes)]
        self.layouts = [layout([n], [1]) for _ in self.dtypes]

    def run(self):
        n_in = len(self.dtypes) - 1
        storages = (Storage * len(self.storages))(*self.storages)
        layouts = (Layout * len(self.layouts))(*self.layouts)
        inputs = ctypes.cast(storages, ctypes.POINTER(Storage))
        outputs = ctypes.cast(ctypes.byref(storages, n_in * ctypes.sizeof(Storage)), ctypes.POINTER(Storage))
        return self.kernel(inputs, n_in, outputs, 1, layouts, None)

    def view(self, k):
        """Operand k's elements as its layout describes them (a NumPy view of its buffer)."""
        lay, buf = self.layouts[k], self.buffers[k]
        shape = tuple(lay.shape[d] for d in range(lay.ndim))
        strides = tuple(lay.strides[d] * buf.itemsize for d in range(lay.ndim))
        return np.lib.stride_tricks.as_strided(buf[lay.offset:], shape, strides)

    @property
    def output(self):
        return self.buffers[-1]


@pytest.mark.parametrize("name", KERNELS)
def test_contiguous_and_strided_layouts_in_bounds_run(name):
    for n, stride, offset in ((8, 1, 0), (8, 1, 8), (5, 3, 1), (4, -2, 7), (16, 1, 0)):
        call = Call(name, n=n, size=16)
        call.layouts = [layout([n], [stride], offset) for _ in call.dtypes]
        assert call.run() == OK
        inputs = [call.view(k).astype(np.float64) if call.dtypes[k] != D.BOOL else call.view(k)
                  for k in range(len(call.dtypes) - 1)]
        expected = call.reference(*inputs).astype(np.float32)
        np.testing.assert_allclose(call.view(len(call.dtypes) - 1), expected, rtol=1e-6)


@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize("operand", ["first input", "output"])
@pytest.mark.parametrize("fault", ["storage one element short", "negative offset", "offset past the end",
                                   "extent overflows int64", "negative extent", "too many dims",
                                   "shape differs from the output"])
def test_out_of_bounds_or_malformed_layouts_are_refused_before_writing(name, operand, fault):
    call = Call(name, n=8, size=16)
    k = 0 if operand == "first input" else len(call.dtypes) - 1
    if fault == "storage one element short":
        call.layouts = [layout([16], [1]) for _ in call.dtypes]
        call.storages[k].nbytes -= call.buffers[k].itemsize
    elif fault == "negative offset":
        call.layouts[k] = layout([8], [1], offset=-1)
    elif fault == "offset past the end":
        call.layouts[k] = layout([8], [1], offset=9)
    elif fault == "extent overflows int64":
        call.layouts = [layout([1 << 62, 4], [4, 1]) for _ in call.dtypes]
    elif fault == "negative extent":
        call.layouts[k] = layout([-8], [1])
    elif fault == "too many dims":
        call.layouts[k].ndim = MAX_DIMS + 1
    else:
        call.layouts[k] = layout([2, 4], [4, 1]) if k else layout([9], [1])
    before = call.output.copy()
    assert call.run() == SHAPE
    np.testing.assert_array_equal(call.output, before)


@pytest.mark.parametrize("name", KERNELS)
def test_an_unknown_dtype_code_is_refused(name):
    call = Call(name)
    call.storages[-1].dtype = 99
    before = call.output.copy()
    assert call.run() == DTYPE
    np.testing.assert_array_equal(call.output, before)
