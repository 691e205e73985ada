"""ctypes mirrors of the abi.h structs and kernel signature, for tests that call kernels through
their capsule as a C caller would (no Python layer in between)."""
import ctypes

import fuel_kernel as fk

MAX_DIMS = 8


class Storage(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("nbytes", ctypes.c_size_t), ("backend", ctypes.c_int32),
                ("dtype", ctypes.c_int32), ("flags", ctypes.c_uint32), ("reserved", ctypes.c_uint32)]


class Layout(ctypes.Structure):
    _fields_ = [("ndim", ctypes.c_int32), ("reserved", ctypes.c_int32), ("offset", ctypes.c_int64),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("strides", ctypes.c_int64 * MAX_DIMS)]


KERNEL_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Storage), ctypes.c_int, ctypes.POINTER(Storage),
                             ctypes.c_int, ctypes.POINTER(Layout), ctypes.c_void_p)
ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

def kernel_function(op, dtypes):
    capsule = fk.bindings().lookup(op, dtypes).capsule()
    return KERNEL_FN(ctypes.pythonapi.PyCapsule_GetPointer(capsule, b"fuel_kernel.kernel"))


def storage_of(buffer, dtype, nbytes=None):
    return Storage(buffer.ctypes.data, buffer.nbytes if nbytes is None else nbytes, 0, int(dtype), 0, 0)


def layout(shape, strides, offset=0):
    result = Layout(len(shape), 0, offset)
    for d, (n, s) in enumerate(zip(shape, strides)):
        result.shape[d], result.strides[d] = n, s
    return result
